//! The [`vk_runtime::provider::Provider`] on the local Docker engine: one pass over the
//! node's pods per poll interval (or pod event), each pod's containers made, started,
//! restarted, stopped and removed as a kubelet would, and its status rendered
//! ([`crate::state`]).
//!
//! A pod is a sandbox container (`sleep infinity` holding the pod's network namespace on the
//! node's Docker bridge network: the pod IP) and one Docker container per run of each pod
//! container, joined to the sandbox's namespace.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{Container, Pod, Service};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::api::{Api, ListParams};
use serde_json::{Value, json};
use tracing::{debug, info, warn};
use vk_runtime::provider::{
    Condition, EventType, NodeState, Objects, PodEvent, PodUpdate, Provider, ProviderError,
    TokenWanted,
};
use vk_zun::translate::{Role, TranslateError};

use crate::docker::{Docker, DockerError};
use crate::files;
use crate::netns::NetNs;
use crate::prober::{Prober, Watch};
use crate::services::{self, HostEntry, Proxy, Vips};
use crate::spec::{self, Placement, Refs, labels};
use crate::state::{self, Action, Extra, Observed, Run};

/// The node's settings.
#[derive(Clone, Debug)]
pub struct Settings {
    /// The node's name.
    pub node: String,
    /// Where pod files live (host directories bind-mounted into containers).
    pub state_dir: PathBuf,
    /// The Docker network pods are on.
    pub network: String,
    /// Its subnet (`10.244.0.0/16`).
    pub subnet: String,
    /// Its gateway: the node's address as pods see it (`status.hostIP`, the relays).
    pub gateway: Ipv4Addr,
    /// The first address of the Services' range.
    pub service_base: Ipv4Addr,
    /// The sandbox's image; `None`: the pod's first container's image.
    pub sandbox_image: Option<String>,
    /// Lines added to every pod's hosts file.
    pub extra_hosts: Vec<String>,
    /// Host addresses relayed from `gateway:<their port>` (in the engine's namespace): the
    /// external services on `127.0.0.1`, and Ceph on the gateway's own address, which it
    /// hands its clients in its maps ([`services::relay_targets`]).
    pub relays: Vec<SocketAddr>,
}

#[derive(Clone, Debug)]
struct Cached {
    list_state: String,
    observed: Observed,
    ip: Option<String>,
}

struct Tok {
    token: String,
    refresh_at: jiff::Timestamp,
}

/// The provider.
pub struct DockerProvider {
    docker: Docker,
    cfg: Settings,
    client: kube::Client,
    proxy: Proxy,
    prober: Arc<Prober>,
    vips: Mutex<Vips>,
    cache: Mutex<BTreeMap<String, Cached>>,
    written: Mutex<files::Written>,
    image_users: Mutex<BTreeMap<String, String>>,
    tokens: Mutex<BTreeMap<(String, usize, usize), Tok>>,
    hosts: Mutex<BTreeMap<String, String>>,
    stopping: Arc<Mutex<BTreeSet<String>>>,
}

fn ts(v: &Value) -> Option<jiff::Timestamp> {
    v.as_str()
        .filter(|s| !s.starts_with("0001-"))
        .and_then(|s| s.parse().ok())
}

fn err_unavailable(e: DockerError) -> ProviderError {
    ProviderError::Unavailable(e.to_string())
}

