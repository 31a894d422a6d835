//! # kube-emulator — a TEST TOOL, not part of the product
//!
//! A small, in-memory emulator of the Kubernetes API server, used by the
//! end-to-end tests of the operator because no real kube-apiserver can be
//! installed on the development and CI machines. It speaks plain HTTP on
//! 127.0.0.1 and is good enough for kube-rs clients (`Client`, `watcher`,
//! `Controller`, the finalizer helper, the events `Recorder`, server-side
//! apply) and for `kubectl` through a generated kubeconfig.
//!
//! What is emulated, and what is not (with reasons), is listed in the crate's
//! `README.md`. In short, not emulated: TLS/authn/authz/mutating admission webhooks
//! (validating webhooks are called, see [`webhooks`]),
//! protobuf request bodies other than Namespace/ConfigMap/Secret/ServiceAccount
//! (what kubectl's typed generators send), aggregated discovery and OpenAPI schemas,
//! list pagination, true strategic-merge list semantics, full
//! server-side-apply field sets (lists are atomic), CEL functions that
//! `kube-cel` lacks, conversion webhooks, and every controller
//! except garbage collection and namespace/CRD cleanup (which run
//! synchronously after each write).
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! let handle = kube_emulator::Emulator::start(kube_emulator::EmulatorOptions::default()).await?;
//! let client = handle.client().await?;
//! // ... use `client` like a client of a real cluster ...
//! handle.drop_watches(); // fault hook
//! handle.shutdown().await;
//! # Ok(()) }
//! ```

#![warn(missing_docs)]

pub mod cel;
pub mod cel_cost;
pub mod crd_schema;
pub mod csr;
pub mod discovery;
pub mod error;
pub mod faults;
pub mod jsonpath;
pub mod kubelet_proxy;
pub mod ops;
pub mod patch;
pub mod protobuf;
pub mod resources;
pub mod review;
pub mod schema;
pub mod selectors;
pub mod server;
pub mod store;
pub mod table;
pub mod token_request;
pub mod typed;
pub mod util;
pub mod watch;
pub mod webhooks;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

pub use faults::{FailRule, FaultConfig, FaultRequest};

use crate::ops::State;
use crate::server::App;

/// The dummy bearer token written into generated kubeconfigs (the emulator does no authentication).
pub const DUMMY_TOKEN: &str = "kube-emulator-dummy-token";

/// Name of the cluster, user and context in generated kubeconfigs.
pub const CONTEXT_NAME: &str = "kube-emulator";

/// How to start an emulator.
#[derive(Debug, Clone)]
pub struct EmulatorOptions {
    /// Address to listen on; port 0 picks a free port.
    pub listen: SocketAddr,
    /// Where to write a kubeconfig pointing at the emulator (optional).
    pub kubeconfig_path: Option<PathBuf>,
    /// Directory to persist state into (`state.json`) and restore it from at start (optional).
    pub state_dir: Option<PathBuf>,
    /// Watch events kept per resource for resuming watches; older resourceVersions get 410.
    pub history_limit: usize,
    /// Interval between BOOKMARK events on watches that allow them (the real server uses ~1 min).
    pub bookmark_interval: Duration,
}

impl Default for EmulatorOptions {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            kubeconfig_path: None,
            state_dir: None,
            history_limit: 1000,
            bookmark_interval: Duration::from_secs(1),
        }
    }
}

/// Entry point: starts emulators.
pub struct Emulator;

