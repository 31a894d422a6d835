//! A pod's volumes as host directories bind-mounted into its containers, as the kubelet
//! keeps them under `/var/lib/kubelet/pods/<uid>/volumes`.
//!
//! The node runs on the Docker host (the test cloud's dockerd shares the host's file
//! system, only its network namespace is its own), so bind mounts are the kubelet's own
//! mechanism, and a Secret edited later reaches running containers (a new `..<version>`
//! directory and an atomic `..data` symlink swap), as a kubelet's atomic writer does.
//!
//! - ConfigMap, Secret, downwardAPI and projected volumes: the files of
//!   [`vk_zun::volumes::files`] (modes from `defaultMode`/`items[].mode`, the atomic layout,
//!   `subPath` copies), one host directory per mount, read-only. With `fsGroup` every entry is
//!   group-owned by it and files get `g+r`, directories `g+rx` and setgid, as the kubelet's
//!   `SetVolumeOwnership` does for read-only volumes.
//! - `emptyDir`: one host directory per pod volume (shared by all its containers), mode 0777;
//!   with `fsGroup` group-owned by it, mode 02777 (setgid).
//! - The termination log: one host file per run, bind-mounted at `terminationMessagePath`.

use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{Container, Pod};
use vk_zun::translate::Role;
use vk_zun::volumes::{Entry, FileSet};

/// The pod's directory under the node's state directory.
pub fn pod_dir(state: &Path, pod: &Pod) -> PathBuf {
    state
        .join("pods")
        .join(pod.metadata.uid.as_deref().unwrap_or("no-uid"))
}

fn role_name(role: Role) -> &'static str {
    match role {
        Role::Init => "init",
        Role::Main => "main",
    }
}

/// The container's own directory (its mounts' files, termination logs).
pub fn container_dir(pod_dir: &Path, role: Role, name: &str) -> PathBuf {
    pod_dir
        .join("c")
        .join(format!("{}-{name}", role_name(role)))
}

/// `fsGroup` of the pod.
pub fn fs_group(pod: &Pod) -> Option<u32> {
    pod.spec
        .as_ref()
        .and_then(|s| s.security_context.as_ref())
        .and_then(|s| s.fs_group)
        .and_then(|g| u32::try_from(g).ok())
}

/// One bind mount of a container: what to prepare on the host and where it goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mount {
    /// Host path.
    pub host: PathBuf,
    /// Path in the container.
    pub target: String,
    /// Mounted read-only.
    pub read_only: bool,
    /// An emptyDir (a shared directory), else files from [`FileSet`] entries.
    pub empty_dir: bool,
}

impl Mount {
    /// Docker's `Binds` entry.
    pub fn bind(&self) -> String {
        format!(
            "{}:{}{}",
            self.host.display(),
            self.target,
            if self.read_only { ":ro" } else { "" }
        )
    }
}

/// The container's mounts (pure).
pub fn mounts(pod: &Pod, role: Role, c: &Container, pod_dir: &Path) -> Vec<Mount> {
    let volumes = pod
        .spec
        .as_ref()
        .and_then(|s| s.volumes.clone())
        .unwrap_or_default();
    let own = container_dir(pod_dir, role, &c.name);
    let mut out = Vec::new();
    for (i, m) in c.volume_mounts.iter().flatten().enumerate() {
        let Some(v) = volumes.iter().find(|v| v.name == m.name) else {
            continue;
        };
        let target = m.mount_path.trim_end_matches('/').to_string();
        let sub = m.sub_path.as_deref().unwrap_or("").trim_matches('/');
        if v.empty_dir.is_some() {
            let mut host = pod_dir.join("empty").join(&v.name);
            if !sub.is_empty() {
                host = host.join(sub);
            }
            out.push(Mount {
                host,
                target,
                read_only: m.read_only == Some(true),
                empty_dir: true,
            });
        } else {
            out.push(Mount {
                host: own.join(format!("m{i}")),
                target,
                read_only: true,
                empty_dir: false,
            });
        }
    }
    out
}

fn chown_group(p: &Path, gid: Option<u32>) -> std::io::Result<()> {
    match gid {
        Some(g) => std::os::unix::fs::lchown(p, None, Some(g)),
        None => Ok(()),
    }
}

