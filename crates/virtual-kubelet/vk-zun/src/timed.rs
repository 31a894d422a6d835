//! The Zun calls of the node's loops, each with a deadline.
//!
//! The OpenStack client bounds one HTTP attempt (30 s) but retries a timed-out idempotent
//! request, so a GET that Zun does not answer holds its caller for minutes; and stock zun-api
//! often runs a single worker, where one slow request (a create, a GET that asks Docker
//! through zun-compute) queues every other one behind it. [`TimedZun`] ends each call at its
//! deadline with [`openstack::Error::Timeout`], so that a pod's pass waits for Zun at most
//! that long, logs a warning naming the call and how long it took when it was slow or timed
//! out, and counts both in `vk_zun_slow_calls_total{operation, outcome}`.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use openstack::container::{
    Container, ExecOutput, LogOptions, ZunCapsule, ZunCapsuleCreate, ZunContainer,
    ZunContainerCreate, ZunQuota, ZunService, ZunSession, ZunStats, ZunTop,
};
use openstack::{Error, Result};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use tracing::warn;

/// A pod-loop Zun call's deadline, by default.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// A call that takes longer than this is logged and counted as slow (an answer Zun gives in
/// well under a second when it is not queueing).
pub const SLOW_CALL: Duration = Duration::from_secs(5);

/// Labels of `vk_zun_slow_calls_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SlowCallLabels {
    /// The Zun call (`list_containers`, `get_container`, ...).
    pub operation: String,
    /// `slow` (answered after [`SLOW_CALL`]) or `timeout` (no answer by the deadline).
    pub outcome: String,
}

/// The node's count of slow and timed-out Zun calls. Cheap to clone; clones count together.
#[derive(Clone, Debug, Default)]
pub struct CallMetrics {
    slow: Family<SlowCallLabels, Counter>,
}

impl CallMetrics {
    /// Registers `vk_zun_slow_calls_total` in `registry`.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "vk_zun_slow_calls",
            "Zun calls of the virtual kubelet's loops that answered after 5 s (outcome=slow) or not by their deadline (outcome=timeout)",
            self.slow.clone(),
        );
    }

    /// How many calls of `operation` ended with `outcome` (`slow` or `timeout`).
    pub fn count(&self, operation: &str, outcome: &str) -> u64 {
        self.slow
            .get_or_create(&SlowCallLabels {
                operation: operation.into(),
                outcome: outcome.into(),
            })
            .get()
    }

    fn observe(&self, operation: &str, outcome: &str) {
        self.slow
            .get_or_create(&SlowCallLabels {
                operation: operation.into(),
                outcome: outcome.into(),
            })
            .inc();
    }
}

/// [`Container`] with a deadline on every call (see the module documentation).
pub struct TimedZun {
    inner: Arc<dyn Container>,
    timeout: Duration,
    metrics: CallMetrics,
}

impl TimedZun {
    /// `inner`'s calls, each ended after `timeout` (at least 1 ms).
    pub fn new(inner: Arc<dyn Container>, timeout: Duration, metrics: CallMetrics) -> Self {
        Self {
            inner,
            timeout: timeout.max(Duration::from_millis(1)),
            metrics,
        }
    }

    /// Runs `call` (`operation` on `target`, for the log) within the deadline.
    async fn timed<T>(
        &self,
        operation: &'static str,
        target: &str,
        call: impl Future<Output = Result<T>>,
    ) -> Result<T> {
        let started = Instant::now();
        let out = tokio::time::timeout(self.timeout, call).await;
        let took = started.elapsed();
        match out {
            Ok(r) => {
                if took >= SLOW_CALL {
                    warn!(
                        operation,
                        target,
                        duration_ms = took.as_millis() as u64,
                        ok = r.is_ok(),
                        "slow Zun call"
                    );
                    self.metrics.observe(operation, "slow");
                }
                r
            }
            Err(_) => {
                warn!(
                    operation,
                    target,
                    duration_ms = took.as_millis() as u64,
                    "Zun call timed out; the pod's pass goes on without it"
                );
                self.metrics.observe(operation, "timeout");
                Err(Error::Timeout {
                    message: format!(
                        "zun {operation} {target}: no answer within {}s (--zun-call-timeout-seconds)",
                        self.timeout.as_secs_f64()
                    ),
                })
            }
        }
    }
}

#[async_trait]
impl Container for TimedZun {
    async fn create_container(&self, req: &ZunContainerCreate) -> Result<ZunContainer> {
        self.timed(
            "create_container",
            &req.name,
            self.inner.create_container(req),
        )
        .await
    }

    async fn get_container(&self, id: &str) -> Result<ZunContainer> {
        self.timed("get_container", id, self.inner.get_container(id))
            .await
    }

    async fn list_containers(
        &self,
        labels: &BTreeMap<String, String>,
        name: Option<&str>,
    ) -> Result<Vec<ZunContainer>> {
        self.timed(
            "list_containers",
            name.unwrap_or(""),
            self.inner.list_containers(labels, name),
        )
        .await
    }

