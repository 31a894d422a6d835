//! The set of served resources: built-in kinds plus those defined by CRDs.
//!
//! A [`ResourceInfo`] describes one resource in one API version (what
//! discovery lists). Objects live in storage keyed by [`StorageKey`]
//! (group + plural), independent of the version they were written in, as in
//! the real server; reading them in another version only rewrites
//! `apiVersion` (the CRD `None` conversion strategy) or, for Events, maps
//! fields between `core/v1` and `events.k8s.io/v1`.

use std::cmp::Ordering;
use std::sync::Arc;

use serde_json::{Map, Value};

use crate::schema::Schema;

/// Where objects of a resource are stored, shared by all versions of it.
#[derive(
    Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub struct StorageKey {
    /// API group ("" for core).
    pub group: String,
    /// Resource plural.
    pub resource: String,
}

impl StorageKey {
    /// Build a key.
    pub fn new(group: &str, resource: &str) -> Self {
        Self {
            group: group.to_string(),
            resource: resource.to_string(),
        }
    }
}

/// Special behaviour attached to a resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    /// Nothing special.
    Plain,
    /// `v1/namespaces`: lifecycle with `Terminating` phase.
    Namespace,
    /// `v1/secrets`: `stringData` folded into `data`.
    Secret,
    /// `v1/pods`: phase defaulting.
    Pod,
    /// `v1/events` (stored form of all Events).
    CoreEvent,
    /// `events.k8s.io/v1/events`, converted to/from the core form.
    EventsV1,
    /// `apiextensions.k8s.io/v1/customresourcedefinitions`.
    Crd,
    /// An instance of a CRD.
    Custom,
    /// `certificates.k8s.io/v1/certificatesigningrequests` (see [`crate::csr`]).
    Csr,
}

/// An `additionalPrinterColumns` entry (used for `kubectl get` tables).
#[derive(Debug, Clone)]
pub struct PrinterColumn {
    /// Column header.
    pub name: String,
    /// Column type (`string`, `integer`, `date`, ...).
    pub type_: String,
    /// OpenAPI format hint (`int64`, `date-time`, ...), passed through to the Table.
    pub format: String,
    /// client-go JSONPath such as `.spec.size` or `.status.conditions[?(@.type=="Ready")].status`.
    pub json_path: String,
    /// Description.
    pub description: String,
    /// Priority (0 = shown by default).
    pub priority: i64,
}

/// One resource in one group/version.
#[derive(Debug, Clone)]
pub struct ResourceInfo {
    /// API group ("" for core).
    pub group: String,
    /// Version, e.g. `v1`.
    pub version: String,
    /// Kind.
    pub kind: String,
    /// List kind.
    pub list_kind: String,
    /// Plural resource name (URL segment).
    pub plural: String,
    /// Singular name.
    pub singular: String,
    /// Whether objects live in namespaces.
    pub namespaced: bool,
    /// Short names for kubectl.
    pub short_names: Vec<String>,
    /// Categories (e.g. `all`).
    pub categories: Vec<String>,
    /// Whether a `/status` subresource exists.
    pub status_subresource: bool,
    /// Whether `metadata.generation` is maintained.
    pub generation: bool,
    /// Whether PUT on a missing object creates it.
    pub allow_create_on_update: bool,
    /// Behaviour switch.
    pub flavor: Flavor,
    /// Storage location.
    pub storage: StorageKey,
    /// Version objects are stored in (for `apiVersion` of stored objects).
    pub storage_version: String,
    /// Structural schema (custom resources).
    pub schema: Option<Arc<Schema>>,
    /// The schema as written in the CRD (for CEL evaluation).
    pub raw_schema: Option<Arc<Value>>,
    /// Supported field selector labels.
    pub field_selectors: Vec<String>,
    /// Printer columns beyond Name/Age.
    pub printer_columns: Vec<PrinterColumn>,
    /// Name of the defining CRD (custom resources).
    pub crd_name: Option<String>,
}

impl ResourceInfo {
    /// `group/version` or `version` for core.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// apiVersion of the stored form.
    pub fn storage_api_version(&self) -> String {
        if self.storage.group.is_empty() {
            self.storage_version.clone()
        } else {
            format!("{}/{}", self.storage.group, self.storage_version)
        }
    }

