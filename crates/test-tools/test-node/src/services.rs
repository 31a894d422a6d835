//! Services as the pods on this node see them: a name in every pod's `/etc/hosts` and an
//! address the node forwards, port → `targetPort`, to the Service's ready pods.
//!
//! Why a forwarder and `/etc/hosts` rather than DNS to pod IPs: a Service's `port` often
//! differs from its pods' `targetPort`, and its set of ready pods changes with readiness, so
//! a name must lead to something that maps the port and follows readiness, as kube-proxy's
//! virtual IP does. Each Service gets an address of its own (its `spec.clusterIP` is not
//! used: the emulator assigns none, and the address must be local to the engine's network
//! namespace), added to that namespace's loopback; the node listens there on every Service
//! port and connects each accepted connection to one ready endpoint (round robin), from the
//! same namespace. The names (`<svc>`, `<svc>.<ns>`, `<svc>.<ns>.svc`,
//! `<svc>.<ns>.svc.cluster.local`; the short forms only in the Service's own namespace, as
//! the pod's DNS search path gives them) are written into each pod's hosts file, which the
//! node bind-mounts and rewrites in place when Services change (glibc reads it on every
//! lookup). A headless Service (`clusterIP: None`) names its first ready pod directly.
//!
//! Endpoints are the pods on this node only (this node is the whole cluster of a test).

use std::collections::{BTreeMap, BTreeSet};
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use tokio::task::JoinHandle;
use tracing::{debug, warn};

use crate::netns::NetNs;

/// The cluster's DNS domain.
pub const DOMAIN: &str = "cluster.local";

/// A pod as an endpoint: its IP and whether it is Ready.
#[derive(Clone, Debug)]
pub struct PodView<'a> {
    /// The pod.
    pub pod: &'a Pod,
    /// Its IP.
    pub ip: Ipv4Addr,
    /// Ready (and not terminating).
    pub ready: bool,
}

/// The pods on this node as endpoints (IP from the status, Ready condition, not terminating).
pub fn pod_views(pods: &[Pod]) -> Vec<PodView<'_>> {
    pods.iter()
        .filter_map(|p| {
            let st = p.status.as_ref()?;
            let ip: Ipv4Addr = st.pod_ip.as_deref()?.parse().ok()?;
            let ready = p.metadata.deletion_timestamp.is_none()
                && st
                    .conditions
                    .iter()
                    .flatten()
                    .any(|c| c.type_ == "Ready" && c.status == "True");
            Some(PodView { pod: p, ip, ready })
        })
        .collect()
}

fn selects(svc: &Service, pod: &Pod) -> bool {
    let Some(sel) = svc.spec.as_ref().and_then(|s| s.selector.as_ref()) else {
        return false;
    };
    if sel.is_empty() || pod.metadata.namespace != svc.metadata.namespace {
        return false;
    }
    let labels = pod.metadata.labels.clone().unwrap_or_default();
    sel.iter().all(|(k, v)| labels.get(k) == Some(v))
}

fn target_port(pod: &Pod, t: &IntOrString) -> Option<u16> {
    match t {
        IntOrString::Int(n) => u16::try_from(*n).ok(),
        IntOrString::String(name) => pod
            .spec
            .as_ref()?
            .containers
            .iter()
            .flat_map(|c| c.ports.iter().flatten())
            .find(|p| p.name.as_deref() == Some(name.as_str()))
            .and_then(|p| u16::try_from(p.container_port).ok()),
    }
}

/// The Service's TCP ports and, for each, its ready endpoints (`targetPort` resolved per pod,
/// a named one through the pod's container ports).
pub fn backends(svc: &Service, pods: &[PodView]) -> BTreeMap<u16, Vec<SocketAddr>> {
    let mut out = BTreeMap::new();
    for p in svc
        .spec
        .as_ref()
        .and_then(|s| s.ports.as_ref())
        .into_iter()
        .flatten()
    {
        if p.protocol.as_deref().is_some_and(|x| x != "TCP") {
            continue;
        }
        let Ok(port) = u16::try_from(p.port) else {
            continue;
        };
        let target = p.target_port.clone().unwrap_or(IntOrString::Int(p.port));
        let eps: Vec<SocketAddr> = pods
            .iter()
            .filter(|v| v.ready && selects(svc, v.pod))
            .filter_map(|v| Some(SocketAddr::from((v.ip, target_port(v.pod, &target)?))))
            .collect();
        out.insert(port, eps);
    }
    out
}

/// Whether a Service is headless.
pub fn headless(svc: &Service) -> bool {
    svc.spec.as_ref().and_then(|s| s.cluster_ip.as_deref()) == Some("None")
}

