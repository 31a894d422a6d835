//! A pod's volumes as files in its Zun containers (pure).
//!
//! Stock Zun mounts nothing a pod needs: its `mounts` take Cinder volumes and
//! single `type: bind` files whose content is fixed at create time. So the node
//! writes the files itself with Zun's `put_archive` (a tar extracted into the
//! container by Docker): once between create (`run: false`) and start, and again
//! whenever the content changes (a ConfigMap or Secret edited, a token refreshed).
//!
//! - ConfigMap, Secret, downwardAPI and projected volumes (ConfigMap, Secret,
//!   downwardAPI and `serviceAccountToken` sources) are laid out as the kubelet's
//!   atomic writer does: the files in `<mountPath>/..<version>/`, a symlink
//!   `..data` → that directory, and each top-level name `x` → `..data/x`, so a
//!   reader following `..data` sees one version or the next, never a mix.
//! - `emptyDir` (disk) is a directory (mode 0777) in the container's own layer.
//! - Everything else is refused with the field named ([`validate`]).

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{
    ConfigMap, Container, DownwardAPIVolumeFile, KeyToPath, Pod, PodSpec, Secret, Volume,
};
use sha2::{Digest as _, Sha256};

use crate::downward;
use crate::translate::{Config, Role, TranslateError};

/// The file mode of volume files when the pod sets none (`defaultMode`'s default).
pub const DEFAULT_MODE: i32 = 0o644;
/// `expirationSeconds` of a `serviceAccountToken` source when the pod sets none.
pub const DEFAULT_TOKEN_SECONDS: i64 = 3600;

fn refused(field: String, why: impl Into<String>) -> TranslateError {
    TranslateError::Unsupported {
        field,
        why: why.into(),
    }
}

/// The volume type's field name (`configMap`, `hostPath`, ...): the one key besides `name`.
fn kind(v: &Volume) -> String {
    serde_json::to_value(v)
        .ok()
        .and_then(|j| {
            j.as_object()
                .and_then(|o| o.keys().find(|k| *k != "name").cloned())
        })
        .unwrap_or_else(|| "(no type)".into())
}

/// Every container of the pod with its role and field path.
fn containers(spec: &PodSpec) -> impl Iterator<Item = (Role, String, &Container)> {
    let init = spec
        .init_containers
        .iter()
        .flatten()
        .enumerate()
        .map(|(i, c)| (Role::Init, format!("spec.initContainers[{i}]"), c));
    let main = spec
        .containers
        .iter()
        .enumerate()
        .map(|(i, c)| (Role::Main, format!("spec.containers[{i}]"), c));
    init.chain(main)
}

