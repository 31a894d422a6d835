//! The Kubernetes objects of a service, as pure functions of rendered inputs: Secrets, Jobs,
//! the API Deployment and its Service. Every object carries the standard labels and the owner
//! reference of the service CR, so deleting the CR collects them.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::apps::v1::{
    Deployment, DeploymentSpec, DeploymentStrategy, RollingUpdateDeployment,
};
use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::{
    Affinity, Container, ContainerPort, EmptyDirVolumeSource, EnvVar, EnvVarSource, HTTPGetAction,
    PodAffinityTerm, PodAntiAffinity, PodSecurityContext, PodSpec, PodTemplateSpec, Probe,
    ResourceRequirements, Secret, SecretKeySelector, SecretVolumeSource, SecurityContext, Service,
    ServicePort, ServiceSpec, TCPSocketAction, Volume, VolumeMount, WeightedPodAffinityTerm,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use controlplane_api::common::{Resources, ServiceTemplate};

/// Annotation carrying the hash of a Job's inputs or of a Deployment's configuration.
pub const HASH_ANNOTATION: &str = "controlplane.sunet.se/input-hash";
/// Pod-template annotation with the configuration hash: a change rolls the pods.
pub const CONFIG_HASH_ANNOTATION: &str = "controlplane.sunet.se/config-hash";
/// Label naming the Job step (`db-init`, `db-sync`, `bootstrap`).
pub const STEP_LABEL: &str = "controlplane.sunet.se/step";
/// Label naming the owning service CR.
pub const INSTANCE_LABEL: &str = "app.kubernetes.io/instance";
/// The uid and gid the service images run as (`USER 42425:42425` in deploy/images/Dockerfile).
pub const IMAGE_USER: i64 = 42425;

/// The pod security context of every Job and Deployment: the image's user and group, and that
/// group as `fsGroup`, so the 0440 Secret files (configuration, keys, CAs) are readable by the
/// service whatever group the container runtime would give the user.
pub fn pod_security_context() -> PodSecurityContext {
    PodSecurityContext {
        run_as_user: Some(IMAGE_USER),
        run_as_group: Some(IMAGE_USER),
        run_as_non_root: Some(true),
        fs_group: Some(IMAGE_USER),
        ..PodSecurityContext::default()
    }
}

/// Period of the startup probe of a component that listens.
pub const STARTUP_PERIOD_SECONDS: i32 = 5;
/// Failures of the startup probe before the kubelet restarts the container: 120 × 5 s = 10
/// minutes to start (liveness with a fixed initial delay killed API pods still importing).
pub const STARTUP_FAILURES: i32 = 120;

/// Seconds a Job may run before Kubernetes stops it: a hanging db sync fails instead of
/// blocking the service forever.
pub const JOB_DEADLINE_SECONDS: i64 = 900;

/// Who the objects belong to and how they are labelled.
#[derive(Clone, Debug)]
pub struct Owner {
    /// The owner reference of the service CR (controller = true).
    pub reference: OwnerReference,
    /// Namespace of the CR and of every object.
    pub namespace: String,
    /// CR name (the `app.kubernetes.io/instance` label).
    pub instance: String,
    /// Service name (`keystone`), the `app.kubernetes.io/name` label.
    pub service: String,
}

impl Owner {
    /// Standard labels of one component.
    pub fn labels(&self, component: &str) -> BTreeMap<String, String> {
        BTreeMap::from([
            ("app.kubernetes.io/name".to_string(), self.service.clone()),
            (INSTANCE_LABEL.to_string(), self.instance.clone()),
            (
                "app.kubernetes.io/component".to_string(),
                component.to_string(),
            ),
            (
                "app.kubernetes.io/managed-by".to_string(),
                "openstack-operator".to_string(),
            ),
        ])
    }

    fn meta(&self, name: &str, component: &str) -> ObjectMeta {
        ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(self.namespace.clone()),
            labels: Some(self.labels(component)),
            owner_references: Some(vec![self.reference.clone()]),
            ..ObjectMeta::default()
        }
    }
}

