//! The Zun (OpenStack container service) port: plain containers and
//! capsules, their logs and exec, and the project's quota.
//!
//! Zun API facts this port relies on (zun 18.0.0, API 1.1–1.40):
//! - `GET /containers` filters only on `name`, `image`, `status`, `host`,
//!   `memory`, `task_state`, `auto_remove`, `project_id`, `user_id`; never on
//!   labels, so [`Container::list_containers`] filters labels client-side
//!   after one (paginated) list.
//! - A container's exit code is reported only inside `status_detail`
//!   (`"Exited(3) 5 seconds ago"`); [`ZunContainer::exit_code`] parses it.
//! - Capsule members have no logs/exec/attach/stats endpoints (their rows are
//!   `CapsuleContainer`, which the `/containers/{id}/...` lookups skip).

use std::collections::BTreeMap;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::error::Result;

/// Zun container statuses (`zun/common/consts.py`).
pub mod status {
    /// Accepted, not yet on a host.
    pub const CREATING: &str = "Creating";
    /// Created on the host, not started.
    pub const CREATED: &str = "Created";
    /// Running.
    pub const RUNNING: &str = "Running";
    /// Exited (or stopped).
    pub const STOPPED: &str = "Stopped";
    /// Paused.
    pub const PAUSED: &str = "Paused";
    /// Restarting (Docker's restart policy).
    pub const RESTARTING: &str = "Restarting";
    /// Failed (image missing, no host, quota, ...): see `status_reason`.
    pub const ERROR: &str = "Error";
    /// Being deleted.
    pub const DELETING: &str = "Deleting";
    /// Deleted.
    pub const DELETED: &str = "Deleted";
    /// Unknown to the engine.
    pub const UNKNOWN: &str = "Unknown";
    /// Dead (Docker could not remove it).
    pub const DEAD: &str = "Dead";
}

/// One address of a container on one network.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ZunAddress {
    /// The IP address.
    pub addr: String,
    /// 4 or 6.
    #[serde(default)]
    pub version: u8,
    /// The Neutron port id.
    #[serde(default)]
    pub port: Option<String>,
    /// The Neutron subnet id.
    #[serde(default)]
    pub subnet_id: Option<String>,
}

/// Zun's restart policy (Docker's names).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ZunRestartPolicy {
    /// `no`, `always`, `on-failure` or `unless-stopped` (zun-api may show
    /// a policy without it: `{}` means Docker's default, `no`).
    #[serde(rename = "Name", default)]
    pub name: String,
    /// Retries for `on-failure` (0 = unlimited).
    // zun-api does `int(MaximumRetryCount)` when the key is present: a null
    // answers 500, so it is left out when unset.
    #[serde(
        rename = "MaximumRetryCount",
        default,
        deserialize_with = "de_opt_u32_or_string",
        skip_serializing_if = "Option::is_none"
    )]
    pub max_retry: Option<u32>,
}

/// A network attachment at create time.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ZunNet {
    /// Neutron network id or name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network: Option<String>,
    /// An existing Neutron port (created by us before the container).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub port: Option<String>,
    /// A fixed IPv4 address.
    #[serde(rename = "v4-fixed-ip", skip_serializing_if = "Option::is_none")]
    pub v4_fixed_ip: Option<String>,
}

/// A plain Zun container as the API shows it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ZunContainer {
    /// Zun's id.
    pub uuid: String,
    /// Name (not unique in Zun).
    #[serde(default)]
    pub name: Option<String>,
    /// Image reference.
    #[serde(default)]
    pub image: Option<String>,
    /// One of [`status`].
    #[serde(default)]
    pub status: String,
    /// Why it is in this status (errors: "No valid host", quota, image...).
    #[serde(default)]
    pub status_reason: Option<String>,
    /// Docker's detail: `Up 5 seconds`, `Exited(3) 2 seconds ago`, `Created`.
    #[serde(default)]
    pub status_detail: Option<String>,
    /// A task in progress (`container_creating`, `image_pulling`, ...).
    #[serde(default)]
    pub task_state: Option<String>,
    /// Labels (ours mark ownership).
    #[serde(default, deserialize_with = "de_null_map")]
    pub labels: BTreeMap<String, String>,
    /// Network id → addresses.
    #[serde(default, deserialize_with = "de_null_map")]
    pub addresses: BTreeMap<String, Vec<ZunAddress>>,
    /// The compute host (admin only by default policy).
    #[serde(default)]
    pub host: Option<String>,
    /// CPUs.
    #[serde(default)]
    pub cpu: Option<f64>,
    /// Memory, MiB, as a string (`"512"` or `"512M"`).
    #[serde(default, deserialize_with = "de_opt_string_or_number")]
    pub memory: Option<String>,
    /// Command (1.29+: a list).
    #[serde(default, deserialize_with = "de_opt_command")]
    pub command: Option<Vec<String>>,
    /// Entrypoint (1.40+).
    #[serde(default, deserialize_with = "de_opt_command")]
    pub entrypoint: Option<Vec<String>>,
    /// Environment.
    #[serde(default, deserialize_with = "de_null_map")]
    pub environment: BTreeMap<String, String>,
    /// Working directory.
    #[serde(default)]
    pub workdir: Option<String>,
    /// Restart policy.
    #[serde(default)]
    pub restart_policy: Option<ZunRestartPolicy>,
    /// Creation time (`2026-12-01T05:00:00.000000` or with an offset).
    #[serde(default)]
    pub created_at: Option<String>,
    /// Last update time.
    #[serde(default)]
    pub updated_at: Option<String>,
}

