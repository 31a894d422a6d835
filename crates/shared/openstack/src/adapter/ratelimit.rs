//! Client-side rate limiter: a concurrency cap plus a request rate.
//!
//! One permit covers exactly one HTTP request and is released before any
//! backoff sleep. Nothing in this crate acquires a permit while holding one
//! (the seed's nested acquisition deadlocked with ≥10 concurrent callers,
//! weakness W15), so the limiter cannot deadlock.

use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::{Duration, Instant};

use governor::clock::DefaultClock;
use governor::state::{InMemoryState, NotKeyed};
use governor::{Quota, RateLimiter as Gcra};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Limits concurrent requests and requests per second.
#[derive(Debug)]
pub struct RateLimiter {
    concurrency: Arc<Semaphore>,
    rate: Option<Gcra<NotKeyed, InMemoryState, DefaultClock>>,
}

/// Proof of admission; dropping it frees the concurrency slot.
#[derive(Debug)]
pub struct Permit {
    // `None` only if the semaphore were closed, which this crate never does.
    _permit: Option<OwnedSemaphorePermit>,
}

impl RateLimiter {
    /// `max_concurrent` in-flight requests (at least 1), `per_second`
    /// sustained rate (0 = unlimited) with bursts of up to `burst`.
    pub fn new(max_concurrent: usize, per_second: u32, burst: u32) -> Self {
        let rate = NonZeroU32::new(per_second).map(|rps| {
            let burst = NonZeroU32::new(burst.clamp(1, rps.get())).unwrap_or(NonZeroU32::MIN);
            Gcra::direct(Quota::per_second(rps).allow_burst(burst))
        });
        Self {
            concurrency: Arc::new(Semaphore::new(max_concurrent.max(1))),
            rate,
        }
    }

    /// Wait for a slot and a rate token; returns the permit and the time
    /// spent waiting.
    pub async fn acquire(&self) -> (Permit, Duration) {
        let start = Instant::now();
        // The semaphore is never closed, so acquisition cannot fail; if it
        // ever did, proceeding without a slot is safer than failing calls.
        let permit = Arc::clone(&self.concurrency).acquire_owned().await;
        if let Some(rate) = &self.rate {
            rate.until_ready().await;
        }
        let waited = start.elapsed();
        (
            Permit {
                _permit: permit.ok(),
            },
            waited,
        )
    }

    /// Slots currently free (for tests and diagnostics).
    pub fn available(&self) -> usize {
        self.concurrency.available_permits()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn caps_concurrency() {
        let rl = Arc::new(RateLimiter::new(2, 0, 1));
        let (a, _) = rl.acquire().await;
        let (_b, _) = rl.acquire().await;
        assert_eq!(rl.available(), 0);
        let rl2 = Arc::clone(&rl);
        let waiter = tokio::spawn(async move { rl2.acquire().await.1 });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiter.is_finished());
        drop(a);
        let waited = waiter.await.unwrap();
        assert!(waited >= Duration::from_millis(40));
    }

    #[tokio::test]
    async fn enforces_rate() {
        // 20/s with burst 1 ⇒ 50 ms spacing: 5 requests take ≥ 200 ms.
        let rl = RateLimiter::new(10, 20, 1);
        let start = Instant::now();
        for _ in 0..5 {
            let _ = rl.acquire().await;
        }
        assert!(start.elapsed() >= Duration::from_millis(190));
    }

    #[tokio::test]
    async fn many_concurrent_callers_do_not_deadlock() {
        // W15: 50 callers through a 10-slot limiter all finish.
        let rl = Arc::new(RateLimiter::new(10, 0, 1));
        let tasks: Vec<_> = (0..50)
            .map(|_| {
                let rl = Arc::clone(&rl);
                tokio::spawn(async move {
                    let (_p, _) = rl.acquire().await;
                    tokio::time::sleep(Duration::from_millis(5)).await;
                })
            })
            .collect();
        let all = futures::future::join_all(tasks);
        tokio::time::timeout(Duration::from_secs(5), all)
            .await
            .unwrap();
        assert_eq!(rl.available(), 10);
    }
}
