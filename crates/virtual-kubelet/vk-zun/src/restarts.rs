//! Container restarts as the kubelet times them, as pure functions of what the node remembers
//! per pod container ([`Track`]), what Zun shows and the time.
//!
//! The kubelet's rules (`pkg/kubelet/kuberuntime/kuberuntime_manager.go` `doBackOff`, over
//! `k8s.io/client-go/util/flowcontrol.Backoff` made with `NewBackOff(10s, MaxContainerBackOff =
//! 300s)`, no jitter): a container that exited is restarted at once when its back-off entry is
//! missing or expired, otherwise only once `finishedAt + entry.delay` has passed; every restart
//! sets the entry (`Next`): a new or expired entry starts at 10 s, an existing one doubles up to
//! 300 s, and `lastUpdate` becomes the restart's time. An entry expires when the run that ended
//! finished more than 2 × 300 s = 10 min after that restart (`hasExpired`), so a container that
//! ran 10 min is restarted at once again and backs off from 10 s. The first restart is therefore
//! immediate, the second waits 10 s, then 20 s, 40 s, … 300 s. Like the kubelet's, the entries
//! live in memory only: a restarted node starts them afresh.
//!
//! Zun starts a container asynchronously (`POST .../start` answers 202, zun-compute starts it
//! later), so a list right after a restart may still show the ended run as `Stopped`. A restart
//! that was sent is [`Track::starting`] until Zun shows the container in any other state or as
//! updated, and meanwhile counts as started (the kubelet's `StartContainer` returns with the
//! container running), instead of reading as a new crash.

use jiff::{SignedDuration, Timestamp};
use openstack::container::{ZunContainer, status as zs};

/// The kubelet's initial crash back-off (`backOffPeriod`).
pub const INITIAL: SignedDuration = SignedDuration::from_secs(10);
/// The kubelet's `MaxContainerBackOff`.
pub const MAX: SignedDuration = SignedDuration::from_secs(300);
/// How long a start that Zun does not show is waited for before the container's state is read
/// as Zun shows it again (a start Zun lost, or a run that ended before any list saw it).
pub const START_GRACE: SignedDuration = SignedDuration::from_secs(60);

/// One `flowcontrol.Backoff` entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The current back-off (`entry.backoff`).
    pub delay: SignedDuration,
    /// When the last restart was made (`entry.lastUpdate`).
    pub last_update: Timestamp,
}

/// A start the node sent that Zun has not shown yet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Starting {
    /// When the start was sent (the run's `startedAt`).
    pub since: Timestamp,
    /// Zun's `updated_at` and `status_detail` of the container when it was sent: either changing
    /// means zun-compute has acted on the container since.
    pub seen: (Option<String>, Option<String>),
}

/// What the node remembers about one pod container's restarts.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Track {
    /// The crash back-off entry, once the container was restarted.
    pub backoff: Option<Entry>,
    /// A restart sent and not yet shown by Zun.
    pub starting: Option<Starting>,
    /// The `restartCount` after the node's last restart of the container. The pod a pass reads
    /// may predate the status the last pass wrote (the watch lags under load), and a write may
    /// lose to a newer one, so the count is kept here and never goes back.
    pub restarts: i32,
}

/// Whether the entry no longer applies to a run that finished at `finished`
/// (`hasExpired`: more than 2 × [`MAX`] after the last restart).
pub fn expired(e: &Entry, finished: Timestamp) -> bool {
    finished.duration_since(e.last_update) > MAX * 2
}

/// `IsInBackOffSince`: when a container that finished at `finished` may be restarted, if that is
/// still ahead of `now`, with the back-off that applies (what the kubelet's `CrashLoopBackOff`
/// message names).
pub fn backing_off(
    track: Option<&Track>,
    finished: Timestamp,
    now: Timestamp,
) -> Option<(Timestamp, SignedDuration)> {
    let e = track?.backoff.as_ref()?;
    if expired(e, finished) {
        return None;
    }
    let until = finished + e.delay;
    (now < until).then_some((until, e.delay))
}

