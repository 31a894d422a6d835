//! The clouds named by `OpenstackCloud`s: one connected client each, made on first use from
//! the cloud's Secret and made again when the cloud or its Secret changes. Each has its own
//! rate limiter and concurrency limit (its spec's, else the operator's) and counts its calls
//! under its name in the per-cloud metric families.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use api::cloud::{CloudRefError, OpenstackCloud, OpenstackCloudSpec, OpenstackCloudStatus};
use api::common::set_condition;
use api::{Condition, Phase};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Patch, PatchParams};
use kube::{Api, Resource, ResourceExt};
use openstack::Cloud;
use openstack::adapter::{ClientOptions, CloudSelector};
use tracing::{info, warn};

use crate::framework::FIELD_MANAGER;
use crate::project::cache::LookupCache;

/// How long a failed connection is remembered before the next pass tries again with the same
/// Secret: a cloud with bad credentials is not asked for a token on every pass of every one
/// of its resources.
const FAILED_CONNECT_HOLD: Duration = Duration::from_secs(20);

/// A connected cloud: what a pass in it needs.
#[derive(Clone)]
pub struct ConnectedCloud {
    /// The OpenstackCloud's name.
    pub name: String,
    /// Its OpenStack port.
    pub cloud: Cloud,
    /// Its lookup cache.
    pub lookups: Arc<LookupCache>,
}

/// One cloud's last connection attempt.
struct Entry {
    /// What it was made from (see [`fingerprint`]).
    fingerprint: String,
    /// The client, or why there is none.
    outcome: Result<ConnectedCloud, String>,
    /// When the attempt was made.
    at: Instant,
}

/// What a connection was made from: the cloud's spec generation and its Secret's version,
/// so a change of either makes a new one.
pub fn fingerprint(cloud: &OpenstackCloud, secret: &Secret) -> String {
    format!(
        "{}/{}/{}",
        cloud.metadata.uid.as_deref().unwrap_or_default(),
        cloud.metadata.generation.unwrap_or_default(),
        secret
            .metadata
            .resource_version
            .as_deref()
            .unwrap_or_default()
    )
}

/// The client options of one cloud: the operator's, with the cloud's own limits and its name
/// on the metrics.
pub fn options_for(base: &ClientOptions, name: &str, spec: &OpenstackCloudSpec) -> ClientOptions {
    let mut o = base.clone();
    if let Some(rps) = spec.requests_per_second {
        o.requests_per_second = rps;
    }
    if let Some(n) = spec.max_concurrent_calls {
        o.max_concurrent = usize::try_from(n).unwrap_or(usize::MAX).max(1);
    }
    o.metrics = base.metrics.with_cloud(name);
    o
}

/// The `clouds.yaml` held in `secret` under `key`; the error never quotes the content.
pub fn clouds_yaml(secret: &Secret, key: &str) -> Result<String, String> {
    let origin = format!(
        "Secret {}/{}",
        secret.namespace().unwrap_or_default(),
        secret.name_any()
    );
    if let Some(v) = secret.data.as_ref().and_then(|d| d.get(key)) {
        return String::from_utf8(v.0.clone())
            .map_err(|_| format!("{origin} key {key:?} is not UTF-8 text"));
    }
    if let Some(v) = secret.string_data.as_ref().and_then(|d| d.get(key)) {
        return Ok(v.clone());
    }
    Err(format!("{origin} has no key {key:?}"))
}

/// The connected clouds, by `OpenstackCloud` name.
pub struct CloudRegistry {
    base: ClientOptions,
    /// One async lock per cloud: concurrent passes of one cloud's resources wait for a single
    /// connection attempt, and a slow or failing cloud never holds up another.
    entries: Mutex<HashMap<String, Arc<tokio::sync::Mutex<Option<Entry>>>>>,
    /// Clients replaced by a new connection, by cloud, with the fingerprint they were made
    /// from: passes that took one before the switch may still be using it (see
    /// [`CloudRegistry::passes_on_other_versions`]).
    retired: Mutex<HashMap<String, Vec<(String, Cloud)>>>,
}

/// How many holders besides `owners` use `cloud`: every pass's context holds a clone.
fn holders(cloud: &Cloud, owners: usize) -> usize {
    Arc::strong_count(&cloud.identity).saturating_sub(owners)
}

