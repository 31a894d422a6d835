//! Hashes of rendered inputs: a Job's name and a Deployment's pod annotation carry them, so a
//! change of any input runs the Job again or rolls the pods.

use sha2::{Digest, Sha256};

/// Incremental hash of named inputs (order matters; names keep `a|bc` and `ab|c` apart).
#[derive(Clone, Default)]
pub struct InputHash(Sha256);

impl InputHash {
    /// An empty hash.
    pub fn new() -> Self {
        InputHash(Sha256::new())
    }

    /// Adds one named input.
    pub fn add(mut self, name: &str, value: impl AsRef<[u8]>) -> Self {
        let value = value.as_ref();
        self.0.update((name.len() as u64).to_be_bytes());
        self.0.update(name.as_bytes());
        self.0.update((value.len() as u64).to_be_bytes());
        self.0.update(value);
        self
    }

    /// The full hex digest.
    pub fn hex(self) -> String {
        hex(&self.0.finalize())
    }

    /// The first 10 hex digits: short enough for object names (`keystone-db-sync-<hash>`).
    pub fn short(self) -> String {
        let mut h = self.hex();
        h.truncate(10);
        h
    }
}

/// Lower-case hex of bytes.
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[usize::from(b >> 4)] as char);
        s.push(DIGITS[usize::from(b & 15)] as char);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boundaries_between_inputs_count() {
        let a = InputHash::new().add("x", "a").add("y", "bc").hex();
        let b = InputHash::new().add("x", "ab").add("y", "c").hex();
        assert_ne!(a, b);
        assert_eq!(a, InputHash::new().add("x", "a").add("y", "bc").hex());
        assert_eq!(InputHash::new().short().len(), 10);
    }
}