impl DockerProvider {
    /// Prepares the node: the Docker network, the relays, the prober. `ns` is the engine's
    /// network namespace.
    pub async fn new(
        docker: Docker,
        ns: NetNs,
        client: kube::Client,
        cfg: Settings,
    ) -> Result<Arc<Self>, String> {
        docker
            .ping()
            .await
            .map_err(|e| format!("the Docker engine does not answer: {e}"))?;
        if docker
            .network(&cfg.network)
            .await
            .map_err(|e| e.to_string())?
            .is_none()
        {
            let made = docker
                .create_network(&json!({
                    "Name": cfg.network,
                    "Driver": "bridge",
                    "CheckDuplicate": true,
                    "IPAM": { "Config": [{ "Subnet": cfg.subnet, "Gateway": cfg.gateway.to_string() }] },
                    "Options": { "com.docker.network.bridge.enable_ip_masquerade": "false" },
                    "Labels": { labels::NODE: cfg.node },
                }))
                .await;
            match made {
                Ok(()) => {
                    info!(network = %cfg.network, subnet = %cfg.subnet, "Docker network created")
                }
                // Made meanwhile by another node sharing it.
                Err(e) if e.status() == Some(409) => {}
                Err(e) => return Err(format!("creating Docker network {}: {e}", cfg.network)),
            }
        }
        std::fs::create_dir_all(&cfg.state_dir)
            .map_err(|e| format!("creating {}: {e}", cfg.state_dir.display()))?;
        let proxy = Proxy::new(ns.clone());
        for to in &cfg.relays {
            let listen = SocketAddr::from((cfg.gateway, to.port()));
            // An engine in the host's namespace: the gateway is the host's own address, so a
            // service listening there is reached directly (and holds the port).
            if ns.path().is_none() && listen == *to {
                continue;
            }
            proxy
                .relay(listen, *to)
                .await
                .map_err(|e| format!("relay {listen} → {to}: {e}"))?;
        }
        let prober = Arc::new(Prober::new(docker.clone(), ns));
        tokio::spawn(prober.clone().run());
        Ok(Arc::new(Self {
            docker,
            vips: Mutex::new(Vips::new(cfg.service_base, 65_000)),
            cfg,
            client,
            proxy,
            prober,
            cache: Mutex::new(BTreeMap::new()),
            written: Mutex::new(BTreeMap::new()),
            image_users: Mutex::new(BTreeMap::new()),
            tokens: Mutex::new(BTreeMap::new()),
            hosts: Mutex::new(BTreeMap::new()),
            stopping: Arc::new(Mutex::new(BTreeSet::new())),
        }))
    }

    /// Everything Docker shows of the node's containers: pod uid → (sandbox, containers).
    async fn observe(
        &self,
    ) -> Result<BTreeMap<String, (Option<Cached>, Vec<Cached>)>, ProviderError> {
        let list = self
            .docker
            .list(&format!("{}={}", labels::NODE, self.cfg.node))
            .await
            .map_err(err_unavailable)?;
        let mut out: BTreeMap<String, (Option<Cached>, Vec<Cached>)> = BTreeMap::new();
        let mut live = BTreeSet::new();
        for c in list {
            let Some(id) = c["Id"].as_str().map(str::to_string) else {
                continue;
            };
            live.insert(id.clone());
            let l = &c["Labels"];
            let uid = l[labels::POD_UID].as_str().unwrap_or_default().to_string();
            // `State` only: `Status` ("Up 5 seconds") changes on every list.
            let list_state = c["State"].as_str().unwrap_or_default().to_string();
            let cached = self
                .cache
                .lock()
                .ok()
                .and_then(|m| m.get(&id).cloned())
                .filter(|x| x.list_state == list_state);
            let entry = match cached {
                Some(x) => x,
                None => {
                    let Some(ins) = self.docker.inspect(&id).await.map_err(err_unavailable)? else {
                        continue;
                    };
                    let x = self.cached_of(&id, &ins, list_state);
                    if let Ok(mut m) = self.cache.lock() {
                        m.insert(id.clone(), x.clone());
                    }
                    x
                }
            };
            let slot = out.entry(uid).or_default();
            if l[labels::ROLE].as_str() == Some("sandbox") {
                slot.0 = Some(entry);
            } else {
                slot.1.push(entry);
            }
        }
        if let Ok(mut m) = self.cache.lock() {
            m.retain(|id, _| live.contains(id));
        }
        Ok(out)
    }

    fn cached_of(&self, id: &str, ins: &Value, list_state: String) -> Cached {
        let l = &ins["Config"]["Labels"];
        let st = &ins["State"];
        let status = st["Status"].as_str().unwrap_or_default();
        let run = match status {
            "running" | "restarting" | "paused" => Run::Running,
            "created" => Run::Created,
            "exited" => Run::Exited {
                code: st["ExitCode"].as_i64().unwrap_or(137) as i32,
                oom: st["OOMKilled"].as_bool().unwrap_or(false),
            },
            other => Run::Other(other.to_string()),
        };
        let role = match l[labels::ROLE].as_str() {
            Some("init") => Role::Init,
            _ => Role::Main,
        };
        let name = l[labels::CONTAINER]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let attempt = l[labels::ATTEMPT]
            .as_str()
            .and_then(|a| a.parse().ok())
            .unwrap_or(0);
        let uid = l[labels::POD_UID].as_str().unwrap_or_default();
        let message = matches!(run, Run::Exited { .. })
            .then(|| {
                let pdir = self.cfg.state_dir.join("pods").join(uid);
                files::read_termination_log(&files::container_dir(&pdir, role, &name), attempt)
            })
            .flatten();
        let ip = ins["NetworkSettings"]["Networks"][&self.cfg.network]["IPAddress"]
            .as_str()
            .filter(|s| !s.is_empty())
            .map(str::to_string);
        Cached {
            list_state,
            ip,
            observed: Observed {
                id: id.to_string(),
                role,
                name,
                attempt,
                run,
                started_at: ts(&st["StartedAt"]),
                finished_at: ts(&st["FinishedAt"]),
                message,
            },
        }
    }