fn set_mode(p: &Path, mode: u32) -> std::io::Result<()> {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode))
}

fn ctx(p: &Path, what: &str) -> impl FnOnce(std::io::Error) -> std::io::Error {
    let p = p.display().to_string();
    let what = what.to_string();
    move |e| std::io::Error::new(e.kind(), format!("{what} {p}: {e}"))
}

/// Prepares the emptyDir directories of the pod (idempotent).
pub fn prepare_empty_dirs(pod: &Pod, pod_dir: &Path) -> std::io::Result<()> {
    let gid = fs_group(pod);
    for v in pod
        .spec
        .as_ref()
        .and_then(|s| s.volumes.as_ref())
        .into_iter()
        .flatten()
    {
        if v.empty_dir.is_none() {
            continue;
        }
        let d = pod_dir.join("empty").join(&v.name);
        if d.is_dir() {
            continue;
        }
        std::fs::create_dir_all(&d).map_err(ctx(&d, "creating"))?;
        chown_group(&d, gid).map_err(ctx(&d, "chown"))?;
        set_mode(&d, if gid.is_some() { 0o2777 } else { 0o777 }).map_err(ctx(&d, "chmod"))?;
    }
    Ok(())
}

/// The entries of `set` that belong to `mount` (the longest mount root containing them), with
/// paths relative to it (`""` for the root itself).
fn entries_for<'a>(set: &'a FileSet, mounts: &[Mount], mount: &Mount) -> Vec<(String, &'a Entry)> {
    let path_of = |e: &'a Entry| -> &'a str {
        match e {
            Entry::Dir { path, .. } | Entry::File { path, .. } | Entry::Link { path, .. } => path,
        }
    };
    let under = |p: &str, root: &str| p == root || p.starts_with(&format!("{root}/"));
    set.entries
        .iter()
        .filter_map(|e| {
            let p = path_of(e);
            let best = mounts
                .iter()
                .filter(|m| under(p, &m.target))
                .max_by_key(|m| m.target.len())?;
            (best.target == mount.target).then(|| {
                let rel = p[mount.target.len()..].trim_start_matches('/').to_string();
                (rel, e)
            })
        })
        .collect()
}

fn write_file(p: &Path, data: &[u8], mode: u32, gid: Option<u32>) -> std::io::Result<()> {
    let tmp = p.with_file_name(format!(
        ".tmp-{}",
        p.file_name().and_then(|n| n.to_str()).unwrap_or("f")
    ));
    let mut f = std::fs::File::create(&tmp).map_err(ctx(&tmp, "creating"))?;
    f.write_all(data).map_err(ctx(&tmp, "writing"))?;
    drop(f);
    chown_group(&tmp, gid).map_err(ctx(&tmp, "chown"))?;
    set_mode(&tmp, mode).map_err(ctx(&tmp, "chmod"))?;
    std::fs::rename(&tmp, p).map_err(ctx(p, "renaming onto"))
}

