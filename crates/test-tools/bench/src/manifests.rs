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

/// Security groups of every bench project (name, description); each gets [`RULES`].
pub const SECURITY_GROUPS: [(&str, &str); 2] = [
    ("web", "ssh, https and ping"),
    ("admin", "ssh, https and ping from the admin side"),
];
/// Networks of every bench project (name, CIDR); each gets a subnet and a router with SNAT
/// on [`EXTERNAL_NETWORK`].
pub const NETWORKS: [(&str, &str); 2] = [
    ("internal", "192.168.100.0/24"),
    ("backend", "192.168.101.0/24"),
];
/// Name of the ConfigMap holding the federation settings, in the bench namespace.
pub const FEDERATION_CONFIG_MAP: &str = "bench-federation";

/// The federation ConfigMap: the identity provider `idp` (the operator creates it: the
/// bench namespace is one it trusts) with a remote ID of its own.
pub fn federation_config_map(namespace: &str, run: &str, idp: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(FEDERATION_CONFIG_MAP, Some(namespace), run),
        "data": {
            "idp-name": idp,
            "idp-remote-id": format!("https://{idp}.bench.invalid"),
        },
    })
}

/// A full project, the workload of issue 15: the Keystone project and its group; all 17
/// quota keys of Nova, Cinder and Neutron; 2 networks each with a subnet and a router (SNAT)
/// on the external network; 2 security groups with 3 rules each; a `member` binding of the
/// two `users` (which exist in `domain`); federation through [`FEDERATION_CONFIG_MAP`].
pub fn project(
    name: &str,
    namespace: &str,
    run: &str,
    domain: &str,
    users: &[String],
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
    let groups: Vec<Value> = SECURITY_GROUPS
        .iter()
        .map(
            |(name, description)| json!({"name": name, "description": description, "rules": rules}),
        )
        .collect();
    let networks: Vec<Value> = NETWORKS
        .iter()
        .map(|(name, cidr)| {
            json!({
                "name": name,
                "cidr": cidr,
                "enableDhcp": true,
                "router": {"externalNetwork": EXTERNAL_NETWORK, "enableSnat": true},
            })
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
                "compute": {"instances": 20, "cores": 40, "ramMB": 81920, "serverGroups": 10, "serverGroupMembers": 10},
                "storage": {"volumes": 20, "volumesGB": 1000, "snapshots": 10, "backups": 10, "backupsGB": 500},
                "network": {"floatingIps": 10, "networks": 10, "subnets": 10, "routers": 5, "ports": 200, "securityGroups": 20, "securityGroupRules": 200},
            },
            "networks": networks,
            "securityGroups": groups,
            "roleBindings": [{"role": "member", "users": users, "userDomain": domain}],
            "federationRef": {"configMapName": FEDERATION_CONFIG_MAP},
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
        let p: OpenstackProject = serde_json::from_value(project(
            "p1",
            "ns",
            "r1",
            "dom",
            &["u".into(), "v".into()],
            "d",
        ))?;
        let spec = serde_json::to_value(&p.spec)?;
        assert_eq!(
            spec["securityGroups"][0]["rules"].as_array().map(Vec::len),
            Some(3)
        );
        assert_eq!(
            spec["networks"][1]["router"]["externalNetwork"],
            EXTERNAL_NETWORK
        );
        assert_eq!(
            spec["securityGroups"][1]["rules"].as_array().map(Vec::len),
            Some(3)
        );
        assert_eq!(
            spec["roleBindings"][0]["users"].as_array().map(Vec::len),
            Some(2)
        );
        let keys: usize = ["compute", "storage", "network"]
            .iter()
            .map(|s| spec["quotas"][s].as_object().map_or(0, |o| o.len()))
            .sum();
        assert_eq!(keys, 17);
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
