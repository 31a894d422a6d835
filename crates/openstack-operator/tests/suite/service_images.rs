//! The service images are built for real (scripts/build-images: a debootstrapped Debian base,
//! a wheelhouse from the release's upper-constraints, one build per service with the test
//! cloud's Docker engine) and run: each answers with its service's command as a non-root user,
//! carries the labels naming its release, package and constraints, and has the name the
//! control-plane kinds default to.

use std::path::Path;
use std::process::Command;

use controlplane_api::{DEFAULT_RELEASE, ServiceName};

const SERVICES: [ServiceName; 7] = [
    ServiceName::Keystone,
    ServiceName::Glance,
    ServiceName::Placement,
    ServiceName::Nova,
    ServiceName::Neutron,
    ServiceName::Cinder,
    ServiceName::Horizon,
];

fn sha256(path: &Path) -> String {
    let out = Command::new("sha256sum")
        .arg(path)
        .output()
        .expect("sha256sum");
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_string()
}

#[test]
fn every_service_image_builds_runs_and_is_labelled() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = Command::new(root.join("scripts/build-images"))
        .arg("--smoke")
        .current_dir(&root)
        .output()
        .expect("run scripts/build-images");
    let log = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("{log}");
    assert!(out.status.success(), "scripts/build-images --smoke failed");
    let tc = std::env::var("TEST_CLOUD_DIR")
        .unwrap_or_else(|_| "/var/cache/openstack-operator/test-cloud".into());
    let docker_host =
        std::env::var("DOCKER_HOST").unwrap_or_else(|_| format!("unix://{tc}/run/docker.sock"));
    for service in SERVICES {
        let image = service.default_image(DEFAULT_RELEASE);
        // Ran as the pods' uid, not root (the smoke check prints `id -u` last).
        let ran = log
            .lines()
            .find(|l| l.contains(&format!("{image} runs:")))
            .unwrap_or_else(|| panic!("{image} was not run by the smoke check"));
        assert!(ran.trim_end().ends_with("42425"), "{ran}");
        let inspect = Command::new("docker")
            .env("DOCKER_HOST", &docker_host)
            .args(["image", "inspect", "-f", "{{json .Config.Labels}}", &image])
            .output()
            .expect("docker image inspect");
        assert!(inspect.status.success(), "{image} is not in the engine");
        let labels: serde_json::Value =
            serde_json::from_slice(&inspect.stdout).expect("labels are JSON");
        assert_eq!(
            labels["se.sunet.openstack.release"], DEFAULT_RELEASE,
            "{image}"
        );
        let constraints = match service {
            ServiceName::Horizon => "scripts/test-cloud.d/constraints-horizon.txt",
            _ => "scripts/test-cloud.d/constraints.txt",
        };
        assert_eq!(
            labels["se.sunet.openstack.upper-constraints-sha256"],
            sha256(&root.join(constraints)),
            "{image}"
        );
        let package = labels["se.sunet.openstack.package"]
            .as_str()
            .unwrap_or_default();
        let requirements = std::fs::read_to_string(
            root.join("deploy/images")
                .join(service.as_str())
                .join("requirements.txt"),
        )
        .expect("requirements.txt");
        assert!(
            !package.is_empty() && requirements.lines().any(|l| l == package),
            "{image}: package label {package:?} is the first pin of its requirements"
        );
    }
}
