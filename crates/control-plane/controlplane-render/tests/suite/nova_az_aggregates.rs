//! Proof that the aggregate step's script works against a real Nova: the test cloud's (2026.1)
//! compute API, as its admin. Three zones become three aggregates with their zones; a second
//! run changes nothing; an aggregate of a zone's name without the zone is corrected; a listed
//! host that never registered is named and skipped, and the run succeeds with the zones in
//! place.
//!
//! Needs `scripts/test-cloud up`. Its aggregates are `cp-az-proof-*` and are deleted at the
//! end; no host of the test cloud is moved (other tests boot servers there).

use std::process::{Command, Output};

use controlplane_api::zones::AvailabilityZone;
use controlplane_render::nova::zones::{AGGREGATE_SCRIPT, aggregate_env};
use service_boot::{admin_password, venv_bin};

const ZONES: [&str; 3] = ["cp-az-proof-1", "cp-az-proof-2", "cp-az-proof-3"];

fn openstack(args: &[&str]) -> Output {
    Command::new(venv_bin("openstack"))
        .args(args)
        .env(
            "OS_CLIENT_CONFIG_FILE",
            service_boot::test_cloud_dir().join("clouds.yaml"),
        )
        .env("OS_CLOUD", "local-admin")
        .output()
        .expect("openstack runs")
}

fn run_script(zones: &[AvailabilityZone]) -> Output {
    let env = aggregate_env(
        "http://127.0.0.1:5000/v3",
        "admin",
        "admin",
        "http://127.0.0.1:8774/v2.1",
        zones,
    );
    Command::new(venv_bin("python3"))
        .args(["-c", AGGREGATE_SCRIPT])
        .envs(env)
        .env("OS_PASSWORD", admin_password())
        .output()
        .expect("python3 runs")
}

/// The `cp-az-proof-*` aggregates: name → (zone, hosts).
fn ours() -> Vec<(String, String)> {
    let out = openstack(&["aggregate", "list", "--long", "-f", "json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).expect("json");
    let mut r: Vec<(String, String)> = v
        .iter()
        .filter_map(|a| {
            let name = a["Name"].as_str()?;
            name.starts_with("cp-az-proof-").then(|| {
                (
                    name.to_string(),
                    a["Availability Zone"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                )
            })
        })
        .collect();
    r.sort();
    r
}

struct Cleanup;
impl Drop for Cleanup {
    fn drop(&mut self) {
        for z in ZONES {
            let _ = openstack(&["aggregate", "delete", z]);
        }
    }
}

fn zone(name: &str, hosts: &[&str]) -> AvailabilityZone {
    AvailabilityZone {
        name: name.into(),
        compute_hosts: hosts.iter().map(|h| h.to_string()).collect(),
        ..AvailabilityZone::default()
    }
}

#[test]
fn the_aggregate_script_converges_on_a_real_nova() {
    // Leftovers of an interrupted run first, then ours at the end.
    drop(Cleanup);
    let _cleanup = Cleanup;
    // An aggregate of the third zone's name without a zone: the script corrects it.
    let pre = openstack(&["aggregate", "create", ZONES[2]]);
    assert!(
        pre.status.success(),
        "{}",
        String::from_utf8_lossy(&pre.stderr)
    );

    let zones: Vec<_> = ZONES.iter().map(|z| zone(z, &[])).collect();
    let first = run_script(&zones);
    let log = String::from_utf8_lossy(&first.stdout).to_string();
    assert!(
        first.status.success(),
        "{log}{}",
        String::from_utf8_lossy(&first.stderr)
    );
    assert!(
        log.contains("aggregate cp-az-proof-1 created in zone cp-az-proof-1"),
        "{log}"
    );
    assert!(
        log.contains("aggregate cp-az-proof-3 moved to zone cp-az-proof-3"),
        "{log}"
    );
    let want: Vec<(String, String)> = ZONES
        .iter()
        .map(|z| (z.to_string(), z.to_string()))
        .collect();
    assert_eq!(ours(), want);

    // Idempotent: nothing created or moved the second time.
    let second = run_script(&zones);
    let log2 = String::from_utf8_lossy(&second.stdout).to_string();
    assert!(second.status.success(), "{log2}");
    assert!(
        !log2.contains("created") && !log2.contains("moved"),
        "{log2}"
    );
    assert!(log2.contains("zones ready: cp-az-proof-1, cp-az-proof-2, cp-az-proof-3"));
    assert_eq!(ours(), want);

    // A host that never registered (a hypervisor not installed yet): the run succeeds, names
    // it, and leaves the zones in place; the operator runs it again once the host registers.
    let ghost = vec![
        zone(ZONES[0], &[]),
        zone(ZONES[1], &["cp-az-proof-ghost"]),
        zone(ZONES[2], &[]),
    ];
    let third = run_script(&ghost);
    let log3 = String::from_utf8_lossy(&third.stdout).to_string();
    assert!(
        third.status.success(),
        "{log3}{}",
        String::from_utf8_lossy(&third.stderr)
    );
    assert!(
        log3.contains(
            "compute hosts not registered yet (added once they register): cp-az-proof-ghost"
        ),
        "{log3}"
    );
    assert!(log3.contains("zones ready: cp-az-proof-1, cp-az-proof-2, cp-az-proof-3"));
    assert_eq!(ours(), want);
}