/// Addresses for Services, from a range of the engine's namespace, kept for the node's life.
#[derive(Clone, Debug)]
pub struct Vips {
    base: u32,
    size: u32,
    next: u32,
    by: BTreeMap<(String, String), Ipv4Addr>,
}

impl Vips {
    /// Addresses from `base` (e.g. 10.245.0.0), `size` of them.
    pub fn new(base: Ipv4Addr, size: u32) -> Self {
        Self {
            base: u32::from(base),
            size,
            next: 1,
            by: BTreeMap::new(),
        }
    }

    /// The Service's address (allocated on first use; `None` when the range is used up).
    pub fn get(&mut self, ns: &str, name: &str) -> Option<Ipv4Addr> {
        let key = (ns.to_string(), name.to_string());
        if let Some(ip) = self.by.get(&key) {
            return Some(*ip);
        }
        if self.next >= self.size {
            return None;
        }
        let ip = Ipv4Addr::from(self.base + self.next);
        self.next += 1;
        self.by.insert(key, ip);
        Some(ip)
    }
}

/// One name line of a hosts file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostEntry {
    /// Address.
    pub ip: Ipv4Addr,
    /// Namespace of the Service.
    pub namespace: String,
    /// Service name.
    pub name: String,
}

/// A pod's `/etc/hosts`: localhost, the pod's own name, each Service (short names only in
/// the pod's namespace), then `extra` lines verbatim.
pub fn hosts_file(
    pod_ns: &str,
    hostname: &str,
    pod_ip: Option<&str>,
    services: &[HostEntry],
    extra: &[String],
) -> String {
    let mut s = String::from("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n");
    if let Some(ip) = pod_ip {
        s.push_str(&format!("{ip}\t{hostname}\n"));
    }
    for e in services {
        let (n, ns) = (&e.name, &e.namespace);
        let mut names = vec![format!("{n}.{ns}.svc.{DOMAIN}"), format!("{n}.{ns}.svc")];
        names.push(format!("{n}.{ns}"));
        if ns == pod_ns {
            names.push(n.clone());
        }
        s.push_str(&format!("{}\t{}\n", e.ip, names.join(" ")));
    }
    for l in extra {
        s.push_str(l);
        s.push('\n');
    }
    s
}

/// The host addresses one `--relay-port` item names (pure): `PORT` or `ADDR:PORT` (one), or
/// `PORT-PORT` / `ADDR:PORT-PORT` (a range, both ends included); `ADDR` is the host address the
/// relay connects to, `127.0.0.1` when left out. The relay listens on the same port at the
/// gateway.
pub fn relay_targets(item: &str) -> Result<Vec<SocketAddr>, String> {
    let item = item.trim();
    let (addr, ports) = match item.rsplit_once(':') {
        Some((a, p)) => (
            a.parse::<Ipv4Addr>()
                .map_err(|e| format!("relay {item:?}: address {a:?}: {e}"))?,
            p,
        ),
        None => (Ipv4Addr::LOCALHOST, item),
    };
    let port = |p: &str| {
        p.parse::<u16>()
            .ok()
            .filter(|p| *p != 0)
            .ok_or_else(|| format!("relay {item:?}: {p:?} is not a port (1-65535)"))
    };
    let (first, last) = match ports.split_once('-') {
        Some((a, b)) => (port(a)?, port(b)?),
        None => (port(ports)?, port(ports)?),
    };
    if first > last {
        return Err(format!("relay {item:?}: the range {first}-{last} is empty"));
    }
    Ok((first..=last)
        .map(|p| SocketAddr::from((addr, p)))
        .collect())
}

type Table = Arc<Mutex<BTreeMap<SocketAddr, (Vec<SocketAddr>, usize)>>>;

/// The node's Service forwarders and host relays.
pub struct Proxy {
    ns: NetNs,
    table: Table,
    listeners: Mutex<BTreeMap<SocketAddr, JoinHandle<()>>>,
    addresses: Mutex<BTreeSet<Ipv4Addr>>,
}

async fn pipe(mut a: tokio::net::TcpStream, mut b: tokio::net::TcpStream) {
    let _ = tokio::io::copy_bidirectional(&mut a, &mut b).await;
}

impl Proxy {
    /// Forwarders made in `ns`.
    pub fn new(ns: NetNs) -> Self {
        Self {
            ns,
            table: Arc::new(Mutex::new(BTreeMap::new())),
            listeners: Mutex::new(BTreeMap::new()),
            addresses: Mutex::new(BTreeSet::new()),
        }
    }

