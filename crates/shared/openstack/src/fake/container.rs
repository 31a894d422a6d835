//! An in-memory Zun for unit tests of the virtual kubelet.
//!
//! Semantics kept from zun-api: generated uuids; a created container is
//! `Creating` until the next read, then `Running` (with `?run=true`) or
//! `Created`; an image whose name contains `missing` ends in `Error` with
//! Zun's "image not found" reason; `stop` is refused (409) unless Running;
//! a plain delete is refused (409) while Running, `stop=true` stops first;
//! logs and exec of a capsule member are 404 as on stock Zun (members are
//! not plain containers); quota usage follows what exists.
//!
//! Test hooks: [`FakeZun::exit`] makes a container exit with a code,
//! [`FakeZun::remove`] deletes one behind the caller's back,
//! [`FakeZun::fail_next`] injects an error, [`FakeZun::calls`] counts calls
//! by operation.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;

use crate::container::*;
use crate::error::{Error, Result};

#[derive(Debug, Default)]
struct State {
    containers: BTreeMap<String, ZunContainer>,
    /// Containers whose next read moves them out of `Creating`: id → run.
    pending: BTreeMap<String, bool>,
    capsules: BTreeMap<String, ZunCapsule>,
    logs: BTreeMap<String, String>,
    quota_limits: ZunQuota,
    calls: HashMap<String, u64>,
    faults: HashMap<String, Error>,
    next_ip: u32,
    zones: Vec<String>,
    /// Containers the list shows with a stale `status_detail` (as zun-api's list does after
    /// its periodic state sync); a GET shows the real one.
    stale_in_list: BTreeMap<String, String>,
    /// Stops are accepted and leave the container running (Zun's compute has not taken the
    /// request off its queue yet).
    deferred_stops: bool,
    /// Archives put into containers: id → (path, tar), in order.
    archives: BTreeMap<String, Vec<(String, Vec<u8>)>>,
    /// Containers whose list entry is this older state until a GET of them (zun-api's list
    /// answers from its database, which zun-compute brings in line with Docker every 60 s;
    /// a GET asks Docker and saves what it says).
    unsynced: BTreeMap<String, ZunContainer>,
    /// Creates of containers with one of these labels are never answered.
    hung_creates: Vec<(String, String)>,
}

/// The fake Zun. Cheap to clone; clones share state.
#[derive(Clone, Debug)]
pub struct FakeZun {
    state: Arc<Mutex<State>>,
}

impl Default for FakeZun {
    fn default() -> Self {
        let unlimited = ZunQuotaValue {
            limit: -1.0,
            in_use: 0.0,
        };
        Self {
            state: Arc::new(Mutex::new(State {
                quota_limits: ZunQuota {
                    containers: ZunQuotaValue {
                        limit: 40.0,
                        in_use: 0.0,
                    },
                    cpu: ZunQuotaValue {
                        limit: 20.0,
                        in_use: 0.0,
                    },
                    memory: ZunQuotaValue {
                        limit: 51200.0,
                        in_use: 0.0,
                    },
                    disk: unlimited,
                },
                zones: vec!["nova".into()],
                next_ip: 10,
                ..Default::default()
            })),
        }
    }
}

fn now() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%S%.6f")
        .to_string()
}

