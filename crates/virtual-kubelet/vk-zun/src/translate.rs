//! Pod → Zun containers, as a pure function.
//!
//! Each container of a pod (init containers included) becomes one plain Zun
//! container, so every one keeps Zun's logs, exec, attach and stats
//! endpoints (capsule members have none on stock Zun; `docs/virtual-kubelet.md`).
//! What Zun cannot do is refused with the field named, never dropped.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    ConfigMap, Container, EnvVar, Pod, ResourceRequirements, Secret, SecurityContext,
};
use openstack::container::{ZunContainerCreate, ZunNet, ZunRestartPolicy};

use crate::downward;
use crate::labels;
use crate::network::{self, Choice};
use crate::quantity;

pub use crate::network::{NETWORK_ANNOTATION, PROJECT_NETWORK_ANNOTATION};
/// Pod annotation choosing the mapping: `containers` (default) or `capsule`.
pub const MODE_ANNOTATION: &str = "virtual-kubelet.sunet.se/mode";

/// How pods are translated (from the subcommand's flags).
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// The node's name (recorded in labels).
    pub node_name: String,
    /// Default Neutron network (id or name) when the pod names none.
    pub network: Option<String>,
    /// Zun image driver (`docker` or `glance`); `None` = Zun's default.
    pub image_driver: Option<String>,
    /// Send the pod's imagePullPolicy (admin-only in Zun's default policy).
    pub send_pull_policy: bool,
    /// CPUs when a container sets neither limit nor request.
    pub default_cpu: f64,
    /// MiB when a container sets neither limit nor request.
    pub default_memory_mib: u64,
    /// Zun availability zone to ask for.
    pub availability_zone: Option<String>,
    /// The node's IP (`status.hostIP`, `fieldRef: status.hostIP`).
    pub host_ip: String,
    /// The `ZunTenant` the node serves: its namespaces and networks replace `network` and
    /// the annotations' free choice.
    pub tenant: Option<crate::tenant::Tenant>,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            node_name: "virtual-kubelet".into(),
            network: None,
            image_driver: None,
            send_pull_policy: false,
            default_cpu: 0.5,
            default_memory_mib: 512,
            availability_zone: None,
            host_ip: "127.0.0.1".into(),
            tenant: None,
        }
    }
}

/// Why a pod cannot be translated.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TranslateError {
    /// A field Zun cannot honour: the pod fails with `ProviderFailed`.
    #[error("{field}: {why}")]
    Unsupported {
        /// The field's path (`spec.hostNetwork`, `spec.containers[0].livenessProbe`).
        field: String,
        /// Why, and what to do instead.
        why: String,
    },
    /// A referenced ConfigMap/Secret (or key) is missing: the container
    /// waits with `CreateContainerConfigError`, as on a kubelet, and the
    /// create is retried.
    #[error("{0}")]
    MissingReference(String),
}

fn unsupported(field: impl Into<String>, why: impl Into<String>) -> TranslateError {
    TranslateError::Unsupported {
        field: field.into(),
        why: why.into(),
    }
}

/// The objects a pod refers to (ConfigMaps and Secrets of its env, the
/// `OpenstackProject` of its network), fetched beforehand; what is missing
/// is simply absent.
#[derive(Clone, Debug, Default)]
pub struct Referenced {
    /// By name.
    pub config_maps: BTreeMap<String, ConfigMap>,
    /// By name.
    pub secrets: BTreeMap<String, Secret>,
    /// By name.
    pub projects: BTreeMap<String, api::OpenstackProject>,
    /// The pod's Neutron port, created before its containers: the first regular container
    /// is given it, and its fixed IPs are the pod's IPs (`fieldRef: status.podIP(s)`).
    pub port: Option<PodPort>,
    /// The node's CPU capacity (`resourceFieldRef: limits.cpu` without a CPU limit); `None`:
    /// [`Config::default_cpu`].
    pub node_cpu: Option<f64>,
}

/// The pod's own Neutron port.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodPort {
    /// Neutron's id.
    pub id: String,
    /// Its fixed IPs (the pod's IPs).
    pub ips: Vec<String>,
}

/// An object (in the pod's namespace) the pod refers to.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Reference {
    /// A ConfigMap.
    ConfigMap(String),
    /// A Secret.
    Secret(String),
    /// An `OpenstackProject` whose network the pod names.
    OpenstackProject(String),
}