    async fn image_user(&self, image: &str, pull_policy: Option<&str>) -> Result<String, String> {
        if let Some(u) = self
            .image_users
            .lock()
            .ok()
            .and_then(|m| m.get(image).cloned())
        {
            return Ok(u);
        }
        let mut found = self.docker.image(image).await.map_err(|e| e.to_string())?;
        let always =
            pull_policy == Some("Always") || (pull_policy.is_none() && image.ends_with(":latest"));
        if found.is_none() || (always && pull_policy != Some("Never")) {
            if pull_policy == Some("Never") {
                return Err(format!(
                    "image {image:?} is not present with pull policy of Never"
                ));
            }
            if let Err(e) = self.docker.pull(image).await {
                if found.is_none() {
                    return Err(format!("pulling image {image:?}: {e}"));
                }
                debug!(%image, error = %e, "pull failed; using the local image");
            }
            found = self.docker.image(image).await.map_err(|e| e.to_string())?;
        }
        let v = found.ok_or_else(|| format!("image {image:?} not found after pulling"))?;
        let u = v["Config"]["User"].as_str().unwrap_or_default().to_string();
        if let Ok(mut m) = self.image_users.lock() {
            m.insert(image.to_string(), u.clone());
        }
        Ok(u)
    }

    async fn refs(&self, pod: &Pod, objects: &dyn Objects) -> Result<Refs, String> {
        let ns = pod.metadata.namespace.clone().unwrap_or_default();
        let mut cms = BTreeSet::new();
        let mut secrets = BTreeSet::new();
        if let Some(spec) = &pod.spec {
            for c in spec
                .init_containers
                .iter()
                .flatten()
                .chain(&spec.containers)
            {
                let (a, b) = spec::env_references(c);
                cms.extend(a);
                secrets.extend(b);
            }
        }
        let v = vk_zun::volumes::references(pod);
        cms.extend(v.config_maps);
        secrets.extend(v.secrets);
        let mut refs = Refs::default();
        for n in cms {
            if let Some(cm) = objects.config_map(&ns, &n).await? {
                refs.config_maps.insert(n, cm);
            }
        }
        for n in secrets {
            if let Some(s) = objects.secret(&ns, &n).await? {
                refs.secrets.insert(n, s);
            }
        }
        Ok(refs)
    }

    async fn tokens(
        &self,
        pod: &Pod,
        objects: &dyn Objects,
    ) -> Result<BTreeMap<(usize, usize), String>, String> {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let ns = pod.metadata.namespace.clone().unwrap_or_default();
        let now = jiff::Timestamp::now();
        let mut out = BTreeMap::new();
        for t in vk_zun::volumes::references(pod).tokens {
            let key = (uid.clone(), t.key.0, t.key.1);
            let cached = self.tokens.lock().ok().and_then(|m| {
                m.get(&key)
                    .filter(|c| c.refresh_at > now)
                    .map(|c| c.token.clone())
            });
            let token = match cached {
                Some(tok) => tok,
                None => {
                    let sa = pod
                        .spec
                        .as_ref()
                        .and_then(|s| s.service_account_name.clone())
                        .unwrap_or_else(|| "default".into());
                    let issued = objects
                        .service_account_token(
                            &ns,
                            &TokenWanted {
                                service_account: sa,
                                audience: t.audience.clone(),
                                expiration_seconds: t.expiration_seconds,
                                pod: (pod.metadata.name.clone().unwrap_or_default(), uid.clone()),
                            },
                        )
                        .await?;
                    // Refreshed at 80 % of its life, as the kubelet does.
                    let life = issued.expires.duration_since(now);
                    let refresh_at = now + life.checked_mul(4).unwrap_or(life) / 5;
                    if let Ok(mut m) = self.tokens.lock() {
                        m.insert(
                            key,
                            Tok {
                                token: issued.token.clone(),
                                refresh_at,
                            },
                        );
                    }
                    issued.token
                }
            };
            out.insert(t.key, token);
        }
        Ok(out)
    }

