//! What the figures were measured on: the machine, its load, the commit; and a process's
//! memory from `/proc`.

use std::path::Path;
use std::process::Command;

use anyhow::Context as _;
use serde::Serialize;

/// The machine, as recorded in the report.
#[derive(Clone, Debug, Serialize)]
pub struct Machine {
    /// Logical CPUs available to this process.
    pub cores: usize,
    /// `model name` of the first CPU in `/proc/cpuinfo`.
    pub cpu_model: String,
    /// `MemTotal` of `/proc/meminfo`, in MiB.
    pub ram_mib: u64,
    /// Kernel release (`/proc/sys/kernel/osrelease`).
    pub kernel: String,
    /// 1, 5 and 15 minute load averages when the bench started (other processes share the
    /// machine; a load above the core count means the figures are pessimistic).
    pub load_at_start: [f64; 3],
}

impl Machine {
    /// Reads `/proc`; missing files leave fields empty rather than failing the run.
    pub fn detect() -> Self {
        let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
        let cpu_model = read("/proc/cpuinfo")
            .lines()
            .find(|l| l.starts_with("model name"))
            .and_then(|l| l.split_once(':'))
            .map(|(_, v)| v.trim().to_string())
            .unwrap_or_default();
        let ram_mib = meminfo_kib(&read("/proc/meminfo"), "MemTotal").unwrap_or(0) / 1024;
        Machine {
            cores: std::thread::available_parallelism().map_or(0, |n| n.get()),
            cpu_model,
            ram_mib,
            kernel: read("/proc/sys/kernel/osrelease").trim().to_string(),
            load_at_start: load_average(),
        }
    }
}

/// The 1, 5 and 15 minute load averages (zeros if unreadable).
pub fn load_average() -> [f64; 3] {
    let text = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let mut out = [0.0; 3];
    for (slot, v) in out.iter_mut().zip(text.split_whitespace()) {
        *slot = v.parse().unwrap_or(0.0);
    }
    out
}

fn meminfo_kib(text: &str, key: &str) -> Option<u64> {
    text.lines()
        .find(|l| l.split(':').next() == Some(key))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
}

/// `git describe --always --dirty --abbrev=12` of the repository at `dir` ("unknown" outside
/// a repository).
pub fn git_commit(dir: &Path) -> String {
    Command::new("git")
        .args(["describe", "--always", "--dirty", "--abbrev=12"])
        .current_dir(dir)
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".into())
}

/// Resident memory of a process, from `/proc/<pid>/status`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Memory {
    /// `VmRSS`: resident now, in KiB.
    pub rss_kib: u64,
    /// `VmHWM`: the highest resident size since the process started, in KiB.
    pub hwm_kib: u64,
}

impl Memory {
    /// Reads `/proc/<pid>/status`.
    pub fn of(pid: u32) -> anyhow::Result<Self> {
        let path = format!("/proc/{pid}/status");
        let text = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
        Self::parse(&text).with_context(|| format!("{path} has no VmRSS/VmHWM"))
    }

    fn parse(text: &str) -> Option<Self> {
        Some(Memory {
            rss_kib: meminfo_kib(text, "VmRSS")?,
            hwm_kib: meminfo_kib(text, "VmHWM")?,
        })
    }
}

/// KiB as MiB with one decimal.
pub fn mib(kib: u64) -> f64 {
    (kib as f64 / 1024.0 * 10.0).round() / 10.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_status_fields() {
        let text = "Name:\tx\nVmPeak:\t  9999 kB\nVmHWM:\t   20480 kB\nVmRSS:\t   10240 kB\n";
        assert_eq!(
            Memory::parse(text),
            Some(Memory {
                rss_kib: 10240,
                hwm_kib: 20480
            })
        );
        assert_eq!(Memory::parse("Name:\tx\n"), None);
        assert_eq!(mib(10240), 10.0);
    }

    #[test]
    fn reads_own_memory() -> anyhow::Result<()> {
        let m = Memory::of(std::process::id())?;
        assert!(m.rss_kib > 0 && m.hwm_kib >= m.rss_kib, "{m:?}");
        Ok(())
    }
}
