//! Unique names, so tests can share one cloud and one cluster.

/// Eight random lower-case hex digits.
pub fn random_suffix() -> String {
    uuid::Uuid::new_v4().simple().to_string()[..8].to_string()
}

/// `e2e-<prefix>-<random>`: a DNS-1123 label when `prefix` is one (lower-case letters,
/// digits, `-`), short enough for every OpenStack name.
pub fn unique(prefix: &str) -> String {
    format!("e2e-{prefix}-{}", random_suffix())
}
