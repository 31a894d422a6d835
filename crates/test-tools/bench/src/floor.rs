//! The floor of a convergence run: the least time any operator could take to create the
//! bench projects through the same client-side limits, given the latencies OpenStack showed
//! in the same run.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::oplog::request_key;
use crate::stats;

/// The write requests a from-scratch creation of one bench project cannot avoid (operation
/// label of the call counter, HTTP method, requests per project). Reads are left out: an
/// operator that trusted its own records could skip most of them, so they are not part of the
/// floor.
///
/// - Keystone: the project; its user group; `member` for the group; the two users bound to
///   `member` put into the group (they hold `member` through it).
/// - Quotas: one update per service (Nova, Cinder, Neutron), since the spec sets keys in all
///   three.
/// - Neutron, per network (2): network, subnet, router (its gateway on the external network
///   is part of the create call), the router's interface on the subnet; per security group
///   (2): the group and its 3 rules in one bulk create (Neutron takes one group per bulk
///   request). The networks, subnets,
///   routers and groups carry ownership tags, which take a `PUT .../tags` each: the test
///   cloud's Neutron lists the `tag-creation` extension but answers "Attribute 'tags' not
///   allowed in POST" to tags in a create body.
/// - Federation is left out: the projects share one mapping, which one write could bring up
///   to date for all of them.
pub const MANDATORY_PROJECT_WRITES: &[(&str, &str, u32)] = &[
    ("create_project", "POST", 1),
    ("create_group", "POST", 1),
    ("grant_project_role", "PUT", 1),
    ("add_user_to_group", "PUT", 2),
    ("update_compute_quota", "PUT", 1),
    ("update_volume_quota", "PUT", 1),
    ("update_network_quota", "PUT", 1),
    ("create_network", "POST", 2),
    ("create_network", "PUT", 2),
    ("create_subnet", "POST", 2),
    ("create_subnet", "PUT", 2),
    ("create_router", "POST", 2),
    ("create_router", "PUT", 2),
    ("add_router_interface", "PUT", 2),
    ("create_security_group", "POST", 2),
    ("create_security_group", "PUT", 2),
    ("create_security_group_rules", "POST", 2),
];

/// Mandatory requests of one project.
pub fn mandatory_per_project() -> u32 {
    MANDATORY_PROJECT_WRITES.iter().map(|(_, _, n)| n).sum()
}

/// One mandatory operation in a run.
#[derive(Clone, Debug, Serialize)]
pub struct MandatoryOp {
    /// Operation label.
    pub operation: String,
    /// HTTP method of the mandatory request.
    pub method: String,
    /// Requests per project.
    pub per_project: u32,
    /// Requests of this operation and method the operator actually sent (all projects, every
    /// attempt), from its log.
    pub made: u64,
    /// Median latency of its successful requests in the run, in ms (`None`: no sample).
    pub median_ms: Option<f64>,
    /// Mean latency of the same requests, in ms.
    pub mean_ms: Option<f64>,
    /// Latency samples behind the median and mean.
    pub samples: usize,
}

/// The floor of one run.
#[derive(Clone, Debug, Serialize)]
pub struct Floor {
    /// Per mandatory operation: counts and latency.
    pub operations: Vec<MandatoryOp>,
    /// Mandatory calls for all projects.
    pub mandatory_calls: u64,
    /// Σ mandatory calls × their mean latency ÷ max concurrent calls, in seconds: the time
    /// OpenStack spent on the mandatory requests in this run, spread over every slot the
    /// limiter allows. The mean, not the median: a request's slow tail is time every operator
    /// pays (the median would leave it out of the floor and into the ratio).
    pub latency_floor_s: f64,
    /// The same with each request's median latency (the definition before 2026-12-02, kept
    /// for comparison with earlier runs).
    pub latency_floor_median_s: f64,
    /// Mandatory calls ÷ requests per second (0 when the rate is unlimited), in seconds.
    pub rate_floor_s: f64,
    /// The larger of the two: no operator with these limits can be faster.
    pub floor_s: f64,
    /// Operations without any latency sample (the floor is then too low).
    pub missing: Vec<String>,
}

