//! Reading the operator's `/metrics` (Prometheus/OpenMetrics text).

use std::collections::BTreeMap;

/// Name of the OpenStack API call counter (labels `service`, `operation`, `status`).
pub const API_CALLS: &str = "openstack_operator_openstack_api_calls_total";
/// Name of the reconcile counter (labels `resource`, `operation`, `status`).
pub const RECONCILES: &str = "openstack_operator_reconcile_total";

/// One sample line.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    /// Metric name as exposed (with `_total`, `_bucket`, ... suffixes).
    pub name: String,
    /// Label pairs.
    pub labels: BTreeMap<String, String>,
    /// Value.
    pub value: f64,
}

/// A parsed scrape.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Metrics {
    /// Every sample, in exposition order.
    pub samples: Vec<Sample>,
}

impl Metrics {
    /// Parses the text format; comment lines and lines that do not parse are skipped.
    pub fn parse(text: &str) -> Self {
        let samples = text
            .lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
            .filter_map(parse_line)
            .collect();
        Metrics { samples }
    }

    /// Sum of the samples named `name` whose labels include every pair of `labels`.
    pub fn sum(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.samples
            .iter()
            .filter(|s| s.name == name)
            .filter(|s| {
                labels
                    .iter()
                    .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
            })
            .map(|s| s.value)
            .sum()
    }

    /// Values of the samples named `name`, keyed by the value of label `key` (summed over the
    /// other labels).
    pub fn by_label(&self, name: &str, key: &str) -> BTreeMap<String, f64> {
        let mut out = BTreeMap::new();
        for s in self.samples.iter().filter(|s| s.name == name) {
            let k = s.labels.get(key).cloned().unwrap_or_default();
            *out.entry(k).or_insert(0.0) += s.value;
        }
        out
    }

    /// OpenStack API calls per operation (`openstack_operator_openstack_api_calls_total`,
    /// summed over service and status).
    pub fn api_calls(&self) -> BTreeMap<String, f64> {
        self.by_label(API_CALLS, "operation")
    }

    /// Successful reconciles of one kind (all operations).
    pub fn reconciles(&self, kind: &str) -> f64 {
        self.sum(RECONCILES, &[("resource", kind)])
    }
}

/// Whether an OpenStack API operation (the `operation` label, the adapter's port method) only
/// reads: `get_*`, `list_*` and `find_*` are HTTP GETs; every other operation writes.
pub fn is_read_operation(operation: &str) -> bool {
    ["get_", "list_", "find_"]
        .iter()
        .any(|p| operation.starts_with(p))
}

/// Per-operation differences `after - before`, only where they are non-zero.
pub fn delta(
    before: &BTreeMap<String, f64>,
    after: &BTreeMap<String, f64>,
) -> BTreeMap<String, f64> {
    after
        .iter()
        .map(|(k, v)| (k.clone(), v - before.get(k).copied().unwrap_or(0.0)))
        .filter(|(_, d)| *d != 0.0)
        .collect()
}

fn parse_line(line: &str) -> Option<Sample> {
    let line = line.trim();
    let (name, rest) = match line.find(['{', ' ']) {
        Some(i) => (&line[..i], &line[i..]),
        None => return None,
    };
    let mut labels = BTreeMap::new();
    let rest = if let Some(body) = rest.strip_prefix('{') {
        let (pairs, after) = split_labels(body)?;
        labels = pairs;
        after
    } else {
        rest
    };
    let value = rest.split_whitespace().next()?.parse::<f64>().ok()?;
    Some(Sample {
        name: name.to_string(),
        labels,
        value,
    })
}

/// Parses `k="v",k2="v2"}` and returns the pairs and the text after `}`.
fn split_labels(body: &str) -> Option<(BTreeMap<String, String>, &str)> {
    let mut labels = BTreeMap::new();
    let mut chars = body.char_indices().peekable();
    loop {
        while chars
            .peek()
            .is_some_and(|(_, c)| *c == ',' || c.is_whitespace())
        {
            chars.next();
        }
        let (start, c) = *chars.peek()?;
        if c == '}' {
            return Some((labels, &body[start + 1..]));
        }
        let eq = body[start..].find('=')? + start;
        let key = body[start..eq].trim().to_string();
        while chars.peek().is_some_and(|(i, _)| *i <= eq) {
            chars.next();
        }
        if chars.next()?.1 != '"' {
            return None;
        }
        let mut value = String::new();
        loop {
            let (_, c) = chars.next()?;
            match c {
                '\\' => match chars.next()?.1 {
                    'n' => value.push('\n'),
                    other => value.push(other),
                },
                '"' => break,
                other => value.push(other),
            }
        }
        labels.insert(key, value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_counters_with_labels() {
        let text = "# HELP x y\n# TYPE x counter\n\
            openstack_operator_openstack_api_calls_total{service=\"identity\",operation=\"get_domain\",status=\"success\"} 3\n\
            openstack_operator_openstack_api_calls_total{service=\"compute\",operation=\"create_flavor\",status=\"error\"} 1\n\
            weird{a=\"q\\\"uote,}\"} 2.5\n\
            plain 7\n# EOF\n";
        let m = Metrics::parse(text);
        assert_eq!(m.samples.len(), 4);
        assert_eq!(m.sum(API_CALLS, &[("operation", "get_domain")]), 3.0);
        assert_eq!(m.sum(API_CALLS, &[]), 4.0);
        assert_eq!(m.sum("weird", &[("a", "q\"uote,}")]), 2.5);
        assert_eq!(m.sum("plain", &[]), 7.0);
        let calls = m.api_calls();
        assert_eq!(calls.get("create_flavor"), Some(&1.0));
    }

    #[test]
    fn classifies_operations() {
        assert!(is_read_operation("get_domain"));
        assert!(is_read_operation("list_subnets"));
        assert!(is_read_operation("find_flavor"));
        assert!(!is_read_operation("set_flavor_extra_specs"));
        assert!(!is_read_operation("import_image_web_download"));
        assert!(!is_read_operation("update_domain"));
    }

    #[test]
    fn deltas_keep_only_changes() {
        let a: BTreeMap<String, f64> = [("x".to_string(), 1.0), ("y".to_string(), 2.0)].into();
        let b: BTreeMap<String, f64> = [
            ("x".to_string(), 1.0),
            ("y".to_string(), 5.0),
            ("z".to_string(), 1.0),
        ]
        .into();
        let d = delta(&a, &b);
        assert_eq!(d.len(), 2);
        assert_eq!(d["y"], 3.0);
        assert_eq!(d["z"], 1.0);
    }
}
