//! Polling with a deadline: every wait in the suite goes through [`wait_for`], so a timeout
//! always says what was awaited and what was seen last.

use std::time::{Duration, Instant};

/// What one poll of [`wait_for`] saw.
#[derive(Debug)]
pub enum Check<T> {
    /// The condition holds; the wait ends with this value.
    Done(T),
    /// Not yet; the text describes what was observed (shown if the wait times out).
    Pending(String),
    /// Give up now: waiting longer cannot help (e.g. the process being waited on exited).
    Fail(anyhow::Error),
}

/// Polls `check` every `poll` until it returns [`Check::Done`] or `timeout` passes. Errors
/// returned by `check` are treated as "not yet" (and shown if the wait times out), so a
/// transient API error does not end a wait early.
pub async fn wait_for<T>(
    timeout: Duration,
    poll: Duration,
    what: &str,
    mut check: impl AsyncFnMut() -> anyhow::Result<Check<T>>,
) -> anyhow::Result<T> {
    let started = Instant::now();
    let deadline = started + timeout;
    let mut polls = 0u32;
    loop {
        polls += 1;
        let left = deadline.saturating_duration_since(Instant::now());
        let last = match tokio::time::timeout(left.max(Duration::from_millis(200)), check()).await {
            Ok(Ok(Check::Done(v))) => return Ok(v),
            Ok(Ok(Check::Pending(seen))) => seen,
            Ok(Ok(Check::Fail(e))) => return Err(e.context(format!("while waiting for {what}"))),
            Ok(Err(e)) => format!("error: {e:#}"),
            Err(_) => format!("the check itself did not answer within {left:?}"),
        };
        let now = Instant::now();
        if now >= deadline {
            anyhow::bail!(
                "timed out after {:.1}s ({polls} polls) waiting for {what}; last observed: {last}",
                started.elapsed().as_secs_f64()
            );
        }
        tokio::time::sleep(poll.min(deadline - now)).await;
    }
}
