//! TEST TOOL: a fault-injecting HTTP reverse proxy between the operator and an OpenStack
//! cloud (not part of the product).
//!
//! One listener per upstream service origin (Keystone, Glance, Neutron, Nova, Placement,
//! Cinder). Clients are pointed at the proxy's Keystone through a generated `clouds.yaml`
//! ([`FaultProxy::write_clouds_yaml`]); every upstream origin in response bodies and
//! `Location` headers is rewritten to the proxy's listener for it, so the service catalog and
//! the version documents lead the client back through the proxy.
//!
//! [`Rule`]s (several at once, consulted in the order they were added) match requests by
//! service, method and path and fire on the first `n`, every `k`-th or a seeded random share
//! of them; their [`Action`]s answer a status without forwarding, drop the connection, add
//! latency, forward and then lose the answer, or revoke the request's token in Keystone
//! before forwarding it. Every request is logged ([`FaultProxy::requests`]).
//!
//! ```no_run
//! # async fn demo() -> Result<(), fault_proxy::Error> {
//! use fault_proxy::{Action, FaultProxy, ProxyConfig, Rule};
//! let proxy = FaultProxy::start(ProxyConfig::discover("clouds.yaml", "local-admin").await?).await?;
//! proxy.add_rule(Rule::new(Action::status(503)).service("network").every(3))?;
//! proxy.write_clouds_yaml("clouds.yaml", "local-admin", "proxied-clouds.yaml")?;
//! # Ok(()) }
//! ```

#![warn(missing_docs)]

pub mod admin;
mod cloud;
mod proxy;
mod record;
mod rule;

pub use cloud::{ProxyConfig, Upstream};
pub use proxy::FaultProxy;
pub use record::RequestRecord;
pub use rule::{Action, Rule, RuleId, RuleStatus};

/// Errors of the proxy library.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A rule that cannot be used.
    #[error("invalid rule: {message}")]
    Rule {
        /// What is wrong.
        message: String,
    },
    /// Bad configuration (upstreams, clouds.yaml).
    #[error("configuration: {message}")]
    Config {
        /// What is wrong.
        message: String,
    },
    /// Reading or writing a file, binding a socket.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The cause.
        source: std::io::Error,
    },
    /// Talking to the upstream cloud (discovery).
    #[error("{context}: {message}")]
    Upstream {
        /// What was being done.
        context: String,
        /// The cause.
        message: String,
    },
}

impl Error {
    pub(crate) fn config(message: impl Into<String>) -> Self {
        Error::Config {
            message: message.into(),
        }
    }

    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io {
            context: context.into(),
            source,
        }
    }
}

/// The proxy's name for a service: its catalog type (`identity`, `image`, `network`,
/// `compute`, `placement`, `block-storage`); project names (`keystone`, `glance`, `neutron`,
/// `nova`, `cinder`), `volumev3` and the operator's metric label `block_storage` are accepted
/// as aliases. Anything else is kept as given (lowercased).
pub fn canonical_service(name: &str) -> String {
    let n = name.trim().to_ascii_lowercase();
    match n.as_str() {
        "keystone" => "identity",
        "glance" => "image",
        "neutron" => "network",
        "nova" => "compute",
        "cinder" | "volumev3" | "volumev2" | "volume" | "block_storage" | "blockstorage" => {
            "block-storage"
        }
        other => other,
    }
    .to_string()
}

#[cfg(test)]
mod tests {
    #[test]
    fn service_aliases() {
        for (a, b) in [
            ("Neutron", "network"),
            ("keystone", "identity"),
            ("volumev3", "block-storage"),
            ("block_storage", "block-storage"),
            ("placement", "placement"),
        ] {
            assert_eq!(super::canonical_service(a), b);
        }
    }
}
