//! The Zun port against the real zun-api of the test cloud (zun-compute,
//! Docker, kuryr and Neutron all real), as tenant `ZUN_TENANT_CLOUD`
//! (`local-demo`) on its network `ZUN_NETWORK` (`zun-pods`).

use crate::common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use openstack::adapter::{ClientOptions, CloudSelector, ContainerAdapter, Core, Metrics};
use openstack::container::{
    Container, LogOptions, ZunContainer, ZunContainerCreate, ZunNet, status,
};

async fn tenant() -> Option<(ContainerAdapter, Core)> {
    if common::skipped() {
        return None;
    }
    let file = std::env::var("OS_CLIENT_CONFIG_FILE").unwrap_or_default();
    let cloud = std::env::var("ZUN_TENANT_CLOUD").unwrap_or_default();
    assert!(
        !file.is_empty() && !cloud.is_empty(),
        "Zun tests need the test cloud's Zun tenant: run `eval \"$(scripts/test-cloud env)\"` \
         (it sets ZUN_TENANT_CLOUD and ZUN_NETWORK) or set OPENSTACK_TESTS=skip"
    );
    let core = Core::connect(
        &CloudSelector::File {
            path: file.into(),
            cloud,
        },
        ClientOptions {
            requests_per_second: 0,
            timeout: Duration::from_secs(60),
            metrics: Metrics::new(),
            ..ClientOptions::default()
        },
    )
    .await
    .expect("connecting as the Zun tenant");
    let z = ContainerAdapter::new(core.clone());
    WARM.get_or_init(|| warm_network(&z)).await;
    Some((z, core))
}

/// Set once the tenant network's Docker network exists on the compute host.
static WARM: tokio::sync::OnceCell<()> = tokio::sync::OnceCell::const_new();

/// Has Zun make the Docker network of `ZUN_NETWORK` with one container before
/// the tests run theirs side by side: stock Zun races when the first containers
/// on a network arrive together on a fresh host (its retry on the unique
/// `neutron_net_id` misreads MariaDB's duplicate-key error), and the loser
/// ends in `Error` with "A network with UUID … already exists". The network
/// stays after its containers go, so one warm-up serves every test.
async fn warm_network(z: &ContainerAdapter) {
    let name = common::unique("zun-warm");
    let c = z
        .create_container(&request(&name, None, vec!["true"]))
        .await
        .expect("create the warm-up container");
    let done = wait_status(
        z,
        &c.uuid,
        &[status::RUNNING, status::STOPPED, status::ERROR],
    )
    .await;
    cleanup(z, &c.uuid).await;
    assert_ne!(
        done.status,
        status::ERROR,
        "warm-up container: {:?}",
        done.status_reason
    );
}

fn network() -> String {
    std::env::var("ZUN_NETWORK").unwrap_or_else(|_| "zun-pods".into())
}

fn request(name: &str, entrypoint: Option<Vec<&str>>, command: Vec<&str>) -> ZunContainerCreate {
    let owned = |v: Vec<&str>| v.into_iter().map(str::to_string).collect::<Vec<_>>();
    ZunContainerCreate {
        name: name.into(),
        image: "busybox".into(),
        entrypoint: entrypoint.map(owned),
        command: Some(owned(command)),
        cpu: Some(0.1),
        memory: Some(32),
        labels: BTreeMap::from([("ost-test".to_string(), name.to_string())]),
        nets: vec![ZunNet {
            network: Some(network()),
            ..Default::default()
        }],
        run: true,
        ..Default::default()
    }
}

