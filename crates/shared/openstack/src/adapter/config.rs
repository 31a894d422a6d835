//! Client configuration: which cloud to use and how to talk to it.

use std::path::PathBuf;
use std::time::Duration;

use openstack_sdk::config::{CloudConfig, ConfigFile};

use super::metrics::Metrics;
use crate::error::{Error, Result};

/// Which `clouds.yaml` entry to connect to.
#[derive(Clone, Debug)]
pub enum CloudSelector {
    /// `OS_CLIENT_CONFIG_FILE` (else the standard search path: `./clouds.yaml`,
    /// `~/.config/openstack/`, `/etc/openstack/`) and `OS_CLOUD` (default
    /// `openstack`, as in the seed).
    Env,
    /// An explicit file and cloud name (tests, multi-cloud setups).
    File {
        /// Path to `clouds.yaml`.
        path: PathBuf,
        /// Entry under `clouds:`.
        cloud: String,
    },
    /// The `OS_*` variables of an OpenStack RC file (`OS_AUTH_URL`,
    /// `OS_USERNAME`, `OS_PASSWORD`, `OS_PROJECT_NAME`, `OS_DOMAIN_ID`, ...),
    /// without any clouds.yaml (the virtual kubelet seed's configuration).
    OsVariables,
    /// An application credential given directly (a virtual-kubelet tenant's Secret), no file.
    ApplicationCredential {
        /// Keystone's URL (`.../v3`).
        auth_url: String,
        /// The credential's ID.
        id: String,
        /// Its secret.
        secret: secrecy::SecretString,
        /// Region (none: the catalog's only one).
        region: Option<String>,
    },
    /// A `clouds.yaml` document held in memory (an `OpenstackCloud`'s Secret), no file.
    Yaml {
        /// The document.
        yaml: secrecy::SecretString,
        /// Entry under `clouds:`.
        cloud: String,
        /// Region overriding the entry's `region_name`.
        region: Option<String>,
        /// Where the document came from, for error messages (e.g. `Secret ns/name`).
        origin: String,
    },
}

impl CloudSelector {
    /// `OS_CLOUD` (or `OS_CLIENT_CONFIG_FILE`) selects clouds.yaml; else
    /// `OS_AUTH_URL` selects the `OS_*` variables; else clouds.yaml's default.
    pub fn from_env() -> Self {
        let set = |k: &str| std::env::var(k).is_ok_and(|v| !v.is_empty());
        if !set("OS_CLOUD") && !set("OS_CLIENT_CONFIG_FILE") && set("OS_AUTH_URL") {
            Self::OsVariables
        } else {
            Self::Env
        }
    }
}

/// Tuning of the shared client. Defaults follow the seed (10 concurrent
/// calls, 20 requests/s) plus a 30 s per-request timeout.
#[derive(Clone, Debug)]
pub struct ClientOptions {
    /// Maximum requests in flight (`OPENSTACK_MAX_CONCURRENT_CALLS`).
    pub max_concurrent: usize,
    /// Sustained requests per second; 0 disables (`OPENSTACK_REQUESTS_PER_SECOND`).
    pub requests_per_second: u32,
    /// Requests allowed back-to-back before the rate applies.
    pub burst: u32,
    /// Per-request timeout (`OPENSTACK_API_TIMEOUT_SECONDS`).
    pub timeout: Duration,
    /// Retries after the first attempt (so `max_retries + 1` attempts).
    pub max_retries: usize,
    /// First backoff delay.
    pub min_backoff: Duration,
    /// Cap of the exponential backoff.
    pub max_backoff: Duration,
    /// Longest `Retry-After` that is honoured (longer values are capped).
    pub max_retry_after: Duration,
    /// Metric handles the client records into.
    pub metrics: Metrics,
}

impl Default for ClientOptions {
    fn default() -> Self {
        Self {
            max_concurrent: 10,
            requests_per_second: 20,
            burst: 5,
            timeout: Duration::from_secs(30),
            max_retries: 3,
            min_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(8),
            max_retry_after: Duration::from_secs(60),
            metrics: Metrics::new(),
        }
    }
}

impl ClientOptions {
    /// Defaults overridden by `OPENSTACK_MAX_CONCURRENT_CALLS`,
    /// `OPENSTACK_REQUESTS_PER_SECOND` and `OPENSTACK_API_TIMEOUT_SECONDS`.
    pub fn from_env() -> Result<Self> {
        let mut o = Self::default();
        if let Some(v) = env_num::<usize>("OPENSTACK_MAX_CONCURRENT_CALLS")? {
            o.max_concurrent = v.max(1);
        }
        if let Some(v) = env_num::<u32>("OPENSTACK_REQUESTS_PER_SECOND")? {
            o.requests_per_second = v;
        }
        if let Some(v) = env_num::<u64>("OPENSTACK_API_TIMEOUT_SECONDS")? {
            o.timeout = Duration::from_secs(v.max(1));
        }
        Ok(o)
    }
}

