//! What the boot proofs share: the test cloud's paths, child processes, commands.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// The test cloud's directory (`TEST_CLOUD_DIR`, else the default cache path).
pub fn test_cloud_dir() -> PathBuf {
    PathBuf::from(
        std::env::var("TEST_CLOUD_DIR")
            .unwrap_or_else(|_| "/var/cache/openstack-operator/test-cloud".into()),
    )
}

/// A program of the test cloud's venv; fails clearly when the cloud is not installed.
pub fn venv_bin(name: &str) -> PathBuf {
    let p = test_cloud_dir().join("venv/bin").join(name);
    assert!(
        p.exists(),
        "{} is missing: run scripts/test-cloud up (it installs the services into its venv)",
        p.display()
    );
    p
}

/// A free loopback port.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// Kills a child process (and waits for it) when dropped.
pub struct Proc(pub Child, pub &'static str);

impl Drop for Proc {
    fn drop(&mut self) {
        if let Ok(pid) = i32::try_from(self.0.id()) {
            // SAFETY: signalling a child we started; its pid is still ours until we wait.
            unsafe {
                libc::kill(pid, libc::SIGTERM);
            }
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
        eprintln!("{} did not stop on SIGTERM; killed", self.1);
    }
}

/// Runs `cmd` to success and returns its stdout; panics with its output otherwise.
pub fn run(cmd: &mut Command, what: &str) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot start: {e}"));
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Items memcached has stored since it started.
pub fn memcached_items(port: u16) -> u64 {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("memcached");
    s.write_all(b"stats\r\nquit\r\n").expect("stats");
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out.lines()
        .find_map(|l| l.strip_prefix("STAT total_items "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

/// The test cloud's Keystone admin password, from the clouds.yaml it wrote.
#[allow(dead_code)] // not every boot proof logs in as the admin
pub fn admin_password() -> String {
    let clouds = test_cloud_dir().join("clouds.yaml");
    run(
        Command::new(venv_bin("python3")).arg("-c").arg(
            "import sys, yaml; print(yaml.safe_load(open(sys.argv[1]))['clouds']['local-admin']['auth']['password'])",
        ).arg(&clouds),
        "reading the admin password from clouds.yaml",
    )
    .trim()
    .to_string()
}

/// A memcached of the test's own on `port` (loopback, no UDP), stopped when dropped.
pub fn start_memcached(port: u16) -> Proc {
    let child = Command::new("memcached")
        .args([
            "-l",
            "127.0.0.1",
            "-p",
            &port.to_string(),
            "-U",
            "0",
            "-u",
            "nobody",
            "-m",
            "32",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start memcached ({e}): run scripts/control-plane-deps"));
    Proc(child, "memcached")
}