impl ZunContainer {
    /// The exit code in `status_detail` (`Exited(3) ...`), if it exited.
    pub fn exit_code(&self) -> Option<i32> {
        let d = self.status_detail.as_deref()?;
        let rest = d.trim_start().strip_prefix("Exited(")?;
        let end = rest.find(')')?;
        rest[..end].trim().parse().ok()
    }

    /// All IPv4 addresses, then IPv6, in network order.
    pub fn ips(&self) -> Vec<String> {
        let mut v4 = Vec::new();
        let mut v6 = Vec::new();
        for a in self.addresses.values().flatten() {
            if a.version == 6 || a.addr.contains(':') {
                v6.push(a.addr.clone());
            } else {
                v4.push(a.addr.clone());
            }
        }
        v4.extend(v6);
        v4
    }
}

/// What to create. Fields left `None`/empty are not sent, so Zun's defaults
/// (and its admin-only policies, e.g. on `image_pull_policy`) apply.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ZunContainerCreate {
    /// Name (`^[a-zA-Z0-9][a-zA-Z0-9_.-]+$`, 2–255 characters).
    pub name: String,
    /// Image reference.
    pub image: String,
    /// Replaces the image's CMD.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
    /// Replaces the image's ENTRYPOINT (API 1.40+).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub entrypoint: Option<Vec<String>>,
    /// CPUs (may be fractional).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu: Option<f64>,
    /// Memory in MiB.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<u64>,
    /// Environment.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub environment: BTreeMap<String, String>,
    /// Working directory.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workdir: Option<String>,
    /// Labels.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// `always`, `ifnotpresent` or `never` (admin only by default policy).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image_pull_policy: Option<String>,
    /// `docker` or `glance`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image_driver: Option<String>,
    /// Restart policy.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub restart_policy: Option<ZunRestartPolicy>,
    /// Networks.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub nets: Vec<ZunNet>,
    /// Security groups (names or ids).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub security_groups: Vec<String>,
    /// Exposed ports, `"80/tcp"` → `{}` (Zun then makes a security group).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub exposed_ports: BTreeMap<String, serde_json::Value>,
    /// Hostname.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    /// Availability zone.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub availability_zone: Option<String>,
    /// Keep stdin open (needed for `kubectl attach -i`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interactive: Option<bool>,
    /// Allocate a TTY.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tty: Option<bool>,
    /// Start it once created (`?run=true`); not part of the body.
    #[serde(skip)]
    pub run: bool,
}

/// A capsule (Zun's pod: a sandbox plus members sharing its network).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ZunCapsule {
    /// Zun's id.
    pub uuid: String,
    /// Name.
    #[serde(default)]
    pub name: Option<String>,
    /// One of [`status`].
    #[serde(default)]
    pub status: String,
    /// Why it is in this status.
    #[serde(default)]
    pub status_reason: Option<String>,
    /// Labels (from the template's metadata).
    #[serde(default, deserialize_with = "de_null_map")]
    pub labels: BTreeMap<String, String>,
    /// Annotations (from the template's metadata).
    #[serde(default, deserialize_with = "de_null_map")]
    pub annotations: BTreeMap<String, String>,
    /// Network id → addresses.
    #[serde(default, deserialize_with = "de_null_map")]
    pub addresses: BTreeMap<String, Vec<ZunAddress>>,
    /// Members.
    #[serde(default, deserialize_with = "de_null_vec")]
    pub containers: Vec<ZunContainer>,
    /// Init members.
    #[serde(default, deserialize_with = "de_null_vec")]
    pub init_containers: Vec<ZunContainer>,
    /// CPUs of the whole capsule.
    #[serde(default)]
    pub cpu: Option<f64>,
    /// Memory of the whole capsule.
    #[serde(default, deserialize_with = "de_opt_string_or_number")]
    pub memory: Option<String>,
    /// Creation time.
    #[serde(default)]
    pub created_at: Option<String>,
}

