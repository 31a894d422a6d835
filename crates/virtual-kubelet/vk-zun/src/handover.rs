//! `emptyDir` files handed from init containers to later containers (pure).
//!
//! Stock Zun containers share no filesystem (each pod container is its own Zun container; a
//! capsule's members would share volumes but have no logs or exec on stock Zun), so an
//! `emptyDir` is a directory in each container's own layer. What stock Zun does offer is
//! Docker's archive API on every plain container, running or stopped: `get_archive` (a tar of a
//! path) and `put_archive` (a tar extracted at a path). Init containers run one at a time, each
//! to completion before the next container is created, so their files can be handed on: before
//! a container that mounts an `emptyDir` starts (created with `run: false`), the node copies the
//! volume's directory out of the last init container before it that mounts the volume and into
//! the new container at its own mount path. The chain carries an init container's output through
//! every later init container to the regular containers, as a shared volume would.
//!
//! What this cannot give is live sharing between containers that run at the same time (a
//! sidecar reading what the app writes): refused by [`crate::volumes::validate`], naming the
//! field. Several regular containers may read the same init output when all of them mount the
//! volume `readOnly` (each gets its own copy, identical as long as nobody writes).

use k8s_openapi::api::core::v1::PodSpec;

use crate::translate::Role;

/// One copy of an `emptyDir` into a container before it starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Handover {
    /// The volume's name.
    pub volume: String,
    /// The init container whose copy of the volume is taken.
    pub from: String,
    /// Its mount path of the volume.
    pub from_path: String,
    /// The receiving container's mount path of the volume.
    pub to_path: String,
}

/// Every pod container in the order they run: init containers in order, then the regular ones.
fn in_order(spec: &PodSpec) -> Vec<(Role, &k8s_openapi::api::core::v1::Container)> {
    spec.init_containers
        .iter()
        .flatten()
        .map(|c| (Role::Init, c))
        .chain(spec.containers.iter().map(|c| (Role::Main, c)))
        .collect()
}

fn is_empty_dir(spec: &PodSpec, volume: &str) -> bool {
    spec.volumes
        .iter()
        .flatten()
        .any(|v| v.name == volume && v.empty_dir.is_some())
}

/// The copies container `name` (of `role`) gets before it starts: for each `emptyDir` it
/// mounts (without `subPath`), the last init container before it that mounts the volume too.
pub fn plan(spec: &PodSpec, role: Role, name: &str) -> Vec<Handover> {
    let order = in_order(spec);
    let Some(at) = order.iter().position(|(r, c)| *r == role && c.name == name) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for m in order[at].1.volume_mounts.iter().flatten() {
        if !is_empty_dir(spec, &m.name) || m.sub_path.as_deref().is_some_and(|s| !s.is_empty()) {
            continue;
        }
        let source = order[..at]
            .iter()
            .rev()
            .filter(|(r, _)| *r == Role::Init)
            .find_map(|(_, c)| {
                c.volume_mounts
                    .iter()
                    .flatten()
                    .find(|x| x.name == m.name && x.sub_path.as_deref().is_none_or(str::is_empty))
                    .map(|x| (c.name.clone(), x.mount_path.clone()))
            });
        if let Some((from, from_path)) = source {
            out.push(Handover {
                volume: m.name.clone(),
                from,
                from_path,
                to_path: m.mount_path.clone(),
            });
        }
    }
    out
}

/// Why a tar from Docker could not be moved to another path.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RebaseError {
    /// The archive ends inside a header or an entry.
    #[error("the archive from get_archive is cut short at byte {0}")]
    Truncated(usize),
    /// A header's size field is not octal.
    #[error("the archive from get_archive has an unreadable size at byte {0}")]
    BadSize(usize),
    /// A new name does not fit a ustar header.
    #[error("path {0:?} is too long for the archive")]
    TooLong(String),
}

fn octal(field: &[u8]) -> Option<u64> {
    let s: String = field
        .iter()
        .take_while(|b| **b != 0)
        .map(|b| *b as char)
        .collect();
    let s = s.trim();
    if s.is_empty() {
        return Some(0);
    }
    u64::from_str_radix(s, 8).ok()
}

fn cstr(field: &[u8]) -> String {
    String::from_utf8_lossy(&field[..field.iter().position(|b| *b == 0).unwrap_or(field.len())])
        .into_owned()
}

/// `name` with its first path component (Docker names the archive's entries after the base
/// name of the path asked for) replaced by `to` (relative, no leading `/`).
fn rebase_name(name: &str, to: &str) -> String {
    let trimmed = name.trim_start_matches("./");
    let rest = trimmed.split_once('/').map_or("", |(_, r)| r);
    if rest.is_empty() {
        // The directory itself (`work` or `work/`).
        format!("{to}/").trim_end_matches('/').to_string()
            + if name.ends_with('/') { "/" } else { "" }
    } else {
        format!("{to}/{rest}")
    }
}

