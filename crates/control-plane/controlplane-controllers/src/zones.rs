//! What Nova and Cinder share across availability zones: removing the per-zone objects of zones
//! no longer listed (and the zone-less object a zone list replaced), so a changed zone list
//! converges instead of leaving a volume service running in a zone that is gone.

use std::fmt::Debug;

use kube::api::{DeleteParams, ListParams, PropagationPolicy};
use kube::{Api, Resource, ResourceExt};
use serde::de::DeserializeOwned;

use crate::runtime::Error;

/// Whether `name` is `base` itself or `base-<something>` (pure).
pub fn in_family(name: &str, base: &str) -> bool {
    name == base
        || name
            .strip_prefix(base)
            .is_some_and(|rest| rest.starts_with('-'))
}

/// Deletes the objects of `api` labelled with instance `instance`, owned by `owner_uid`, whose
/// name is `base` or `base-…` and not in `keep`. Returns the names deleted.
pub async fn prune<K>(
    api: &Api<K>,
    instance: &str,
    owner_uid: Option<&str>,
    base: &str,
    keep: &[String],
) -> Result<Vec<String>, Error>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
{
    let sel = format!(
        "{}={instance}",
        controlplane_render::objects::INSTANCE_LABEL
    );
    let mut deleted = Vec::new();
    for o in api.list(&ListParams::default().labels(&sel)).await?.items {
        let n = o.name_any();
        let ours = o
            .owner_references()
            .iter()
            .any(|r| Some(r.uid.as_str()) == owner_uid);
        if !ours || !in_family(&n, base) || keep.contains(&n) {
            continue;
        }
        let dp = DeleteParams {
            propagation_policy: Some(PropagationPolicy::Background),
            ..DeleteParams::default()
        };
        match api.delete(&n, &dp).await {
            Ok(_) => deleted.push(n),
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(deleted)
}

#[cfg(test)]
mod tests {
    use super::in_family;

    #[test]
    fn family_is_the_base_and_its_dashed_suffixes() {
        assert!(in_family("c-volume", "c-volume"));
        assert!(in_family("c-volume-az1", "c-volume"));
        assert!(!in_family("c-volumes", "c-volume"));
        assert!(!in_family("c-api", "c-volume"));
    }
}