/// Refuse what the node cannot honour in `spec.volumes` and the containers'
/// `volumeMounts`, naming the field (`spec.volumes[2].hostPath`).
pub fn validate(spec: &PodSpec) -> Result<(), TranslateError> {
    let volumes = spec.volumes.as_deref().unwrap_or(&[]);
    for (i, v) in volumes.iter().enumerate() {
        let at = format!("spec.volumes[{i}]");
        if let Some(e) = &v.empty_dir {
            if e.medium.as_deref().is_some_and(|m| !m.is_empty()) {
                return Err(refused(
                    format!("{at}.emptyDir.medium"),
                    format!(
                        "volume {:?}: a memory-backed emptyDir needs a tmpfs mount, which stock Zun cannot give a container (no tmpfs option, and its containers are unprivileged)",
                        v.name
                    ),
                ));
            }
            if e.size_limit.is_some() {
                return Err(refused(
                    format!("{at}.emptyDir.sizeLimit"),
                    format!(
                        "volume {:?}: the emptyDir is a directory in the container's own layer and nothing on stock Zun can enforce a size limit on it",
                        v.name
                    ),
                ));
            }
            // Init containers hand their files on (`crate::handover`); regular containers
            // run at the same time and would each write into a copy of their own.
            let users: Vec<(Role, String, &Container)> = containers(spec)
                .filter(|(_, _, c)| c.volume_mounts.iter().flatten().any(|m| m.name == v.name))
                .collect();
            let mains: Vec<&(Role, String, &Container)> =
                users.iter().filter(|(r, _, _)| *r == Role::Main).collect();
            let all_read_only = mains.iter().all(|(_, _, c)| {
                c.volume_mounts
                    .iter()
                    .flatten()
                    .filter(|m| m.name == v.name)
                    .all(|m| m.read_only == Some(true))
            });
            if mains.len() > 1 && !all_read_only {
                return Err(refused(
                    format!("{at}.emptyDir"),
                    format!(
                        "volume {:?} is mounted by containers {}, which run at the same time: each pod container is its own Zun container and stock Zun containers share no filesystem, so what one writes never reaches the other. Init containers can hand their files to later containers (copied before each starts), and several containers can read those files when every one of them mounts the volume readOnly",
                        v.name,
                        mains
                            .iter()
                            .map(|(_, _, c)| c.name.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                ));
            }
            if users.len() > 1 {
                for (_, path, c) in &users {
                    for (j, m) in c.volume_mounts.iter().flatten().enumerate() {
                        if m.name == v.name && m.sub_path.as_deref().is_some_and(|s| !s.is_empty())
                        {
                            return Err(refused(
                                format!("{path}.volumeMounts[{j}].subPath"),
                                format!(
                                    "volume {:?} is handed from container to container as a whole (stock Zun containers share no filesystem: it is copied before each starts), so a subPath of it is not supported",
                                    v.name
                                ),
                            ));
                        }
                    }
                }
            }
            continue;
        }
        if let Some(d) = &v.downward_api {
            check_downward_items(&format!("{at}.downwardAPI"), d.items.as_deref())?;
            continue;
        }
        if let Some(p) = &v.projected {
            for (j, s) in p.sources.iter().flatten().enumerate() {
                let src = format!("{at}.projected.sources[{j}]");
                if s.cluster_trust_bundle.is_some() {
                    return Err(refused(
                        format!("{src}.clusterTrustBundle"),
                        "not implemented by this node",
                    ));
                }
                if s.pod_certificate.is_some() {
                    return Err(refused(
                        format!("{src}.podCertificate"),
                        "not implemented by this node",
                    ));
                }
                if let Some(d) = &s.downward_api {
                    check_downward_items(&format!("{src}.downwardAPI"), d.items.as_deref())?;
                }
            }
            continue;
        }
        if v.config_map.is_some() || v.secret.is_some() {
            continue;
        }
        let k = kind(v);
        let why = match k.as_str() {
            "persistentVolumeClaim" => format!(
                "volume {:?}: persistent volume claims are not mounted by this node (a Cinder volume attached through Zun's `mounts` needs a Cinder backend zun-compute can attach to its host; see docs/virtual-kubelet.md#volumes)",
                v.name
            ),
            "hostPath" => format!(
                "volume {:?}: the node has no host; Zun containers run on compute hosts the pod must not reach into",
                v.name
            ),
            _ => format!(
                "volume {:?}: this node mounts configMap, secret, downwardAPI, projected and emptyDir volumes only",
                v.name
            ),
        };
        return Err(refused(format!("{at}.{k}"), why));
    }
    for (_, path, c) in containers(spec) {
        for (j, m) in c.volume_mounts.iter().flatten().enumerate() {
            let at = format!("{path}.volumeMounts[{j}]");
            if !volumes.iter().any(|v| v.name == m.name) {
                return Err(refused(
                    format!("{at}.name"),
                    format!("no volume named {:?} in spec.volumes", m.name),
                ));
            }
            if m.sub_path_expr.as_deref().is_some_and(|s| !s.is_empty()) {
                return Err(refused(
                    format!("{at}.subPathExpr"),
                    "not implemented by this node",
                ));
            }
            if m.mount_propagation.as_deref().is_some_and(|p| p != "None") {
                return Err(refused(
                    format!("{at}.mountPropagation"),
                    "the volumes are files written into the container: there are no mounts to propagate",
                ));
            }
            if m.recursive_read_only.as_deref() == Some("Enabled") {
                return Err(refused(
                    format!("{at}.recursiveReadOnly"),
                    "the volumes are files in the container's own layer, not read-only mounts",
                ));
            }
            if !m.mount_path.starts_with('/')
                || m.mount_path.trim_end_matches('/').is_empty()
                || m.mount_path.split('/').any(|s| s == "..")
            {
                return Err(refused(
                    format!("{at}.mountPath"),
                    "must be an absolute path other than / without '..'",
                ));
            }
        }
    }
    Ok(())
}

fn check_downward_items(
    at: &str,
    items: Option<&[DownwardAPIVolumeFile]>,
) -> Result<(), TranslateError> {
    for (k, f) in items.unwrap_or(&[]).iter().enumerate() {
        if let Some(r) = &f.field_ref {
            let p = r.field_path.as_str();
            let ok = matches!(
                p,
                "metadata.name"
                    | "metadata.namespace"
                    | "metadata.uid"
                    | "metadata.labels"
                    | "metadata.annotations"
            ) || (p.starts_with("metadata.labels['")
                || p.starts_with("metadata.annotations['"))
                && downward::field_path_supported(p);
            if !ok {
                return Err(refused(
                    format!("{at}.items[{k}].fieldRef.fieldPath"),
                    format!(
                        "{p:?} is not supported in downwardAPI volumes (metadata.name, metadata.namespace, metadata.uid, metadata.labels, metadata.annotations, and their ['key'] forms)"
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// Whether this pod container mounts any volume (it is then created without
/// running, given its files, then started).
pub fn mounts_volumes(pod: &Pod, role: Role, name: &str) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| {
            containers(s)
                .find(|(r, _, c)| *r == role && c.name == name)
                .map(|(_, _, c)| c.volume_mounts.as_ref().is_some_and(|m| !m.is_empty()))
        })
        .unwrap_or(false)
}

/// Where a token goes: (volume index, source index).
pub type TokenKey = (usize, usize);

/// A token a `serviceAccountToken` source asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenSource {
    /// Which volume and source.
    pub key: TokenKey,
    /// `audience` (none or empty: the API server's).
    pub audience: Option<String>,
    /// `expirationSeconds` (default 3600).
    pub expiration_seconds: i64,
}

/// What the volumes mounted by `containers` refer to: ConfigMap names, Secret
/// names and the tokens to request.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VolumeRefs {
    /// ConfigMap names.
    pub config_maps: BTreeSet<String>,
    /// Secret names.
    pub secrets: BTreeSet<String>,
    /// Tokens.
    pub tokens: Vec<TokenSource>,
}

/// The objects the pod's mounted volumes refer to.
pub fn references(pod: &Pod) -> VolumeRefs {
    let mut out = VolumeRefs::default();
    let Some(spec) = pod.spec.as_ref() else {
        return out;
    };
    let mounted: BTreeSet<&str> = containers(spec)
        .flat_map(|(_, _, c)| c.volume_mounts.iter().flatten())
        .map(|m| m.name.as_str())
        .collect();
    for (i, v) in spec.volumes.iter().flatten().enumerate() {
        if !mounted.contains(v.name.as_str()) {
            continue;
        }
        if let Some(c) = &v.config_map {
            out.config_maps.insert(c.name.clone());
        }
        if let Some(s) = &v.secret {
            out.secrets
                .insert(s.secret_name.clone().unwrap_or_default());
        }
        for (j, s) in v
            .projected
            .iter()
            .flat_map(|p| p.sources.iter().flatten())
            .enumerate()
        {
            if let Some(c) = &s.config_map {
                out.config_maps.insert(c.name.clone());
            }
            if let Some(c) = &s.secret {
                out.secrets.insert(c.name.clone());
            }
            if let Some(t) = &s.service_account_token {
                out.tokens.push(TokenSource {
                    key: (i, j),
                    audience: t.audience.clone().filter(|a| !a.is_empty()),
                    expiration_seconds: t.expiration_seconds.unwrap_or(DEFAULT_TOKEN_SECONDS),
                });
            }
        }
    }
    out
}

/// What the files are made from, fetched beforehand; what is missing is absent.
#[derive(Clone, Debug)]
pub struct Sources<'a> {
    /// ConfigMaps by name.
    pub config_maps: &'a BTreeMap<String, ConfigMap>,
    /// Secrets by name.
    pub secrets: &'a BTreeMap<String, Secret>,
    /// Issued tokens.
    pub tokens: &'a BTreeMap<TokenKey, String>,
    /// The node's settings (for `resourceFieldRef`).
    pub cfg: &'a Config,
    /// The node's CPU capacity (`limits.cpu` of a container without a limit).
    pub node_cpu: f64,
}

/// One entry of a container's file set (paths absolute in the container).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Entry {
    /// A directory.
    Dir {
        /// Path.
        path: String,
        /// Mode bits.
        mode: u32,
    },
    /// A regular file.
    File {
        /// Path.
        path: String,
        /// Mode bits.
        mode: u32,
        /// Content.
        data: Vec<u8>,
    },
    /// A symbolic link.
    Link {
        /// Path.
        path: String,
        /// Where it points (relative).
        target: String,
    },
}

/// The files one container gets, and a hash of them (a change of hash means
/// they must be written again).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FileSet {
    /// In the order they must be extracted (parents first).
    pub entries: Vec<Entry>,
    /// Hex SHA-256 of the entries.
    pub hash: String,
}

/// A volume's payload: relative path → (mode, content).
type Payload = BTreeMap<String, (u32, Vec<u8>)>;

fn mode(m: Option<i32>, default: Option<i32>) -> u32 {
    (m.or(default).unwrap_or(DEFAULT_MODE) & 0o7777) as u32
}

fn missing(m: String) -> TranslateError {
    TranslateError::MissingReference(m)
}

/// A ConfigMap's keys as files, for a `configMap` volume or projected source alike; a missing
/// ConfigMap is nothing when `optional`, else the container waits for it.
fn config_map_items(
    src: &Sources,
    name: &str,
    items: Option<&[KeyToPath]>,
    optional: Option<bool>,
    default_mode: Option<i32>,
    out: &mut Payload,
) -> Result<(), TranslateError> {
    let optional = optional == Some(true);
    match src.config_maps.get(name) {
        Some(cm) => key_items(
            "configmap",
            name,
            &config_map_data(cm),
            items,
            optional,
            default_mode,
            out,
        ),
        None if optional => Ok(()),
        None => Err(missing(format!("configmap {name:?} not found"))),
    }
}

/// A Secret's keys as files, for a `secret` volume or projected source alike.
fn secret_items(
    src: &Sources,
    name: &str,
    items: Option<&[KeyToPath]>,
    optional: Option<bool>,
    default_mode: Option<i32>,
    out: &mut Payload,
) -> Result<(), TranslateError> {
    let optional = optional == Some(true);
    match src.secrets.get(name) {
        Some(sec) => key_items(
            "secret",
            name,
            &secret_data(sec),
            items,
            optional,
            default_mode,
            out,
        ),
        None if optional => Ok(()),
        None => Err(missing(format!("secret {name:?} not found"))),
    }
}

fn key_items(
    what: &str,
    name: &str,
    data: &BTreeMap<String, Vec<u8>>,
    items: Option<&[KeyToPath]>,
    optional: bool,
    default_mode: Option<i32>,
    out: &mut Payload,
) -> Result<(), TranslateError> {
    match items {
        Some(items) if !items.is_empty() => {
            for it in items {
                match data.get(&it.key) {
                    Some(d) => {
                        out.insert(it.path.clone(), (mode(it.mode, default_mode), d.clone()));
                    }
                    None if optional => {}
                    None => {
                        return Err(missing(format!(
                            "couldn't find key {} in {what} {name}",
                            it.key
                        )));
                    }
                }
            }
        }
        _ => {
            for (k, d) in data {
                out.insert(k.clone(), (mode(None, default_mode), d.clone()));
            }
        }
    }
    Ok(())
}

fn config_map_data(cm: &ConfigMap) -> BTreeMap<String, Vec<u8>> {
    let mut d: BTreeMap<String, Vec<u8>> = cm
        .data
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), v.clone().into_bytes()))
        .collect();
    for (k, ByteString(v)) in cm.binary_data.iter().flatten() {
        d.insert(k.clone(), v.clone());
    }
    d
}

