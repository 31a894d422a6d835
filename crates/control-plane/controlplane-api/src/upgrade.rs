//! Upgrades between OpenStack releases, as pure logic (no Kubernetes, no I/O): the graph of
//! adjacent releases, the plan of an upgrade (which steps, in which phase, for which service)
//! and the state machine that turns the persisted [`UpgradeStatus`] and the observed [`Facts`]
//! into the next [`Action`] and the new status.
//!
//! The machine never remembers anything outside the status it returns: an operator killed at
//! any point rebuilds it from `status.upgrade` and goes on. A step is done once it is in
//! `completedSteps`; a step that was started but not recorded as done is asked for again, so
//! every step's executor must be idempotent (the migration commands are: each checks the
//! schema version it finds). A failed step stops the upgrade with `Degraded` and nothing after
//! it runs until the retry annotation changes.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::cluster::ServiceName;

/// The upgrade graph: each release and the one release it may be upgraded to. Upgrades go one
/// release at a time (the services' migrations are written and tested for adjacent releases
/// only); going back is never an edge (contract migrations drop what the old code needs).
pub const UPGRADE_EDGES: &[(&str, &str)] = &[("2025.2", "2026.1")];

/// The order services roll in: each depends only on services before it (every API validates
/// tokens with Keystone; Nova calls Placement, Glance and Neutron; Horizon fronts them all).
pub const ROLL_ORDER: [ServiceName; 7] = [
    ServiceName::Keystone,
    ServiceName::Placement,
    ServiceName::Glance,
    ServiceName::Neutron,
    ServiceName::Nova,
    ServiceName::Cinder,
    ServiceName::Horizon,
];

/// The releases `current` may move to: itself and its successors in [`UPGRADE_EDGES`].
pub fn allowed_targets(current: &str) -> Vec<&'static str> {
    allowed_in(crate::RELEASES, UPGRADE_EDGES, current)
}

/// Whether a cluster running `current` may be asked for `desired`; the error names the allowed
/// targets and says why the move is refused (a skip, a downgrade, an unknown release).
pub fn check_transition(current: &str, desired: &str) -> Result<(), String> {
    check_in(crate::RELEASES, UPGRADE_EDGES, current, desired)
}

fn allowed_in(
    releases: &[&'static str],
    edges: &[(&'static str, &'static str)],
    current: &str,
) -> Vec<&'static str> {
    let mut out: Vec<&'static str> = releases.iter().copied().filter(|r| *r == current).collect();
    out.extend(
        edges
            .iter()
            .filter(|(from, _)| *from == current)
            .map(|(_, to)| *to),
    );
    out
}

fn check_in(
    releases: &[&'static str],
    edges: &[(&'static str, &'static str)],
    current: &str,
    desired: &str,
) -> Result<(), String> {
    let allowed = allowed_in(releases, edges, current);
    if allowed.contains(&desired) {
        return Ok(());
    }
    // Release names sort by date (YYYY.N), so a smaller name is an older release.
    let why = if !releases.contains(&desired) {
        format!("release {desired:?} is not supported")
    } else if desired < current {
        format!(
            "going back from {current} to {desired} is not supported (contract migrations are not reversible)"
        )
    } else {
        format!(
            "upgrading from {current} to {desired} skips a release; upgrades go one release at a time"
        )
    };
    let targets = if allowed.is_empty() {
        format!("{current} is not a release this operator knows")
    } else {
        format!("allowed from {current}: {}", allowed.join(", "))
    };
    Err(format!("{why}; {targets}"))
}

/// The phases of an upgrade, in order.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, schemars::JsonSchema,
)]
pub enum Phase {
    /// External services and every service Ready; the database backup hook, if configured.
    Preflight,
    /// The new release's configuration rendered next to the running one.
    Prepare,
    /// Expand (additive) schema migrations with the new release's code while the old serves.
    Migrate,
    /// The control-plane services restarted on the new release, one by one, in [`ROLL_ORDER`].
    RollControlPlane,
    /// Contract migrations and online data migrations, once no old code runs.
    PostMigrate,
    /// The data-plane-facing parts (compute agents and the like).
    RollDataPlane,
    /// Every API answers and reports the new release.
    Verify,
    /// Done: `status.currentRelease` is the new release.
    Complete,
}

/// What one step of an upgrade does.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, schemars::JsonSchema,
)]
pub enum StepKind {
    /// Every external service the cluster names is Ready (checked from facts).
    ExternalServicesReady,
    /// Every service of the cluster is Ready on the old release (checked from facts).
    ServicesReady,
    /// The user's database backup hook ran to success.
    Backup,
    /// The service's configuration for the new release is rendered.
    RenderConfig,
    /// Additive schema migration (Keystone `db_sync --expand`, Glance `db expand`, Neutron
    /// `upgrade --expand`).
    Expand,
    /// Data migration between expanded columns while the old release serves (Keystone
    /// `db_sync --migrate`, Glance `db migrate`).
    Migrate,
    /// Nova's API database schema sync (`nova-manage api_db sync`), additive, before its cell
    /// databases' [`StepKind::DbSync`].
    ApiDbSync,
    /// The service's schema sync, additive by the project's policy (Placement and Cinder `db
    /// sync`; Nova's `db sync` of its cell databases, cell0 included).
    DbSync,
    /// The service restarted on the new release and Ready again.
    Roll,
    /// Contractive migration, once no old code runs (Keystone `db_sync --contract`, Glance `db
    /// contract`, Neutron `upgrade --contract`).
    Contract,
    /// Online data migrations (Placement, Nova, Cinder `online_data_migrations`).
    OnlineDataMigrations,
    /// Rolling the data-plane-facing parts: none are deployed yet, so this step is an explicit
    /// no-op recorded as done.
    DataPlane,
    /// The service's API answers and reports the new release.
    VerifyApi,
}

