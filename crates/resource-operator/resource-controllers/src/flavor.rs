//! OpenstackFlavor: a Nova flavor. Sizes are immutable in Nova, so changing them replaces the
//! flavor (new ID), as the seed does; extra specs and the description are reconciled in place.

use std::collections::BTreeMap;

use api::{FieldError, OpenstackFlavor, OpenstackFlavorSpec, OpenstackFlavorStatus};
use async_trait::async_trait;
use kube::Api;
use kube::runtime::events::EventType;
use openstack::OptionalExt;
use openstack::model::{Flavor, FlavorCreate};

use crate::context::Context;
use crate::error::{ReconcileError, Result};
use crate::framework::{Managed, Progress, owner_of, publish};
use crate::ownership::{FLAVOR_OWNER_SPEC, Owner, Ownership, may_take_over, should_delete};

/// Extra-spec changes: keys to set and keys to delete.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExtraSpecDiff {
    /// Keys to add or change.
    pub set: BTreeMap<String, String>,
    /// Keys to remove.
    pub delete: Vec<String>,
}

impl ExtraSpecDiff {
    /// Whether nothing changes.
    pub fn is_empty(&self) -> bool {
        self.set.is_empty() && self.delete.is_empty()
    }
}

/// What to do about the flavor (pure plan).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FlavorPlan {
    /// Create it, then set extra specs (our mark included).
    Create(FlavorCreate, BTreeMap<String, String>),
    /// Sizes differ from Nova's: delete `old` and create anew.
    Recreate {
        /// The flavor being replaced.
        old: String,
        /// The replacement.
        create: FlavorCreate,
        /// Its extra specs.
        extra_specs: BTreeMap<String, String>,
        /// What differs, for the Event.
        changed: Vec<&'static str>,
    },
    /// Reconcile in place.
    Update {
        /// Nova ID.
        id: String,
        /// Extra-spec changes.
        extra_specs: ExtraSpecDiff,
        /// New description, if it differs.
        description: Option<String>,
        /// Taken over now.
        adopt: bool,
    },
}

fn to_u(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

fn create_request(spec: &OpenstackFlavorSpec, owner: &Owner) -> FlavorCreate {
    let mut req = sized_request(spec);
    req.id = Some(derived_flavor_id(
        owner,
        &req.name,
        [
            u64::from(req.vcpus),
            req.ram_mb,
            req.disk_gb,
            req.ephemeral_gb,
            req.swap_mb,
            u64::from(req.is_public),
        ],
    ));
    req
}

/// The spec as a create request without an ID.
fn sized_request(spec: &OpenstackFlavorSpec) -> FlavorCreate {
    FlavorCreate {
        name: spec.name.clone(),
        id: None,
        vcpus: u32::try_from(spec.vcpus).unwrap_or(u32::MAX),
        ram_mb: to_u(spec.ram),
        disk_gb: to_u(spec.disk),
        ephemeral_gb: to_u(spec.ephemeral),
        swap_mb: to_u(spec.swap),
        is_public: spec.is_public,
        description: (!spec.description.is_empty()).then(|| spec.description.clone()),
    }
}

/// The ID we give a flavor we create: a UUID derived from the owner and the flavor's
/// immutable attributes. Our mark is an extra spec, written by a second call after the
/// create; a flavor left without it (the operator stopped between the two calls) is still
/// recognised as ours by its ID, and a replacement with other sizes gets another ID.
pub fn derived_flavor_id(owner: &Owner, name: &str, sizes: [u64; 6]) -> String {
    let key = format!(
        "openstack-operator/flavor/{}/{}/{name}/{sizes:?}",
        owner.cluster, owner.uid
    );
    uuid::Uuid::new_v5(&uuid::Uuid::NAMESPACE_URL, key.as_bytes()).to_string()
}

/// Who owns a flavor: its mark, or for an unmarked flavor, whether its ID is the one we derive
/// for it.
pub fn classify_flavor(owner: &Owner, f: &Flavor) -> Ownership {
    match owner.classify_flavor_mark(f.extra_specs.get(FLAVOR_OWNER_SPEC).map(String::as_str)) {
        Ownership::Foreign
            if f.id
                == derived_flavor_id(
                    owner,
                    &f.name,
                    [
                        u64::from(f.vcpus),
                        f.ram_mb,
                        f.disk_gb,
                        f.ephemeral_gb,
                        f.swap_mb,
                        u64::from(f.is_public),
                    ],
                ) =>
        {
            Ownership::Ours
        }
        other => other,
    }
}

/// The extra specs we want: the spec's plus our ownership mark.
pub fn desired_extra_specs(spec: &OpenstackFlavorSpec, owner: &Owner) -> BTreeMap<String, String> {
    let mut m = spec.extra_specs.clone().unwrap_or_default();
    m.insert(FLAVOR_OWNER_SPEC.to_string(), owner.flavor_mark());
    m
}

/// Differences between wanted and existing extra specs (reconciled as a set).
pub fn diff_extra_specs(
    desired: &BTreeMap<String, String>,
    observed: &BTreeMap<String, String>,
) -> ExtraSpecDiff {
    ExtraSpecDiff {
        set: desired
            .iter()
            .filter(|(k, v)| observed.get(*k) != Some(*v))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        delete: observed
            .keys()
            .filter(|k| !desired.contains_key(*k))
            .cloned()
            .collect(),
    }
}

/// The immutable attributes that differ between spec and flavor.
pub fn immutable_changes(spec: &OpenstackFlavorSpec, f: &Flavor) -> Vec<&'static str> {
    let want = sized_request(spec);
    let mut changed = Vec::new();
    if f.vcpus != want.vcpus {
        changed.push("vcpus");
    }
    if f.ram_mb != want.ram_mb {
        changed.push("ram");
    }
    if f.disk_gb != want.disk_gb {
        changed.push("disk");
    }
    if f.ephemeral_gb != want.ephemeral_gb {
        changed.push("ephemeral");
    }
    if f.swap_mb != want.swap_mb {
        changed.push("swap");
    }
    if f.is_public != want.is_public {
        changed.push("isPublic");
    }
    changed
}

