//! Cinder's volume backends: the spec's backend block as pure data, its validation (field
//! errors naming the field) and its rendering into `enabled_backends`, one `cinder.conf`
//! section per backend, and the files a backend reads (a Ceph client configuration, an NFS
//! shares list).

use api::FieldError;

use crate::ini::Ini;

/// Cinder's RBD driver.
pub const RBD_DRIVER: &str = "cinder.volume.drivers.rbd.RBDDriver";
/// Cinder's NFS driver.
pub const NFS_DRIVER: &str = "cinder.volume.drivers.nfs.NfsDriver";

/// A Ceph RBD backend.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rbd {
    /// RADOS pool the volumes are images in.
    pub pool: String,
    /// Ceph client name without `client.` (`rbd_user`), e.g. `cinder`.
    pub user: String,
    /// The cluster's client configuration (`ceph.conf` text: `mon host`, auth settings), from
    /// the user's Secret or ConfigMap; the operator adds the keyring location to it.
    pub cluster_conf: String,
    /// Where the keyring Secret of `client.<user>` is mounted.
    pub keyring: String,
    /// UUID of the libvirt secret holding the same key on the compute nodes
    /// (`rbd_secret_uuid`, handed to Nova with each attachment).
    pub secret_uuid: String,
}

/// An NFS backend.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Nfs {
    /// Shares, one `host:/export` each (the shares file's lines).
    pub shares: Vec<String>,
    /// Options for `mount -t nfs -o`, e.g. `vers=4.1`; `None` uses the client's defaults.
    pub mount_options: Option<String>,
}

/// What a backend is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BackendKind {
    /// Ceph RBD.
    Rbd(Rbd),
    /// NFS.
    Nfs(Nfs),
}

/// One entry of the backend block.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Backend {
    /// The backend's name: its `cinder.conf` section, its entry in `enabled_backends` and its
    /// `volume_backend_name` (what volume types select it by). Volumes record it in their
    /// host (`host@name#pool`), so renaming a backend orphans its volumes.
    pub name: String,
    /// The driver and its settings.
    pub kind: BackendKind,
}

/// Section names a backend may not take: the groups Cinder and its libraries register (a
/// backend section of that name would mix driver options into them).
const RESERVED: &[&str] = &[
    "default",
    "backend",
    "backend_defaults",
    "barbican",
    "coordination",
    "cors",
    "database",
    "fc-zone-manager",
    "glance",
    "healthcheck",
    "key_manager",
    "keystone_authtoken",
    "nova",
    "privsep",
    "profiler",
    "service_user",
    "ssl",
    "vault",
];

fn name_ok(n: &str) -> bool {
    let lower = n.to_ascii_lowercase();
    (1..=63).contains(&n.len())
        && n.bytes().next().is_some_and(|b| b.is_ascii_alphabetic())
        && n.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        && !RESERVED.contains(&lower.as_str())
        && !lower.starts_with("oslo_")
        && !lower.starts_with("os_")
}

