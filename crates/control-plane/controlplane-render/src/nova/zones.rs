//! Nova across availability zones. A Nova host's zone is the `availability_zone` of the host
//! aggregate it is in (nova-compute has no option naming its own zone), so each zone is an
//! aggregate of the same name with that zone, and its compute hosts are members: the aggregate
//! step's Job creates and corrects them through the compute API as Nova's service user (which
//! has the `admin` role), with no `nova-manage`. Hosts in no aggregate are in
//! `default_availability_zone`, the first zone.
//!
//! Compute hosts join after the control plane: nova-compute runs on the hypervisors and
//! registers itself when it starts. The aggregate step therefore adds the listed hosts that are
//! registered and succeeds; the ones not registered yet are reported by the `ZonesComplete`
//! condition ([`zones_condition`]) without holding Nova's `Ready`, and the registered hosts are
//! an input of the step's hash ([`aggregate_hash`]), so a host that registers runs the step
//! again and joins its zone.

use std::time::Duration;

use api::common::{Condition, ConditionStatus};
use controlplane_api::condition_types as ct;
use controlplane_api::zones::AvailabilityZone;
use serde_json::Value;

use crate::hash::InputHash;
use crate::ini::Ini;

/// `ZonesComplete` reason: every listed host is registered and the step added it.
pub const HOSTS_IN_ZONES: &str = "HostsInZones";
/// `ZonesComplete` reason: listed hosts whose nova-compute has not registered yet.
pub const COMPUTE_HOSTS_MISSING: &str = "ComputeHostsMissing";
/// `ZonesComplete` reason: the aggregate Job is running.
pub const AGGREGATES_PENDING: &str = "AggregatesPending";
/// `ZonesComplete` reason: the aggregate Job failed (retried after a backoff).
pub const AGGREGATES_FAILED: &str = "AggregatesFailed";
/// `ZonesComplete` reason: the compute services could not be listed.
pub const COMPUTE_SERVICES_UNKNOWN: &str = "ComputeServicesUnknown";
/// Event reason when every listed host is in its zone.
pub const ZONES_COMPLETE_EVENT: &str = "ZonesComplete";

/// The aggregate step's script (Python with keystoneauth1, which every OpenStack image has).
/// Idempotent: it creates the zones' aggregates that are missing, corrects a zone that differs,
/// moves a listed host out of another listed zone's aggregate and adds the listed hosts that
/// are missing; it never deletes an aggregate nor removes a host the spec does not list
/// elsewhere (hosts added by hand stay). A listed host that has not registered its
/// nova-compute yet is skipped and named in the log, and the Job succeeds: the operator runs
/// it again when the host registers (see [`aggregate_hash`]).
pub const AGGREGATE_SCRIPT: &str = r#"import json, os
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
    print("compute hosts not registered yet (added once they register): " + ", ".join(missing))
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
/// password) runs the Job again, and so does a change of the listed hosts that are registered
/// (`registered`, from [`ComputeHosts::read`]): a hypervisor that registered joins its zone.
pub fn aggregate_hash(
    image: &str,
    env: &[(String, String)],
    password: &str,
    registered: &[String],
) -> String {
    let mut h = InputHash::new()
        .add("step", "aggregates")
        .add("image", image)
        .add("script", AGGREGATE_SCRIPT)
        .add("password", password);
    for (k, v) in env {
        h = h.add(k, v);
    }
    h.add("registered", registered.join(",")).short()
}

/// The listed compute hosts as Nova's compute services show them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ComputeHosts {
    /// Listed hosts whose nova-compute is registered, sorted, each once.
    pub registered: Vec<String>,
    /// Listed hosts Nova has no nova-compute record of, as (zone, host), in spec order.
    pub missing: Vec<(String, String)>,
}

impl ComputeHosts {
    /// Reads `body`, the answer of `GET /os-services?binary=nova-compute`, for the hosts
    /// `zones` list (pure). A disabled or down service still counts: it registered, so the
    /// compute API accepts it into an aggregate.
    pub fn read(zones: &[AvailabilityZone], body: &Value) -> Result<ComputeHosts, String> {
        let list = body["services"]
            .as_array()
            .ok_or_else(|| format!("os-services answered without a services list: {body}"))?;
        let known = |h: &str| {
            list.iter()
                .any(|s| s["binary"] == "nova-compute" && s["host"] == h)
        };
        let mut out = ComputeHosts::default();
        for z in zones {
            for h in &z.compute_hosts {
                if known(h) {
                    out.registered.push(h.clone());
                } else {
                    out.missing.push((z.name.clone(), h.clone()));
                }
            }
        }
        out.registered.sort();
        out.registered.dedup();
        Ok(out)
    }
}

/// Where the aggregate step is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AggregateStep {
    /// Succeeded for the current inputs.
    Done,
    /// A Job is running (the message names it).
    Running(String),
    /// The last attempt failed (the message says why and when the next one starts).
    Failed(String),
}