/// Plans the flavor.
pub fn plan(
    spec: &OpenstackFlavorSpec,
    observed: Option<&Flavor>,
    owner: &Owner,
    adopted_before: bool,
) -> Result<FlavorPlan> {
    let desired = desired_extra_specs(spec, owner);
    let Some(f) = observed else {
        return Ok(FlavorPlan::Create(create_request(spec, owner), desired));
    };
    let ownership = classify_flavor(owner, f);
    let adopt = may_take_over(
        &ownership,
        spec.adopt,
        false,
        &format!("Nova flavor {:?}", f.name),
    )
    .map_err(ReconcileError::NotOwned)?;
    let changed = immutable_changes(spec, f);
    if !changed.is_empty() {
        if adopt || adopted_before {
            return Err(ReconcileError::invalid(
                "spec",
                format!(
                    "the adopted flavor {:?} differs in {}; Nova flavors are immutable and an adopted flavor is never replaced",
                    f.name,
                    changed.join(", ")
                ),
            ));
        }
        return Ok(FlavorPlan::Recreate {
            old: f.id.clone(),
            create: create_request(spec, owner),
            extra_specs: desired,
            changed,
        });
    }
    let description = (f.description.as_deref().unwrap_or("") != spec.description)
        .then(|| spec.description.clone());
    Ok(FlavorPlan::Update {
        id: f.id.clone(),
        extra_specs: diff_extra_specs(&desired, &f.extra_specs),
        description,
        adopt,
    })
}

/// Our flavor for the spec's sizes, by the ID we derive for it: one GET, where a lookup by
/// name lists every flavor of the cloud (Nova has no name filter), which made creating N
/// flavors cost O(N²).
async fn find_own(ctx: &Context, obj: &OpenstackFlavor, owner: &Owner) -> Result<Option<Flavor>> {
    let Some(id) = create_request(&obj.spec, owner).id else {
        return Ok(None);
    };
    Ok(ctx.cloud.compute.get_flavor(&id).await.optional()?)
}

