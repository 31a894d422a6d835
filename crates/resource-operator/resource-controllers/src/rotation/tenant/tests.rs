use super::*;
use crate::rotation::{Credential, Observed, Pending, Policy, Step, credential_id, decide};
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

fn t(s: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + s).unwrap()
}

fn policy() -> Policy {
    let spec: api::project::TenantCredential = serde_json::from_value(serde_json::json!({
        "lifetimeSeconds": 40, "leadTimeSeconds": 25, "drainSeconds": 5}))
    .unwrap();
    Policy::from(&spec)
}

const PREFIX: &str = "openstack-operator-team-0123abcd";

fn cred(id: &str, gen_: u32, expires: i64) -> Credential {
    Credential {
        id: id.into(),
        name: format!("{PREFIX}-{gen_}"),
        expires_at: Some(t(expires)),
        // A tenant's are restricted: that never blocks them.
        unrestricted: false,
    }
}

#[test]
fn the_first_credential_is_made_at_once_and_a_restricted_one_rotates() {
    let p = policy();
    assert!(!p.current_makes_successor);
    assert_eq!(p.drain, SignedDuration::from_secs(5));
    let o = Observed {
        now: t(0),
        prefix: PREFIX,
        current: None,
        listed: &[],
        pending: None,
        old_clients_in_use: 0,
    };
    assert_eq!(
        decide(&o, &p),
        Step::Create {
            name: format!("{PREFIX}-1"),
            expires_at: t(40)
        }
    );
    let c = cred("a", 1, 40);
    let o = |now| Observed {
        now: t(now),
        prefix: PREFIX,
        current: Some(&c),
        listed: std::slice::from_ref(&c),
        pending: None,
        old_clients_in_use: 0,
    };
    assert_eq!(decide(&o(0), &p), Step::Wait(t(15)));
    assert_eq!(
        decide(&o(15), &p),
        Step::Create {
            name: format!("{PREFIX}-2"),
            expires_at: t(55)
        }
    );
}

#[test]
fn a_lost_credential_clears_everything_of_ours_before_the_next_is_made() {
    // The Secret names a credential Keystone no longer has; one draining, a leftover, and
    // one not ours.
    let listed = [
        cred("old", 3, 50),
        cred("left", 5, 60),
        Credential {
            id: "z".into(),
            name: "someone-elses".into(),
            expires_at: None,
            unrestricted: true,
        },
    ];
    let pending = Pending {
        previous_id: "old".into(),
        switched_at: t(0),
    };
    let o = Observed {
        now: t(1),
        prefix: PREFIX,
        current: None,
        listed: &listed,
        pending: Some(&pending),
        old_clients_in_use: 0,
    };
    assert_eq!(
        decide(&o, &policy()),
        Step::Delete {
            ids: vec!["old".into(), "left".into()],
            finish_switch: true
        }
    );
    let o = Observed {
        listed: &listed[2..],
        pending: None,
        ..o
    };
    assert_eq!(
        decide(&o, &policy()),
        Step::Create {
            name: format!("{PREFIX}-1"),
            expires_at: t(41)
        }
    );
}

#[test]
fn the_delivered_clouds_yaml_has_one_application_credential_entry() {
    let e = openstack::adapter::CloudEndpoint {
        auth_url: "https://keystone.example.com/v3".into(),
        region_name: Some("RegionOne".into()),
        interface: Some("public".into()),
        identity_api_version: Some("3".into()),
        cacert: Some("/etc/operator/ca.pem".into()),
        verify: None,
    };
    let y = clouds_yaml("team-a", &e, "id1", "s3cret");
    let doc = api::manifest::documents(&y).unwrap().remove(0);
    assert_eq!(
        doc,
        serde_json::json!({"clouds": {"team-a": {
            "auth_type": "v3applicationcredential",
            "auth": {"auth_url": "https://keystone.example.com/v3",
                     "application_credential_id": "id1",
                     "application_credential_secret": "s3cret"},
            "region_name": "RegionOne", "interface": "public", "identity_api_version": "3"}}})
    );
    // The rotation reads it back by the same entry.
    assert_eq!(credential_id(&y, "team-a").unwrap(), "id1");
    let insecure = openstack::adapter::CloudEndpoint {
        verify: Some(false),
        ..e
    };
    let doc = api::manifest::documents(&clouds_yaml("x", &insecure, "i", "s"))
        .unwrap()
        .remove(0);
    assert_eq!(doc["clouds"]["x"]["verify"], false);
}

#[test]
fn the_user_and_the_secret_are_ours_only_with_the_object_s_uid() {
    assert_eq!(
        user_name("team.example.com"),
        "team.example.com-tenant-credentials"
    );
    let d = user_description("ns", "team", "u-1");
    assert!(owns_user(&d, "u-1"));
    assert!(!owns_user(&d, "u-2"));
    assert!(!owns_user("a human's account (uid u-1)", "u-1"));
    let mut s = Secret::default();
    assert!(!secret_is_ours(&s, "u-1"));
    s.metadata.owner_references = Some(vec![OwnerReference {
        api_version: "sunet.se/v1alpha1".into(),
        kind: "OpenstackProject".into(),
        name: "team".into(),
        uid: "u-1".into(),
        ..Default::default()
    }]);
    assert!(secret_is_ours(&s, "u-1"));
    assert!(!secret_is_ours(&s, "u-2"));
}

#[test]
fn only_projects_whose_step_is_due_are_asked_for() {
    use std::sync::Arc;
    let project = |name: &str, next: Option<i64>, with_spec: bool| {
        let mut p: api::OpenstackProject = serde_json::from_value(serde_json::json!({
            "apiVersion": "sunet.se/v1alpha1", "kind": "OpenstackProject",
            "metadata": {"name": name, "namespace": "ns"},
            "spec": {"name": name, "domain": "Default",
                     "applicationCredential": {"lifetimeSeconds": 40, "leadTimeSeconds": 25}},
        }))
        .unwrap();
        if !with_spec {
            p.spec.application_credential = None;
        }
        p.status = Some(api::OpenstackProjectStatus {
            application_credential: Some(api::project::TenantCredentialStatus {
                next_step_at: next.map(|s| t(s).to_string()),
                ..Default::default()
            }),
            ..Default::default()
        });
        Arc::new(p)
    };
    let all = [
        project("due", Some(10), true),
        project("later", Some(30), true),
        project("never-set", None, true),
        project("removed", Some(0), false),
    ];
    let names: Vec<String> = run::due(&all, t(10)).into_iter().map(|r| r.name).collect();
    assert_eq!(names, ["due"]);
}

#[test]
fn a_credential_role_outside_the_allowed_roles_is_refused_before_any_call() {
    let spec = |roles: serde_json::Value| -> api::OpenstackProjectSpec {
        serde_json::from_value(serde_json::json!({"name": "p", "domain": "d",
            "applicationCredential": {"lifetimeSeconds": 40, "leadTimeSeconds": 25,
                                      "roles": roles}}))
        .unwrap()
    };
    let config = crate::context::Config::default();
    assert!(
        crate::project::check_policy(&spec(serde_json::json!(["reader"])), "ns", &config).is_ok()
    );
    let e =
        crate::project::check_policy(&spec(serde_json::json!(["member", "admin"])), "ns", &config)
            .unwrap_err()
            .to_string();
    assert!(
        e.contains("spec.applicationCredential.roles[1]") && e.contains("\"admin\""),
        "{e}"
    );
}
