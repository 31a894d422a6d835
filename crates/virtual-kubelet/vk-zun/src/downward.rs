//! The downward API in env (`valueFrom.fieldRef`, `valueFrom.resourceFieldRef`), resolved
//! when a container is created, as the kubelet resolves it (pure).
//!
//! Kubelet semantics followed (`pkg/fieldpath` `ExtractFieldPathAsString`,
//! `pkg/kubelet/kubelet_pods.go` `podFieldSelectorRuntimeValue`, `pkg/api/v1/resource`
//! `ExtractContainerResourceValue`):
//! - `status.podIP(s)`, `status.hostIP(s)`: the first address, or all of them joined by `,`.
//!   The pod IP is the fixed IP of the Neutron port the node creates before the container.
//! - `metadata.labels['k']` / `annotations['k']`: the value, `""` when the key is absent.
//! - `resourceFieldRef`: `ceil(value / divisor)`, CPU in millicores (`MilliValue`), memory and
//!   ephemeral storage in bytes (`Value`, itself rounded up); divisor `0`/absent = `1`.
//!   `containerName` may name another container of the pod.
//! - A request not set defaults to the limit (the API server's defaulting), else `0`.
//! - A limit not set is, on a kubelet, the node's allocatable. Here: CPU → the node's CPU
//!   capacity (Zun sets only CPU shares, so the container may use the whole host, as on a
//!   kubelet); memory → **what Zun enforces** (Zun always sets a hard memory limit: the request,
//!   else `--default-memory-mib`; telling an application the node's memory would make it size
//!   itself for memory it can never get); ephemeral storage → refused (Zun enforces none and
//!   the node publishes none, so there is no true value to give).

use k8s_openapi::api::core::v1::{Container, Pod, ResourceFieldSelector};

use crate::translate::{Config, TranslateError, effective_resources};

/// What the downward API needs beyond the pod itself.
#[derive(Clone, Debug, PartialEq)]
pub struct Context<'a> {
    /// The node's settings (host IP, default memory).
    pub cfg: &'a Config,
    /// The pod's IPs (its Neutron port's fixed IPs); empty when not known before the
    /// container starts (no network chosen: Zun picks one and makes the port itself).
    pub pod_ips: &'a [String],
    /// The node's CPU capacity, for `limits.cpu` of a container without a CPU limit.
    pub node_cpu: f64,
}

fn refused(field: String, why: impl Into<String>) -> TranslateError {
    TranslateError::Unsupported {
        field,
        why: why.into(),
    }
}

/// The key of `prefix['key']` (`metadata.labels['app']` → `app`).
fn subscript<'p>(path: &'p str, prefix: &str) -> Option<&'p str> {
    path.strip_prefix(prefix)?
        .strip_prefix("['")?
        .strip_suffix("']")
}

/// Whether a `fieldRef.fieldPath` is one the kubelet serves in env.
pub fn field_path_supported(p: &str) -> bool {
    matches!(
        p,
        "metadata.name"
            | "metadata.namespace"
            | "metadata.uid"
            | "spec.nodeName"
            | "spec.serviceAccountName"
            | "status.hostIP"
            | "status.hostIPs"
            | "status.podIP"
            | "status.podIPs"
    ) || subscript(p, "metadata.labels").is_some()
        || subscript(p, "metadata.annotations").is_some()
}

/// The value of `fieldRef.fieldPath` `p` for `pod`; `field` names the reference in errors
/// (`spec.containers[0].env[2].valueFrom.fieldRef.fieldPath`).
pub fn field_ref(field: &str, pod: &Pod, p: &str, ctx: &Context) -> Result<String, TranslateError> {
    let m = &pod.metadata;
    let spec = pod.spec.as_ref();
    let pod_ip = |all: bool| {
        if ctx.pod_ips.is_empty() {
            return Err(refused(
                field.to_string(),
                format!(
                    "{p:?}: the pod IP is known before the container starts only when the node knows the pod's network (--network, or the pod's network annotation), so that it can create the pod's Neutron port first"
                ),
            ));
        }
        Ok(if all {
            ctx.pod_ips.join(",")
        } else {
            ctx.pod_ips[0].clone()
        })
    };
    Ok(match p {
        "metadata.name" => m.name.clone().unwrap_or_default(),
        "metadata.namespace" => m.namespace.clone().unwrap_or_default(),
        "metadata.uid" => m.uid.clone().unwrap_or_default(),
        "spec.nodeName" => spec.and_then(|s| s.node_name.clone()).unwrap_or_default(),
        "spec.serviceAccountName" => spec
            .and_then(|s| s.service_account_name.clone())
            .unwrap_or_default(),
        // One host IP per node here: both forms are that address.
        "status.hostIP" | "status.hostIPs" => ctx.cfg.host_ip.clone(),
        "status.podIP" => pod_ip(false)?,
        "status.podIPs" => pod_ip(true)?,
        _ => {
            if let Some(k) = subscript(p, "metadata.labels") {
                m.labels
                    .as_ref()
                    .and_then(|l| l.get(k))
                    .cloned()
                    .unwrap_or_default()
            } else if let Some(k) = subscript(p, "metadata.annotations") {
                m.annotations
                    .as_ref()
                    .and_then(|l| l.get(k))
                    .cloned()
                    .unwrap_or_default()
            } else {
                return Err(refused(
                    field.to_string(),
                    format!(
                        "{p:?} is not supported in env (metadata.name, metadata.namespace, metadata.uid, metadata.labels['k'], metadata.annotations['k'], spec.nodeName, spec.serviceAccountName, status.hostIP(s), status.podIP(s))"
                    ),
                ));
            }
        }
    })
}

