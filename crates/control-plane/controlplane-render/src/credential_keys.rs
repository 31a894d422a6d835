//! Keystone's credential keys (`[credential] key_repository`): the Fernet keys that encrypt the
//! rows of the credential table (EC2 and TOTP secrets). Unlike fernet token keys, whose loss
//! only ends sessions, dropping a credential key that still encrypts a row makes that row
//! unreadable for good. Keystone keeps [`MAX_ACTIVE_KEYS`] of them (staged, primary, one
//! secondary), so the oldest key goes at every rotation, and a rotation is only safe when every
//! credential is encrypted with the primary. `keystone-manage credential_migrate` re-encrypts
//! every credential with the primary; `credential_rotate` refuses until that is done.
//!
//! The operator therefore cycles: write a key set → wait until the Secret has reached every
//! pod (no replica still encrypts with the old primary) → run `credential_migrate` as a Job →
//! only then rotate again (on schedule or on request). [`next`] is that cycle's decision.

use std::time::Duration;

use crate::hash::InputHash;

/// Keys Keystone keeps in the credential repository (`keystone.credential.providers.fernet.core.MAX_ACTIVE_KEYS`).
pub const MAX_ACTIVE_KEYS: u32 = 3;

/// The `credential-migrate` Job's script. It refuses to migrate unless the keys mounted in its
/// pod are the key set it was created for (`EXPECTED_KEY_SET`, see
/// [`crate::KeyRepository::set_hash`]): a pod that still saw an older Secret would re-encrypt
/// with the old primary, and the next rotation would drop that key. It then runs
/// `keystone-manage credential_migrate` on a private copy of exactly the keys it checked (the
/// mounted Secret is read-only, and keystone-manage wants a writable repository). The real
/// `keystone-manage credential_migrate` runs it in the `keystone_boot` proof.
pub const MIGRATE_SCRIPT: &str = r#"import hashlib, os, shutil, subprocess, sys, tempfile
env = os.environ
repo, expected, conf = env["KEY_REPOSITORY"], env["EXPECTED_KEY_SET"], env["KEYSTONE_CONF"]
keys = {}
for name in os.listdir(repo):
    path = os.path.join(repo, name)
    if name.isdigit() and os.path.isfile(path):
        with open(path) as f:
            keys[int(name)] = f.read().strip()
found = hashlib.sha256("".join("%d=%s\n" % (i, keys[i]) for i in sorted(keys)).encode()).hexdigest()[:16]
if found != expected:
    sys.exit("the credential keys in %s are key set %s, not %s: the Secret has not reached this "
             "pod yet; not migrating (the Job is retried)" % (repo, found, expected))
work = tempfile.mkdtemp(prefix="credential-keys-")
try:
    keydir = os.path.join(work, "keys")
    os.mkdir(keydir, 0o700)
    for i, k in keys.items():
        with open(os.path.join(keydir, str(i)), "w") as f:
            f.write(k)
    override = os.path.join(work, "credential.conf")
    with open(override, "w") as f:
        f.write("[credential]\nkey_repository = %s\n" % keydir)
    # --keystone-user/--keystone-group are required by the command line but only used by
    # the commands that write key files; this one writes none.
    rc = subprocess.call([env.get("KEYSTONE_MANAGE", "keystone-manage"), "--config-file", conf,
                          "--config-file", override, "credential_migrate",
                          "--keystone-user", str(os.getuid()), "--keystone-group", str(os.getgid())])
finally:
    shutil.rmtree(work, ignore_errors=True)
print("credential_migrate to key set %s: exit %d" % (expected, rc))
sys.exit(rc)
"#;

/// The environment of the `credential-migrate` Job's script.
pub fn migrate_env(
    key_repository: &str,
    keystone_conf: &str,
    key_set: &str,
) -> Vec<(String, String)> {
    vec![
        ("KEY_REPOSITORY".into(), key_repository.into()),
        ("KEYSTONE_CONF".into(), keystone_conf.into()),
        ("EXPECTED_KEY_SET".into(), key_set.into()),
    ]
}

/// Hash of the `credential-migrate` step's inputs: the image, the configuration (the database
/// it migrates) and the key set it migrates to. A new key set runs the step again.
pub fn migrate_hash(image: &str, keystone_conf: &str, key_set: &str) -> String {
    InputHash::new()
        .add("image", image)
        .add("conf", keystone_conf)
        .add("credential-key-set", key_set)
        .short()
}

/// What the operator knows about the credential keys at one moment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Observed {
    /// Time since the current key set was written to the Secret.
    pub age: Duration,
    /// `credential_migrate` succeeded for the current key set.
    pub migrated: bool,
    /// Rotation interval; `None` rotates only on request.
    pub interval: Option<Duration>,
    /// A rotation request (annotation value) not served yet.
    pub requested: bool,
    /// How long a Secret update may take to reach every pod's volume.
    pub propagation: Duration,
}

