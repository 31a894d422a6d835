//! The scripts' PID files (`scripts/test-cloud.d/pidfile.sh`, used by `scripts/test-cloud`,
//! `scripts/external-services` and `scripts/demo`) name one process, not a number: a recorded
//! PID that now belongs to another process counts as dead. A CI run failed on exactly that:
//! zun-compute's stale PID had become a Keystone worker's, so zun-compute was never started.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};

fn pidfile_sh() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/test-cloud.d/pidfile.sh")
}

/// Runs `body` in bash with pidfile.sh sourced, `set -euo pipefail` as the scripts run; its stdout.
fn sh(body: &str) -> String {
    let script = format!("set -euo pipefail; . '{}'; {body}", pidfile_sh().display());
    let out = Command::new("bash")
        .arg("-c")
        .arg(&script)
        .output()
        .expect("bash runs");
    assert!(
        out.status.success(),
        "bash -c {script:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

struct Sleeper(Child);

impl Drop for Sleeper {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_recorded_process_is_found_while_it_runs_and_not_after() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("svc.pid");
    let mut sleeper = Sleeper(Command::new("sleep").arg("60").spawn().expect("sleep"));
    let pid = sleeper.0.id();
    let f = file.display();

    assert_eq!(
        sh(&format!("pidfile_write '{f}' {pid}; pidfile_pid '{f}'")),
        pid.to_string()
    );

    sleeper.0.kill().expect("kill");
    sleeper.0.wait().expect("wait");
    assert_eq!(
        sh(&format!("pidfile_pid '{f}'")),
        "",
        "a dead process is not found"
    );
}

#[test]
fn a_live_pid_with_another_start_time_is_someone_else() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("svc.pid");
    let sleeper = Sleeper(Command::new("sleep").arg("60").spawn().expect("sleep"));
    let pid = sleeper.0.id();
    let f = file.display();
    let recorded = sh(&format!("pidfile_write '{f}' {pid}; cat '{f}'"));
    let (_, start) = recorded.split_once(' ').expect("PID START");

    // The same PID, recorded for a process that started one tick earlier: a reused PID.
    let (ticks, boot) = start.split_once('@').expect("TICKS@BOOT");
    let earlier: u64 = ticks.parse::<u64>().expect("ticks") - 1;
    std::fs::write(&file, format!("{pid} {earlier}@{boot}\n")).expect("write");
    assert_eq!(sh(&format!("pidfile_pid '{f}'")), "");

    // Another boot.
    std::fs::write(&file, format!("{pid} {ticks}@another-boot\n")).expect("write");
    assert_eq!(sh(&format!("pidfile_pid '{f}'")), "");

    // A file of the old format (a bare PID) proves nothing either.
    std::fs::write(&file, format!("{pid}\n")).expect("write");
    assert_eq!(sh(&format!("pidfile_pid '{f}'")), "");

    assert_eq!(
        sh("pidfile_pid /nonexistent/svc.pid"),
        "",
        "no file, no process"
    );
    drop(sleeper);
}

#[test]
fn a_command_name_with_spaces_and_parentheses_does_not_shift_the_fields() {
    // Field 2 of /proc/PID/stat is the command name in parentheses; it may contain both.
    let dir = tempfile::tempdir().expect("tempdir");
    let odd = dir.path().join("a) b (c");
    std::os::unix::fs::symlink("/bin/sleep", &odd).expect("symlink");
    let sleeper = Sleeper(Command::new(&odd).arg("60").spawn().expect("odd sleep"));
    let pid = sleeper.0.id();
    let file = dir.path().join("svc.pid");
    let f = file.display();
    let plain = sh(&format!("pidfile_write '{f}' {pid}; cat '{f}'"));
    let (_, start) = plain.split_once(' ').expect("PID START");
    let ticks = start.split_once('@').expect("TICKS@BOOT").0;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
    let after_name = &stat[stat.rfind(") ").expect("comm") + 2..];
    let field22 = after_name.split_whitespace().nth(19).expect("field 22");
    assert_eq!(ticks, field22);
    assert_eq!(sh(&format!("pidfile_pid '{f}'")), pid.to_string());
    drop(sleeper);
}