async fn wait_status(z: &ContainerAdapter, id: &str, want: &[&str]) -> ZunContainer {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let c = z.get_container(id).await.expect("get_container");
        if want.contains(&c.status.as_str()) || Instant::now() > deadline {
            return c;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

async fn wait_logs(z: &ContainerAdapter, id: &str, needle: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let l = z
            .container_logs(id, &LogOptions::default())
            .await
            .expect("logs");
        if l.contains(needle) || Instant::now() > deadline {
            return l;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

async fn cleanup(z: &ContainerAdapter, id: &str) {
    let _ = z.delete_container(id, true, false).await;
}

#[tokio::test]
async fn create_run_logs_exec_stop_delete() {
    let Some((z, _core)) = tenant().await else {
        return;
    };
    let name = common::unique("zun");
    let c = z
        .create_container(&request(
            &name,
            Some(vec!["sh", "-c"]),
            vec!["echo hello-zun; sleep 300"],
        ))
        .await
        .expect("create");
    let running = wait_status(&z, &c.uuid, &[status::RUNNING, status::ERROR]).await;
    assert_eq!(
        running.status,
        status::RUNNING,
        "{:?}",
        running.status_reason
    );
    assert!(
        running.ips().iter().any(|ip| ip.starts_with("10.240.")),
        "{:?}",
        running.addresses
    );
    assert_eq!(
        running.entrypoint.as_deref(),
        Some(&["sh".to_string(), "-c".to_string()][..])
    );
    let mine = BTreeMap::from([("ost-test".to_string(), name.clone())]);
    let listed = z.list_containers(&mine, None).await.expect("list");
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].uuid, c.uuid);
    assert_eq!(
        z.list_containers(&mine, Some("no-such-name"))
            .await
            .expect("list")
            .len(),
        0
    );
    let logs = wait_logs(&z, &c.uuid, "hello-zun").await;
    assert!(logs.contains("hello-zun"), "{logs:?}");
    let out = z
        .exec(&c.uuid, &["echo".into(), "in exec".into()])
        .await
        .expect("exec");
    assert_eq!(out.output.trim(), "in exec");
    assert_eq!(out.exit_code, Some(0));
    let out = z
        .exec(&c.uuid, &["sh".into(), "-c".into(), "exit 4".into()])
        .await
        .expect("exec");
    assert_eq!(out.exit_code, Some(4));
    z.stop_container(&c.uuid, 1).await.expect("stop");
    let stopped = wait_status(&z, &c.uuid, &[status::STOPPED]).await;
    assert_eq!(stopped.status, status::STOPPED);
    assert!(stopped.exit_code().is_some(), "{:?}", stopped.status_detail);
    z.delete_container(&c.uuid, false, false)
        .await
        .expect("delete");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match z.get_container(&c.uuid).await {
            Err(e) if e.is_not_found() => break,
            _ if Instant::now() > deadline => panic!("container still there after delete"),
            _ => tokio::time::sleep(Duration::from_millis(500)).await,
        }
    }
}

#[tokio::test]
async fn exit_code_and_entrypoint_with_args() {
    let Some((z, _core)) = tenant().await else {
        return;
    };
    let name = common::unique("zun-exit");
    // ENTRYPOINT ["sh", "-c"] + CMD ["echo $0-args; exit 3", "x"]: Kubernetes'
    // command and args as Docker joins them.
    let c = z
        .create_container(&request(
            &name,
            Some(vec!["sh", "-c"]),
            vec!["echo $0-args; exit 3", "x"],
        ))
        .await
        .expect("create");
    let done = wait_status(&z, &c.uuid, &[status::STOPPED, status::ERROR]).await;
    assert_eq!(done.status, status::STOPPED, "{:?}", done.status_reason);
    assert_eq!(done.exit_code(), Some(3), "{:?}", done.status_detail);
    let logs = wait_logs(&z, &c.uuid, "x-args").await;
    assert!(logs.contains("x-args"), "{logs:?}");
    cleanup(&z, &c.uuid).await;
}

#[tokio::test]
async fn not_found_and_conflicts() {
    let Some((z, _core)) = tenant().await else {
        return;
    };
    let ghost = uuid::Uuid::new_v4().to_string();
    assert!(z.get_container(&ghost).await.unwrap_err().is_not_found());
    assert!(
        z.delete_container(&ghost, true, false)
            .await
            .unwrap_err()
            .is_not_found()
    );
    assert!(
        z.container_logs(&ghost, &LogOptions::default())
            .await
            .unwrap_err()
            .is_not_found()
    );
    assert!(z.get_capsule(&ghost).await.unwrap_err().is_not_found());
    let name = common::unique("zun-conflict");
    let c = z
        .create_container(&request(&name, None, vec!["sleep", "300"]))
        .await
        .expect("create");
    let running = wait_status(&z, &c.uuid, &[status::RUNNING, status::ERROR]).await;
    assert_eq!(
        running.status,
        status::RUNNING,
        "{:?}",
        running.status_reason
    );
    let e = z.delete_container(&c.uuid, false, false).await.unwrap_err();
    assert!(
        e.is_conflict(),
        "deleting a running container without stop: {e}"
    );
    assert!(e.message().contains("Running"), "Zun's text is kept: {e}");
    z.stop_container(&c.uuid, 0).await.expect("stop");
    wait_status(&z, &c.uuid, &[status::STOPPED]).await;
    let e = z.stop_container(&c.uuid, 0).await.unwrap_err();
    assert!(e.is_conflict(), "stopping a stopped container: {e}");
    let e = z.exec(&c.uuid, &["true".into()]).await.unwrap_err();
    assert!(e.is_conflict(), "exec in a stopped container: {e}");
    z.start_container(&c.uuid).await.expect("start again");
    let again = wait_status(&z, &c.uuid, &[status::RUNNING]).await;
    assert_eq!(again.status, status::RUNNING);
    cleanup(&z, &c.uuid).await;
}

#[tokio::test]
async fn zones_and_quota() {
    let Some((z, core)) = tenant().await else {
        return;
    };
    let zones = z.list_availability_zones().await.expect("zones");
    assert!(zones.iter().any(|z| z == "nova"), "{zones:?}");
    let project = core.current_project_id().expect("a project-scoped token");
    // Quota reads are admin-only in the test cloud's policy; the admin reads
    // the tenant's.
    let admin = ContainerAdapter::new(common::core().await);
    let q = admin.get_quota(&project).await.expect("quota");
    assert!(
        q.containers.is_limited() && q.containers.limit >= 1.0,
        "{q:?}"
    );
    assert!(q.memory.is_limited());
    assert!(q.containers.in_use >= 0.0);
}