/// `Next`: the entry after a restart at `now` of a run that finished at `finished`.
pub fn next(prev: Option<&Entry>, finished: Timestamp, now: Timestamp) -> Entry {
    let delay = match prev {
        Some(e) if !expired(e, finished) => (e.delay * 2).min(MAX),
        _ => INITIAL,
    };
    Entry {
        delay,
        last_update: now,
    }
}

/// The track after a restart sent at `now` to `c`, whose ended run finished at `finished`;
/// `shown` is the `restartCount` the pod's status shows (the count after a node restart).
pub fn restarted(
    prev: Option<&Track>,
    c: &ZunContainer,
    finished: Timestamp,
    now: Timestamp,
    shown: i32,
) -> Track {
    Track {
        backoff: Some(next(prev.and_then(|t| t.backoff.as_ref()), finished, now)),
        starting: Some(Starting {
            since: now,
            seen: (c.updated_at.clone(), c.status_detail.clone()),
        }),
        restarts: prev.map_or(0, |t| t.restarts).max(shown).saturating_add(1),
    }
}

/// Whether a sent start is still waiting for Zun: the container is still `Stopped` and either
/// untouched since the start was sent (same `updated_at` and detail: zun-compute has not taken
/// the request yet) or under a task (zun-compute's `_do_container_start` holds `task_state`
/// `container_starting` while Docker starts it, and sets `Running` after), within the grace.
/// `Stopped` with no task and a newer `updated_at` is a run that ended after the start.
pub fn still_starting(s: &Starting, c: &ZunContainer, now: Timestamp) -> bool {
    c.status == zs::STOPPED
        && (c.task_state.is_some() || (c.updated_at.clone(), c.status_detail.clone()) == s.seen)
        && now.duration_since(s.since) < START_GRACE
}