/// Writes the container's files into its mounts' host directories: new entries, symlinks
/// swapped atomically, older `..<version>` directories removed. `fs_group` as in the module
/// doc.
pub fn materialize(set: &FileSet, mounts: &[Mount], fs_group: Option<u32>) -> std::io::Result<()> {
    let file_mode = |m: u32| if fs_group.is_some() { m | 0o440 } else { m };
    let dir_mode = |m: u32| {
        if fs_group.is_some() { m | 0o2550 } else { m }
    };
    for m in mounts.iter().filter(|m| !m.empty_dir) {
        let entries = entries_for(set, mounts, m);
        let root_is_file = entries
            .iter()
            .any(|(rel, e)| rel.is_empty() && matches!(e, Entry::File { .. }));
        if root_is_file {
            if let Some(parent) = m.host.parent() {
                std::fs::create_dir_all(parent).map_err(ctx(parent, "creating"))?;
            }
        } else {
            std::fs::create_dir_all(&m.host).map_err(ctx(&m.host, "creating"))?;
        }
        let mut data_target = None;
        for (rel, e) in entries {
            let p = if rel.is_empty() {
                m.host.clone()
            } else {
                m.host.join(&rel)
            };
            match e {
                Entry::Dir { mode, .. } => {
                    std::fs::create_dir_all(&p).map_err(ctx(&p, "creating"))?;
                    chown_group(&p, fs_group).map_err(ctx(&p, "chown"))?;
                    set_mode(&p, dir_mode(*mode)).map_err(ctx(&p, "chmod"))?;
                }
                Entry::File { mode, data, .. } => {
                    let same = std::fs::read(&p).is_ok_and(|d| d == *data);
                    if !same {
                        write_file(&p, data, file_mode(*mode), fs_group)?;
                    } else {
                        chown_group(&p, fs_group).map_err(ctx(&p, "chown"))?;
                        set_mode(&p, file_mode(*mode)).map_err(ctx(&p, "chmod"))?;
                    }
                }
                Entry::Link { target, .. } => {
                    if rel == "..data" {
                        data_target = Some(target.clone());
                    }
                    if std::fs::read_link(&p).is_ok_and(|t| t == Path::new(target)) {
                        continue;
                    }
                    let tmp = p.with_file_name(format!(
                        ".tmp-link-{}",
                        p.file_name().and_then(|n| n.to_str()).unwrap_or("l")
                    ));
                    let _ = std::fs::remove_file(&tmp);
                    symlink(target, &tmp).map_err(ctx(&tmp, "symlink"))?;
                    chown_group(&tmp, fs_group).map_err(ctx(&tmp, "chown"))?;
                    std::fs::rename(&tmp, &p).map_err(ctx(&p, "renaming onto"))?;
                }
            }
        }
        // Versions no longer pointed at go, as the atomic writer removes them.
        if let Some(current) = data_target
            && let Ok(rd) = std::fs::read_dir(&m.host)
        {
            for d in rd.flatten() {
                let n = d.file_name().to_string_lossy().into_owned();
                if n.starts_with("..") && n != "..data" && n != current {
                    let _ = std::fs::remove_dir_all(d.path());
                }
            }
        }
    }
    // A mount inside another file mount needs its mount point in the outer directory, which
    // is read-only in the container (the runtime cannot make it there).
    for inner in mounts {
        for outer in mounts.iter().filter(|o| !o.empty_dir) {
            if let Some(rel) = inner.target.strip_prefix(&format!("{}/", outer.target)) {
                let p = outer.host.join(rel);
                if std::fs::symlink_metadata(&p).is_err() {
                    if inner.host.is_file() {
                        if let Some(parent) = p.parent() {
                            std::fs::create_dir_all(parent).map_err(ctx(parent, "creating"))?;
                        }
                        std::fs::File::create(&p).map_err(ctx(&p, "creating"))?;
                    } else {
                        std::fs::create_dir_all(&p).map_err(ctx(&p, "creating"))?;
                    }
                }
            }
        }
    }
    Ok(())
}

/// The host file of a run's termination log (created empty, writable by any user, as the
/// kubelet's).
pub fn termination_log(cdir: &Path, attempt: i32) -> std::io::Result<PathBuf> {
    std::fs::create_dir_all(cdir).map_err(ctx(cdir, "creating"))?;
    let p = cdir.join(format!("termination-log-{attempt}"));
    std::fs::File::create(&p).map_err(ctx(&p, "creating"))?;
    set_mode(&p, 0o666).map_err(ctx(&p, "chmod"))?;
    Ok(p)
}

/// A run's termination message: at most 4096 bytes of its termination log.
pub fn read_termination_log(cdir: &Path, attempt: i32) -> Option<String> {
    let b = std::fs::read(cdir.join(format!("termination-log-{attempt}"))).ok()?;
    let b = &b[..b.len().min(4096)];
    Some(String::from_utf8_lossy(b).into_owned()).filter(|s| !s.is_empty())
}

/// The message the kubelet shows for `FallbackToLogsOnError`: the log's last 80 lines, at
/// most 2048 bytes (its end).
pub fn log_tail_message(log: &str) -> String {
    let lines: Vec<&str> = log.lines().collect();
    let tail = lines[lines.len().saturating_sub(80)..].join("\n");
    let start = tail.len().saturating_sub(2048);
    let mut i = start;
    while !tail.is_char_boundary(i) {
        i += 1;
    }
    tail[i..].to_string()
}

/// Per-container hash of what was last written (so unchanged file sets are not rewritten).
pub type Written = BTreeMap<(String, Role, String), String>;

#[cfg(test)]
mod tests;