    /// Convert a request body from this version into the stored form.
    pub fn to_stored(&self, mut obj: Value) -> Value {
        if self.flavor == Flavor::EventsV1 {
            obj = rename_fields(obj, EVENTS_V1_TO_CORE);
            if let Value::Object(m) = &mut obj {
                m.insert("apiVersion".into(), Value::String("v1".into()));
                m.insert("kind".into(), Value::String("Event".into()));
            }
            return obj;
        }
        if let Value::Object(m) = &mut obj {
            m.insert(
                "apiVersion".into(),
                Value::String(self.storage_api_version()),
            );
            m.insert("kind".into(), Value::String(self.kind.clone()));
        }
        obj
    }

    /// Convert a stored object into this version's representation.
    pub fn from_stored(&self, obj: &Value) -> Value {
        let mut obj = obj.clone();
        if self.flavor == Flavor::EventsV1 {
            let reversed: Vec<(&str, &str)> =
                EVENTS_V1_TO_CORE.iter().map(|(a, b)| (*b, *a)).collect();
            obj = rename_fields(obj, &reversed);
        }
        if let Value::Object(m) = &mut obj {
            m.insert("apiVersion".into(), Value::String(self.api_version()));
            m.insert("kind".into(), Value::String(self.kind.clone()));
        }
        obj
    }

    /// Translate a field-selector path to the stored form's path.
    pub fn stored_field_path(&self, path: &str) -> String {
        if self.flavor == Flavor::EventsV1 {
            for (v1, core) in EVENTS_V1_TO_CORE {
                if path == *v1 {
                    return (*core).to_string();
                }
                if let Some(rest) = path.strip_prefix(&format!("{v1}.")) {
                    return format!("{core}.{rest}");
                }
            }
        }
        path.to_string()
    }
}

/// Field renames from `events.k8s.io/v1` to `core/v1` Event.
const EVENTS_V1_TO_CORE: &[(&str, &str)] = &[
    ("regarding", "involvedObject"),
    ("note", "message"),
    ("reportingController", "reportingComponent"),
    ("deprecatedSource", "source"),
    ("deprecatedFirstTimestamp", "firstTimestamp"),
    ("deprecatedLastTimestamp", "lastTimestamp"),
    ("deprecatedCount", "count"),
];

fn rename_fields(obj: Value, renames: &[(&str, &str)]) -> Value {
    match obj {
        Value::Object(m) => {
            let mut out = Map::new();
            for (k, v) in m {
                let nk = renames
                    .iter()
                    .find(|(from, _)| *from == k)
                    .map(|(_, to)| (*to).to_string())
                    .unwrap_or(k);
                out.insert(nk, v);
            }
            Value::Object(out)
        }
        other => other,
    }
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| (*s).to_string()).collect()
}

const META_SELECTORS: &[&str] = &["metadata.name", "metadata.namespace"];

struct Builtin {
    group: &'static str,
    kind: &'static str,
    plural: &'static str,
    namespaced: bool,
    short: &'static [&'static str],
    categories: &'static [&'static str],
    status: bool,
    flavor: Flavor,
    create_on_update: bool,
    extra_selectors: &'static [&'static str],
}

const EVENT_SELECTORS: &[&str] = &[
    "involvedObject.kind",
    "involvedObject.namespace",
    "involvedObject.name",
    "involvedObject.uid",
    "involvedObject.apiVersion",
    "involvedObject.resourceVersion",
    "involvedObject.fieldPath",
    "reason",
    "reportingComponent",
    "source",
    "type",
];

const EVENTS_V1_SELECTORS: &[&str] = &[
    "regarding.kind",
    "regarding.namespace",
    "regarding.name",
    "regarding.uid",
    "regarding.apiVersion",
    "regarding.resourceVersion",
    "regarding.fieldPath",
    "reason",
    "reportingController",
    "type",
];

