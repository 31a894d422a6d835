use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use serde_json::json;

use super::*;

fn pod(spec: serde_json::Value) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": "p", "namespace": "ns", "uid": "u-1",
                     "labels": {"app": "web", "tier": "a\"b"}},
        "spec": spec
    }))
    .unwrap()
}

fn one(volumes: serde_json::Value, mounts: serde_json::Value) -> Pod {
    pod(json!({
        "volumes": volumes,
        "containers": [{"name": "c", "image": "busybox", "volumeMounts": mounts}]
    }))
}

fn refusal(p: &Pod) -> String {
    match validate(p.spec.as_ref().unwrap()) {
        Err(TranslateError::Unsupported { field, why }) => format!("{field}: {why}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

fn cm(name: &str, data: &[(&str, &str)]) -> (String, ConfigMap) {
    let mut c = ConfigMap {
        data: Some(
            data.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        ),
        ..Default::default()
    };
    c.metadata.name = Some(name.into());
    (name.into(), c)
}

struct Src {
    cms: BTreeMap<String, ConfigMap>,
    secrets: BTreeMap<String, Secret>,
    tokens: BTreeMap<TokenKey, String>,
    cfg: Config,
}

impl Src {
    fn new() -> Self {
        Src {
            cms: BTreeMap::new(),
            secrets: BTreeMap::new(),
            tokens: BTreeMap::new(),
            cfg: Config::default(),
        }
    }
    fn get(&self) -> Sources<'_> {
        Sources {
            config_maps: &self.cms,
            secrets: &self.secrets,
            tokens: &self.tokens,
            cfg: &self.cfg,
            node_cpu: 4.0,
        }
    }
}

fn file<'a>(f: &'a FileSet, path: &str) -> Option<(u32, &'a [u8])> {
    f.entries.iter().find_map(|e| match e {
        Entry::File {
            path: p,
            mode,
            data,
        } if p == path => Some((*mode, data.as_slice())),
        _ => None,
    })
}

fn link<'a>(f: &'a FileSet, path: &str) -> Option<&'a str> {
    f.entries.iter().find_map(|e| match e {
        Entry::Link { path: p, target } if p == path => Some(target.as_str()),
        _ => None,
    })
}

/// Follow `<root>/<name>` → `..data/<name>` → `..<version>/<name>`.
fn read<'a>(f: &'a FileSet, root: &str, name: &str) -> Option<(u32, &'a [u8])> {
    assert_eq!(
        link(f, &format!("{root}/{name}"))?,
        format!("..data/{name}")
    );
    let v = link(f, &format!("{root}/..data"))?;
    file(f, &format!("{root}/{v}/{name}"))
}

#[test]
fn unsupported_volume_types_are_refused_by_field() {
    let p = one(
        json!([{"name": "h", "hostPath": {"path": "/etc"}}]),
        json!([]),
    );
    assert!(refusal(&p).starts_with("spec.volumes[0].hostPath: "));
    let p = one(
        json!([{"name": "cfg", "configMap": {"name": "x"}},
               {"name": "data", "persistentVolumeClaim": {"claimName": "d"}}]),
        json!([]),
    );
    let r = refusal(&p);
    assert!(
        r.starts_with("spec.volumes[1].persistentVolumeClaim: "),
        "{r}"
    );
    assert!(r.contains("\"data\""), "{r}");
    let p = one(
        json!([{"name": "n", "nfs": {"server": "s", "path": "/"}}]),
        json!([]),
    );
    assert!(refusal(&p).starts_with("spec.volumes[0].nfs: "));
}

