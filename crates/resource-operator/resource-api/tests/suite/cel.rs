//! The CEL rules themselves (as a real API server would run them at admission) compile and
//! fire: each case below must be rejected by CEL alone, with the rule's message.

use api::validation::cel_errors_value;
use serde_json::{Value, json};

fn schema(kind: &str) -> Value {
    let crd = api::all_crds()
        .into_iter()
        .find(|c| c.spec.names.kind == kind)
        .expect("kind exists");
    serde_json::to_value(
        crd.spec.versions[0]
            .schema
            .as_ref()
            .unwrap()
            .open_api_v3_schema
            .as_ref()
            .unwrap(),
    )
    .unwrap()
}

fn network(subnet: Value) -> Value {
    json!({"apiVersion": "sunet.se/v1alpha1", "kind": "OpenstackNetwork", "metadata": {"name": "n"},
           "spec": {"name": "n", "providerPhysicalNetwork": "p", "subnets": [subnet]}})
}

fn project_rule(rule: Value) -> Value {
    json!({"apiVersion": "sunet.se/v1alpha1", "kind": "OpenstackProject", "metadata": {"name": "p", "namespace": "d"},
           "spec": {"name": "p", "domain": "d", "securityGroups": [{"name": "g", "rules": [rule]}]}})
}

fn assert_rejected(kind: &str, obj: Value, needle: &str) {
    let errs = cel_errors_value(&schema(kind), &obj);
    assert!(
        errs.iter()
            .any(|e| e.message.contains(needle) || e.path.contains(needle)),
        "expected a CEL error mentioning {needle:?} for {obj}, got {errs:?}"
    );
}

fn assert_accepted(kind: &str, obj: Value) {
    let errs = cel_errors_value(&schema(kind), &obj);
    assert!(errs.is_empty(), "unexpected CEL errors for {obj}: {errs:?}");
}

#[test]
fn subnet_rules() {
    let k = "OpenstackNetwork";
    assert_accepted(
        k,
        network(
            json!({"name": "s", "cidr": "10.0.0.0/24", "gatewayIp": "10.0.0.1",
        "allocationPools": [{"start": "10.0.0.10", "end": "10.0.0.20"}]}),
        ),
    );
    assert_rejected(
        k,
        network(json!({"name": "s", "cidr": "10.0.0.999/24"})),
        "subnets[].cidr",
    );
    assert_rejected(
        k,
        network(json!({"name": "s", "cidr": "10.0.0.0/24", "gatewayIp": "10.0.1.1"})),
        "gatewayIp",
    );
    assert_rejected(
        k,
        network(json!({"name": "s", "cidr": "10.0.0.0/24", "gateway": "10.0.1.1"})),
        "subnets[].gateway must",
    );
    assert_rejected(
        k,
        network(
            json!({"name": "s", "cidr": "10.0.0.0/24", "gateway": "10.0.0.1", "gatewayIp": "10.0.0.2"}),
        ),
        "must not differ",
    );
    assert_rejected(
        k,
        network(
            json!({"name": "s", "cidr": "10.0.0.0/24", "allocationPools": [{"start": "10.0.1.1", "end": "10.0.1.2"}]}),
        ),
        "inside subnets[].cidr",
    );
    assert_rejected(
        k,
        network(
            json!({"name": "s", "cidr": "10.0.0.0/24", "allocationPools": [{"start": "10.0.0.9", "end": "10.0.0.2"}]}),
        ),
        "must not be after",
    );
    assert_rejected(
        k,
        network(
            json!({"name": "s", "cidr": "10.0.0.0/24", "allocationPools": [{"start": "x", "end": "10.0.0.2"}]}),
        ),
        "must be IP addresses",
    );
}

#[test]
fn flat_network_has_no_segmentation_id() {
    let obj = json!({"apiVersion": "sunet.se/v1alpha1", "kind": "OpenstackNetwork", "metadata": {"name": "n"},
        "spec": {"name": "n", "providerNetworkType": "flat", "providerSegmentationId": 3}});
    assert_rejected("OpenstackNetwork", obj, "flat network");
}

#[test]
fn security_group_rule_rules() {
    let k = "OpenstackProject";
    assert_accepted(
        k,
        project_rule(
            json!({"direction": "ingress", "protocol": "tcp", "portRangeMin": 22, "portRangeMax": 22, "remoteIpPrefix": "0.0.0.0/0"}),
        ),
    );
    assert_accepted(
        k,
        project_rule(
            json!({"direction": "ingress", "protocol": "icmp", "portRangeMin": 8, "portRangeMax": 1}),
        ),
    );
    assert_accepted(
        k,
        project_rule(
            json!({"direction": "egress", "protocol": "tcp", "remoteIpPrefix": "::/0", "ethertype": "IPv6"}),
        ),
    );
    assert_rejected(
        k,
        project_rule(
            json!({"direction": "ingress", "protocol": "tcp", "portRangeMin": 443, "portRangeMax": 80}),
        ),
        "not be greater",
    );
    assert_rejected(
        k,
        project_rule(json!({"direction": "ingress", "portRangeMin": 22, "portRangeMax": 22})),
        "need protocol",
    );
    assert_rejected(
        k,
        project_rule(json!({"direction": "ingress", "protocol": "any", "portRangeMin": 22})),
        "need protocol",
    );
    assert_rejected(
        k,
        project_rule(json!({"direction": "ingress", "protocol": "icmp", "portRangeMin": 256})),
        "at most 255",
    );
    assert_rejected(
        k,
        project_rule(json!({"direction": "ingress", "protocol": "icmp", "portRangeMax": 3})),
        "needs rules[].portRangeMin",
    );
    assert_rejected(
        k,
        project_rule(
            json!({"direction": "ingress", "remoteIpPrefix": "10.0.0.0/8", "remoteGroupName": "g"}),
        ),
        "mutually exclusive",
    );
    assert_rejected(
        k,
        project_rule(json!({"direction": "ingress", "remoteIpPrefix": "::/0"})),
        "family",
    );
    assert_rejected(
        k,
        project_rule(json!({"direction": "ingress", "remoteIpPrefix": "nowhere"})),
        "must be a CIDR",
    );
}

