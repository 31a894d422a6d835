//! The objects the bench creates. Every one carries the run label, so cleanup finds them by
//! label whatever stage a run stopped at.

use serde_json::{Value, json};

/// Label on every object of one bench run (value: the run id).
pub const RUN_LABEL: &str = "openstack-operator.sunet.se/bench-run";
/// The external network of the test cloud, where the routers get their gateway.
pub const EXTERNAL_NETWORK: &str = "external";
/// Rules of the bench security group (direction, protocol, port).
pub const RULES: [(&str, &str, Option<u16>); 3] = [
    ("ingress", "tcp", Some(22)),
    ("ingress", "tcp", Some(443)),
    ("ingress", "icmp", None),
];

fn metadata(name: &str, namespace: Option<&str>, run: &str) -> Value {
    let mut m = json!({"name": name, "labels": {RUN_LABEL: run}});
    if let Some(ns) = namespace {
        m["namespace"] = json!(ns);
    }
    m
}

/// The domain every bench project lives in.
pub fn domain(name: &str, run: &str) -> Value {
    json!({
        "apiVersion": "sunet.se/v1alpha1",
        "kind": "OpenstackDomain",
        "metadata": metadata(name, None, run),
        "spec": {
            "name": name,
            "description": "openstack-operator bench (deleted at the end of the run)",
            "enabled": true,
        },
    })
}

/// A full project: the Keystone project and its group, quotas in all three services, one
/// network with a subnet and a router on the external network, one security group with
/// three rules, one role binding for `user` (which exists in `domain`).
pub fn project(
    name: &str,
    namespace: &str,
    run: &str,
    domain: &str,
    user: &str,
    description: &str,
) -> Value {
    let rules: Vec<Value> = RULES
        .iter()
        .map(|(direction, protocol, port)| {
            let mut r = json!({"direction": direction, "protocol": protocol, "remoteIpPrefix": "0.0.0.0/0"});
            if let Some(p) = port {
                r["portRangeMin"] = json!(p);
                r["portRangeMax"] = json!(p);
            }
            r
        })
        .collect();
    json!({
        "apiVersion": "sunet.se/v1alpha1",
        "kind": "OpenstackProject",
        "metadata": metadata(name, Some(namespace), run),
        "spec": {
            "name": format!("{name}.bench.example.com"),
            "description": description,
            "domain": domain,
            "enabled": true,
            "quotas": {
                "compute": {"instances": 20, "cores": 40, "ramMB": 81920},
                "storage": {"volumes": 20, "volumesGB": 1000},
                "network": {"floatingIps": 10},
            },
            "networks": [{
                "name": "internal",
                "cidr": "192.168.100.0/24",
                "enableDhcp": true,
                "router": {"externalNetwork": EXTERNAL_NETWORK, "enableSnat": true},
            }],
            "securityGroups": [{
                "name": "web",
                "description": "ssh, https and ping",
                "rules": rules,
            }],
            "roleBindings": [{"role": "member", "users": [user], "userDomain": domain}],
        },
    })
}

/// A small public flavor.
pub fn flavor(name: &str, run: &str) -> Value {
    json!({
        "apiVersion": "sunet.se/v1alpha1",
        "kind": "OpenstackFlavor",
        "metadata": metadata(name, None, run),
        "spec": {
            "name": name,
            "vcpus": 1,
            "ram": 128,
            "disk": 1,
            "ephemeral": 0,
            "swap": 0,
            "isPublic": true,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use api::{OpenstackFlavor, OpenstackProject};

    #[test]
    fn manifests_are_valid_objects_of_their_kinds() -> anyhow::Result<()> {
        let p: OpenstackProject =
            serde_json::from_value(project("p1", "ns", "r1", "dom", "u", "d"))?;
        let spec = serde_json::to_value(&p.spec)?;
        assert_eq!(
            spec["securityGroups"][0]["rules"].as_array().map(Vec::len),
            Some(3)
        );
        assert_eq!(
            spec["networks"][0]["router"]["externalNetwork"],
            EXTERNAL_NETWORK
        );
        assert_eq!(
            p.metadata.labels.clone().unwrap_or_default()[RUN_LABEL],
            "r1"
        );
        let issues = api::validation::object_errors(&p, &p.spec);
        assert!(issues.is_empty(), "{issues:?}");
        let f: OpenstackFlavor = serde_json::from_value(flavor("f1", "r1"))?;
        let issues = api::validation::object_errors(&f, &f.spec);
        assert!(issues.is_empty(), "{issues:?}");
        Ok(())
    }
}