#[test]
fn memory_medium_size_limit_and_shared_empty_dir_are_refused() {
    let p = one(
        json!([{"name": "m", "emptyDir": {"medium": "Memory"}}]),
        json!([]),
    );
    assert!(refusal(&p).starts_with("spec.volumes[0].emptyDir.medium: "));
    let p = one(
        json!([{"name": "m", "emptyDir": {"sizeLimit": "1Gi"}}]),
        json!([]),
    );
    assert!(refusal(&p).starts_with("spec.volumes[0].emptyDir.sizeLimit: "));
    // An init container handing files to the app: supported (copied before the app starts).
    let p = pod(json!({
        "volumes": [{"name": "shared", "emptyDir": {}}],
        "initContainers": [{"name": "i", "image": "b", "volumeMounts": [{"name": "shared", "mountPath": "/s"}]}],
        "containers": [{"name": "c", "image": "b", "volumeMounts": [{"name": "shared", "mountPath": "/s"}]}]
    }));
    assert!(validate(p.spec.as_ref().unwrap()).is_ok());
    // Two regular containers sharing it live (a sidecar): refused, naming both.
    let p = pod(json!({
        "volumes": [{"name": "shared", "emptyDir": {}}],
        "containers": [
            {"name": "app", "image": "b", "volumeMounts": [{"name": "shared", "mountPath": "/s"}]},
            {"name": "shipper", "image": "b", "volumeMounts": [{"name": "shared", "mountPath": "/s", "readOnly": true}]}]
    }));
    let r = refusal(&p);
    assert!(r.starts_with("spec.volumes[0].emptyDir: "), "{r}");
    assert!(
        r.contains("containers app, shipper, which run at the same time"),
        "{r}"
    );
    // Both reading an init container's output read-only: each gets a copy.
    let p = pod(json!({
        "volumes": [{"name": "shared", "emptyDir": {}}],
        "initContainers": [{"name": "i", "image": "b", "volumeMounts": [{"name": "shared", "mountPath": "/s"}]}],
        "containers": [
            {"name": "a", "image": "b", "volumeMounts": [{"name": "shared", "mountPath": "/s", "readOnly": true}]},
            {"name": "b", "image": "b", "volumeMounts": [{"name": "shared", "mountPath": "/t", "readOnly": true}]}]
    }));
    assert!(validate(p.spec.as_ref().unwrap()).is_ok());
    // A subPath of a handed-over volume: refused at the mount.
    let p = pod(json!({
        "volumes": [{"name": "shared", "emptyDir": {}}],
        "initContainers": [{"name": "i", "image": "b", "volumeMounts": [{"name": "shared", "mountPath": "/s"}]}],
        "containers": [{"name": "c", "image": "b", "volumeMounts": [{"name": "shared", "mountPath": "/s", "subPath": "x"}]}]
    }));
    let r = refusal(&p);
    assert!(
        r.starts_with("spec.containers[0].volumeMounts[0].subPath: "),
        "{r}"
    );
    // One container alone may use it.
    let p = one(
        json!([{"name": "e", "emptyDir": {}}]),
        json!([{"name": "e", "mountPath": "/scratch"}]),
    );
    assert!(validate(p.spec.as_ref().unwrap()).is_ok());
}

#[test]
fn mount_fields_that_cannot_be_honoured_are_refused() {
    let v = json!([{"name": "e", "emptyDir": {}}]);
    let p = one(
        v.clone(),
        json!([{"name": "e", "mountPath": "/x", "subPathExpr": "$(POD)"}]),
    );
    assert!(refusal(&p).starts_with("spec.containers[0].volumeMounts[0].subPathExpr: "));
    let p = one(
        v.clone(),
        json!([{"name": "e", "mountPath": "/x", "mountPropagation": "Bidirectional"}]),
    );
    assert!(refusal(&p).starts_with("spec.containers[0].volumeMounts[0].mountPropagation: "));
    let p = one(v.clone(), json!([{"name": "nope", "mountPath": "/x"}]));
    assert!(refusal(&p).starts_with("spec.containers[0].volumeMounts[0].name: "));
    let p = one(v, json!([{"name": "e", "mountPath": "/"}]));
    assert!(refusal(&p).starts_with("spec.containers[0].volumeMounts[0].mountPath: "));
    let p = one(
        json!([{"name": "d", "downwardAPI": {"items": [{"path": "n", "fieldRef": {"fieldPath": "spec.nodeName"}}]}}]),
        json!([]),
    );
    assert!(refusal(&p).starts_with("spec.volumes[0].downwardAPI.items[0].fieldRef.fieldPath: "));
}

