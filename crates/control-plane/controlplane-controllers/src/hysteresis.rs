//! Hysteresis between a service's health and what its dependants do (pure state machines, and
//! the process-wide memory they run on).
//!
//! - **Probes**: a service that answered its probe stays Ready through failed probes until
//!   [`Tolerance::failures`] failed in a row or the first of them is [`Tolerance::window`] old
//!   (memcached connections reset, a pod replaced under a Service: one failed token request
//!   must not make Keystone and with it every service red). One that never answered is not
//!   Ready at its first failure, as before.
//! - **Dependencies**: a dependant keeps going through [`Tolerance::grace`] after its
//!   dependency left Ready (a new generation not yet observed while Keystone is scaled from 3
//!   to 1, a rollout, a tolerated probe turning into a failure) instead of turning Blocked at
//!   once; a dependency never seen Ready blocks at once.
//!
//! The memory is the operator process's: after a restart every service must answer once
//! before its failures are tolerated again, and dependencies are judged by their status alone
//! until their controller passed once.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How much failure is tolerated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tolerance {
    /// Consecutive failed probes that make a service not Ready.
    pub failures: u32,
    /// How long probes may fail before the service is not Ready, however few failed.
    pub window: Duration,
    /// How long dependants keep going after a dependency left Ready.
    pub grace: Duration,
}

impl Default for Tolerance {
    fn default() -> Self {
        Tolerance {
            failures: 3,
            window: Duration::from_secs(60),
            grace: Duration::from_secs(120),
        }
    }
}

/// The probe history of one service.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProbeRecord {
    /// Whether a probe ever succeeded (in this process).
    pub answered: bool,
    /// Failed probes since the last success.
    pub failures: u32,
    /// When the first of them failed.
    pub failing_since: Option<Instant>,
}

/// What one probe outcome means for the service's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProbeVerdict {
    /// It answered.
    Up,
    /// It failed, within the tolerance: still Ready. `failures` in a row so far.
    Tolerated {
        /// Failed probes in a row.
        failures: u32,
    },
    /// It failed beyond the tolerance (or never answered): not Ready.
    Down,
}

impl ProbeRecord {
    /// The record after a probe at `now` that answered (`ok`) or not, and its verdict.
    pub fn observe(self, ok: bool, now: Instant, t: &Tolerance) -> (ProbeRecord, ProbeVerdict) {
        if ok {
            return (
                ProbeRecord {
                    answered: true,
                    failures: 0,
                    failing_since: None,
                },
                ProbeVerdict::Up,
            );
        }
        let since = self.failing_since.unwrap_or(now);
        let rec = ProbeRecord {
            answered: self.answered,
            failures: self.failures.saturating_add(1),
            failing_since: Some(since),
        };
        let verdict = if !rec.answered
            || rec.failures >= t.failures
            || now.saturating_duration_since(since) >= t.window
        {
            ProbeVerdict::Down
        } else {
            ProbeVerdict::Tolerated {
                failures: rec.failures,
            }
        };
        (rec, verdict)
    }
}

/// A dependency's readiness as its own controller last ended a pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Readiness {
    /// Its last pass ended Ready.
    Ready,
    /// Its passes end not Ready since `since`; `was_ready` when it was Ready before.
    NotReady {
        /// When it left Ready (or was first seen not Ready).
        since: Instant,
        /// Whether it was Ready before.
        was_ready: bool,
    },
}

impl Readiness {
    /// The readiness after a pass at `now` that ended `ready` or not.
    pub fn after_pass(prev: Option<Readiness>, ready: bool, now: Instant) -> Readiness {
        match (prev, ready) {
            (_, true) => Readiness::Ready,
            (Some(Readiness::Ready), false) => Readiness::NotReady {
                since: now,
                was_ready: true,
            },
            (Some(n @ Readiness::NotReady { .. }), false) => n,
            (None, false) => Readiness::NotReady {
                since: now,
                was_ready: false,
            },
        }
    }
}

/// What a dependant does with a dependency whose status is not Ready (at its generation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gate {
    /// Go on as if it were Ready, for at most this long.
    Grace(Duration),
    /// Blocked.
    Blocked,
}

/// The gate for a dependency whose status is not Ready, from its controller's `readiness`.
pub fn gate(readiness: Option<Readiness>, now: Instant, grace: Duration) -> Gate {
    match readiness {
        // Its status lags its last pass (a new generation being observed).
        Some(Readiness::Ready) => Gate::Grace(grace),
        Some(Readiness::NotReady {
            since,
            was_ready: true,
        }) => {
            let left = grace.saturating_sub(now.saturating_duration_since(since));
            if left.is_zero() {
                Gate::Blocked
            } else {
                Gate::Grace(left)
            }
        }
        Some(Readiness::NotReady {
            was_ready: false, ..
        })
        | None => Gate::Blocked,
    }
}

/// The process-wide memory of probes and readiness, by `kind/namespace/name`.
#[derive(Debug, Default)]
pub struct Memory {
    probes: Mutex<HashMap<String, ProbeRecord>>,
    readiness: Mutex<HashMap<String, Readiness>>,
}

/// The memory's key of an object.
pub fn key(kind: &str, ns: &str, name: &str) -> String {
    format!("{kind}/{ns}/{name}")
}

impl Memory {
    /// Records a probe outcome of `key`; its verdict.
    pub fn probe(&self, key: &str, ok: bool, now: Instant, t: &Tolerance) -> ProbeVerdict {
        let Ok(mut m) = self.probes.lock() else {
            // A poisoned lock (a panic elsewhere): no tolerance rather than none at all.
            return if ok {
                ProbeVerdict::Up
            } else {
                ProbeVerdict::Down
            };
        };
        let (rec, verdict) = m.get(key).copied().unwrap_or_default().observe(ok, now, t);
        m.insert(key.to_string(), rec);
        verdict
    }