impl FakeZun {
    /// An empty Zun with a default quota (40 containers, 20 CPUs, 50 GiB).
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn enter(&self, op: &str) -> Result<MutexGuard<'_, State>> {
        let mut s = self.lock();
        *s.calls.entry(op.to_string()).or_default() += 1;
        if let Some(e) = s.faults.remove(op) {
            return Err(e);
        }
        Ok(s)
    }

    /// Calls per operation (`create_container`, `list_containers`, ...).
    pub fn calls(&self, op: &str) -> u64 {
        self.lock().calls.get(op).copied().unwrap_or(0)
    }

    /// Calls of all operations.
    pub fn total_calls(&self) -> u64 {
        self.lock().calls.values().sum()
    }

    /// The next call of `op` fails with `e` (and does nothing).
    pub fn fail_next(&self, op: &str, e: Error) {
        self.lock().faults.insert(op.to_string(), e);
    }

    /// Set the project's quota limits.
    pub fn set_quota_limits(&self, containers: i64, cpu: i64, memory_mb: i64) {
        let mut s = self.lock();
        s.quota_limits.containers.limit = containers as f64;
        s.quota_limits.cpu.limit = cpu as f64;
        s.quota_limits.memory.limit = memory_mb as f64;
    }

    /// Make a running container exit with `code` (Docker's `Exited(code)`).
    pub fn exit(&self, id: &str, code: i32) {
        let mut s = self.lock();
        s.pending.remove(id);
        if let Some(c) = s.containers.get_mut(id) {
            c.status = status::STOPPED.into();
            c.status_detail = Some(format!("Exited({code}) 1 second ago"));
            c.updated_at = Some(now());
        }
    }

    /// Make a running container exit with `code` as Docker sees it, while the list keeps
    /// showing it as it was until a GET of it (or [`FakeZun::sync_states`]), as zun-api's list
    /// does until zun-compute's periodic state sync.
    pub fn exit_unsynced(&self, id: &str, code: i32) {
        let before = {
            let mut s = self.lock();
            settle(&mut s);
            s.containers.get(id).cloned()
        };
        self.exit(id, code);
        if let Some(c) = before {
            self.lock().unsynced.insert(id.to_string(), c);
        }
    }

    /// From now on a create of a container labelled `key=value` is counted and never answered
    /// (zun-api queueing it behind a request that does not end).
    pub fn hang_creates_labelled(&self, key: &str, value: &str) {
        self.lock()
            .hung_creates
            .push((key.to_string(), value.to_string()));
    }

    /// zun-compute's periodic state sync: the list shows every container as Docker does.
    pub fn sync_states(&self) {
        self.lock().unsynced.clear();
    }

    /// Put a container in `Error` with `reason`, as zun-compute does when it cannot
    /// create or start it (e.g. its Docker network could not be made).
    pub fn fail(&self, id: &str, reason: &str) {
        let mut s = self.lock();
        s.pending.remove(id);
        if let Some(c) = s.containers.get_mut(id) {
            c.status = status::ERROR.into();
            c.status_reason = Some(reason.to_string());
            c.updated_at = Some(now());
        }
    }

    /// From now on the list shows `detail` as this container's `status_detail` (zun-api's
    /// list answers from its database, which can lag behind Docker); GET shows the truth.
    pub fn stale_list_detail(&self, id: &str, detail: &str) {
        self.lock()
            .stale_in_list
            .insert(id.to_string(), detail.to_string());
    }

    /// From now on a stop is answered and does nothing (yet): the container stays running,
    /// as in Zun until its compute takes the request off the queue.
    pub fn defer_stops(&self) {
        self.lock().deferred_stops = true;
    }

    /// Append to a container's log.
    pub fn write_log(&self, id: &str, text: &str) {
        self.lock()
            .logs
            .entry(id.to_string())
            .or_default()
            .push_str(text);
    }

    /// Delete a container as if someone else did.
    pub fn remove(&self, id: &str) {
        let mut s = self.lock();
        s.containers.remove(id);
        s.pending.remove(id);
        s.unsynced.remove(id);
    }

    /// Every container, in id order.
    pub fn containers(&self) -> Vec<ZunContainer> {
        let mut s = self.lock();
        settle(&mut s);
        s.containers.values().cloned().collect()
    }

    /// The archives put into a container, in order: (path, tar bytes).
    pub fn archives(&self, id: &str) -> Vec<(String, Vec<u8>)> {
        self.lock().archives.get(id).cloned().unwrap_or_default()
    }

    /// Every capsule, in id order.
    pub fn capsules(&self) -> Vec<ZunCapsule> {
        self.lock().capsules.values().cloned().collect()
    }
}

/// Move created containers out of `Creating` (what zun-compute does).
fn settle(s: &mut State) {
    let pending = std::mem::take(&mut s.pending);
    for (id, run) in pending {
        if let Some(c) = s.containers.get_mut(&id) {
            if c.image.as_deref().is_some_and(|i| i.contains("missing")) {
                c.status = status::ERROR.into();
                c.status_reason = Some(format!(
                    "Image {} could not be found.",
                    c.image.clone().unwrap_or_default()
                ));
                continue;
            }
            if run {
                c.status = status::RUNNING.into();
                c.status_detail = Some("Up 1 second".into());
            } else {
                c.status = status::CREATED.into();
                c.status_detail = Some("Created".into());
            }
            c.updated_at = Some(now());
        }
    }
}

fn parse_mb(m: Option<&str>) -> i64 {
    m.map(|m| m.trim_end_matches(['M', 'm']))
        .and_then(|m| m.parse().ok())
        .unwrap_or(0)
}

fn usage(s: &State) -> (i64, f64, i64) {
    let mut n = 0;
    let mut cpu = 0.0;
    let mut mem = 0;
    for c in s.containers.values() {
        n += 1;
        cpu += c.cpu.unwrap_or(0.0);
        mem += parse_mb(c.memory.as_deref());
    }
    for c in s.capsules.values() {
        n += c.containers.len() as i64;
        cpu += c.cpu.unwrap_or(0.0);
        mem += parse_mb(c.memory.as_deref());
    }
    (n, cpu, mem)
}

