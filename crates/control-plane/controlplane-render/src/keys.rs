//! Fernet and credential key repositories as Keystone lays them out: files named by integers,
//! `0` the staged key (the next primary, already accepted for validation), the highest the
//! primary (tokens are signed with it), the others secondaries (validation only).
//!
//! Rotation is Keystone's own algorithm (`keystone.common.fernet_utils.rotate_keys`): the
//! staged key becomes the new primary under the next index, a new staged key is made, and the
//! oldest secondaries beyond `max_active_keys` are dropped. With `max_active_keys` from
//! [`controlplane_api::keystone::TokenSettings::max_active_keys`] no key that signed a
//! still-valid token is dropped, and every replica already knew the new primary as the staged
//! key before it signs with it (mounted Secrets update pods in place, with no restart).

use std::collections::BTreeMap;

use base64::Engine as _;
use rand::RngCore as _;

/// A key repository: index → key (URL-safe base64 of 32 random bytes, Fernet's format).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyRepository(pub BTreeMap<u32, String>);

/// Why stored key material cannot be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum KeyError {
    /// A Secret key is not an index.
    #[error("key {0:?} is not a key index (0, 1, 2, ...)")]
    BadIndex(String),
    /// A value is not a Fernet key.
    #[error("key {0} is not a Fernet key (URL-safe base64 of 32 bytes)")]
    BadKey(u32),
    /// No staged key or no primary.
    #[error("the repository needs a staged key 0 and a primary key")]
    Incomplete,
}

/// A new random Fernet key.
pub fn new_key() -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    base64::engine::general_purpose::URL_SAFE.encode(bytes)
}

impl KeyRepository {
    /// A fresh repository: staged key 0 and primary key 1 (what `fernet_setup` makes).
    pub fn generate() -> Self {
        KeyRepository(BTreeMap::from([(0, new_key()), (1, new_key())]))
    }

