//! The logs of a container's previous run (`kubectl logs --previous`).
//!
//! Stock Zun keeps one Docker container for a pod container across the
//! node's restarts (stop, then start), and Docker appends every run to the
//! same log. So the node remembers when each run started and, just before
//! it starts a container again, copies the ending run's log (at most
//! [`MAX_LINES`] lines and [`MAX_BYTES`] bytes, its last ones) into this
//! process-wide store, keyed by the Zun container. The kubelet API serves
//! `previous=true` from it, and serves the current log from the run's start.
//!
//! Memory: at most [`MAX_BYTES`] per pod container that restarted at least
//! once (plus a timestamp per restarted container); entries go with their pod.
//! What a node restart loses: the copies (the API then says, as before, that
//! no previous run is kept) and the run starts (the current log is then all
//! of Docker's).

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex};

/// Lines kept of a previous run.
pub const MAX_LINES: u64 = 10_000;
/// Bytes kept of a previous run (its last ones).
pub const MAX_BYTES: usize = 256 * 1024;

#[derive(Clone, Debug, Default)]
struct Entry {
    pod_uid: String,
    /// When the current run started (as the node started it).
    run_start: Option<jiff::Timestamp>,
    /// The previous run's log, each line with Docker's timestamp.
    previous: Option<String>,
}

/// The store: per Zun container, the current run's start and the previous run's log.
#[derive(Debug, Default)]
pub struct RunLogs {
    map: Mutex<HashMap<String, Entry>>,
}

static GLOBAL: LazyLock<RunLogs> = LazyLock::new(RunLogs::default);

/// The process's store, shared by the provider (which fills it) and the kubelet API
/// (which serves it); Zun container ids are unique, so one store serves every node.
pub fn global() -> &'static RunLogs {
    &GLOBAL
}

impl RunLogs {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// When the current run of Zun container `zun_id` started, if this process started it.
    pub fn run_start(&self, zun_id: &str) -> Option<jiff::Timestamp> {
        self.map().get(zun_id).and_then(|e| e.run_start)
    }

    /// Records the previous run's log (timestamped lines) and the start of the next run.
    pub fn record_restart(
        &self,
        pod_uid: &str,
        zun_id: &str,
        previous: String,
        started: jiff::Timestamp,
    ) {
        let mut s = self.map();
        let e = s.entry(zun_id.to_string()).or_default();
        e.pod_uid = pod_uid.to_string();
        e.previous = Some(previous);
        e.run_start = Some(started);
    }

    /// The previous run's log of `zun_id` (timestamped lines), if kept.
    pub fn previous(&self, zun_id: &str) -> Option<String> {
        self.map().get(zun_id).and_then(|e| e.previous.clone())
    }

    /// Forgets the containers of pods not in `live`.
    pub fn retain_pods(&self, live: &std::collections::BTreeSet<String>) {
        self.map().retain(|_, e| live.contains(&e.pod_uid));
    }
}

/// Docker's timestamp at the start of a `timestamps=true` line, and the rest.
pub fn split_stamp(line: &str) -> Option<(jiff::Timestamp, &str)> {
    let (stamp, rest) = line.split_once(' ')?;
    Some((stamp.parse().ok()?, rest))
}

/// The lines of `text` (Docker's log with timestamps) stamped at or after
/// `since`, the last `MAX_LINES` and at most `MAX_BYTES` of them (whole lines).
pub fn run_of(text: &str, since: Option<jiff::Timestamp>) -> String {
    let kept: Vec<&str> = text
        .lines()
        .filter(|l| match (since, split_stamp(l)) {
            (Some(s), Some((t, _))) => t >= s,
            _ => true,
        })
        .collect();
    let mut out: Vec<&str> = Vec::new();
    let mut bytes = 0;
    for l in kept.iter().rev().take(MAX_LINES as usize) {
        bytes += l.len() + 1;
        if bytes > MAX_BYTES {
            break;
        }
        out.push(l);
    }
    out.reverse();
    out.iter().map(|l| format!("{l}\n")).collect()
}

/// What the kubelet API sends for a stored or live run: lines since
/// `since` (if any), the last `tail` of them, timestamps kept only when asked.
pub fn render(
    text: &str,
    since: Option<jiff::Timestamp>,
    tail: Option<i64>,
    stamps: bool,
) -> String {
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| match (since, split_stamp(l)) {
            (Some(s), Some((t, _))) => t >= s,
            _ => true,
        })
        .collect();
    let skip = match tail {
        Some(n) => lines.len().saturating_sub(usize::try_from(n).unwrap_or(0)),
        None => 0,
    };
    lines[skip..]
        .iter()
        .map(|l| {
            let body = if stamps {
                l
            } else {
                split_stamp(l).map(|(_, r)| r).unwrap_or(l)
            };
            format!("{body}\n")
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOG: &str =
        "2026-12-01T10:00:00.5Z one\n2026-12-01T10:00:01.25Z two\n2026-12-01T10:00:02Z three\n";

    fn ts(s: &str) -> jiff::Timestamp {
        s.parse().expect("time")
    }

    #[test]
    fn a_run_is_the_lines_from_its_start() {
        assert_eq!(
            run_of(LOG, Some(ts("2026-12-01T10:00:01Z"))),
            "2026-12-01T10:00:01.25Z two\n2026-12-01T10:00:02Z three\n"
        );
        assert_eq!(run_of(LOG, None), LOG);
    }

    #[test]
    fn a_run_keeps_its_last_bytes_in_whole_lines() {
        let line = format!("2026-12-01T10:00:00Z {}", "x".repeat(1000));
        let big: String = (0..1000).map(|_| format!("{line}\n")).collect();
        let kept = run_of(&big, None);
        assert!(kept.len() <= MAX_BYTES, "{}", kept.len());
        assert!(kept.len() > MAX_BYTES - 2 * line.len());
        assert!(kept.lines().all(|l| l == line));
    }

    #[test]
    fn rendering_applies_tail_since_and_timestamps() {
        assert_eq!(render(LOG, None, Some(2), false), "two\nthree\n");
        assert_eq!(
            render(LOG, Some(ts("2026-12-01T10:00:02Z")), None, true),
            "2026-12-01T10:00:02Z three\n"
        );
        assert_eq!(render(LOG, None, Some(0), false), "");
    }

    #[test]
    fn the_store_keeps_runs_per_container_until_their_pod_goes() {
        let t = ts("2026-12-01T10:00:03Z");
        let s = RunLogs::default();
        s.record_restart("pod-a", "zun-a", "x\n".into(), t);
        s.record_restart("pod-b", "zun-b", "y\n".into(), t);
        assert_eq!(s.previous("zun-a").as_deref(), Some("x\n"));
        assert_eq!(s.run_start("zun-a"), Some(t));
        s.retain_pods(&["pod-b".to_string()].into_iter().collect());
        assert_eq!(s.previous("zun-a"), None);
        assert_eq!(s.previous("zun-b").as_deref(), Some("y\n"));
    }
}