fn not_found(kind: &str, id: &str) -> Error {
    Error::not_found(format!("container: {kind} {id} could not be found."))
}

#[async_trait]
impl Container for FakeZun {
    async fn create_container(&self, req: &ZunContainerCreate) -> Result<ZunContainer> {
        let hung = {
            let s = self.lock();
            s.hung_creates
                .iter()
                .any(|(k, v)| req.labels.get(k) == Some(v))
        };
        if hung {
            drop(self.enter("create_container")?);
            return std::future::pending().await;
        }
        let mut s = self.enter("create_container")?;
        if req.image.len() < 2 {
            return Err(Error::bad_request(
                "container create_container: Invalid input for field/attribute image.",
            ));
        }
        let (n, cpu, mem) = usage(&s);
        let q = s.quota_limits;
        let over = |limit: f64, used: f64| limit >= 0.0 && used > limit;
        if over(q.containers.limit, (n + 1) as f64)
            || over(q.cpu.limit, cpu + req.cpu.unwrap_or(0.0))
            || over(
                q.memory.limit,
                (mem + req.memory.unwrap_or(0) as i64) as f64,
            )
        {
            return Err(Error::forbidden(
                "container create_container: Quota exceeded for resources: ['containers', 'cpu', 'memory']",
            ));
        }
        let id = uuid::Uuid::new_v4().to_string();
        s.next_ip += 1;
        let ip = format!("10.0.0.{}", s.next_ip % 250 + 2);
        let net = req
            .nets
            .first()
            .and_then(|n| n.network.clone())
            .unwrap_or_else(|| "fake-net".into());
        let c = ZunContainer {
            uuid: id.clone(),
            name: Some(req.name.clone()),
            image: Some(req.image.clone()),
            status: status::CREATING.into(),
            labels: req.labels.clone(),
            addresses: [(
                net,
                vec![ZunAddress {
                    addr: ip,
                    version: 4,
                    port: Some(uuid::Uuid::new_v4().to_string()),
                    subnet_id: None,
                }],
            )]
            .into_iter()
            .collect(),
            cpu: req.cpu,
            memory: req.memory.map(|m| format!("{m}M")),
            command: req.command.clone(),
            entrypoint: req.entrypoint.clone(),
            environment: req.environment.clone(),
            workdir: req.workdir.clone(),
            restart_policy: req.restart_policy.clone(),
            created_at: Some(now()),
            ..Default::default()
        };
        s.containers.insert(id.clone(), c.clone());
        s.pending.insert(id, req.run);
        Ok(c)
    }

    async fn get_container(&self, id: &str) -> Result<ZunContainer> {
        let mut s = self.enter("get_container")?;
        settle(&mut s);
        s.unsynced.remove(id);
        s.containers
            .get(id)
            .cloned()
            .ok_or_else(|| not_found("Container", id))
    }

    async fn list_containers(
        &self,
        labels: &BTreeMap<String, String>,
        name: Option<&str>,
    ) -> Result<Vec<ZunContainer>> {
        let mut s = self.enter("list_containers")?;
        settle(&mut s);
        Ok(s.containers
            .values()
            .filter(|c| labels_match(&c.labels, labels))
            .filter(|c| name.is_none_or(|n| c.name.as_deref() == Some(n)))
            .map(|c| {
                let mut c = s.unsynced.get(&c.uuid).unwrap_or(c).clone();
                if let Some(d) = s.stale_in_list.get(&c.uuid) {
                    c.status_detail = Some(d.clone());
                }
                c
            })
            .collect())
    }

    async fn delete_container(&self, id: &str, stop: bool, force: bool) -> Result<()> {
        let mut s = self.enter("delete_container")?;
        // Zun's compute acts on the container and saves its state.
        s.unsynced.remove(id);
        settle(&mut s);
        let c = s
            .containers
            .get(id)
            .ok_or_else(|| not_found("Container", id))?;
        if c.status == status::RUNNING && !stop && !force {
            return Err(Error::conflict(format!(
                "container delete_container: Cannot delete container {id} in Running state."
            )));
        }
        s.containers.remove(id);
        s.logs.remove(id);
        Ok(())
    }