    /// Records how a pass of `key` ended.
    pub fn passed(&self, key: &str, ready: bool, now: Instant) {
        if let Ok(mut m) = self.readiness.lock() {
            let next = Readiness::after_pass(m.get(key).copied(), ready, now);
            m.insert(key.to_string(), next);
        }
    }

    /// The gate of dependency `key`, whose status is not Ready.
    pub fn gate(&self, key: &str, now: Instant, grace: Duration) -> Gate {
        let r = self.readiness.lock().ok().and_then(|m| m.get(key).copied());
        gate(r, now, grace)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(t0: Instant, s: u64) -> Instant {
        t0 + Duration::from_secs(s)
    }

    #[test]
    fn a_service_that_answered_stays_up_through_fewer_than_n_failures() {
        let t = Tolerance::default();
        let t0 = Instant::now();
        let (r, v) = ProbeRecord::default().observe(true, t0, &t);
        assert_eq!(v, ProbeVerdict::Up);
        let (r, v) = r.observe(false, at(t0, 15), &t);
        assert_eq!(v, ProbeVerdict::Tolerated { failures: 1 });
        let (r, v) = r.observe(false, at(t0, 30), &t);
        assert_eq!(v, ProbeVerdict::Tolerated { failures: 2 });
        // A success forgets the failures.
        let (r, v) = r.observe(true, at(t0, 45), &t);
        assert_eq!(v, ProbeVerdict::Up);
        let (r, v) = r.observe(false, at(t0, 60), &t);
        assert_eq!(v, ProbeVerdict::Tolerated { failures: 1 });
        let (r, _) = r.observe(false, at(t0, 61), &t);
        let (_, v) = r.observe(false, at(t0, 62), &t);
        assert_eq!(v, ProbeVerdict::Down, "the third failure in a row");
    }

    #[test]
    fn failures_lasting_longer_than_the_window_are_down_however_few() {
        let t = Tolerance {
            failures: 10,
            ..Tolerance::default()
        };
        let t0 = Instant::now();
        let (r, _) = ProbeRecord::default().observe(true, t0, &t);
        let (r, v) = r.observe(false, at(t0, 100), &t);
        assert_eq!(v, ProbeVerdict::Tolerated { failures: 1 });
        let (r, v) = r.observe(false, at(t0, 159), &t);
        assert_eq!(v, ProbeVerdict::Tolerated { failures: 2 });
        let (_, v) = r.observe(false, at(t0, 160), &t);
        assert_eq!(v, ProbeVerdict::Down, "60 s since the first failure");
    }

    #[test]
    fn a_service_that_never_answered_is_down_at_its_first_failure() {
        let t = Tolerance::default();
        let (r, v) = ProbeRecord::default().observe(false, Instant::now(), &t);
        assert_eq!(v, ProbeVerdict::Down);
        assert_eq!(r.failures, 1);
    }

    #[test]
    fn dependants_keep_going_through_the_grace_after_a_dependency_left_ready() {
        let g = Duration::from_secs(120);
        let t0 = Instant::now();
        // Never seen: blocked at once (status alone decides, as before).
        assert_eq!(gate(None, t0, g), Gate::Blocked);
        // Seen not Ready only: blocked at once.
        let r = Readiness::after_pass(None, false, t0);
        assert_eq!(gate(Some(r), at(t0, 1), g), Gate::Blocked);
        // Ready, then its status lags a new generation: grace.
        let r = Readiness::after_pass(Some(r), true, at(t0, 10));
        assert_eq!(gate(Some(r), at(t0, 11), g), Gate::Grace(g));
        // Scaled 3 → 1: a pass ends Reconciling (RollingOut) at 20 s.
        let r = Readiness::after_pass(Some(r), false, at(t0, 20));
        assert_eq!(
            gate(Some(r), at(t0, 30), g),
            Gate::Grace(Duration::from_secs(110))
        );
        // Still not Ready at 50 s: the grace counts from when it left Ready.
        let r = Readiness::after_pass(Some(r), false, at(t0, 50));
        assert_eq!(
            gate(Some(r), at(t0, 60), g),
            Gate::Grace(Duration::from_secs(80))
        );
        assert_eq!(gate(Some(r), at(t0, 140), g), Gate::Blocked);
        // Ready again, then a new failure: a fresh grace.
        let r = Readiness::after_pass(Some(r), true, at(t0, 200));
        let r = Readiness::after_pass(Some(r), false, at(t0, 300));
        assert_eq!(gate(Some(r), at(t0, 300), g), Gate::Grace(g));
    }

    #[test]
    fn the_memory_keeps_records_per_object() {
        let m = Memory::default();
        let t = Tolerance::default();
        let now = Instant::now();
        let a = key("Keystone", "os", "ks");
        let b = key("Keystone", "other", "ks");
        assert_eq!(m.probe(&a, true, now, &t), ProbeVerdict::Up);
        assert_eq!(
            m.probe(&a, false, now, &t),
            ProbeVerdict::Tolerated { failures: 1 }
        );
        assert_eq!(m.probe(&b, false, now, &t), ProbeVerdict::Down);
        m.passed(&a, true, now);
        assert_eq!(m.gate(&a, now, t.grace), Gate::Grace(t.grace));
        assert_eq!(m.gate(&b, now, t.grace), Gate::Blocked);
    }
}