const BUILTINS: &[Builtin] = &[
    Builtin {
        group: "",
        kind: "Namespace",
        plural: "namespaces",
        namespaced: false,
        short: &["ns"],
        categories: &[],
        status: true,
        flavor: Flavor::Namespace,
        create_on_update: false,
        extra_selectors: &["status.phase"],
    },
    Builtin {
        group: "",
        kind: "Secret",
        plural: "secrets",
        namespaced: true,
        short: &[],
        categories: &[],
        status: false,
        flavor: Flavor::Secret,
        create_on_update: false,
        extra_selectors: &["type"],
    },
    Builtin {
        group: "",
        kind: "ConfigMap",
        plural: "configmaps",
        namespaced: true,
        short: &["cm"],
        categories: &[],
        status: false,
        flavor: Flavor::Plain,
        create_on_update: false,
        extra_selectors: &[],
    },
    Builtin {
        group: "",
        kind: "Event",
        plural: "events",
        namespaced: true,
        short: &["ev"],
        categories: &[],
        status: false,
        flavor: Flavor::CoreEvent,
        create_on_update: true,
        extra_selectors: EVENT_SELECTORS,
    },
    Builtin {
        group: "",
        kind: "Node",
        plural: "nodes",
        namespaced: false,
        short: &["no"],
        categories: &[],
        status: true,
        flavor: Flavor::Plain,
        create_on_update: false,
        extra_selectors: &["spec.unschedulable"],
    },
    Builtin {
        group: "",
        kind: "Pod",
        plural: "pods",
        namespaced: true,
        short: &["po"],
        categories: &["all"],
        status: true,
        flavor: Flavor::Pod,
        create_on_update: false,
        extra_selectors: &[
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        ],
    },
    Builtin {
        group: "",
        kind: "ServiceAccount",
        plural: "serviceaccounts",
        namespaced: true,
        short: &["sa"],
        categories: &[],
        status: false,
        flavor: Flavor::Plain,
        create_on_update: false,
        extra_selectors: &[],
    },
    Builtin {
        group: "",
        kind: "PersistentVolumeClaim",
        plural: "persistentvolumeclaims",
        namespaced: true,
        short: &["pvc"],
        categories: &[],
        status: true,
        flavor: Flavor::Plain,
        create_on_update: false,
        extra_selectors: &[],
    },
    Builtin {
        group: "",
        kind: "Service",
        plural: "services",
        namespaced: true,
        short: &["svc"],
        categories: &["all"],
        status: true,
        flavor: Flavor::Plain,
        create_on_update: false,
        extra_selectors: &[],
    },
    Builtin {
        group: "apps",
        kind: "Deployment",
        plural: "deployments",
        namespaced: true,
        short: &["deploy"],
        categories: &["all"],
        status: true,
        flavor: Flavor::Plain,
        create_on_update: false,
        extra_selectors: &[],
    },
    Builtin {
        group: "batch",
        kind: "Job",
        plural: "jobs",
        namespaced: true,
        short: &[],
        categories: &["all"],
        status: true,
        flavor: Flavor::Plain,
        create_on_update: false,
        extra_selectors: &["status.successful"],
    },
    Builtin {
        group: "events.k8s.io",
        kind: "Event",
        plural: "events",
        namespaced: true,
        short: &["ev"],
        categories: &[],
        status: false,
        flavor: Flavor::EventsV1,
        create_on_update: true,
        extra_selectors: EVENTS_V1_SELECTORS,
    },
    Builtin {
        group: "networking.k8s.io",
        kind: "NetworkPolicy",
        plural: "networkpolicies",
        namespaced: true,
        short: &["netpol"],
        categories: &[],
        status: false,
        flavor: Flavor::Plain,
        create_on_update: false,
        extra_selectors: &[],
    },
    Builtin {
        group: "coordination.k8s.io",
        kind: "Lease",
        plural: "leases",
        namespaced: true,
        short: &[],
        categories: &[],
        status: false,
        flavor: Flavor::Plain,
        create_on_update: true,
        extra_selectors: &[],
    },
    Builtin {
        group: "certificates.k8s.io",
        kind: "CertificateSigningRequest",
        plural: "certificatesigningrequests",
        namespaced: false,
        short: &["csr"],
        categories: &[],
        status: true,
        flavor: Flavor::Csr,
        create_on_update: false,
        extra_selectors: &["spec.signerName"],
    },
    Builtin {
        group: "admissionregistration.k8s.io",
        kind: "ValidatingWebhookConfiguration",
        plural: "validatingwebhookconfigurations",
        namespaced: false,
        short: &[],
        categories: &["api-extensions"],
        status: false,
        flavor: Flavor::Plain,
        create_on_update: false,
        extra_selectors: &[],
    },
    Builtin {
        group: "apiextensions.k8s.io",
        kind: "CustomResourceDefinition",
        plural: "customresourcedefinitions",
        namespaced: false,
        short: &["crd", "crds"],
        categories: &["api-extensions"],
        status: true,
        flavor: Flavor::Crd,
        create_on_update: false,
        extra_selectors: &[],
    },
];

