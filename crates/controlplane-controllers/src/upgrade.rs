//! The `OpenStackCluster` controller's side of upgrades: it observes the facts the pure machine
//! (`controlplane_api::upgrade`) needs, runs it, carries out the step it asks for and tells the
//! cluster pass which release each child runs. Steps run as Jobs owned by the cluster (the
//! backup hook with the user's image and command; the migrations with the target release's
//! image and the child's rendered configuration); a roll is the child's own rollout, done
//! when the child is Ready at its new generation; checks and verification read the children's
//! status from the previous pass.

use std::collections::BTreeMap;

use controlplane_api::ServiceName;
use controlplane_api::cluster::{OpenStackCluster, OpenStackClusterStatus};
use controlplane_api::condition_types as ct;
use controlplane_api::external::OpenStackExternalService;
use controlplane_api::upgrade::{self, Action, Facts, Outcome, Step, StepKind, UpgradeStatus};
use controlplane_render::hash::InputHash;
use controlplane_render::objects::{self, JobParams, Owner};
use k8s_openapi::api::batch::v1::Job;
use kube::api::PostParams;
use kube::{Api, Resource, ResourceExt};

use crate::runtime::{Ctx, Error, State};
use crate::service::{DB_CA_DIR, job_outcome};

/// The annotation whose new value retries a failed upgrade step.
pub const RETRY_ANNOTATION: &str = "controlplane.sunet.se/retry-upgrade";

/// What the cluster pass does with the upgrade's answer.
pub struct Gate {
    /// The upgrade in progress (pins the children's releases).
    upgrade: Option<UpgradeStatus>,
    /// The step in progress.
    step: Option<Step>,
    /// The cluster's state while the upgrade holds it (refused, waiting, running, stopped).
    pub state: Option<State>,
}

impl Gate {
    /// The release child `svc` runs: the target once its roll step started or finished, the
    /// release upgraded from before that; `desired` without an upgrade.
    pub fn release(&self, svc: ServiceName, desired: &str) -> String {
        match &self.upgrade {
            Some(u) if !u.complete() => {
                let rolling = self
                    .step
                    .is_some_and(|s| s.kind == StepKind::Roll && s.service == Some(svc));
                if rolling {
                    u.to_release.clone()
                } else {
                    u.release_of(svc).to_string()
                }
            }
            _ => desired.to_string(),
        }
    }
}

/// The Job of one upgrade step: a name that changes with the target, the step and the retry.
pub fn job_name(cluster: &str, u: &UpgradeStatus, step: &Step) -> String {
    let hash = InputHash::new()
        .add("to", &u.to_release)
        .add("step", step.name())
        .add("retry", u.retried_for.as_deref().unwrap_or(""))
        .short();
    let base: String = cluster.chars().take(30).collect();
    format!("{base}-upgrade-{hash}")
}

/// The configuration file of a service in its pods (the child's rendered Secret mounted there).
fn config_mount(svc: ServiceName) -> Option<(&'static str, &'static str)> {
    match svc {
        ServiceName::Keystone => Some(("/etc/keystone", "keystone.conf")),
        ServiceName::Placement => Some((
            controlplane_render::placement::POD_CONFIG_DIR,
            "placement.conf",
        )),
        _ => None,
    }
}

/// The services of the cluster this operator version deploys: the ones an upgrade rolls.
fn deployed(obj: &OpenStackCluster) -> Vec<ServiceName> {
    obj.spec
        .services
        .iter()
        .copied()
        .filter(|s| s.implemented())
        .collect()
}

/// The cluster's state from the upgrade's and the children's roll-up: a refused or stopped
/// upgrade wins; a child that is blocked or degraded is named over "upgrading" (a roll waits
/// for it); otherwise the upgrade's progress, or the roll-up when no upgrade runs.
pub fn combine(upgrade: Option<State>, roll_up: State) -> State {
    match (upgrade, roll_up) {
        (Some(u @ (State::InvalidSpec(_) | State::Degraded { .. })), _) => u,
        (Some(_), r @ (State::Blocked { .. } | State::Degraded { .. })) => r,
        (Some(u), _) => u,
        (None, r) => r,
    }
}

