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

use crate::messaging::{MQ_CA_DIR, MQ_CLIENT_DIR};
use crate::runtime::{Ctx, Error, State};
use crate::service::{CACHE_CA_DIR, CACHE_CLIENT_DIR, DB_CA_DIR, job_outcome};

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

/// Where a service's pods mount its rendered configuration Secret, and the files its
/// management commands read from there (each passed as `--config-file`, in this order): the
/// same paths the child's own migration Jobs use, so an upgrade step runs the command line the
/// child would. Horizon has no database and runs no migration.
fn config_files(svc: ServiceName) -> Option<(&'static str, &'static [&'static str])> {
    use controlplane_render::{cinder, glance, neutron, nova, placement};
    match svc {
        ServiceName::Keystone => Some(("/etc/keystone", &["keystone.conf"])),
        ServiceName::Placement => Some((placement::POD_CONFIG_DIR, &["placement.conf"])),
        ServiceName::Glance => Some((glance::POD_CONFIG_DIR, &["glance-api.conf"])),
        // neutron-db-manage loads the core plugin's migrations from the plugin's own file.
        ServiceName::Neutron => Some((neutron::POD_CONFIG_DIR, &neutron::SERVER_CONFIG_FILES)),
        ServiceName::Nova => Some((nova::POD_CONFIG_DIR, &[nova::NOVA_CONF])),
        ServiceName::Cinder => Some((cinder::POD_CONFIG_DIR, &["cinder.conf"])),
        ServiceName::Horizon => None,
    }
}

/// The Secrets of the external services' TLS material that the children's migration Jobs
/// mount (their configuration names files below these mounts).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExternalMounts {
    /// The database's CA bundle Secret (mounted at `DB_CA_DIR` by every service).
    pub db_ca: Option<String>,
    /// The message queue's CA bundle Secret (mounted, like the client certificate, by the
    /// services that use the queue: Nova and Cinder).
    pub mq_ca: Option<String>,
    /// The message queue's client certificate Secret.
    pub mq_client: Option<String>,
    /// The cache's (memcached's) CA bundle Secret: every service's configuration names the
    /// file, and a command that sets up its cache reads it, so every service's Job mounts it.
    pub cache_ca: Option<String>,
    /// The cache's client certificate Secret.
    pub cache_client: Option<String>,
}