/// What a pod needs from the API before it can be translated.
pub fn references(pod: &Pod) -> Vec<Reference> {
    let mut out = Vec::new();
    if let Ok(Choice::Project(p)) = network::choice(pod, None) {
        out.push(Reference::OpenstackProject(p.project));
    }
    let Some(spec) = &pod.spec else {
        return out;
    };
    for c in spec
        .init_containers
        .iter()
        .flatten()
        .chain(spec.containers.iter())
    {
        for e in c.env.iter().flatten() {
            if let Some(vf) = &e.value_from {
                if let Some(r) = &vf.config_map_key_ref {
                    out.push(Reference::ConfigMap(r.name.clone()));
                }
                if let Some(r) = &vf.secret_key_ref {
                    out.push(Reference::Secret(r.name.clone()));
                }
            }
        }
        for f in c.env_from.iter().flatten() {
            if let Some(r) = &f.config_map_ref {
                out.push(Reference::ConfigMap(r.name.clone()));
            }
            if let Some(r) = &f.secret_ref {
                out.push(Reference::Secret(r.name.clone()));
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

/// Whether a container is an init container.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Role {
    /// Runs to completion before the others, in order.
    Init,
    /// A regular container.
    Main,
}

/// One Zun container to create for one pod container.
#[derive(Clone, Debug, PartialEq)]
pub struct Planned {
    /// The pod container's name.
    pub container: String,
    /// Init or main.
    pub role: Role,
    /// The create request.
    pub create: ZunContainerCreate,
}

/// The translation of a whole pod: init containers in order, then the rest.
#[derive(Clone, Debug, PartialEq)]
pub struct Translation {
    /// Init containers, in order.
    pub init: Vec<Planned>,
    /// Regular containers.
    pub main: Vec<Planned>,
}

/// Check everything about a pod that does not depend on other objects:
/// the fields Zun cannot honour. Runs before anything is created.
pub fn validate(pod: &Pod) -> Result<(), TranslateError> {
    let spec = pod
        .spec
        .as_ref()
        .ok_or_else(|| unsupported("spec", "the pod has no spec"))?;
    if let Some(mode) = pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(MODE_ANNOTATION))
        && mode != "containers"
    {
        return Err(unsupported(
            format!("metadata.annotations[{MODE_ANNOTATION}]"),
            format!(
                "{mode:?} is not supported by this node yet: only \"containers\" (one plain Zun container per pod container, with logs and exec); capsule members have no logs or exec on stock Zun"
            ),
        ));
    }
    network::choice(pod, None)?;
    let flag = |v: Option<bool>, field: &str, why: &str| -> Result<(), TranslateError> {
        if v == Some(true) {
            Err(unsupported(field, why))
        } else {
            Ok(())
        }
    };
    flag(
        spec.host_network,
        "spec.hostNetwork",
        "Zun containers get their own Neutron port; there is no host network to share",
    )?;
    flag(
        spec.host_pid,
        "spec.hostPID",
        "Zun does not share the host's PID namespace",
    )?;
    flag(
        spec.host_ipc,
        "spec.hostIPC",
        "Zun does not share the host's IPC namespace",
    )?;
    flag(
        spec.host_users.map(|u| !u),
        "spec.hostUsers",
        "Zun does not run containers in a user namespace",
    )?;
    flag(
        spec.share_process_namespace,
        "spec.shareProcessNamespace",
        "plain Zun containers do not share a PID namespace",
    )?;
    flag(
        spec.set_hostname_as_fqdn,
        "spec.setHostnameAsFQDN",
        "the node has no cluster DNS domain to append",
    )?;
    if spec.active_deadline_seconds.is_some() {
        return Err(unsupported(
            "spec.activeDeadlineSeconds",
            "not implemented by this node",
        ));
    }
    if spec.dns_config.is_some() {
        return Err(unsupported(
            "spec.dnsConfig",
            "Zun containers use the tenant network's DNS servers",
        ));
    }
    if spec.dns_policy.as_deref() == Some("None") {
        return Err(unsupported(
            "spec.dnsPolicy",
            "\"None\" needs a dnsConfig, which Zun cannot apply",
        ));
    }
    if spec.host_aliases.as_ref().is_some_and(|a| !a.is_empty()) {
        return Err(unsupported(
            "spec.hostAliases",
            "Zun cannot write /etc/hosts entries",
        ));
    }
    if spec
        .image_pull_secrets
        .as_ref()
        .is_some_and(|a| !a.is_empty())
    {
        return Err(unsupported(
            "spec.imagePullSecrets",
            "not implemented by this node (Zun registries are not mapped yet)",
        ));
    }
    if spec
        .ephemeral_containers
        .as_ref()
        .is_some_and(|a| !a.is_empty())
    {
        return Err(unsupported(
            "spec.ephemeralContainers",
            "not implemented by this node",
        ));
    }
    if spec.readiness_gates.as_ref().is_some_and(|a| !a.is_empty()) {
        return Err(unsupported(
            "spec.readinessGates",
            "not implemented by this node",
        ));
    }
    if spec.resources.is_some() {
        return Err(unsupported(
            "spec.resources",
            "pod-level resources: Zun sizes each container on its own; set container resources",
        ));
    }
    if spec.resource_claims.as_ref().is_some_and(|a| !a.is_empty()) {
        return Err(unsupported(
            "spec.resourceClaims",
            "Zun has no dynamic resource allocation",
        ));
    }
    if spec.os.as_ref().is_some_and(|o| o.name != "linux") {
        return Err(unsupported(
            "spec.os.name",
            "this node runs Linux containers only",
        ));
    }
    if let Some(sc) = &spec.security_context {
        let set = [
            ("runAsUser", sc.run_as_user.is_some()),
            ("runAsGroup", sc.run_as_group.is_some()),
            ("runAsNonRoot", sc.run_as_non_root == Some(true)),
            ("fsGroup", sc.fs_group.is_some()),
            ("fsGroupChangePolicy", sc.fs_group_change_policy.is_some()),
            (
                "supplementalGroups",
                sc.supplemental_groups
                    .as_ref()
                    .is_some_and(|g| !g.is_empty()),
            ),
            ("seLinuxOptions", sc.se_linux_options.is_some()),
            ("seccompProfile", sc.seccomp_profile.is_some()),
            ("appArmorProfile", sc.app_armor_profile.is_some()),
            (
                "sysctls",
                sc.sysctls.as_ref().is_some_and(|s| !s.is_empty()),
            ),
            ("windowsOptions", sc.windows_options.is_some()),
        ];
        if let Some((f, _)) = set.iter().find(|(_, on)| *on) {
            return Err(unsupported(
                format!("spec.securityContext.{f}"),
                "Zun cannot apply it, and running without it would be unsafe",
            ));
        }
    }
    crate::volumes::validate(spec)?;
    for (kind, list) in [
        (
            "initContainers",
            spec.init_containers.as_deref().unwrap_or(&[]),
        ),
        ("containers", spec.containers.as_slice()),
    ] {
        for (i, c) in list.iter().enumerate() {
            validate_container(&format!("spec.{kind}[{i}]"), c)?;
        }
    }
    if spec.containers.is_empty() {
        return Err(unsupported("spec.containers", "the pod has no containers"));
    }
    Ok(())
}

fn validate_container(path: &str, c: &Container) -> Result<(), TranslateError> {
    // Probes and hooks run on regular containers ([`crate::prober`]); the API server
    // refuses them on init containers (but for sidecars, refused below).
    let init = path.starts_with("spec.initContainers");
    if let Err(r) = crate::probes::validate(c) {
        return Err(unsupported(format!("{path}.{}", r.field), &r.reason));
    }
    for (field, set) in [
        ("livenessProbe", init && c.liveness_probe.is_some()),
        ("readinessProbe", init && c.readiness_probe.is_some()),
        ("startupProbe", init && c.startup_probe.is_some()),
        ("lifecycle", init && c.lifecycle.is_some()),
        ("restartPolicy", c.restart_policy.is_some()),
        (
            "volumeDevices",
            c.volume_devices.as_ref().is_some_and(|v| !v.is_empty()),
        ),
        (
            "resizePolicy",
            c.resize_policy.as_ref().is_some_and(|v| !v.is_empty()),
        ),
        (
            "restartPolicyRules",
            c.restart_policy_rules
                .as_ref()
                .is_some_and(|v| !v.is_empty()),
        ),
    ] {
        if set {
            return Err(unsupported(
                format!("{path}.{field}"),
                "not implemented by this node",
            ));
        }
    }
    if let Some(r) = &c.resources
        && r.claims.as_ref().is_some_and(|v| !v.is_empty())
    {
        return Err(unsupported(
            format!("{path}.resources.claims"),
            "Zun has no dynamic resource allocation",
        ));
    }
    if let Some(r) = &c.resources {
        for (kind, list) in [("limits", &r.limits), ("requests", &r.requests)] {
            for (name, q) in list.iter().flatten() {
                let known = matches!(name.as_str(), "cpu" | "memory" | "ephemeral-storage");
                if !known {
                    return Err(unsupported(
                        format!("{path}.resources.{kind}[{name}]"),
                        "Zun offers cpu and memory only",
                    ));
                }
                if quantity::parse(&q.0).is_none() {
                    return Err(unsupported(
                        format!("{path}.resources.{kind}[{name}]"),
                        format!("{:?} is not a quantity", q.0),
                    ));
                }
            }
        }
    }
    for (i, p) in c.ports.iter().flatten().enumerate() {
        if p.host_port.is_some_and(|h| h != 0) {
            return Err(unsupported(
                format!("{path}.ports[{i}].hostPort"),
                "Zun containers have no host ports; the pod IP is reachable on the tenant network",
            ));
        }
        if p.host_ip.is_some() {
            return Err(unsupported(
                format!("{path}.ports[{i}].hostIP"),
                "Zun containers have no host ports",
            ));
        }
    }
    if let Some(sc) = &c.security_context {
        security_context(&format!("{path}.securityContext"), sc)?;
    }
    for (i, e) in c.env.iter().flatten().enumerate() {
        if let Some(vf) = &e.value_from {
            if vf.file_key_ref.is_some() {
                return Err(unsupported(
                    format!("{path}.env[{i}].valueFrom.fileKeyRef"),
                    "not implemented by this node",
                ));
            }
            if let Some(f) = &vf.field_ref
                && !downward::field_path_supported(&f.field_path)
            {
                return Err(unsupported(
                    format!("{path}.env[{i}].valueFrom.fieldRef.fieldPath"),
                    format!("{:?} is not supported in env", f.field_path),
                ));
            }
        }
    }
    Ok(())
}

fn security_context(path: &str, sc: &SecurityContext) -> Result<(), TranslateError> {
    if sc.privileged == Some(true) {
        return Err(unsupported(
            format!("{path}.privileged"),
            "privileged containers are refused (Zun's default policy denies them to everybody)",
        ));
    }
    let caps = sc.capabilities.as_ref().is_some_and(|c| {
        c.add.as_ref().is_some_and(|a| !a.is_empty())
            || c.drop.as_ref().is_some_and(|d| !d.is_empty())
    });
    let set = [
        ("capabilities", caps),
        ("runAsUser", sc.run_as_user.is_some()),
        ("runAsGroup", sc.run_as_group.is_some()),
        ("runAsNonRoot", sc.run_as_non_root == Some(true)),
        (
            "readOnlyRootFilesystem",
            sc.read_only_root_filesystem == Some(true),
        ),
        (
            "allowPrivilegeEscalation",
            sc.allow_privilege_escalation == Some(false),
        ),
        ("procMount", sc.proc_mount.is_some()),
        ("seLinuxOptions", sc.se_linux_options.is_some()),
        ("seccompProfile", sc.seccomp_profile.is_some()),
        ("appArmorProfile", sc.app_armor_profile.is_some()),
        ("windowsOptions", sc.windows_options.is_some()),
    ];
    if let Some((f, _)) = set.iter().find(|(_, on)| *on) {
        return Err(unsupported(
            format!("{path}.{f}"),
            "Zun cannot apply it, and running without it would be unsafe",
        ));
    }
    Ok(())
}

/// The pod's Neutron network (id or name) as the pod, its `OpenstackProject` (in `refs`) or
/// the node's `--network` names it; `None`: Zun picks one.
pub fn pod_network(
    pod: &Pod,
    refs: &Referenced,
    cfg: &Config,
) -> Result<Option<String>, TranslateError> {
    let ns = pod
        .metadata
        .namespace
        .clone()
        .unwrap_or_else(|| "default".into());
    if let Some(t) = &cfg.tenant {
        return Ok(Some(t.network_for(pod)?.network.clone()));
    }
    Ok(match network::choice(pod, cfg.network.as_deref())? {
        Choice::Neutron(n) => Some(n),
        Choice::Project(r) => Some(network::resolve(&r, &ns, refs.projects.get(&r.project))?),
        Choice::Default => None,
    })
}

/// Translate a validated pod. `refs` holds what [`references`] named.
pub fn translate(
    pod: &Pod,
    refs: &Referenced,
    cfg: &Config,
) -> Result<Translation, TranslateError> {
    validate(pod)?;
    let spec = pod
        .spec
        .as_ref()
        .ok_or_else(|| unsupported("spec", "the pod has no spec"))?;
    let meta = &pod.metadata;
    let ns = meta.namespace.clone().unwrap_or_else(|| "default".into());
    let name = meta.name.clone().unwrap_or_default();
    let uid = meta.uid.clone().unwrap_or_default();
    let network = pod_network(pod, refs, cfg)?;
    // `hostnameOverride` takes precedence over `hostname` (and `subdomain`, which only makes
    // the FQDN, and there is no cluster DNS domain here).
    let hostname = hostname(
        spec.hostname_override
            .as_deref()
            .or(spec.hostname.as_deref())
            .filter(|h| !h.is_empty())
            .unwrap_or(&name),
    );
    let one = |c: &Container, role: Role, idx: usize| -> Result<Planned, TranslateError> {
        let path = match role {
            Role::Init => format!("spec.initContainers[{idx}]"),
            Role::Main => format!("spec.containers[{idx}]"),
        };
        let (cpu, mem_mib) = effective_resources(c.resources.as_ref(), cfg);
        let env = environment(&path, pod, c, refs, cfg)?;
        let (entrypoint, command) = command_and_args(c, &env);
        let mut lbl = labels::for_container(&cfg.node_name, &ns, &name, &uid, &c.name, role);
        lbl.retain(|_, v| !v.is_empty());
        let image = c
            .image
            .clone()
            .filter(|i| !i.is_empty())
            .ok_or_else(|| unsupported(format!("{path}.image"), "an image is required"))?;
        // The container given the pod's port: Zun would make a security group for exposed
        // ports that it applies only to ports it creates; the node puts the pod's own group on
        // the port instead (`pod_port`).
        let given_port = refs
            .port
            .as_ref()
            .filter(|_| role == Role::Main && idx == 0);
        let exposed_ports = c
            .ports
            .iter()
            .flatten()
            .map(|p| {
                (
                    format!(
                        "{}/{}",
                        p.container_port,
                        p.protocol.as_deref().unwrap_or("TCP").to_ascii_lowercase()
                    ),
                    serde_json::json!({}),
                )
            })
            .filter(|_| given_port.is_none())
            .collect();
        Ok(Planned {
            container: c.name.clone(),
            role,
            create: ZunContainerCreate {
                name: labels::zun_name(&ns, &name, &c.name, &uid),
                image,
                entrypoint,
                command,
                cpu: Some(cpu),
                memory: Some(mem_mib),
                environment: env,
                workdir: c.working_dir.clone().filter(|w| !w.is_empty()),
                labels: lbl,
                image_pull_policy: if cfg.send_pull_policy {
                    c.image_pull_policy
                        .as_deref()
                        .map(|p| p.to_ascii_lowercase())
                } else {
                    None
                },
                image_driver: cfg.image_driver.clone(),
                // Restarts are the node's job, so restartCount and
                // lastState are exact and OnFailure/Never hold.
                restart_policy: Some(ZunRestartPolicy {
                    name: "no".into(),
                    max_retry: None,
                }),
                nets: match given_port {
                    // Zun binds the given port and, since it did not create it, leaves it
                    // behind on delete (`preserve_on_delete`): the node deletes it.
                    Some(port) => vec![ZunNet {
                        port: Some(port.id.clone()),
                        ..Default::default()
                    }],
                    None => network
                        .iter()
                        .map(|n| ZunNet {
                            network: Some(n.clone()),
                            ..Default::default()
                        })
                        .collect(),
                },
                exposed_ports,
                hostname: Some(hostname.clone()),
                availability_zone: cfg.availability_zone.clone(),
                interactive: c.stdin.filter(|s| *s),
                tty: c.tty.filter(|t| *t),
                run: true,
                ..Default::default()
            },
        })
    };
    let init = spec
        .init_containers
        .iter()
        .flatten()
        .enumerate()
        .map(|(i, c)| one(c, Role::Init, i))
        .collect::<Result<Vec<_>, _>>()?;
    let main = spec
        .containers
        .iter()
        .enumerate()
        .map(|(i, c)| one(c, Role::Main, i))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Translation { init, main })
}

/// A hostname Zun accepts (2–63 characters) from the pod's.
fn hostname(h: &str) -> String {
    let mut s: String = h.chars().take(63).collect();
    while s.ends_with(['-', '.']) {
        s.pop();
    }
    if s.len() < 2 {
        s = format!("{s}-pod");
    }
    s
}

/// CPUs and MiB for Zun: limits win, then requests, then the defaults.
pub fn effective_resources(r: Option<&ResourceRequirements>, cfg: &Config) -> (f64, u64) {
    let get = |name: &str| -> Option<f64> {
        let r = r?;
        r.limits
            .as_ref()
            .and_then(|l| l.get(name))
            .or_else(|| r.requests.as_ref().and_then(|l| l.get(name)))
            .and_then(|q| quantity::parse(&q.0))
    };
    let cpu = get("cpu").unwrap_or(cfg.default_cpu);
    let mem = get("memory")
        .map(quantity::bytes_to_mib)
        .unwrap_or(cfg.default_memory_mib)
        .max(4);
    (cpu, mem)
}

/// Kubernetes semantics as Zun's (entrypoint, command): `command` replaces
/// the image's ENTRYPOINT and `args` its CMD; a `command` without `args`
/// runs with no CMD at all. Stock Zun fills an empty `command` with the
/// image's CMD (zun 18 `zun/container/docker/driver.py` `create`:
/// `container.command = command or image Cmd`), so such a `command` is split:
/// its first word is the entrypoint, the rest Zun's command, and the argv is
/// exactly the pod's. A one-word `command` without `args` cannot be split and
/// gets the image's CMD appended. `$(VAR)` references to the container's env
/// are expanded, `$$` escapes.
pub fn command_and_args(
    c: &Container,
    env: &BTreeMap<String, String>,
) -> (Option<Vec<String>>, Option<Vec<String>>) {
    let expand_all = |v: &Vec<String>| v.iter().map(|s| expand(s, env)).collect::<Vec<_>>();
    let command = c.command.as_ref().filter(|c| !c.is_empty()).map(expand_all);
    let args = c.args.as_ref().filter(|a| !a.is_empty()).map(expand_all);
    match (command, args) {
        (Some(mut entrypoint), None) if entrypoint.len() > 1 => {
            let rest = entrypoint.split_off(1);
            (Some(entrypoint), Some(rest))
        }
        other => other,
    }
}

/// Kubernetes' `$(VAR)` expansion (`third_party/forked/golang/expansion`):
/// known variables are replaced, unknown references are kept verbatim, and
/// `$$` yields a literal `$`.
pub fn expand(input: &str, env: &BTreeMap<String, String>) -> String {
    let b = input.as_bytes();
    let mut out = String::with_capacity(input.len());
    let mut i = 0;
    let mut last = 0;
    while i < b.len() {
        if b[i] == b'$' && i + 1 < b.len() {
            out.push_str(&input[last..i]);
            match b[i + 1] {
                b'$' => {
                    out.push('$');
                    i += 2;
                }
                b'(' => match input[i + 2..].find(')') {
                    Some(end) => {
                        let name = &input[i + 2..i + 2 + end];
                        match env.get(name) {
                            Some(v) => out.push_str(v),
                            None => out.push_str(&input[i..i + 3 + end]),
                        }
                        i += 3 + end;
                    }
                    None => {
                        out.push_str(&input[i..]);
                        i = b.len();
                    }
                },
                _ => {
                    out.push('$');
                    i += 1;
                }
            }
            last = i;
        } else {
            i += 1;
        }
    }
    if last < b.len() {
        out.push_str(&input[last..]);
    }
    out
}

/// The container's environment: `envFrom` sources in order, then `env` in
/// order (later wins), values expanded against what came before.
fn environment(
    path: &str,
    pod: &Pod,
    c: &Container,
    refs: &Referenced,
    cfg: &Config,
) -> Result<BTreeMap<String, String>, TranslateError> {
    let mut env = BTreeMap::new();
    for (i, f) in c.env_from.iter().flatten().enumerate() {
        let prefix = f.prefix.clone().unwrap_or_default();
        if let Some(r) = &f.config_map_ref {
            match refs.config_maps.get(&r.name) {
                Some(cm) => {
                    for (k, v) in cm.data.iter().flatten() {
                        env.insert(format!("{prefix}{k}"), v.clone());
                    }
                }
                None if r.optional == Some(true) => {}
                None => {
                    return Err(TranslateError::MissingReference(format!(
                        "{path}.envFrom[{i}]: configmap {:?} not found",
                        r.name
                    )));
                }
            }
        }
        if let Some(r) = &f.secret_ref {
            match refs.secrets.get(&r.name) {
                Some(s) => {
                    for (k, v) in s.data.iter().flatten() {
                        env.insert(
                            format!("{prefix}{k}"),
                            String::from_utf8_lossy(&v.0).into_owned(),
                        );
                    }
                }
                None if r.optional == Some(true) => {}
                None => {
                    return Err(TranslateError::MissingReference(format!(
                        "{path}.envFrom[{i}]: secret {:?} not found",
                        r.name
                    )));
                }
            }
        }
    }
    for (i, e) in c.env.iter().flatten().enumerate() {
        if let Some(v) = env_value(&format!("{path}.env[{i}]"), pod, c, e, refs, cfg, &env)? {
            env.insert(e.name.clone(), v);
        }
    }
    Ok(env)
}

#[allow(clippy::too_many_arguments)]
fn env_value(
    path: &str,
    pod: &Pod,
    c: &Container,
    e: &EnvVar,
    refs: &Referenced,
    cfg: &Config,
    so_far: &BTreeMap<String, String>,
) -> Result<Option<String>, TranslateError> {
    let Some(vf) = &e.value_from else {
        return Ok(Some(expand(e.value.as_deref().unwrap_or(""), so_far)));
    };
    if let Some(r) = &vf.config_map_key_ref {
        let v = refs
            .config_maps
            .get(&r.name)
            .and_then(|cm| cm.data.as_ref())
            .and_then(|d| d.get(&r.key))
            .cloned();
        return match (v, r.optional == Some(true)) {
            (Some(v), _) => Ok(Some(v)),
            (None, true) => Ok(None),
            (None, false) => Err(TranslateError::MissingReference(format!(
                "{path}.valueFrom.configMapKeyRef: key {:?} of configmap {:?} not found",
                r.key, r.name
            ))),
        };
    }
    if let Some(r) = &vf.secret_key_ref {
        let v = refs
            .secrets
            .get(&r.name)
            .and_then(|s| s.data.as_ref())
            .and_then(|d| d.get(&r.key))
            .map(|b| String::from_utf8_lossy(&b.0).into_owned());
        return match (v, r.optional == Some(true)) {
            (Some(v), _) => Ok(Some(v)),
            (None, true) => Ok(None),
            (None, false) => Err(TranslateError::MissingReference(format!(
                "{path}.valueFrom.secretKeyRef: key {:?} of secret {:?} not found",
                r.key, r.name
            ))),
        };
    }
    let ctx = downward::Context {
        cfg,
        pod_ips: refs.port.as_ref().map_or(&[][..], |p| p.ips.as_slice()),
        node_cpu: refs.node_cpu.unwrap_or(cfg.default_cpu),
    };
    if let Some(f) = &vf.field_ref {
        return downward::field_ref(
            &format!("{path}.valueFrom.fieldRef.fieldPath"),
            pod,
            &f.field_path,
            &ctx,
        )
        .map(Some);
    }
    if let Some(r) = &vf.resource_field_ref {
        return downward::resource_field_ref(
            &format!("{path}.valueFrom.resourceFieldRef"),
            pod,
            c,
            r,
            &ctx,
        )
        .map(Some);
    }
    Ok(Some(String::new()))
}

#[cfg(test)]
mod tests;
