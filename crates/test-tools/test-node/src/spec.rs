//! Pod container → Docker create request, as pure functions.
//!
//! - `command`/`args` → `Entrypoint`/`Cmd` exactly as the kubelet maps them onto the image's
//!   (Docker drops the image's `Cmd` when `Entrypoint` is given, as the kubelet does when
//!   `command` is), with `$(VAR)` expanded ([`vk_zun::translate::expand`]).
//! - `env`: `envFrom` in order, then `env` in order, each value expanded against what came
//!   before; `valueFrom` Secret/ConfigMap keys and the downward API
//!   ([`vk_zun::downward`]). A missing reference is a `CreateContainerConfigError`.
//! - The user: `runAsUser`/`runAsGroup` (container over pod), else the image's; `fsGroup`
//!   and `supplementalGroups` as extra groups.
//! - All containers of a pod join its sandbox's network namespace (`container:<id>`), so they
//!   share the pod IP and `localhost`, as in a pod.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ConfigMap, Container, Pod, Secret};
use serde_json::{Value, json};
use vk_zun::downward;
use vk_zun::translate::{Config, Role, TranslateError, expand};

/// Label keys on the node's containers.
pub mod labels {
    /// The node's name (the list filter).
    pub const NODE: &str = "test-node.openstack-operator/node";
    /// The pod's uid.
    pub const POD_UID: &str = "test-node.openstack-operator/pod-uid";
    /// The pod's namespace.
    pub const NAMESPACE: &str = "test-node.openstack-operator/pod-namespace";
    /// The pod's name.
    pub const POD: &str = "test-node.openstack-operator/pod-name";
    /// The pod container's name (absent on the sandbox).
    pub const CONTAINER: &str = "test-node.openstack-operator/container";
    /// `init`, `main` or `sandbox`.
    pub const ROLE: &str = "test-node.openstack-operator/role";
    /// The run (restart count at creation).
    pub const ATTEMPT: &str = "test-node.openstack-operator/attempt";
}

/// The objects a pod's env refers to, fetched beforehand; what is missing is absent.
#[derive(Clone, Debug, Default)]
pub struct Refs {
    /// ConfigMaps by name.
    pub config_maps: BTreeMap<String, ConfigMap>,
    /// Secrets by name.
    pub secrets: BTreeMap<String, Secret>,
}

/// The ConfigMaps and Secrets a container's env names.
pub fn env_references(c: &Container) -> (Vec<String>, Vec<String>) {
    let mut cms = Vec::new();
    let mut secrets = Vec::new();
    for f in c.env_from.iter().flatten() {
        if let Some(r) = &f.config_map_ref {
            cms.push(r.name.clone());
        }
        if let Some(r) = &f.secret_ref {
            secrets.push(r.name.clone());
        }
    }
    for e in c.env.iter().flatten() {
        if let Some(vf) = &e.value_from {
            if let Some(r) = &vf.config_map_key_ref {
                cms.push(r.name.clone());
            }
            if let Some(r) = &vf.secret_key_ref {
                secrets.push(r.name.clone());
            }
        }
    }
    (cms, secrets)
}

fn missing(m: String) -> TranslateError {
    TranslateError::MissingReference(m)
}

/// The container's environment: `envFrom` sources in order, then `env` in order (later wins).
pub fn environment(
    path: &str,
    pod: &Pod,
    c: &Container,
    refs: &Refs,
    ctx: &downward::Context,
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
                    return Err(missing(format!(
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
                    return Err(missing(format!(
                        "{path}.envFrom[{i}]: secret {:?} not found",
                        r.name
                    )));
                }
            }
        }
    }
    for (i, e) in c.env.iter().flatten().enumerate() {
        let at = format!("{path}.env[{i}]");
        let Some(vf) = &e.value_from else {
            let v = expand(e.value.as_deref().unwrap_or(""), &env);
            env.insert(e.name.clone(), v);
            continue;
        };
        let value = if let Some(r) = &vf.config_map_key_ref {
            let v = refs
                .config_maps
                .get(&r.name)
                .and_then(|cm| cm.data.as_ref())
                .and_then(|d| d.get(&r.key))
                .cloned();
            match (v, r.optional == Some(true)) {
                (Some(v), _) => Some(v),
                (None, true) => None,
                (None, false) => {
                    return Err(missing(format!(
                        "{at}.valueFrom.configMapKeyRef: key {:?} of configmap {:?} not found",
                        r.key, r.name
                    )));
                }
            }
        } else if let Some(r) = &vf.secret_key_ref {
            let v = refs
                .secrets
                .get(&r.name)
                .and_then(|s| s.data.as_ref())
                .and_then(|d| d.get(&r.key))
                .map(|b| String::from_utf8_lossy(&b.0).into_owned());
            match (v, r.optional == Some(true)) {
                (Some(v), _) => Some(v),
                (None, true) => None,
                (None, false) => {
                    return Err(missing(format!(
                        "{at}.valueFrom.secretKeyRef: key {:?} of secret {:?} not found",
                        r.key, r.name
                    )));
                }
            }
        } else if let Some(f) = &vf.field_ref {
            Some(downward::field_ref(
                &format!("{at}.valueFrom.fieldRef.fieldPath"),
                pod,
                &f.field_path,
                ctx,
            )?)
        } else if let Some(r) = &vf.resource_field_ref {
            Some(downward::resource_field_ref(
                &format!("{at}.valueFrom.resourceFieldRef"),
                pod,
                c,
                r,
                ctx,
            )?)
        } else {
            return Err(TranslateError::Unsupported {
                field: format!("{at}.valueFrom"),
                why: "no source this node resolves (configMapKeyRef, secretKeyRef, fieldRef, resourceFieldRef)".into(),
            });
        };
        if let Some(v) = value {
            env.insert(e.name.clone(), v);
        }
    }
    Ok(env)
}