/// Why a create found its name taken: the flavor's owner as the lookup by name would have
/// reported it (`NotOwned` naming the owner), else the service's conflict.
fn taken_name(owner: &Owner, f: &Flavor, conflict: openstack::Error) -> ReconcileError {
    match may_take_over(
        &classify_flavor(owner, f),
        false,
        false,
        &format!("Nova flavor {:?} ({})", f.name, f.id),
    ) {
        Err(not_owned) => ReconcileError::NotOwned(not_owned),
        Ok(_) => conflict.into(),
    }
}

async fn apply_extra_specs(ctx: &Context, id: &str, diff: &ExtraSpecDiff) -> Result<()> {
    if !diff.set.is_empty() {
        ctx.cloud
            .compute
            .set_flavor_extra_specs(id, &diff.set)
            .await?;
    }
    for key in &diff.delete {
        ctx.cloud
            .compute
            .delete_flavor_extra_spec(id, key)
            .await
            .optional()?;
    }
    Ok(())
}

#[async_trait]
impl Managed for OpenstackFlavor {
    type Status = OpenstackFlavorStatus;
    const READY_CONDITION: &'static str = "FlavorReady";

    fn status(&self) -> Option<&Self::Status> {
        self.status.as_ref()
    }
    fn cloud_ref(&self) -> Option<&str> {
        self.spec.cloud_ref.as_ref().map(|c| c.name.as_str())
    }

    fn api(client: kube::Client, _obj: &Self) -> Api<Self> {
        Api::all(client)
    }

    fn validate(&self) -> Vec<FieldError> {
        api::validation::object_errors(self, &self.spec)
    }

    async fn apply(&self, ctx: &Context, status: &mut Self::Status) -> Result<Progress> {
        let owner = owner_of(self, ctx);
        let compute = &ctx.cloud.compute;
        let mut observed = match &status.flavor_id {
            Some(id) => compute.get_flavor(id).await.optional()?,
            None => None,
        };
        if observed.is_none() {
            observed = find_own(ctx, self, &owner).await?;
        }
        if observed.is_none() && self.spec.adopt {
            observed = compute.find_flavor(&self.spec.name).await?;
        }
        if observed.is_none() && status.flavor_id.is_some() {
            publish(
                ctx,
                self,
                EventType::Warning,
                "Recreating",
                "Create",
                format!(
                    "flavor {} was deleted outside the operator; creating it again",
                    self.spec.name
                ),
            )
            .await;
        }
        match plan(
            &self.spec,
            observed.as_ref(),
            &owner,
            status.adopted.unwrap_or(false),
        )? {
            FlavorPlan::Create(req, specs) => {
                let f = match compute.create_flavor(&req).await {
                    Ok(f) => f,
                    Err(e) if e.is_conflict() => {
                        // Nova flavor names are unique: the name is taken by a flavor that is
                        // not ours under the ID we derive. Look it up by name to say whose.
                        let Some(f) = compute.find_flavor(&self.spec.name).await? else {
                            return Err(e.into());
                        };
                        if classify_flavor(&owner, &f) == Ownership::Ours
                            && status.flavor_id.is_none()
                        {
                            // Ours under another ID (made before IDs were derived, its
                            // status lost): go on with it, once.
                            status.flavor_id = Some(f.id);
                            return self.apply(ctx, status).await;
                        }
                        return Err(taken_name(&owner, &f, e));
                    }
                    Err(e) => return Err(e.into()),
                };
                status.flavor_id = Some(f.id.clone());
                status.adopted = Some(false);
                compute.set_flavor_extra_specs(&f.id, &specs).await?;
                publish(
                    ctx,
                    self,
                    EventType::Normal,
                    "Created",
                    "Create",
                    format!("created Nova flavor {} ({})", f.name, f.id),
                )
                .await;
                Ok(Progress::ready(
                    "Created",
                    format!("flavor {} created", f.id),
                ))
            }
            FlavorPlan::Recreate {
                old,
                create,
                extra_specs,
                changed,
            } => {
                compute.delete_flavor(&old).await.optional()?;
                status.flavor_id = None;
                let f = compute.create_flavor(&create).await?;
                status.flavor_id = Some(f.id.clone());
                compute.set_flavor_extra_specs(&f.id, &extra_specs).await?;
                publish(
                    ctx,
                    self,
                    EventType::Normal,
                    "Recreated",
                    "Update",
                    format!("Nova flavors are immutable: replaced flavor {old} by {} because {} changed", f.id, changed.join(", ")),
                )
                .await;
                Ok(Progress::ready(
                    "Recreated",
                    format!(
                        "flavor replaced by {} ({} changed)",
                        f.id,
                        changed.join(", ")
                    ),
                ))
            }
            FlavorPlan::Update {
                id,
                extra_specs,
                description,
                adopt,
            } => {
                status.flavor_id = Some(id.clone());
                if adopt {
                    status.adopted = Some(true);
                    publish(
                        ctx,
                        self,
                        EventType::Normal,
                        "Adopted",
                        "Adopt",
                        format!("took over existing Nova flavor {} ({id})", self.spec.name),
                    )
                    .await;
                }
                let mut changed = !extra_specs.is_empty();
                apply_extra_specs(ctx, &id, &extra_specs).await?;
                if let Some(d) = description {
                    compute.update_flavor_description(&id, &d).await?;
                    changed = true;
                }
                if changed {
                    publish(
                        ctx,
                        self,
                        EventType::Normal,
                        "Updated",
                        "Update",
                        format!("updated Nova flavor {id}"),
                    )
                    .await;
                    return Ok(Progress::ready("Updated", "flavor updated"));
                }
                Ok(Progress::ready("InSync", "flavor matches the spec"))
            }
        }
    }

