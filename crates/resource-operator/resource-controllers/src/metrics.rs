//! Reconcile metrics, with the seed's names and labels.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// Labels of the reconcile counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReconcileLabels {
    /// Kind, e.g. `OpenstackProject`.
    pub resource: String,
    /// `create`, `update` or `delete` (the seed's operations).
    pub operation: String,
    /// `success`, `error` or `permanent_error`.
    pub status: String,
}

/// Labels of the duration histogram.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OperationLabels {
    /// Kind.
    pub resource: String,
    /// Operation.
    pub operation: String,
}

/// Labels with only the kind.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResourceLabels {
    /// Kind.
    pub resource: String,
}

/// Labels of the managed-resources gauge.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PhaseLabels {
    /// Kind.
    pub resource: String,
    /// Phase.
    pub phase: String,
}

/// All reconcile metrics.
#[derive(Clone)]
pub struct Metrics {
    /// `openstack_operator_reconcile_total`.
    pub reconcile_total: Family<ReconcileLabels, Counter>,
    /// `openstack_operator_reconcile_duration_seconds`.
    pub reconcile_duration: Family<OperationLabels, Histogram>,
    /// `openstack_operator_reconcile_in_progress`.
    pub in_progress: Family<ResourceLabels, Gauge>,
    /// `openstack_operator_managed_resources`.
    pub managed: Family<PhaseLabels, Gauge>,
    phases: Arc<Mutex<HashMap<(String, String), String>>>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            reconcile_total: Family::default(),
            reconcile_duration: Family::new_with_constructor(|| {
                Histogram::new([0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0])
            }),
            in_progress: Family::default(),
            managed: Family::default(),
            phases: Arc::default(),
        }
    }
}

impl Metrics {
    /// Registers every metric under the `openstack_operator` prefix.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "openstack_operator_reconcile",
            "Reconciles by kind, operation and outcome",
            self.reconcile_total.clone(),
        );
        registry.register(
            "openstack_operator_reconcile_duration_seconds",
            "Duration of reconciles",
            self.reconcile_duration.clone(),
        );
        registry.register(
            "openstack_operator_reconcile_in_progress",
            "Reconciles running now",
            self.in_progress.clone(),
        );
        registry.register(
            "openstack_operator_managed_resources",
            "Managed resources by kind and phase",
            self.managed.clone(),
        );
    }

    /// Records the phase of one object and refreshes the per-phase gauge of its kind.
    pub fn set_phase(&self, kind: &str, key: &str, phase: Option<&str>) {
        let mut phases = self.phases.lock().unwrap_or_else(|p| p.into_inner());
        let k = (kind.to_string(), key.to_string());
        match phase {
            Some(p) => {
                phases.insert(k, p.to_string());
            }
            None => {
                phases.remove(&k);
            }
        }
        for p in ["Pending", "Provisioning", "Ready", "Error", "Deleting"] {
            let n = phases
                .iter()
                .filter(|((kk, _), v)| kk == kind && v.as_str() == p)
                .count();
            self.managed
                .get_or_create(&PhaseLabels {
                    resource: kind.to_string(),
                    phase: p.to_string(),
                })
                .set(i64::try_from(n).unwrap_or(i64::MAX));
        }
    }
}