impl CloudRegistry {
    /// A registry whose clients start from `base`.
    pub fn new(base: ClientOptions) -> Self {
        CloudRegistry {
            base,
            entries: Mutex::new(HashMap::new()),
            retired: Mutex::new(HashMap::new()),
        }
    }

    /// How many clients of cloud `name` made from another Secret version than `print` (see
    /// [`fingerprint`]) are still held by a pass. Credential rotation deletes an old
    /// credential only when this is 0, so no request under way with it fails.
    pub fn passes_on_other_versions(&self, name: &str, print: &str) -> usize {
        let mut busy = 0;
        {
            let mut retired = self.retired.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(list) = retired.get_mut(name) {
                list.retain(|(_, c)| holders(c, 1) > 0);
                busy += list
                    .iter()
                    .filter(|(p, _)| p != print)
                    .map(|(_, c)| holders(c, 1))
                    .sum::<usize>();
            }
        }
        let slot = self
            .entries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .cloned();
        if let Some(slot) = slot {
            match slot.try_lock() {
                Ok(entry) => {
                    if let Some(Entry {
                        fingerprint,
                        outcome: Ok(c),
                        ..
                    }) = entry.as_ref()
                        && fingerprint != print
                    {
                        busy += holders(&c.cloud, 1);
                    }
                }
                // A connection is being made: take it as in use, ask again later.
                Err(_) => busy += 1,
            }
        }
        busy
    }

    fn retire(&self, name: &str, old: Option<Entry>) {
        if let Some(Entry {
            fingerprint,
            outcome: Ok(c),
            ..
        }) = old
        {
            self.retired
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .entry(name.to_string())
                .or_default()
                .push((fingerprint, c.cloud));
        }
    }

    /// The cloud `name` for a resource in `namespace` (None: cluster-scoped): refused when it
    /// does not exist or does not allow the namespace, connected when it does.
    pub async fn resolve(
        &self,
        client: &kube::Client,
        name: &str,
        namespace: Option<&str>,
    ) -> Result<ConnectedCloud, CloudRefError> {
        let cloud = get_cloud(client, name).await?;
        api::cloud::check_cloud_ref(name, cloud.as_ref().map(|c| &c.spec), namespace)?;
        match cloud {
            Some(c) => self.connect(client, &c).await,
            None => Err(CloudRefError::Missing(name.into())),
        }
    }

    /// The cloud `name` whatever the namespace (the drift check, which reads a cloud for
    /// objects that were already allowed).
    pub async fn connect_by_name(
        &self,
        client: &kube::Client,
        name: &str,
    ) -> Result<ConnectedCloud, CloudRefError> {
        let cloud = get_cloud(client, name)
            .await?
            .ok_or_else(|| CloudRefError::Missing(name.into()))?;
        api::cloud::check_cloud_ref(name, Some(&cloud.spec), None)?;
        self.connect(client, &cloud).await
    }

    /// Forgets the connection of `name`, so the next pass connects again (after its
    /// credentials were refused).
    pub fn forget(&self, name: &str) {
        let slot = self
            .entries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(name);
        if let Some(slot) = slot
            && let Ok(mut entry) = slot.try_lock()
        {
            self.retire(name, entry.take());
        }
    }