fn secret_data(s: &Secret) -> BTreeMap<String, Vec<u8>> {
    let mut d: BTreeMap<String, Vec<u8>> = s
        .data
        .iter()
        .flatten()
        .map(|(k, ByteString(v))| (k.clone(), v.clone()))
        .collect();
    for (k, v) in s.string_data.iter().flatten() {
        d.insert(k.clone(), v.clone().into_bytes());
    }
    d
}

/// `k="v"` lines, sorted, as the kubelet formats labels and annotations
/// (`fieldpath.FormatMap`).
fn format_map(m: Option<&BTreeMap<String, String>>) -> String {
    m.iter()
        .flat_map(|m| m.iter())
        .map(|(k, v)| format!("{k}={}", serde_json::Value::String(v.clone())))
        .collect::<Vec<_>>()
        .join("\n")
}

fn downward_items(
    at: &str,
    pod: &Pod,
    own: &Container,
    items: Option<&[DownwardAPIVolumeFile]>,
    default_mode: Option<i32>,
    src: &Sources,
    out: &mut Payload,
) -> Result<(), TranslateError> {
    let ctx = downward::Context {
        cfg: src.cfg,
        pod_ips: &[],
        node_cpu: src.node_cpu,
    };
    for (k, f) in items.unwrap_or(&[]).iter().enumerate() {
        let value = if let Some(r) = &f.field_ref {
            match r.field_path.as_str() {
                "metadata.labels" => format_map(pod.metadata.labels.as_ref()),
                "metadata.annotations" => format_map(pod.metadata.annotations.as_ref()),
                p => downward::field_ref(&format!("{at}.items[{k}].fieldRef"), pod, p, &ctx)?,
            }
        } else if let Some(r) = &f.resource_field_ref {
            downward::resource_field_ref(
                &format!("{at}.items[{k}].resourceFieldRef"),
                pod,
                own,
                r,
                &ctx,
            )?
        } else {
            String::new()
        };
        out.insert(
            f.path.clone(),
            (mode(f.mode, default_mode), value.into_bytes()),
        );
    }
    Ok(())
}