impl StepKind {
    /// Kebab-case name, used in step names and Job names.
    pub fn as_str(self) -> &'static str {
        match self {
            StepKind::ExternalServicesReady => "external-services-ready",
            StepKind::ServicesReady => "services-ready",
            StepKind::Backup => "backup",
            StepKind::RenderConfig => "render-config",
            StepKind::Expand => "expand",
            StepKind::Migrate => "migrate",
            StepKind::ApiDbSync => "api-db-sync",
            StepKind::DbSync => "db-sync",
            StepKind::Roll => "roll",
            StepKind::Contract => "contract",
            StepKind::OnlineDataMigrations => "online-data-migrations",
            StepKind::DataPlane => "data-plane",
            StepKind::VerifyApi => "verify-api",
        }
    }

    /// Whether the machine decides the step itself from [`Facts`] (no executor runs it).
    pub fn checked_from_facts(self) -> bool {
        matches!(
            self,
            StepKind::ExternalServicesReady | StepKind::ServicesReady | StepKind::DataPlane
        )
    }
}

/// One step of an upgrade plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Step {
    /// The phase it belongs to.
    pub phase: Phase,
    /// What it does.
    pub kind: StepKind,
    /// The service it acts on (none for cluster-wide steps).
    pub service: Option<ServiceName>,
}

impl Step {
    /// Stable name, e.g. `Migrate/keystone/expand`: the key in `completedSteps`.
    pub fn name(&self) -> String {
        match self.service {
            Some(s) => format!("{:?}/{}/{}", self.phase, s.as_str(), self.kind.as_str()),
            None => format!("{:?}/{}", self.phase, self.kind.as_str()),
        }
    }

    /// The service's management command for a migration step (arguments after the program's
    /// `--config-file`), or `None` when the step runs no such command.
    pub fn manage_command(&self) -> Option<(&'static str, &'static [&'static str])> {
        let svc = self.service?;
        migration_commands(svc)
            .iter()
            .find(|(_, k, _, _)| *k == self.kind)
            .map(|(_, _, prog, args)| (*prog, *args))
    }
}

type Migration = (Phase, StepKind, &'static str, &'static [&'static str]);

/// Each service's migration steps and commands, from its upgrade documentation: Keystone and
/// Glance have expand/migrate/contract (Glance's "rolling upgrades": expand and migrate with the
/// new code while the old serves, contract once every node runs the new release); Neutron
/// expand (online, additive) and contract (after every server runs the new release); Placement
/// and Cinder an additive `db sync` before the roll and online data migrations after it; Nova
/// the same, with its API database first (`api_db sync`, then `db sync` of the cell databases,
/// which also syncs cell0 once mapped) and `db online_data_migrations` once no old service
/// runs; Horizon has no database. Each service's commands run with its configuration files in
/// front of these arguments (`--config-file` for each; Neutron's are `neutron.conf` and the ML2
/// plugin's `ml2_conf.ini`). Per service, a step kind appears at most once.
pub fn migration_commands(svc: ServiceName) -> &'static [Migration] {
    match svc {
        ServiceName::Keystone => &[
            (
                Phase::Migrate,
                StepKind::Expand,
                "keystone-manage",
                &["db_sync", "--expand"],
            ),
            (
                Phase::Migrate,
                StepKind::Migrate,
                "keystone-manage",
                &["db_sync", "--migrate"],
            ),
            (
                Phase::PostMigrate,
                StepKind::Contract,
                "keystone-manage",
                &["db_sync", "--contract"],
            ),
        ],
        ServiceName::Placement => &[
            (
                Phase::Migrate,
                StepKind::DbSync,
                "placement-manage",
                &["db", "sync"],
            ),
            (
                Phase::PostMigrate,
                StepKind::OnlineDataMigrations,
                "placement-manage",
                &["db", "online_data_migrations"],
            ),
        ],
        ServiceName::Glance => &[
            (
                Phase::Migrate,
                StepKind::Expand,
                "glance-manage",
                &["db", "expand"],
            ),
            (
                Phase::Migrate,
                StepKind::Migrate,
                "glance-manage",
                &["db", "migrate"],
            ),
            (
                Phase::PostMigrate,
                StepKind::Contract,
                "glance-manage",
                &["db", "contract"],
            ),
        ],
        ServiceName::Neutron => &[
            (
                Phase::Migrate,
                StepKind::Expand,
                "neutron-db-manage",
                &["upgrade", "--expand"],
            ),
            (
                Phase::PostMigrate,
                StepKind::Contract,
                "neutron-db-manage",
                &["upgrade", "--contract"],
            ),
        ],
        ServiceName::Nova => &[
            (
                Phase::Migrate,
                StepKind::ApiDbSync,
                "nova-manage",
                &["api_db", "sync"],
            ),
            (
                Phase::Migrate,
                StepKind::DbSync,
                "nova-manage",
                &["db", "sync"],
            ),
            (
                Phase::PostMigrate,
                StepKind::OnlineDataMigrations,
                "nova-manage",
                &["db", "online_data_migrations"],
            ),
        ],
        ServiceName::Cinder => &[
            (
                Phase::Migrate,
                StepKind::DbSync,
                "cinder-manage",
                &["db", "sync"],
            ),
            (
                Phase::PostMigrate,
                StepKind::OnlineDataMigrations,
                "cinder-manage",
                &["db", "online_data_migrations"],
            ),
        ],
        ServiceName::Horizon => &[],
    }
}

/// The whole plan for a cluster running `services` (in any order), in execution order: the
/// preflight checks (and the backup when `backup` is configured), then per phase the services
/// in [`ROLL_ORDER`].
pub fn plan(services: &[ServiceName], backup: bool) -> Vec<Step> {
    let ordered: Vec<ServiceName> = ROLL_ORDER
        .iter()
        .copied()
        .filter(|s| services.contains(s))
        .collect();
    let cluster = |phase, kind| Step {
        phase,
        kind,
        service: None,
    };
    let mut out = vec![
        cluster(Phase::Preflight, StepKind::ExternalServicesReady),
        cluster(Phase::Preflight, StepKind::ServicesReady),
    ];
    if backup {
        out.push(cluster(Phase::Preflight, StepKind::Backup));
    }
    let per = |phase: Phase, kind: StepKind, s: ServiceName| Step {
        phase,
        kind,
        service: Some(s),
    };
    out.extend(
        ordered
            .iter()
            .map(|s| per(Phase::Prepare, StepKind::RenderConfig, *s)),
    );
    for phase in [Phase::Migrate, Phase::PostMigrate] {
        for s in &ordered {
            out.extend(
                migration_commands(*s)
                    .iter()
                    .filter(|(p, _, _, _)| *p == phase)
                    .map(|(_, k, _, _)| per(phase, *k, *s)),
            );
        }
        if phase == Phase::Migrate {
            out.extend(
                ordered
                    .iter()
                    .map(|s| per(Phase::RollControlPlane, StepKind::Roll, *s)),
            );
        }
    }
    out.push(cluster(Phase::RollDataPlane, StepKind::DataPlane));
    out.extend(
        ordered
            .iter()
            .map(|s| per(Phase::Verify, StepKind::VerifyApi, *s)),
    );
    out
}

/// How the cluster's upgrades run (`spec.upgrade`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UpgradePolicy {
    /// A database backup run in the preflight phase, before any migration; the upgrade waits
    /// for it to succeed and stops (`Degraded`) if it fails.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup: Option<BackupHook>,
}

/// The database backup hook: a Job of `image` running `command`, owned by the cluster, with
/// `UPGRADE_FROM`, `UPGRADE_TO` and `DATABASE_SERVICE` (the name of the cluster's database
/// `OpenStackExternalService`, whose endpoints and credentials Secret the hook uses) in its
/// environment.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BackupHook {
    /// Container image, e.g. one with `mariadb-dump` and the backup target's client.
    #[schemars(length(min = 1, max = 512))]
    pub image: String,
    /// Command and arguments.
    #[schemars(length(min = 1, max = 64))]
    pub command: Vec<String>,
}

