use super::*;
use std::os::unix::fs::MetadataExt;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{
    EmptyDirVolumeSource, PodSecurityContext, PodSpec, Secret, SecretVolumeSource, Volume,
    VolumeMount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

fn pod(fs_group: Option<i64>) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some("p".into()),
            namespace: Some("ns".into()),
            uid: Some("u1".into()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            security_context: Some(PodSecurityContext {
                fs_group,
                ..Default::default()
            }),
            volumes: Some(vec![
                Volume {
                    name: "creds".into(),
                    secret: Some(SecretVolumeSource {
                        secret_name: Some("s".into()),
                        default_mode: Some(0o400),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
                Volume {
                    name: "scratch".into(),
                    empty_dir: Some(EmptyDirVolumeSource::default()),
                    ..Default::default()
                },
            ]),
            containers: vec![Container {
                name: "c".into(),
                image: Some("img".into()),
                volume_mounts: Some(vec![
                    VolumeMount {
                        name: "creds".into(),
                        mount_path: "/etc/creds".into(),
                        ..Default::default()
                    },
                    VolumeMount {
                        name: "scratch".into(),
                        mount_path: "/work".into(),
                        ..Default::default()
                    },
                    VolumeMount {
                        name: "creds".into(),
                        mount_path: "/etc/one-key".into(),
                        sub_path: Some("pw".into()),
                        ..Default::default()
                    },
                ]),
                ..Default::default()
            }],
            ..Default::default()
        }),
        status: None,
    }
}

fn secret(v: &str) -> BTreeMap<String, Secret> {
    [(
        "s".to_string(),
        Secret {
            data: Some([("pw".to_string(), ByteString(v.as_bytes().to_vec()))].into()),
            ..Default::default()
        },
    )]
    .into()
}

fn set(p: &Pod, secrets: &BTreeMap<String, Secret>) -> FileSet {
    let cfg = vk_zun::translate::Config::default();
    let tokens = BTreeMap::new();
    let cms = BTreeMap::new();
    vk_zun::volumes::files(
        p,
        Role::Main,
        "c",
        &vk_zun::volumes::Sources {
            config_maps: &cms,
            secrets,
            tokens: &tokens,
            cfg: &cfg,
            node_cpu: 1.0,
        },
    )
    .unwrap()
}

// The test runs as root on the test machines (chown needs it); elsewhere it checks what it
// can without.
fn root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

#[test]
fn mounts_map_volumes_to_host_paths() {
    let p = pod(None);
    let d = Path::new("/state/pods/u1");
    let m = mounts(&p, Role::Main, &p.spec.as_ref().unwrap().containers[0], d);
    assert_eq!(m.len(), 3);
    assert_eq!(m[0].bind(), "/state/pods/u1/c/main-c/m0:/etc/creds:ro");
    assert_eq!(m[1].bind(), "/state/pods/u1/empty/scratch:/work");
    assert_eq!(m[2].bind(), "/state/pods/u1/c/main-c/m2:/etc/one-key:ro");
}

#[test]
fn secret_files_keep_their_mode_and_take_the_fs_group() {
    let dir = tempfile::tempdir().unwrap();
    let gid = if root() { Some(4242) } else { None };
    let p = pod(gid.map(i64::from));
    let pdir = dir.path().join("pods/u1");
    let c = &p.spec.as_ref().unwrap().containers[0];
    let ms = mounts(&p, Role::Main, c, &pdir);
    materialize(&set(&p, &secret("one")), &ms, gid).unwrap();
    prepare_empty_dirs(&p, &pdir).unwrap();
    let f = ms[0].host.join("pw");
    assert_eq!(std::fs::read_to_string(&f).unwrap(), "one");
    let meta = std::fs::metadata(&f).unwrap();
    match gid {
        // 0400 | 0440 (the kubelet's read-only volume ownership), group fsGroup.
        Some(g) => {
            assert_eq!(meta.mode() & 0o7777, 0o440);
            assert_eq!(meta.gid(), g);
            let e = std::fs::metadata(pdir.join("empty/scratch")).unwrap();
            assert_eq!(e.mode() & 0o7777, 0o2777);
            assert_eq!(e.gid(), g);
        }
        None => assert_eq!(meta.mode() & 0o7777, 0o400),
    }
    // The atomic writer's layout: `pw` → `..data/pw`, `..data` → a version directory.
    assert_eq!(
        std::fs::read_link(ms[0].host.join("pw")).unwrap(),
        Path::new("..data/pw")
    );
    let v1 = std::fs::read_link(ms[0].host.join("..data")).unwrap();
    // A subPath mount is a file of its own.
    assert_eq!(std::fs::read_to_string(&ms[2].host).unwrap(), "one");
    // An edited Secret: a new version, swapped in, the old one removed.
    materialize(&set(&p, &secret("two")), &ms, gid).unwrap();
    assert_eq!(std::fs::read_to_string(&f).unwrap(), "two");
    let v2 = std::fs::read_link(ms[0].host.join("..data")).unwrap();
    assert_ne!(v1, v2);
    assert!(!ms[0].host.join(&v1).exists());
}

#[test]
fn termination_logs_and_log_tails() {
    let dir = tempfile::tempdir().unwrap();
    let p = termination_log(dir.path(), 2).unwrap();
    assert_eq!(read_termination_log(dir.path(), 2), None);
    std::fs::write(&p, "x".repeat(5000)).unwrap();
    assert_eq!(read_termination_log(dir.path(), 2).unwrap().len(), 4096);
    let log: String = (0..100).map(|i| format!("line {i}\n")).collect();
    let m = log_tail_message(&log);
    assert!(m.starts_with("line 20\n"), "{m}");
    assert!(m.ends_with("line 99"));
    assert_eq!(log_tail_message(&"y".repeat(3000)).len(), 2048);
}
