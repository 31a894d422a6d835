//! Prometheus metrics of the OpenStack client.
//!
//! Names and labels match the seed operator (`openstack_operator_openstack_api_*`,
//! `openstack_operator_rate_limit_wait_seconds`) so existing dashboards keep
//! working. `calls_total.status` is `success`/`error` per logical call (after
//! retries), as in the seed; the HTTP status of every attempt is in the extra
//! `openstack_operator_openstack_api_responses_total{code}` counter.
//!
//! A client made for one of several clouds ([`Metrics::with_cloud`]) also counts into
//! `openstack_operator_cloud_api_calls_total{cloud,service,operation,status}`,
//! `openstack_operator_cloud_api_responses_total{cloud,service,operation,code}` and
//! `openstack_operator_cloud_rate_limit_wait_seconds{cloud}`: new families, so the seed's
//! series (and every dashboard or parser reading them) keep their labels.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// Labels `service`, `operation`, `status`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CallLabels {
    /// `identity`, `compute`, `image`, `network`, `block_storage`.
    pub service: String,
    /// The port method, e.g. `create_project`.
    pub operation: String,
    /// `success` or `error`.
    pub status: String,
}

/// Labels `cloud`, `service`, `operation`, `status`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CloudCallLabels {
    /// The cloud's name (an `OpenstackCloud`, or `(default)` for the operator's own).
    pub cloud: String,
    /// Service label.
    pub service: String,
    /// Operation label.
    pub operation: String,
    /// `success` or `error`.
    pub status: String,
}

/// Labels `cloud`, `service`, `operation`, `code`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CloudResponseLabels {
    /// The cloud's name.
    pub cloud: String,
    /// Service label.
    pub service: String,
    /// Operation label.
    pub operation: String,
    /// HTTP status code, `transport` or `timeout`.
    pub code: String,
}

/// Label `cloud`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CloudLabel {
    /// The cloud's name.
    pub cloud: String,
}

/// Labels `service`, `operation`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OpLabels {
    /// Service label.
    pub service: String,
    /// Operation label.
    pub operation: String,
}

/// Labels `service`, `operation`, `code` (HTTP status or `transport`/`timeout`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResponseLabels {
    /// Service label.
    pub service: String,
    /// Operation label.
    pub operation: String,
    /// HTTP status code, `transport` or `timeout`.
    pub code: String,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

fn api_duration_histogram() -> Histogram {
    // Same buckets as the seed (0.05 … 10 s).
    Histogram::new([0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0])
}

/// The client's metric handles. Cheap to clone (shared counters).
#[derive(Clone, Debug)]
pub struct Metrics {
    calls: Family<CallLabels, Counter>,
    responses: Family<ResponseLabels, Counter>,
    duration: HistogramFamily<OpLabels>,
    retries: Family<OpLabels, Counter>,
    rate_limit_wait: Histogram,
    cloud_calls: Family<CloudCallLabels, Counter>,
    cloud_responses: Family<CloudResponseLabels, Counter>,
    cloud_rate_limit_wait: HistogramFamily<CloudLabel>,
    /// The cloud this client's calls are counted for (None: no per-cloud series).
    cloud: Option<std::sync::Arc<str>>,
}