/// The track once Zun's view `c` of the container is known: a start Zun has acted on (or that
/// waited out its grace) is no longer pending.
pub fn settle(track: &mut Track, c: Option<&ZunContainer>, now: Timestamp) {
    let pending = match (&track.starting, c) {
        (Some(s), Some(c)) => still_starting(s, c, now),
        _ => false,
    };
    if !pending {
        track.starting = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn secs(n: i64) -> SignedDuration {
        SignedDuration::from_secs(n)
    }

    fn stopped(updated: &str, detail: &str) -> ZunContainer {
        ZunContainer {
            uuid: "z".into(),
            status: zs::STOPPED.into(),
            updated_at: Some(updated.into()),
            status_detail: Some(detail.into()),
            ..Default::default()
        }
    }

    /// A container that crashes `runs` times, each run lasting `run`: the waits before each
    /// restart, as the kubelet's `doBackOff` gives them.
    fn waits(runs: usize, run: SignedDuration) -> Vec<SignedDuration> {
        let mut now = t("2026-12-01T05:00:00Z");
        let mut track: Option<Track> = None;
        let mut out = Vec::new();
        let c = stopped("x", "Exited(1)");
        for _ in 0..runs {
            now += run;
            let finished = now;
            let wait = match backing_off(track.as_ref(), finished, now) {
                Some((until, delay)) => {
                    assert_eq!(until.duration_since(finished), delay);
                    delay
                }
                None => SignedDuration::ZERO,
            };
            now += wait;
            assert!(backing_off(track.as_ref(), finished, now).is_none());
            track = Some(restarted(track.as_ref(), &c, finished, now, 0));
            out.push(wait);
        }
        out
    }

    #[test]
    fn first_restart_is_immediate_then_10s_doubling_to_5min() {
        let w = waits(9, secs(1));
        let want: Vec<_> = [0, 10, 20, 40, 80, 160, 300, 300, 300]
            .into_iter()
            .map(secs)
            .collect();
        assert_eq!(w, want);
    }

    #[test]
    fn a_run_of_more_than_ten_minutes_resets_the_back_off() {
        // Each run lasts 601 s after its restart: every restart is immediate.
        assert_eq!(waits(4, secs(601)), vec![SignedDuration::ZERO; 4]);
        // 600 s is not more than 2 × max: the back-off still applies.
        assert_eq!(waits(3, secs(600)), vec![secs(0), secs(10), secs(20)]);
    }

    #[test]
    fn the_count_never_goes_back_when_the_pod_read_is_stale() {
        let t0 = t("2026-12-01T05:00:00Z");
        let c = stopped("x", "Exited(1)");
        let one = restarted(None, &c, t0, t0, 0);
        assert_eq!(one.restarts, 1);
        // The next pass read the pod before the status with restartCount 1 reached the watch.
        let two = restarted(Some(&one), &c, t0 + secs(20), t0 + secs(20), 0);
        assert_eq!(two.restarts, 2);
        // A node started afresh knows only what the pod shows.
        assert_eq!(restarted(None, &c, t0, t0, 5).restarts, 6);
    }

    #[test]
    fn reset_starts_again_at_ten_seconds() {
        let t0 = t("2026-12-01T05:00:00Z");
        let c = stopped("x", "Exited(1)");
        let mut tr = restarted(None, &c, t0, t0, 0);
        tr = restarted(Some(&tr), &c, t0 + secs(15), t0 + secs(15), 1);
        assert_eq!(tr.backoff.unwrap().delay, secs(20));
        // The next run ends 11 min after that restart: immediate, and the entry is 10 s again.
        let fin = t0 + secs(15 + 660);
        assert_eq!(backing_off(Some(&tr), fin, fin), None);
        let tr = restarted(Some(&tr), &c, fin, fin, 2);
        assert_eq!(tr.backoff.unwrap().delay, INITIAL);
        // A crash right after it waits those 10 s.
        let fin2 = fin + secs(1);
        assert_eq!(
            backing_off(Some(&tr), fin2, fin2),
            Some((fin2 + secs(10), secs(10)))
        );
    }

    #[test]
    fn a_sent_start_is_pending_until_zun_acts_on_it() {
        let t0 = t("2026-12-01T05:00:00Z");
        let before = stopped("2026-12-01T04:59:59", "Exited(137) 1 second ago");
        let mut tr = restarted(None, &before, t0, t0, 0);
        // The same listing: Zun has not started it yet.
        settle(&mut tr, Some(&before), t0 + secs(1));
        assert!(tr.starting.is_some());
        // zun-compute is starting it (its task saved the container: a newer `updated_at`).
        let busy = ZunContainer {
            task_state: Some("container_starting".into()),
            updated_at: Some("2026-12-01T05:00:00".into()),
            ..before.clone()
        };
        settle(&mut tr, Some(&busy), t0 + secs(1));
        assert!(tr.starting.is_some());
        // Running: the start happened.
        let running = ZunContainer {
            status: zs::RUNNING.into(),
            ..before.clone()
        };
        let mut a = tr.clone();
        settle(&mut a, Some(&running), t0 + secs(1));
        assert_eq!(a.starting, None);
        // Stopped again but updated since: it ran and ended (a new crash, not the old run).
        let again = stopped("2026-12-01T05:00:03", "Exited(1) 1 second ago");
        let mut b = tr.clone();
        settle(&mut b, Some(&again), t0 + secs(4));
        assert_eq!(b.starting, None);
        // Never acted on: given up after the grace.
        let mut c = tr.clone();
        settle(&mut c, Some(&before), t0 + START_GRACE);
        assert_eq!(c.starting, None);
        // Gone from Zun: nothing to wait for.
        let mut d = tr;
        settle(&mut d, None, t0 + secs(1));
        assert_eq!(d.starting, None);
        assert!(d.backoff.is_some(), "the back-off is kept");
    }
}