/// The built-in resources, in discovery order.
pub fn builtins() -> Vec<ResourceInfo> {
    BUILTINS
        .iter()
        .map(|b| {
            let mut fs = strings(META_SELECTORS);
            fs.extend(strings(b.extra_selectors));
            let storage = if b.flavor == Flavor::EventsV1 {
                StorageKey::new("", "events")
            } else {
                StorageKey::new(b.group, b.plural)
            };
            ResourceInfo {
                group: b.group.to_string(),
                version: "v1".into(),
                kind: b.kind.to_string(),
                list_kind: format!("{}List", b.kind),
                plural: b.plural.to_string(),
                singular: b.kind.to_lowercase(),
                namespaced: b.namespaced,
                short_names: strings(b.short),
                categories: strings(b.categories),
                status_subresource: b.status,
                // Workload kinds keep metadata.generation (spec changes bump it), as in
                // Kubernetes; core kinds do not.
                generation: b.flavor == Flavor::Crd || matches!(b.group, "apps" | "batch"),
                allow_create_on_update: b.create_on_update,
                flavor: b.flavor,
                storage,
                storage_version: "v1".into(),
                schema: None,
                raw_schema: None,
                field_selectors: fs,
                printer_columns: Vec::new(),
                crd_name: None,
            }
        })
        .collect()
}

