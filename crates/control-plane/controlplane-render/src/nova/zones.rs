//! Nova across availability zones. A Nova host's zone is the `availability_zone` of the host
//! aggregate it is in (nova-compute has no option naming its own zone), so each zone is an
//! aggregate of the same name with that zone, and its compute hosts are members: the aggregate
//! step's Job creates and corrects them through the compute API as Nova's service user (which
//! has the `admin` role), with no `nova-manage`. Hosts in no aggregate are in
//! `default_availability_zone`, the first zone.

use controlplane_api::zones::AvailabilityZone;

use crate::hash::InputHash;
use crate::ini::Ini;

/// The aggregate step's script (Python with keystoneauth1, which every OpenStack image has).
/// Idempotent: it creates the zones' aggregates that are missing, corrects a zone that differs,
/// moves a listed host out of another listed zone's aggregate and adds the listed hosts that
/// are missing; it never deletes an aggregate nor removes a host the spec does not list
/// elsewhere (hosts added by hand stay). A listed host that has not registered its
/// nova-compute yet fails the Job after everything else is done, so the retried Job adds it
/// once it has.
pub const AGGREGATE_SCRIPT: &str = r#"import json, os, sys
from keystoneauth1 import session
from keystoneauth1.identity import v3
env = os.environ
s = session.Session(auth=v3.Password(
    auth_url=env["OS_AUTH_URL"], username=env["OS_USERNAME"], password=env["OS_PASSWORD"],
    project_name=env["OS_PROJECT_NAME"], user_domain_id="default", project_domain_id="default"))
N = env["NOVA_URL"].rstrip("/")
zones = json.loads(env["ZONES"])
def aggregates():
    return {a["name"]: a for a in s.get(N + "/os-aggregates").json()["aggregates"]}
def action(a, verb, host):
    s.post(N + "/os-aggregates/%s/action" % a["id"], json={verb: {"host": host}})
aggs = aggregates()
for z in zones:
    a = aggs.get(z["name"])
    if a is None:
        s.post(N + "/os-aggregates",
               json={"aggregate": {"name": z["name"], "availability_zone": z["name"]}})
        print("aggregate %s created in zone %s" % (z["name"], z["name"]))
    elif a.get("availability_zone") != z["name"]:
        s.put(N + "/os-aggregates/%s" % a["id"],
              json={"aggregate": {"availability_zone": z["name"]}})
        print("aggregate %s moved to zone %s" % (z["name"], z["name"]))
aggs = aggregates()
home = {h: z["name"] for z in zones for h in z["hosts"]}
for z in zones:
    for h in aggs[z["name"]].get("hosts") or []:
        if home.get(h, z["name"]) != z["name"]:
            action(aggs[z["name"]], "remove_host", h)
            print("host %s left zone %s" % (h, z["name"]))
computes = {x["host"] for x in
            s.get(N + "/os-services", params={"binary": "nova-compute"}).json()["services"]}
aggs = aggregates()
missing = []
for z in zones:
    for h in z["hosts"]:
        if h in (aggs[z["name"]].get("hosts") or []):
            continue
        if h not in computes:
            missing.append(h)
            continue
        action(aggs[z["name"]], "add_host", h)
        print("host %s joined zone %s" % (h, z["name"]))
if missing:
    sys.exit("compute hosts not registered yet (retried): " + ", ".join(missing))
print("zones ready: " + ", ".join(z["name"] for z in zones))
"#;

/// The `ZONES` variable of the aggregate Job: `[{"name": ..., "hosts": [...]}, ...]`.
pub fn zones_json(zones: &[AvailabilityZone]) -> String {
    serde_json::Value::Array(
        zones
            .iter()
            .map(|z| serde_json::json!({"name": z.name, "hosts": z.compute_hosts}))
            .collect(),
    )
    .to_string()
}

/// The aggregate Job's command.
pub fn aggregate_command(python: &str) -> Vec<String> {
    vec![python.into(), "-c".into(), AGGREGATE_SCRIPT.into()]
}