fn env_num<T: std::str::FromStr>(name: &str) -> Result<Option<T>> {
    match std::env::var(name) {
        Ok(v) if !v.trim().is_empty() => {
            v.trim().parse().map(Some).map_err(|_| {
                Error::config(format!("{name}={v:?} is not a valid non-negative number"))
            })
        }
        _ => Ok(None),
    }
}

/// Load the selected cloud's configuration. Returns it with its name.
pub(crate) fn load_cloud_config(sel: &CloudSelector) -> Result<(CloudConfig, String)> {
    let (file, cloud, origin) = match sel {
        CloudSelector::OsVariables => return os_variables_config(),
        CloudSelector::ApplicationCredential {
            auth_url,
            id,
            secret,
            region,
        } => {
            let cfg = CloudConfig {
                auth: Some(openstack_sdk::config::Auth {
                    auth_url: Some(auth_url.clone()),
                    application_credential_id: Some(id.clone()),
                    application_credential_secret: Some(secret.clone()),
                    ..Default::default()
                }),
                auth_type: Some("v3applicationcredential".into()),
                interface: Some("public".into()),
                region_name: region.clone(),
                name: Some(format!("application credential {id}")),
                ..Default::default()
            };
            return Ok((cfg, format!("application credential {id}")));
        }
        CloudSelector::Yaml {
            yaml,
            cloud,
            region,
            origin,
        } => return yaml_cloud_config(yaml, cloud, region.as_deref(), origin),
        CloudSelector::File { path, cloud } => (
            ConfigFile::builder()
                .add_source(path)
                .and_then(|b| b.build())
                .map_err(|e| {
                    Error::config(format!("cannot read clouds file {}: {e}", path.display()))
                })?,
            cloud.clone(),
            path.display().to_string(),
        ),
        CloudSelector::Env => {
            let cloud = std::env::var("OS_CLOUD")
                .ok()
                .filter(|c| !c.is_empty())
                .unwrap_or_else(|| "openstack".to_string());
            match std::env::var_os("OS_CLIENT_CONFIG_FILE").filter(|p| !p.is_empty()) {
                Some(path) => {
                    let path = PathBuf::from(path);
                    let file = ConfigFile::builder()
                        .add_source(&path)
                        .and_then(|b| b.build())
                        .map_err(|e| {
                            Error::config(format!(
                                "cannot read OS_CLIENT_CONFIG_FILE {}: {e}",
                                path.display()
                            ))
                        })?;
                    (file, cloud, path.display().to_string())
                }
                None => (
                    ConfigFile::new().map_err(|e| {
                        Error::config(format!("cannot read clouds.yaml from the search path: {e}"))
                    })?,
                    cloud,
                    "the clouds.yaml search path".to_string(),
                ),
            }
        }
    };
    let cfg = file
        .get_cloud_config(&cloud)
        .map_err(|e| Error::config(format!("cloud {cloud:?} in {origin}: {e}")))?
        .ok_or_else(|| {
            let mut known = file.get_available_clouds();
            known.sort();
            Error::config(format!(
                "cloud {cloud:?} not found in {origin} (known: {})",
                known.join(", ")
            ))
        })?;
    Ok((cfg, cloud))
}

/// The entry `cloud` of an in-memory `clouds.yaml`, with `region` (if any) overriding its own.
/// Errors never quote the document: it holds the credentials.
fn yaml_cloud_config(
    yaml: &secrecy::SecretString,
    cloud: &str,
    region: Option<&str>,
    origin: &str,
) -> Result<(CloudConfig, String)> {
    use secrecy::ExposeSecret;
    // The parser's message may quote the offending line, which may be a password: not kept.
    let file: ConfigFile = serde_saphyr::from_str(yaml.expose_secret()).map_err(|_| {
        Error::config(format!(
            "{origin} does not hold a valid clouds.yaml (a mapping with `clouds:`)"
        ))
    })?;
    let clouds = file.clouds.unwrap_or_default();
    let mut cfg = clouds.get(cloud).cloned().ok_or_else(|| {
        let mut known: Vec<&str> = clouds.keys().map(String::as_str).collect();
        known.sort_unstable();
        Error::config(format!(
            "cloud {cloud:?} not found in {origin} (known: {})",
            known.join(", ")
        ))
    })?;
    if let Some(r) = region {
        cfg.region_name = Some(r.to_string());
    }
    if cfg.auth_type.is_none() {
        let app_cred = cfg.auth.as_ref().is_some_and(|a| {
            a.application_credential_id.is_some() || a.application_credential_name.is_some()
        });
        cfg.auth_type = Some(
            if app_cred {
                "v3applicationcredential"
            } else {
                "password"
            }
            .into(),
        );
    }
    cfg.name.get_or_insert_with(|| cloud.to_string());
    Ok((cfg, cloud.to_string()))
}