    async fn connect(
        &self,
        client: &kube::Client,
        cloud: &OpenstackCloud,
    ) -> Result<ConnectedCloud, CloudRefError> {
        let name = cloud.name_any();
        let unreachable = |detail: String| CloudRefError::Unreachable {
            cloud: name.clone(),
            detail,
        };
        let sref = &cloud.spec.secret_ref;
        let secret = Api::<Secret>::namespaced(client.clone(), &sref.namespace)
            .get_opt(&sref.name)
            .await
            .map_err(|e| {
                unreachable(format!(
                    "cannot read Secret {}/{}: {e}",
                    sref.namespace, sref.name
                ))
            })?;
        let Some(secret) = secret else {
            let e = unreachable(format!(
                "Secret {}/{} (spec.secretRef) does not exist",
                sref.namespace, sref.name
            ));
            self.record(client, cloud, &Err(e.to_string())).await;
            return Err(e);
        };
        let print = fingerprint(cloud, &secret);
        let slot = self
            .entries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(name.clone())
            .or_default()
            .clone();
        let mut slot = slot.lock().await;
        if let Some(e) = slot.as_ref()
            && e.fingerprint == print
        {
            match &e.outcome {
                Ok(c) => return Ok(c.clone()),
                Err(detail) if e.at.elapsed() < FAILED_CONNECT_HOLD => {
                    return Err(unreachable(detail.clone()));
                }
                Err(_) => {}
            }
        }
        let outcome = match clouds_yaml(&secret, &sref.key) {
            Err(e) => Err(e),
            Ok(yaml) => {
                let selector = CloudSelector::Yaml {
                    yaml: yaml.into(),
                    cloud: cloud.spec.cloud.clone(),
                    region: cloud.spec.region.clone(),
                    origin: format!("Secret {}/{}", sref.namespace, sref.name),
                };
                match Cloud::connect(&selector, options_for(&self.base, &name, &cloud.spec)).await {
                    Ok(c) => Ok(ConnectedCloud {
                        name: name.clone(),
                        cloud: c,
                        lookups: Default::default(),
                    }),
                    Err(e) => Err(e.to_string()),
                }
            }
        };
        match &outcome {
            Ok(_) => info!(cloud = %name, "connected to OpenstackCloud"),
            Err(e) => warn!(cloud = %name, error = %e, "cannot connect to OpenstackCloud"),
        }
        let report = outcome.as_ref().map(|_| ()).map_err(Clone::clone);
        let old = slot.replace(Entry {
            fingerprint: print,
            outcome: outcome.clone(),
            at: Instant::now(),
        });
        self.retire(&name, old);
        drop(slot);
        self.record(client, cloud, &report).await;
        outcome.map_err(unreachable)
    }

    /// Writes the cloud's status when the outcome of connecting to it changed.
    async fn record(
        &self,
        client: &kube::Client,
        cloud: &OpenstackCloud,
        outcome: &Result<(), String>,
    ) {
        let before = cloud.status.clone().unwrap_or_default();
        let status = cloud_status(&before, outcome, cloud.metadata.generation);
        if status == before {
            return;
        }
        apply_cloud_status(client, cloud, &status, "connection").await;
    }
}

async fn get_cloud(
    client: &kube::Client,
    name: &str,
) -> Result<Option<OpenstackCloud>, CloudRefError> {
    Api::<OpenstackCloud>::all(client.clone())
        .get_opt(name)
        .await
        .map_err(|e| CloudRefError::Unreachable {
            cloud: name.into(),
            detail: format!("cannot read the OpenstackCloud: {e}"),
        })
}

/// The status of a cloud after a connection attempt (pure). Only a change of outcome moves
/// it, so a cloud's resources connecting again and again write nothing.
pub fn cloud_status(
    before: &OpenstackCloudStatus,
    outcome: &Result<(), String>,
    generation: Option<i64>,
) -> OpenstackCloudStatus {
    let mut s = before.clone();
    let (phase, cond) = match outcome {
        Ok(()) => (
            Phase::Ready,
            Condition::new(
                "Ready",
                true,
                "Connected",
                "authenticated with the Secret's credentials",
            ),
        ),
        Err(e) => (
            Phase::Error,
            Condition::new("Ready", false, "ConnectFailed", e.clone()),
        ),
    };
    s.phase = Some(phase);
    let mut cond = cond;
    cond.observed_generation = generation;
    // An unchanged status keeps its transition time (set_condition).
    set_condition(&mut s.conditions, cond, &crate::framework::now());
    s.observed_generation = generation;
    s
}