/// A Secret with the given string data.
pub fn secret(
    owner: &Owner,
    name: &str,
    component: &str,
    data: BTreeMap<String, String>,
) -> Secret {
    Secret {
        metadata: owner.meta(name, component),
        data: Some(
            data.into_iter()
                .map(|(k, v)| (k, ByteString(v.into_bytes())))
                .collect(),
        ),
        type_: Some("Opaque".into()),
        ..Secret::default()
    }
}

/// An environment variable with a literal value.
pub fn env(name: &str, value: impl Into<String>) -> EnvVar {
    EnvVar {
        name: name.into(),
        value: Some(value.into()),
        ..EnvVar::default()
    }
}

/// An environment variable read from a Secret key.
pub fn env_from_secret(name: &str, secret: &str, key: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value_from: Some(EnvVarSource {
            secret_key_ref: Some(SecretKeySelector {
                name: secret.into(),
                key: key.into(),
                optional: Some(false),
            }),
            ..EnvVarSource::default()
        }),
        ..EnvVar::default()
    }
}

/// A Secret mounted as a directory (not subPath: the kubelet then updates its files in place
/// when the Secret changes, which is how rotated keys reach running pods).
pub fn secret_volume(volume: &str, secret: &str, mount: &str) -> (Volume, VolumeMount) {
    (
        Volume {
            name: volume.into(),
            secret: Some(SecretVolumeSource {
                secret_name: Some(secret.into()),
                default_mode: Some(0o440),
                ..SecretVolumeSource::default()
            }),
            ..Volume::default()
        },
        VolumeMount {
            name: volume.into(),
            mount_path: mount.into(),
            read_only: Some(true),
            ..VolumeMount::default()
        },
    )
}

/// A writable emptyDir mounted at `mount`: a service's state directory (locks, coordination
/// files, mount points), which the images do not have and their user could not create.
pub fn empty_dir_volume(volume: &str, mount: &str) -> (Volume, VolumeMount) {
    (
        Volume {
            name: volume.into(),
            empty_dir: Some(EmptyDirVolumeSource::default()),
            ..Volume::default()
        },
        VolumeMount {
            name: volume.into(),
            mount_path: mount.into(),
            ..VolumeMount::default()
        },
    )
}

fn resources(r: Option<&Resources>) -> Option<ResourceRequirements> {
    let r = r?;
    let q = |m: &BTreeMap<String, String>| {
        (!m.is_empty()).then(|| {
            m.iter()
                .map(|(k, v)| (k.clone(), Quantity(v.clone())))
                .collect()
        })
    };
    Some(ResourceRequirements {
        requests: q(&r.requests),
        limits: q(&r.limits),
        ..ResourceRequirements::default()
    })
}

/// What a Job runs.
#[derive(Clone, Debug)]
pub struct JobParams {
    /// Job name (carries the input hash and attempt).
    pub name: String,
    /// Step name.
    pub step: String,
    /// Input hash.
    pub hash: String,
    /// Image.
    pub image: String,
    /// Command and arguments.
    pub command: Vec<String>,
    /// Environment.
    pub env: Vec<EnvVar>,
    /// Volumes and their mounts.
    pub volumes: Vec<(Volume, VolumeMount)>,
}

/// A Job running one step once. Kubernetes retries the pod twice; the operator retries the Job
/// itself with backoff under a new name, so a failed Job never blocks its step.
pub fn job(owner: &Owner, p: JobParams) -> Job {
    let mut meta = owner.meta(&p.name, &p.step);
    meta.labels
        .get_or_insert_default()
        .insert(STEP_LABEL.into(), p.step.clone());
    meta.annotations = Some(BTreeMap::from([(HASH_ANNOTATION.into(), p.hash.clone())]));
    let mut pod_labels = owner.labels(&p.step);
    pod_labels.insert(STEP_LABEL.into(), p.step.clone());
    Job {
        metadata: meta,
        spec: Some(JobSpec {
            backoff_limit: Some(2),
            active_deadline_seconds: Some(JOB_DEADLINE_SECONDS),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(pod_labels),
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec {
                    restart_policy: Some("Never".into()),
                    security_context: Some(pod_security_context()),
                    containers: vec![Container {
                        name: p.step.clone(),
                        image: Some(p.image.clone()),
                        command: Some(p.command.clone()),
                        env: Some(p.env.clone()),
                        volume_mounts: Some(p.volumes.iter().map(|(_, m)| m.clone()).collect()),
                        ..Container::default()
                    }],
                    volumes: Some(p.volumes.iter().map(|(v, _)| v.clone()).collect()),
                    ..PodSpec::default()
                }),
            },
            ..JobSpec::default()
        }),
        ..Job::default()
    }
}