/// A quantity in nano-units, exactly (rounded up to a whole nano-unit, as
/// `resource.Quantity` rounds): `250m` → 250_000_000, `64Mi` → 64·2²⁰·10⁹.
pub fn nanos(q: &str) -> Option<i128> {
    let q = q.trim();
    let split = q
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+'))
        .unwrap_or(q.len());
    let (num, suffix) = q.split_at(split);
    let num = num.strip_prefix('+').unwrap_or(num);
    let (int, frac) = num.split_once('.').unwrap_or((num, ""));
    if (int.is_empty() && frac.is_empty()) || frac.len() > 18 {
        return None;
    }
    let digits: i128 = format!("{int}{frac}").parse().ok()?;
    // value = digits / 10^frac_len * mult, in units of 1e-9.
    let (mul, exp10): (i128, i32) = match suffix {
        "" => (1, 0),
        "n" => (1, -9),
        "u" => (1, -6),
        "m" => (1, -3),
        "k" => (1, 3),
        "M" => (1, 6),
        "G" => (1, 9),
        "T" => (1, 12),
        "P" => (1, 15),
        "E" => (1, 18),
        "Ki" => (1 << 10, 0),
        "Mi" => (1 << 20, 0),
        "Gi" => (1 << 30, 0),
        "Ti" => (1 << 40, 0),
        "Pi" => (1 << 50, 0),
        "Ei" => (1 << 60, 0),
        s if s.starts_with(['e', 'E']) => (1, s[1..].parse().ok()?),
        _ => return None,
    };
    let exp = exp10 + 9 - frac.len() as i32;
    let scaled = digits.checked_mul(mul)?;
    if exp >= 0 {
        scaled.checked_mul(10i128.checked_pow(exp as u32)?)
    } else {
        let d = 10i128.checked_pow((-exp) as u32)?;
        Some((scaled + d - 1) / d)
    }
}

fn ceil_div(a: i128, b: i128) -> i128 {
    (a + b - 1) / b
}

