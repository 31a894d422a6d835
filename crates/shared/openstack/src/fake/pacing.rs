//! Pacing: the in-memory OpenStack answering like a remote cloud with spare capacity.
//!
//! The bench uses it to measure whether the operator keeps the client-side limiter busy
//! when the cloud is not the bound (the test cloud on 2 cores is: its Neutron answers one
//! request at a time). Each call holds one permit of the same [`RateLimiter`] the HTTP
//! client uses per HTTP request that client would send for it (a Neutron create with tags is
//! a POST and a PUT), for that request's service time, and only then takes effect. The
//! server side has no limit of its own: requests overlap freely.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::adapter::ratelimit::RateLimiter;

/// Service times of the HTTP requests one call sends, by `"service.operation"`.
pub type ServiceTimes = BTreeMap<String, Vec<Duration>>;

/// A client-side limiter and the time each request takes at the server.
#[derive(Debug)]
pub struct Pacing {
    limiter: RateLimiter,
    times: ServiceTimes,
    /// For operations `times` does not name: one request of this length.
    default: Duration,
    requests: AtomicU64,
    waited_us: AtomicU64,
    served_us: AtomicU64,
}

/// What a paced fake has done so far.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PacingTotals {
    /// HTTP requests modelled (permits taken).
    pub requests: u64,
    /// Time spent waiting for a permit, summed over requests, in seconds.
    pub limiter_wait_s: f64,
    /// Time requests held their permit (the service times slept), in seconds.
    pub request_time_s: f64,
}

impl Pacing {
    /// `max_concurrent` requests in flight and `per_second` requests per second (0 = no
    /// rate) with bursts of `burst`, as the client's options; each call of an operation sends
    /// the requests `times` lists for it, `default` for one request of any other.
    pub fn new(
        max_concurrent: usize,
        per_second: u32,
        burst: u32,
        times: ServiceTimes,
        default: Duration,
    ) -> Self {
        Self {
            limiter: RateLimiter::new(max_concurrent, per_second, burst),
            times,
            default,
            requests: AtomicU64::new(0),
            waited_us: AtomicU64::new(0),
            served_us: AtomicU64::new(0),
        }
    }

    /// Sends the requests of one call of `op`, one after another, each under a permit.
    pub(crate) async fn call(&self, op: &str) {
        let one = [self.default];
        let times = self.times.get(op).map_or(&one[..], Vec::as_slice);
        for t in times {
            let (permit, waited) = self.limiter.acquire().await;
            tokio::time::sleep(*t).await;
            drop(permit);
            self.requests.fetch_add(1, Ordering::Relaxed);
            self.waited_us.fetch_add(micros(waited), Ordering::Relaxed);
            self.served_us.fetch_add(micros(*t), Ordering::Relaxed);
        }
    }

    /// Totals since the start.
    pub fn totals(&self) -> PacingTotals {
        PacingTotals {
            requests: self.requests.load(Ordering::Relaxed),
            limiter_wait_s: self.waited_us.load(Ordering::Relaxed) as f64 / 1e6,
            request_time_s: self.served_us.load(Ordering::Relaxed) as f64 / 1e6,
        }
    }
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::fake::FakeCloud;

    // Lower bounds only: a sleep lasts at least its time, never exactly.
    #[tokio::test]
    async fn calls_hold_a_permit_per_request_for_its_service_time() {
        let times = ServiceTimes::from([(
            "identity.list_roles".to_string(),
            vec![Duration::from_millis(60), Duration::from_millis(20)],
        )]);
        let fake = FakeCloud::paced(Arc::new(Pacing::new(
            1,
            0,
            1,
            times,
            Duration::from_millis(10),
        )));
        let id = fake.cloud().identity;
        let start = std::time::Instant::now();
        // One slot: two calls of two requests each, then one unlisted call, in series
        // (170 ms; at once they would take 90).
        let (a, b) = tokio::join!(id.list_roles(), id.list_roles());
        assert!(a.is_ok() && b.is_ok());
        assert!(id.find_domain("Default").await.is_ok());
        let elapsed = start.elapsed();
        assert!(elapsed >= Duration::from_millis(170), "{elapsed:?}");
        let t = fake.pacing_totals().unwrap_or_default();
        assert_eq!(t.requests, 5);
        assert!((t.request_time_s - 0.17).abs() < 1e-9, "{t:?}");
        assert!(t.limiter_wait_s > 0.0, "the second call waited: {t:?}");
        assert_eq!(fake.call_count("identity.list_roles"), 2);
    }

    #[tokio::test]
    async fn the_rate_spaces_requests_that_have_free_slots() {
        let fake = FakeCloud::paced(Arc::new(Pacing::new(
            10,
            20,
            1,
            ServiceTimes::new(),
            Duration::ZERO,
        )));
        let id = fake.cloud().identity;
        let start = std::time::Instant::now();
        for _ in 0..11 {
            assert!(id.list_roles().await.is_ok());
        }
        // The first at once, then one per 50 ms.
        let elapsed = start.elapsed();
        assert!(elapsed >= Duration::from_millis(495), "{elapsed:?}");
    }
}
