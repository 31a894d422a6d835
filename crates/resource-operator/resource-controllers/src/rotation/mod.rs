//! Credential rotation of `OpenstackCloud`s (`spec.rotation`): the decision, pure.
//!
//! The state lives where a crash cannot lose it: the credential in use is the one in the
//! Secret; the credentials the operator made carry a deterministic name (the cloud's name and
//! uid, and a generation number one above the current one's), so they are found again by
//! name; the credential to delete after the switch is named in an annotation of the Secret,
//! written in the same update as the new credential. Each pass compares that with Keystone's
//! list and takes one step:
//!
//! 1. credentials of ours that are neither in use nor draining are leftovers of a pass that
//!    stopped between creating a credential and writing it to the Secret (their secret is lost):
//!    they are deleted, so the next create finds the name free and nothing leaks;
//! 2. after a switch, the old credential is kept for the drain period and for as long as a pass
//!    still holds a client made with it (requests already under way with it finish), then
//!    deleted, then the annotation is removed;
//! 3. when the current credential is within the lead time of its expiry (or never expires), the
//!    next generation is made, checked by connecting with it, and written to the Secret with the
//!    old one's id in the annotation: that write is the switch.
//!
//! The same decision rotates the application credentials delivered to tenants
//! ([`tenant`]): there the credentials are made by a user the operator owns, so the current
//! one need not be unrestricted, and there may be no current one yet.

pub mod run;
pub mod tenant;

use jiff::{SignedDuration, Timestamp};

/// Annotation on the cloud's Secret: the id of the credential replaced by the last switch,
/// deleted once the drain period is over.
pub const PREVIOUS_ANNOTATION: &str = "openstack-operator.sunet.se/rotation-previous";
/// Annotation on the cloud's Secret: when the last switch was written (RFC 3339).
pub const SWITCHED_AT_ANNOTATION: &str = "openstack-operator.sunet.se/rotation-switched-at";

/// How soon an old credential still in use by a pass is looked at again.
pub const STILL_IN_USE_RECHECK: SignedDuration = SignedDuration::from_secs(1);

/// The rotation settings, as durations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Policy {
    /// Lifetime of each new credential.
    pub lifetime: SignedDuration,
    /// How long before expiry the next one is made.
    pub lead: SignedDuration,
    /// How long the old one is kept after the switch.
    pub drain: SignedDuration,
    /// Whether the current credential makes its successor (an `OpenstackCloud`'s: it must then
    /// be unrestricted); a tenant's are made by the operator's user for it.
    pub current_makes_successor: bool,
}

impl From<&api::cloud::CredentialRotation> for Policy {
    fn from(r: &api::cloud::CredentialRotation) -> Self {
        Policy {
            lifetime: SignedDuration::from_secs(r.lifetime_seconds.into()),
            lead: SignedDuration::from_secs(r.lead_time_seconds.into()),
            drain: SignedDuration::from_secs(r.drain_seconds().into()),
            current_makes_successor: true,
        }
    }
}

impl From<&api::project::TenantCredential> for Policy {
    fn from(r: &api::project::TenantCredential) -> Self {
        Policy {
            lifetime: SignedDuration::from_secs(r.lifetime_seconds.into()),
            lead: SignedDuration::from_secs(r.lead_time_seconds.into()),
            drain: SignedDuration::from_secs(r.drain_seconds().into()),
            current_makes_successor: false,
        }
    }
}

/// The credentials of one rotating cloud are named `<prefix>-<generation>`.
pub fn name_prefix(cloud: &str, uid: &str) -> String {
    // Keystone names are at most 255 characters; the uid keeps two clusters' clouds of the
    // same name (sharing one Keystone user) apart.
    let cloud: String = cloud.chars().take(200).collect();
    let uid: String = uid.chars().filter(|c| *c != '-').take(8).collect();
    format!("openstack-operator-{cloud}-{uid}")
}