/// The value of `resourceFieldRef` `sel` in the env of `own` (a container of `pod`); `field`
/// names the reference in errors.
pub fn resource_field_ref(
    field: &str,
    pod: &Pod,
    own: &Container,
    sel: &ResourceFieldSelector,
    ctx: &Context,
) -> Result<String, TranslateError> {
    let c = match sel.container_name.as_deref().filter(|n| !n.is_empty()) {
        None => own,
        Some(name) => pod
            .spec
            .iter()
            .flat_map(|s| {
                s.init_containers
                    .iter()
                    .flatten()
                    .chain(s.containers.iter())
            })
            .find(|c| c.name == name)
            .ok_or_else(|| {
                refused(
                    format!("{field}.containerName"),
                    format!("no container {name:?} in the pod"),
                )
            })?,
    };
    let divisor = match &sel.divisor {
        None => 1_000_000_000,
        Some(d) => match nanos(&d.0) {
            Some(0) => 1_000_000_000,
            Some(n) => n,
            None => {
                return Err(refused(
                    format!("{field}.divisor"),
                    format!("{:?} is not a quantity", d.0),
                ));
            }
        },
    };
    let (kind, name) = sel.resource.split_once('.').ok_or_else(|| {
        refused(
            format!("{field}.resource"),
            format!("{:?} is not limits.<name> or requests.<name>", sel.resource),
        )
    })?;
    if !matches!(kind, "limits" | "requests")
        || !matches!(name, "cpu" | "memory" | "ephemeral-storage")
    {
        return Err(refused(
            format!("{field}.resource"),
            format!(
                "{:?} is not supported (limits/requests of cpu, memory, ephemeral-storage)",
                sel.resource
            ),
        ));
    }
    let get = |list: &str| -> Option<i128> {
        let r = c.resources.as_ref()?;
        let l = if list == "limits" {
            r.limits.as_ref()
        } else {
            r.requests.as_ref()
        };
        l?.get(name).and_then(|q| nanos(&q.0))
    };
    let value_nanos = match kind {
        "requests" => get("requests").or_else(|| get("limits")).unwrap_or(0),
        _ => match get("limits") {
            Some(v) => v,
            None => match name {
                "cpu" => (ctx.node_cpu * 1e9).round() as i128,
                "memory" => {
                    let (_, mib) = effective_resources(c.resources.as_ref(), ctx.cfg);
                    i128::from(mib) * (1 << 20) * 1_000_000_000
                }
                _ => {
                    return Err(refused(
                        format!("{field}.resource"),
                        format!(
                            "container {:?} sets no limits.ephemeral-storage and Zun enforces none, so there is no value to give: set the limit",
                            c.name
                        ),
                    ));
                }
            },
        },
    };
    let out = if name == "cpu" {
        // MilliValue of each, rounded up.
        ceil_div(
            ceil_div(value_nanos, 1_000_000),
            ceil_div(divisor, 1_000_000),
        )
    } else {
        ceil_div(
            ceil_div(value_nanos, 1_000_000_000),
            ceil_div(divisor, 1_000_000_000),
        )
    };
    Ok(out.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(containers: serde_json::Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u-1",
                         "labels": {"app": "web", "a.b/c": "x"}, "annotations": {"note": "hi"}},
            "spec": {"nodeName": "vk", "serviceAccountName": "sa", "containers": containers}
        }))
        .unwrap()
    }

    fn cfg() -> Config {
        Config {
            host_ip: "192.0.2.1".into(),
            default_memory_mib: 512,
            ..Default::default()
        }
    }

    fn sel(resource: &str, divisor: Option<&str>) -> ResourceFieldSelector {
        serde_json::from_value(json!({"resource": resource, "divisor": divisor})).unwrap()
    }

    fn res(p: &Pod, resource: &str, divisor: Option<&str>) -> Result<String, TranslateError> {
        let cfg = cfg();
        let ips = ["10.0.0.7".to_string()];
        let ctx = Context {
            cfg: &cfg,
            pod_ips: &ips,
            node_cpu: 20.0,
        };
        let c = &p.spec.as_ref().unwrap().containers[0];
        resource_field_ref("f", p, c, &sel(resource, divisor), &ctx)
    }

    #[test]
    fn exact_quantities() {
        assert_eq!(nanos("250m"), Some(250_000_000));
        assert_eq!(nanos("0.1"), Some(100_000_000), "no float error");
        assert_eq!(nanos("1.5Gi"), Some(3 * (1 << 29) * 1_000_000_000));
        assert_eq!(nanos("1e3"), Some(1_000_000_000_000));
        assert_eq!(nanos("1Mi"), Some((1 << 20) * 1_000_000_000));
        assert_eq!(nanos("0.5n"), Some(1), "rounded up to a whole nano");
        assert_eq!(nanos("x"), None);
        assert_eq!(nanos(""), None);
        assert_eq!(nanos("-1"), None);
    }

    #[test]
    fn field_paths_as_the_kubelet() {
        let p = pod(json!([{"name": "c", "image": "i"}]));
        let cfg = cfg();
        let ips = ["10.0.0.7".to_string(), "fd00::7".to_string()];
        let ctx = Context {
            cfg: &cfg,
            pod_ips: &ips,
            node_cpu: 20.0,
        };
        let f = |path: &str| field_ref("f", &p, path, &ctx).unwrap();
        assert_eq!(f("metadata.name"), "p");
        assert_eq!(f("metadata.namespace"), "ns");
        assert_eq!(f("metadata.uid"), "u-1");
        assert_eq!(f("metadata.labels['app']"), "web");
        assert_eq!(f("metadata.labels['a.b/c']"), "x");
        assert_eq!(f("metadata.labels['missing']"), "");
        assert_eq!(f("metadata.annotations['note']"), "hi");
        assert_eq!(f("spec.nodeName"), "vk");
        assert_eq!(f("spec.serviceAccountName"), "sa");
        assert_eq!(f("status.hostIP"), "192.0.2.1");
        assert_eq!(f("status.podIP"), "10.0.0.7");
        assert_eq!(f("status.podIPs"), "10.0.0.7,fd00::7");
        for bad in [
            "metadata.labels",
            "status.phase",
            "spec.hostname",
            "metadata.labels[app]",
        ] {
            assert!(!field_path_supported(bad), "{bad}");
            match field_ref(
                "spec.containers[0].env[1].valueFrom.fieldRef.fieldPath",
                &p,
                bad,
                &ctx,
            ) {
                Err(TranslateError::Unsupported { field, why }) => {
                    assert_eq!(
                        field,
                        "spec.containers[0].env[1].valueFrom.fieldRef.fieldPath"
                    );
                    assert!(why.contains(bad), "{why}");
                }
                other => panic!("{bad}: {other:?}"),
            }
        }
    }

    #[test]
    fn pod_ip_unknown_is_refused_naming_the_field() {
        let p = pod(json!([{"name": "c", "image": "i"}]));
        let cfg = cfg();
        let ctx = Context {
            cfg: &cfg,
            pod_ips: &[],
            node_cpu: 1.0,
        };
        match field_ref("F", &p, "status.podIP", &ctx) {
            Err(TranslateError::Unsupported { field, why }) => {
                assert_eq!(field, "F");
                assert!(why.contains("network"), "{why}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn resources_with_divisors_round_up() {
        let p = pod(json!([{"name": "c", "image": "i", "resources": {
            "limits": {"cpu": "250m", "memory": "100M", "ephemeral-storage": "1Gi"},
            "requests": {"cpu": "100m", "memory": "64Mi"}}}]));
        assert_eq!(res(&p, "limits.cpu", None).unwrap(), "1", "cores round up");
        assert_eq!(res(&p, "limits.cpu", Some("1m")).unwrap(), "250");
        assert_eq!(res(&p, "requests.cpu", Some("1m")).unwrap(), "100");
        assert_eq!(res(&p, "requests.cpu", Some("0")).unwrap(), "1", "0 = 1");
        assert_eq!(res(&p, "limits.memory", None).unwrap(), "100000000");
        assert_eq!(
            res(&p, "limits.memory", Some("1Mi")).unwrap(),
            "96",
            "95.37 up"
        );
        assert_eq!(res(&p, "requests.memory", Some("1Mi")).unwrap(), "64");
        assert_eq!(res(&p, "requests.memory", Some("1k")).unwrap(), "67109");
        assert_eq!(
            res(&p, "limits.ephemeral-storage", Some("1Mi")).unwrap(),
            "1024"
        );
        assert_eq!(
            res(&p, "requests.ephemeral-storage", Some("1Mi")).unwrap(),
            "1024",
            "the request defaults to the limit"
        );
    }

    #[test]
    fn missing_limits_and_requests() {
        let p = pod(
            json!([{"name": "c", "image": "i", "resources": {"requests": {"memory": "64Mi"}}}]),
        );
        assert_eq!(
            res(&p, "limits.cpu", None).unwrap(),
            "20",
            "the node's CPUs"
        );
        assert_eq!(res(&p, "limits.cpu", Some("1m")).unwrap(), "20000");
        assert_eq!(
            res(&p, "limits.memory", Some("1Mi")).unwrap(),
            "64",
            "what Zun enforces: the request"
        );
        assert_eq!(res(&p, "requests.cpu", Some("1m")).unwrap(), "0");
        let bare = pod(json!([{"name": "c", "image": "i"}]));
        assert_eq!(
            res(&bare, "limits.memory", Some("1Mi")).unwrap(),
            "512",
            "the default"
        );
        match res(&bare, "limits.ephemeral-storage", None) {
            Err(TranslateError::Unsupported { field, .. }) => assert_eq!(field, "f.resource"),
            other => panic!("{other:?}"),
        }
        for bad in ["limits.nvidia.com/gpu", "cpu", "requests.hugepages-2Mi"] {
            assert!(matches!(
                res(&bare, bad, None),
                Err(TranslateError::Unsupported { .. })
            ));
        }
        assert!(matches!(
            res(&bare, "limits.cpu", Some("lots")),
            Err(TranslateError::Unsupported { field, .. }) if field == "f.divisor"
        ));
    }

    #[test]
    fn container_name_picks_another_container() {
        let p = pod(json!([
            {"name": "a", "image": "i"},
            {"name": "b", "image": "i", "resources": {"limits": {"memory": "1Gi"}}}]));
        let cfg = cfg();
        let ctx = Context {
            cfg: &cfg,
            pod_ips: &[],
            node_cpu: 2.0,
        };
        let a = &p.spec.as_ref().unwrap().containers[0];
        let s: ResourceFieldSelector = serde_json::from_value(
            json!({"containerName": "b", "resource": "limits.memory", "divisor": "1Mi"}),
        )
        .unwrap();
        assert_eq!(resource_field_ref("f", &p, a, &s, &ctx).unwrap(), "1024");
        let s: ResourceFieldSelector =
            serde_json::from_value(json!({"containerName": "z", "resource": "limits.memory"}))
                .unwrap();
        assert!(matches!(
            resource_field_ref("f", &p, a, &s, &ctx),
            Err(TranslateError::Unsupported { field, .. }) if field == "f.containerName"
        ));
    }
}