    /// The Services: each one's hosts-file entry and its forwarders' endpoints.
    async fn services(&self, pods: &[Pod]) -> Vec<HostEntry> {
        let list = match Api::<Service>::all(self.client.clone())
            .list(&ListParams::default())
            .await
        {
            Ok(l) => l.items,
            Err(e) => {
                warn!(error = %e, "listing Services failed; names and forwarders kept as they were");
                return self.last_entries();
            }
        };
        let views = services::pod_views(pods);
        let mut entries = Vec::new();
        let mut want = BTreeMap::new();
        for svc in &list {
            let ns = svc.metadata.namespace.clone().unwrap_or_default();
            let name = svc.metadata.name.clone().unwrap_or_default();
            let eps = services::backends(svc, &views);
            if services::headless(svc) {
                if let Some(ip) = eps.values().flatten().next().map(|a| a.ip())
                    && let std::net::IpAddr::V4(ip) = ip
                {
                    entries.push(HostEntry {
                        ip,
                        namespace: ns,
                        name,
                    });
                }
                continue;
            }
            let Some(vip) = self.vips.lock().ok().and_then(|mut v| v.get(&ns, &name)) else {
                warn!(service = %name, "no Service address left");
                continue;
            };
            for (port, e) in eps {
                want.insert(SocketAddr::from((vip, port)), e);
            }
            entries.push(HostEntry {
                ip: vip,
                namespace: ns,
                name,
            });
        }
        self.proxy.update(want).await;
        entries
    }

    fn last_entries(&self) -> Vec<HostEntry> {
        Vec::new()
    }

    /// `<state dir>/hosts`: every Service by its full names, for a process run in the engine's
    /// network namespace with this file as its `/etc/hosts` (an operator outside the pods, a
    /// client on the host: `docs/test-node.md`). Rewritten in place, so a bind mount follows.
    fn write_node_hosts(&self, svcs: &[HostEntry]) {
        let body = services::hosts_file("", &self.cfg.node, None, svcs, &self.cfg.extra_hosts);
        let path = self.cfg.state_dir.join("hosts");
        let key = path.display().to_string();
        if self
            .hosts
            .lock()
            .ok()
            .and_then(|m| m.get(&key).cloned())
            .as_deref()
            == Some(body.as_str())
            && path.exists()
        {
            return;
        }
        if let Err(e) = std::fs::write(&path, &body) {
            warn!(path = %path.display(), error = %e, "writing the node's hosts file failed");
            return;
        }
        if let Ok(mut m) = self.hosts.lock() {
            m.insert(key, body);
        }
    }

    fn write_hosts(&self, pod: &Pod, pdir: &std::path::Path, ip: Option<&str>, svcs: &[HostEntry]) {
        let ns = pod.metadata.namespace.clone().unwrap_or_default();
        let hostname = pod
            .spec
            .as_ref()
            .and_then(|s| s.hostname.clone())
            .or_else(|| pod.metadata.name.clone())
            .unwrap_or_default();
        let body = services::hosts_file(&ns, &hostname, ip, svcs, &self.cfg.extra_hosts);
        let path = pdir.join("hosts");
        let key = path.display().to_string();
        if self
            .hosts
            .lock()
            .ok()
            .and_then(|m| m.get(&key).cloned())
            .as_deref()
            == Some(body.as_str())
            && path.exists()
        {
            return;
        }
        // In place: the file is bind-mounted, a rename would leave the containers the old one.
        if let Err(e) = std::fs::write(&path, &body) {
            warn!(path = %path.display(), error = %e, "writing the pod's hosts file failed");
            return;
        }
        if let Ok(mut m) = self.hosts.lock() {
            m.insert(key, body);
        }
    }

    async fn ensure_sandbox(
        &self,
        pod: &Pod,
        sandbox: Option<&Cached>,
        pdir: &std::path::Path,
    ) -> Result<(String, Option<String>), String> {
        if let Some(s) = sandbox {
            if s.observed.run == Run::Running {
                return Ok((s.observed.id.clone(), s.ip.clone()));
            }
            // A sandbox that stopped is started again (its containers' namespace with it).
            self.docker
                .start(&s.observed.id)
                .await
                .map_err(|e| format!("starting the pod sandbox: {e}"))?;
            let ip = self.sandbox_ip(&s.observed.id).await;
            return Ok((s.observed.id.clone(), ip));
        }
        let spec = pod.spec.as_ref().ok_or("the pod has no spec")?;
        let image = self
            .cfg
            .sandbox_image
            .clone()
            .or_else(|| spec.containers.first().and_then(|c| c.image.clone()))
            .ok_or("no image for the pod sandbox")?;
        self.image_user(&image, None).await?;
        let hosts = pdir.join("hosts");
        let body = spec::sandbox_body(
            pod,
            &self.cfg.node,
            &image,
            &self.cfg.network,
            &hosts.display().to_string(),
        );
        let uid = pod.metadata.uid.as_deref().unwrap_or_default();
        let name = format!(
            "k8s_POD_{}_{}_{}",
            pod.metadata.name.as_deref().unwrap_or_default(),
            pod.metadata.namespace.as_deref().unwrap_or_default(),
            &uid[..uid.len().min(8)]
        );
        let id = match self.docker.create(&name, &body).await {
            Ok(id) => id,
            // A create whose answer was lost: take the one that exists.
            Err(e) if e.status() == Some(409) => self
                .docker
                .inspect(&name)
                .await
                .map_err(|e| e.to_string())?
                .and_then(|v| v["Id"].as_str().map(str::to_string))
                .ok_or_else(|| format!("creating the pod sandbox: {e}"))?,
            Err(e) => return Err(format!("creating the pod sandbox: {e}")),
        };
        self.docker
            .start(&id)
            .await
            .map_err(|e| format!("starting the pod sandbox: {e}"))?;
        let ip = self.sandbox_ip(&id).await;
        Ok((id, ip))
    }