    /// Adds `ip/32` to the namespace's loopback (once; an address already there is fine).
    pub async fn ensure_address(&self, ip: Ipv4Addr) -> Result<(), String> {
        if self
            .addresses
            .lock()
            .map_err(|e| e.to_string())?
            .contains(&ip)
        {
            return Ok(());
        }
        let cidr = format!("{ip}/32");
        // Not every PATH has the sbin directories.
        let ip_cmd = ["/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"]
            .into_iter()
            .find(|p| std::path::Path::new(p).exists())
            .unwrap_or("ip");
        let out = self
            .ns
            .run(&[ip_cmd, "addr", "replace", &cidr, "dev", "lo"])
            .await
            .map_err(|e| format!("ip addr replace {cidr} dev lo: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "ip addr replace {cidr} dev lo: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        self.addresses.lock().map_err(|e| e.to_string())?.insert(ip);
        Ok(())
    }

    /// A relay from `listen` (in the engine's namespace) to `to` on the host (the external
    /// services: on 127.0.0.1, or Ceph on the gateway's own address, see [`relay_targets`]).
    pub async fn relay(&self, listen: SocketAddr, to: SocketAddr) -> std::io::Result<()> {
        let l = self.ns.listen(listen).await?;
        let h = tokio::spawn(async move {
            loop {
                match l.accept().await {
                    Ok((s, _)) => {
                        tokio::spawn(async move {
                            match tokio::net::TcpStream::connect(to).await {
                                Ok(t) => pipe(s, t).await,
                                Err(e) => debug!(%to, error = %e, "relay: connect failed"),
                            }
                        });
                    }
                    Err(e) => {
                        warn!(%listen, error = %e, "relay: accept failed");
                        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                    }
                }
            }
        });
        if let Ok(mut m) = self.listeners.lock() {
            m.insert(listen, h);
        }
        Ok(())
    }

    /// Brings the forwarders in line with `want` (`vip:port` → endpoints): new listeners,
    /// endpoints replaced, listeners of Services gone stopped.
    pub async fn update(&self, want: BTreeMap<SocketAddr, Vec<SocketAddr>>) {
        let have: BTreeSet<SocketAddr> = match self.table.lock() {
            Ok(t) => t.keys().copied().collect(),
            Err(_) => return,
        };
        for (addr, eps) in &want {
            if let Ok(mut t) = self.table.lock() {
                let e = t.entry(*addr).or_insert_with(|| (Vec::new(), 0));
                e.0 = eps.clone();
            }
            if have.contains(addr) {
                continue;
            }
            if let std::net::IpAddr::V4(ip) = addr.ip()
                && let Err(e) = self.ensure_address(ip).await
            {
                warn!(%addr, error = %e, "service address not added");
                continue;
            }
            match self.ns.listen(*addr).await {
                Ok(l) => {
                    let h = tokio::spawn(forward(l, *addr, self.table.clone(), self.ns.clone()));
                    if let Ok(mut m) = self.listeners.lock() {
                        m.insert(*addr, h);
                    }
                }
                Err(e) => {
                    warn!(%addr, error = %e, "service listener not started");
                    if let Ok(mut t) = self.table.lock() {
                        t.remove(addr);
                    }
                }
            }
        }
        for gone in have.iter().filter(|a| !want.contains_key(a)) {
            if let Ok(mut t) = self.table.lock() {
                t.remove(gone);
            }
            if let Ok(mut m) = self.listeners.lock()
                && let Some(h) = m.remove(gone)
            {
                h.abort();
            }
        }
    }
}

async fn forward(l: tokio::net::TcpListener, addr: SocketAddr, table: Table, ns: NetNs) {
    loop {
        let (s, _) = match l.accept().await {
            Ok(x) => x,
            Err(e) => {
                warn!(%addr, error = %e, "service: accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                continue;
            }
        };
        let pick = table.lock().ok().and_then(|mut t| {
            let (eps, next) = t.get_mut(&addr)?;
            if eps.is_empty() {
                return None;
            }
            let ep = eps[*next % eps.len()];
            *next = next.wrapping_add(1);
            Some(ep)
        });
        // No ready endpoint: the connection is refused, as kube-proxy rejects it.
        let Some(ep) = pick else {
            drop(s);
            continue;
        };
        let ns = ns.clone();
        tokio::spawn(async move {
            match ns.connect(ep).await {
                Ok(t) => pipe(s, t).await,
                Err(e) => debug!(service = %addr, endpoint = %ep, error = %e, "connect failed"),
            }
        });
    }
}

#[cfg(test)]
mod tests;