    async fn start_container(&self, id: &str) -> Result<()> {
        let mut s = self.enter("start_container")?;
        // Zun's compute acts on the container and saves its state.
        s.unsynced.remove(id);
        settle(&mut s);
        let c = s
            .containers
            .get_mut(id)
            .ok_or_else(|| not_found("Container", id))?;
        if ![status::CREATED, status::STOPPED, status::ERROR].contains(&c.status.as_str()) {
            return Err(Error::conflict(format!(
                "container start_container: Cannot start container {id} in {} state.",
                c.status
            )));
        }
        c.status = status::RUNNING.into();
        c.status_detail = Some("Up 1 second".into());
        Ok(())
    }

    async fn stop_container(&self, id: &str, _timeout_s: u64) -> Result<()> {
        let mut s = self.enter("stop_container")?;
        // Zun's compute acts on the container and saves its state.
        s.unsynced.remove(id);
        settle(&mut s);
        let c = s
            .containers
            .get_mut(id)
            .ok_or_else(|| not_found("Container", id))?;
        if c.status != status::RUNNING {
            return Err(Error::conflict(format!(
                "container stop_container: Cannot stop container {id} in {} state.",
                c.status
            )));
        }
        if s.deferred_stops {
            return Ok(());
        }
        let c = s
            .containers
            .get_mut(id)
            .ok_or_else(|| not_found("Container", id))?;
        c.status = status::STOPPED.into();
        c.status_detail = Some("Exited(143) 1 second ago".into());
        Ok(())
    }

    async fn container_logs(&self, id: &str, opts: &LogOptions) -> Result<String> {
        let s = self.enter("container_logs")?;
        if !s.containers.contains_key(id) {
            return Err(not_found("Container", id));
        }
        let all = s.logs.get(id).cloned().unwrap_or_default();
        Ok(match opts.tail {
            Some(n) => {
                let lines: Vec<&str> = all.lines().collect();
                let start = lines.len().saturating_sub(n as usize);
                lines[start..]
                    .iter()
                    .map(|l| format!("{l}\n"))
                    .collect::<String>()
            }
            None => all,
        })
    }

    async fn exec(&self, id: &str, command: &[String]) -> Result<ExecOutput> {
        let mut s = self.enter("exec")?;
        settle(&mut s);
        let c = s
            .containers
            .get(id)
            .ok_or_else(|| not_found("Container", id))?;
        if c.status != status::RUNNING {
            return Err(Error::conflict(format!(
                "container exec: Cannot execute container {id} in {} state.",
                c.status
            )));
        }
        // `echo` prints its words; anything else succeeds silently.
        let output = match command.split_first() {
            Some((cmd, rest)) if cmd == "echo" => format!("{}\n", rest.join(" ")),
            _ => String::new(),
        };
        Ok(ExecOutput {
            output,
            exit_code: Some(0),
        })
    }

    async fn create_capsule(&self, req: &ZunCapsuleCreate) -> Result<ZunCapsule> {
        let mut s = self.enter("create_capsule")?;
        let t = &req.template;
        let meta = t.get("metadata").cloned().unwrap_or_default();
        let strings = |v: Option<&serde_json::Value>| -> BTreeMap<String, String> {
            v.and_then(|v| v.as_object())
                .map(|o| {
                    o.iter()
                        .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                        .collect()
                })
                .unwrap_or_default()
        };
        let members = |key: &str| -> Vec<ZunContainer> {
            t.pointer(&format!("/spec/{key}"))
                .and_then(|v| v.as_array())
                .map(|a| {
                    a.iter()
                        .map(|m| ZunContainer {
                            uuid: uuid::Uuid::new_v4().to_string(),
                            name: m.get("name").and_then(|n| n.as_str()).map(str::to_string),
                            image: m.get("image").and_then(|n| n.as_str()).map(str::to_string),
                            status: status::RUNNING.into(),
                            ..Default::default()
                        })
                        .collect()
                })
                .unwrap_or_default()
        };
        let containers = members("containers");
        if containers.is_empty() {
            return Err(Error::bad_request(
                "container create_capsule: Capsule need to have one container at least",
            ));
        }
        let c = ZunCapsule {
            uuid: uuid::Uuid::new_v4().to_string(),
            name: meta
                .get("name")
                .and_then(|n| n.as_str())
                .map(str::to_string),
            status: status::RUNNING.into(),
            labels: strings(meta.get("labels")),
            annotations: strings(meta.get("annotations")),
            init_containers: members("initContainers"),
            containers,
            created_at: Some(now()),
            ..Default::default()
        };
        s.capsules.insert(c.uuid.clone(), c.clone());
        Ok(c)
    }

    async fn get_capsule(&self, id: &str) -> Result<ZunCapsule> {
        let s = self.enter("get_capsule")?;
        s.capsules
            .get(id)
            .cloned()
            .ok_or_else(|| not_found("Capsule", id))
    }