/// The `ZonesComplete` condition (pure): True once the step succeeded with every listed host
/// registered; False naming the hosts not registered yet (`recheck` is how often the operator
/// looks for them), or the running or failed Job.
pub fn zones_condition(
    zones: &[AvailabilityZone],
    hosts: &ComputeHosts,
    step: &AggregateStep,
    recheck: Duration,
) -> Condition {
    let missing = || {
        hosts
            .missing
            .iter()
            .map(|(z, h)| format!("{h} ({z})"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    match step {
        AggregateStep::Failed(m) => {
            Condition::new(ct::ZONES_COMPLETE, false, AGGREGATES_FAILED, m.clone())
        }
        AggregateStep::Running(m) => {
            Condition::new(ct::ZONES_COMPLETE, false, AGGREGATES_PENDING, m.clone())
        }
        AggregateStep::Done if !hosts.missing.is_empty() => Condition::new(
            ct::ZONES_COMPLETE,
            false,
            COMPUTE_HOSTS_MISSING,
            format!(
                "compute hosts not registered yet: {}; the zones' aggregates are in place with \
                 the registered hosts, and each of these joins its zone once its nova-compute \
                 registers (looked for every {}s)",
                missing(),
                recheck.as_secs()
            ),
        ),
        AggregateStep::Done => Condition::new(
            ct::ZONES_COMPLETE,
            true,
            HOSTS_IN_ZONES,
            format!(
                "{} compute hosts in the aggregates of zones {}",
                hosts.registered.len(),
                zones
                    .iter()
                    .map(|z| z.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ),
    }
}

/// The `ZonesComplete` condition when the compute services could not be listed (pure).
pub fn services_unknown(why: &str) -> Condition {
    Condition::new(
        ct::ZONES_COMPLETE,
        ConditionStatus::Unknown,
        COMPUTE_SERVICES_UNKNOWN,
        format!("cannot tell which compute hosts registered: {why}"),
    )
}

/// The Event (reason, note) a new `ZonesComplete` condition is worth (pure): hosts missing
/// (again, or another set of them), and every host in its zone. Nothing for a condition seen
/// before, a running Job, or a failure (the `Degraded` Warning tells that).
pub fn zones_event(before: Option<&Condition>, after: &Condition) -> Option<(String, String)> {
    let reason = after.reason.as_deref()?;
    let message = after.message.clone().unwrap_or_default();
    let same = before.is_some_and(|b| {
        b.status == after.status && b.reason == after.reason && b.message == after.message
    });
    if same {
        return None;
    }
    match reason {
        COMPUTE_HOSTS_MISSING => Some((COMPUTE_HOSTS_MISSING.to_string(), message)),
        HOSTS_IN_ZONES if !before.is_some_and(Condition::is_true) => {
            Some((ZONES_COMPLETE_EVENT.to_string(), message))
        }
        _ => None,
    }
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
        let hash = |img: &str, z: &[AvailabilityZone]| aggregate_hash(img, &env(z), "pw", &[]);
        let two = hash("img", &zones(&["az1", "az2"]));
        assert_eq!(two, hash("img", &zones(&["az1", "az2"])));
        assert_ne!(two, hash("img", &zones(&["az1", "az2", "az3"])));
        let mut moved = zones(&["az1", "az2"]);
        moved[1].compute_hosts.push("compute-9".into());
        assert_ne!(two, hash("img", &moved));
        assert_ne!(two, hash("img2", &zones(&["az1", "az2"])));
    }

    fn services(hosts: &[(&str, &str)]) -> Value {
        serde_json::json!({"services": hosts.iter().map(|(binary, host)| serde_json::json!({
            "binary": binary, "host": host, "state": "down", "status": "disabled"}))
            .collect::<Vec<_>>()})
    }

    fn example_zones() -> Vec<AvailabilityZone> {
        let zone = |name: &str, hosts: &[&str]| AvailabilityZone {
            name: name.into(),
            compute_hosts: hosts.iter().map(|h| h.to_string()).collect(),
            ..AvailabilityZone::default()
        };
        vec![
            zone("az1", &["compute-a1", "compute-a2"]),
            zone("az2", &["compute-b1"]),
            zone("az3", &["compute-c1"]),
        ]
    }

    #[test]
    fn a_host_that_registers_runs_the_step_again_and_nothing_else_does() {
        let z = example_zones();
        let env = aggregate_env("a", "nova", "service", "u", &z);
        let fresh = ComputeHosts::read(&z, &services(&[("nova-conductor", "ctl")])).unwrap();
        assert!(fresh.registered.is_empty());
        let joined = ComputeHosts::read(
            &z,
            &services(&[("nova-compute", "compute-b1"), ("nova-compute", "other")]),
        )
        .unwrap();
        assert_eq!(joined.registered, ["compute-b1"]);
        let before = aggregate_hash("img", &env, "pw", &fresh.registered);
        let after = aggregate_hash("img", &env, "pw", &joined.registered);
        assert_ne!(before, after, "a registered host must run the step again");
        // An unlisted host registering changes nothing.
        let unlisted = ComputeHosts::read(&z, &services(&[("nova-compute", "other")])).unwrap();
        assert_eq!(
            aggregate_hash("img", &env, "pw", &unlisted.registered),
            before
        );
    }

    #[test]
    fn hosts_are_read_from_the_compute_services_of_any_state() {
        let z = example_zones();
        let h = ComputeHosts::read(
            &z,
            &services(&[
                ("nova-compute", "compute-c1"),
                ("nova-compute", "compute-a1"),
                // Another binary on a listed host is no compute service.
                ("nova-scheduler", "compute-a2"),
            ]),
        )
        .unwrap();
        assert_eq!(h.registered, ["compute-a1", "compute-c1"]);
        assert_eq!(
            h.missing,
            [
                ("az1".to_string(), "compute-a2".to_string()),
                ("az2".to_string(), "compute-b1".to_string())
            ]
        );
        let err = ComputeHosts::read(&z, &serde_json::json!({"error": "x"})).unwrap_err();
        assert!(err.contains("without a services list"), "{err}");
    }

    #[test]
    fn missing_hosts_are_reported_without_failing_and_complete_zones_are_true() {
        let z = example_zones();
        let recheck = Duration::from_secs(60);
        let fresh = ComputeHosts::read(&z, &services(&[])).unwrap();
        let c = zones_condition(&z, &fresh, &AggregateStep::Done, recheck);
        assert_eq!(c.type_, ct::ZONES_COMPLETE);
        assert!(!c.is_true());
        assert_eq!(c.reason.as_deref(), Some(COMPUTE_HOSTS_MISSING));
        let m = c.message.clone().unwrap_or_default();
        assert!(
            m.starts_with(
                "compute hosts not registered yet: compute-a1 (az1), compute-a2 (az1), \
                 compute-b1 (az2), compute-c1 (az3);"
            ) && m.ends_with("(looked for every 60s)"),
            "{m}"
        );
        let all = ComputeHosts::read(
            &z,
            &services(&[
                ("nova-compute", "compute-a1"),
                ("nova-compute", "compute-a2"),
                ("nova-compute", "compute-b1"),
                ("nova-compute", "compute-c1"),
            ]),
        )
        .unwrap();
        let done = zones_condition(&z, &all, &AggregateStep::Done, recheck);
        assert!(done.is_true());
        assert_eq!(
            done.message.as_deref(),
            Some("4 compute hosts in the aggregates of zones az1, az2, az3")
        );
        // Until the Job for the current hosts succeeded, the zones are not complete.
        let running = zones_condition(&z, &all, &AggregateStep::Running("Job j".into()), recheck);
        assert_eq!(running.reason.as_deref(), Some(AGGREGATES_PENDING));
        assert!(!running.is_true());
        let failed = zones_condition(&z, &all, &AggregateStep::Failed("boom".into()), recheck);
        assert_eq!(failed.reason.as_deref(), Some(AGGREGATES_FAILED));
        assert_eq!(failed.message.as_deref(), Some("boom"));
        let unknown = services_unknown("GET x failed");
        assert_eq!(unknown.status, ConditionStatus::Unknown);
    }

    #[test]
    fn an_event_when_the_missing_hosts_change_and_when_the_zones_complete() {
        let z = example_zones();
        let recheck = Duration::from_secs(60);
        let cond = |registered: &[&str], step: AggregateStep| {
            let body = services(
                &registered
                    .iter()
                    .map(|h| ("nova-compute", *h))
                    .collect::<Vec<_>>(),
            );
            zones_condition(&z, &ComputeHosts::read(&z, &body).unwrap(), &step, recheck)
        };
        let none = cond(&[], AggregateStep::Done);
        let (reason, note) = zones_event(None, &none).expect("first report");
        assert_eq!(reason, COMPUTE_HOSTS_MISSING);
        assert!(note.contains("compute-a1 (az1)"), "{note}");
        // The same hosts missing on the next pass: no second Event.
        assert_eq!(zones_event(Some(&none), &none), None);
        // A host joining: the Job runs (no Event), then fewer hosts missing (an Event).
        let running = cond(&["compute-a1"], AggregateStep::Running("Job j".into()));
        assert_eq!(zones_event(Some(&none), &running), None);
        let fewer = cond(&["compute-a1"], AggregateStep::Done);
        let (_, note) = zones_event(Some(&running), &fewer).expect("fewer missing");
        assert!(!note.contains("compute-a1 (az1)"), "{note}");
        let all = ["compute-a1", "compute-a2", "compute-b1", "compute-c1"];
        let done = cond(&all, AggregateStep::Done);
        assert_eq!(
            zones_event(Some(&fewer), &done).map(|(r, _)| r).as_deref(),
            Some(ZONES_COMPLETE_EVENT)
        );
        assert_eq!(zones_event(Some(&done), &done), None);
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

    #[test]
    fn the_script_succeeds_with_hosts_not_registered() {
        // A fresh install has no hypervisor: the Job must not fail for that (it did, and Nova
        // never became Ready); it names them in its log instead.
        assert!(!AGGREGATE_SCRIPT.contains("sys.exit"));
        assert!(AGGREGATE_SCRIPT.contains("compute hosts not registered yet (added once"));
    }
}