impl Emulator {
    /// Bind, spawn the server on the current Tokio runtime and return a handle.
    pub async fn start(opts: EmulatorOptions) -> anyhow::Result<Handle> {
        let mut state = State::new(opts.history_limit);
        if let Some(dir) = &opts.state_dir {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("creating state dir {}", dir.display()))?;
            let file = dir.join("state.json");
            if file.exists() {
                let text = std::fs::read_to_string(&file)
                    .with_context(|| format!("reading {}", file.display()))?;
                let snap: serde_json::Value = serde_json::from_str(&text)
                    .with_context(|| format!("parsing {}", file.display()))?;
                let mut restored = State::new(opts.history_limit);
                restored
                    .store
                    .restore(&snap)
                    .map_err(|e| anyhow::anyhow!("restoring {}: {e}", file.display()))?;
                restored.rebuild_registry();
                restored.ensure_default_namespaces();
                state = restored;
            }
        }
        let listener = tokio::net::TcpListener::bind(opts.listen)
            .await
            .with_context(|| format!("binding {}", opts.listen))?;
        let addr = listener.local_addr().context("reading bound address")?;
        let app = Arc::new(App {
            state: Mutex::new(state),
            faults: Mutex::new(FaultConfig::default()),
            auth: Mutex::new(review::AuthConfig::default()),
            server_address: addr.to_string(),
        });
        let router = server::router(app.clone());
        let (tx, rx) = oneshot::channel::<()>();
        let server = tokio::spawn(async move {
            let shutdown = async move {
                let _ = rx.await;
            };
            if let Err(e) = axum::serve(listener, router)
                .with_graceful_shutdown(shutdown)
                .await
            {
                tracing::error!(error = %e, "kube-emulator server failed");
            }
        });
        let mut tasks = Vec::new();
        {
            let app = app.clone();
            let every = opts.bookmark_interval.max(Duration::from_millis(10));
            tasks.push(tokio::spawn(async move {
                let mut tick = tokio::time::interval(every);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    tick.tick().await;
                    app.lock().store.send_bookmarks();
                }
            }));
        }
        if let Some(dir) = opts.state_dir.clone() {
            let app = app.clone();
            tasks.push(tokio::spawn(async move {
                let mut tick = tokio::time::interval(Duration::from_millis(200));
                loop {
                    tick.tick().await;
                    if let Err(e) = persist(&app, &dir) {
                        tracing::warn!(error = %e, "persisting emulator state failed");
                    }
                }
            }));
        }
        let handle = Handle {
            addr,
            kubeconfig_path: opts.kubeconfig_path.clone(),
            state_dir: opts.state_dir.clone(),
            app,
            shutdown_tx: Some(tx),
            server: Some(server),
            tasks,
        };
        if let Some(p) = &opts.kubeconfig_path {
            if let Some(parent) = p.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(parent).with_context(|| {
                    format!("creating directory for kubeconfig {}", p.display())
                })?;
            }
            std::fs::write(p, handle.kubeconfig_yaml())
                .with_context(|| format!("writing kubeconfig {}", p.display()))?;
        }
        tracing::info!(%addr, "kube-emulator listening");
        Ok(handle)
    }
}

/// Write the state snapshot if it changed since the last write.
fn persist(app: &App, dir: &Path) -> anyhow::Result<()> {
    let snap = {
        let mut st = app.lock();
        if !st.store.dirty {
            return Ok(());
        }
        st.store.dirty = false;
        st.store.snapshot()
    };
    let tmp = dir.join("state.json.tmp");
    std::fs::write(&tmp, serde_json::to_vec(&snap)?)
        .with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, dir.join("state.json")).context("renaming state snapshot")?;
    Ok(())
}

/// A running emulator. Dropping it stops the server.
pub struct Handle {
    addr: SocketAddr,
    kubeconfig_path: Option<PathBuf>,
    state_dir: Option<PathBuf>,
    app: Arc<App>,
    shutdown_tx: Option<oneshot::Sender<()>>,
    server: Option<JoinHandle<()>>,
    tasks: Vec<JoinHandle<()>>,
}

impl Handle {
    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Path of the kubeconfig written at start, if one was requested.
    pub fn kubeconfig_path(&self) -> Option<&Path> {
        self.kubeconfig_path.as_deref()
    }

    /// A kubeconfig document (YAML) for this emulator, with context `kube-emulator` and namespace `default`.
    pub fn kubeconfig_yaml(&self) -> String {
        kubeconfig_yaml(&self.url())
    }

    /// Write the kubeconfig to `path` (e.g. for `kubectl --kubeconfig`).
    pub fn write_kubeconfig(&self, path: &Path) -> anyhow::Result<()> {
        std::fs::write(path, self.kubeconfig_yaml())
            .with_context(|| format!("writing kubeconfig {}", path.display()))
    }

