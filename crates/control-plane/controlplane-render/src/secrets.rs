//! Generated credentials: random, long, from the OS's CSPRNG, never a default.

use rand::Rng as _;

const ALPHABET: &[u8] = b"ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz23456789";

/// A random password of `len` characters from an unambiguous alphanumeric alphabet (safe in
/// URLs, INI files and SQL literals without escaping; 32 characters carry about 186 bits).
pub fn password(len: usize) -> String {
    let mut rng = rand::rng();
    (0..len)
        .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_long_distinct_and_plain() {
        let a = password(32);
        let b = password(32);
        assert_eq!(a.len(), 32);
        assert_ne!(a, b);
        assert!(a.bytes().all(|c| c.is_ascii_alphanumeric()));
    }
}