/// Whether the child of `svc` would accept the target release (pure): the Prepare step, as
/// the child renders its configuration itself once its spec names the release.
pub fn prepare(obj: &OpenStackCluster, svc: ServiceName, to: &str) -> Outcome {
    use controlplane_api::validation::Validate;
    let errors = match svc {
        ServiceName::Keystone => {
            let mut s = crate::cluster::keystone_spec(obj);
            s.release = to.into();
            s.validate()
        }
        ServiceName::Placement => {
            let mut s = crate::cluster::placement_spec(obj);
            s.release = to.into();
            s.validate()
        }
        other => {
            return Outcome::Failed(format!(
                "no upgrade executor for {} in this operator version",
                other.kind()
            ));
        }
    };
    if errors.is_empty() {
        Outcome::Succeeded
    } else {
        Outcome::Failed(format!(
            "{} at {to}: {}",
            svc.kind(),
            api::validation::summarize(&errors)
        ))
    }
}

/// The facts only Kubernetes knows (pure): the children's readiness from the last roll-up and
/// the outcome of the step in flight.
pub fn facts(
    obj: &OpenStackCluster,
    status: &OpenStackClusterStatus,
    external_not_ready: Vec<String>,
    in_flight: Option<Outcome>,
    now: String,
) -> Facts {
    let services = deployed(obj);
    let services_not_ready = services
        .iter()
        .filter_map(
            |s| match status.services.iter().find(|x| x.name == s.as_str()) {
                Some(x) if x.ready => None,
                Some(x) => Some(format!(
                    "{}: {}",
                    s.kind(),
                    x.message.as_deref().unwrap_or("not Ready")
                )),
                None => Some(format!("{}: no status yet", s.kind())),
            },
        )
        .collect();
    let mut outcomes = BTreeMap::new();
    if let (Some(u), Some(o)) = (&status.upgrade, in_flight)
        && let Some(step) = &u.step
    {
        outcomes.insert(step.clone(), o);
    }
    Facts {
        desired: obj.spec.release.clone(),
        services,
        external_not_ready,
        services_not_ready,
        backup_configured: obj
            .spec
            .upgrade
            .as_ref()
            .is_some_and(|u| u.backup.is_some()),
        outcomes,
        retry: obj.annotations().get(RETRY_ANNOTATION).cloned(),
        now,
    }
}