/// Resources served for one stored CRD (one entry per served version).
///
/// Returns an error message if the CRD's schema cannot be parsed.
pub fn from_crd(crd: &Value) -> Result<Vec<ResourceInfo>, String> {
    let spec = crd.get("spec").cloned().unwrap_or(Value::Null);
    let group = spec
        .get("group")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let names = spec.get("names").cloned().unwrap_or(Value::Null);
    let kind = names
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let plural = names
        .get("plural")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let singular = names
        .get("singular")
        .and_then(Value::as_str)
        .map(str::to_string)
        .unwrap_or_else(|| kind.to_lowercase());
    let list_kind = names
        .get("listKind")
        .and_then(Value::as_str)
        .map(str::to_string)
        .unwrap_or_else(|| format!("{kind}List"));
    let str_list = |v: Option<&Value>| -> Vec<String> {
        v.and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default()
    };
    let short_names = str_list(names.get("shortNames"));
    let categories = str_list(names.get("categories"));
    let namespaced = spec.get("scope").and_then(Value::as_str) != Some("Cluster");
    let versions = spec
        .get("versions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let storage_version = versions
        .iter()
        .find(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
        .and_then(|v| v.get("name").and_then(Value::as_str))
        .unwrap_or("v1")
        .to_string();
    let crd_name = crate::util::meta_str(crd, "name").to_string();
    let mut out = Vec::new();
    for v in &versions {
        if v.get("served").and_then(Value::as_bool) == Some(false) {
            continue;
        }
        let version = v
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let raw = v.get("schema").and_then(|s| s.get("openAPIV3Schema"));
        let schema = match raw {
            Some(s) => Some(Arc::new(Schema::parse(s)?)),
            None => None,
        };
        let raw_schema = raw.map(|r| Arc::new(r.clone()));
        let status_subresource = v
            .get("subresources")
            .and_then(|s| s.get("status"))
            .is_some_and(|s| !s.is_null());
        let mut field_selectors = strings(META_SELECTORS);
        if let Some(sf) = v.get("selectableFields").and_then(Value::as_array) {
            for f in sf {
                if let Some(p) = f.get("jsonPath").and_then(Value::as_str) {
                    field_selectors.push(p.trim_start_matches('.').to_string());
                }
            }
        }
        let printer_columns = v
            .get("additionalPrinterColumns")
            .and_then(Value::as_array)
            .map(|cols| {
                cols.iter()
                    .map(|c| PrinterColumn {
                        name: c
                            .get("name")
                            .and_then(Value::as_str)
                            .unwrap_or("")
                            .to_string(),
                        type_: c
                            .get("type")
                            .and_then(Value::as_str)
                            .unwrap_or("string")
                            .to_string(),
                        format: c
                            .get("format")
                            .and_then(Value::as_str)
                            .unwrap_or("")
                            .to_string(),
                        json_path: c
                            .get("jsonPath")
                            .and_then(Value::as_str)
                            .unwrap_or("")
                            .to_string(),
                        description: c
                            .get("description")
                            .and_then(Value::as_str)
                            .unwrap_or("")
                            .to_string(),
                        priority: c.get("priority").and_then(Value::as_i64).unwrap_or(0),
                    })
                    .collect()
            })
            .unwrap_or_default();
        out.push(ResourceInfo {
            group: group.clone(),
            version,
            kind: kind.clone(),
            list_kind: list_kind.clone(),
            plural: plural.clone(),
            singular: singular.clone(),
            namespaced,
            short_names: short_names.clone(),
            categories: categories.clone(),
            status_subresource,
            generation: true,
            allow_create_on_update: false,
            flavor: Flavor::Custom,
            storage: StorageKey::new(&group, &plural),
            storage_version: storage_version.clone(),
            schema,
            raw_schema,
            field_selectors,
            printer_columns,
            crd_name: Some(crd_name.clone()),
        });
    }
    Ok(out)
}

/// Order versions the way Kubernetes does: GA > beta > alpha, higher numbers first,
/// non-conforming names last alphabetically.
pub fn compare_versions(a: &str, b: &str) -> Ordering {
    fn parse(v: &str) -> Option<(u64, u8, u64)> {
        let rest = v.strip_prefix('v')?;
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        let major: u64 = digits.parse().ok()?;
        let tail = &rest[digits.len()..];
        if tail.is_empty() {
            return Some((major, 2, 0));
        }
        let (stage, num) = if let Some(n) = tail.strip_prefix("beta") {
            (1, n)
        } else if let Some(n) = tail.strip_prefix("alpha") {
            (0, n)
        } else {
            return None;
        };
        Some((major, stage, num.parse().ok()?))
    }
    match (parse(a), parse(b)) {
        (Some((ma, sa, na)), Some((mb, sb, nb))) => sb.cmp(&sa).then(mb.cmp(&ma)).then(nb.cmp(&na)),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => a.cmp(b),
    }
}

/// All served resources, rebuilt whenever a CRD changes.
#[derive(Debug, Clone, Default)]
pub struct Registry {
    /// Every resource in every served version.
    pub resources: Vec<ResourceInfo>,
}

impl Registry {
    /// Registry of built-ins plus the given CRD-defined resources.
    pub fn new(custom: Vec<ResourceInfo>) -> Self {
        let mut resources = builtins();
        resources.extend(custom);
        Self { resources }
    }

    /// Find a resource by group, version and plural.
    pub fn find(&self, group: &str, version: &str, plural: &str) -> Option<&ResourceInfo> {
        self.resources
            .iter()
            .find(|r| r.group == group && r.version == version && r.plural == plural)
    }

    /// Find the preferred-version resource for a storage key.
    pub fn by_storage(&self, key: &StorageKey) -> Option<&ResourceInfo> {
        self.resources
            .iter()
            .filter(|r| &r.storage == key && r.flavor != Flavor::EventsV1)
            .min_by(|a, b| compare_versions(&a.version, &b.version))
    }

    /// Served versions of a group, preferred first.
    pub fn group_versions(&self, group: &str) -> Vec<String> {
        let mut vs: Vec<String> = self
            .resources
            .iter()
            .filter(|r| r.group == group)
            .map(|r| r.version.clone())
            .collect();
        vs.sort_by(|a, b| compare_versions(a, b));
        vs.dedup();
        vs
    }

    /// Non-core groups in discovery order (built-ins first, then CRD groups by name).
    pub fn groups(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for r in &self.resources {
            if !r.group.is_empty() && !out.contains(&r.group) {
                out.push(r.group.clone());
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_priority() {
        let mut v = vec!["v1alpha1", "v2", "v1", "v1beta2", "v1beta1", "foo"];
        v.sort_by(|a, b| compare_versions(a, b));
        assert_eq!(v, vec!["v2", "v1", "v1beta2", "v1beta1", "v1alpha1", "foo"]);
    }
}