fn set_name(h: &mut [u8], name: &str) -> Result<(), RebaseError> {
    let bytes = name.as_bytes();
    let (prefix, base): (&[u8], &[u8]) = if bytes.len() <= 100 {
        (&[], bytes)
    } else {
        // ustar: split at a `/` so that the base fits 100 bytes and the prefix 155.
        let cut = (bytes.len() - 100..bytes.len())
            .find(|i| bytes[*i] == b'/' && *i <= 155)
            .ok_or_else(|| RebaseError::TooLong(name.to_string()))?;
        (&bytes[..cut], &bytes[cut + 1..])
    };
    h[..100].fill(0);
    h[..base.len()].copy_from_slice(base);
    h[345..500].fill(0);
    h[345..345 + prefix.len()].copy_from_slice(prefix);
    // The checksum is computed with its own field as spaces.
    h[148..156].fill(b' ');
    let sum: u32 = h.iter().map(|b| u32::from(*b)).sum();
    let field = format!("{sum:06o}\0 ");
    h[148..156].copy_from_slice(field.as_bytes());
    Ok(())
}

/// A PAX record set with its `path` moved under `to` (other records kept).
fn rebase_pax(data: &[u8], to: &str) -> Vec<u8> {
    let mut out = Vec::new();
    let mut rest = data;
    while !rest.is_empty() {
        let Some(sp) = rest.iter().position(|b| *b == b' ') else {
            break;
        };
        let len: usize = std::str::from_utf8(&rest[..sp])
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(rest.len())
            .min(rest.len());
        let rec = &rest[sp + 1..len];
        rest = &rest[len..];
        let text = String::from_utf8_lossy(rec);
        let text = text.trim_end_matches('\n');
        let kv = match text.split_once('=') {
            Some(("path", v)) => format!("path={}", rebase_name(v, to)),
            _ => text.to_string(),
        };
        // The length counts itself: grow it until it fits.
        let body = format!(" {kv}\n");
        let mut n = body.len() + 1;
        while format!("{n}").len() + body.len() != n {
            n = format!("{n}").len() + body.len();
        }
        out.extend_from_slice(format!("{n}{body}").as_bytes());
    }
    out
}