    async fn sandbox_ip(&self, id: &str) -> Option<String> {
        let v = self.docker.inspect(id).await.ok()??;
        v["NetworkSettings"]["Networks"][&self.cfg.network]["IPAddress"]
            .as_str()
            .filter(|s| !s.is_empty())
            .map(str::to_string)
    }

    /// The container's file set, written to its mounts' host directories when it changed.
    fn write_files(
        &self,
        pod: &Pod,
        role: Role,
        c: &Container,
        pdir: &std::path::Path,
        sources: &vk_zun::volumes::Sources,
    ) -> Result<Vec<files::Mount>, TranslateError> {
        let mounts = files::mounts(pod, role, c, pdir);
        let set = vk_zun::volumes::files(pod, role, &c.name, sources)?;
        let key = (
            pod.metadata.uid.clone().unwrap_or_default(),
            role,
            c.name.clone(),
        );
        let unchanged = self
            .written
            .lock()
            .ok()
            .and_then(|m| m.get(&key).cloned())
            .is_some_and(|h| h == set.hash);
        if !unchanged {
            files::materialize(&set, &mounts, files::fs_group(pod)).map_err(|e| {
                TranslateError::Unsupported {
                    field: format!("container {:?} volumes", c.name),
                    why: format!("writing its files on the node: {e}"),
                }
            })?;
            if let Ok(mut m) = self.written.lock() {
                m.insert(key, set.hash);
            }
        }
        Ok(mounts)
    }

    #[allow(clippy::too_many_arguments)]
    async fn start_container(
        &self,
        pod: &Pod,
        role: Role,
        idx_name: (usize, &Container),
        attempt: i32,
        sandbox: &str,
        pod_ip: Option<&str>,
        refs: &Refs,
        sources: &vk_zun::volumes::Sources<'_>,
        pdir: &std::path::Path,
    ) -> Result<Observed, (String, String)> {
        let (idx, c) = idx_name;
        let path = match role {
            Role::Init => format!("spec.initContainers[{idx}]"),
            Role::Main => format!("spec.containers[{idx}]"),
        };
        let cfg = spec::downward_config(&self.cfg.node, &self.cfg.gateway.to_string());
        let ips: Vec<String> = pod_ip.into_iter().map(str::to_string).collect();
        let ctx = vk_zun::downward::Context {
            cfg: &cfg,
            pod_ips: &ips,
            node_cpu: sources.node_cpu,
        };
        let config_err =
            |e: TranslateError| ("CreateContainerConfigError".to_string(), e.to_string());
        let env = spec::environment(&path, pod, c, refs, &ctx).map_err(config_err)?;
        let mounts = self
            .write_files(pod, role, c, pdir, sources)
            .map_err(config_err)?;
        let image = c.image.clone().unwrap_or_default();
        let image_user = self
            .image_user(&image, c.image_pull_policy.as_deref())
            .await
            .map_err(|e| ("ErrImagePull".to_string(), e))?;
        let cdir = files::container_dir(pdir, role, &c.name);
        let log = files::termination_log(&cdir, attempt)
            .map_err(|e| ("CreateContainerError".to_string(), e.to_string()))?;
        let mut binds: Vec<String> = mounts.iter().map(files::Mount::bind).collect();
        binds.push(format!("{}:/etc/hosts:ro", pdir.join("hosts").display()));
        binds.push(format!(
            "{}:{}",
            log.display(),
            c.termination_message_path
                .clone()
                .filter(|p| !p.is_empty())
                .unwrap_or_else(|| "/dev/termination-log".into())
        ));
        let body = spec::create_body(
            pod,
            role,
            c,
            &env,
            &Placement {
                node: &self.cfg.node,
                sandbox_id: sandbox,
                binds,
                image_user: &image_user,
                attempt,
            },
        );
        let name = spec::container_name(pod, &c.name, attempt);
        let create_err = |e: DockerError| ("CreateContainerError".to_string(), e.to_string());
        let id = match self.docker.create(&name, &body).await {
            Ok(id) => id,
            Err(e) if e.status() == Some(409) => {
                // Left by a pass whose answer was lost: replaced.
                self.docker.remove(&name).await.map_err(create_err)?;
                self.docker.create(&name, &body).await.map_err(create_err)?
            }
            Err(e) => return Err(create_err(e)),
        };
        self.docker
            .start(&id)
            .await
            .map_err(|e| ("RunContainerError".to_string(), e.to_string()))?;
        Ok(Observed {
            id,
            role,
            name: c.name.clone(),
            attempt,
            run: Run::Running,
            started_at: Some(jiff::Timestamp::now()),
            finished_at: None,
            message: None,
        })
    }