/// The aggregate Job's environment besides `OS_PASSWORD` (the service user's, from its
/// Secret): Keystone, the user, the compute API's URL (with `/v2.1`) and the zones.
pub fn aggregate_env(
    auth_url: &str,
    user: &str,
    project: &str,
    nova_url: &str,
    zones: &[AvailabilityZone],
) -> Vec<(String, String)> {
    [
        ("OS_AUTH_URL", auth_url.to_string()),
        ("OS_USERNAME", user.to_string()),
        ("OS_PROJECT_NAME", project.to_string()),
        ("NOVA_URL", nova_url.to_string()),
        ("ZONES", zones_json(zones)),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

/// Hash of the aggregate step's inputs: a changed zone list (or host list, URL, image,
/// password) runs the Job again.
pub fn aggregate_hash(image: &str, env: &[(String, String)], password: &str) -> String {
    let mut h = InputHash::new()
        .add("step", "aggregates")
        .add("image", image)
        .add("script", AGGREGATE_SCRIPT)
        .add("password", password);
    for (k, v) in env {
        h = h.add(k, v);
    }
    h.short()
}

/// `nova.conf` with the first zone as the zone of hosts in no aggregate
/// (`default_availability_zone`). Unchanged without zones.
pub fn with_default_zone(nova_conf: &str, zones: &[AvailabilityZone]) -> String {
    let Some(first) = zones.first() else {
        return nova_conf.to_string();
    };
    let mut ini = Ini::parse(nova_conf);
    ini.set("DEFAULT", "default_availability_zone", first.name.clone());
    ini.render()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zones(names: &[&str]) -> Vec<AvailabilityZone> {
        names
            .iter()
            .enumerate()
            .map(|(i, n)| AvailabilityZone {
                name: (*n).into(),
                compute_hosts: vec![format!("compute-{i}")],
                ..AvailabilityZone::default()
            })
            .collect()
    }

    #[test]
    fn the_job_gets_every_zone_and_its_hosts() {
        let env = aggregate_env(
            "http://ks/v3",
            "nova",
            "service",
            "http://nova-api.ns.svc:8774/v2.1",
            &zones(&["az1", "az2", "az3"]),
        );
        let z = env
            .iter()
            .find(|(k, _)| k == "ZONES")
            .map(|(_, v)| v.as_str())
            .unwrap_or_default();
        assert_eq!(
            z,
            r#"[{"hosts":["compute-0"],"name":"az1"},{"hosts":["compute-1"],"name":"az2"},{"hosts":["compute-2"],"name":"az3"}]"#
        );
        assert!(
            env.iter()
                .any(|(k, v)| k == "NOVA_URL" && v.ends_with("/v2.1"))
        );
        assert!(!env.iter().any(|(k, _)| k == "OS_PASSWORD"));
    }

    #[test]
    fn the_hash_follows_the_zones_and_hosts() {
        let env = |z: &[AvailabilityZone]| aggregate_env("a", "nova", "service", "u", z);
        let two = aggregate_hash("img", &env(&zones(&["az1", "az2"])), "pw");
        assert_eq!(
            two,
            aggregate_hash("img", &env(&zones(&["az1", "az2"])), "pw")
        );
        assert_ne!(
            two,
            aggregate_hash("img", &env(&zones(&["az1", "az2", "az3"])), "pw")
        );
        let mut moved = zones(&["az1", "az2"]);
        moved[1].compute_hosts.push("compute-9".into());
        assert_ne!(two, aggregate_hash("img", &env(&moved), "pw"));
        assert_ne!(
            two,
            aggregate_hash("img2", &env(&zones(&["az1", "az2"])), "pw")
        );
    }

    #[test]
    fn the_first_zone_is_the_default() {
        let conf = "[DEFAULT]\nhost = nova\n";
        assert_eq!(with_default_zone(conf, &[]), conf);
        let ini = Ini::parse(&with_default_zone(conf, &zones(&["az2", "az1"])));
        assert_eq!(ini.get("DEFAULT", "default_availability_zone"), Some("az2"));
        assert_eq!(ini.get("DEFAULT", "host"), Some("nova"));
    }

    #[test]
    fn the_script_is_idempotent_by_construction() {
        // What makes a re-run converge instead of failing: look-ups before every create, add
        // only hosts not already members, and no deletion of aggregates.
        assert!(AGGREGATE_SCRIPT.contains("if a is None:"));
        assert!(AGGREGATE_SCRIPT.contains("if h in (aggs[z[\"name\"]].get(\"hosts\") or []):"));
        assert!(!AGGREGATE_SCRIPT.contains("s.delete("));
    }
}