/// The tar `get_archive` gave for a directory, with every entry moved under `to` (an absolute
/// path; the archive is then extracted at `/`). Handles ustar names and prefixes, GNU long
/// names (`L`) and PAX `path` records (`x`), which Docker writes for long names.
pub fn rebase(tar: &[u8], to: &str) -> Result<Vec<u8>, RebaseError> {
    let to = to.trim_matches('/');
    let mut out = Vec::with_capacity(tar.len() + 1024);
    let mut at = 0;
    while at + 512 <= tar.len() {
        let h = &tar[at..at + 512];
        if h.iter().all(|b| *b == 0) {
            break;
        }
        let size = octal(&h[124..136]).ok_or(RebaseError::BadSize(at))? as usize;
        let padded = size.div_ceil(512) * 512;
        let end = at + 512 + padded;
        if end > tar.len() {
            return Err(RebaseError::Truncated(at));
        }
        let data = &tar[at + 512..at + 512 + size];
        let mut header = h.to_vec();
        match h[156] {
            b'x' => {
                let pax = rebase_pax(data, to);
                header[124..136].copy_from_slice(format!("{:011o}\0", pax.len()).as_bytes());
                set_name(&mut header, &cstr(&h[..100]))?;
                out.extend_from_slice(&header);
                out.extend_from_slice(&pax);
                out.extend(std::iter::repeat_n(0u8, (512 - pax.len() % 512) % 512));
            }
            b'L' => {
                let long = rebase_name(&cstr(data), to);
                let mut bytes = long.into_bytes();
                bytes.push(0);
                header[124..136].copy_from_slice(format!("{:011o}\0", bytes.len()).as_bytes());
                set_name(&mut header, "././@LongLink")?;
                out.extend_from_slice(&header);
                out.extend_from_slice(&bytes);
                out.extend(std::iter::repeat_n(0u8, (512 - bytes.len() % 512) % 512));
            }
            _ => {
                let prefix = cstr(&h[345..500]);
                let base = cstr(&h[..100]);
                let name = if prefix.is_empty() || &h[257..262] != b"ustar" {
                    base
                } else {
                    format!("{prefix}/{base}")
                };
                set_name(&mut header, &rebase_name(&name, to))?;
                out.extend_from_slice(&header);
                out.extend_from_slice(&tar[at + 512..end]);
            }
        }
        at = end;
    }
    out.extend(std::iter::repeat_n(0u8, 1024));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::volumes::{Entry, FileSet};
    use serde_json::json;

    fn spec(v: serde_json::Value) -> PodSpec {
        serde_json::from_value(v).unwrap()
    }

    fn entries(tar: &[u8]) -> Vec<(String, Vec<u8>)> {
        let mut out = Vec::new();
        let mut at = 0;
        while at + 512 <= tar.len() && tar[at..at + 512].iter().any(|b| *b != 0) {
            let h = &tar[at..at + 512];
            let size = octal(&h[124..136]).unwrap() as usize;
            let prefix = cstr(&h[345..500]);
            let base = cstr(&h[..100]);
            let name = if prefix.is_empty() {
                base
            } else {
                format!("{prefix}/{base}")
            };
            // The checksum must hold.
            let mut c = h.to_vec();
            c[148..156].fill(b' ');
            let sum: u32 = c.iter().map(|b| u32::from(*b)).sum();
            assert_eq!(octal(&h[148..155]).unwrap(), u64::from(sum), "{name}");
            out.push((name, tar[at + 512..at + 512 + size].to_vec()));
            at += 512 + size.div_ceil(512) * 512;
        }
        out
    }

    #[test]
    fn init_output_reaches_the_next_containers() {
        let s = spec(json!({
            "initContainers": [
                {"name": "fetch", "image": "b", "volumeMounts": [{"name": "work", "mountPath": "/out"}]},
                {"name": "other", "image": "b"},
                {"name": "render", "image": "b", "volumeMounts": [{"name": "work", "mountPath": "/in"}]}],
            "containers": [
                {"name": "app", "image": "b", "volumeMounts": [
                    {"name": "work", "mountPath": "/srv/data"},
                    {"name": "cfg", "mountPath": "/cfg"}]},
                {"name": "solo", "image": "b", "volumeMounts": [{"name": "scratch", "mountPath": "/tmp/s"}]}],
            "volumes": [{"name": "work", "emptyDir": {}}, {"name": "scratch", "emptyDir": {}},
                        {"name": "cfg", "configMap": {"name": "c"}}]
        }));
        assert_eq!(plan(&s, Role::Init, "fetch"), vec![]);
        assert_eq!(
            plan(&s, Role::Init, "render"),
            vec![Handover {
                volume: "work".into(),
                from: "fetch".into(),
                from_path: "/out".into(),
                to_path: "/in".into()
            }]
        );
        // The app gets the last init container's copy (which holds fetch's files too).
        assert_eq!(
            plan(&s, Role::Main, "app"),
            vec![Handover {
                volume: "work".into(),
                from: "render".into(),
                from_path: "/in".into(),
                to_path: "/srv/data".into()
            }]
        );
        // An emptyDir no init container writes: nothing to copy.
        assert_eq!(plan(&s, Role::Main, "solo"), vec![]);
    }

    #[test]
    fn a_docker_archive_is_moved_to_the_receiving_mount_path() {
        // What Docker's get_archive of `/out` looks like: the directory's base name first.
        let set = FileSet {
            entries: vec![
                Entry::Dir {
                    path: "out".into(),
                    mode: 0o777,
                },
                Entry::File {
                    path: "out/a.txt".into(),
                    mode: 0o644,
                    data: b"hello".to_vec(),
                },
                Entry::Dir {
                    path: "out/sub".into(),
                    mode: 0o755,
                },
                Entry::File {
                    path: format!("out/sub/{}", "n".repeat(90)),
                    mode: 0o600,
                    data: vec![7; 700],
                },
            ],
            hash: String::new(),
        };
        let tar = set.tar(0).unwrap();
        let moved = rebase(&tar, "/srv/data").unwrap();
        let got = entries(&moved);
        let names: Vec<&str> = got.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            vec![
                "srv/data/".to_string(),
                "srv/data/a.txt".into(),
                "srv/data/sub/".into(),
                format!("srv/data/sub/{}", "n".repeat(90)),
            ]
        );
        assert_eq!(got[1].1, b"hello");
        assert_eq!(got[3].1, vec![7; 700]);
    }

    #[test]
    fn pax_and_gnu_long_names_are_moved_too() {
        assert_eq!(rebase_name("out/x/y", "in"), "in/x/y");
        assert_eq!(rebase_name("out/", "a/b"), "a/b/");
        assert_eq!(rebase_name("out", "a/b"), "a/b");
        assert_eq!(rebase_name("./out/f", "in"), "in/f");
        let pax = rebase_pax(
            b"31 path=out/some/long/name.txt\n20 mtime=1700000000\n",
            "in",
        );
        let text = String::from_utf8(pax).unwrap();
        assert_eq!(text, "30 path=in/some/long/name.txt\n20 mtime=1700000000\n");
        // Each record's length counts its own digits.
        for line in text.lines() {
            let (n, _) = line.split_once(' ').unwrap();
            assert_eq!(n.parse::<usize>().unwrap(), line.len() + 1);
        }
    }

    #[test]
    fn a_cut_archive_is_an_error() {
        let set = FileSet {
            entries: vec![Entry::File {
                path: "out/a".into(),
                mode: 0o644,
                data: vec![1; 600],
            }],
            hash: String::new(),
        };
        let tar = set.tar(0).unwrap();
        assert_eq!(rebase(&tar[..700], "/in"), Err(RebaseError::Truncated(0)));
    }
}