/// The next step of the credential key cycle.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Next {
    /// Rotate now: every credential is encrypted with the primary, so the key the rotation
    /// drops encrypts nothing.
    Rotate,
    /// Run (or keep driving) the `credential-migrate` Job for the current key set.
    Migrate {
        /// A rotation is due and waits for the migration.
        rotation_waiting: bool,
    },
    /// The current key set may not have reached every pod: a replica may still encrypt with
    /// the previous primary, so migrating now could leave a credential behind.
    AwaitPropagation {
        /// Until the key set is old enough.
        remaining: Duration,
        /// A rotation is due and waits.
        rotation_waiting: bool,
    },
    /// Migrated, no rotation due.
    Idle {
        /// Until the scheduled rotation (`None`: on request only).
        until_due: Option<Duration>,
    },
}

/// Decides the next step (pure).
pub fn next(o: &Observed) -> Next {
    let due = o.requested || o.interval.is_some_and(|i| o.age >= i);
    if o.migrated {
        if due {
            Next::Rotate
        } else {
            Next::Idle {
                until_due: o.interval.map(|i| i.saturating_sub(o.age)),
            }
        }
    } else if o.age < o.propagation {
        Next::AwaitPropagation {
            remaining: o.propagation - o.age,
            rotation_waiting: due,
        }
    } else {
        Next::Migrate {
            rotation_waiting: due,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::KeyRepository;

    const DAY: Duration = Duration::from_secs(86_400);
    const PROP: Duration = Duration::from_secs(180);

    fn obs(age: u64, migrated: bool, requested: bool) -> Observed {
        Observed {
            age: Duration::from_secs(age),
            migrated,
            interval: Some(30 * DAY),
            requested,
            propagation: PROP,
        }
    }

    #[test]
    fn a_new_key_set_waits_for_propagation_then_migrates() {
        assert_eq!(
            next(&obs(10, false, false)),
            Next::AwaitPropagation {
                remaining: Duration::from_secs(170),
                rotation_waiting: false
            }
        );
        assert_eq!(
            next(&obs(180, false, false)),
            Next::Migrate {
                rotation_waiting: false
            }
        );
        assert_eq!(
            next(&obs(200, true, false)),
            Next::Idle {
                until_due: Some(30 * DAY - Duration::from_secs(200))
            }
        );
    }

    #[test]
    fn never_rotates_before_the_current_set_is_migrated() {
        // A request or an overdue schedule waits for propagation and migration, in that order.
        assert_eq!(
            next(&obs(5, false, true)),
            Next::AwaitPropagation {
                remaining: Duration::from_secs(175),
                rotation_waiting: true
            }
        );
        assert_eq!(
            next(&obs(40 * 86_400, false, false)),
            Next::Migrate {
                rotation_waiting: true
            }
        );
        assert_eq!(next(&obs(5, true, true)), Next::Rotate);
        assert_eq!(next(&obs(30 * 86_400, true, false)), Next::Rotate);
    }

    #[test]
    fn interval_none_rotates_only_on_request() {
        let mut o = obs(365 * 86_400, true, false);
        o.interval = None;
        assert_eq!(next(&o), Next::Idle { until_due: None });
        o.requested = true;
        assert_eq!(next(&o), Next::Rotate);
    }

    #[test]
    fn the_cycle_keeps_every_migrated_credential_readable() {
        // Model: a credential is encrypted with the primary at migration time; it stays
        // readable while its key is in the repository. Drive the cycle through many rotations.
        let mut repo = KeyRepository::generate();
        let mut encrypted_with = repo.0[&repo.primary_index()].clone();
        let mut migrated = false;
        let mut age = 0u64;
        let mut rotations = 0;
        for _ in 0..200 {
            age += 60;
            match next(&Observed {
                age: Duration::from_secs(age),
                migrated,
                interval: Some(Duration::from_secs(3600)),
                requested: false,
                propagation: PROP,
            }) {
                Next::Rotate => {
                    repo = repo.rotate(MAX_ACTIVE_KEYS);
                    assert!(repo.0.len() <= 3);
                    rotations += 1;
                    age = 0;
                    migrated = false;
                }
                Next::Migrate { .. } => {
                    encrypted_with = repo.0[&repo.primary_index()].clone();
                    migrated = true;
                }
                Next::AwaitPropagation { .. } | Next::Idle { .. } => {}
            }
            assert!(
                repo.0.values().any(|k| *k == encrypted_with),
                "the credential's key is still there"
            );
        }
        assert!(rotations >= 3, "{rotations}");
        // Without the migrations, the second rotation drops the key.
        let first = KeyRepository::generate();
        let key = first.0[&first.primary_index()].clone();
        let twice = first.rotate(MAX_ACTIVE_KEYS).rotate(MAX_ACTIVE_KEYS);
        assert!(!twice.0.values().any(|k| *k == key));
    }

    #[test]
    fn the_migrate_hash_follows_the_key_set() {
        let a = KeyRepository::generate();
        let b = a.rotate(MAX_ACTIVE_KEYS);
        assert_ne!(a.set_hash(), b.set_hash());
        assert_eq!(a.set_hash().len(), 16);
        assert_ne!(
            migrate_hash("img", "conf", &a.set_hash()),
            migrate_hash("img", "conf", &b.set_hash())
        );
        assert_eq!(
            migrate_hash("img", "conf", &a.set_hash()),
            migrate_hash("img", "conf", &a.set_hash())
        );
    }
}