/// The payload of volume `i` for container `own`.
fn payload(
    pod: &Pod,
    own: &Container,
    i: usize,
    v: &Volume,
    src: &Sources,
) -> Result<Payload, TranslateError> {
    let at = format!("spec.volumes[{i}]");
    let mut out = Payload::new();
    if let Some(c) = &v.config_map {
        config_map_items(
            src,
            &c.name,
            c.items.as_deref(),
            c.optional,
            c.default_mode,
            &mut out,
        )?;
    } else if let Some(s) = &v.secret {
        let name = s.secret_name.as_deref().unwrap_or_default();
        secret_items(
            src,
            name,
            s.items.as_deref(),
            s.optional,
            s.default_mode,
            &mut out,
        )?;
    } else if let Some(d) = &v.downward_api {
        downward_items(
            &format!("{at}.downwardAPI"),
            pod,
            own,
            d.items.as_deref(),
            d.default_mode,
            src,
            &mut out,
        )?;
    } else if let Some(p) = &v.projected {
        for (j, s) in p.sources.iter().flatten().enumerate() {
            if let Some(c) = &s.config_map {
                config_map_items(
                    src,
                    &c.name,
                    c.items.as_deref(),
                    c.optional,
                    p.default_mode,
                    &mut out,
                )?;
            } else if let Some(c) = &s.secret {
                secret_items(
                    src,
                    &c.name,
                    c.items.as_deref(),
                    c.optional,
                    p.default_mode,
                    &mut out,
                )?;
            } else if let Some(d) = &s.downward_api {
                downward_items(
                    &format!("{at}.projected.sources[{j}].downwardAPI"),
                    pod,
                    own,
                    d.items.as_deref(),
                    p.default_mode,
                    src,
                    &mut out,
                )?;
            } else if let Some(t) = &s.service_account_token {
                let token = src.tokens.get(&(i, j)).ok_or_else(|| {
                    missing(format!(
                        "no service account token issued yet for {at}.projected.sources[{j}]"
                    ))
                })?;
                // As the kubelet without fsUser/fsGroup (which this node refuses): the
                // projection's defaultMode.
                let m = mode(None, p.default_mode);
                out.insert(t.path.clone(), (m, token.clone().into_bytes()));
            }
        }
    }
    // Paths from the pod are relative and without `..` (the API server checks it);
    // the node checks again, since they become paths in the container.
    for p in out.keys() {
        if p.is_empty() || p.starts_with('/') || p.split('/').any(|s| s == ".." || s.is_empty()) {
            return Err(refused(
                at.clone(),
                format!(
                    "volume {:?}: file path {p:?} must be relative, without '..'",
                    v.name
                ),
            ));
        }
    }
    Ok(out)
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn parents(rel: &str) -> Vec<String> {
    let parts: Vec<&str> = rel.split('/').collect();
    (1..parts.len()).map(|n| parts[..n].join("/")).collect()
}

/// The files container `name` (of `role`) gets from its `volumeMounts`.
pub fn files(pod: &Pod, role: Role, name: &str, src: &Sources) -> Result<FileSet, TranslateError> {
    let mut entries = Vec::new();
    let Some(spec) = pod.spec.as_ref() else {
        return Ok(FileSet::default());
    };
    let Some((_, _, own)) = containers(spec).find(|(r, _, c)| *r == role && c.name == name) else {
        return Ok(FileSet::default());
    };
    let volumes = spec.volumes.as_deref().unwrap_or(&[]);
    for m in own.volume_mounts.iter().flatten() {
        let Some((i, v)) = volumes.iter().enumerate().find(|(_, v)| v.name == m.name) else {
            continue;
        };
        let root = m.mount_path.trim_end_matches('/').to_string();
        if v.empty_dir.is_some() {
            entries.push(Entry::Dir {
                path: root,
                mode: 0o777,
            });
            continue;
        }
        let data = payload(pod, own, i, v, src)?;
        let sub = m.sub_path.as_deref().unwrap_or("").trim_matches('/');
        if !sub.is_empty() {
            // A subPath mount is a copy of one file or directory of the volume, not
            // updated afterwards (as the kubelet's subPath mounts are not).
            if let Some((md, d)) = data.get(sub) {
                entries.push(Entry::File {
                    path: root,
                    mode: *md,
                    data: d.clone(),
                });
            } else {
                entries.push(Entry::Dir {
                    path: root.clone(),
                    mode: 0o755,
                });
                let prefix = format!("{sub}/");
                let mut dirs = BTreeSet::new();
                for (p, (md, d)) in data.iter().filter(|(p, _)| p.starts_with(&prefix)) {
                    let rel = &p[prefix.len()..];
                    for dir in parents(rel) {
                        if dirs.insert(dir.clone()) {
                            entries.push(Entry::Dir {
                                path: format!("{root}/{dir}"),
                                mode: 0o755,
                            });
                        }
                    }
                    entries.push(Entry::File {
                        path: format!("{root}/{rel}"),
                        mode: *md,
                        data: d.clone(),
                    });
                }
            }
            continue;
        }
        let mut h = Sha256::new();
        for (p, (md, d)) in &data {
            h.update(p.as_bytes());
            h.update([0]);
            h.update(md.to_be_bytes());
            h.update((d.len() as u64).to_be_bytes());
            h.update(d);
        }
        let version = format!("..{}", &hex(&h.finalize())[..16]);
        entries.push(Entry::Dir {
            path: root.clone(),
            mode: 0o755,
        });
        let vdir = format!("{root}/{version}");
        entries.push(Entry::Dir {
            path: vdir.clone(),
            mode: 0o755,
        });
        let mut dirs = BTreeSet::new();
        let mut top = BTreeSet::new();
        for (p, (md, d)) in &data {
            for dir in parents(p) {
                if dirs.insert(dir.clone()) {
                    entries.push(Entry::Dir {
                        path: format!("{vdir}/{dir}"),
                        mode: 0o755,
                    });
                }
            }
            entries.push(Entry::File {
                path: format!("{vdir}/{p}"),
                mode: *md,
                data: d.clone(),
            });
            top.insert(p.split('/').next().unwrap_or(p).to_string());
        }
        entries.push(Entry::Link {
            path: format!("{root}/..data"),
            target: version,
        });
        for t in top {
            entries.push(Entry::Link {
                path: format!("{root}/{t}"),
                target: format!("..data/{t}"),
            });
        }
    }
    let mut h = Sha256::new();
    for e in &entries {
        match e {
            Entry::Dir { path, mode } => {
                h.update(b"d");
                h.update(path.as_bytes());
                h.update(mode.to_be_bytes());
            }
            Entry::File { path, mode, data } => {
                h.update(b"f");
                h.update(path.as_bytes());
                h.update(mode.to_be_bytes());
                h.update((data.len() as u64).to_be_bytes());
                h.update(data);
            }
            Entry::Link { path, target } => {
                h.update(b"l");
                h.update(path.as_bytes());
                h.update([0]);
                h.update(target.as_bytes());
            }
        }
        h.update([0]);
    }
    Ok(FileSet {
        entries,
        hash: hex(&h.finalize()),
    })
}

/// A path too long for a ustar header (name 100 + prefix 155 bytes).
#[derive(Debug, thiserror::Error)]
#[error("path {0:?} is too long for a tar archive (at most 255 bytes, split at a '/')")]
pub struct PathTooLong(pub String);

/// Split a path into ustar's (prefix, name).
fn split_name(p: &str) -> Result<(&str, &str), PathTooLong> {
    if p.len() <= 100 {
        return Ok(("", p));
    }
    for (i, _) in p.match_indices('/') {
        let (pre, name) = (&p[..i], &p[i + 1..]);
        if pre.len() <= 155 && name.len() <= 100 && !name.is_empty() {
            return Ok((pre, name));
        }
    }
    Err(PathTooLong(p.to_string()))
}

fn octal(field: &mut [u8], v: u64) {
    let n = field.len() - 1;
    let s = format!("{v:0n$o}");
    let b = s.as_bytes();
    let start = b.len().saturating_sub(n);
    field[..n].copy_from_slice(&b[start..]);
    field[n] = 0;
}

fn header(
    path: &str,
    mode: u32,
    size: u64,
    mtime: u64,
    typeflag: u8,
    link: &str,
) -> Result<[u8; 512], PathTooLong> {
    let mut h = [0u8; 512];
    let (prefix, name) = split_name(path)?;
    if link.len() > 100 {
        return Err(PathTooLong(link.to_string()));
    }
    h[..name.len()].copy_from_slice(name.as_bytes());
    octal(&mut h[100..108], u64::from(mode));
    octal(&mut h[108..116], 0);
    octal(&mut h[116..124], 0);
    octal(&mut h[124..136], size);
    octal(&mut h[136..148], mtime);
    h[156] = typeflag;
    h[157..157 + link.len()].copy_from_slice(link.as_bytes());
    h[257..263].copy_from_slice(b"ustar\0");
    h[263..265].copy_from_slice(b"00");
    h[345..345 + prefix.len()].copy_from_slice(prefix.as_bytes());
    h[148..156].copy_from_slice(b"        ");
    let sum: u64 = h.iter().map(|b| u64::from(*b)).sum();
    let s = format!("{sum:06o}\0 ");
    h[148..156].copy_from_slice(s.as_bytes());
    Ok(h)
}

impl FileSet {
    /// The set as a ustar archive of paths relative to `/` (Zun's `put_archive`
    /// at `/`), owned by root, modified at `mtime` (Unix seconds).
    pub fn tar(&self, mtime: u64) -> Result<Vec<u8>, PathTooLong> {
        let mut out = Vec::new();
        for e in &self.entries {
            match e {
                Entry::Dir { path, mode } => {
                    let p = format!("{}/", path.trim_start_matches('/'));
                    out.extend_from_slice(&header(&p, *mode, 0, mtime, b'5', "")?);
                }
                Entry::File { path, mode, data } => {
                    let p = path.trim_start_matches('/');
                    out.extend_from_slice(&header(p, *mode, data.len() as u64, mtime, b'0', "")?);
                    out.extend_from_slice(data);
                    let pad = (512 - data.len() % 512) % 512;
                    out.extend(std::iter::repeat_n(0u8, pad));
                }
                Entry::Link { path, target } => {
                    let p = path.trim_start_matches('/');
                    out.extend_from_slice(&header(p, 0o777, 0, mtime, b'2', target)?);
                }
            }
        }
        out.extend(std::iter::repeat_n(0u8, 1024));
        Ok(out)
    }
}

#[cfg(test)]
mod tests;