#[test]
fn config_map_is_laid_out_as_the_atomic_writer_does() {
    let p = one(
        json!([{"name": "cfg", "configMap": {"name": "app", "defaultMode": 0o640,
                "items": [{"key": "a", "path": "conf/a.txt"}, {"key": "b", "path": "b", "mode": 0o600}]}}]),
        json!([{"name": "cfg", "mountPath": "/etc/app/"}]),
    );
    assert!(validate(p.spec.as_ref().unwrap()).is_ok());
    let mut s = Src::new();
    s.cms
        .extend([cm("app", &[("a", "A"), ("b", "B"), ("unused", "U")])]);
    let f = files(&p, Role::Main, "c", &s.get()).unwrap();
    assert_eq!(read(&f, "/etc/app", "b"), Some((0o600, &b"B"[..])));
    let v = link(&f, "/etc/app/..data").unwrap().to_string();
    assert!(v.starts_with(".."), "{v}");
    assert_eq!(link(&f, "/etc/app/conf"), Some("..data/conf"));
    assert_eq!(
        file(&f, &format!("/etc/app/{v}/conf/a.txt")),
        Some((0o640, &b"A"[..]))
    );
    assert!(
        f.entries
            .iter()
            .all(|e| !matches!(e, Entry::File { path, .. } if path.contains("unused")))
    );
    // A change of content is a new version directory and a new hash.
    s.cms.extend([cm("app", &[("a", "A2"), ("b", "B")])]);
    let g = files(&p, Role::Main, "c", &s.get()).unwrap();
    assert_ne!(f.hash, g.hash);
    assert_ne!(link(&g, "/etc/app/..data").unwrap(), v);
    // The same content is the same hash.
    assert_eq!(g, files(&p, Role::Main, "c", &s.get()).unwrap());
}

#[test]
fn missing_objects_wait_unless_optional() {
    let p = one(
        json!([{"name": "cfg", "configMap": {"name": "app"}}]),
        json!([{"name": "cfg", "mountPath": "/cfg"}]),
    );
    let s = Src::new();
    assert!(matches!(
        files(&p, Role::Main, "c", &s.get()),
        Err(TranslateError::MissingReference(m)) if m.contains("\"app\"")
    ));
    let p = one(
        json!([{"name": "cfg", "secret": {"secretName": "s", "optional": true}}]),
        json!([{"name": "cfg", "mountPath": "/cfg"}]),
    );
    let f = files(&p, Role::Main, "c", &s.get()).unwrap();
    assert!(link(&f, "/cfg/..data").is_some());
    // A missing key in items waits too.
    let p = one(
        json!([{"name": "cfg", "configMap": {"name": "app", "items": [{"key": "x", "path": "x"}]}}]),
        json!([{"name": "cfg", "mountPath": "/cfg"}]),
    );
    let mut s = Src::new();
    s.cms.extend([cm("app", &[("a", "A")])]);
    assert!(matches!(
        files(&p, Role::Main, "c", &s.get()),
        Err(TranslateError::MissingReference(m)) if m.contains("key x")
    ));
}

#[test]
fn secret_downward_token_and_empty_dir() {
    let p = pod(json!({
        "volumes": [
            {"name": "sec", "secret": {"secretName": "db"}},
            {"name": "info", "downwardAPI": {"items": [
                {"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}},
                {"path": "name", "fieldRef": {"fieldPath": "metadata.name"}},
                {"path": "mem", "resourceFieldRef": {"containerName": "c", "resource": "limits.memory", "divisor": "1Mi"}}]}},
            {"name": "kube-api-access-x", "projected": {"sources": [
                {"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}},
                {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}]}}]}},
            {"name": "scratch", "emptyDir": {}}
        ],
        "containers": [{"name": "c", "image": "busybox",
            "resources": {"limits": {"memory": "64Mi"}},
            "volumeMounts": [
                {"name": "sec", "mountPath": "/sec"},
                {"name": "info", "mountPath": "/info"},
                {"name": "kube-api-access-x", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": true},
                {"name": "scratch", "mountPath": "/scratch"},
                {"name": "sec", "mountPath": "/one/pw", "subPath": "password"}]}]
    }));
    assert!(validate(p.spec.as_ref().unwrap()).is_ok());
    let refs = references(&p);
    assert_eq!(refs.secrets.iter().collect::<Vec<_>>(), ["db"]);
    assert_eq!(
        refs.tokens,
        vec![TokenSource {
            key: (2, 0),
            audience: None,
            expiration_seconds: 3607
        }]
    );
    let mut s = Src::new();
    let sec = Secret {
        data: Some([("password".to_string(), ByteString(b"hunter2".to_vec()))].into()),
        ..Default::default()
    };
    s.secrets.insert("db".into(), sec);
    // No token yet: the container waits.
    assert!(matches!(
        files(&p, Role::Main, "c", &s.get()),
        Err(TranslateError::MissingReference(_))
    ));
    s.tokens.insert((2, 0), "tok-1".into());
    let f = files(&p, Role::Main, "c", &s.get()).unwrap();
    assert_eq!(read(&f, "/sec", "password"), Some((0o644, &b"hunter2"[..])));
    assert_eq!(
        read(&f, "/info", "labels"),
        Some((0o644, &b"app=\"web\"\ntier=\"a\\\"b\""[..]))
    );
    assert_eq!(read(&f, "/info", "name"), Some((0o644, &b"p"[..])));
    assert_eq!(read(&f, "/info", "mem"), Some((0o644, &b"64"[..])));
    let sa = "/var/run/secrets/kubernetes.io/serviceaccount";
    assert_eq!(read(&f, sa, "token"), Some((0o644, &b"tok-1"[..])));
    assert_eq!(read(&f, sa, "namespace"), Some((0o644, &b"ns"[..])));
    assert!(f.entries.contains(&Entry::Dir {
        path: "/scratch".into(),
        mode: 0o777
    }));
    assert_eq!(file(&f, "/one/pw"), Some((0o644, &b"hunter2"[..])));
    // A refreshed token changes the hash (the files are written again).
    s.tokens.insert((2, 0), "tok-2".into());
    assert_ne!(files(&p, Role::Main, "c", &s.get()).unwrap().hash, f.hash);
    assert!(mounts_volumes(&p, Role::Main, "c"));
}