    /// One pod's pass: the update to report.
    async fn sync_pod(
        &self,
        pod: &Pod,
        sandbox: Option<&Cached>,
        containers: &[Cached],
        objects: &dyn Objects,
        svcs: &[HostEntry],
    ) -> PodUpdate {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let mut u = PodUpdate {
            namespace: pod.metadata.namespace.clone().unwrap_or_default(),
            name: pod.metadata.name.clone().unwrap_or_default(),
            uid: uid.clone(),
            ..Default::default()
        };
        let pdir = files::pod_dir(&self.cfg.state_dir, pod);
        let mut observed: Vec<Observed> = containers.iter().map(|c| c.observed.clone()).collect();
        if pod.metadata.deletion_timestamp.is_some() {
            let mut all = observed.clone();
            if let Some(s) = sandbox {
                all.push(s.observed.clone());
            }
            let actions = state::on_delete(pod, &all);
            if actions.is_empty() {
                let _ = std::fs::remove_dir_all(&pdir);
                u.deleted = true;
                return u;
            }
            for a in actions {
                match a {
                    // Containers first; the sandbox (holding their network) last, at once.
                    Action::Stop(id, g) => {
                        if sandbox.is_some_and(|s| s.observed.id == id) {
                            if observed.is_empty() {
                                self.stop_later(&id, 0);
                            }
                        } else {
                            self.stop_later(&id, g);
                        }
                    }
                    Action::Remove(id) => {
                        if let Err(e) = self.docker.remove(&id).await {
                            warn!(pod = %u.name, error = %e, "removing the pod's containers");
                        }
                        observed.retain(|o| o.id != id);
                    }
                    _ => {}
                }
            }
            return u;
        }
        if let Err(e) = spec::validate_volumes(pod.spec.as_ref().unwrap_or(&Default::default())) {
            let extra = Extra {
                failure: Some(("ProviderFailed".into(), e.to_string())),
                ..Default::default()
            };
            u.status = Some(state::render(
                pod,
                &observed,
                &extra,
                &self.host_ip(),
                jiff::Timestamp::now(),
            ));
            return u;
        }
        if state::is_terminal(pod) {
            // The kubelet stops a finished pod's sandbox.
            if let Some(s) = sandbox.filter(|s| s.observed.run == Run::Running) {
                self.stop_later(&s.observed.id, 0);
            }
            return u;
        }
        if let Err(e) =
            std::fs::create_dir_all(&pdir).and_then(|_| files::prepare_empty_dirs(pod, &pdir))
        {
            warn!(pod = %u.name, error = %e, "preparing the pod's directory");
            return u;
        }
        let mut extra = Extra::default();
        // The hosts file exists before the sandbox mounts it; its own line once the IP is known.
        self.write_hosts(pod, &pdir, sandbox.and_then(|s| s.ip.as_deref()), svcs);
        let (sandbox_id, pod_ip) = match self.ensure_sandbox(pod, sandbox, &pdir).await {
            Ok(x) => x,
            Err(e) => {
                u.events.push(PodEvent {
                    type_: EventType::Warning,
                    reason: "FailedCreatePodSandBox".into(),
                    message: e.clone(),
                });
                let key = |r: Role, n: &str| (r, n.to_string());
                if let Some(spec) = &pod.spec {
                    for c in &spec.containers {
                        extra.create_errors.insert(
                            key(Role::Main, &c.name),
                            ("ContainerCreating".into(), e.clone()),
                        );
                    }
                }
                u.status = Some(state::render(
                    pod,
                    &observed,
                    &extra,
                    &self.host_ip(),
                    jiff::Timestamp::now(),
                ));
                return u;
            }
        };
        self.write_hosts(pod, &pdir, pod_ip.as_deref(), svcs);
        extra.pod_ip = pod_ip.clone();
        let now = jiff::Timestamp::now();
        let actions = state::decide(pod, &observed, now);
        let spec = pod.spec.clone().unwrap_or_default();
        let refs = match self.refs(pod, objects).await {
            Ok(r) => r,
            Err(e) => {
                warn!(pod = %u.name, error = %e, "reading the pod's ConfigMaps and Secrets");
                return u;
            }
        };
        let tokens = match self.tokens(pod, objects).await {
            Ok(t) => t,
            Err(e) => {
                warn!(pod = %u.name, error = %e, "requesting the pod's service account tokens");
                BTreeMap::new()
            }
        };
        let zcfg = spec::downward_config(&self.cfg.node, &self.cfg.gateway.to_string());
        let sources = vk_zun::volumes::Sources {
            config_maps: &refs.config_maps,
            secrets: &refs.secrets,
            tokens: &tokens,
            cfg: &zcfg,
            node_cpu: num_cpus(),
        };
        for a in actions {
            let (role, idx, c, attempt) = match &a {
                Action::StartInit(i, att) => {
                    match spec.init_containers.as_ref().and_then(|v| v.get(*i)) {
                        Some(c) => (Role::Init, *i, c, *att),
                        None => continue,
                    }
                }
                Action::StartMain(n, att) => match spec
                    .containers
                    .iter()
                    .enumerate()
                    .find(|(_, c)| c.name == *n)
                {
                    Some((i, c)) => (Role::Main, i, c, *att),
                    None => continue,
                },
                Action::Remove(id) => {
                    if let Err(e) = self.docker.remove(id).await {
                        warn!(pod = %u.name, error = %e, "removing an old container");
                    }
                    observed.retain(|o| o.id != *id);
                    continue;
                }
                Action::Stop(id, g) => {
                    self.stop_later(id, *g);
                    continue;
                }
            };
            match self
                .start_container(
                    pod,
                    role,
                    (idx, c),
                    attempt,
                    &sandbox_id,
                    pod_ip.as_deref(),
                    &refs,
                    &sources,
                    &pdir,
                )
                .await
            {
                Ok(o) => {
                    u.events.push(PodEvent {
                        type_: EventType::Normal,
                        reason: "Started".into(),
                        message: format!("Started container {}", c.name),
                    });
                    observed.push(o);
                }
                Err((reason, msg)) => {
                    u.events.push(PodEvent {
                        type_: EventType::Warning,
                        reason: "Failed".into(),
                        message: format!("Error: {msg}"),
                    });
                    extra
                        .create_errors
                        .insert((role, c.name.clone()), (reason, msg));
                }
            }
        }
        // Running containers: files kept current (Secrets and ConfigMaps edited), probes.
        let (latest, _) = state::index(&observed);
        for ((role, name), o) in &latest {
            if o.run != Run::Running {
                continue;
            }
            let c = match role {
                Role::Init => spec
                    .init_containers
                    .iter()
                    .flatten()
                    .find(|c| c.name == *name),
                Role::Main => spec.containers.iter().find(|c| c.name == *name),
            };
            let Some(c) = c else { continue };
            if let Err(e) = self.write_files(pod, *role, c, &pdir, &sources) {
                debug!(pod = %u.name, error = %e, "refreshing files");
            }
            if *role == Role::Main {
                match vk_zun::probes::probes_of(c) {
                    Ok(specs) if !specs.is_empty() => {
                        self.prober.observe(Watch {
                            id: &o.id,
                            uid: &uid,
                            name,
                            ip: pod_ip.as_deref().and_then(|i| i.parse().ok()),
                            specs: &specs,
                            started_at: o.started_at.unwrap_or(now),
                            grace_s: state::grace_seconds(pod),
                        });
                        if let Some(v) = self.prober.view(&o.id) {
                            extra.probes.insert(name.clone(), v);
                        }
                    }
                    Ok(_) => {}
                    Err(r) => {
                        extra.failure = Some((
                            "ProviderFailed".into(),
                            format!("{}: {}", r.field, r.reason),
                        ));
                    }
                }
            }
        }
        // FallbackToLogsOnError: the log's tail for a failed run without a message.
        for o in observed.iter_mut() {
            if let Run::Exited { code, .. } = o.run
                && code != 0
                && o.message.is_none()
            {
                let c = spec
                    .init_containers
                    .iter()
                    .flatten()
                    .chain(&spec.containers)
                    .find(|c| c.name == o.name);
                if c.and_then(|c| c.termination_message_policy.as_deref())
                    == Some("FallbackToLogsOnError")
                    && let Ok(log) = self.docker.logs_tail(&o.id, 80).await
                {
                    o.message = Some(files::log_tail_message(&log));
                }
            }
        }
        u.events.extend(self.prober.take_events(&uid));
        u.status = Some(state::render(
            pod,
            &observed,
            &extra,
            &self.host_ip(),
            jiff::Timestamp::now(),
        ));
        u
    }