    async fn list_capsules(&self, labels: &BTreeMap<String, String>) -> Result<Vec<ZunCapsule>> {
        let s = self.enter("list_capsules")?;
        Ok(s.capsules
            .values()
            .filter(|c| labels_match(&c.labels, labels))
            .cloned()
            .collect())
    }

    async fn delete_capsule(&self, id: &str) -> Result<()> {
        let mut s = self.enter("delete_capsule")?;
        s.capsules
            .remove(id)
            .map(|_| ())
            .ok_or_else(|| not_found("Capsule", id))
    }

    async fn get_quota(&self, _project_id: &str) -> Result<ZunQuota> {
        let s = self.enter("get_quota")?;
        let (n, cpu, mem) = usage(&s);
        let mut q = s.quota_limits;
        q.containers.in_use = n as f64;
        q.cpu.in_use = cpu;
        q.memory.in_use = mem as f64;
        Ok(q)
    }

    async fn list_availability_zones(&self) -> Result<Vec<String>> {
        Ok(self.enter("list_availability_zones")?.zones.clone())
    }

    async fn list_services(&self) -> Result<Vec<ZunService>> {
        let _s = self.enter("list_services")?;
        Ok(vec![ZunService {
            host: "fake-compute".into(),
            binary: "zun-compute".into(),
            state: "up".into(),
            disabled: false,
            availability_zone: Some("nova".into()),
        }])
    }

    async fn put_archive(&self, id: &str, path: &str, tar: &[u8]) -> Result<()> {
        let mut s = self.enter("put_archive")?;
        settle(&mut s);
        let st = s
            .containers
            .get(id)
            .map(|c| c.status.clone())
            .ok_or_else(|| not_found("Container", id))?;
        // Zun's `validate_container_state` for put_archive.
        if ![
            status::CREATED,
            status::PAUSED,
            status::RUNNING,
            status::STOPPED,
        ]
        .contains(&st.as_str())
        {
            return Err(Error::conflict(format!(
                "container put_archive: Cannot put_archive container {id} in {st} state."
            )));
        }
        s.archives
            .entry(id.to_string())
            .or_default()
            .push((path.to_string(), tar.to_vec()));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(name: &str, image: &str) -> ZunContainerCreate {
        ZunContainerCreate {
            name: name.into(),
            image: image.into(),
            run: true,
            labels: [("k".to_string(), name.to_string())].into_iter().collect(),
            memory: Some(64),
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn lifecycle_and_conflicts() {
        let z = FakeZun::new();
        let c = z.create_container(&req("a", "busybox")).await.unwrap();
        assert_eq!(c.status, status::CREATING);
        let c = z.get_container(&c.uuid).await.unwrap();
        assert_eq!(c.status, status::RUNNING);
        let e = z.delete_container(&c.uuid, false, false).await.unwrap_err();
        assert!(e.is_conflict(), "{e}");
        z.stop_container(&c.uuid, 1).await.unwrap();
        assert!(
            z.stop_container(&c.uuid, 1)
                .await
                .unwrap_err()
                .is_conflict()
        );
        z.delete_container(&c.uuid, false, false).await.unwrap();
        assert!(z.get_container(&c.uuid).await.unwrap_err().is_not_found());
    }

    #[tokio::test]
    async fn list_by_label_and_quota() {
        let z = FakeZun::new();
        z.create_container(&req("a", "busybox")).await.unwrap();
        z.create_container(&req("b", "busybox")).await.unwrap();
        let want = [("k".to_string(), "b".to_string())].into_iter().collect();
        let l = z.list_containers(&want, None).await.unwrap();
        assert_eq!(l.len(), 1);
        assert_eq!(l[0].name.as_deref(), Some("b"));
        let q = z.get_quota("p").await.unwrap();
        assert_eq!(q.containers.in_use, 2.0);
        assert_eq!(q.memory.in_use, 128.0);
        z.set_quota_limits(2, -1, -1);
        let e = z.create_container(&req("c", "busybox")).await.unwrap_err();
        assert!(matches!(e, Error::Forbidden { .. }), "{e}");
    }

    #[tokio::test]
    async fn missing_image_and_exit() {
        let z = FakeZun::new();
        let c = z.create_container(&req("a", "missing:1")).await.unwrap();
        let c = z.get_container(&c.uuid).await.unwrap();
        assert_eq!(c.status, status::ERROR);
        assert!(c.status_reason.unwrap().contains("could not be found"));
        let d = z.create_container(&req("d", "busybox")).await.unwrap();
        z.exit(&d.uuid, 3);
        assert_eq!(z.get_container(&d.uuid).await.unwrap().exit_code(), Some(3));
    }
}