/// A cloud configuration from the `OS_*` variables. `OS_DOMAIN_ID` /
/// `OS_DOMAIN_NAME` stand for the user's and the project's domain when those
/// are not given separately (as python-openstackclient reads RC files).
fn os_variables_config() -> Result<(CloudConfig, String)> {
    let mut cfg = CloudConfig::from_env()
        .map_err(|e| Error::config(format!("cannot read the OS_* variables: {e}")))?;
    let auth = cfg.auth.get_or_insert_with(Default::default);
    if auth.auth_url.is_none() {
        return Err(Error::config("OS_AUTH_URL is not set"));
    }
    if let Some(d) = auth.domain_id.clone() {
        auth.user_domain_id.get_or_insert(d.clone());
        if auth.project_domain_name.is_none() {
            auth.project_domain_id.get_or_insert(d);
        }
    }
    if let Some(d) = auth.domain_name.clone() {
        if auth.user_domain_id.is_none() {
            auth.user_domain_name.get_or_insert(d.clone());
        }
        if auth.project_domain_id.is_none() {
            auth.project_domain_name.get_or_insert(d);
        }
    }
    // A domain-scoped token is not what RC files mean by OS_DOMAIN_*.
    if auth.project_name.is_some() || auth.project_id.is_some() {
        auth.domain_id = None;
        auth.domain_name = None;
    }
    if cfg.auth_type.is_none() {
        cfg.auth_type = Some(
            if auth.application_credential_id.is_some()
                || auth.application_credential_name.is_some()
            {
                "v3applicationcredential".into()
            } else {
                "password".into()
            },
        );
    }
    let name = cfg
        .name
        .clone()
        .unwrap_or_else(|| "OS_* variables".to_string());
    Ok((cfg, name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn explicit_file_and_missing_cloud() {
        let dir = std::env::temp_dir().join(format!("os-cfg-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("clouds.yaml");
        std::fs::write(
            &path,
            "clouds:\n  a:\n    auth_type: password\n    auth:\n      auth_url: http://127.0.0.1:1/v3\n      username: u\n      password: s3cret\n",
        )
        .unwrap();
        let (cfg, name) = load_cloud_config(&CloudSelector::File {
            path: path.clone(),
            cloud: "a".into(),
        })
        .unwrap();
        assert_eq!(name, "a");
        assert_eq!(cfg.auth_type.as_deref(), Some("password"));
        // Debug output of the config must not reveal the password.
        assert!(!format!("{cfg:?}").contains("s3cret"));
        let e = load_cloud_config(&CloudSelector::File {
            path,
            cloud: "b".into(),
        })
        .unwrap_err();
        assert!(matches!(e, Error::Config { .. }));
        assert!(e.to_string().contains("known: a"), "{e}");
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn in_memory_clouds_yaml_with_region_override_and_no_secret_in_errors() {
        let yaml: secrecy::SecretString = "clouds:\n  east:\n    region_name: r1\n    auth:\n      auth_url: http://127.0.0.1:1/v3\n      application_credential_id: abc\n      application_credential_secret: s3cret\n".into();
        let sel = |cloud: &str, region: Option<&str>| CloudSelector::Yaml {
            yaml: yaml.clone(),
            cloud: cloud.into(),
            region: region.map(String::from),
            origin: "Secret ns/creds".into(),
        };
        let (cfg, name) = load_cloud_config(&sel("east", None)).unwrap();
        assert_eq!(name, "east");
        assert_eq!(cfg.region_name.as_deref(), Some("r1"));
        assert_eq!(cfg.auth_type.as_deref(), Some("v3applicationcredential"));
        let (cfg, _) = load_cloud_config(&sel("east", Some("r2"))).unwrap();
        assert_eq!(cfg.region_name.as_deref(), Some("r2"));
        let e = load_cloud_config(&sel("west", None))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("\"west\" not found in Secret ns/creds (known: east)"),
            "{e}"
        );
        let broken = CloudSelector::Yaml {
            yaml: "clouds: [password: s3cret".into(),
            cloud: "east".into(),
            region: None,
            origin: "Secret ns/creds".into(),
        };
        let e = load_cloud_config(&broken).unwrap_err().to_string();
        assert!(
            e.contains("Secret ns/creds does not hold a valid clouds.yaml"),
            "{e}"
        );
        assert!(!e.contains("s3cret"), "{e}");
    }
}