/// The floor for `projects` projects, from latency samples (ms) and request counts keyed by
/// [`request_key`], and the operator's limits.
pub fn floor(
    projects: u32,
    durations_ms: &BTreeMap<String, Vec<f64>>,
    requests: &BTreeMap<String, u64>,
    max_concurrent: usize,
    requests_per_second: u32,
) -> Floor {
    let mut operations = Vec::new();
    let mut missing = Vec::new();
    let (mut busy_ms, mut busy_median_ms) = (0.0, 0.0);
    for (op, method, per) in MANDATORY_PROJECT_WRITES {
        let key = request_key(op, method);
        let samples = durations_ms
            .get(&key)
            .map(Vec::as_slice)
            .unwrap_or_default();
        let median_ms = stats::median(samples);
        let mean_ms = stats::mean(samples);
        match (mean_ms, median_ms) {
            (Some(mean), Some(median)) => {
                busy_ms += mean * f64::from(per * projects);
                busy_median_ms += median * f64::from(per * projects);
            }
            _ => missing.push(key.clone()),
        }
        operations.push(MandatoryOp {
            operation: (*op).to_string(),
            method: (*method).to_string(),
            per_project: *per,
            made: requests.get(&key).copied().unwrap_or(0),
            median_ms,
            mean_ms,
            samples: samples.len(),
        });
    }
    let mandatory_calls = u64::from(mandatory_per_project()) * u64::from(projects);
    let slots = max_concurrent.max(1) as f64;
    let latency_floor_s = busy_ms / 1000.0 / slots;
    let latency_floor_median_s = busy_median_ms / 1000.0 / slots;
    let rate_floor_s = if requests_per_second == 0 {
        0.0
    } else {
        mandatory_calls as f64 / f64::from(requests_per_second)
    };
    Floor {
        operations,
        mandatory_calls,
        latency_floor_s,
        latency_floor_median_s,
        rate_floor_s,
        floor_s: latency_floor_s.max(rate_floor_s),
        missing,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floor_is_busy_time_over_concurrency_or_the_rate_bound() {
        let durations: BTreeMap<String, Vec<f64>> = MANDATORY_PROJECT_WRITES
            .iter()
            .map(|(op, method, _)| (request_key(op, method), vec![100.0, 300.0, 200.0]))
            .collect();
        let per = f64::from(mandatory_per_project());
        let f = floor(10, &durations, &BTreeMap::new(), 10, 0);
        // Every mandatory call takes 200 ms (the median): 10 projects × per × 0.2 s ÷ 10.
        assert!(
            (f.latency_floor_s - 10.0 * per * 0.2 / 10.0).abs() < 1e-9,
            "{f:?}"
        );
        assert_eq!(f.rate_floor_s, 0.0);
        assert_eq!(f.floor_s, f.latency_floor_s);
        assert!(f.missing.is_empty());
        let slow_rate = floor(10, &durations, &BTreeMap::new(), 10, 1);
        assert_eq!(slow_rate.rate_floor_s, 10.0 * per);
        assert_eq!(slow_rate.floor_s, slow_rate.rate_floor_s);
    }

    #[test]
    fn the_floor_counts_the_slow_tail_and_keeps_the_median_figure() {
        // Mean 400 ms, median 100 ms: one request in four took 1.3 s.
        let durations: BTreeMap<String, Vec<f64>> = MANDATORY_PROJECT_WRITES
            .iter()
            .map(|(op, method, _)| (request_key(op, method), vec![100.0, 100.0, 100.0, 1300.0]))
            .collect();
        let per = f64::from(mandatory_per_project());
        let f = floor(1, &durations, &BTreeMap::new(), 1, 0);
        assert!((f.latency_floor_s - per * 0.4).abs() < 1e-9, "{f:?}");
        assert!((f.latency_floor_median_s - per * 0.1).abs() < 1e-9, "{f:?}");
    }

    #[test]
    fn missing_latencies_are_named() {
        let mut durations = BTreeMap::new();
        durations.insert("create_project POST".to_string(), vec![50.0]);
        // Another request of the same operation is not a sample of the mandatory one.
        durations.insert("create_group PUT".to_string(), vec![1.0]);
        let f = floor(1, &durations, &BTreeMap::new(), 1, 0);
        assert_eq!(f.missing.len(), MANDATORY_PROJECT_WRITES.len() - 1);
        assert!((f.latency_floor_s - 0.05).abs() < 1e-9);
    }
}