/// A Ceph pool or client name: what `ceph osd pool create` and `ceph auth` accept without
/// quoting, and no `,`/`=` (they would change the meaning of a rendered line).
fn ceph_name_ok(n: &str) -> bool {
    (1..=128).contains(&n.len())
        && n.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

fn uuid_ok(u: &str) -> bool {
    let groups: Vec<&str> = u.split('-').collect();
    groups.len() == 5
        && groups
            .iter()
            .zip([8, 4, 4, 4, 12])
            .all(|(g, n)| g.len() == n && g.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// `host:/export` with a host that has no spaces (an IPv6 host in brackets).
fn share_ok(s: &str) -> bool {
    let Some((host, path)) = s.rsplit_once(":/") else {
        return false;
    };
    !host.is_empty()
        && !host.contains([' ', '\t', '/'])
        && !s.contains(['\n', '\r', ' ', '\t', '#'])
        && !path.contains("//")
}

/// Validates the backend block; `path` is where the block sits in the spec (e.g.
/// `spec.backends`), each error names its field below it. Empty when everything is usable.
pub fn validate(path: &str, backends: &[Backend]) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let mut err = |p: String, m: String| {
        errors.push(FieldError {
            path: p,
            message: m,
        })
    };
    if backends.is_empty() {
        err(
            path.to_string(),
            "at least one backend is needed: cinder-volume serves nothing without one".into(),
        );
    }
    for (n, b) in backends.iter().enumerate() {
        let at = format!("{path}[{n}]");
        if !name_ok(&b.name) {
            err(
                format!("{at}.name"),
                format!(
                    "{:?} is not a usable backend name: 1-63 characters, a letter first, then \
                     letters, digits, '_' or '-'; not a section Cinder uses itself \
                     ({}, oslo_*)",
                    b.name,
                    RESERVED.join(", ")
                ),
            );
        }
        if backends[..n]
            .iter()
            .any(|o| o.name.eq_ignore_ascii_case(&b.name))
        {
            err(
                format!("{at}.name"),
                format!(
                    "backend name {:?} is used twice (names are sections of cinder.conf)",
                    b.name
                ),
            );
        }
        match &b.kind {
            BackendKind::Rbd(r) => {
                if !ceph_name_ok(&r.pool) {
                    err(
                        format!("{at}.rbd.pool"),
                        format!(
                            "{:?} is not a Ceph pool name (letters, digits, '_', '-', '.')",
                            r.pool
                        ),
                    );
                }
                let user = r.user.strip_prefix("client.").unwrap_or(&r.user);
                if !ceph_name_ok(user) {
                    err(
                        format!("{at}.rbd.user"),
                        format!(
                            "{:?} is not a Ceph client name (letters, digits, '_', '-', '.'; without 'client.')",
                            r.user
                        ),
                    );
                }
                if !uuid_ok(&r.secret_uuid) {
                    err(
                        format!("{at}.rbd.secretUuid"),
                        format!(
                            "{:?} is not a UUID (the libvirt secret's, e.g. 457eb676-33da-42ec-9a8c-9293d545c337)",
                            r.secret_uuid
                        ),
                    );
                }
                if r.cluster_conf.trim().is_empty() {
                    err(
                        format!("{at}.rbd.cephConf"),
                        "the Ceph client configuration is empty (it needs at least 'mon host')"
                            .into(),
                    );
                }
            }
            BackendKind::Nfs(f) => {
                if f.shares.is_empty() {
                    err(
                        format!("{at}.nfs.shares"),
                        "an NFS backend needs at least one share (host:/export)".into(),
                    );
                }
                for (k, s) in f.shares.iter().enumerate() {
                    if !share_ok(s) {
                        err(
                            format!("{at}.nfs.shares[{k}]"),
                            format!("{s:?} is not host:/export (no spaces or '#')"),
                        );
                    }
                }
                if let Some(o) = &f.mount_options
                    && (o.is_empty() || o.contains([' ', '\t', '\n', '\r']))
                {
                    err(
                        format!("{at}.nfs.mountOptions"),
                        format!(
                            "{o:?}: mount options are one comma-separated word, e.g. vers=4.1,nconnect=4"
                        ),
                    );
                }
            }
        }
    }
    errors
}

impl Backend {
    /// The driver class.
    pub fn driver(&self) -> &'static str {
        match self.kind {
            BackendKind::Rbd(_) => RBD_DRIVER,
            BackendKind::Nfs(_) => NFS_DRIVER,
        }
    }

    /// Name of the extra file this backend reads, beside `cinder.conf` (`ceph-<name>.conf` or
    /// `nfs-shares-<name>`).
    pub fn file_name(&self) -> String {
        match self.kind {
            BackendKind::Rbd(_) => format!("ceph-{}.conf", self.name),
            BackendKind::Nfs(_) => format!("nfs-shares-{}", self.name),
        }
    }

    /// That file's text: the cluster's client configuration with the keyring's location for
    /// the backend's client, or the shares list.
    pub fn file_text(&self) -> String {
        match &self.kind {
            BackendKind::Rbd(r) => {
                let user = r.user.strip_prefix("client.").unwrap_or(&r.user);
                let mut s = r.cluster_conf.trim_end().to_string();
                // librados looks for keyrings under /etc/ceph only; the Secret is mounted
                // elsewhere, so the client's section names it.
                s.push_str(&format!("\n\n[client.{user}]\nkeyring = {}\n", r.keyring));
                s
            }
            BackendKind::Nfs(f) => {
                let mut s = f.shares.join("\n");
                s.push('\n');
                s
            }
        }
    }

    /// Sets the backend's section; `config_dir` holds its file, `state_path` the NFS mount
    /// points, `backend_host` is the stable host name of every cinder-volume replica.
    pub fn render_into(
        &self,
        ini: &mut Ini,
        config_dir: &str,
        state_path: &str,
        backend_host: &str,
    ) {
        let s = self.name.as_str();
        ini.set(s, "volume_driver", self.driver())
            .set(s, "volume_backend_name", s)
            // Volumes belong to `backend_host@name`, not to the pod that created them: any
            // replica (or the next pod) manages them.
            .set(s, "backend_host", backend_host);
        let file = format!("{}/{}", config_dir.trim_end_matches('/'), self.file_name());
        match &self.kind {
            BackendKind::Rbd(r) => {
                let user = r.user.strip_prefix("client.").unwrap_or(&r.user);
                ini.set(s, "rbd_pool", r.pool.clone())
                    .set(s, "rbd_user", user)
                    .set(s, "rbd_ceph_conf", file)
                    .set(s, "rbd_secret_uuid", r.secret_uuid.clone())
                    // A cluster that does not answer fails the driver's start within a bounded
                    // time instead of hanging it (librados' default waits forever).
                    .set(s, "rados_connect_timeout", "10")
                    .set(s, "report_discard_supported", "true");
            }
            BackendKind::Nfs(f) => {
                ini.set(s, "nfs_shares_config", file)
                    .set(
                        s,
                        "nfs_mount_point_base",
                        format!("{}/mnt", state_path.trim_end_matches('/')),
                    )
                    .set(s, "nfs_sparsed_volumes", "true");
                if let Some(o) = &f.mount_options {
                    ini.set(s, "nfs_mount_options", o.clone());
                }
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn rbd(name: &str) -> Backend {
        Backend {
            name: name.into(),
            kind: BackendKind::Rbd(Rbd {
                pool: "volumes".into(),
                user: "cinder".into(),
                cluster_conf: "[global]\nmon host = 10.0.0.1:6789\n".into(),
                keyring: "/etc/cinder/ceph-keyring/keyring".into(),
                secret_uuid: "457eb676-33da-42ec-9a8c-9293d545c337".into(),
            }),
        }
    }

    pub(crate) fn nfs(name: &str) -> Backend {
        Backend {
            name: name.into(),
            kind: BackendKind::Nfs(Nfs {
                shares: vec![
                    "nfs.example.org:/export/cinder".into(),
                    "[fd00::1]:/vol".into(),
                ],
                mount_options: Some("vers=4.1".into()),
            }),
        }
    }

    #[test]
    fn good_backends_pass() {
        assert_eq!(
            validate("spec.backends", &[rbd("ceph"), nfs("nfs-1")]),
            vec![]
        );
    }

    #[test]
    fn every_bad_field_is_named() {
        let mut bad_rbd = rbd("database");
        if let BackendKind::Rbd(r) = &mut bad_rbd.kind {
            r.pool = "my pool".into();
            r.user = "client.ok".into();
            r.secret_uuid = "not-a-uuid".into();
            r.cluster_conf = " ".into();
        }
        let mut bad_nfs = nfs("Ceph");
        if let BackendKind::Nfs(f) = &mut bad_nfs.kind {
            f.shares = vec![
                "nfs.example.org:/ok".into(),
                "nfs.example.org/nocolon".into(),
            ];
            f.mount_options = Some("vers=4 rw".into());
        }
        let ceph = rbd("ceph");
        let paths: Vec<String> = validate("spec.backends", &[bad_rbd, ceph, bad_nfs])
            .into_iter()
            .map(|e| e.path)
            .collect();
        assert_eq!(
            paths,
            [
                "spec.backends[0].name",
                "spec.backends[0].rbd.pool",
                "spec.backends[0].rbd.secretUuid",
                "spec.backends[0].rbd.cephConf",
                "spec.backends[2].name",
                "spec.backends[2].nfs.shares[1]",
                "spec.backends[2].nfs.mountOptions",
            ]
        );
        assert_eq!(validate("spec.backends", &[]).len(), 1);
        for bad in [
            "",
            "1ceph",
            "a b",
            "oslo_concurrency",
            "DEFAULT",
            "x".repeat(64).as_str(),
        ] {
            assert_eq!(validate("b", &[rbd(bad)]).len(), 1, "{bad:?}");
        }
    }

    #[test]
    fn sections_and_files() {
        let mut ini = Ini::default();
        let (r, n) = (rbd("ceph"), nfs("nfs"));
        r.render_into(
            &mut ini,
            "/etc/cinder/rendered/",
            "/var/lib/cinder",
            "cinder-volume",
        );
        n.render_into(
            &mut ini,
            "/etc/cinder/rendered",
            "/var/lib/cinder",
            "cinder-volume",
        );
        assert_eq!(ini.get("ceph", "volume_backend_name"), Some("ceph"));
        assert_eq!(
            ini.get("ceph", "rbd_ceph_conf"),
            Some("/etc/cinder/rendered/ceph-ceph.conf")
        );
        assert_eq!(ini.get("ceph", "volume_driver"), Some(RBD_DRIVER));
        assert_eq!(
            ini.get("nfs", "nfs_shares_config"),
            Some("/etc/cinder/rendered/nfs-shares-nfs")
        );
        assert_eq!(ini.get("nfs", "nfs_mount_options"), Some("vers=4.1"));
        assert_eq!(
            ini.get("nfs", "nfs_mount_point_base"),
            Some("/var/lib/cinder/mnt")
        );
        assert_eq!(
            r.file_text(),
            "[global]\nmon host = 10.0.0.1:6789\n\n[client.cinder]\nkeyring = /etc/cinder/ceph-keyring/keyring\n"
        );
        assert_eq!(
            n.file_text(),
            "nfs.example.org:/export/cinder\n[fd00::1]:/vol\n"
        );
    }
}