/// The generation of a credential named by [`name_prefix`], or None when it is not ours.
pub fn generation_of(prefix: &str, name: &str) -> Option<u64> {
    let n = name.strip_prefix(prefix)?.strip_prefix('-')?;
    if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    n.parse().ok()
}

/// A credential as Keystone lists it, reduced to what the decision needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Credential {
    /// Keystone id.
    pub id: String,
    /// Name.
    pub name: String,
    /// Expiry (None: never).
    pub expires_at: Option<Timestamp>,
    /// Whether it may create application credentials.
    pub unrestricted: bool,
}

impl From<&openstack::app_credential::ApplicationCredential> for Credential {
    fn from(c: &openstack::app_credential::ApplicationCredential) -> Self {
        Credential {
            id: c.id.clone(),
            name: c.name.clone(),
            expires_at: c.expires_at,
            unrestricted: c.unrestricted,
        }
    }
}

/// A switch written to the Secret and not yet finished (its old credential not yet deleted).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pending {
    /// The old credential's id.
    pub previous_id: String,
    /// When the switch was written.
    pub switched_at: Timestamp,
}

/// What one pass sees.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Observed<'a> {
    /// Now.
    pub now: Timestamp,
    /// The credentials' name prefix ([`name_prefix`]).
    pub prefix: &'a str,
    /// The credential in the Secret (for a cloud, the one the token came from); None when
    /// there is none yet, or it is gone from Keystone (a tenant's).
    pub current: Option<&'a Credential>,
    /// All the user's credentials.
    pub listed: &'a [Credential],
    /// The switch in progress, from the Secret's annotations.
    pub pending: Option<&'a Pending>,
    /// Passes still holding a client made from the Secret before the switch: the old
    /// credential is deleted only when none is left, whatever the drain period.
    pub old_clients_in_use: usize,
}

/// The one step a pass takes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// The current credential cannot make its successor; the message names the field.
    Blocked(String),
    /// Delete these credentials (ids); then, with `finish_switch`, remove the annotations.
    Delete {
        /// Ids to delete (already gone is fine).
        ids: Vec<String>,
        /// Whether this ends the pending switch.
        finish_switch: bool,
    },
    /// Make the next credential and switch to it.
    Create {
        /// Its name.
        name: String,
        /// Its expiry.
        expires_at: Timestamp,
    },
    /// Nothing to do until then.
    Wait(Timestamp),
}

/// The next step (pure).
pub fn decide(o: &Observed<'_>, policy: &Policy) -> Step {
    let Some(current) = o.current else {
        return replace_missing(o, policy);
    };
    if policy.current_makes_successor && !current.unrestricted {
        return Step::Blocked(format!(
            "spec.rotation: the application credential {:?} in spec.secretRef is restricted, so it cannot create its successor: make it with `--unrestricted` (openstack application credential create --unrestricted) or remove spec.rotation",
            current.name
        ));
    }
    let draining = o.pending.map(|p| p.previous_id.as_str());
    let leftovers: Vec<String> = o
        .listed
        .iter()
        .filter(|c| generation_of(o.prefix, &c.name).is_some())
        .filter(|c| c.id != current.id && Some(c.id.as_str()) != draining)
        .map(|c| c.id.clone())
        .collect();
    if let Some(p) = o.pending {
        let drained = p.switched_at + policy.drain;
        if p.previous_id == current.id {
            // The annotation names the credential in use (a Secret restored by hand): never
            // delete that one, only forget the switch.
            return Step::Delete {
                ids: leftovers,
                finish_switch: true,
            };
        }
        if o.now < drained || o.old_clients_in_use > 0 {
            let until = if o.now < drained {
                drained
            } else {
                o.now + STILL_IN_USE_RECHECK
            };
            if leftovers.is_empty() {
                return Step::Wait(until);
            }
            return Step::Delete {
                ids: leftovers,
                finish_switch: false,
            };
        }
        let mut ids = leftovers;
        ids.push(p.previous_id.clone());
        return Step::Delete {
            ids,
            finish_switch: true,
        };
    }
    if !leftovers.is_empty() {
        return Step::Delete {
            ids: leftovers,
            finish_switch: false,
        };
    }
    let due = current.expires_at.map(|e| e - policy.lead);
    match due {
        Some(due) if o.now < due => Step::Wait(due),
        // Due, or a credential that never expires (the one a user first puts in the Secret):
        // the operator's own, expiring ones take over at once.
        _ => {
            let generation = generation_of(o.prefix, &current.name).unwrap_or(0) + 1;
            Step::Create {
                name: format!("{}-{generation}", o.prefix),
                expires_at: o.now + policy.lifetime,
            }
        }
    }
}