    async fn delete_container(&self, id: &str, stop: bool, force: bool) -> Result<()> {
        self.timed(
            "delete_container",
            id,
            self.inner.delete_container(id, stop, force),
        )
        .await
    }

    async fn start_container(&self, id: &str) -> Result<()> {
        self.timed("start_container", id, self.inner.start_container(id))
            .await
    }

    async fn stop_container(&self, id: &str, timeout_s: u64) -> Result<()> {
        self.timed(
            "stop_container",
            id,
            self.inner.stop_container(id, timeout_s),
        )
        .await
    }

    async fn container_logs(&self, id: &str, opts: &LogOptions) -> Result<String> {
        self.timed("container_logs", id, self.inner.container_logs(id, opts))
            .await
    }

    async fn exec(&self, id: &str, command: &[String]) -> Result<ExecOutput> {
        self.timed("exec", id, self.inner.exec(id, command)).await
    }

    async fn create_capsule(&self, req: &ZunCapsuleCreate) -> Result<ZunCapsule> {
        self.timed("create_capsule", "", self.inner.create_capsule(req))
            .await
    }

    async fn get_capsule(&self, id: &str) -> Result<ZunCapsule> {
        self.timed("get_capsule", id, self.inner.get_capsule(id))
            .await
    }

    async fn list_capsules(&self, labels: &BTreeMap<String, String>) -> Result<Vec<ZunCapsule>> {
        self.timed("list_capsules", "", self.inner.list_capsules(labels))
            .await
    }

    async fn delete_capsule(&self, id: &str) -> Result<()> {
        self.timed("delete_capsule", id, self.inner.delete_capsule(id))
            .await
    }

    async fn get_quota(&self, project_id: &str) -> Result<ZunQuota> {
        self.timed("get_quota", project_id, self.inner.get_quota(project_id))
            .await
    }

    async fn list_availability_zones(&self) -> Result<Vec<String>> {
        self.timed(
            "list_availability_zones",
            "",
            self.inner.list_availability_zones(),
        )
        .await
    }

    async fn list_services(&self) -> Result<Vec<ZunService>> {
        self.timed("list_services", "", self.inner.list_services())
            .await
    }

    async fn container_stats(&self, id: &str) -> Result<ZunStats> {
        self.timed("container_stats", id, self.inner.container_stats(id))
            .await
    }

    async fn container_top(&self, id: &str, ps_args: &str) -> Result<ZunTop> {
        self.timed("container_top", id, self.inner.container_top(id, ps_args))
            .await
    }

    async fn exec_interactive(&self, id: &str, command: &[String]) -> Result<ZunSession> {
        self.timed(
            "exec_interactive",
            id,
            self.inner.exec_interactive(id, command),
        )
        .await
    }

    async fn attach(&self, id: &str) -> Result<ZunSession> {
        self.timed("attach", id, self.inner.attach(id)).await
    }

    async fn get_archive(&self, id: &str, path: &str) -> Result<Vec<u8>> {
        self.timed("get_archive", id, self.inner.get_archive(id, path))
            .await
    }

    async fn put_archive(&self, id: &str, path: &str, tar: &[u8]) -> Result<()> {
        self.timed("put_archive", id, self.inner.put_archive(id, path, tar))
            .await
    }

    async fn exec_resize(&self, id: &str, exec_id: &str, width: u16, height: u16) -> Result<()> {
        self.timed(
            "exec_resize",
            id,
            self.inner.exec_resize(id, exec_id, width, height),
        )
        .await
    }

    async fn resize_tty(&self, id: &str, width: u16, height: u16) -> Result<()> {
        self.timed("resize_tty", id, self.inner.resize_tty(id, width, height))
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use openstack::fake::FakeZun;

    #[tokio::test]
    async fn a_call_without_an_answer_ends_at_its_deadline_and_is_counted() {
        let metrics = CallMetrics::default();
        let fake = FakeZun::new();
        fake.hang_creates_labelled("pod", "stuck");
        let zun = TimedZun::new(
            Arc::new(fake.clone()),
            Duration::from_millis(200),
            metrics.clone(),
        );
        let req = ZunContainerCreate {
            name: "c-1".into(),
            image: "busybox".into(),
            labels: [("pod".to_string(), "stuck".to_string())].into(),
            ..Default::default()
        };
        let e = zun.create_container(&req).await.unwrap_err();
        assert!(matches!(e, Error::Timeout { .. }), "{e:?}");
        assert!(e.message().contains("create_container c-1"), "{e}");
        assert_eq!(fake.calls("create_container"), 1);
        assert_eq!(metrics.count("create_container", "timeout"), 1);
        // Calls that answer pass through untouched and are not counted.
        assert!(zun.list_containers(&BTreeMap::new(), None).await.is_ok());
        assert_eq!(metrics.count("list_containers", "timeout"), 0);
        assert_eq!(metrics.count("list_containers", "slow"), 0);
    }
}