    /// A `kube::Config` for this emulator (default namespace `default`, no auth).
    pub fn kube_config(&self) -> kube::Config {
        let uri: axum::http::Uri = self
            .url()
            .parse()
            .unwrap_or_else(|_| axum::http::Uri::from_static("http://127.0.0.1"));
        kube::Config::new(uri)
    }

    /// A `kube::Client` built from the generated kubeconfig (exercises the same path as a real kubeconfig).
    pub async fn client(&self) -> anyhow::Result<kube::Client> {
        let kc = kube::config::Kubeconfig::from_yaml(&self.kubeconfig_yaml())
            .context("parsing generated kubeconfig")?;
        let cfg =
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .context("building kube config from generated kubeconfig")?;
        kube::Client::try_from(cfg).context("building kube client")
    }

    /// Close every open watch connection now; returns how many were closed.
    pub fn drop_watches(&self) -> usize {
        self.app.lock().store.drop_watches()
    }

    /// Number of open watch connections.
    pub fn watch_count(&self) -> usize {
        self.app.lock().store.watch_count()
    }

    /// Answer the next matching requests with an error (see [`FailRule`]).
    pub fn fail_next(&self, rule: FailRule) {
        self.app.lock_faults().rules.push(rule);
    }

    /// Add latency to every API response (zero disables).
    pub fn set_latency(&self, latency: Duration) {
        self.app.lock_faults().latency_ms = latency.as_millis() as u64;
    }

    /// Forget watch history: resuming a watch from any earlier resourceVersion yields 410 Gone.
    pub fn compact_history(&self) {
        self.app.lock().store.compact();
    }

    /// What TokenReview and SubjectAccessReview answer from now on.
    pub fn set_auth(&self, cfg: review::AuthConfig) {
        *self.app.auth.lock().unwrap_or_else(|e| e.into_inner()) = cfg;
    }

    /// Remove all fail rules and latency.
    pub fn reset_faults(&self) {
        *self.app.lock_faults() = FaultConfig::default();
    }

    /// Apply a fault request exactly as `POST /_emulator/faults` does.
    pub fn apply_faults(&self, req: &FaultRequest) -> serde_json::Value {
        self.app.apply_faults(req)
    }

    /// The current global resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.app.lock().store.rv()
    }

    /// Stop the server: closes watches, stops accepting connections and flushes state.
    pub async fn shutdown(mut self) {
        self.stop().await;
    }

    async fn stop(&mut self) {
        self.app.lock().store.drop_watches();
        if let Some(tx) = self.shutdown_tx.take() {
            let _ = tx.send(());
        }
        if let Some(server) = self.server.take() {
            // in-flight requests get a moment to finish; then we stop regardless
            let abort = server.abort_handle();
            if tokio::time::timeout(Duration::from_secs(2), server)
                .await
                .is_err()
            {
                abort.abort();
            }
        }
        for t in self.tasks.drain(..) {
            t.abort();
        }
        if let Some(dir) = &self.state_dir
            && let Err(e) = persist(&self.app, dir)
        {
            tracing::warn!(error = %e, "final state flush failed");
        }
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        self.app.lock().store.drop_watches();
        if let Some(tx) = self.shutdown_tx.take() {
            let _ = tx.send(());
        }
        if let Some(s) = self.server.take() {
            s.abort();
        }
        for t in self.tasks.drain(..) {
            t.abort();
        }
        if let Some(dir) = &self.state_dir
            && let Err(e) = persist(&self.app, dir)
        {
            tracing::warn!(error = %e, "final state flush failed");
        }
    }
}

/// A kubeconfig YAML document for a server URL.
pub fn kubeconfig_yaml(server: &str) -> String {
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: {CONTEXT_NAME}
  cluster:
    server: {server}
users:
- name: {CONTEXT_NAME}
  user:
    token: {DUMMY_TOKEN}
contexts:
- name: {CONTEXT_NAME}
  context:
    cluster: {CONTEXT_NAME}
    user: {CONTEXT_NAME}
    namespace: default
current-context: {CONTEXT_NAME}
preferences: {{}}
"
    )
}