/// No credential in use (a tenant's first, or one lost from Keystone): nothing of ours is worth
/// keeping (whatever drains has nothing to drain to), so all of ours go first, then the next
/// generation is made.
fn replace_missing(o: &Observed<'_>, policy: &Policy) -> Step {
    let ours: Vec<(&Credential, u64)> = o
        .listed
        .iter()
        .filter_map(|c| generation_of(o.prefix, &c.name).map(|g| (c, g)))
        .collect();
    if !ours.is_empty() || o.pending.is_some() {
        return Step::Delete {
            ids: ours.iter().map(|(c, _)| c.id.clone()).collect(),
            finish_switch: o.pending.is_some(),
        };
    }
    Step::Create {
        name: format!("{}-1", o.prefix),
        expires_at: o.now + policy.lifetime,
    }
}

/// Why a `clouds.yaml` cannot be rotated (names the entry, never quotes the content).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct YamlError(pub String);

/// The application credential id of entry `cloud` of a `clouds.yaml`; an error when the entry
/// does not authenticate with an application credential given by id.
pub fn credential_id(yaml: &str, cloud: &str) -> Result<String, YamlError> {
    let doc = parse(yaml)?;
    let entry = &doc["clouds"][cloud];
    if entry.is_null() {
        return Err(YamlError(format!(
            "spec.cloud: the clouds.yaml has no entry {cloud:?}"
        )));
    }
    let auth_type = entry["auth_type"].as_str().unwrap_or("password");
    if !matches!(
        auth_type,
        "v3applicationcredential" | "applicationcredential"
    ) {
        return Err(YamlError(format!(
            "spec.rotation: clouds.yaml entry {cloud:?} authenticates with {auth_type:?}; only an application credential (auth_type: v3applicationcredential) can be rotated"
        )));
    }
    entry["auth"]["application_credential_id"]
        .as_str()
        .filter(|s| !s.is_empty())
        .map(String::from)
        .ok_or_else(|| {
            YamlError(format!(
                "spec.rotation: clouds.yaml entry {cloud:?} names its application credential without auth.application_credential_id; rotation needs the id"
            ))
        })
}

/// The `clouds.yaml` with entry `cloud` switched to another application credential; every
/// other entry and setting is kept (comments are not: the document is written back as JSON,
/// which is YAML).
pub fn with_credential(
    yaml: &str,
    cloud: &str,
    id: &str,
    secret: &str,
) -> Result<String, YamlError> {
    credential_id(yaml, cloud)?;
    let mut doc = parse(yaml)?;
    let auth = &mut doc["clouds"][cloud]["auth"];
    auth["application_credential_id"] = id.into();
    auth["application_credential_secret"] = secret.into();
    if let Some(a) = auth.as_object_mut() {
        // A name would be looked up instead of the id: it names the old credential.
        a.remove("application_credential_name");
    }
    serde_json::to_string_pretty(&doc)
        .map(|s| s + "\n")
        .map_err(|_| YamlError("cannot write the clouds.yaml".into()))
}

fn parse(yaml: &str) -> Result<serde_json::Value, YamlError> {
    api::manifest::documents(yaml)
        .ok()
        .and_then(|d| d.into_iter().next())
        .ok_or_else(|| YamlError("the Secret's clouds.yaml is not a YAML document".into()))
}

#[cfg(test)]
mod tests;