/// Writes an `OpenstackCloud`'s status by server-side apply; a failure is logged (`what`: the
/// part of the status the caller changed), and the next pass writes it again.
pub(crate) async fn apply_cloud_status(
    client: &kube::Client,
    cloud: &OpenstackCloud,
    status: &api::cloud::OpenstackCloudStatus,
    what: &str,
) {
    let patch = serde_json::json!({
        "apiVersion": OpenstackCloud::api_version(&()),
        "kind": OpenstackCloud::kind(&()),
        "status": status,
    });
    if let Err(e) = Api::<OpenstackCloud>::all(client.clone())
        .patch_status(
            &cloud.name_any(),
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(patch),
        )
        .await
    {
        warn!(cloud = %cloud.name_any(), error = %e, what, "cannot write the OpenstackCloud's status");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;
    use std::collections::BTreeMap;

    fn spec() -> OpenstackCloudSpec {
        serde_json::from_value(serde_json::json!({
            "secretRef": {"name": "s", "namespace": "ops"},
            "cloud": "east",
            "requestsPerSecond": 3,
            "maxConcurrentCalls": 2,
        }))
        .unwrap()
    }

    #[test]
    fn a_cloud_gets_its_own_limits_and_metric_label() {
        let base = ClientOptions::default();
        let o = options_for(&base, "east", &spec());
        assert_eq!((o.requests_per_second, o.max_concurrent), (3, 2));
        let mut plain = spec();
        plain.requests_per_second = None;
        plain.max_concurrent_calls = None;
        let o = options_for(&base, "east", &plain);
        assert_eq!(
            (o.requests_per_second, o.max_concurrent),
            (base.requests_per_second, base.max_concurrent)
        );
    }

    fn secret(rv: &str, data: &[(&str, &str)]) -> Secret {
        let mut s = Secret::default();
        s.metadata.name = Some("s".into());
        s.metadata.namespace = Some("ops".into());
        s.metadata.resource_version = Some(rv.into());
        s.data = Some(
            data.iter()
                .map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec())))
                .collect::<BTreeMap<_, _>>(),
        );
        s
    }

    #[test]
    fn the_clouds_yaml_comes_from_the_named_key_and_a_missing_key_is_named() {
        let s = secret("1", &[("clouds.yaml", "clouds: {}")]);
        assert_eq!(clouds_yaml(&s, "clouds.yaml").unwrap(), "clouds: {}");
        let e = clouds_yaml(&s, "other").unwrap_err();
        assert_eq!(e, "Secret ops/s has no key \"other\"");
    }

    #[test]
    fn a_changed_secret_or_spec_is_a_new_connection() {
        let mut c = OpenstackCloud::new("east", spec());
        c.metadata.uid = Some("u".into());
        c.metadata.generation = Some(1);
        let a = fingerprint(&c, &secret("1", &[]));
        assert_eq!(a, fingerprint(&c, &secret("1", &[])));
        assert_ne!(a, fingerprint(&c, &secret("2", &[])));
        c.metadata.generation = Some(2);
        assert_ne!(a, fingerprint(&c, &secret("1", &[])));
    }

    #[test]
    fn a_replaced_client_counts_while_a_pass_holds_it() {
        let registry = CloudRegistry::new(ClientOptions::default());
        let fake = openstack::fake::FakeCloud::new();
        let connected = |cloud: Cloud| ConnectedCloud {
            name: "east".into(),
            cloud,
            lookups: Default::default(),
        };
        let old = fake.cloud();
        let held_by_a_pass = old.clone();
        registry.retire(
            "east",
            Some(Entry {
                fingerprint: "u/1/10".into(),
                outcome: Ok(connected(old)),
                at: Instant::now(),
            }),
        );
        assert_eq!(registry.passes_on_other_versions("east", "u/1/11"), 1);
        assert_eq!(registry.passes_on_other_versions("west", "u/1/11"), 0);
        // A client made from the version asked about is not an old one.
        assert_eq!(registry.passes_on_other_versions("east", "u/1/10"), 0);
        drop(held_by_a_pass);
        assert_eq!(registry.passes_on_other_versions("east", "u/1/11"), 0);
    }

    #[test]
    fn the_cloud_status_moves_only_when_the_outcome_changes() {
        let ok = cloud_status(&Default::default(), &Ok(()), Some(1));
        assert_eq!(ok.phase, Some(Phase::Ready));
        assert_eq!(cloud_status(&ok, &Ok(()), Some(1)), ok);
        let bad = cloud_status(&ok, &Err("401: bad secret".into()), Some(1));
        assert_eq!(bad.phase, Some(Phase::Error));
        let c = &bad.conditions[0];
        assert_eq!(
            (c.reason.as_deref(), c.message.as_deref()),
            (Some("ConnectFailed"), Some("401: bad secret"))
        );
        assert_ne!(
            c.last_transition_time,
            ok.conditions[0].last_transition_time
        );
    }
}
