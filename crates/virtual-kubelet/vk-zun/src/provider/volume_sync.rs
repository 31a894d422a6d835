//! Writing a pod's volume files into its Zun containers: the I/O side of
//! [`crate::volumes`].
//!
//! A container that mounts volumes is created without running; once Zun shows it
//! `Created`, the node fetches the ConfigMaps, Secrets and tokens, writes the
//! files with one `put_archive` and starts it, so the process sees its files
//! from its first instruction, as on a kubelet. Afterwards the sources are read
//! again every [`REFRESH`] (and a token is requested again after 80 % of its
//! lifetime, as the kubelet's token manager does); the files are written again
//! only when their hash changed.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use openstack::container::{ZunContainer, status as zs};
use tracing::{debug, info, warn};
use vk_runtime::provider::{EventType, Objects, PodEvent, TokenWanted};

use super::ZunProvider;
use crate::labels;
use crate::status::Pass;
use crate::translate::{Role, TranslateError};
use crate::volumes::{self, Sources, TokenKey};

/// How often the node reads a running pod's ConfigMaps and Secrets again.
pub const REFRESH: Duration = Duration::from_secs(10);

/// What the node wrote, per pod uid.
#[derive(Default)]
pub(super) struct VolumeMemory {
    pods: HashMap<String, PodVolumes>,
}

#[derive(Default)]
struct PodVolumes {
    /// Zun uuid → hash of the files written into it.
    written: HashMap<String, String>,
    /// When the sources were last read.
    checked: Option<Instant>,
    /// Issued tokens: (token, issued, expires).
    tokens: BTreeMap<TokenKey, (String, jiff::Timestamp, jiff::Timestamp)>,
}

/// Whether a token issued at `issued` expiring at `expires` is to be requested again
/// (the kubelet refreshes after 80 % of the lifetime, or after 24 h).
pub fn token_due(issued: jiff::Timestamp, expires: jiff::Timestamp, now: jiff::Timestamp) -> bool {
    let life = expires.as_second() - issued.as_second();
    let refresh_at = issued.as_second() + (life * 8 / 10).min(24 * 3600);
    now.as_second() >= refresh_at
}

fn key_of(c: &ZunContainer) -> (Role, String) {
    let role = if c.labels.get(labels::ROLE).map(String::as_str) == Some("init") {
        Role::Init
    } else {
        Role::Main
    };
    (
        role,
        c.labels.get(labels::CONTAINER).cloned().unwrap_or_default(),
    )
}

impl ZunProvider {
    fn vmem(&self) -> std::sync::MutexGuard<'_, VolumeMemory> {
        self.volumes.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Forget what was written into a pod's containers (the pod is gone).
    pub(super) fn forget_volumes(&self, uid: &str) {
        self.vmem().pods.remove(uid);
    }

