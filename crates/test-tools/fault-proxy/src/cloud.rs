//! Which upstreams to proxy (given, or read from the Keystone catalog) and the `clouds.yaml`
//! that points a client at the proxy.

use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use crate::{Error, canonical_service};

/// One upstream service origin the proxy listens for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Upstream {
    /// Service name ([`canonical_service`]).
    pub service: String,
    /// `scheme://host:port` of the service.
    pub origin: String,
}

/// What the proxy forwards to and where it listens.
#[derive(Clone, Debug)]
pub struct ProxyConfig {
    /// One listener each; origins must be distinct.
    pub upstreams: Vec<Upstream>,
    /// Keystone's v3 URL (for token revocation); default: the `identity` origin + `/v3`.
    pub keystone_url: Option<String>,
    /// Address the listeners bind (each on a free port).
    pub bind: IpAddr,
    /// How long a forwarded request may take.
    pub upstream_timeout: Duration,
}

impl Default for ProxyConfig {
    fn default() -> Self {
        ProxyConfig {
            upstreams: Vec::new(),
            keystone_url: None,
            bind: IpAddr::V4(Ipv4Addr::LOCALHOST),
            upstream_timeout: Duration::from_secs(120),
        }
    }
}

/// `scheme://host[:port]` of a URL.
pub(crate) fn origin_of(url: &str) -> Result<String, Error> {
    let u = url::Url::parse(url).map_err(|e| Error::config(format!("URL {url:?}: {e}")))?;
    match u.origin() {
        o @ url::Origin::Tuple(..) => Ok(o.ascii_serialization()),
        url::Origin::Opaque(_) => Err(Error::config(format!("URL {url:?} has no origin"))),
    }
}

impl ProxyConfig {
    /// Adds an upstream (`service` is made canonical, `url` reduced to its origin).
    pub fn upstream(mut self, service: &str, url: &str) -> Result<Self, Error> {
        let origin = origin_of(url)?;
        if self.upstreams.iter().any(|u| u.origin == origin) {
            return Err(Error::config(format!("upstream {origin} given twice")));
        }
        self.upstreams.push(Upstream {
            service: canonical_service(service),
            origin,
        });
        Ok(self)
    }

    /// The upstreams of a `clouds.yaml` entry: Keystone from its `auth_url`, the others from
    /// the service catalog of a token obtained with its credentials (password or application
    /// credential), for its `interface` (default `public`) and `region_name`.
    pub async fn discover(clouds_yaml: impl AsRef<Path>, cloud: &str) -> Result<Self, Error> {
        let path = clouds_yaml.as_ref();
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::io(format!("reading {}", path.display()), e))?;
        let entry = cloud_entry(&text, cloud)
            .map_err(|e| Error::config(format!("{}: {e}", path.display())))?;
        let auth_url = entry["auth"]["auth_url"]
            .as_str()
            .ok_or_else(|| Error::config(format!("cloud {cloud} has no auth.auth_url")))?
            .trim_end_matches('/')
            .to_string();
        let interface = entry["interface"].as_str().unwrap_or("public").to_string();
        let region = entry["region_name"].as_str().map(str::to_string);
        let body = token_request(&entry)?;
        let client = reqwest::Client::builder()
            .no_proxy()
            .timeout(Duration::from_secs(30))
            .build()
            .map_err(|e| Error::Upstream {
                context: "building an HTTP client".into(),
                message: e.to_string(),
            })?;
        let url = format!("{auth_url}/auth/tokens");
        let upstream_err = |message: String| Error::Upstream {
            context: format!("POST {url}"),
            message,
        };
        let resp = client
            .post(&url)
            .json(&body)
            .send()
            .await
            .map_err(|e| upstream_err(e.to_string()))?;
        let status = resp.status();
        let text = resp.text().await.map_err(|e| upstream_err(e.to_string()))?;
        if !status.is_success() {
            return Err(upstream_err(format!("HTTP {status}: {text}")));
        }
        let token: Value =
            serde_json::from_str(&text).map_err(|e| upstream_err(format!("not JSON: {e}")))?;
        let mut config = ProxyConfig {
            keystone_url: Some(auth_url.clone()),
            ..ProxyConfig::default()
        }
        .upstream("identity", &auth_url)?;
        let catalog = token["token"]["catalog"]
            .as_array()
            .ok_or_else(|| upstream_err("the token has no catalog (unscoped?)".into()))?;
        for svc in catalog {
            let Some(kind) = svc["type"].as_str() else {
                continue;
            };
            let endpoints = svc["endpoints"].as_array().into_iter().flatten();
            for ep in endpoints {
                let right_interface = ep["interface"].as_str() == Some(interface.as_str());
                let right_region = region.as_deref().is_none_or(|r| {
                    ep["region_id"].as_str() == Some(r) || ep["region"].as_str() == Some(r)
                });
                let Some(url) = ep["url"].as_str() else {
                    continue;
                };
                if right_interface && right_region {
                    let origin = origin_of(url)?;
                    if !config.upstreams.iter().any(|u| u.origin == origin) {
                        config = config.upstream(kind, &origin)?;
                    }
                }
            }
        }
        Ok(config)
    }
}