/// The `User` to run as: `runAsUser`/`runAsGroup` of the container, else of the pod, else the
/// image's (`image_user`, `name[:group]`, empty for root).
pub fn user(pod: &Pod, c: &Container, image_user: &str) -> Option<String> {
    let pod_sc = pod.spec.as_ref().and_then(|s| s.security_context.as_ref());
    let c_sc = c.security_context.as_ref();
    let uid = c_sc
        .and_then(|s| s.run_as_user)
        .or_else(|| pod_sc.and_then(|s| s.run_as_user));
    let gid = c_sc
        .and_then(|s| s.run_as_group)
        .or_else(|| pod_sc.and_then(|s| s.run_as_group));
    match (uid, gid) {
        (Some(u), Some(g)) => Some(format!("{u}:{g}")),
        (Some(u), None) => Some(u.to_string()),
        (None, Some(g)) => {
            let u = image_user.split(':').next().unwrap_or("");
            Some(format!("{}:{g}", if u.is_empty() { "0" } else { u }))
        }
        (None, None) => None,
    }
}

/// `fsGroup` and `supplementalGroups`: the extra groups of every container.
pub fn extra_groups(pod: &Pod) -> Vec<String> {
    let sc = pod.spec.as_ref().and_then(|s| s.security_context.as_ref());
    let mut out: Vec<String> = sc
        .and_then(|s| s.fs_group)
        .into_iter()
        .chain(
            sc.and_then(|s| s.supplemental_groups.clone())
                .into_iter()
                .flatten(),
        )
        .map(|g| g.to_string())
        .collect();
    out.dedup();
    out
}

/// `command`/`args` → (`Entrypoint`, `Cmd`); `None` keeps the image's.
pub fn entrypoint_and_cmd(
    c: &Container,
    env: &BTreeMap<String, String>,
) -> (Option<Vec<String>>, Option<Vec<String>>) {
    let all = |v: &Vec<String>| v.iter().map(|s| expand(s, env)).collect::<Vec<_>>();
    (
        c.command.as_ref().filter(|v| !v.is_empty()).map(all),
        c.args.as_ref().filter(|v| !v.is_empty()).map(all),
    )
}

/// Bytes of a quantity (`512Mi`), CPUs of one (`500m`).
fn memory_bytes(q: &str) -> Option<i64> {
    let n = downward::nanos(q)?;
    i64::try_from(n.div_euclid(1_000_000_000)).ok()
}

fn nano_cpus(q: &str) -> Option<i64> {
    i64::try_from(downward::nanos(q)?).ok()
}

/// Everything [`create_body`] needs beyond the pod.
#[derive(Clone, Debug)]
pub struct Placement<'a> {
    /// The node's name.
    pub node: &'a str,
    /// The sandbox container (network namespace) to join.
    pub sandbox_id: &'a str,
    /// Bind mounts, `host:container[:ro]`.
    pub binds: Vec<String>,
    /// The image's `Config.User`.
    pub image_user: &'a str,
    /// The run (restart count).
    pub attempt: i32,
}

/// Docker's create request for one pod container.
pub fn create_body(
    pod: &Pod,
    role: Role,
    c: &Container,
    env: &BTreeMap<String, String>,
    at: &Placement,
) -> Value {
    let (entrypoint, cmd) = entrypoint_and_cmd(c, env);
    let m = &pod.metadata;
    let mut lbl = BTreeMap::new();
    lbl.insert(labels::NODE, at.node.to_string());
    lbl.insert(labels::POD_UID, m.uid.clone().unwrap_or_default());
    lbl.insert(labels::NAMESPACE, m.namespace.clone().unwrap_or_default());
    lbl.insert(labels::POD, m.name.clone().unwrap_or_default());
    lbl.insert(labels::CONTAINER, c.name.clone());
    lbl.insert(
        labels::ROLE,
        match role {
            Role::Init => "init",
            Role::Main => "main",
        }
        .to_string(),
    );
    lbl.insert(labels::ATTEMPT, at.attempt.to_string());
    let limits = c.resources.as_ref().and_then(|r| r.limits.as_ref());
    let memory = limits
        .and_then(|l| l.get("memory"))
        .and_then(|q| memory_bytes(&q.0));
    let cpus = limits
        .and_then(|l| l.get("cpu"))
        .and_then(|q| nano_cpus(&q.0));
    let env_list: Vec<String> = env.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let mut body = json!({
        "Image": c.image.clone().unwrap_or_default(),
        "Env": env_list,
        "Labels": lbl,
        "OpenStdin": c.stdin.unwrap_or(false),
        "Tty": c.tty.unwrap_or(false),
        "HostConfig": {
            "NetworkMode": format!("container:{}", at.sandbox_id),
            "Binds": at.binds,
            "GroupAdd": extra_groups(pod),
            "RestartPolicy": { "Name": "no" },
        },
    });
    if let Some(e) = entrypoint {
        body["Entrypoint"] = json!(e);
    }
    if let Some(cmd) = cmd {
        body["Cmd"] = json!(cmd);
    }
    if let Some(w) = c.working_dir.as_ref().filter(|w| !w.is_empty()) {
        body["WorkingDir"] = json!(w);
    }
    if let Some(u) = user(pod, c, at.image_user) {
        body["User"] = json!(u);
    }
    if let Some(m) = memory {
        body["HostConfig"]["Memory"] = json!(m);
    }
    if let Some(n) = cpus {
        body["HostConfig"]["NanoCpus"] = json!(n);
    }
    if c.security_context
        .as_ref()
        .and_then(|s| s.read_only_root_filesystem)
        == Some(true)
    {
        body["HostConfig"]["ReadonlyRootfs"] = json!(true);
    }
    body
}