/// What to create: the capsule template (Kubernetes-like: `kind`,
/// `metadata`, `spec`, optional `nets` and `availabilityZone`), sent as a
/// JSON string so that zun-api validates it against its schema (a template
/// sent as an object is not validated: `check_capsule_template`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ZunCapsuleCreate {
    /// The template.
    pub template: serde_json::Value,
}

/// Options of a logs call.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LogOptions {
    /// Only the last N lines.
    pub tail: Option<u64>,
    /// Prefix each line with its timestamp.
    pub timestamps: bool,
    /// Only lines since this Unix time (seconds).
    pub since: Option<i64>,
}

/// The answer to a non-interactive exec.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExecOutput {
    /// stdout and stderr, interleaved as Docker returns them.
    pub output: String,
    /// The command's exit code.
    pub exit_code: Option<i32>,
}

/// One quota line: the limit (-1 = unlimited) and what is in use (CPUs
/// may be fractional).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ZunQuotaValue {
    /// The limit; negative is unlimited.
    pub limit: f64,
    /// In use.
    pub in_use: f64,
}

impl ZunQuotaValue {
    /// Whether a limit applies.
    pub fn is_limited(&self) -> bool {
        self.limit >= 0.0
    }
}

/// A project's Zun quota with usage.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ZunQuota {
    /// Number of containers (capsule members count as containers).
    pub containers: ZunQuotaValue,
    /// CPUs.
    pub cpu: ZunQuotaValue,
    /// Memory, MiB.
    pub memory: ZunQuotaValue,
    /// Disk, GiB.
    pub disk: ZunQuotaValue,
}

/// A zun-compute service as `GET /services` shows it (admin only).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ZunService {
    /// Host name.
    #[serde(default)]
    pub host: String,
    /// Binary (`zun-compute`).
    #[serde(default)]
    pub binary: String,
    /// `up` or `down`.
    #[serde(default)]
    pub state: String,
    /// Whether the scheduler skips it.
    #[serde(default)]
    pub disabled: bool,
    /// Its availability zone.
    #[serde(default)]
    pub availability_zone: Option<String>,
}

/// A container's resource snapshot (`GET /containers/{id}/stats`, Zun's
/// docker driver: memory is usage minus inactive file cache, i.e. the
/// working set; its `CPU %` is cumulative container time over the host's
/// cumulative time since boot, not a rate, so it is kept only as shown).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ZunStats {
    /// `MEM USAGE(MiB)`.
    pub memory_usage_mib: f64,
    /// `MEM LIMIT(MiB)`.
    pub memory_limit_mib: f64,
    /// `CPU %` as Zun computes it.
    pub cpu_percent: f64,
}

/// `GET /containers/{id}/top`: Docker's `ps` titles and rows.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ZunTop {
    /// Column titles (`PID`, `TIME`, ...).
    #[serde(rename = "Titles", default)]
    pub titles: Vec<String>,
    /// One row per process.
    #[serde(rename = "Processes", default)]
    pub processes: Vec<Vec<String>>,
}

/// An interactive exec or attach: the zun-wsproxy URL to connect to.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ZunSession {
    /// `ws://host:port?token=...&uuid=...[&exec_id=...]`.
    pub url: String,
    /// Docker's exec id (exec only).
    pub exec_id: Option<String>,
}