/// Whether a service's configuration names the message queue (its Jobs mount its TLS files).
fn uses_messaging(svc: ServiceName) -> bool {
    matches!(svc, ServiceName::Nova | ServiceName::Cinder)
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
    use crate::cluster as c;
    use controlplane_api::validation::Validate;
    // Each child's spec as the cluster would write it at the target release.
    macro_rules! at_target {
        ($spec:expr) => {{
            let mut s = $spec;
            s.release = to.into();
            s.validate()
        }};
    }
    let errors = match svc {
        ServiceName::Keystone => at_target!(c::keystone_spec(obj)),
        ServiceName::Placement => at_target!(c::placement_spec(obj)),
        ServiceName::Glance => at_target!(c::glance_spec(obj)),
        ServiceName::Neutron => at_target!(c::neutron_spec(obj)),
        ServiceName::Nova => at_target!(c::nova_spec(obj)),
        ServiceName::Cinder => at_target!(c::cinder_spec(obj)),
        ServiceName::Horizon => at_target!(c::horizon_spec(obj)),
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
    let mut mounts = ExternalMounts::default();
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
                let tls = x.spec.tls.as_ref();
                if r.name == es.database.name {
                    mounts.db_ca = tls.map(|t| t.ca_secret.name.clone());
                }
                if es.messaging.as_ref().is_some_and(|m| m.name == r.name) {
                    mounts.mq_ca = tls.map(|t| t.ca_secret.name.clone());
                    mounts.mq_client = tls
                        .and_then(|t| t.client_cert_secret.as_ref())
                        .map(|c| c.name.clone());
                }
                if es.cache.as_ref().is_some_and(|c| c.name == r.name) {
                    mounts.cache_ca = tls.map(|t| t.ca_secret.name.clone());
                    mounts.cache_client = tls
                        .and_then(|t| t.client_cert_secret.as_ref())
                        .map(|c| c.name.clone());
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
                start(obj, &jobs, u, &step, &mounts).await?;
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
    mounts: &ExternalMounts,
) -> Result<(), Error> {
    let cluster = obj.name_any();
    let Some(job) = step_job(obj, u, step, mounts)? else {
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
    mounts: &ExternalMounts,
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
            let (Some((program, args)), Some((dir, files))) =
                (step.manage_command(), config_files(svc))
            else {
                return Ok(None);
            };
            let image = obj
                .spec
                .templates
                .get(svc.as_str())
                .and_then(|t| t.image.clone())
                .unwrap_or_else(|| svc.default_image(&u.to_release));
            let mut command = vec![program.to_string()];
            for file in files {
                command.extend(["--config-file".to_string(), format!("{dir}/{file}")]);
            }
            command.extend(args.iter().map(|a| a.to_string()));
            let child = crate::cluster::child_name(&cluster, svc);
            let mut volumes = vec![objects::secret_volume(
                "config",
                &format!("{child}-{}-config", svc.as_str()),
                dir,
            )];
            if let Some(ca) = &mounts.db_ca {
                volumes.push(objects::secret_volume("db-ca", ca, DB_CA_DIR));
            }
            if uses_messaging(svc) {
                if let Some(ca) = &mounts.mq_ca {
                    volumes.push(objects::secret_volume("mq-ca", ca, MQ_CA_DIR));
                }
                if let Some(c) = &mounts.mq_client {
                    volumes.push(objects::secret_volume("mq-client", c, MQ_CLIENT_DIR));
                }
            }
            if let Some(ca) = &mounts.cache_ca {
                volumes.push(objects::secret_volume("cache-ca", ca, CACHE_CA_DIR));
            }
            if let Some(c) = &mounts.cache_client {
                volumes.push(objects::secret_volume("cache-client", c, CACHE_CLIENT_DIR));
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
        let mounts = ExternalMounts {
            db_ca: Some("db-ca".into()),
            ..ExternalMounts::default()
        };
        let job = step_job(&c, &u, &step, &mounts)
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
            let job = step_job(&c, &u, &s, &ExternalMounts::default()).expect("job");
            let has = s.kind == StepKind::Backup || s.manage_command().is_some();
            assert_eq!(job.is_some(), has, "{}", s.name());
        }
        let backup = upgrade::plan(&c.spec.services, true)[2];
        let job = step_job(&c, &u, &backup, &ExternalMounts::default())
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

    /// A cluster running all seven services, with TLS to the database and the message queue.
    fn full_cluster() -> OpenStackCluster {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "controlplane.sunet.se/v1alpha1", "kind": "OpenStackCluster",
            "metadata": {"name": "cloud", "namespace": "os", "uid": "u1"},
            "spec": {"release": "2026.1",
                     "services": ["keystone", "placement", "glance", "neutron", "nova",
                                  "cinder", "horizon"],
                     "externalServices": {"database": {"name": "db"}, "messaging": {"name": "mq"},
                                          "cache": {"name": "mc"}, "ovn": {"name": "ovn"}},
                     "cinderBackends": [{"name": "nfs", "nfs": {"shares": ["nfs:/v"]}}]}}))
        .expect("cluster")
    }

    /// The command, image and Secret volumes (name, Secret, mount path) of a step's Job.
    fn job_of(c: &OpenStackCluster, name: &str) -> (String, String, Vec<(String, String, String)>) {
        let step = upgrade::plan(&c.spec.services, false)
            .into_iter()
            .find(|s| s.name() == name)
            .unwrap_or_else(|| panic!("{name} in the plan"));
        let mounts = ExternalMounts {
            db_ca: Some("db-ca".into()),
            mq_ca: Some("mq-ca".into()),
            mq_client: Some("mq-client".into()),
            cache_ca: Some("cache-ca".into()),
            cache_client: None,
        };
        let job = step_job(c, &running(name), &step, &mounts)
            .expect("job")
            .unwrap_or_else(|| panic!("{name} runs a Job"));
        let pod = job.spec.expect("spec").template.spec.expect("pod spec");
        let ctr = &pod.containers[0];
        let mounts = ctr.volume_mounts.clone().unwrap_or_default();
        let volumes = pod
            .volumes
            .unwrap_or_default()
            .iter()
            .map(|v| {
                let at = mounts
                    .iter()
                    .find(|m| m.name == v.name)
                    .map(|m| m.mount_path.clone())
                    .unwrap_or_default();
                let secret = v
                    .secret
                    .as_ref()
                    .and_then(|s| s.secret_name.clone())
                    .unwrap_or_default();
                (v.name.clone(), secret, at)
            })
            .collect();
        (
            ctr.command.clone().unwrap_or_default().join(" "),
            ctr.image.clone().unwrap_or_default(),
            volumes,
        )
    }

    #[test]
    fn every_services_migration_jobs_run_the_childs_own_command_lines_on_its_configuration() {
        use controlplane_render::{cinder, glance, neutron, nova, placement};
        let c = full_cluster();
        let joined = |v: Vec<String>| v.join(" ");
        let cases: [(&str, String); 15] = [
            (
                "Migrate/keystone/expand",
                "keystone-manage --config-file /etc/keystone/keystone.conf db_sync --expand".into(),
            ),
            (
                "Migrate/placement/db-sync",
                joined(placement::db_sync_command("placement-manage", placement::POD_CONFIG_DIR)),
            ),
            (
                "Migrate/glance/expand",
                "glance-manage --config-file /etc/glance/glance-api.conf db expand".into(),
            ),
            (
                "Migrate/glance/migrate",
                "glance-manage --config-file /etc/glance/glance-api.conf db migrate".into(),
            ),
            (
                "Migrate/neutron/expand",
                joined(neutron::db_expand_command("neutron-db-manage", &neutron::Paths::pod())),
            ),
            (
                "Migrate/nova/api-db-sync",
                joined(nova::api_db_sync_command("nova-manage", &nova::Paths::pod())),
            ),
            (
                "Migrate/nova/db-sync",
                joined(nova::db_sync_command("nova-manage", &nova::Paths::pod())),
            ),
            (
                "Migrate/cinder/db-sync",
                joined(cinder::db_sync_command("cinder-manage", &cinder::Paths::pod())),
            ),
            (
                "PostMigrate/keystone/contract",
                "keystone-manage --config-file /etc/keystone/keystone.conf db_sync --contract"
                    .into(),
            ),
            (
                "PostMigrate/placement/online-data-migrations",
                "placement-manage --config-file /etc/placement/placement.conf db online_data_migrations"
                    .into(),
            ),
            (
                "PostMigrate/glance/contract",
                "glance-manage --config-file /etc/glance/glance-api.conf db contract".into(),
            ),
            (
                "PostMigrate/neutron/contract",
                joined(neutron::db_contract_command("neutron-db-manage", &neutron::Paths::pod())),
            ),
            (
                "PostMigrate/nova/online-data-migrations",
                joined(nova::online_data_migrations_command("nova-manage", &nova::Paths::pod())),
            ),
            (
                "PostMigrate/cinder/online-data-migrations",
                joined(cinder::online_data_migrations_command(
                    "cinder-manage",
                    &cinder::Paths::pod(),
                )),
            ),
            (
                "Migrate/keystone/migrate",
                "keystone-manage --config-file /etc/keystone/keystone.conf db_sync --migrate".into(),
            ),
        ];
        // Glance's child syncs with `db_sync` on the same file the upgrade's steps read.
        assert!(
            joined(glance::db_sync_command(
                "glance-manage",
                glance::POD_CONFIG_DIR
            ))
            .starts_with("glance-manage --config-file /etc/glance/glance-api.conf ")
        );
        // Neutron's commands name the ML2 plugin's file after neutron.conf.
        assert!(cases[4].1.starts_with(
            "neutron-db-manage --config-file /etc/neutron/rendered/neutron.conf --config-file /etc/neutron/rendered/ml2_conf.ini upgrade"
        ));
        let mut covered: Vec<&str> = Vec::new();
        for (name, want) in &cases {
            let svc = name.split('/').nth(1).unwrap_or_default();
            let (command, image, volumes) = job_of(&c, name);
            assert_eq!(&command, want, "{name}");
            assert_eq!(image, format!("localhost/openstack-{svc}:2026.1"), "{name}");
            let dir = match svc {
                "keystone" => "/etc/keystone",
                "placement" => placement::POD_CONFIG_DIR,
                "glance" => glance::POD_CONFIG_DIR,
                "neutron" => neutron::POD_CONFIG_DIR,
                "nova" => nova::POD_CONFIG_DIR,
                _ => cinder::POD_CONFIG_DIR,
            };
            let mut want_volumes = vec![
                (
                    "config".to_string(),
                    format!("cloud-{svc}-{svc}-config"),
                    dir.to_string(),
                ),
                ("db-ca".into(), "db-ca".into(), DB_CA_DIR.into()),
            ];
            if matches!(svc, "nova" | "cinder") {
                want_volumes.push(("mq-ca".into(), "mq-ca".into(), MQ_CA_DIR.into()));
                want_volumes.push(("mq-client".into(), "mq-client".into(), MQ_CLIENT_DIR.into()));
            }
            want_volumes.push(("cache-ca".into(), "cache-ca".into(), CACHE_CA_DIR.into()));
            assert_eq!(volumes, want_volumes, "{name}");
            covered.push(name);
        }
        // Every migration step of the plan is one of the cases; Horizon has none.
        let mut planned: Vec<String> = upgrade::plan(&c.spec.services, false)
            .iter()
            .filter(|s| s.manage_command().is_some())
            .map(Step::name)
            .collect();
        planned.sort();
        covered.sort();
        assert_eq!(planned, covered);
        assert!(!planned.iter().any(|n| n.contains("horizon")));
    }

    #[test]
    fn prepare_validates_each_childs_spec_at_the_target_release() {
        let c = full_cluster();
        for svc in upgrade::ROLL_ORDER {
            assert_eq!(prepare(&c, svc, "2026.1"), Outcome::Succeeded, "{svc:?}");
            match prepare(&c, svc, "2031.1") {
                Outcome::Failed(m) => assert!(
                    m.starts_with(&format!("{} at 2031.1: ", svc.kind())) && m.contains("release"),
                    "{m}"
                ),
                o => panic!("{svc:?}: {o:?}"),
            }
        }
        // A cluster that lost its message queue cannot run Nova or Cinder at any release.
        let mut c = full_cluster();
        c.spec.external_services.messaging = None;
        for svc in [ServiceName::Nova, ServiceName::Cinder] {
            assert!(
                matches!(prepare(&c, svc, "2026.1"), Outcome::Failed(ref m) if m.contains("messaging")),
                "{svc:?}"
            );
        }
        assert_eq!(
            prepare(&c, ServiceName::Glance, "2026.1"),
            Outcome::Succeeded
        );
    }
}