/// What the API Deployment runs.
#[derive(Clone, Debug)]
pub struct ApiParams {
    /// Deployment name.
    pub name: String,
    /// Image.
    pub image: String,
    /// Command.
    pub command: Vec<String>,
    /// Container port.
    pub port: u16,
    /// HTTP path answering without authentication (probes).
    pub probe_path: String,
    /// Hash of the configuration (pod-template annotation).
    pub config_hash: String,
    /// Volumes and their mounts.
    pub volumes: Vec<(Volume, VolumeMount)>,
}

/// The API Deployment: probes, resources, spread over nodes, rolling updates that keep
/// capacity, and the configuration hash on the pod template so a config change rolls it.
pub fn api_deployment(owner: &Owner, t: &ServiceTemplate, p: ApiParams) -> Deployment {
    component_deployment(
        owner,
        t,
        ComponentParams {
            name: p.name,
            component: "api".into(),
            image: p.image,
            command: p.command,
            check: Check::Http {
                port: p.port,
                path: p.probe_path,
            },
            config_hash: p.config_hash,
            volumes: p.volumes,
            replicas: t.replicas.unwrap_or(1),
            privileged: false,
        },
    )
}

/// How the kubelet checks a component's container.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Check {
    /// An HTTP GET of `path` on `port` that answers without authentication.
    Http {
        /// Container port (also exposed as port `api`).
        port: u16,
        /// Path.
        path: String,
    },
    /// A TCP connection to `port` (also exposed as port `api`).
    Tcp {
        /// Container port.
        port: u16,
    },
    /// No listener to check (RPC workers such as a conductor or scheduler: the process exits
    /// when it fails, and the kubelet restarts it).
    None,
}

/// What one component's Deployment runs (an API, a worker, a proxy).
#[derive(Clone, Debug)]
pub struct ComponentParams {
    /// Deployment name.
    pub name: String,
    /// Component (`api`, `conductor`, ...): the `app.kubernetes.io/component` label the
    /// Deployment selects its pods by, and the container's name.
    pub component: String,
    /// Image.
    pub image: String,
    /// Command.
    pub command: Vec<String>,
    /// Readiness and liveness check.
    pub check: Check,
    /// Hash of the configuration (pod-template annotation).
    pub config_hash: String,
    /// Volumes and their mounts.
    pub volumes: Vec<(Volume, VolumeMount)>,
    /// Replicas.
    pub replicas: i32,
    /// Whether the container runs privileged (an NFS volume backend mounts shares).
    pub privileged: bool,
}