/// The persisted state of an upgrade (`status.upgrade` of an `OpenStackCluster`): everything
/// the machine needs to resume.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UpgradeStatus {
    /// The release upgraded from.
    pub from_release: String,
    /// The release upgraded to.
    pub to_release: String,
    /// The current phase (`Complete` once done).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<Phase>,
    /// The current step inside the phase, e.g. `Migrate/keystone/expand`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<String>,
    /// When the upgrade started (RFC 3339).
    pub started_at: String,
    /// When the current phase started (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase_started_at: Option<String>,
    /// When the current step started (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_started_at: Option<String>,
    /// When the upgrade completed (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_at: Option<String>,
    /// The steps done, in order; never run again for this upgrade.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub completed_steps: Vec<String>,
    /// The step that failed; the upgrade stops (`Degraded`) until a retry is asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_step: Option<String>,
    /// The last error of a step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// The value of the retry annotation the last retry answered (a new value retries once).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retried_for: Option<String>,
}

impl UpgradeStatus {
    /// Whether the upgrade is finished.
    pub fn complete(&self) -> bool {
        self.phase == Some(Phase::Complete)
    }

    /// Whether `svc` already runs the new release (its roll step is done), so its child
    /// object gets `to_release`; the others keep `from_release` until their turn.
    pub fn rolled(&self, svc: ServiceName) -> bool {
        self.complete()
            || self.completed_steps.contains(
                &Step {
                    phase: Phase::RollControlPlane,
                    kind: StepKind::Roll,
                    service: Some(svc),
                }
                .name(),
            )
    }

    /// The release service `svc` must run now.
    pub fn release_of(&self, svc: ServiceName) -> &str {
        if self.rolled(svc) {
            &self.to_release
        } else {
            &self.from_release
        }
    }
}

/// What an executor observed about a step it was asked to run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Started, not finished.
    Running,
    /// Finished successfully.
    Succeeded,
    /// Finished with this error.
    Failed(String),
}

/// What the machine is told each time it runs.
#[derive(Clone, Debug, Default)]
pub struct Facts {
    /// `spec.release`.
    pub desired: String,
    /// `spec.services`.
    pub services: Vec<ServiceName>,
    /// The external services that are not Ready, with why (empty: all Ready).
    pub external_not_ready: Vec<String>,
    /// The services that are not Ready, with why (empty: all Ready).
    pub services_not_ready: Vec<String>,
    /// Whether a database backup hook is configured.
    pub backup_configured: bool,
    /// What the executor observed of steps, by step name, for the current attempt (an
    /// executor names its attempts after `retriedFor`, so a retry starts a new one instead of
    /// finding the failed one). A step absent here was not started, or its executor lost track
    /// of it: the machine asks for it again.
    pub outcomes: BTreeMap<String, Outcome>,
    /// The value of the retry annotation, if set.
    pub retry: Option<String>,
    /// Now (RFC 3339), for the start times.
    pub now: String,
}