/// The Zun port.
#[async_trait]
pub trait Container: Send + Sync {
    /// Create a plain container (started at once when `req.run`).
    async fn create_container(&self, req: &ZunContainerCreate) -> Result<ZunContainer>;
    /// One container by id.
    async fn get_container(&self, id: &str) -> Result<ZunContainer>;
    /// The project's containers whose labels include all of `labels` and,
    /// if given, whose name is `name` (server-side filter).
    async fn list_containers(
        &self,
        labels: &BTreeMap<String, String>,
        name: Option<&str>,
    ) -> Result<Vec<ZunContainer>>;
    /// Delete a container. `stop`: stop a running one first (1.12+);
    /// `force`: delete whatever its state (admin only by default policy).
    async fn delete_container(&self, id: &str, stop: bool, force: bool) -> Result<()>;
    /// Start a created or stopped container.
    async fn start_container(&self, id: &str) -> Result<()>;
    /// Stop a running container, killing it after `timeout_s` seconds.
    async fn stop_container(&self, id: &str, timeout_s: u64) -> Result<()>;
    /// A container's logs (stdout and stderr).
    async fn container_logs(&self, id: &str, opts: &LogOptions) -> Result<String>;
    /// Run a command in a running container and wait for it.
    async fn exec(&self, id: &str, command: &[String]) -> Result<ExecOutput>;

    /// Create a capsule.
    async fn create_capsule(&self, req: &ZunCapsuleCreate) -> Result<ZunCapsule>;
    /// One capsule by id.
    async fn get_capsule(&self, id: &str) -> Result<ZunCapsule>;
    /// The project's capsules whose labels include all of `labels`.
    async fn list_capsules(&self, labels: &BTreeMap<String, String>) -> Result<Vec<ZunCapsule>>;
    /// Delete a capsule (its members and sandbox are stopped and removed).
    async fn delete_capsule(&self, id: &str) -> Result<()>;

    /// The project's quota with usage.
    async fn get_quota(&self, project_id: &str) -> Result<ZunQuota>;
    /// The availability zones Zun schedules to.
    async fn list_availability_zones(&self) -> Result<Vec<String>>;
    /// The zun-compute services and their state (admin only by default).
    async fn list_services(&self) -> Result<Vec<ZunService>>;

    /// A running container's resource snapshot.
    async fn container_stats(&self, id: &str) -> Result<ZunStats> {
        Err(crate::error::Error::unexpected(format!(
            "container stats of {id}: not offered by this port"
        )))
    }
    /// A running container's processes (`ps_args` as Docker's top takes them).
    async fn container_top(&self, id: &str, ps_args: &str) -> Result<ZunTop> {
        let _ = ps_args;
        Err(crate::error::Error::unexpected(format!(
            "container top of {id}: not offered by this port"
        )))
    }
    /// Start an interactive exec (stdin and a TTY) and return its proxy URL.
    async fn exec_interactive(&self, id: &str, command: &[String]) -> Result<ZunSession> {
        let _ = command;
        Err(crate::error::Error::unexpected(format!(
            "interactive exec in {id}: not offered by this port"
        )))
    }
    /// The proxy URL attaching to a container created `interactive`.
    async fn attach(&self, id: &str) -> Result<ZunSession> {
        Err(crate::error::Error::unexpected(format!(
            "attach to {id}: not offered by this port"
        )))
    }
    /// A tar archive of `path` in a container, running or stopped (Docker's get_archive
    /// through Zun; the entries are named after `path`'s base name).
    async fn get_archive(&self, id: &str, path: &str) -> Result<Vec<u8>> {
        let _ = path;
        Err(crate::error::Error::unexpected(format!(
            "get archive from {id}: not offered by this port"
        )))
    }
    /// Extract a tar archive into a created, running, paused or stopped container at
    /// `path` (Docker's put_archive through Zun; files of the archive replace those there).
    async fn put_archive(&self, id: &str, path: &str, tar: &[u8]) -> Result<()> {
        let _ = (path, tar);
        Err(crate::error::Error::unexpected(format!(
            "put archive into {id}: not offered by this port"
        )))
    }

    /// Resize the TTY of an interactive exec (`exec_id` from
    /// [`Container::exec_interactive`]) to `width` x `height`.
    async fn exec_resize(&self, id: &str, exec_id: &str, width: u16, height: u16) -> Result<()> {
        let _ = (exec_id, width, height);
        Err(crate::error::Error::unexpected(format!(
            "exec resize in {id}: not offered by this port"
        )))
    }
    /// Resize the TTY of a container created with `tty` (what attach sees).
    async fn resize_tty(&self, id: &str, width: u16, height: u16) -> Result<()> {
        let _ = (width, height);
        Err(crate::error::Error::unexpected(format!(
            "tty resize of {id}: not offered by this port"
        )))
    }
}

/// Whether every `(k, v)` of `want` is in `have`.
pub fn labels_match(have: &BTreeMap<String, String>, want: &BTreeMap<String, String>) -> bool {
    want.iter().all(|(k, v)| have.get(k) == Some(v))
}