/// A component's Deployment: probes, resources, spread over nodes, rolling updates that keep
/// capacity, and the configuration hash on the pod template so a config change rolls it.
pub fn component_deployment(owner: &Owner, t: &ServiceTemplate, p: ComponentParams) -> Deployment {
    let labels = owner.labels(&p.component);
    let probe = |period: i32, failures: i32| -> Option<Probe> {
        let base = Probe {
            period_seconds: Some(period),
            timeout_seconds: Some(5),
            failure_threshold: Some(failures),
            ..Probe::default()
        };
        match &p.check {
            Check::Http { port, path } => Some(Probe {
                http_get: Some(HTTPGetAction {
                    path: Some(path.clone()),
                    port: IntOrString::Int(i32::from(*port)),
                    ..HTTPGetAction::default()
                }),
                ..base
            }),
            Check::Tcp { port } => Some(Probe {
                tcp_socket: Some(TCPSocketAction {
                    port: IntOrString::Int(i32::from(*port)),
                    ..TCPSocketAction::default()
                }),
                ..base
            }),
            Check::None => None,
        }
    };
    let port = match &p.check {
        Check::Http { port, .. } | Check::Tcp { port } => Some(*port),
        Check::None => None,
    };
    Deployment {
        metadata: owner.meta(&p.name, &p.component),
        spec: DeploymentSpec {
            replicas: Some(p.replicas),
            selector: LabelSelector {
                match_labels: Some(labels.clone()),
                ..LabelSelector::default()
            },
            strategy: Some(DeploymentStrategy {
                type_: Some("RollingUpdate".into()),
                rolling_update: Some(RollingUpdateDeployment {
                    max_unavailable: Some(IntOrString::Int(0)),
                    max_surge: Some(IntOrString::Int(1)),
                }),
            }),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels.clone()),
                    annotations: Some(BTreeMap::from([(
                        CONFIG_HASH_ANNOTATION.into(),
                        p.config_hash.clone(),
                    )])),
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec {
                    affinity: Some(Affinity {
                        pod_anti_affinity: Some(PodAntiAffinity {
                            preferred_during_scheduling_ignored_during_execution: Some(vec![
                                WeightedPodAffinityTerm {
                                    weight: 100,
                                    pod_affinity_term: PodAffinityTerm {
                                        label_selector: Some(LabelSelector {
                                            match_labels: Some(labels.clone()),
                                            ..LabelSelector::default()
                                        }),
                                        topology_key: "kubernetes.io/hostname".into(),
                                        ..PodAffinityTerm::default()
                                    },
                                },
                            ]),
                            ..PodAntiAffinity::default()
                        }),
                        ..Affinity::default()
                    }),
                    node_selector: (!t.node_selector.is_empty()).then(|| t.node_selector.clone()),
                    security_context: Some(pod_security_context()),
                    containers: vec![Container {
                        name: p.component.clone(),
                        image: Some(p.image.clone()),
                        command: Some(p.command.clone()),
                        ports: port.map(|port| {
                            vec![ContainerPort {
                                name: Some("api".into()),
                                container_port: i32::from(port),
                                ..ContainerPort::default()
                            }]
                        }),
                        // The startup probe holds the other two back while the service
                        // imports and connects (minutes on a busy node), up to
                        // STARTUP_SECONDS; after it passed, liveness restarts a pod that
                        // stopped answering for a minute.
                        startup_probe: probe(STARTUP_PERIOD_SECONDS, STARTUP_FAILURES),
                        readiness_probe: probe(10, 3),
                        liveness_probe: probe(10, 6),
                        resources: resources(t.resources.as_ref()),
                        security_context: p.privileged.then(|| SecurityContext {
                            privileged: Some(true),
                            ..SecurityContext::default()
                        }),
                        volume_mounts: Some(p.volumes.iter().map(|(_, m)| m.clone()).collect()),
                        // The services write no termination message file: the tail of the
                        // log (a traceback's exception) becomes the message of a failed run,
                        // which the operator's Degraded condition quotes.
                        termination_message_policy: Some("FallbackToLogsOnError".into()),
                        ..Container::default()
                    }],
                    volumes: Some(p.volumes.iter().map(|(v, _)| v.clone()).collect()),
                    ..PodSpec::default()
                }),
            },
            ..DeploymentSpec::default()
        },
        ..Deployment::default()
    }
}

