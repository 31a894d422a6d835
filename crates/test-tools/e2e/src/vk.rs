//! `openstack-operator virtual-kubelet` as a process: the Zun tenant of the test cloud
//! (`ZUN_TENANT_CLOUD` on `ZUN_NETWORK`), the target's Kubernetes API, its own kubelet port
//! and log file. Used by the end-to-end tests and the bench.

use std::fs::File;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

use anyhow::Context as _;
use openstack::adapter::{ClientOptions, CloudSelector, ContainerAdapter, Core};

use crate::operator::{free_local_addr, log_dir};
use crate::target::Target;

/// The Zun tenant of the test cloud.
#[derive(Clone, Debug)]
pub struct ZunTenant {
    /// `ZUN_TENANT_CLOUD`: the clouds.yaml entry of the tenant.
    pub cloud: String,
    /// `OS_CLIENT_CONFIG_FILE`.
    pub file: String,
    /// `ZUN_NETWORK`: the pods' Neutron network (default `zun-pods`).
    pub network: String,
}

impl ZunTenant {
    /// From the environment (`eval "$(scripts/test-cloud env)"`), or `None` when the cloud
    /// has no Zun (`ZUN_TENANT_CLOUD` unset).
    pub fn from_env() -> Option<Self> {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        match (var("ZUN_TENANT_CLOUD"), var("OS_CLIENT_CONFIG_FILE")) {
            (Some(cloud), Some(file)) => Some(ZunTenant {
                cloud,
                file,
                network: var("ZUN_NETWORK").unwrap_or_else(|| "zun-pods".into()),
            }),
            _ => None,
        }
    }

    /// A Zun client as the tenant, without client-side rate limit.
    pub async fn client(&self) -> anyhow::Result<ContainerAdapter> {
        let core = Core::connect(
            &CloudSelector::File {
                path: self.file.clone().into(),
                cloud: self.cloud.clone(),
            },
            ClientOptions {
                requests_per_second: 0,
                ..ClientOptions::default()
            },
        )
        .await
        .context("connecting as the Zun tenant")?;
        Ok(ContainerAdapter::new(core))
    }
}

/// A running `openstack-operator virtual-kubelet`, killed on drop.
pub struct VirtualKubelet {
    binary: PathBuf,
    child: Option<Child>,
    args: Vec<String>,
    env: Vec<(String, String)>,
    log: PathBuf,
    kubelet_port: u16,
}

impl VirtualKubelet {
    /// Starts node `node` of `binary` as the tenant on its network, its kubelet API on a free
    /// port of 127.0.0.1, logging to `<log dir>/<log_name>.log`; `extra` flags come last
    /// (`--poll-interval-seconds`, `--log-level`, `--log-format`...).
    pub fn start(
        binary: &Path,
        target: &Target,
        tenant: &ZunTenant,
        node: &str,
        log_name: &str,
        extra: &[&str],
    ) -> anyhow::Result<Self> {
        let dir = log_dir(binary);
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let log = dir.join(format!("{log_name}.log"));
        File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        // Each node gets its own kubelet port: tests run in parallel and 10250 is the default.
        let kubelet_port = free_local_addr()?.port();
        let port = kubelet_port.to_string();
        let mut args: Vec<String> = [
            "virtual-kubelet",
            "--node-name",
            node,
            "--network",
            &tenant.network,
            "--internal-ip",
            "127.0.0.1",
            "--kubelet-address",
            "127.0.0.1",
            "--kubelet-port",
            &port,
        ]
        .map(str::to_string)
        .to_vec();
        args.extend(extra.iter().map(|s| s.to_string()));
        let mut vk = VirtualKubelet {
            binary: binary.to_path_buf(),
            child: None,
            args,
            env: vec![
                (
                    "KUBECONFIG".into(),
                    target.kubeconfig().display().to_string(),
                ),
                ("OS_CLOUD".into(), tenant.cloud.clone()),
                ("OS_CLIENT_CONFIG_FILE".into(), tenant.file.clone()),
            ],
            log,
            kubelet_port,
        };
        vk.spawn()?;
        Ok(vk)
    }

    /// Starts the process (again) with the same flags; the log continues.
    pub fn spawn(&mut self) -> anyhow::Result<()> {
        let mut f = File::options().append(true).open(&self.log)?;
        writeln!(
            f,
            "=== e2e: {} {}",
            self.binary.display(),
            self.args.join(" ")
        )?;
        let err = f.try_clone()?;
        let mut cmd = Command::new(&self.binary);
        cmd.args(&self.args)
            .env_remove("OS_AUTH_URL")
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::from(f))
            .stderr(Stdio::from(err));
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        self.child = Some(
            cmd.spawn()
                .context("starting the virtual kubelet (cargo build --bins)")?,
        );
        Ok(())
    }

    /// The process id while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The port of its kubelet API (HTTPS on 127.0.0.1).
    pub fn kubelet_port(&self) -> u16 {
        self.kubelet_port
    }

    /// Its log file.
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// SIGKILL: no shutdown path runs.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGTERM and wait up to `timeout` for the exit (then SIGKILL). Waits without blocking
    /// the runtime: the emulator may serve on the caller's runtime, and the node's last write
    /// (NotReady) must get through.
    pub async fn terminate(&mut self, timeout: Duration) -> anyhow::Result<ExitStatus> {
        let mut c = self.child.take().context("not running")?;
        let pid = libc::pid_t::try_from(c.id()).context("process id out of range")?;
        // SAFETY: signalling a child process we spawned and still own (not yet reaped).
        unsafe { libc::kill(pid, libc::SIGTERM) };
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if let Some(st) = c.try_wait()? {
                return Ok(st);
            }
            if tokio::time::Instant::now() > deadline {
                let _ = c.kill();
                let _ = c.wait();
                anyhow::bail!("the virtual kubelet did not exit within {timeout:?} of SIGTERM");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The last `n` lines of its log.
    pub fn log_tail(&self, n: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }
}

impl Drop for VirtualKubelet {
    fn drop(&mut self) {
        self.kill();
    }
}