fn de_null_map<'de, D, V>(d: D) -> std::result::Result<BTreeMap<String, V>, D::Error>
where
    D: serde::Deserializer<'de>,
    V: Deserialize<'de>,
{
    Ok(Option::<BTreeMap<String, V>>::deserialize(d)?.unwrap_or_default())
}

fn de_null_vec<'de, D, V>(d: D) -> std::result::Result<Vec<V>, D::Error>
where
    D: serde::Deserializer<'de>,
    V: Deserialize<'de>,
{
    Ok(Option::<Vec<V>>::deserialize(d)?.unwrap_or_default())
}

fn de_opt_string_or_number<'de, D>(d: D) -> std::result::Result<Option<String>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    Ok(match Option::<serde_json::Value>::deserialize(d)? {
        Some(serde_json::Value::String(s)) => Some(s),
        Some(serde_json::Value::Number(n)) => Some(n.to_string()),
        _ => None,
    })
}

fn de_opt_u32_or_string<'de, D>(d: D) -> std::result::Result<Option<u32>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    Ok(match Option::<serde_json::Value>::deserialize(d)? {
        Some(serde_json::Value::String(s)) => s.parse().ok(),
        Some(serde_json::Value::Number(n)) => n.as_u64().and_then(|n| u32::try_from(n).ok()),
        _ => None,
    })
}

/// Before 1.29 a command was a shell string; later a list.
fn de_opt_command<'de, D>(d: D) -> std::result::Result<Option<Vec<String>>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    Ok(match Option::<serde_json::Value>::deserialize(d)? {
        Some(serde_json::Value::String(s)) => Some(vec![s]),
        Some(serde_json::Value::Array(a)) => Some(
            a.into_iter()
                .map(|v| match v {
                    serde_json::Value::String(s) => s,
                    other => other.to_string(),
                })
                .collect(),
        ),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn decodes_a_zun_container() {
        let c: ZunContainer = serde_json::from_value(json!({
            "uuid": "u1", "name": "n", "status": "Stopped",
            "status_detail": "Exited(3) 2 seconds ago ",
            "labels": null, "memory": "64", "cpu": 0.5,
            "command": ["sh", "-c", "exit 3"], "entrypoint": null,
            "addresses": {"net": [{"addr": "10.0.0.5", "version": 4, "port": "p", "subnet_id": "s"},
                                   {"addr": "fd00::5", "version": 6}]},
            "restart_policy": {"Name": "on-failure", "MaximumRetryCount": "0"},
            "unknown_field": 1
        }))
        .unwrap();
        assert_eq!(c.exit_code(), Some(3));
        assert_eq!(c.memory.as_deref(), Some("64"));
        assert_eq!(c.ips(), vec!["10.0.0.5", "fd00::5"]);
        assert_eq!(c.restart_policy.unwrap().max_retry, Some(0));
        assert!(c.labels.is_empty());
    }

    #[test]
    fn exit_code_only_from_exited() {
        let mut c = ZunContainer {
            status_detail: Some("Up 5 seconds".into()),
            ..Default::default()
        };
        assert_eq!(c.exit_code(), None);
        c.status_detail = Some("Exited(0) 1 second ago (error)".into());
        assert_eq!(c.exit_code(), Some(0));
        c.status_detail = Some("Exited(137) 1 minute ago".into());
        assert_eq!(c.exit_code(), Some(137));
    }

    #[test]
    fn create_body_sends_only_what_is_set() {
        let r = ZunContainerCreate {
            name: "a-b".into(),
            image: "busybox".into(),
            memory: Some(64),
            run: true,
            ..Default::default()
        };
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v, json!({"name": "a-b", "image": "busybox", "memory": 64}));
        let p = ZunRestartPolicy {
            name: "no".into(),
            max_retry: None,
        };
        assert_eq!(serde_json::to_value(&p).unwrap(), json!({"Name": "no"}));
    }

    #[test]
    fn label_subset() {
        let have: BTreeMap<_, _> = [("a".to_string(), "1".to_string()), ("b".into(), "2".into())]
            .into_iter()
            .collect();
        let want: BTreeMap<_, _> = [("a".to_string(), "1".to_string())].into_iter().collect();
        assert!(labels_match(&have, &want));
        let other: BTreeMap<_, _> = [("a".to_string(), "2".to_string())].into_iter().collect();
        assert!(!labels_match(&have, &other));
    }
}