    /// Stops a container in the background (a grace period must not hold up the pass);
    /// a stop already under way is not started again.
    fn stop_later(&self, id: &str, grace_s: u64) {
        let Ok(mut set) = self.stopping.lock() else {
            return;
        };
        if !set.insert(id.to_string()) {
            return;
        }
        let (docker, set, id) = (self.docker.clone(), self.stopping.clone(), id.to_string());
        tokio::spawn(async move {
            if let Err(e) = docker.stop(&id, grace_s).await {
                warn!(container = %id, error = %e, "stopping a container failed");
            }
            if let Ok(mut s) = set.lock() {
                s.remove(&id);
            }
        });
    }

    fn host_ip(&self) -> String {
        self.cfg.gateway.to_string()
    }
}

fn num_cpus() -> f64 {
    std::thread::available_parallelism()
        .map(|n| n.get() as f64)
        .unwrap_or(1.0)
}

#[async_trait]
impl Provider for DockerProvider {
    async fn node_state(&self) -> NodeState {
        let mut st = NodeState::default();
        match self.docker.info().await {
            Ok(info) => {
                let cpu = info["NCPU"].as_i64().unwrap_or(1);
                let mem = info["MemTotal"].as_i64().unwrap_or(0);
                for m in [&mut st.capacity, &mut st.allocatable] {
                    m.insert("cpu".into(), Quantity(cpu.to_string()));
                    m.insert("memory".into(), Quantity(format!("{}Ki", mem / 1024)));
                    m.insert("pods".into(), Quantity("110".into()));
                }
                st.conditions.push(Condition::new(
                    "Ready",
                    true,
                    "KubeletReady",
                    "the Docker engine answers",
                ));
            }
            Err(e) => st.conditions.push(Condition::new(
                "Ready",
                false,
                "KubeletNotReady",
                format!("the Docker engine does not answer: {e}"),
            )),
        }
        for (t, r) in [
            ("MemoryPressure", "KubeletHasSufficientMemory"),
            ("DiskPressure", "KubeletHasNoDiskPressure"),
            ("PIDPressure", "KubeletHasSufficientPID"),
        ] {
            st.conditions
                .push(Condition::new(t, false, r, "not measured by the test node"));
        }
        st.conditions.push(Condition::new(
            "NetworkUnavailable",
            false,
            "RouteCreated",
            format!("pods are on Docker network {}", self.cfg.network),
        ));
        st
    }