    async fn cleanup(&self, ctx: &Context, status: &mut Self::Status) -> Result<()> {
        let owner = owner_of(self, ctx);
        let compute = &ctx.cloud.compute;
        let found = match &status.flavor_id {
            Some(id) => compute.get_flavor(id).await.optional()?,
            None => find_own(ctx, self, &owner).await?,
        };
        let Some(f) = found else { return Ok(()) };
        if classify_flavor(&owner, &f) != Ownership::Ours {
            return Ok(());
        }
        if should_delete(self.spec.deletion_policy, status.adopted.unwrap_or(false)) {
            compute.delete_flavor(&f.id).await.optional()?;
            publish(
                ctx,
                self,
                EventType::Normal,
                "Deleted",
                "Delete",
                format!("deleted Nova flavor {} ({})", f.name, f.id),
            )
            .await;
        } else {
            compute
                .delete_flavor_extra_spec(&f.id, FLAVOR_OWNER_SPEC)
                .await
                .optional()?;
            publish(
                ctx,
                self,
                EventType::Normal,
                "Released",
                "Delete",
                format!("left Nova flavor {} ({}) in place", f.name, f.id),
            )
            .await;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> OpenstackFlavorSpec {
        serde_json::from_value(serde_json::json!({"name": "f", "vcpus": 2, "ram": 4096, "extraSpecs": {"hw:cpu_policy": "shared"}})).unwrap()
    }

    fn owner() -> Owner {
        Owner {
            cluster: "c".into(),
            uid: "u".into(),
        }
    }

    fn flavor(extra: &[(&str, &str)]) -> Flavor {
        Flavor {
            id: "f1".into(),
            name: "f".into(),
            vcpus: 2,
            ram_mb: 4096,
            disk_gb: 0,
            ephemeral_gb: 0,
            swap_mb: 0,
            is_public: true,
            description: None,
            extra_specs: extra
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    #[test]
    fn a_taken_name_says_whose_flavor_has_it() {
        let o = owner();
        let conflict = || openstack::Error::conflict("Flavor with name f already exists.");
        let foreign = flavor(&[]);
        assert!(matches!(
            taken_name(&o, &foreign, conflict()),
            ReconcileError::NotOwned(m) if m.contains("spec.adopt") && m.contains("f1")
        ));
        let theirs = flavor(&[(FLAVOR_OWNER_SPEC, "c/other-uid")]);
        assert!(matches!(
            taken_name(&o, &theirs, conflict()),
            ReconcileError::NotOwned(m) if m.contains("other-uid")
        ));
        // Ours after all: the service's conflict stands.
        let ours = flavor(&[(FLAVOR_OWNER_SPEC, "c/u")]);
        assert!(matches!(
            taken_name(&o, &ours, conflict()),
            ReconcileError::OpenStack(_)
        ));
    }

    #[test]
    fn extra_specs_are_a_set() {
        let f = flavor(&[
            ("hw:cpu_policy", "dedicated"),
            ("quota:disk_read_bytes_sec", "1"),
            (FLAVOR_OWNER_SPEC, "c/u"),
        ]);
        let FlavorPlan::Update {
            extra_specs,
            description,
            adopt,
            ..
        } = plan(&spec(), Some(&f), &owner(), false).unwrap()
        else {
            panic!("expected an update")
        };
        assert!(!adopt && description.is_none());
        assert_eq!(
            extra_specs.set.get("hw:cpu_policy").map(String::as_str),
            Some("shared")
        );
        // W5: an extra-spec key containing "disk" is an extra spec, not a size change.
        assert_eq!(
            extra_specs.delete,
            vec!["quota:disk_read_bytes_sec".to_string()]
        );
    }

    #[test]
    fn size_change_recreates_our_flavor() {
        let mut s = spec();
        s.ram = 8192;
        let f = flavor(&[(FLAVOR_OWNER_SPEC, "c/u")]);
        let p = plan(&s, Some(&f), &owner(), false).unwrap();
        assert!(matches!(p, FlavorPlan::Recreate { ref changed, .. } if changed == &vec!["ram"]));
    }

    #[test]
    fn foreign_flavor_is_refused_and_adopted_one_never_replaced() {
        let f = flavor(&[]);
        assert!(matches!(
            plan(&spec(), Some(&f), &owner(), false),
            Err(ReconcileError::NotOwned(_))
        ));
        let mut s = spec();
        s.adopt = true;
        s.vcpus = 4;
        assert!(matches!(
            plan(&s, Some(&f), &owner(), false),
            Err(ReconcileError::InvalidSpec(_))
        ));
    }

    #[test]
    fn in_sync_plans_no_change() {
        let f = flavor(&[("hw:cpu_policy", "shared"), (FLAVOR_OWNER_SPEC, "c/u")]);
        let p = plan(&spec(), Some(&f), &owner(), false).unwrap();
        assert_eq!(
            p,
            FlavorPlan::Update {
                id: "f1".into(),
                extra_specs: ExtraSpecDiff::default(),
                description: None,
                adopt: false
            }
        );
    }

    #[test]
    fn an_unmarked_flavor_with_our_derived_id_is_ours() {
        // The operator stopped between the create and the mark: the flavor has our ID only.
        let FlavorPlan::Create(req, _) = plan(&spec(), None, &owner(), false).unwrap() else {
            panic!("a missing flavor is created")
        };
        let id = req.id.clone().unwrap();
        let mut f = flavor(&[]);
        f.id = id.clone();
        assert_eq!(classify_flavor(&owner(), &f), Ownership::Ours);
        match plan(&spec(), Some(&f), &owner(), false).unwrap() {
            FlavorPlan::Update {
                id: got,
                extra_specs,
                adopt,
                ..
            } => {
                assert_eq!(got, id);
                assert!(!adopt, "ours, not adopted");
                assert_eq!(
                    extra_specs.set.get(FLAVOR_OWNER_SPEC).map(String::as_str),
                    Some("c/u"),
                    "the missing mark is written"
                );
            }
            other => panic!("{other:?}"),
        }
        // Another owner, or other sizes, derive other IDs: such a flavor stays foreign.
        let other = Owner {
            cluster: "c".into(),
            uid: "v".into(),
        };
        assert_eq!(classify_flavor(&other, &f), Ownership::Foreign);
        assert!(matches!(
            plan(&spec(), Some(&f), &other, false),
            Err(ReconcileError::NotOwned(_))
        ));
        let mut bigger = spec();
        bigger.ram = 8192;
        let FlavorPlan::Create(req2, _) = plan(&bigger, None, &owner(), false).unwrap() else {
            panic!()
        };
        assert_ne!(req2.id, Some(id), "a replacement gets a new ID");
        // A hand-made flavor of the same name without our mark is never taken.
        assert!(matches!(
            plan(&spec(), Some(&flavor(&[])), &owner(), false),
            Err(ReconcileError::NotOwned(_))
        ));
    }
}