fn rate_limit_histogram() -> Histogram {
    Histogram::new([0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5])
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// New, unregistered metrics (still counted; register to expose them).
    pub fn new() -> Self {
        Self {
            calls: Family::default(),
            responses: Family::default(),
            duration: Family::new_with_constructor(api_duration_histogram),
            retries: Family::default(),
            rate_limit_wait: rate_limit_histogram(),
            cloud_calls: Family::default(),
            cloud_responses: Family::default(),
            cloud_rate_limit_wait: Family::new_with_constructor(rate_limit_histogram),
            cloud: None,
        }
    }

    /// The same metrics (shared counters), also counted under `cloud` in the per-cloud
    /// families: one client per cloud of a multi-cloud operator.
    pub fn with_cloud(&self, cloud: &str) -> Self {
        Self {
            cloud: Some(cloud.into()),
            ..self.clone()
        }
    }

    /// Register all metrics in `registry` (prometheus-client adds `_total` to
    /// counters, giving the seed's names).
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "openstack_operator_openstack_api_calls",
            "OpenStack API calls by service, operation and final status",
            self.calls.clone(),
        );
        registry.register(
            "openstack_operator_openstack_api_responses",
            "OpenStack HTTP responses (every attempt) by status code",
            self.responses.clone(),
        );
        registry.register(
            "openstack_operator_openstack_api_duration_seconds",
            "Duration of each OpenStack API request attempt",
            self.duration.clone(),
        );
        registry.register(
            "openstack_operator_openstack_api_retries",
            "OpenStack API request retries",
            self.retries.clone(),
        );
        registry.register(
            "openstack_operator_rate_limit_wait_seconds",
            "Time spent waiting for the client-side rate limiter",
            self.rate_limit_wait.clone(),
        );
        registry.register(
            "openstack_operator_cloud_api_calls",
            "OpenStack API calls by cloud, service, operation and final status",
            self.cloud_calls.clone(),
        );
        registry.register(
            "openstack_operator_cloud_api_responses",
            "OpenStack HTTP responses (every attempt) by cloud and status code",
            self.cloud_responses.clone(),
        );
        registry.register(
            "openstack_operator_cloud_rate_limit_wait_seconds",
            "Time spent waiting for a cloud's client-side rate limiter",
            self.cloud_rate_limit_wait.clone(),
        );
    }

    pub(crate) fn observe_call(&self, service: &str, operation: &str, ok: bool) {
        self.calls
            .get_or_create(&CallLabels {
                service: service.into(),
                operation: operation.into(),
                status: if ok { "success" } else { "error" }.into(),
            })
            .inc();
        if let Some(cloud) = &self.cloud {
            self.cloud_calls
                .get_or_create(&CloudCallLabels {
                    cloud: cloud.to_string(),
                    service: service.into(),
                    operation: operation.into(),
                    status: if ok { "success" } else { "error" }.into(),
                })
                .inc();
        }
    }

    pub(crate) fn observe_attempt(&self, service: &str, operation: &str, code: &str, secs: f64) {
        self.responses
            .get_or_create(&ResponseLabels {
                service: service.into(),
                operation: operation.into(),
                code: code.into(),
            })
            .inc();
        if let Some(cloud) = &self.cloud {
            self.cloud_responses
                .get_or_create(&CloudResponseLabels {
                    cloud: cloud.to_string(),
                    service: service.into(),
                    operation: operation.into(),
                    code: code.into(),
                })
                .inc();
        }
        self.duration
            .get_or_create(&OpLabels {
                service: service.into(),
                operation: operation.into(),
            })
            .observe(secs);
    }

    pub(crate) fn observe_retry(&self, service: &str, operation: &str) {
        self.retries
            .get_or_create(&OpLabels {
                service: service.into(),
                operation: operation.into(),
            })
            .inc();
    }

    pub(crate) fn observe_rate_limit_wait(&self, secs: f64) {
        // As in the seed: only waits above 1 ms are interesting.
        if secs > 0.001 {
            self.rate_limit_wait.observe(secs);
            if let Some(cloud) = &self.cloud {
                self.cloud_rate_limit_wait
                    .get_or_create(&CloudLabel {
                        cloud: cloud.to_string(),
                    })
                    .observe(secs);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exposes_seed_names() {
        let m = Metrics::new();
        let mut reg = Registry::default();
        m.register(&mut reg);
        m.observe_call("identity", "get_project", true);
        m.observe_attempt("identity", "get_project", "200", 0.02);
        m.observe_retry("identity", "get_project");
        m.observe_rate_limit_wait(0.5);
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &reg).unwrap();
        assert!(out.contains(
            "openstack_operator_openstack_api_calls_total{service=\"identity\",operation=\"get_project\",status=\"success\"} 1"
        ));
        assert!(out.contains("openstack_operator_openstack_api_duration_seconds_bucket"));
        assert!(out.contains("openstack_operator_openstack_api_retries_total{service=\"identity\",operation=\"get_project\"} 1"));
        assert!(out.contains("openstack_operator_rate_limit_wait_seconds_count 1"));
        assert!(out.contains("code=\"200\""));
        // Without a cloud, no per-cloud series.
        assert!(
            !out.contains("openstack_operator_cloud_api_calls_total{"),
            "{out}"
        );
    }

    #[test]
    fn a_cloud_client_counts_in_both_families_under_its_name() {
        let m = Metrics::new();
        let mut reg = Registry::default();
        m.register(&mut reg);
        let east = m.with_cloud("east");
        let west = m.with_cloud("west");
        east.observe_call("identity", "list_projects", true);
        west.observe_call("identity", "list_projects", false);
        east.observe_attempt("identity", "list_projects", "200", 0.01);
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &reg).unwrap();
        assert!(out.contains("openstack_operator_cloud_api_calls_total{cloud=\"east\",service=\"identity\",operation=\"list_projects\",status=\"success\"} 1"), "{out}");
        assert!(out.contains("openstack_operator_cloud_api_calls_total{cloud=\"west\",service=\"identity\",operation=\"list_projects\",status=\"error\"} 1"), "{out}");
        assert!(out.contains("openstack_operator_cloud_api_responses_total{cloud=\"east\",service=\"identity\",operation=\"list_projects\",code=\"200\"} 1"), "{out}");
        // The seed's family still counts every call, without the label.
        assert!(out.contains("openstack_operator_openstack_api_calls_total{service=\"identity\",operation=\"list_projects\",status=\"success\"} 1"), "{out}");
    }
}
