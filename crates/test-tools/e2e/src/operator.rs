//! The operator binary as a child process: start, health, readiness, metrics, SIGTERM,
//! SIGKILL, restart, and its log.

use std::fs::File;
use std::io::Write as _;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context as _;

use crate::metrics::Metrics;
use crate::target::{CloudEnv, Target};
use crate::wait::{Check, wait_for};

/// How to start the operator.
#[derive(Clone, Debug)]
pub struct OperatorOptions {
    /// The `openstack-operator` binary (`env!("CARGO_BIN_EXE_openstack-operator")` in tests).
    pub binary: PathBuf,
    /// Name of the log file (`<name>.log`), normally the test's name.
    pub log_name: String,
    /// `--resync-seconds`.
    pub resync_seconds: u64,
    /// `--image-poll-seconds`.
    pub image_poll_seconds: u64,
    /// Further arguments after `run ...`.
    pub extra_args: Vec<String>,
    /// The OpenStack the operator talks to, when not the target's (e.g. the target's cloud
    /// behind a fault-injecting proxy, see [`crate::proxy`]).
    pub cloud: Option<CloudEnv>,
}

impl OperatorOptions {
    /// Defaults for a test: resync every 60 s, image polls every second.
    pub fn new(binary: impl Into<PathBuf>, log_name: &str) -> Self {
        OperatorOptions {
            binary: binary.into(),
            log_name: log_name.to_string(),
            resync_seconds: 60,
            image_poll_seconds: 1,
            extra_args: Vec::new(),
            cloud: None,
        }
    }
}

/// A running (or stopped) operator process.
pub struct Operator {
    opts: OperatorOptions,
    kubeconfig: PathBuf,
    os_cloud: String,
    os_config_file: PathBuf,
    cluster_id: String,
    health_addr: SocketAddr,
    metrics_addr: SocketAddr,
    log_path: PathBuf,
    child: Mutex<Option<Child>>,
    http: reqwest::Client,
    log_printed: AtomicBool,
    /// `--resync-seconds` of the next spawn when not 0 (see [`Operator::restart_with_resync`]).
    resync_override: AtomicU64,
}

impl std::fmt::Debug for Operator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Operator")
            .field("cluster_id", &self.cluster_id)
            .field("health_addr", &self.health_addr)
            .field("metrics_addr", &self.metrics_addr)
            .field("log_path", &self.log_path)
            .finish()
    }
}

/// A free TCP port on 127.0.0.1 (bound, read and released).
pub fn free_local_addr() -> anyhow::Result<SocketAddr> {
    let l = TcpListener::bind("127.0.0.1:0").context("finding a free port")?;
    l.local_addr().context("reading the bound address")
}

/// Directory of the per-test operator logs: `$CARGO_TARGET_DIR/e2e-logs`, else `e2e-logs`
/// next to the binary's profile directory, else a directory under the system temp dir.
pub fn log_dir(binary: &Path) -> PathBuf {
    if let Some(t) = std::env::var_os("CARGO_TARGET_DIR").filter(|t| !t.is_empty()) {
        return PathBuf::from(t).join("e2e-logs");
    }
    match binary.parent().and_then(Path::parent) {
        Some(target) => target.join("e2e-logs"),
        None => std::env::temp_dir().join("openstack-operator-e2e-logs"),
    }
}