/// What the caller does next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Nothing: the cluster runs the release it asks for.
    Steady,
    /// The spec asks for a release it may not move to; the message names the allowed targets.
    /// The upgrade status (if one runs) is kept as it is.
    Refuse(String),
    /// A preflight condition is not met; nothing was changed and the check runs again.
    Wait(String),
    /// Run this step (or keep waiting for it): the executor starts it unless it runs already.
    Run(Step),
    /// The upgrade stopped on a failed step; nothing further runs.
    Degraded(String),
    /// The upgrade finished in this pass.
    Completed,
}

/// The machine's answer: the new `status.currentRelease`, `status.upgrade` and the action.
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    /// The release the cluster runs (`status.currentRelease`).
    pub current_release: Option<String>,
    /// The upgrade's state (`status.upgrade`).
    pub upgrade: Option<UpgradeStatus>,
    /// What to do.
    pub action: Action,
}

/// What a stopped upgrade's message tells the user to do.
const RETRY_HINT: &str =
    "fix the cause, then set the annotation controlplane.sunet.se/retry-upgrade to a new value";

/// The next action and the new status, from the persisted status and the observed facts.
pub fn decide(current: Option<&str>, upgrade: Option<&UpgradeStatus>, facts: &Facts) -> Decision {
    let desired = facts.desired.as_str();
    let keep = |action| Decision {
        current_release: current.map(str::to_string),
        upgrade: upgrade.cloned(),
        action,
    };
    // A finished upgrade is history: only a new target starts a new one.
    let running = upgrade.filter(|u| !u.complete());
    let mut u = match (current, running) {
        // A first deployment runs what it asks for (the release itself is validated elsewhere).
        (None, None) => {
            return Decision {
                current_release: Some(desired.to_string()),
                upgrade: None,
                action: Action::Steady,
            };
        }
        (Some(c), None) if c == desired => return keep(Action::Steady),
        (Some(c), None) => {
            if let Err(e) = check_transition(c, desired) {
                return keep(Action::Refuse(format!("spec.release: {e}")));
            }
            UpgradeStatus {
                from_release: c.to_string(),
                to_release: desired.to_string(),
                started_at: facts.now.clone(),
                ..UpgradeStatus::default()
            }
        }
        (_, Some(u)) => {
            if desired != u.to_release {
                let not_begun = u.phase.is_none_or(|p| p <= Phase::Prepare)
                    && u.failed_step.is_none()
                    && !u.completed_steps.iter().any(|s| s.starts_with("Migrate/"));
                if desired == u.from_release && not_begun {
                    // Nothing changed in the databases yet: going back is abandoning.
                    return Decision {
                        current_release: Some(u.from_release.clone()),
                        upgrade: None,
                        action: Action::Steady,
                    };
                }
                return keep(Action::Refuse(format!(
                    "spec.release: the upgrade from {} to {} is in phase {:?}; spec.release must stay {} until it completes (allowed: {})",
                    u.from_release,
                    u.to_release,
                    u.phase.unwrap_or(Phase::Preflight),
                    u.to_release,
                    u.to_release
                )));
            }
            u.clone()
        }
    };
    // The step a retry restarts in this pass: the outcome the executor reports for it is the
    // failed attempt's, so it is asked for again instead of read.
    let mut restarted = None;
    if let Some(failed) = u.failed_step.clone() {
        match &facts.retry {
            Some(r) if u.retried_for.as_deref() != Some(r.as_str()) => {
                u.retried_for = Some(r.clone());
                u.failed_step = None;
                restarted = Some(failed);
            }
            _ => {
                return Decision {
                    current_release: current.map(str::to_string),
                    action: Action::Degraded(format!(
                        "upgrade {} -> {} stopped at {failed}: {}; {RETRY_HINT}",
                        u.from_release,
                        u.to_release,
                        u.last_error.as_deref().unwrap_or("failed")
                    )),
                    upgrade: Some(u),
                };
            }
        }
    }
    let steps = plan(&facts.services, facts.backup_configured);
    let retried = u.retried_for.clone();
    for step in steps {
        let name = step.name();
        if u.completed_steps.contains(&name) {
            continue;
        }
        if u.phase != Some(step.phase) {
            u.phase = Some(step.phase);
            u.phase_started_at = Some(facts.now.clone());
        }
        if u.step.as_deref() != Some(name.as_str()) {
            u.step = Some(name.clone());
            u.step_started_at = Some(facts.now.clone());
        }
        let outcome = match step.kind {
            StepKind::ExternalServicesReady if !facts.external_not_ready.is_empty() => {
                return wait(current, u, &facts.external_not_ready, "external services");
            }
            StepKind::ServicesReady if !facts.services_not_ready.is_empty() => {
                return wait(current, u, &facts.services_not_ready, "services");
            }
            k if k.checked_from_facts() => Outcome::Succeeded,
            _ if restarted.as_deref() == Some(name.as_str()) => Outcome::Running,
            _ => facts
                .outcomes
                .get(&name)
                .cloned()
                .unwrap_or(Outcome::Running),
        };
        match outcome {
            Outcome::Succeeded => {
                u.completed_steps.push(name);
                u.last_error = None;
            }
            Outcome::Failed(e) => {
                u.failed_step = Some(name.clone());
                u.last_error = Some(e.clone());
                return Decision {
                    current_release: current.map(str::to_string),
                    action: Action::Degraded(format!(
                        "upgrade {} -> {} failed at {name}: {e}; {RETRY_HINT}",
                        u.from_release, u.to_release
                    )),
                    upgrade: Some(u),
                };
            }
            Outcome::Running => {
                return Decision {
                    current_release: current.map(str::to_string),
                    upgrade: Some(u),
                    action: Action::Run(step),
                };
            }
        }
    }
    u.phase = Some(Phase::Complete);
    u.phase_started_at = Some(facts.now.clone());
    u.step = None;
    u.step_started_at = None;
    u.completed_at = Some(facts.now.clone());
    u.retried_for = retried;
    Decision {
        current_release: Some(u.to_release.clone()),
        upgrade: Some(u),
        action: Action::Completed,
    }
}