/// Refuses the volumes and mounts the node cannot honour, naming the field.
pub fn validate_volumes(spec: &k8s_openapi::api::core::v1::PodSpec) -> Result<(), TranslateError> {
    let refused = |field: String, why: &str| TranslateError::Unsupported {
        field,
        why: why.into(),
    };
    for (i, v) in spec.volumes.iter().flatten().enumerate() {
        let known = v.secret.is_some()
            || v.config_map.is_some()
            || v.projected.is_some()
            || v.downward_api.is_some()
            || v.empty_dir.is_some();
        if !known {
            return Err(refused(
                format!("spec.volumes[{i}]"),
                "the test node offers secret, configMap, projected, downwardAPI and emptyDir volumes",
            ));
        }
    }
    let all = spec
        .init_containers
        .iter()
        .flatten()
        .map(|c| ("initContainers", c))
        .chain(spec.containers.iter().map(|c| ("containers", c)));
    for (j, (kind, c)) in all.enumerate() {
        for (k, m) in c.volume_mounts.iter().flatten().enumerate() {
            let at = format!("spec.{kind}[{j}].volumeMounts[{k}]");
            if m.sub_path_expr.as_deref().is_some_and(|s| !s.is_empty()) {
                return Err(refused(
                    format!("{at}.subPathExpr"),
                    "not implemented by the test node",
                ));
            }
            if m.mount_propagation.as_deref().is_some_and(|p| p != "None") {
                return Err(refused(
                    format!("{at}.mountPropagation"),
                    "not implemented by the test node",
                ));
            }
            if !spec.volumes.iter().flatten().any(|v| v.name == m.name) {
                return Err(refused(format!("{at}.name"), "names no volume of the pod"));
            }
        }
    }
    Ok(())
}

/// Docker's name for a pod container's run (unique per attempt, readable in `docker ps`).
pub fn container_name(pod: &Pod, c: &str, attempt: i32) -> String {
    let m = &pod.metadata;
    let uid = m.uid.as_deref().unwrap_or_default();
    format!(
        "k8s_{c}_{}_{}_{}_{attempt}",
        m.name.as_deref().unwrap_or_default(),
        m.namespace.as_deref().unwrap_or_default(),
        &uid[..uid.len().min(8)]
    )
}

/// The sandbox's create request: it holds the pod's network namespace, hostname and hosts
/// file, and runs `sleep infinity` from `image` until the pod goes.
pub fn sandbox_body(pod: &Pod, node: &str, image: &str, network: &str, hosts: &str) -> Value {
    let m = &pod.metadata;
    let spec = pod.spec.as_ref();
    let hostname: String = spec
        .and_then(|s| s.hostname.clone())
        .filter(|h| !h.is_empty())
        .or_else(|| m.name.clone())
        .unwrap_or_default()
        .chars()
        .take(63)
        .collect();
    json!({
        "Image": image,
        "Entrypoint": ["sleep", "infinity"],
        "Hostname": hostname.trim_end_matches(['-', '.']),
        "User": "0",
        "Labels": {
            labels::NODE: node,
            labels::POD_UID: m.uid.clone().unwrap_or_default(),
            labels::NAMESPACE: m.namespace.clone().unwrap_or_default(),
            labels::POD: m.name.clone().unwrap_or_default(),
            labels::ROLE: "sandbox",
        },
        "HostConfig": {
            "NetworkMode": network,
            "Binds": [format!("{hosts}:/etc/hosts:ro")],
            "RestartPolicy": { "Name": "no" },
        },
    })
}

/// The settings `vk_zun::downward` reads (the node's host IP).
pub fn downward_config(node: &str, host_ip: &str) -> Config {
    Config {
        node_name: node.into(),
        host_ip: host_ip.into(),
        ..Config::default()
    }
}

#[cfg(test)]
mod tests;