/// The ClusterIP Service in front of one component's pods (port `api`).
pub fn component_service(owner: &Owner, name: &str, component: &str, port: u16) -> Service {
    Service {
        metadata: owner.meta(name, component),
        spec: Some(ServiceSpec {
            selector: Some(owner.labels(component)),
            ports: Some(vec![ServicePort {
                name: Some("api".into()),
                port: i32::from(port),
                target_port: Some(IntOrString::Int(i32::from(port))),
                protocol: Some("TCP".into()),
                ..ServicePort::default()
            }]),
            type_: Some("ClusterIP".into()),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    }
}

/// The ClusterIP Service in front of the API pods.
pub fn api_service(owner: &Owner, name: &str, port: u16) -> Service {
    component_service(owner, name, "api", port)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner() -> Owner {
        Owner {
            reference: OwnerReference::default(),
            namespace: "ns".into(),
            instance: "svc".into(),
            service: "nova".into(),
        }
    }

    #[test]
    fn jobs_and_deployments_run_as_the_image_user_with_its_group_owning_secret_files() {
        let job = job(
            &owner(),
            JobParams {
                name: "svc-db-sync-h-1".into(),
                step: "db-sync".into(),
                hash: "h".into(),
                image: "img".into(),
                command: vec!["true".into()],
                env: vec![],
                volumes: vec![secret_volume("config", "svc-config", "/etc/nova")],
            },
        );
        let dep = api_deployment(
            &owner(),
            &ServiceTemplate::default(),
            ApiParams {
                name: "svc-api".into(),
                image: "img".into(),
                command: vec!["uwsgi".into()],
                port: 8774,
                probe_path: "/".into(),
                config_hash: "c".into(),
                volumes: vec![],
            },
        );
        let pods = [
            job.spec.and_then(|s| s.template.spec).expect("job pod"),
            dep.spec.template.spec.expect("pod"),
        ];
        for pod in pods {
            let sc = pod.security_context.expect("security context");
            assert_eq!(sc.run_as_user, Some(42425));
            assert_eq!(sc.run_as_group, Some(42425));
            // Secret volumes are 0440: readable through the group the kubelet gives them.
            assert_eq!(sc.fs_group, Some(42425));
        }
    }

    #[test]
    fn listening_components_get_a_generous_startup_probe_before_liveness() {
        let dep = api_deployment(
            &owner(),
            &ServiceTemplate::default(),
            ApiParams {
                name: "svc-api".into(),
                image: "img".into(),
                command: vec!["uwsgi".into()],
                port: 8774,
                probe_path: "/".into(),
                config_hash: "c".into(),
                volumes: vec![],
            },
        );
        let pod = dep.spec.template.spec.expect("pod");
        let c = &pod.containers[0];
        let startup = c.startup_probe.as_ref().expect("startup probe");
        let budget = startup.period_seconds.unwrap_or(10) * startup.failure_threshold.unwrap_or(3);
        assert!(budget >= 600, "{budget} s to start");
        assert_eq!(
            startup.http_get.as_ref().and_then(|g| g.path.as_deref()),
            Some("/")
        );
        // After startup, liveness restarts a pod that stops answering within about a minute,
        // without an initial delay of its own (the startup probe holds it back).
        let live = c.liveness_probe.as_ref().expect("liveness");
        assert_eq!(live.initial_delay_seconds, None);
        let window = live.period_seconds.unwrap_or(10) * live.failure_threshold.unwrap_or(3);
        assert!((30..=120).contains(&window), "{window}");
        // Workers without a listener get none of the three.
        let worker = component_deployment(
            &owner(),
            &ServiceTemplate::default(),
            ComponentParams {
                name: "svc-conductor".into(),
                component: "conductor".into(),
                image: "img".into(),
                command: vec!["nova-conductor".into()],
                check: Check::None,
                config_hash: "c".into(),
                volumes: vec![],
                replicas: 1,
                privileged: false,
            },
        );
        let c = &worker.spec.template.spec.expect("pod").containers[0];
        assert!(c.startup_probe.is_none() && c.liveness_probe.is_none());
    }

    #[test]
    fn a_failed_containers_log_tail_is_its_termination_message() {
        // The operator's Degraded condition quotes the last termination message; the services
        // write no message file, so without the fallback it would always be empty.
        let dep = api_deployment(
            &owner(),
            &ServiceTemplate::default(),
            ApiParams {
                name: "svc-api".into(),
                image: "img".into(),
                command: vec!["uwsgi".into()],
                port: 8774,
                probe_path: "/".into(),
                config_hash: "c".into(),
                volumes: vec![],
            },
        );
        let c = &dep.spec.template.spec.expect("pod").containers[0];
        assert_eq!(
            c.termination_message_policy.as_deref(),
            Some("FallbackToLogsOnError")
        );
    }
}