fn wait(current: Option<&str>, u: UpgradeStatus, missing: &[String], what: &str) -> Decision {
    Decision {
        current_release: current.map(str::to_string),
        action: Action::Wait(format!(
            "upgrade {} -> {} preflight: {what} not Ready: {}",
            u.from_release,
            u.to_release,
            missing.join("; ")
        )),
        upgrade: Some(u),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SERVICES: [ServiceName; 2] = [ServiceName::Placement, ServiceName::Keystone];

    fn facts(desired: &str) -> Facts {
        Facts {
            desired: desired.into(),
            services: SERVICES.to_vec(),
            now: "2026-12-01T17:00:00Z".into(),
            ..Facts::default()
        }
    }

    /// The steps an executor is asked to run, in order, for the two-service cluster.
    fn executed(backup: bool) -> Vec<String> {
        plan(&SERVICES, backup)
            .into_iter()
            .filter(|s| !s.kind.checked_from_facts())
            .map(|s| s.name())
            .collect()
    }

    /// Drives the machine like a controller: persists the status as JSON after every pass,
    /// runs each asked step with `exec` (its outcome seen on the next pass), and stops at the
    /// first action that is not `Run`. Returns the steps asked for, the phases seen, the
    /// persisted status and the final action.
    fn drive(
        mut current: Option<String>,
        mut persisted: Option<String>,
        f: &mut Facts,
        exec: &mut dyn FnMut(&Step) -> Outcome,
        max_runs: usize,
    ) -> (
        Vec<String>,
        Vec<Phase>,
        Option<String>,
        Option<String>,
        Action,
    ) {
        let (mut asked, mut phases) = (Vec::new(), Vec::new());
        loop {
            let u: Option<UpgradeStatus> = persisted
                .as_deref()
                .map(|j| serde_json::from_str(j).expect("status JSON"));
            let d = decide(current.as_deref(), u.as_ref(), f);
            if let Some(p) = d.upgrade.as_ref().and_then(|u| u.phase)
                && phases.last() != Some(&p)
            {
                phases.push(p);
            }
            current = d.current_release.clone();
            persisted = d
                .upgrade
                .as_ref()
                .map(|u| serde_json::to_string(u).expect("JSON"));
            match d.action {
                Action::Run(step) if asked.len() < max_runs => {
                    asked.push(step.name());
                    let o = exec(&step);
                    f.outcomes.insert(step.name(), o);
                }
                a => return (asked, phases, current, persisted, a),
            }
        }
    }

    fn status(j: &Option<String>) -> UpgradeStatus {
        serde_json::from_str(j.as_deref().expect("an upgrade status")).expect("status JSON")
    }

    #[test]
    fn the_graph_allows_staying_and_the_next_release_only() {
        assert_eq!(allowed_targets("2025.2"), ["2025.2", "2026.1"]);
        assert_eq!(allowed_targets("2026.1"), ["2026.1"]);
        assert!(check_transition("2025.2", "2026.1").is_ok());
        assert!(check_transition("2026.1", "2026.1").is_ok());
        let back = check_transition("2026.1", "2025.2").expect_err("downgrade");
        assert!(back.contains("going back from 2026.1 to 2025.2"), "{back}");
        assert!(back.contains("allowed from 2026.1: 2026.1"), "{back}");
        let unknown = check_transition("2025.2", "2027.1").expect_err("unknown");
        assert!(unknown.contains("\"2027.1\" is not supported"), "{unknown}");
        assert!(unknown.contains("allowed from 2025.2: 2025.2, 2026.1"));
        // A skip, in a graph of three releases.
        let rel = &["2025.1", "2025.2", "2026.1"];
        let edges = &[("2025.1", "2025.2"), ("2025.2", "2026.1")];
        let skip = check_in(rel, edges, "2025.1", "2026.1").expect_err("skip");
        assert!(skip.contains("skips a release"), "{skip}");
        assert!(
            skip.contains("allowed from 2025.1: 2025.1, 2025.2"),
            "{skip}"
        );
        assert!(check_in(rel, edges, "2025.1", "2025.2").is_ok());
        // Every edge joins two releases the operator renders, going forward.
        for (from, to) in UPGRADE_EDGES {
            assert!(crate::RELEASES.contains(from) && crate::RELEASES.contains(to));
            assert!(from < to);
        }
    }

    #[test]
    fn a_first_deployment_adopts_its_release_and_then_stays() {
        let d = decide(None, None, &facts("2025.2"));
        assert_eq!(d.current_release.as_deref(), Some("2025.2"));
        assert_eq!((d.upgrade, d.action), (None, Action::Steady));
        let d = decide(Some("2025.2"), None, &facts("2025.2"));
        assert_eq!((d.upgrade, d.action), (None, Action::Steady));
    }

    #[test]
    fn skip_downgrade_and_unknown_targets_are_refused_before_anything_starts() {
        for (cur, want, says) in [
            ("2026.1", "2025.2", "allowed from 2026.1: 2026.1"),
            ("2025.2", "2027.1", "allowed from 2025.2: 2025.2, 2026.1"),
        ] {
            let d = decide(Some(cur), None, &facts(want));
            assert_eq!(d.upgrade, None, "nothing starts");
            assert_eq!(d.current_release.as_deref(), Some(cur));
            match d.action {
                Action::Refuse(m) => {
                    assert!(m.starts_with("spec.release: ") && m.contains(says), "{m}")
                }
                a => panic!("{cur} -> {want}: {a:?}"),
            }
        }
    }

    #[test]
    fn a_full_upgrade_goes_through_every_phase_in_order_and_runs_each_step_once() {
        for backup in [false, true] {
            let mut f = facts("2026.1");
            f.backup_configured = backup;
            let (asked, _, current, persisted, action) = drive(
                Some("2025.2".into()),
                None,
                &mut f,
                &mut |_| Outcome::Succeeded,
                100,
            );
            assert_eq!(action, Action::Completed);
            assert_eq!(asked, executed(backup));
            // Steps the machine checks itself finish inside one pass, so the phases are read
            // from the completed steps, in order.
            let u = status(&persisted);
            let mut phases: Vec<&str> = Vec::new();
            for s in &u.completed_steps {
                let p = s.split('/').next().unwrap_or_default();
                if phases.last() != Some(&p) {
                    phases.push(p);
                }
            }
            assert_eq!(
                phases,
                [
                    Phase::Preflight,
                    Phase::Prepare,
                    Phase::Migrate,
                    Phase::RollControlPlane,
                    Phase::PostMigrate,
                    Phase::RollDataPlane,
                    Phase::Verify,
                ]
                .map(|p| format!("{p:?}"))
            );
            assert_eq!(u.phase, Some(Phase::Complete));
            assert_eq!(current.as_deref(), Some("2026.1"));
            let u = status(&persisted);
            assert!(u.complete() && u.completed_at.is_some() && u.step.is_none());
            assert_eq!(
                u.completed_steps,
                plan(&SERVICES, backup)
                    .iter()
                    .map(Step::name)
                    .collect::<Vec<_>>()
            );
            assert!(
                u.completed_steps
                    .contains(&"RollDataPlane/data-plane".to_string())
            );
            assert_eq!(
                u.completed_steps.iter().any(|s| s == "Preflight/backup"),
                backup
            );
            // Once complete, the same spec is steady.
            let d = decide(current.as_deref(), Some(&u), &facts("2026.1"));
            assert_eq!(d.action, Action::Steady);
        }
    }

    #[test]
    fn the_plan_expands_before_rolling_keystone_first_and_contracts_after() {
        let names: Vec<String> = plan(&SERVICES, true).iter().map(Step::name).collect();
        let at = |n: &str| {
            names
                .iter()
                .position(|x| x == n)
                .unwrap_or_else(|| panic!("{n} in {names:?}"))
        };
        assert!(at("Preflight/backup") < at("Prepare/keystone/render-config"));
        assert!(at("Migrate/keystone/expand") < at("Migrate/keystone/migrate"));
        assert!(at("Migrate/keystone/migrate") < at("RollControlPlane/keystone/roll"));
        assert!(at("Migrate/placement/db-sync") < at("RollControlPlane/keystone/roll"));
        assert!(at("RollControlPlane/keystone/roll") < at("RollControlPlane/placement/roll"));
        assert!(at("RollControlPlane/placement/roll") < at("PostMigrate/keystone/contract"));
        assert!(
            at("PostMigrate/placement/online-data-migrations") < at("RollDataPlane/data-plane")
        );
        assert!(at("RollDataPlane/data-plane") < at("Verify/keystone/verify-api"));
        let step = plan(&SERVICES, false)
            .into_iter()
            .find(|s| s.kind == StepKind::Contract)
            .expect("contract");
        assert_eq!(
            step.manage_command(),
            Some(("keystone-manage", &["db_sync", "--contract"][..]))
        );
        // Every service with a database has a pre-roll migration; the roll order covers all.
        for s in ROLL_ORDER {
            let m = migration_commands(s);
            assert_eq!(m.is_empty(), s == ServiceName::Horizon, "{s:?}");
            assert!(
                m.iter()
                    .all(|(p, _, _, _)| matches!(p, Phase::Migrate | Phase::PostMigrate))
            );
        }
    }

    #[test]
    fn all_seven_services_migrate_by_their_upgrade_docs_in_dependency_order() {
        let steps = plan(&ROLL_ORDER, false);
        let commands: Vec<String> = steps
            .iter()
            .filter_map(|s| {
                let (prog, args) = s.manage_command()?;
                Some(format!("{} {prog} {}", s.name(), args.join(" ")))
            })
            .collect();
        assert_eq!(
            commands,
            [
                "Migrate/keystone/expand keystone-manage db_sync --expand",
                "Migrate/keystone/migrate keystone-manage db_sync --migrate",
                "Migrate/placement/db-sync placement-manage db sync",
                "Migrate/glance/expand glance-manage db expand",
                "Migrate/glance/migrate glance-manage db migrate",
                "Migrate/neutron/expand neutron-db-manage upgrade --expand",
                "Migrate/nova/api-db-sync nova-manage api_db sync",
                "Migrate/nova/db-sync nova-manage db sync",
                "Migrate/cinder/db-sync cinder-manage db sync",
                "PostMigrate/keystone/contract keystone-manage db_sync --contract",
                "PostMigrate/placement/online-data-migrations placement-manage db online_data_migrations",
                "PostMigrate/glance/contract glance-manage db contract",
                "PostMigrate/neutron/contract neutron-db-manage upgrade --contract",
                "PostMigrate/nova/online-data-migrations nova-manage db online_data_migrations",
                "PostMigrate/cinder/online-data-migrations cinder-manage db online_data_migrations",
            ]
        );
        // Every step name is unique (a kind appears once per service), and the rolls follow
        // the dependency order, Horizon last, between the two migration phases.
        let names: Vec<String> = steps.iter().map(Step::name).collect();
        let mut unique = names.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), names.len());
        let rolls: Vec<&str> = names
            .iter()
            .filter(|n| n.starts_with("RollControlPlane/"))
            .map(|n| n.split('/').nth(1).unwrap_or_default())
            .collect();
        assert_eq!(
            rolls,
            [
                "keystone",
                "placement",
                "glance",
                "neutron",
                "nova",
                "cinder",
                "horizon"
            ]
        );
        let at = |n: &str| names.iter().position(|x| x == n);
        assert!(at("Migrate/cinder/db-sync") < at("RollControlPlane/keystone/roll"));
        assert!(at("RollControlPlane/horizon/roll") < at("PostMigrate/keystone/contract"));
    }

    #[test]
    fn children_keep_the_old_release_until_their_roll_step_is_done() {
        let mut f = facts("2026.1");
        let roll_ks = "RollControlPlane/keystone/roll";
        let (_, _, _, persisted, _) = drive(
            Some("2025.2".into()),
            None,
            &mut f,
            &mut |s| {
                if s.name() == "RollControlPlane/placement/roll" {
                    Outcome::Running
                } else {
                    Outcome::Succeeded
                }
            },
            100,
        );
        let u = status(&persisted);
        assert!(u.completed_steps.iter().any(|s| s == roll_ks));
        assert_eq!(u.step.as_deref(), Some("RollControlPlane/placement/roll"));
        assert_eq!(u.release_of(ServiceName::Keystone), "2026.1");
        assert_eq!(u.release_of(ServiceName::Placement), "2025.2");
    }

    #[test]
    fn a_failure_in_any_step_stops_degraded_and_nothing_after_it_runs_until_a_retry() {
        for (i, failing) in executed(true).iter().enumerate() {
            let mut f = facts("2026.1");
            f.backup_configured = true;
            let (asked, _, current, persisted, action) = drive(
                Some("2025.2".into()),
                None,
                &mut f,
                &mut |s| {
                    if &s.name() == failing {
                        Outcome::Failed("exit 1: boom".into())
                    } else {
                        Outcome::Succeeded
                    }
                },
                100,
            );
            assert_eq!(asked, executed(true)[..=i], "nothing after {failing}");
            match &action {
                Action::Degraded(m) => {
                    assert!(m.contains(failing.as_str()) && m.contains("boom"), "{m}")
                }
                a => panic!("{failing}: {a:?}"),
            }
            assert_eq!(current.as_deref(), Some("2025.2"), "not upgraded yet");
            let u = status(&persisted);
            assert_eq!(u.failed_step.as_deref(), Some(failing.as_str()));
            assert_eq!(u.last_error.as_deref(), Some("exit 1: boom"));
            assert!(!u.completed_steps.contains(failing));
            // Passes without a retry stay Degraded (even when the outcome is gone) ...
            f.outcomes.clear();
            let d = decide(current.as_deref(), Some(&u), &f);
            assert!(
                matches!(d.action, Action::Degraded(ref m) if m.contains("retry-upgrade")),
                "{:?}",
                d.action
            );
            assert_eq!(
                d.upgrade.as_ref(),
                Some(&u),
                "a stopped upgrade's status does not move"
            );
            // ... a new retry value resumes at the failed step (a fresh attempt, even while the
            // executor still reports the failed one) and finishes.
            f.outcomes
                .insert(failing.clone(), Outcome::Failed("exit 1: boom".into()));
            f.retry = Some("1".into());
            let (asked, _, current, persisted, action) =
                drive(current, persisted, &mut f, &mut |_| Outcome::Succeeded, 100);
            assert_eq!(asked, executed(true)[i..], "resumed at {failing}");
            assert_eq!(action, Action::Completed);
            assert_eq!(current.as_deref(), Some("2026.1"));
            assert_eq!(status(&persisted).retried_for.as_deref(), Some("1"));
        }
    }

    #[test]
    fn killed_at_any_step_it_resumes_from_the_persisted_status_without_redoing_done_steps() {
        let all = executed(true);
        for k in 0..all.len() {
            let mut f = facts("2026.1");
            f.backup_configured = true;
            let mut ran = Vec::new();
            // The first k steps finish; step k is started, then the operator dies before it
            // sees the step's outcome (its in-memory state and the outcomes are lost).
            let (asked, _, current, persisted, action) = drive(
                Some("2025.2".into()),
                None,
                &mut f,
                &mut |s| {
                    ran.push(s.name());
                    Outcome::Succeeded
                },
                k,
            );
            assert_eq!(asked.len(), k);
            match action {
                Action::Run(s) => ran.push(s.name()),
                a => panic!("{a:?}"),
            }
            let u = status(&persisted);
            assert_eq!(
                u.completed_steps.iter().filter(|s| all.contains(s)).count(),
                k
            );
            assert_eq!(
                u.step.as_ref(),
                Some(&all[k]),
                "the status names the step in flight"
            );
            let mut f = facts("2026.1");
            f.backup_configured = true;
            let (asked, _, current, _, action) = drive(
                current,
                persisted,
                &mut f,
                &mut |s| {
                    ran.push(s.name());
                    Outcome::Succeeded
                },
                100,
            );
            assert_eq!(action, Action::Completed);
            assert_eq!(current.as_deref(), Some("2026.1"));
            // The step in flight is asked for again (its executor is idempotent), nothing done before it.
            assert_eq!(asked, all[k..], "resumed after {k} steps");
            let mut again: Vec<&String> = ran
                .iter()
                .filter(|s| ran.iter().filter(|x| x == s).count() > 1)
                .collect();
            again.dedup();
            assert_eq!(again, [&all[k]], "only the interrupted step runs twice");
        }
    }

    #[test]
    fn preflight_waits_for_external_services_and_services_without_changing_anything() {
        let mut f = facts("2026.1");
        f.external_not_ready = vec!["db (database): connection refused".into()];
        let d = decide(Some("2025.2"), None, &f);
        match &d.action {
            Action::Wait(m) => assert!(
                m.contains("external services not Ready: db (database): connection refused"),
                "{m}"
            ),
            a => panic!("{a:?}"),
        }
        let u = d.upgrade.clone().expect("upgrade started");
        assert_eq!(u.phase, Some(Phase::Preflight));
        assert!(u.completed_steps.is_empty());
        assert_eq!(d.current_release.as_deref(), Some("2025.2"));
        f.external_not_ready.clear();
        f.services_not_ready = vec!["Placement: Deployment 0/1 available".into()];
        let d = decide(Some("2025.2"), Some(&u), &f);
        assert!(
            matches!(&d.action, Action::Wait(m) if m.contains("services not Ready: Placement")),
            "{:?}",
            d.action
        );
        let u = d.upgrade.expect("upgrade");
        assert_eq!(u.completed_steps, ["Preflight/external-services-ready"]);
        assert_eq!(u.started_at, "2026-12-01T17:00:00Z");
        f.services_not_ready.clear();
        f.now = "2026-12-01T17:05:00Z".into();
        let d = decide(Some("2025.2"), Some(&u), &f);
        let u = d.upgrade.expect("upgrade");
        assert_eq!(d.action, Action::Run(plan(&SERVICES, false)[2]));
        assert_eq!(u.phase, Some(Phase::Prepare));
        assert_eq!(u.phase_started_at.as_deref(), Some("2026-12-01T17:05:00Z"));
        assert_eq!(
            u.started_at, "2026-12-01T17:00:00Z",
            "the start time is kept"
        );
    }

    #[test]
    fn changing_the_target_mid_upgrade_is_refused_and_going_back_only_before_migrations() {
        let mut f = facts("2026.1");
        // Stopped in Prepare (render-config running): going back abandons the upgrade.
        let (_, _, cur, persisted, _) = drive(
            Some("2025.2".into()),
            None,
            &mut f,
            &mut |_| Outcome::Running,
            1,
        );
        let u = status(&persisted);
        assert_eq!(u.phase, Some(Phase::Prepare));
        let d = decide(cur.as_deref(), Some(&u), &facts("2025.2"));
        assert_eq!(
            (d.current_release.as_deref(), d.upgrade, d.action),
            (Some("2025.2"), None, Action::Steady)
        );
        // Past an expand migration: going back is refused, the upgrade status kept.
        let mut f = facts("2026.1");
        let (_, _, cur, persisted, _) = drive(
            Some("2025.2".into()),
            None,
            &mut f,
            &mut |s| {
                if s.kind == StepKind::Migrate {
                    Outcome::Running
                } else {
                    Outcome::Succeeded
                }
            },
            100,
        );
        let u = status(&persisted);
        assert_eq!(u.step.as_deref(), Some("Migrate/keystone/migrate"));
        for want in ["2025.2", "2027.1"] {
            let d = decide(cur.as_deref(), Some(&u), &facts(want));
            assert_eq!(d.upgrade.as_ref(), Some(&u));
            match d.action {
                Action::Refuse(m) => assert!(
                    m.contains("must stay 2026.1") && m.contains("phase Migrate"),
                    "{m}"
                ),
                a => panic!("{want}: {a:?}"),
            }
        }
    }

    #[test]
    fn the_status_round_trips_through_json_in_camel_case() {
        let mut f = facts("2026.1");
        let (_, _, _, persisted, _) = drive(
            Some("2025.2".into()),
            None,
            &mut f,
            &mut |_| Outcome::Succeeded,
            3,
        );
        let v: serde_json::Value =
            serde_json::from_str(persisted.as_deref().expect("status")).expect("JSON");
        assert_eq!(v["fromRelease"], "2025.2");
        assert_eq!(v["toRelease"], "2026.1");
        assert_eq!(v["phase"], "Migrate");
        assert!(
            v["completedSteps"].is_array()
                && v["phaseStartedAt"].is_string()
                && v["stepStartedAt"].is_string()
        );
    }
}