    async fn sync(
        &self,
        pods: &[Pod],
        objects: &dyn Objects,
        complete: bool,
    ) -> Result<Vec<PodUpdate>, ProviderError> {
        let mut seen = self.observe().await?;
        let svcs = self.services(pods).await;
        self.write_node_hosts(&svcs);
        let mut updates = Vec::new();
        let mut live_ids = BTreeSet::new();
        for pod in pods {
            let uid = pod.metadata.uid.clone().unwrap_or_default();
            let (sandbox, containers) = seen.remove(&uid).unwrap_or_default();
            live_ids.extend(containers.iter().map(|c| c.observed.id.clone()));
            let u = self
                .sync_pod(pod, sandbox.as_ref(), &containers, objects, &svcs)
                .await;
            updates.push(u);
        }
        self.prober.retain(&live_ids);
        if complete {
            // Containers of pods that are gone (deleted while the node was down).
            for (uid, (sandbox, containers)) in seen {
                for c in containers.iter().chain(sandbox.iter()) {
                    info!(pod_uid = %uid, container = %c.observed.id, "removing a container of a pod that is gone");
                    if let Err(e) = self.docker.remove(&c.observed.id).await {
                        warn!(error = %e, "removing an orphaned container");
                    }
                }
                let _ = std::fs::remove_dir_all(self.cfg.state_dir.join("pods").join(&uid));
            }
        }
        Ok(updates)
    }
}