/// Runs the upgrade machine for one cluster pass: writes `status.currentRelease` and
/// `status.upgrade`, starts the step's Job if it has none, and answers the gate.
pub async fn drive(
    ctx: &Ctx,
    obj: &OpenStackCluster,
    status: &mut OpenStackClusterStatus,
) -> Result<Gate, Error> {
    let ns = obj.namespace().ok_or(Error::Incomplete("namespace"))?;
    let name = obj.name_any();
    let jobs: Api<Job> = Api::namespaced(ctx.client.clone(), &ns);
    let externals: Api<OpenStackExternalService> = Api::namespaced(ctx.client.clone(), &ns);

    let mut external_not_ready = Vec::new();
    let mut db_ca = None;
    let es = &obj.spec.external_services;
    let refs = [
        Some(&es.database),
        es.messaging.as_ref(),
        es.cache.as_ref(),
        es.object_storage.as_ref(),
        es.ovn.as_ref(),
    ];
    for r in refs.into_iter().flatten() {
        match externals.get_opt(&r.name).await? {
            None => external_not_ready.push(format!("{}: not found", r.name)),
            Some(x) => {
                if r.name == es.database.name {
                    db_ca = x.spec.tls.as_ref().map(|t| t.ca_secret.name.clone());
                }
                let ready = x.status.as_ref().and_then(|s| s.condition(ct::READY));
                if !ready.is_some_and(|c| c.is_true()) {
                    external_not_ready.push(format!(
                        "{}: {}",
                        r.name,
                        ready
                            .and_then(|c| c.message.clone())
                            .unwrap_or_else(|| "not Ready".into())
                    ));
                }
            }
        }
    }

    // The outcome of the step in flight (from before this pass).
    let in_flight = match status.upgrade.as_ref().filter(|u| !u.complete()) {
        Some(u) => match plan_step(obj, u) {
            Some(step) => outcome(obj, &jobs, &name, status, u, &step).await?,
            None => None,
        },
        None => None,
    };
    let now = jiff::Timestamp::now().to_string();
    let f = facts(obj, status, external_not_ready, in_flight, now);
    let d = upgrade::decide(
        status.current_release.as_deref(),
        status.upgrade.as_ref(),
        &f,
    );
    status.current_release = d.current_release.clone();
    status.upgrade = d.upgrade.clone();
    let mut gate = Gate {
        upgrade: d.upgrade.clone(),
        step: None,
        state: None,
    };
    gate.state = match d.action {
        Action::Steady | Action::Completed => None,
        Action::Refuse(m) => Some(State::InvalidSpec(m)),
        Action::Wait(m) => Some(State::Blocked {
            reason: "UpgradePreflight".into(),
            message: m,
        }),
        Action::Degraded(m) => Some(State::Degraded {
            reason: "UpgradeFailed".into(),
            message: m,
        }),
        Action::Run(step) => {
            gate.step = Some(step);
            if let Some(u) = &d.upgrade {
                start(obj, &jobs, u, &step, db_ca.as_deref()).await?;
            }
            Some(State::Reconciling {
                reason: "Upgrading".into(),
                message: format!(
                    "upgrade {} -> {}: {}",
                    d.upgrade.as_ref().map_or("", |u| u.from_release.as_str()),
                    obj.spec.release,
                    step.name()
                ),
            })
        }
    };
    Ok(gate)
}

/// The plan step the status names as in flight.
fn plan_step(obj: &OpenStackCluster, u: &UpgradeStatus) -> Option<Step> {
    let services = deployed(obj);
    let backup = obj
        .spec
        .upgrade
        .as_ref()
        .is_some_and(|p| p.backup.is_some());
    let name = u.step.as_deref()?;
    upgrade::plan(&services, backup)
        .into_iter()
        .find(|s| s.name() == name)
}

/// What the executor observed of `step`: its Job's outcome, or (a roll, a verification) the
/// child's readiness at its new generation in the last roll-up.
async fn outcome(
    obj: &OpenStackCluster,
    jobs: &Api<Job>,
    cluster: &str,
    status: &OpenStackClusterStatus,
    u: &UpgradeStatus,
    step: &Step,
) -> Result<Option<Outcome>, Error> {
    Ok(match (step.kind, step.service) {
        (StepKind::RenderConfig, Some(svc)) => Some(prepare(obj, svc, &u.to_release)),
        (StepKind::Roll | StepKind::VerifyApi, _) => {
            let svc = step.service.map(|s| s.as_str()).unwrap_or_default();
            status.services.iter().find(|x| x.name == svc).map(|x| {
                if x.ready {
                    Outcome::Succeeded
                } else {
                    Outcome::Running
                }
            })
        }
        (_, Some(svc)) if config_mount(svc).is_none() => Some(Outcome::Failed(format!(
            "no upgrade executor for {} in this operator version",
            svc.kind()
        ))),
        _ => jobs
            .get_opt(&job_name(cluster, u, step))
            .await?
            .map(|job| match job_outcome(&job) {
                None => Outcome::Running,
                Some(Ok(())) => Outcome::Succeeded,
                Some(Err(e)) => Outcome::Failed(format!("Job {}: {e}", job.name_any())),
            }),
    })
}