    /// Write the files of the pod's containers that mount volumes: those just created
    /// (then start them), and those whose files changed.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn sync_volumes(
        &self,
        pod: &Pod,
        uid: &str,
        observed: &[ZunContainer],
        objects: &dyn Objects,
        pass: &mut Pass,
        events: &mut Vec<PodEvent>,
        now: jiff::Timestamp,
    ) {
        let targets: Vec<(&ZunContainer, (Role, String))> = observed
            .iter()
            .filter(|c| {
                c.task_state.is_none()
                    && matches!(
                        c.status.as_str(),
                        zs::CREATED | zs::RUNNING | zs::STOPPED | zs::PAUSED
                    )
            })
            .map(|c| (c, key_of(c)))
            .filter(|(_, k)| volumes::mounts_volumes(pod, k.0, &k.1))
            .collect();
        if targets.is_empty() {
            return;
        }
        let refs = volumes::references(pod);
        let due = {
            let m = self.vmem();
            match m.pods.get(uid) {
                None => true,
                Some(p) => {
                    targets
                        .iter()
                        .any(|(c, _)| c.status == zs::CREATED || !p.written.contains_key(&c.uuid))
                        || p.checked.is_none_or(|t| t.elapsed() >= REFRESH)
                        || refs.tokens.iter().any(|t| {
                            p.tokens
                                .get(&t.key)
                                .is_none_or(|(_, i, e)| token_due(*i, *e, now))
                        })
                }
            }
        };
        if !due {
            return;
        }
        let ns = pod.metadata.namespace.clone().unwrap_or_default();
        let fetched = self.fetch_sources(pod, uid, &ns, &refs, objects, now).await;
        let (config_maps, secrets, tokens) = match fetched {
            Ok(f) => f,
            Err(m) => {
                self.volume_error(uid, &targets, &m, pass, events);
                return;
            }
        };
        let node_cpu = self.mem().node_cpu.unwrap_or(self.cfg.default_cpu);
        let src = Sources {
            config_maps: &config_maps,
            secrets: &secrets,
            tokens: &tokens,
            cfg: &self.cfg,
            node_cpu,
        };
        for (c, key) in &targets {
            let set = match volumes::files(pod, key.0, &key.1, &src) {
                Ok(s) => s,
                Err(TranslateError::MissingReference(m)) => {
                    self.volume_error(uid, &[(*c, key.clone())], &m, pass, events);
                    continue;
                }
                Err(e @ TranslateError::Unsupported { .. }) => {
                    pass.failure = Some((crate::status::PROVIDER_FAILED.into(), e.to_string()));
                    return;
                }
            };
            let fresh = c.status == zs::CREATED;
            let same = self
                .vmem()
                .pods
                .get(uid)
                .and_then(|p| p.written.get(&c.uuid))
                == Some(&set.hash);
            if !same || fresh {
                let tar = match set.tar(now.as_second().max(0) as u64) {
                    Ok(t) => t,
                    Err(e) => {
                        pass.failure = Some((crate::status::PROVIDER_FAILED.into(), e.to_string()));
                        return;
                    }
                };
                if let Err(e) = self.zun.put_archive(&c.uuid, "/", &tar).await {
                    warn!(zun = %c.uuid, error = %e, "writing volume files failed; retrying next pass");
                    if fresh {
                        let m = format!("writing the volume files: {}", e.message());
                        pass.create_errors
                            .insert(key.clone(), ("CreateContainerError".into(), m));
                    }
                    continue;
                }
                info!(zun = %c.uuid, container = %key.1, bytes = tar.len(), "wrote volume files");
                self.vmem()
                    .pods
                    .entry(uid.to_string())
                    .or_default()
                    .written
                    .insert(c.uuid.clone(), set.hash.clone());
            }
            if fresh {
                if let Err(m) = self.hand_over(pod, key, c, observed).await {
                    self.volume_error(uid, &[(*c, key.clone())], &m, pass, events);
                    continue;
                }
                match self.zun.start_container(&c.uuid).await {
                    Ok(()) => debug!(zun = %c.uuid, "started after its volume files were written"),
                    Err(e) => {
                        warn!(zun = %c.uuid, error = %e, "start failed; retrying next pass")
                    }
                }
            }
        }
        self.vmem().pods.entry(uid.to_string()).or_default().checked = Some(Instant::now());
    }

    /// Copies into created container `c` the `emptyDir` files of the init containers before it
    /// ([`crate::handover`]): `get_archive` of the volume's directory in the source, its entries
    /// moved to `c`'s mount path, `put_archive` at `/`. Called before `c` starts.
    async fn hand_over(
        &self,
        pod: &Pod,
        key: &(Role, String),
        c: &ZunContainer,
        observed: &[ZunContainer],
    ) -> Result<(), String> {
        let Some(spec) = pod.spec.as_ref() else {
            return Ok(());
        };
        for h in crate::handover::plan(spec, key.0, &key.1) {
            let source = observed
                .iter()
                .find(|o| key_of(o) == (Role::Init, h.from.clone()))
                .ok_or_else(|| {
                    format!(
                        "emptyDir {:?}: init container {:?} whose files it hands over has no Zun container",
                        h.volume, h.from
                    )
                })?;
            let tar = self
                .zun
                .get_archive(&source.uuid, &h.from_path)
                .await
                .map_err(|e| {
                    format!(
                        "emptyDir {:?}: reading {} from init container {:?}: {}",
                        h.volume,
                        h.from_path,
                        h.from,
                        e.message()
                    )
                })?;
            let moved = crate::handover::rebase(&tar, &h.to_path)
                .map_err(|e| format!("emptyDir {:?}: {e}", h.volume))?;
            self.zun
                .put_archive(&c.uuid, "/", &moved)
                .await
                .map_err(|e| {
                    format!(
                        "emptyDir {:?}: writing {} into container {:?}: {}",
                        h.volume,
                        h.to_path,
                        key.1,
                        e.message()
                    )
                })?;
            info!(zun = %c.uuid, container = %key.1, volume = %h.volume, from = %h.from, bytes = tar.len(), "handed over emptyDir files");
        }
        Ok(())
    }

    /// A container that cannot get its files: one just created waits with
    /// `CreateContainerConfigError` (as on a kubelet, e.g. for a missing ConfigMap); a
    /// running one keeps the files it has.
    fn volume_error(
        &self,
        uid: &str,
        targets: &[(&ZunContainer, (Role, String))],
        m: &str,
        pass: &mut Pass,
        events: &mut Vec<PodEvent>,
    ) {
        for (c, key) in targets {
            if c.status == zs::CREATED {
                pass.create_errors.insert(
                    key.clone(),
                    ("CreateContainerConfigError".into(), m.to_string()),
                );
            }
        }
        warn!(pod = %uid, error = %m, "volume files not written");
        self.once(
            uid,
            events,
            PodEvent {
                type_: EventType::Warning,
                reason: "FailedMount".into(),
                message: format!("MountVolume failed: {m}"),
            },
        );
    }

    /// The ConfigMaps, Secrets and tokens the pod's volumes refer to (tokens from the
    /// cache while they are fresh).
    #[allow(clippy::type_complexity)]
    async fn fetch_sources(
        &self,
        pod: &Pod,
        uid: &str,
        ns: &str,
        refs: &volumes::VolumeRefs,
        objects: &dyn Objects,
        now: jiff::Timestamp,
    ) -> Result<
        (
            BTreeMap<String, k8s_openapi::api::core::v1::ConfigMap>,
            BTreeMap<String, k8s_openapi::api::core::v1::Secret>,
            BTreeMap<TokenKey, String>,
        ),
        String,
    > {
        let mut cms = BTreeMap::new();
        for n in &refs.config_maps {
            if let Some(cm) = objects.config_map(ns, n).await? {
                cms.insert(n.clone(), cm);
            }
        }
        let mut secrets = BTreeMap::new();
        for n in &refs.secrets {
            if let Some(s) = objects.secret(ns, n).await? {
                secrets.insert(n.clone(), s);
            }
        }
        let mut tokens = BTreeMap::new();
        let sa = pod
            .spec
            .as_ref()
            .and_then(|s| s.service_account_name.clone())
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "default".into());
        for t in &refs.tokens {
            let cached = self
                .vmem()
                .pods
                .get(uid)
                .and_then(|p| p.tokens.get(&t.key).cloned())
                .filter(|(_, i, e)| !token_due(*i, *e, now));
            let token = match cached {
                Some((tok, _, _)) => tok,
                None => {
                    let issued = objects
                        .service_account_token(
                            ns,
                            &TokenWanted {
                                service_account: sa.clone(),
                                audience: t.audience.clone(),
                                expiration_seconds: t.expiration_seconds,
                                pod: (pod.metadata.name.clone().unwrap_or_default(), uid.into()),
                            },
                        )
                        .await?;
                    info!(pod = %uid, serviceaccount = %sa, expires = %issued.expires, "requested a service account token");
                    self.vmem()
                        .pods
                        .entry(uid.to_string())
                        .or_default()
                        .tokens
                        .insert(t.key, (issued.token.clone(), now, issued.expires));
                    issued.token
                }
            };
            tokens.insert(t.key, token);
        }
        Ok((cms, secrets, tokens))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::{Arc, Mutex};

    use async_trait::async_trait;
    use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
    use kube::api::ApiResource;
    use openstack::container::status as zs;
    use openstack::fake::FakeZun;
    use serde_json::json;
    use vk_runtime::provider::{IssuedToken, Objects, Provider as _, TokenWanted};

    use super::token_due;
    use crate::provider::{UnlimitedCapacity, ZunProvider};
    use crate::translate::Config;

    #[derive(Default)]
    struct Objs {
        config_maps: BTreeMap<String, ConfigMap>,
        asked: Mutex<Vec<(String, TokenWanted)>>,
    }

    #[async_trait]
    impl Objects for Objs {
        async fn config_map(&self, _ns: &str, name: &str) -> Result<Option<ConfigMap>, String> {
            Ok(self.config_maps.get(name).cloned())
        }
        async fn secret(&self, _ns: &str, _name: &str) -> Result<Option<Secret>, String> {
            Ok(None)
        }
        async fn custom_object(
            &self,
            _kind: &ApiResource,
            _ns: &str,
            _name: &str,
        ) -> Result<Option<serde_json::Value>, String> {
            Ok(None)
        }
        async fn service_account_token(
            &self,
            ns: &str,
            w: &TokenWanted,
        ) -> Result<IssuedToken, String> {
            self.asked.lock().unwrap().push((ns.into(), w.clone()));
            Ok(IssuedToken {
                token: "the-token".into(),
                expires: jiff::Timestamp::now() + jiff::SignedDuration::from_secs(3600),
            })
        }
    }

    fn pod() -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "uid-v"},
            "spec": {"nodeName": "vk", "serviceAccountName": "app",
                "volumes": [{"name": "cfg", "configMap": {"name": "app"}},
                            {"name": "tok", "projected": {"sources": [
                                {"serviceAccountToken": {"path": "token", "audience": "vault"}}]}}],
                "containers": [{"name": "c", "image": "busybox", "volumeMounts": [
                    {"name": "cfg", "mountPath": "/cfg"}, {"name": "tok", "mountPath": "/tok"}]}]},
            "status": {"phase": "Pending"}
        }))
        .unwrap()
    }

    fn contains(hay: &[u8], needle: &[u8]) -> bool {
        hay.windows(needle.len()).any(|w| w == needle)
    }

    #[tokio::test]
    async fn files_are_written_between_create_and_start() {
        let z = FakeZun::new();
        let p = ZunProvider::new(
            Arc::new(z.clone()),
            Config {
                node_name: "vk".into(),
                ..Default::default()
            },
            None,
            UnlimitedCapacity::default(),
        );
        let mut objs = Objs::default();
        let pods = [pod()];
        // The ConfigMap is missing: the container is created but waits unstarted.
        p.sync(&pods, &objs, true).await.unwrap();
        assert_eq!(z.calls("create_container"), 1);
        let u = p.sync(&pods, &objs, true).await.unwrap();
        let id = z.containers()[0].uuid.clone();
        assert_eq!(z.containers()[0].status, zs::CREATED);
        assert!(z.archives(&id).is_empty());
        assert!(
            u[0].events
                .iter()
                .any(|e| e.reason == "FailedMount" && e.message.contains("\"app\"")),
            "{:?}",
            u[0].events
        );
        // Once it exists: one archive, then the start.
        let cm = ConfigMap {
            data: Some([("greeting".to_string(), "hello".to_string())].into()),
            ..Default::default()
        };
        objs.config_maps.insert("app".into(), cm);
        p.sync(&pods, &objs, true).await.unwrap();
        let a = z.archives(&id);
        assert_eq!(a.len(), 1);
        assert_eq!(a[0].0, "/");
        assert!(contains(&a[0].1, b"hello") && contains(&a[0].1, b"the-token"));
        assert!(contains(&a[0].1, b"cfg/..data"));
        assert_eq!(z.containers()[0].status, zs::RUNNING);
        let asked = objs.asked.lock().unwrap().clone();
        assert_eq!(asked.len(), 1);
        assert_eq!(asked[0].0, "ns");
        assert_eq!(
            asked[0].1,
            TokenWanted {
                service_account: "app".into(),
                audience: Some("vault".into()),
                expiration_seconds: 3600,
                pod: ("p".into(), "uid-v".into()),
            }
        );
    }

    #[test]
    fn tokens_are_refreshed_after_80_percent_of_their_life() {
        let t = |s: i64| jiff::Timestamp::from_second(s).unwrap();
        assert!(!token_due(t(0), t(3600), t(2879)));
        assert!(token_due(t(0), t(3600), t(2880)));
        // A very long token is refreshed after a day at the latest.
        assert!(!token_due(t(0), t(10 * 86400), t(86399)));
        assert!(token_due(t(0), t(10 * 86400), t(86400)));
    }
}