    /// Reads a repository from Secret data (file name → contents).
    pub fn from_files<'a>(
        files: impl IntoIterator<Item = (&'a String, &'a [u8])>,
    ) -> Result<Self, KeyError> {
        let mut keys = BTreeMap::new();
        for (name, value) in files {
            let idx: u32 = name.parse().map_err(|_| KeyError::BadIndex(name.clone()))?;
            let text = std::str::from_utf8(value)
                .map_err(|_| KeyError::BadKey(idx))?
                .trim()
                .to_string();
            let decoded = base64::engine::general_purpose::URL_SAFE
                .decode(&text)
                .map_err(|_| KeyError::BadKey(idx))?;
            if decoded.len() != 32 {
                return Err(KeyError::BadKey(idx));
            }
            keys.insert(idx, text);
        }
        let repo = KeyRepository(keys);
        if !repo.0.contains_key(&0) || repo.primary_index() == 0 {
            return Err(KeyError::Incomplete);
        }
        Ok(repo)
    }

    /// The files as (name, contents), for a Secret or a directory.
    pub fn files(&self) -> BTreeMap<String, String> {
        self.0
            .iter()
            .map(|(i, k)| (i.to_string(), k.clone()))
            .collect()
    }

    /// Index of the primary key (the highest; 0 if there is only a staged key).
    pub fn primary_index(&self) -> u32 {
        self.0.keys().next_back().copied().unwrap_or(0)
    }

    /// One rotation, as `keystone-manage fernet_rotate` does it.
    pub fn rotate(&self, max_active_keys: u32) -> Self {
        let mut keys = self.0.clone();
        let new_primary = self.primary_index() + 1;
        let staged = keys.remove(&0).unwrap_or_else(new_key);
        keys.insert(new_primary, staged);
        // Keep max_active_keys - 1 non-staged keys (newest first), then the new staged key.
        let keep = usize::try_from(max_active_keys.max(2) - 1).unwrap_or(usize::MAX);
        let mut indices: Vec<u32> = keys.keys().copied().collect();
        indices.sort_unstable_by(|a, b| b.cmp(a));
        for old in indices.into_iter().skip(keep) {
            keys.remove(&old);
        }
        keys.insert(0, new_key());
        KeyRepository(keys)
    }

    /// A short hash naming this exact key set (all indices and keys): what status records, what
    /// a `credential-migrate` Job's input hash carries and what its script checks the mounted
    /// keys against. SHA-256 over `index=key` lines in index order, the first 16 hex digits
    /// ([`crate::credential_keys::MIGRATE_SCRIPT`] computes the same in Python).
    pub fn set_hash(&self) -> String {
        use sha2::{Digest, Sha256};
        let mut h = Sha256::new();
        for (i, k) in &self.0 {
            h.update(format!("{i}={k}\n").as_bytes());
        }
        let mut hex = crate::hash::hex(&h.finalize());
        hex.truncate(16);
        hex
    }

    /// Trims a repository to `max_active_keys` without rotating (after the setting shrank).
    pub fn trimmed(&self, max_active_keys: u32) -> Self {
        let keep = usize::try_from(max_active_keys.max(2) - 1).unwrap_or(usize::MAX);
        let mut keys = self.0.clone();
        let mut indices: Vec<u32> = keys.keys().copied().filter(|i| *i != 0).collect();
        indices.sort_unstable_by(|a, b| b.cmp(a));
        for old in indices.into_iter().skip(keep) {
            keys.remove(&old);
        }
        KeyRepository(keys)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rotation_promotes_the_staged_key_and_keeps_max_active_keys() {
        let repo = KeyRepository::generate();
        let staged = repo.0[&0].clone();
        let r1 = repo.rotate(3);
        assert_eq!(r1.primary_index(), 2);
        assert_eq!(r1.0[&2], staged, "the staged key becomes the primary");
        assert_ne!(r1.0[&0], staged, "a new staged key is made");
        assert_eq!(r1.0.keys().copied().collect::<Vec<_>>(), vec![0, 1, 2]);
        let r2 = r1.rotate(3);
        assert_eq!(r2.0.keys().copied().collect::<Vec<_>>(), vec![0, 2, 3]);
        let r3 = r2.rotate(5).rotate(5).rotate(5);
        assert_eq!(
            r3.0.keys().copied().collect::<Vec<_>>(),
            vec![0, 3, 4, 5, 6]
        );
        assert_eq!(
            r3.trimmed(3).0.keys().copied().collect::<Vec<_>>(),
            vec![0, 5, 6]
        );
    }

    #[test]
    fn a_token_key_survives_as_many_rotations_as_the_window_needs() {
        // A key that is primary now must stay for max_active_keys - 2 more rotations: those
        // cover the token lifetime plus the allow-expired window by construction.
        let max = 5;
        let mut repo = KeyRepository::generate();
        let signing = repo.0[&repo.primary_index()].clone();
        for _ in 0..(max - 2) {
            repo = repo.rotate(max);
            assert!(repo.0.values().any(|k| *k == signing));
        }
        repo = repo.rotate(max);
        assert!(!repo.0.values().any(|k| *k == signing));
    }

    #[test]
    fn reads_back_what_it_writes_and_refuses_garbage() {
        let repo = KeyRepository::generate().rotate(3);
        let files: BTreeMap<String, Vec<u8>> = repo
            .files()
            .into_iter()
            .map(|(k, v)| (k, v.into_bytes()))
            .collect();
        let back =
            KeyRepository::from_files(files.iter().map(|(k, v)| (k, v.as_slice()))).expect("valid");
        assert_eq!(back, repo);
        let bad = [("x".to_string(), b"y".to_vec())];
        assert!(KeyRepository::from_files(bad.iter().map(|(k, v)| (k, v.as_slice()))).is_err());
        let short = [("0".to_string(), b"c2hvcnQ=".to_vec())];
        assert_eq!(
            KeyRepository::from_files(short.iter().map(|(k, v)| (k, v.as_slice()))),
            Err(KeyError::BadKey(0))
        );
    }
}