/// Creates the Job of `step` unless it exists (a roll or a verification has no Job: the
/// child's spec carries the release).
async fn start(
    obj: &OpenStackCluster,
    jobs: &Api<Job>,
    u: &UpgradeStatus,
    step: &Step,
    db_ca: Option<&str>,
) -> Result<(), Error> {
    let cluster = obj.name_any();
    let Some(job) = step_job(obj, u, step, db_ca)? else {
        return Ok(());
    };
    if jobs.get_opt(&job_name(&cluster, u, step)).await?.is_some() {
        return Ok(());
    }
    match jobs.create(&PostParams::default(), &job).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// The Job of a step (pure), or `None` for steps without one.
pub fn step_job(
    obj: &OpenStackCluster,
    u: &UpgradeStatus,
    step: &Step,
    db_ca: Option<&str>,
) -> Result<Option<Job>, Error> {
    let cluster = obj.name_any();
    let owner = Owner {
        reference: obj
            .controller_owner_ref(&())
            .ok_or(Error::Incomplete("uid"))?,
        namespace: obj.namespace().ok_or(Error::Incomplete("namespace"))?,
        instance: cluster.clone(),
        service: "openstack-cluster".into(),
    };
    let name = job_name(&cluster, u, step);
    let env = vec![
        objects::env("UPGRADE_FROM", u.from_release.clone()),
        objects::env("UPGRADE_TO", u.to_release.clone()),
        objects::env(
            "DATABASE_SERVICE",
            obj.spec.external_services.database.name.clone(),
        ),
    ];
    let params = |image: String, command: Vec<String>, volumes| JobParams {
        name: name.clone(),
        step: "upgrade".into(),
        hash: step.name(),
        image,
        command,
        env: env.clone(),
        volumes,
    };
    match (step.kind, step.service) {
        (StepKind::Backup, _) => {
            let Some(b) = obj.spec.upgrade.as_ref().and_then(|p| p.backup.as_ref()) else {
                return Ok(None);
            };
            Ok(Some(objects::job(
                &owner,
                params(b.image.clone(), b.command.clone(), vec![]),
            )))
        }
        (_, Some(svc)) => {
            let (Some((program, args)), Some((dir, file))) =
                (step.manage_command(), config_mount(svc))
            else {
                return Ok(None);
            };
            let image = obj
                .spec
                .templates
                .get(svc.as_str())
                .and_then(|t| t.image.clone())
                .unwrap_or_else(|| svc.default_image(&u.to_release));
            let mut command = vec![
                program.to_string(),
                "--config-file".into(),
                format!("{dir}/{file}"),
            ];
            command.extend(args.iter().map(|a| a.to_string()));
            let child = crate::cluster::child_name(&cluster, svc);
            let mut volumes = vec![objects::secret_volume(
                "config",
                &format!("{child}-{}-config", svc.as_str()),
                dir,
            )];
            if let Some(ca) = db_ca {
                volumes.push(objects::secret_volume("db-ca", ca, DB_CA_DIR));
            }
            Ok(Some(objects::job(&owner, params(image, command, volumes))))
        }
        _ => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster(backup: bool) -> OpenStackCluster {
        let mut c: OpenStackCluster = serde_json::from_value(serde_json::json!({
            "apiVersion": "controlplane.sunet.se/v1alpha1", "kind": "OpenStackCluster",
            "metadata": {"name": "cloud", "namespace": "os", "uid": "u1"},
            "spec": {"release": "2026.1", "services": ["placement", "keystone", "glance"],
                     "externalServices": {"database": {"name": "db"}}}}))
        .expect("cluster");
        if backup {
            c.spec.upgrade = Some(upgrade::UpgradePolicy {
                backup: Some(upgrade::BackupHook {
                    image: "backup:1".into(),
                    command: vec!["/backup.sh".into()],
                }),
            });
        }
        c
    }

    fn running(step: &str) -> UpgradeStatus {
        UpgradeStatus {
            from_release: "2025.2".into(),
            to_release: "2026.1".into(),
            step: Some(step.into()),
            started_at: "t".into(),
            ..UpgradeStatus::default()
        }
    }

    #[test]
    fn migration_jobs_run_the_target_image_with_the_childs_configuration() {
        let c = cluster(false);
        let u = running("Migrate/keystone/expand");
        let step = upgrade::plan(&c.spec.services, false)
            .into_iter()
            .find(|s| s.name() == "Migrate/keystone/expand")
            .expect("expand step");
        let job = step_job(&c, &u, &step, Some("db-ca"))
            .expect("job")
            .expect("a Job");
        let pod = job.spec.expect("spec").template.spec.expect("pod spec");
        let ctr = &pod.containers[0];
        assert_eq!(
            ctr.image.as_deref(),
            Some("localhost/openstack-keystone:2026.1")
        );
        assert_eq!(
            ctr.command.clone().unwrap_or_default().join(" "),
            "keystone-manage --config-file /etc/keystone/keystone.conf db_sync --expand"
        );
        let vols: Vec<String> = pod
            .volumes
            .unwrap_or_default()
            .iter()
            .filter_map(|v| v.secret.as_ref().and_then(|s| s.secret_name.clone()))
            .collect();
        assert_eq!(vols, ["cloud-keystone-keystone-config", "db-ca"]);
        // A retry is a new Job; the same step and retry is the same Job.
        let mut retried = u.clone();
        retried.retried_for = Some("1".into());
        assert_ne!(
            job_name("cloud", &u, &step),
            job_name("cloud", &retried, &step)
        );
        assert_eq!(
            job_name("cloud", &u, &step),
            job_name("cloud", &u.clone(), &step)
        );
    }

    #[test]
    fn rolls_and_checks_have_no_job_and_the_backup_runs_the_users_hook() {
        let c = cluster(true);
        let u = running("Preflight/backup");
        for s in upgrade::plan(&c.spec.services, true) {
            let job = step_job(&c, &u, &s, None).expect("job");
            let has = s.kind == StepKind::Backup
                || (s.manage_command().is_some() && s.service != Some(ServiceName::Glance));
            assert_eq!(job.is_some(), has, "{}", s.name());
        }
        let backup = upgrade::plan(&c.spec.services, true)[2];
        let job = step_job(&c, &u, &backup, None)
            .expect("job")
            .expect("backup Job");
        let ctr = &job
            .spec
            .expect("spec")
            .template
            .spec
            .expect("pod")
            .containers[0];
        assert_eq!(ctr.image.as_deref(), Some("backup:1"));
        let env: Vec<_> = ctr
            .env
            .clone()
            .unwrap_or_default()
            .iter()
            .map(|e| (e.name.clone(), e.value.clone().unwrap_or_default()))
            .collect();
        assert!(env.contains(&("UPGRADE_TO".into(), "2026.1".into())));
        assert!(env.contains(&("DATABASE_SERVICE".into(), "db".into())));
    }

    #[test]
    fn children_roll_one_by_one_and_facts_name_what_is_not_ready() {
        let c = cluster(false);
        let mut u = running("RollControlPlane/keystone/roll");
        u.completed_steps = vec![];
        let gate = Gate {
            upgrade: Some(u.clone()),
            step: upgrade::plan(&c.spec.services, false)
                .into_iter()
                .find(|s| s.name() == "RollControlPlane/keystone/roll"),
            state: None,
        };
        assert_eq!(gate.release(ServiceName::Keystone, "2026.1"), "2026.1");
        assert_eq!(gate.release(ServiceName::Placement, "2026.1"), "2025.2");
        let none = Gate {
            upgrade: None,
            step: None,
            state: None,
        };
        assert_eq!(none.release(ServiceName::Placement, "2026.1"), "2026.1");

        let mut st = OpenStackClusterStatus::default();
        st.services.push(controlplane_api::cluster::ServiceSummary {
            name: "keystone".into(),
            object: "Keystone/cloud-keystone".into(),
            ready: false,
            message: Some("Deployment 0/1 available".into()),
        });
        let f = facts(&c, &st, vec![], None, "now".into());
        assert_eq!(
            f.services,
            [
                ServiceName::Placement,
                ServiceName::Keystone,
                ServiceName::Glance
            ]
        );
        assert_eq!(
            f.services_not_ready,
            [
                "Placement: no status yet",
                "Keystone: Deployment 0/1 available",
                "Glance: no status yet"
            ]
        );
    }
}