impl Operator {
    /// Spawns `openstack-operator run` against the target's cluster and cloud, with free
    /// health and metrics ports, a random cluster id, JSON logs into the per-test log file.
    pub fn start(target: &Target, opts: OperatorOptions) -> anyhow::Result<Self> {
        let dir = log_dir(&opts.binary);
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let log_path = dir.join(format!("{}.log", opts.log_name));
        // A fresh log per test run; restarts append to it.
        File::create(&log_path).with_context(|| format!("creating {}", log_path.display()))?;
        let cloud = opts.cloud.as_ref().unwrap_or(target.cloud_env());
        let op = Operator {
            kubeconfig: target.kubeconfig().to_path_buf(),
            os_cloud: cloud.os_cloud.clone(),
            os_config_file: cloud.config_file.clone(),
            cluster_id: format!("e2e-{}", crate::names::random_suffix()),
            health_addr: free_local_addr()?,
            metrics_addr: free_local_addr()?,
            log_path,
            child: Mutex::new(None),
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(5))
                .no_proxy()
                .build()
                .context("building an HTTP client")?,
            log_printed: AtomicBool::new(false),
            resync_override: AtomicU64::new(0),
            opts,
        };
        op.spawn()?;
        Ok(op)
    }

    fn args(&self) -> Vec<String> {
        let mut args: Vec<String> = vec![
            "run".into(),
            "--health-addr".into(),
            self.health_addr.to_string(),
            "--metrics-addr".into(),
            self.metrics_addr.to_string(),
            "--cluster-id".into(),
            self.cluster_id.clone(),
            "--resync-seconds".into(),
            self.resync_seconds().to_string(),
            "--image-poll-seconds".into(),
            self.opts.image_poll_seconds.to_string(),
            "--log-format".into(),
            "json".into(),
        ];
        args.extend(self.opts.extra_args.iter().cloned());
        args
    }

    fn spawn(&self) -> anyhow::Result<()> {
        let mut log = File::options()
            .append(true)
            .create(true)
            .open(&self.log_path)
            .with_context(|| format!("opening {}", self.log_path.display()))?;
        let args = self.args();
        writeln!(
            log,
            "=== e2e: {} {} (KUBECONFIG={})",
            self.opts.binary.display(),
            args.join(" "),
            self.kubeconfig.display()
        )
        .context("writing the log header")?;
        let err = log.try_clone().context("duplicating the log file handle")?;
        let child = Command::new(&self.opts.binary)
            .args(&args)
            .env("KUBECONFIG", &self.kubeconfig)
            .env("OS_CLOUD", &self.os_cloud)
            .env("OS_CLIENT_CONFIG_FILE", &self.os_config_file)
            .stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(err))
            .spawn()
            .with_context(|| {
                format!(
                    "starting {} (run `cargo build --bins` first)",
                    self.opts.binary.display()
                )
            })?;
        *self.lock() = Some(child);
        Ok(())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Child>> {
        self.child.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The `--cluster-id` (ownership marks on OpenStack objects carry it).
    pub fn cluster_id(&self) -> &str {
        &self.cluster_id
    }

    /// The address of `/healthz` and `/readyz`.
    pub fn health_addr(&self) -> SocketAddr {
        self.health_addr
    }

    /// The address of `/metrics`.
    pub fn metrics_addr(&self) -> SocketAddr {
        self.metrics_addr
    }

    /// The log file (stdout and stderr of every start).
    pub fn log_path(&self) -> &Path {
        &self.log_path
    }

    /// Process id of the running child, if any.
    pub fn pid(&self) -> Option<u32> {
        self.lock().as_ref().map(Child::id)
    }

    /// The exit status if the process has exited (and is reaped), `None` while it runs or
    /// when it was never started.
    pub fn exited(&self) -> anyhow::Result<Option<ExitStatus>> {
        let mut guard = self.lock();
        match guard.as_mut() {
            Some(c) => c.try_wait().context("checking the operator process"),
            None => Ok(None),
        }
    }

    /// Whether the process is running.
    pub fn is_running(&self) -> bool {
        let mut guard = self.lock();
        guard
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// The whole log.
    pub fn log_text(&self) -> anyhow::Result<String> {
        let bytes = std::fs::read(&self.log_path)
            .with_context(|| format!("reading {}", self.log_path.display()))?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    /// The last `n` lines of the log.
    pub fn log_tail(&self, n: usize) -> String {
        match self.log_text() {
            Ok(t) => {
                let lines: Vec<&str> = t.lines().collect();
                lines[lines.len().saturating_sub(n)..].join("\n")
            }
            Err(e) => format!("(log unavailable: {e:#})"),
        }
    }

    /// Prints the last ~200 log lines to stderr (once per operator; shown by the test harness
    /// for failed tests).
    pub fn print_log_tail(&self) {
        if self.log_printed.swap(true, Ordering::SeqCst) {
            return;
        }
        eprintln!(
            "----- last 200 lines of the operator log {} -----\n{}\n----- end of operator log -----",
            self.log_path.display(),
            self.log_tail(200)
        );
    }

    async fn get(&self, addr: SocketAddr, path: &str) -> anyhow::Result<(u16, String)> {
        let url = format!("http://{addr}{path}");
        let resp = self
            .http
            .get(&url)
            .send()
            .await
            .with_context(|| format!("GET {url}"))?;
        let code = resp.status().as_u16();
        let body = resp
            .text()
            .await
            .with_context(|| format!("reading the body of GET {url}"))?;
        Ok((code, body))
    }

    /// `Some(error)` when the process has exited (waiting for it to answer cannot help).
    fn gone(&self) -> Option<anyhow::Error> {
        match self.exited() {
            Ok(Some(status)) => Some(anyhow::anyhow!(
                "the operator exited ({status}); last log lines:\n{}",
                self.log_tail(40)
            )),
            Ok(None) => None,
            Err(e) => Some(e),
        }
    }

    /// HTTP status of `GET /healthz`.
    pub async fn healthz(&self) -> anyhow::Result<u16> {
        Ok(self.get(self.health_addr, "/healthz").await?.0)
    }

    /// HTTP status of `GET /readyz`.
    pub async fn readyz(&self) -> anyhow::Result<u16> {
        Ok(self.get(self.health_addr, "/readyz").await?.0)
    }

    /// Whether `GET /readyz` answers 200.
    pub async fn ready(&self) -> anyhow::Result<bool> {
        Ok(self.readyz().await? == 200)
    }

    /// Waits until `/healthz` answers 200 (fails at once if the process exits).
    pub async fn wait_healthy(&self, timeout: Duration) -> anyhow::Result<()> {
        wait_for(
            timeout,
            Duration::from_millis(100),
            "the operator's /healthz to answer 200",
            async || {
                if let Some(e) = self.gone() {
                    return Ok(Check::Fail(e));
                }
                match self.healthz().await {
                    Ok(200) => Ok(Check::Done(())),
                    Ok(code) => Ok(Check::Pending(format!("/healthz answered {code}"))),
                    Err(e) => Ok(Check::Pending(format!("{e:#}"))),
                }
            },
        )
        .await
    }

    /// Waits until `/readyz` answers 200 (fails at once if the process exits).
    pub async fn wait_ready(&self, timeout: Duration) -> anyhow::Result<()> {
        wait_for(
            timeout,
            Duration::from_millis(200),
            "the operator's /readyz to answer 200",
            async || {
                if let Some(e) = self.gone() {
                    return Ok(Check::Fail(e));
                }
                match self.readyz().await {
                    Ok(200) => Ok(Check::Done(())),
                    Ok(code) => Ok(Check::Pending(format!("/readyz answered {code}"))),
                    Err(e) => Ok(Check::Pending(format!("{e:#}"))),
                }
            },
        )
        .await
    }

    /// The `/metrics` text.
    pub async fn metrics_text(&self) -> anyhow::Result<String> {
        let (code, body) = self.get(self.metrics_addr, "/metrics").await?;
        anyhow::ensure!(code == 200, "/metrics answered {code}: {body}");
        Ok(body)
    }

    /// `/metrics`, parsed.
    pub async fn metrics(&self) -> anyhow::Result<Metrics> {
        Ok(Metrics::parse(&self.metrics_text().await?))
    }

    fn signal(&self, sig: libc::c_int) -> anyhow::Result<()> {
        let pid = self.pid().context("the operator is not running")?;
        let pid = libc::pid_t::try_from(pid).context("process id out of range")?;
        // SAFETY: kill(2) with a pid we spawned and still own (not yet reaped); no memory is
        // shared with the call.
        let rc = unsafe { libc::kill(pid, sig) };
        if rc != 0 {
            return Err(std::io::Error::last_os_error())
                .with_context(|| format!("sending signal {sig} to {pid}"));
        }
        Ok(())
    }

    /// Sends SIGTERM.
    pub fn sigterm(&self) -> anyhow::Result<()> {
        self.signal(libc::SIGTERM)
    }

    /// Waits for the process to exit and returns its status.
    pub async fn wait_exit(&self, timeout: Duration) -> anyhow::Result<ExitStatus> {
        let started = Instant::now();
        wait_for(
            timeout,
            Duration::from_millis(50),
            "the operator process to exit",
            async || match self.exited()? {
                Some(status) => Ok(Check::Done(status)),
                None if self.lock().is_none() => anyhow::bail!("the operator was never started"),
                None => Ok(Check::Pending(format!(
                    "still running after {:.1}s",
                    started.elapsed().as_secs_f64()
                ))),
            },
        )
        .await
    }

    /// SIGTERM, then waits up to `timeout` for the exit.
    pub async fn stop(&self, timeout: Duration) -> anyhow::Result<ExitStatus> {
        if let Some(status) = self.exited()? {
            return Ok(status);
        }
        self.sigterm()?;
        self.wait_exit(timeout).await
    }

    /// SIGKILL (no graceful shutdown) and reap.
    pub fn kill(&self) -> anyhow::Result<()> {
        let mut guard = self.lock();
        if let Some(c) = guard.as_mut()
            && matches!(c.try_wait(), Ok(None))
        {
            c.kill().context("killing the operator")?;
            c.wait().context("reaping the operator")?;
        }
        Ok(())
    }

    /// Starts the process again with the same flags, ports and cluster id (stops it first,
    /// with SIGTERM, if it runs). The log continues in the same file.
    pub async fn restart(&self, timeout: Duration) -> anyhow::Result<()> {
        if self.is_running() {
            let status = self.stop(timeout).await?;
            anyhow::ensure!(
                status.success(),
                "the operator exited with {status} when stopped for a restart"
            );
        }
        self.spawn()
    }

    /// The `--resync-seconds` the process runs with.
    pub fn resync_seconds(&self) -> u64 {
        match self.resync_override.load(Ordering::Relaxed) {
            0 => self.opts.resync_seconds,
            n => n,
        }
    }

    /// [`Operator::restart`] with another `--resync-seconds` (kept for later restarts), e.g.
    /// to watch the periodic drift check of objects converged under a long period.
    pub async fn restart_with_resync(&self, timeout: Duration, seconds: u64) -> anyhow::Result<()> {
        self.resync_override
            .store(seconds.max(1), Ordering::Relaxed);
        self.restart(timeout).await
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.print_log_tail();
        }
        if let Err(e) = self.kill() {
            eprintln!("e2e: could not kill the operator: {e:#}");
        }
    }
}