#[test]
fn project_network_cidr_rule() {
    let obj = json!({"apiVersion": "sunet.se/v1alpha1", "kind": "OpenstackProject", "metadata": {"name": "p", "namespace": "d"},
        "spec": {"name": "p", "domain": "d", "networks": [{"name": "n", "cidr": "300.0.0.0/24"}]}});
    assert_rejected("OpenstackProject", obj, "networks[].cidr");
}

/// The seed let `8.8.8` through admission (it only failed later, in Neutron); our CRDs refuse
/// a DNS server that is not an IP address when it is written.
#[test]
fn dns_nameservers_must_be_ip_addresses() {
    let project = |dns: Value| {
        json!({"apiVersion": "sunet.se/v1alpha1", "kind": "OpenstackProject", "metadata": {"name": "p", "namespace": "d"},
            "spec": {"name": "p", "domain": "d", "networks": [{"name": "n", "cidr": "10.0.0.0/24", "dnsNameservers": dns}]}})
    };
    assert_rejected(
        "OpenstackProject",
        project(json!(["8.8.8"])),
        "dnsNameservers[]",
    );
    assert_rejected(
        "OpenstackProject",
        project(json!(["1.1.1.1", "ns1.example.com"])),
        "dnsNameservers[]",
    );
    assert_accepted(
        "OpenstackProject",
        project(json!(["8.8.8.8", "2001:4860:4860::8888"])),
    );
    let k = "OpenstackNetwork";
    assert_rejected(
        k,
        network(json!({"name": "s", "cidr": "10.0.0.0/24", "dnsNameservers": ["8.8.8"]})),
        "dnsNameservers[]",
    );
    assert_accepted(
        k,
        network(json!({"name": "s", "cidr": "10.0.0.0/24", "dnsNameservers": ["192.0.2.53"]})),
    );
}

#[test]
fn image_url_and_hash_rules() {
    let img = |url: &str, hash: Value| {
        json!({"apiVersion": "sunet.se/v1alpha1", "kind": "OpenstackImage", "metadata": {"name": "i"},
        "spec": {"name": "i", "content": {"diskFormat": "raw", "source": {"url": url, "hash": hash}}}})
    };
    assert_accepted(
        "OpenstackImage",
        img(
            "https://example.com/a.img",
            json!({"algorithm": "md5", "value": "0123456789abcdef0123456789abcdef"}),
        ),
    );
    assert_rejected(
        "OpenstackImage",
        img(
            "file:///etc/passwd",
            json!({"algorithm": "md5", "value": "0123456789abcdef0123456789abcdef"}),
        ),
        "http:// or https://",
    );
    assert_rejected(
        "OpenstackImage",
        img(
            "https://example.com/a.img",
            json!({"algorithm": "md5", "value": "0123456789ABCDEF0123456789ABCDEF"}),
        ),
        "lower-case hex",
    );
}

fn project_credential(c: Value) -> Value {
    json!({"apiVersion": "sunet.se/v1alpha1", "kind": "OpenstackProject", "metadata": {"name": "p", "namespace": "d"},
           "spec": {"name": "p", "domain": "d", "applicationCredential": c}})
}

#[test]
fn tenant_credential_rules() {
    use api::Validate as _;
    let k = "OpenstackProject";
    let ok = json!({"lifetimeSeconds": 40, "leadTimeSeconds": 25, "drainSeconds": 5});
    assert_accepted(k, project_credential(ok.clone()));
    assert_rejected(
        k,
        project_credential(json!({"lifetimeSeconds": 60, "leadTimeSeconds": 60})),
        "spec.applicationCredential.leadTimeSeconds must be less than",
    );
    assert_rejected(
        k,
        project_credential(
            json!({"lifetimeSeconds": 600, "leadTimeSeconds": 60, "drainSeconds": 60}),
        ),
        "spec.applicationCredential.drainSeconds must be less than",
    );
    // The same checks, and the Secret's name, in the operator's own validation.
    let spec = |c: Value| -> api::OpenstackProjectSpec {
        serde_json::from_value(project_credential(c)["spec"].clone()).unwrap()
    };
    assert!(spec(ok).validate().is_empty());
    let paths: Vec<String> = spec(json!({"secretName": "Not_A_Name",
        "lifetimeSeconds": 30, "leadTimeSeconds": 30, "roles": [""]}))
    .validate()
    .into_iter()
    .map(|e| e.path)
    .collect();
    assert_eq!(
        paths,
        [
            "spec.applicationCredential.secretName",
            "spec.applicationCredential.leadTimeSeconds",
            "spec.applicationCredential.drainSeconds",
            "spec.applicationCredential.roles[0]",
        ]
    );
    let c = spec(json!({"lifetimeSeconds": 60, "leadTimeSeconds": 40}))
        .application_credential
        .unwrap();
    assert_eq!(c.secret_name("team"), "team-clouds");
    assert_eq!(c.roles(), ["member"]);
    assert_eq!(c.drain_seconds(), 30);
}