/// Parse a ustar archive: (typeflag, path, mode, link, data), checking checksums.
fn untar(mut b: &[u8]) -> Vec<(u8, String, u32, String, Vec<u8>)> {
    let mut out = Vec::new();
    let field = |h: &[u8], a: usize, z: usize| {
        String::from_utf8(h[a..z].iter().copied().take_while(|c| *c != 0).collect()).unwrap()
    };
    let oct = |s: String| u64::from_str_radix(s.trim(), 8).unwrap();
    loop {
        let h = &b[..512];
        if h.iter().all(|c| *c == 0) {
            assert!(b[512..1024].iter().all(|c| *c == 0));
            assert_eq!(b.len(), 1024);
            return out;
        }
        let mut sum: u64 = h.iter().map(|c| u64::from(*c)).sum();
        sum -= h[148..156].iter().map(|c| u64::from(*c)).sum::<u64>();
        sum += 8 * u64::from(b' ');
        assert_eq!(oct(field(h, 148, 154)), sum, "checksum");
        assert_eq!(&h[257..263], b"ustar\0");
        let prefix = field(h, 345, 500);
        let name = field(h, 0, 100);
        let path = if prefix.is_empty() {
            name
        } else {
            format!("{prefix}/{name}")
        };
        let size = oct(field(h, 124, 136)) as usize;
        let data = b[512..512 + size].to_vec();
        out.push((
            h[156],
            path,
            oct(field(h, 100, 108)) as u32,
            field(h, 157, 257),
            data,
        ));
        b = &b[512 + size.div_ceil(512) * 512..];
    }
}

#[test]
fn tar_is_a_valid_ustar_archive() {
    let long = format!("/{}/{}", "d".repeat(120), "f".repeat(90));
    let set = FileSet {
        entries: vec![
            Entry::Dir {
                path: "/cfg".into(),
                mode: 0o755,
            },
            Entry::File {
                path: "/cfg/a".into(),
                mode: 0o600,
                data: vec![b'x'; 513],
            },
            Entry::Link {
                path: "/cfg/..data".into(),
                target: "..v1".into(),
            },
            Entry::File {
                path: long.clone(),
                mode: 0o644,
                data: b"y".to_vec(),
            },
        ],
        hash: String::new(),
    };
    let t = untar(&set.tar(1_700_000_000).unwrap());
    assert_eq!(t.len(), 4);
    assert_eq!((t[0].0, t[0].1.as_str(), t[0].2), (b'5', "cfg/", 0o755));
    assert_eq!(
        (t[1].0, t[1].1.as_str(), t[1].2, t[1].4.len()),
        (b'0', "cfg/a", 0o600, 513)
    );
    assert_eq!(
        (t[2].0, t[2].1.as_str(), t[2].3.as_str()),
        (b'2', "cfg/..data", "..v1")
    );
    assert_eq!(t[3].1, long.trim_start_matches('/'));
    assert_eq!(t[3].4, b"y");
    let too_long = FileSet {
        entries: vec![Entry::Dir {
            path: format!("/{}", "x".repeat(300)),
            mode: 0o755,
        }],
        hash: String::new(),
    };
    assert!(too_long.tar(0).is_err());
}
