//! The `credential-migrate` Job's script, run by a real Python against a key directory laid
//! out as a mounted Secret (files behind `..data` symlinks), with a stand-in `keystone-manage`
//! that records what it was given. The real `keystone-manage credential_migrate` runs it in
//! the `keystone_boot` proof; this test pins the script's guard and its hash, which must equal
//! `KeyRepository::set_hash`.

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::process::Command;

use controlplane_render::KeyRepository;
use controlplane_render::credential_keys::{MAX_ACTIVE_KEYS, MIGRATE_SCRIPT, migrate_env};

/// Writes `repo` as the kubelet lays out a Secret volume: a timestamped directory, `..data`
/// pointing at it, and each key a symlink through `..data`.
fn mount(dir: &Path, repo: &KeyRepository) {
    let data = dir.join("..2026_12_01_00_00_00.1");
    std::fs::create_dir_all(&data).expect("data dir");
    for (name, key) in repo.files() {
        std::fs::write(data.join(&name), key).expect("key");
        std::os::unix::fs::symlink(format!("..data/{name}"), dir.join(&name)).expect("link");
    }
    std::os::unix::fs::symlink("..2026_12_01_00_00_00.1", dir.join("..data")).expect("..data");
}

/// A `keystone-manage` that saves its arguments and the key repository it was pointed at.
fn fake_manage(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("keystone-manage");
    let record = dir.join("record");
    std::fs::write(
        &path,
        format!(
            "#!/bin/sh\nset -e\necho \"$@\" > {rec}/args\nconf=\"$4\"\ncp \"$conf\" {rec}/override.conf\nkeys=$(sed -n 's/^key_repository = //p' \"$conf\")\nmkdir -p {rec}/keys && cp \"$keys\"/* {rec}/keys/\nexit \"${{FAKE_EXIT:-0}}\"\n",
            rec = record.display()
        ),
    )
    .expect("fake keystone-manage");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    std::fs::create_dir_all(&record).expect("record dir");
    path
}

fn run(dir: &Path, repo_dir: &Path, expected: &str, exit: &str) -> std::process::Output {
    let mut cmd = Command::new("python3");
    cmd.arg("-c").arg(MIGRATE_SCRIPT);
    for (k, v) in migrate_env(
        &repo_dir.display().to_string(),
        "/etc/keystone/keystone.conf",
        expected,
    ) {
        cmd.env(k, v);
    }
    cmd.env("KEYSTONE_MANAGE", fake_manage(dir))
        .env("FAKE_EXIT", exit)
        .output()
        .expect("python3 runs")
}

#[test]
fn migrates_only_the_key_set_it_was_made_for() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let repo_dir = tmp.path().join("credential-keys");
    std::fs::create_dir_all(&repo_dir).expect("repo dir");
    let repo = KeyRepository::generate().rotate(MAX_ACTIVE_KEYS);
    mount(&repo_dir, &repo);

    // The right key set: keystone-manage runs on a private copy of exactly these keys.
    let out = run(tmp.path(), &repo_dir, &repo.set_hash(), "0");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rec = tmp.path().join("record");
    let args = std::fs::read_to_string(rec.join("args")).expect("args");
    assert!(
        args.starts_with("--config-file /etc/keystone/keystone.conf --config-file ")
            && args.contains(" credential_migrate --keystone-user "),
        "{args}"
    );
    let override_conf = std::fs::read_to_string(rec.join("override.conf")).expect("override");
    assert!(override_conf.starts_with("[credential]\nkey_repository = "));
    assert!(
        !override_conf.contains(&repo_dir.display().to_string()),
        "a copy, not the read-only mount"
    );
    let copied: Vec<(String, Vec<u8>)> = std::fs::read_dir(rec.join("keys"))
        .expect("copied keys")
        .flatten()
        .map(|e| {
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).expect("key"),
            )
        })
        .collect();
    let back = KeyRepository::from_files(copied.iter().map(|(k, v)| (k, v.as_slice())))
        .expect("the copy is a key repository");
    assert_eq!(back, repo);

    // keystone-manage's failure is the Job's failure.
    let out = run(tmp.path(), &repo_dir, &repo.set_hash(), "3");
    assert_eq!(out.status.code(), Some(3));

    // Another key set (the Secret has not reached this pod): refused, keystone-manage not run.
    std::fs::remove_file(rec.join("args")).expect("reset");
    let newer = repo.rotate(MAX_ACTIVE_KEYS);
    let out = run(tmp.path(), &repo_dir, &newer.set_hash(), "0");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!(
            "are key set {}, not {}",
            repo.set_hash(),
            newer.set_hash()
        )),
        "{err}"
    );
    assert!(!rec.join("args").exists(), "keystone-manage did not run");
}
