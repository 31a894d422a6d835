//! The CEL cost budget a real API server applies when a CRD is written.
//!
//! Fixtures under `tests/fixtures/refused-by-v1.36` are the project's CRDs as of
//! commit 49340c5, which a real kube-apiserver v1.36.2 refused (issue #14 quotes
//! its answer); the factors below are the ones it printed.

use std::path::{Path, PathBuf};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, PostParams};
use kube_emulator::cel_cost::{STATIC_ESTIMATED_COST_LIMIT, schema_rule_costs};
use serde_json::Value;

use crate::common::*;

fn manifest_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn load(path: &Path) -> Value {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("parsing {}: {e}", path.display()))
}

fn refused_fixture(name: &str) -> Value {
    load(
        &manifest_dir()
            .join("tests/fixtures/refused-by-v1.36")
            .join(name),
    )
}

fn our_crds() -> Vec<(String, Value)> {
    let dir = manifest_dir().join("../../../deploy/crds");
    let mut out: Vec<(String, Value)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .map(|p| (p.display().to_string(), load(&p)))
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(out.len(), 6, "expected the six CRDs of deploy/crds");
    out
}

async fn refusal(env: &Env, crd: Value) -> kube::core::Status {
    let api: Api<CustomResourceDefinition> = Api::all(env.client.clone());
    let crd: CustomResourceDefinition = serde_json::from_value(crd).expect("valid CRD");
    *api_err(api.create(&PostParams::default(), &crd).await)
}

/// The factor the message gives for `field` (None: "more than 100x").
fn factor(message: &str, field: &str) -> Option<f64> {
    let start = message
        .find(&format!("{field}: Forbidden: "))
        .unwrap_or_else(|| panic!("no error for {field} in {message}"));
    let rest = &message[start..];
    let at = rest.find("by factor of ").expect("a factor") + "by factor of ".len();
    let shown = &rest[at..rest[at..]
        .find("x ")
        .map(|i| at + i)
        .expect("factor ends in x")];
    if shown == "more than 100" {
        None
    } else {
        Some(shown.parse().expect("a number"))
    }
}

fn assert_near(got: Option<f64>, want: f64, what: &str) {
    let got = got.unwrap_or_else(|| panic!("{what}: no factor, want {want}"));
    assert!(
        (got - want).abs() <= want * 0.1,
        "{what}: factor {got}, the real server said {want}"
    );
}

const NET: &str = "spec.validation.openAPIV3Schema.properties[spec].properties[subnets].items";

#[tokio::test]
async fn network_crd_refused_by_v1_36_is_refused_with_its_factors() {
    let env = start().await;
    let s = refusal(&env, refused_fixture("openstacknetworks.sunet.se.yaml")).await;
    assert_eq!(s.code, 422);
    assert_eq!(s.reason, "Invalid");
    let m = &s.message;
    assert!(
        m.starts_with(
            "CustomResourceDefinition.apiextensions.k8s.io \"openstacknetworks.sunet.se\" is invalid: ["
        ),
        "{m}"
    );
    assert!(m.contains("(try simplifying the rule, or adding maxItems, maxProperties, and maxLength where arrays, maps, and strings are declared)"));
    let cidr = format!("{NET}.properties[cidr].x-kubernetes-validations[0].rule");
    assert_near(factor(m, &cidr), 2.0, "subnets[].cidr");
    assert_near(
        factor(m, &format!("{NET}.x-kubernetes-validations[0].rule")),
        4.0,
        "subnets[] rule 0",
    );
    assert_near(
        factor(m, &format!("{NET}.x-kubernetes-validations[1].rule")),
        4.0,
        "subnets[] rule 1",
    );
    assert_eq!(
        factor(m, &format!("{NET}.x-kubernetes-validations[3].rule")),
        None,
        "subnets[] rule 3 is more than 100x over"
    );
    assert_near(
        factor(m, "spec.validation.openAPIV3Schema"),
        14.1,
        "whole schema",
    );
    // and, as printed, the very figures the server printed
    for (field, shown) in [
        (cidr.clone(), "2.0x"),
        (format!("{NET}.x-kubernetes-validations[0].rule"), "4.0x"),
        (format!("{NET}.x-kubernetes-validations[1].rule"), "4.0x"),
        (
            format!("{NET}.x-kubernetes-validations[3].rule"),
            "more than 100x",
        ),
        ("spec.validation.openAPIV3Schema".to_string(), "14.1x"),
    ] {
        let start = m
            .find(&format!("{field}: Forbidden: "))
            .expect("an error for the field");
        let own = &m[start..];
        let own = &own[..own.find(" (try").unwrap_or(own.len())];
        assert!(
            own.ends_with(&format!("by factor of {shown}")),
            "{field}: {shown} in {m}"
        );
    }
    assert!(m.contains(
        "contributed to estimated rule cost total exceeding cost limit for entire OpenAPIv3 schema"
    ));
    // the failure is per field, as kubectl shows it
    let causes = s.details.expect("details").causes;
    assert!(
        causes
            .iter()
            .any(|c| c.field == cidr && c.reason == "FieldValueForbidden")
    );
}