/// The entry `clouds.<cloud>` of a clouds.yaml text.
pub(crate) fn cloud_entry(text: &str, cloud: &str) -> Result<Value, String> {
    let doc: Value = serde_saphyr::from_str(text).map_err(|e| format!("not YAML: {e}"))?;
    let clouds = doc["clouds"]
        .as_object()
        .ok_or_else(|| "no clouds: mapping".to_string())?;
    clouds.get(cloud).cloned().ok_or_else(|| {
        let known: Vec<&String> = clouds.keys().collect();
        format!("cloud {cloud:?} not found (known: {known:?})")
    })
}

/// The body of a Keystone v3 token request for a clouds.yaml entry.
fn token_request(entry: &Value) -> Result<Value, Error> {
    let auth = &entry["auth"];
    let s = |k: &str| auth[k].as_str();
    let domain = |name: Option<&str>, id: Option<&str>| match (id, name) {
        (Some(id), _) => Some(json!({"id": id})),
        (None, Some(name)) => Some(json!({"name": name})),
        (None, None) => None,
    };
    let auth_type = entry["auth_type"].as_str().unwrap_or("password");
    match auth_type {
        "password" | "v3password" => {
            let mut user = json!({"password": s("password").unwrap_or_default()});
            if let Some(id) = s("user_id") {
                user["id"] = json!(id);
            } else {
                user["name"] = json!(s("username").unwrap_or_default());
                user["domain"] = domain(s("user_domain_name"), s("user_domain_id"))
                    .unwrap_or_else(|| json!({"id": "default"}));
            }
            let mut body = json!({"auth": {"identity": {"methods": ["password"], "password": {"user": user}}}});
            let project = match (s("project_id"), s("project_name")) {
                (Some(id), _) => Some(json!({"id": id})),
                (None, Some(name)) => Some(json!({
                    "name": name,
                    "domain": domain(s("project_domain_name"), s("project_domain_id"))
                        .unwrap_or_else(|| json!({"id": "default"})),
                })),
                (None, None) => None,
            };
            if let Some(p) = project {
                body["auth"]["scope"] = json!({"project": p});
            }
            Ok(body)
        }
        "v3applicationcredential" => {
            let mut cred =
                json!({"secret": s("application_credential_secret").unwrap_or_default()});
            if let Some(id) = s("application_credential_id") {
                cred["id"] = json!(id);
            } else {
                cred["name"] = json!(s("application_credential_name").unwrap_or_default());
                let mut user = json!({});
                if let Some(id) = s("user_id") {
                    user["id"] = json!(id);
                } else {
                    user["name"] = json!(s("username").unwrap_or_default());
                    user["domain"] = domain(s("user_domain_name"), s("user_domain_id"))
                        .unwrap_or_else(|| json!({"id": "default"}));
                }
                cred["user"] = user;
            }
            Ok(json!({"auth": {"identity": {
                "methods": ["application_credential"],
                "application_credential": cred,
            }}}))
        }
        other => Err(Error::config(format!(
            "auth_type {other:?} is not supported for discovery (give the upstreams instead)"
        ))),
    }
}

