//! Ownership marks on OpenStack objects. Every object we create carries the seed's tag plus
//! this cluster's id and the owning resource's UID, so two clusters or two resources sharing
//! a cloud never claim each other's objects. Services without tags (Nova flavors) carry the
//! same information in an extra spec.

use api::DeletionPolicy;
use api::naming::MANAGED_TAG;

/// Tag prefix naming the cluster that owns an object.
pub const CLUSTER_TAG_PREFIX: &str = "openstack-operator.cluster=";
/// Tag prefix naming the UID of the resource that owns an object.
pub const OWNER_TAG_PREFIX: &str = "openstack-operator.owner=";
/// Flavor extra spec carrying `<cluster>/<uid>` (flavors have no tags).
pub const FLAVOR_OWNER_SPEC: &str = "openstack-operator:owner";

/// Who we are when marking objects.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Owner {
    /// This operator's cluster identifier.
    pub cluster: String,
    /// UID of the owning custom resource.
    pub uid: String,
}

impl Owner {
    /// The tags marking an object as owned by this resource.
    pub fn tags(&self) -> Vec<String> {
        vec![
            MANAGED_TAG.to_string(),
            format!("{CLUSTER_TAG_PREFIX}{}", self.cluster),
            format!("{OWNER_TAG_PREFIX}{}", self.uid),
        ]
    }

    /// The flavor extra-spec value marking a flavor as ours.
    pub fn flavor_mark(&self) -> String {
        format!("{}/{}", self.cluster, self.uid)
    }

    /// Classifies an object by its tags.
    pub fn classify_tags(&self, tags: &[String]) -> Ownership {
        let find = |prefix: &str| {
            tags.iter()
                .find_map(|t| t.strip_prefix(prefix).map(str::to_string))
        };
        match (find(CLUSTER_TAG_PREFIX), find(OWNER_TAG_PREFIX)) {
            (Some(c), _) if c != self.cluster => Ownership::OtherCluster(c),
            (Some(_), Some(u)) if u == self.uid => Ownership::Ours,
            (Some(_), Some(u)) => Ownership::OtherOwner(u),
            _ if tags.iter().any(|t| t == MANAGED_TAG) => Ownership::Legacy,
            _ => Ownership::Foreign,
        }
    }

    /// Classifies a flavor by its owner extra spec.
    pub fn classify_flavor_mark(&self, mark: Option<&str>) -> Ownership {
        match mark.and_then(|m| m.split_once('/')) {
            Some((c, _)) if c != self.cluster => Ownership::OtherCluster(c.to_string()),
            Some((_, u)) if u == self.uid => Ownership::Ours,
            Some((_, u)) => Ownership::OtherOwner(u.to_string()),
            None => Ownership::Foreign,
        }
    }
}

/// Whether tags carry any of our marks (used to strip them when orphaning).
pub fn is_mark(tag: &str) -> bool {
    tag == MANAGED_TAG || tag.starts_with(CLUSTER_TAG_PREFIX) || tag.starts_with(OWNER_TAG_PREFIX)
}

/// Our marks added to existing tags, foreign tags kept.
pub fn merge_marks(existing: &[String], owner: &Owner) -> Vec<String> {
    let mut tags: Vec<String> = existing.iter().filter(|t| !is_mark(t)).cloned().collect();
    tags.extend(owner.tags());
    tags
}

/// Existing tags without our marks.
pub fn strip_marks(existing: &[String]) -> Vec<String> {
    existing.iter().filter(|t| !is_mark(t)).cloned().collect()
}

/// Whether deleting the resource deletes the OpenStack object.
pub fn should_delete(policy: Option<DeletionPolicy>, adopted: bool) -> bool {
    match policy {
        Some(DeletionPolicy::Delete) => true,
        Some(DeletionPolicy::Orphan) => false,
        None => !adopted,
    }
}

/// What an existing object's marks say about it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ownership {
    /// Created (or adopted) by this very resource.
    Ours,
    /// Marked by another resource of this cluster.
    OtherOwner(String),
    /// Marked by another cluster.
    OtherCluster(String),
    /// Carries only the seed operator's tag (created by the seed, or by us before marks had
    /// owners).
    Legacy,
    /// No mark: someone else created it.
    Foreign,
}

/// Decides whether an existing object found by name may be taken over.
pub fn may_take_over(
    ownership: &Ownership,
    adopt: bool,
    adopt_legacy: bool,
    what: &str,
) -> Result<bool, String> {
    match ownership {
        Ownership::Ours => Ok(false),
        Ownership::OtherOwner(uid) => Err(format!(
            "{what} is managed by another resource of this cluster (uid {uid}); two resources must not manage one object"
        )),
        Ownership::OtherCluster(c) => Err(format!("{what} is managed by another cluster ({c})")),
        Ownership::Legacy if adopt || adopt_legacy => Ok(true),
        Ownership::Foreign if adopt => Ok(true),
        Ownership::Legacy | Ownership::Foreign => Err(format!(
            "{what} already exists and was not created by this operator; set spec.adopt: true to take it over"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner() -> Owner {
        Owner {
            cluster: "c1".into(),
            uid: "u1".into(),
        }
    }

    #[test]
    fn classification() {
        let o = owner();
        assert_eq!(o.classify_tags(&o.tags()), Ownership::Ours);
        let other = Owner {
            cluster: "c1".into(),
            uid: "u2".into(),
        };
        assert_eq!(
            o.classify_tags(&other.tags()),
            Ownership::OtherOwner("u2".into())
        );
        let remote = Owner {
            cluster: "c2".into(),
            uid: "u1".into(),
        };
        assert_eq!(
            o.classify_tags(&remote.tags()),
            Ownership::OtherCluster("c2".into())
        );
        assert_eq!(
            o.classify_tags(&[MANAGED_TAG.to_string()]),
            Ownership::Legacy
        );
        assert_eq!(o.classify_tags(&["x".to_string()]), Ownership::Foreign);
        assert_eq!(o.classify_flavor_mark(Some("c1/u1")), Ownership::Ours);
        assert_eq!(
            o.classify_flavor_mark(Some("c2/u1")),
            Ownership::OtherCluster("c2".into())
        );
        assert_eq!(o.classify_flavor_mark(None), Ownership::Foreign);
    }

    #[test]
    fn take_over_rules() {
        assert_eq!(
            may_take_over(&Ownership::Ours, false, false, "x"),
            Ok(false)
        );
        assert!(may_take_over(&Ownership::Foreign, false, false, "x").is_err());
        assert_eq!(
            may_take_over(&Ownership::Foreign, true, false, "x"),
            Ok(true)
        );
        assert!(may_take_over(&Ownership::OtherOwner("u".into()), true, false, "x").is_err());
        assert!(may_take_over(&Ownership::OtherCluster("c".into()), true, true, "x").is_err());
        assert_eq!(
            may_take_over(&Ownership::Legacy, false, true, "x"),
            Ok(true)
        );
    }

    #[test]
    fn deletion_policy() {
        assert!(should_delete(None, false));
        assert!(!should_delete(None, true));
        assert!(should_delete(Some(DeletionPolicy::Delete), true));
        assert!(!should_delete(Some(DeletionPolicy::Orphan), false));
    }
}