#[tokio::test]
async fn project_crd_refused_by_v1_36_is_refused_with_its_factor() {
    let env = start().await;
    let s = refusal(&env, refused_fixture("openstackprojects.sunet.se.yaml")).await;
    assert_eq!(s.code, 422);
    let field = "spec.validation.openAPIV3Schema.properties[spec].properties[networks].items.properties[cidr].x-kubernetes-validations[0].rule";
    assert_near(factor(&s.message, field), 1.006637, "networks[].cidr");
    // our estimate happens to be the server's to the unit (10,066,368): the same text
    assert!(
        s.message.contains(&format!(
            "{field}: Forbidden: estimated rule cost exceeds budget by factor of 1.006637x (try"
        )),
        "below 1.5x the server prints six decimals: {}",
        s.message
    );
    // the only refusal: the total stays within the CRD budget
    assert!(
        !s.message.contains("entire OpenAPIv3 schema exceeds"),
        "{}",
        s.message
    );
}

#[tokio::test]
async fn our_crds_are_accepted() {
    let env = start().await;
    for (path, crd) in our_crds() {
        let api: Api<CustomResourceDefinition> = Api::all(env.client.clone());
        let typed: CustomResourceDefinition = serde_json::from_value(crd).expect("valid CRD");
        if let Err(e) = api.create(&PostParams::default(), &typed).await {
            panic!("{path} refused: {e}");
        }
    }
}

/// Every rule of our CRDs, with its estimated cost; a rule past half the
/// per-rule budget fails the test, so a schema change that makes a rule
/// expensive is caught long before a real server would refuse the CRD.
#[test]
fn rule_costs_of_our_crds_stay_within_half_the_budget() {
    let mut over = Vec::new();
    let mut total_max = 0u64;
    for (path, crd) in our_crds() {
        let name = Path::new(&path)
            .file_name()
            .map(|n| n.to_string_lossy().to_string())
            .unwrap_or(path.clone());
        let versions = crd["spec"]["versions"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let mut total = 0u64;
        for v in versions {
            for c in schema_rule_costs(&v["schema"]["openAPIV3Schema"]) {
                println!(
                    "{name}: {:>10} = {:>7} x {:<6} {} ({})",
                    c.cost, c.per_call, c.cardinality, c.path, c.rule
                );
                total = total.saturating_add(c.cost);
                if c.cost > STATIC_ESTIMATED_COST_LIMIT / 2 {
                    over.push(format!("{name}: {} costs {} ({})", c.path, c.cost, c.rule));
                }
            }
        }
        println!("{name}: total {total}");
        total_max = total_max.max(total);
    }
    assert!(
        over.is_empty(),
        "rules past half the per-rule budget:\n{}",
        over.join("\n")
    );
    assert!(
        total_max <= kube_emulator::cel_cost::STATIC_ESTIMATED_CRD_COST_LIMIT / 2,
        "a CRD's rules together pass half the per-CRD budget: {total_max}"
    );
}

/// Schema rules the real server checks beside the cost (apiextensions `validation.go`):
/// a list-map key must be required or defaulted, a rule's `reason` must be one of four,
/// `oldSelf` only where old and new items can be paired.
#[tokio::test]
async fn list_map_keys_and_rule_reasons_are_checked() {
    let env = start().await;
    let mut crd = widget_crd();
    let spec = &mut crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"];
    spec["properties"]["ports"] = serde_json::json!({
        "type": "array", "maxItems": 4,
        "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["port"],
        "items": {"type": "object", "properties": {"port": {"type": "integer"}}}
    });
    spec["x-kubernetes-validations"][0]["reason"] = serde_json::json!("Nope");
    // a transition rule on the items of an atomic list: old and new items cannot be paired
    spec["properties"]["tags"]["items"]["x-kubernetes-validations"] =
        serde_json::json!([{"rule": "self == oldSelf"}]);
    let s = refusal(&env, crd).await;
    assert_eq!(
        (s.code, s.reason.as_str()),
        (422, "Invalid"),
        "{}",
        s.message
    );
    let fields: Vec<String> = s
        .details
        .expect("details")
        .causes
        .iter()
        .map(|c| format!("{}: {}", c.field, c.message))
        .collect();
    let root = "spec.validation.openAPIV3Schema.properties[spec]";
    assert!(
        fields.contains(&format!("{root}.properties[ports].items.properties[port].default: Required value: this property is in x-kubernetes-list-map-keys, so it must have a default or be a required property")),
        "{fields:?}"
    );
    assert!(
        fields.iter().any(|f| f.starts_with(&format!(
            "{root}.x-kubernetes-validations[0].reason: Unsupported value: \"Nope\""
        ))),
        "{fields:?}"
    );
    assert!(
        fields.contains(&format!("{root}.properties[tags].items.x-kubernetes-validations[0].rule: Invalid value: \"self == oldSelf\": oldSelf cannot be used on the uncorrelatable portion of the schema within {root}.properties[tags]")),
        "{fields:?}"
    );
}