/// A clouds.yaml holding only `cloud`, with its `auth_url` passed through `rewrite`.
pub(crate) fn rewrite_clouds_yaml(
    text: &str,
    cloud: &str,
    rewrite: impl Fn(&str) -> Option<String>,
) -> Result<String, Error> {
    let mut entry = cloud_entry(text, cloud).map_err(Error::config)?;
    let auth_url = entry["auth"]["auth_url"]
        .as_str()
        .ok_or_else(|| Error::config(format!("cloud {cloud} has no auth.auth_url")))?
        .to_string();
    let proxied = rewrite(&auth_url).ok_or_else(|| {
        Error::config(format!(
            "the auth_url {auth_url} of cloud {cloud} is not one of the proxied upstreams"
        ))
    })?;
    entry["auth"]["auth_url"] = json!(proxied);
    let doc = json!({"clouds": {cloud: entry}});
    let yaml = serde_saphyr::to_string(&doc)
        .map_err(|e| Error::config(format!("writing clouds.yaml: {e}")))?;
    Ok(format!(
        "# written by fault-proxy: cloud {cloud} with auth_url through the proxy\n{yaml}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const CLOUDS: &str = r#"
clouds:
  local-admin:
    auth_type: password
    auth:
      auth_url: "http://127.0.0.1:5000/v3"
      username: admin
      password: "pw"
      project_name: admin
      user_domain_name: Default
      project_domain_name: Default
    region_name: RegionOne
    interface: public
  other:
    auth_type: v3applicationcredential
    auth:
      auth_url: "http://127.0.0.1:5000/v3"
      application_credential_id: "abc"
      application_credential_secret: "s"
"#;

    #[test]
    fn token_requests() {
        let e = cloud_entry(CLOUDS, "local-admin").unwrap();
        assert_eq!(
            token_request(&e).unwrap(),
            json!({"auth": {
                "identity": {"methods": ["password"], "password": {"user": {
                    "name": "admin", "domain": {"name": "Default"}, "password": "pw"}}},
                "scope": {"project": {"name": "admin", "domain": {"name": "Default"}}}
            }})
        );
        let e = cloud_entry(CLOUDS, "other").unwrap();
        assert_eq!(
            token_request(&e).unwrap(),
            json!({"auth": {"identity": {"methods": ["application_credential"],
                "application_credential": {"id": "abc", "secret": "s"}}}})
        );
        assert!(
            cloud_entry(CLOUDS, "nope")
                .unwrap_err()
                .contains("local-admin")
        );
    }

    #[test]
    fn clouds_yaml_is_rewritten() {
        let out = rewrite_clouds_yaml(CLOUDS, "local-admin", |u| {
            Some(u.replace("127.0.0.1:5000", "127.0.0.1:40001"))
        })
        .unwrap();
        let e = cloud_entry(&out, "local-admin").unwrap();
        assert_eq!(e["auth"]["auth_url"], "http://127.0.0.1:40001/v3");
        assert_eq!(e["auth"]["password"], "pw");
        assert_eq!(e["region_name"], "RegionOne");
        assert!(cloud_entry(&out, "other").is_err(), "only the chosen cloud");
        assert!(rewrite_clouds_yaml(CLOUDS, "local-admin", |_| None).is_err());
    }

    #[test]
    fn upstreams() {
        let c = ProxyConfig::default()
            .upstream("keystone", "http://127.0.0.1:5000/v3")
            .unwrap()
            .upstream("compute", "http://127.0.0.1:8774/v2.1")
            .unwrap();
        assert_eq!(
            c.upstreams,
            vec![
                Upstream {
                    service: "identity".into(),
                    origin: "http://127.0.0.1:5000".into()
                },
                Upstream {
                    service: "compute".into(),
                    origin: "http://127.0.0.1:8774".into()
                }
            ]
        );
        assert!(c.upstream("volumev3", "http://127.0.0.1:8774/v3").is_err());
    }
}
