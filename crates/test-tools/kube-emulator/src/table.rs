//! Server-side `meta.k8s.io/v1 Table` rendering (what `kubectl get` asks for).
//!
//! Built-in kinds follow kube-apiserver's printers
//! (`pkg/printers/internalversion/printers.go`, `AddHandlers` for the column
//! definitions and `printPod`, `printNode`, … for the cells). The API server
//! always generates the wide form (`printers.GenerateOptions{Wide: true}` in
//! `pkg/printers/storage`): every column, `priority` 1 included, is sent and
//! kubectl hides the priority-1 ones unless `-o wide`.
//!
//! Custom resources follow apiextensions-apiserver's table convertor
//! (`registry/customresource/tableconvertor`): Name, then the version's
//! `additionalPrinterColumns` evaluated with client-go's JSONPath
//! ([`crate::jsonpath`]) with missing keys allowed, or only `Age` when the
//! version defines no columns (`serveDefaultColumnsIfEmpty`).
//!
//! Kinds without a printer (the CRD kind itself) get the generic
//! `rest.DefaultTableConvertor`: Name and "Created At".
//!
//! The emulator does not apply the built-in kinds' defaulting, so where a
//! printer reads a field the real server always defaults (a Deployment's
//! `replicas`, a Service's `type`, a port's `protocol`, a Job's
//! `parallelism`/`completions`), the documented default is read for an absent
//! value.

use jiff::{SignedDuration, Timestamp};
use serde_json::{Value, json};

use crate::jsonpath::{JsonPath, print_value};
use crate::resources::{Flavor, PrinterColumn, ResourceInfo};

/// What a row's `object` holds (the `includeObject` query parameter).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IncludeObject {
    /// No object.
    None,
    /// `PartialObjectMetadata` (the server's default).
    #[default]
    Metadata,
    /// The full object.
    Object,
}

impl IncludeObject {
    /// Parse the query parameter (absent means `Metadata`).
    pub fn parse(v: Option<&str>) -> Result<Self, String> {
        match v {
            None | Some("Metadata") => Ok(IncludeObject::Metadata),
            Some("None") => Ok(IncludeObject::None),
            Some("Object") => Ok(IncludeObject::Object),
            Some(other) => Err(format!(
                "includeObject: Unsupported value: {other:?}: supported values: \"Metadata\", \"None\", \"Object\""
            )),
        }
    }
}

const NAME_DESC: &str = "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names";
const AGE_DESC: &str = "CreationTimestamp is a timestamp representing the server time when this object was created. It is not guaranteed to be set in happens-before order across separate operations. Clients may not set this value. It is represented in RFC3339 form and is in UTC.\n\nPopulated by the system. Read-only. Null for lists. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata";
const CONTAINERS_DESC: &str = "Names of each container in the template.";
const IMAGES_DESC: &str = "Images referenced by each container in the template.";
const NODE_ADDRESSES_DESC: &str = "List of addresses reachable to the node. Queried from cloud provider, if available. More info: https://kubernetes.io/docs/reference/node/node-status/#addresses Note: This field is declared as mergeable, but the merge key is not sufficiently unique, which can cause data corruption when it is merged. Callers should instead use a full-replacement patch. See https://pr.k8s.io/79391 for an example. Consumers should assume that addresses can change during the lifetime of a Node. However, there are some exceptions where this may not be possible, such as Pods that inherit a Node's address in its own status or consumers of the downward API (status.hostIP).";

/// A column definition: name, type, format, priority, description.
type Col = (&'static str, &'static str, &'static str, i64, &'static str);

const NAME: Col = ("Name", "string", "name", 0, NAME_DESC);
const AGE: Col = ("Age", "string", "", 0, AGE_DESC);

const POD_COLUMNS: &[Col] = &[
    NAME,
    (
        "Ready",
        "string",
        "",
        0,
        "The aggregate readiness state of this pod for accepting traffic.",
    ),
    (
        "Status",
        "string",
        "",
        0,
        "The aggregate status of the containers in this pod.",
    ),
    (
        "Restarts",
        "string",
        "",
        0,
        "The number of times the containers in this pod have been restarted and when the last container in this pod has restarted.",
    ),
    AGE,
    (
        "IP",
        "string",
        "",
        1,
        "podIP address allocated to the pod. Routable at least within the cluster. Empty if not yet allocated.",
    ),
    (
        "Node",
        "string",
        "",
        1,
        "NodeName indicates in which node this pod is scheduled. If empty, this pod is a candidate for scheduling by the scheduler defined in schedulerName. Once this field is set, the kubelet for this node becomes responsible for the lifecycle of this pod. This field should not be used to express a desire for the pod to be scheduled on a specific node. https://kubernetes.io/docs/concepts/scheduling-eviction/assign-pod-node/#nodename",
    ),
    (
        "Nominated Node",
        "string",
        "",
        1,
        "nominatedNodeName is set only when this pod preempts other pods on the node, but it cannot be scheduled right away as preemption victims receive their graceful termination periods. This field does not guarantee that the pod will be scheduled on this node. Scheduler may decide to place the pod elsewhere if other nodes become available sooner. Scheduler may also decide to give the resources on this node to a higher priority pod that is created after preemption. As a result, this field may be different than PodSpec.nodeName when the pod is scheduled.",
    ),
    (
        "Readiness Gates",
        "string",
        "",
        1,
        "If specified, all readiness gates will be evaluated for pod readiness. A pod is ready when all its containers are ready AND all conditions specified in the readiness gates have status equal to \"True\" More info: https://git.k8s.io/enhancements/keps/sig-network/580-pod-readiness-gates",
    ),
];

const NODE_COLUMNS: &[Col] = &[
    NAME,
    ("Status", "string", "", 0, "The status of the node"),
    ("Roles", "string", "", 0, "The roles of the node"),
    AGE,
    (
        "Version",
        "string",
        "",
        0,
        "Kubelet Version reported by the node.",
    ),
    ("Internal-IP", "string", "", 1, NODE_ADDRESSES_DESC),
    ("External-IP", "string", "", 1, NODE_ADDRESSES_DESC),
    (
        "OS-Image",
        "string",
        "",
        1,
        "OS Image reported by the node from /etc/os-release (e.g. Debian GNU/Linux 7 (wheezy)).",
    ),
    (
        "Kernel-Version",
        "string",
        "",
        1,
        "Kernel Version reported by the node from 'uname -r' (e.g. 3.16.0-0.bpo.4-amd64).",
    ),
    (
        "Container-Runtime",
        "string",
        "",
        1,
        "ContainerRuntime Version reported by the node through runtime remote API (e.g. containerd://1.4.2).",
    ),
];

const DEPLOYMENT_COLUMNS: &[Col] = &[
    NAME,
    (
        "Ready",
        "string",
        "",
        0,
        "Number of the pod with ready state",
    ),
    (
        "Up-to-date",
        "string",
        "",
        0,
        "Total number of non-terminated pods targeted by this deployment that have the desired template spec.",
    ),
    (
        "Available",
        "string",
        "",
        0,
        "Total number of available pods (ready for at least minReadySeconds) targeted by this deployment.",
    ),
    AGE,
    ("Containers", "string", "", 1, CONTAINERS_DESC),
    ("Images", "string", "", 1, IMAGES_DESC),
    (
        "Selector",
        "string",
        "",
        1,
        "Label selector for pods. Existing ReplicaSets whose pods are selected by this will be the ones affected by this deployment.",
    ),
];

const JOB_COLUMNS: &[Col] = &[
    NAME,
    ("Status", "string", "", 0, "Status of the job."),
    (
        "Completions",
        "string",
        "",
        0,
        "The number of pods which reached phase Succeeded. The value increases monotonically for a given spec. However, it may decrease in reaction to scale down of elastic indexed jobs.",
    ),
    (
        "Duration",
        "string",
        "",
        0,
        "Time required to complete the job.",
    ),
    AGE,
    ("Containers", "string", "", 1, CONTAINERS_DESC),
    ("Images", "string", "", 1, IMAGES_DESC),
    (
        "Selector",
        "string",
        "",
        1,
        "A label query over pods that should match the pod count. Normally, the system sets this field for you. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/#label-selectors",
    ),
];

const SERVICE_COLUMNS: &[Col] = &[
    NAME,
    (
        "Type",
        "string",
        "",
        0,
        "type determines how the Service is exposed. Defaults to ClusterIP. Valid options are ExternalName, ClusterIP, NodePort, and LoadBalancer. \"ClusterIP\" allocates a cluster-internal IP address for load-balancing to endpoints. Endpoints are determined by the selector or if that is not specified, by manual construction of an Endpoints object or EndpointSlice objects. If clusterIP is \"None\", no virtual IP is allocated and the endpoints are published as a set of endpoints rather than a virtual IP. \"NodePort\" builds on ClusterIP and allocates a port on every node which routes to the same endpoints as the clusterIP. \"LoadBalancer\" builds on NodePort and creates an external load-balancer (if supported in the current cloud) which routes to the same endpoints as the clusterIP. \"ExternalName\" aliases this service to the specified externalName. Several other fields do not apply to ExternalName services. More info: https://kubernetes.io/docs/concepts/services-networking/service/#publishing-services-service-types",
    ),
    (
        "Cluster-IP",
        "string",
        "",
        0,
        "clusterIP is the IP address of the service and is usually assigned randomly. If an address is specified manually, is in-range (as per system configuration), and is not in use, it will be allocated to the service; otherwise creation of the service will fail. This field may not be changed through updates unless the type field is also being changed to ExternalName (which requires this field to be blank) or the type field is being changed from ExternalName (in which case this field may optionally be specified, as describe above).  Valid values are \"None\", empty string (\"\"), or a valid IP address. Setting this to \"None\" makes a \"headless service\" (no virtual IP), which is useful when direct endpoint connections are preferred and proxying is not required.  Only applies to types ClusterIP, NodePort, and LoadBalancer. If this field is specified when creating a Service of type ExternalName, creation will fail. This field will be wiped when updating a Service to type ExternalName. More info: https://kubernetes.io/docs/concepts/services-networking/service/#virtual-ips-and-service-proxies",
    ),
    (
        "External-IP",
        "string",
        "",
        0,
        "externalIPs is a list of IP addresses for which nodes in the cluster will also accept traffic for this service.  These IPs are not managed by Kubernetes.  The user is responsible for ensuring that traffic arrives at a node with this IP.  A common example is external load-balancers that are not part of the Kubernetes system.",
    ),
    (
        "Port(s)",
        "string",
        "",
        0,
        "The list of ports that are exposed by this service. More info: https://kubernetes.io/docs/concepts/services-networking/service/#virtual-ips-and-service-proxies",
    ),
    AGE,
    (
        "Selector",
        "string",
        "",
        1,
        "Route service traffic to pods with label keys and values matching this selector. If empty or not present, the service is assumed to have an external process managing its endpoints, which Kubernetes will not modify. Only applies to types ClusterIP, NodePort, and LoadBalancer. Ignored if type is ExternalName. More info: https://kubernetes.io/docs/concepts/services-networking/service/",
    ),
];

const EVENT_COLUMNS: &[Col] = &[
    (
        "Last Seen",
        "string",
        "",
        0,
        "The time at which the most recent occurrence of this event was recorded.",
    ),
    (
        "Type",
        "string",
        "",
        0,
        "Type of this event (Normal, Warning), new types could be added in the future",
    ),
    (
        "Reason",
        "string",
        "",
        0,
        "This should be a short, machine understandable string that gives the reason for the transition into the object's current status.",
    ),
    (
        "Object",
        "string",
        "",
        0,
        "The object that this event is about.",
    ),
    (
        "Subobject",
        "string",
        "",
        1,
        "If referring to a piece of an object instead of an entire object, this string should contain a valid JSON/Go field access statement, such as desiredState.manifest.containers[2]. For example, if the object reference is to a container within a pod, this would take on a value like: \"spec.containers{name}\" (where \"name\" refers to the name of the container that triggered the event) or if no container name is specified \"spec.containers[2]\" (container with index 2 in this pod). This syntax is chosen only to have some well-defined way of referencing a part of an object.",
    ),
    (
        "Source",
        "string",
        "",
        1,
        "The component reporting this event. Should be a short machine understandable string.",
    ),
    (
        "Message",
        "string",
        "",
        0,
        "A human-readable description of the status of this operation.",
    ),
    (
        "First Seen",
        "string",
        "",
        1,
        "The time at which the event was first recorded. (Time of server receipt is in TypeMeta.)",
    ),
    (
        "Count",
        "string",
        "",
        1,
        "The number of times this event has occurred.",
    ),
    ("Name", "string", "name", 1, NAME_DESC),
];

const NAMESPACE_COLUMNS: &[Col] = &[
    NAME,
    ("Status", "string", "", 0, "The status of the namespace"),
    AGE,
];

const SECRET_COLUMNS: &[Col] = &[
    NAME,
    (
        "Type",
        "string",
        "",
        0,
        "Used to facilitate programmatic handling of secret data. More info: https://kubernetes.io/docs/concepts/configuration/secret/#secret-types",
    ),
    (
        "Data",
        "string",
        "",
        0,
        "Data contains the secret data. Each key must consist of alphanumeric characters, '-', '_' or '.'. The serialized form of the secret data is a base64 encoded string, representing the arbitrary (possibly non-string) data value here. Described in https://tools.ietf.org/html/rfc4648#section-4",
    ),
    AGE,
];

const CONFIGMAP_COLUMNS: &[Col] = &[
    NAME,
    (
        "Data",
        "string",
        "",
        0,
        "Data contains the configuration data. Each key must consist of alphanumeric characters, '-', '_' or '.'. Values with non-UTF-8 byte sequences must use the BinaryData field. The keys stored in Data must not overlap with the keys in the BinaryData field, this is enforced during validation process.",
    ),
    AGE,
];

const SERVICE_ACCOUNT_COLUMNS: &[Col] = &[
    NAME,
    (
        "Secrets",
        "string",
        "",
        0,
        "Secrets is a list of the secrets in the same namespace that pods running using this ServiceAccount are allowed to use. Pods are only limited to this list if this service account has a \"kubernetes.io/enforce-mountable-secrets\" annotation set to \"true\". The \"kubernetes.io/enforce-mountable-secrets\" annotation is deprecated since v1.32. Prefer separate namespaces to isolate access to mounted secrets. This field should not be used to find auto-generated service account token secrets for use outside of pods. Instead, tokens can be requested directly using the TokenRequest API, or service account token secrets can be manually created. More info: https://kubernetes.io/docs/concepts/configuration/secret",
    ),
    AGE,
];

const LEASE_COLUMNS: &[Col] = &[
    NAME,
    (
        "Holder",
        "string",
        "",
        0,
        "holderIdentity contains the identity of the holder of a current lease. If Coordinated Leader Election is used, the holder identity must be equal to the elected LeaseCandidate.metadata.name field.",
    ),
    AGE,
];

/// `rest.NewDefaultTableConvertor`, for kinds without a printer.
const DEFAULT_COLUMNS: &[Col] = &[
    NAME,
    (
        "Created At",
        "date",
        "",
        0,
        "CreationTimestamp is a timestamp representing the server time when this object was created. It is not guaranteed to be set in happens-before order across separate operations. Clients may not set this value. It is represented in RFC3339 form and is in UTC.\n\nPopulated by the system. Read-only. Null for lists. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata",
    ),
];

type Printer = fn(&Value, Timestamp) -> Vec<Value>;

/// The printer of a built-in kind (None: a custom resource).
fn builtin(info: &ResourceInfo) -> Option<(&'static [Col], Printer)> {
    if info.flavor == Flavor::Custom {
        return None;
    }
    let p: (&'static [Col], Printer) = match (info.group.as_str(), info.plural.as_str()) {
        ("", "pods") => (POD_COLUMNS, print_pod),
        ("", "nodes") => (NODE_COLUMNS, print_node),
        ("apps", "deployments") => (DEPLOYMENT_COLUMNS, print_deployment),
        ("batch", "jobs") => (JOB_COLUMNS, print_job),
        ("", "services") => (SERVICE_COLUMNS, print_service),
        ("", "events") | ("events.k8s.io", "events") => (EVENT_COLUMNS, print_event),
        ("", "namespaces") => (NAMESPACE_COLUMNS, print_namespace),
        ("", "secrets") => (SECRET_COLUMNS, print_secret),
        ("", "configmaps") => (CONFIGMAP_COLUMNS, print_configmap),
        ("", "serviceaccounts") => (SERVICE_ACCOUNT_COLUMNS, print_service_account),
        ("coordination.k8s.io", "leases") => (LEASE_COLUMNS, print_lease),
        _ => (DEFAULT_COLUMNS, print_default),
    };
    Some(p)
}

fn col_json(c: &Col) -> Value {
    json!({"name": c.0, "type": c.1, "format": c.2, "description": c.4, "priority": c.3})
}

/// The default columns of a CRD version without `additionalPrinterColumns`.
fn crd_default_columns() -> Vec<PrinterColumn> {
    vec![PrinterColumn {
        name: "Age".into(),
        type_: "date".into(),
        format: String::new(),
        json_path: ".metadata.creationTimestamp".into(),
        description: AGE_DESC.into(),
        priority: 0,
    }]
}

/// Render `items` (already in the requested version's form) as a Table.
pub fn table(info: &ResourceInfo, items: &[Value], rv: &str, include: IncludeObject) -> Value {
    table_at(info, items, rv, include, Timestamp::now())
}

/// One object as a Table, carrying that object's resourceVersion (a GET, or a watch event).
pub fn object_table(info: &ResourceInfo, obj: &Value, include: IncludeObject) -> Value {
    table(
        info,
        std::slice::from_ref(obj),
        crate::util::meta_str(obj, "resourceVersion"),
        include,
    )
}

/// [`table`] with the current time given (for deterministic tests).
pub fn table_at(
    info: &ResourceInfo,
    items: &[Value],
    rv: &str,
    include: IncludeObject,
    now: Timestamp,
) -> Value {
    let (cols, cells): (Vec<Value>, Vec<Vec<Value>>) = match builtin(info) {
        Some((cols, printer)) => {
            let cells = items
                .iter()
                .map(|o| {
                    // events.k8s.io Events print through the core printer, as the real
                    // server converts them to the one internal Event type
                    if info.flavor == Flavor::EventsV1 {
                        printer(&info.to_stored(o.clone()), now)
                    } else {
                        printer(o, now)
                    }
                })
                .collect();
            (cols.iter().map(col_json).collect(), cells)
        }
        None => custom_columns(info, items, now),
    };
    let rows: Vec<Value> = items
        .iter()
        .zip(cells)
        .map(|(o, cells)| {
            let mut row = json!({"cells": cells});
            match include {
                IncludeObject::None => {}
                IncludeObject::Metadata => row["object"] = crate::server::partial_metadata(o),
                IncludeObject::Object => row["object"] = o.clone(),
            }
            if let Some(c) = row_conditions(info, o) {
                row["conditions"] = c;
            }
            row
        })
        .collect();
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": rv},
        "columnDefinitions": cols,
        "rows": rows,
    })
}

/// printPod marks finished pods with a `Completed` row condition.
fn row_conditions(info: &ResourceInfo, o: &Value) -> Option<Value> {
    if info.flavor == Flavor::Custom || !info.group.is_empty() || info.plural != "pods" {
        return None;
    }
    match s(o, "/status/phase") {
        "Succeeded" => Some(
            json!([{"type": "Completed", "status": "True", "reason": "Succeeded", "message": "The pod has completed successfully."}]),
        ),
        "Failed" => Some(
            json!([{"type": "Completed", "status": "True", "reason": "Failed", "message": "The pod failed."}]),
        ),
        _ => None,
    }
}

fn custom_columns(
    info: &ResourceInfo,
    items: &[Value],
    now: Timestamp,
) -> (Vec<Value>, Vec<Vec<Value>>) {
    let defaults;
    let columns: &[PrinterColumn] = if info.printer_columns.is_empty() {
        defaults = crd_default_columns();
        &defaults
    } else {
        &info.printer_columns
    };
    let mut cols = vec![col_json(&NAME)];
    // a column whose path does not parse makes the real server fall back to
    // its default convertor for the whole kind (and log the error)
    let mut paths = Vec::new();
    for c in columns {
        match JsonPath::parse(&c.json_path) {
            Ok(p) => paths.push(p),
            Err(e) => {
                tracing::warn!(crd = ?info.crd_name, column = %c.name, json_path = %c.json_path, error = %e,
                    "unrecognized column definition; serving the default table");
                let cols = DEFAULT_COLUMNS.iter().map(col_json).collect();
                let cells = items.iter().map(|o| print_default(o, now)).collect();
                return (cols, cells);
            }
        }
        let description = if c.description.is_empty() {
            format!(
                "Custom resource definition column (in JSONPath format): {}",
                c.json_path
            )
        } else {
            c.description.clone()
        };
        cols.push(json!({"name": c.name, "type": c.type_, "format": c.format, "description": description, "priority": c.priority}));
    }
    let cells = items
        .iter()
        .map(|o| {
            let mut row = vec![json!(crate::util::meta_str(o, "name"))];
            for (c, path) in columns.iter().zip(&paths) {
                row.push(custom_cell(&c.type_, path, o, now));
            }
            row
        })
        .collect();
    (cols, cells)
}

/// One printer-column cell: the first value found, formatted by the column type;
/// nothing found, an evaluation error or a value of the wrong type is null.
pub fn custom_cell(type_: &str, path: &JsonPath, obj: &Value, now: Timestamp) -> Value {
    let found = match path.find(obj) {
        Ok(f) => f,
        Err(_) => return Value::Null,
    };
    let Some(first) = found.first() else {
        return Value::Null;
    };
    let v = first.value();
    if type_ == "string" {
        return Value::String(print_value(v));
    }
    match (type_, v) {
        (_, Value::Null) => Value::Null,
        ("integer", Value::Number(n)) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => json!(i),
            // Go's int64(float64) truncates toward zero
            (None, Some(f)) => json!(f as i64),
            _ => Value::Null,
        },
        ("number", Value::Number(n)) => n.as_f64().map(|f| json!(f)).unwrap_or(Value::Null),
        ("boolean", Value::Bool(b)) => json!(b),
        ("date", Value::String(t)) => {
            if t.is_empty() || t == "null" {
                return json!("<unknown>");
            }
            match t.parse::<Timestamp>() {
                Ok(ts) => json!(human_duration(now.duration_since(ts))),
                Err(_) => json!("<invalid>"),
            }
        }
        _ => Value::Null,
    }
}

/// `duration.HumanDuration` of k8s.io/apimachinery: ~2-3 significant figures.
pub fn human_duration(d: SignedDuration) -> String {
    let seconds = d.as_secs();
    if seconds < -1 {
        return "<invalid>".into();
    }
    if seconds < 0 {
        return "0s".into();
    }
    if seconds < 60 * 2 {
        return format!("{seconds}s");
    }
    let minutes = seconds / 60;
    if minutes < 10 {
        let s = seconds % 60;
        return if s == 0 {
            format!("{minutes}m")
        } else {
            format!("{minutes}m{s}s")
        };
    }
    if minutes < 60 * 3 {
        return format!("{minutes}m");
    }
    let hours = seconds / 3600;
    if hours < 8 {
        let m = minutes % 60;
        return if m == 0 {
            format!("{hours}h")
        } else {
            format!("{hours}h{m}m")
        };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    if hours < 24 * 8 {
        let h = hours % 24;
        return if h == 0 {
            format!("{}d", hours / 24)
        } else {
            format!("{}d{h}h", hours / 24)
        };
    }
    if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    }
    if hours < 24 * 365 * 8 {
        let dy = (hours / 24) % 365;
        return if dy == 0 {
            format!("{}y", hours / 24 / 365)
        } else {
            format!("{}y{dy}d", hours / 24 / 365)
        };
    }
    format!("{}y", hours / 24 / 365)
}

fn parse_time(v: Option<&Value>) -> Option<Timestamp> {
    v.and_then(Value::as_str)
        .filter(|t| !t.is_empty())
        .and_then(|t| t.parse::<Timestamp>().ok())
}

/// `translateTimestampSince`: `<unknown>` for an unset time.
fn since(v: Option<&Value>, now: Timestamp) -> String {
    match parse_time(v) {
        Some(ts) => human_duration(now.duration_since(ts)),
        None => "<unknown>".into(),
    }
}

fn age(o: &Value, now: Timestamp) -> Value {
    json!(since(o.pointer("/metadata/creationTimestamp"), now))
}

fn name(o: &Value) -> Value {
    json!(crate::util::meta_str(o, "name"))
}

/// The string at a JSON pointer, "" when absent.
fn s<'a>(o: &'a Value, ptr: &str) -> &'a str {
    o.pointer(ptr).and_then(Value::as_str).unwrap_or("")
}

fn int(o: &Value, ptr: &str) -> i64 {
    o.pointer(ptr).and_then(Value::as_i64).unwrap_or(0)
}

fn arr<'a>(o: &'a Value, ptr: &str) -> &'a [Value] {
    o.pointer(ptr)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

fn or_none(v: &str) -> String {
    if v.is_empty() {
        "<none>".into()
    } else {
        v.to_string()
    }
}

fn print_pod(pod: &Value, now: Timestamp) -> Vec<Value> {
    let init_specs = arr(pod, "/spec/initContainers");
    let restartable = |name: &str| {
        init_specs
            .iter()
            .any(|c| s(c, "/name") == name && s(c, "/restartPolicy") == "Always")
    };
    let mut total = arr(pod, "/spec/containers").len();
    total += init_specs
        .iter()
        .filter(|c| s(c, "/restartPolicy") == "Always")
        .count();
    let mut ready = 0;
    let mut restarts: i64 = 0;
    let mut restartable_restarts: i64 = 0;
    let mut last_restart: Option<Timestamp> = None;
    let mut last_restartable_restart: Option<Timestamp> = None;
    let later = |a: Option<Timestamp>, b: Option<Timestamp>| match (a, b) {
        (Some(x), Some(y)) => Some(x.max(y)),
        (x, None) => x,
        (None, y) => y,
    };

    let phase = s(pod, "/status/phase");
    let mut reason = phase.to_string();
    if !s(pod, "/status/reason").is_empty() {
        reason = s(pod, "/status/reason").to_string();
    }
    let conditions = arr(pod, "/status/conditions");
    if conditions
        .iter()
        .any(|c| s(c, "/type") == "PodScheduled" && s(c, "/reason") == "SchedulingGated")
    {
        reason = "SchedulingGated".into();
    }

    let mut initializing = false;
    for (i, c) in arr(pod, "/status/initContainerStatuses").iter().enumerate() {
        restarts += int(c, "/restartCount");
        let finished = parse_time(c.pointer("/lastState/terminated/finishedAt"));
        last_restart = later(last_restart, finished);
        let cname = s(c, "/name");
        if restartable(cname) {
            restartable_restarts += int(c, "/restartCount");
            last_restartable_restart = later(last_restartable_restart, finished);
        }
        let terminated = c.pointer("/state/terminated").filter(|t| t.is_object());
        let waiting_reason = s(c, "/state/waiting/reason");
        if terminated.is_some_and(|t| int(t, "/exitCode") == 0) {
            continue;
        }
        if restartable(cname) && c.pointer("/started").and_then(Value::as_bool) == Some(true) {
            if c.pointer("/ready").and_then(Value::as_bool) == Some(true) {
                ready += 1;
            }
            continue;
        }
        if let Some(t) = terminated {
            reason = if s(t, "/reason").is_empty() {
                if int(t, "/signal") != 0 {
                    format!("Init:Signal:{}", int(t, "/signal"))
                } else {
                    format!("Init:ExitCode:{}", int(t, "/exitCode"))
                }
            } else {
                format!("Init:{}", s(t, "/reason"))
            };
        } else if !waiting_reason.is_empty() && waiting_reason != "PodInitializing" {
            reason = format!("Init:{waiting_reason}");
        } else {
            reason = format!("Init:{i}/{}", init_specs.len());
        }
        initializing = true;
        break;
    }

    let initialized = conditions
        .iter()
        .find(|c| s(c, "/type") == "Initialized")
        .is_some_and(|c| s(c, "/status") == "True");
    if !initializing || initialized {
        restarts = restartable_restarts;
        last_restart = last_restartable_restart;
        let mut has_running = false;
        for c in arr(pod, "/status/containerStatuses").iter().rev() {
            restarts += int(c, "/restartCount");
            last_restart = later(
                last_restart,
                parse_time(c.pointer("/lastState/terminated/finishedAt")),
            );
            let terminated = c.pointer("/state/terminated").filter(|t| t.is_object());
            let waiting_reason = s(c, "/state/waiting/reason");
            if !waiting_reason.is_empty() {
                reason = waiting_reason.to_string();
            } else if let Some(t) = terminated.filter(|t| !s(t, "/reason").is_empty()) {
                reason = s(t, "/reason").to_string();
            } else if let Some(t) = terminated {
                reason = if int(t, "/signal") != 0 {
                    format!("Signal:{}", int(t, "/signal"))
                } else {
                    format!("ExitCode:{}", int(t, "/exitCode"))
                };
            } else if c.pointer("/ready").and_then(Value::as_bool) == Some(true)
                && c.pointer("/state/running").is_some_and(Value::is_object)
            {
                has_running = true;
                ready += 1;
            }
        }
        // back to Running if a container still runs
        if reason == "Completed" && has_running {
            let pod_ready = conditions
                .iter()
                .any(|c| s(c, "/type") == "Ready" && s(c, "/status") == "True");
            reason = if pod_ready { "Running" } else { "NotReady" }.into();
        }
    }

    let deleting = pod
        .pointer("/metadata/deletionTimestamp")
        .is_some_and(|v| !v.is_null());
    if deleting && s(pod, "/status/reason") == "NodeLost" {
        reason = "Unknown".into();
    } else if deleting && phase != "Succeeded" && phase != "Failed" {
        reason = "Terminating".into();
    }

    let restarts_cell = match last_restart {
        Some(t) if restarts != 0 => {
            format!("{restarts} ({} ago)", human_duration(now.duration_since(t)))
        }
        _ => restarts.to_string(),
    };

    // the internal PodStatus takes podIP first (v1 conversion), then podIPs
    let mut ip = s(pod, "/status/podIP").to_string();
    if ip.is_empty() {
        ip = arr(pod, "/status/podIPs")
            .first()
            .map(|p| s(p, "/ip").to_string())
            .unwrap_or_default();
    }
    let gates = arr(pod, "/spec/readinessGates");
    let readiness_gates = if gates.is_empty() {
        "<none>".to_string()
    } else {
        let true_conditions = gates
            .iter()
            .filter(|g| {
                conditions
                    .iter()
                    .find(|c| s(c, "/type") == s(g, "/conditionType"))
                    .is_some_and(|c| s(c, "/status") == "True")
            })
            .count();
        format!("{true_conditions}/{}", gates.len())
    };
    vec![
        name(pod),
        json!(format!("{ready}/{total}")),
        json!(reason),
        json!(restarts_cell),
        age(pod, now),
        json!(or_none(&ip)),
        json!(or_none(s(pod, "/spec/nodeName"))),
        json!(or_none(s(pod, "/status/nominatedNodeName"))),
        json!(readiness_gates),
    ]
}

fn print_node(node: &Value, now: Timestamp) -> Vec<Value> {
    // only the Ready condition counts (NodeAllConditions); the last one of a type wins
    let ready = arr(node, "/status/conditions")
        .iter()
        .rev()
        .find(|c| s(c, "/type") == "Ready");
    let mut status = vec![match ready {
        Some(c) if s(c, "/status") == "True" => "Ready".to_string(),
        Some(_) => "NotReady".to_string(),
        None => "Unknown".to_string(),
    }];
    if node.pointer("/spec/unschedulable").and_then(Value::as_bool) == Some(true) {
        status.push("SchedulingDisabled".into());
    }
    let mut roles: Vec<String> = Vec::new();
    if let Some(labels) = node.pointer("/metadata/labels").and_then(Value::as_object) {
        for (k, v) in labels {
            if let Some(role) = k.strip_prefix("node-role.kubernetes.io/") {
                if !role.is_empty() {
                    roles.push(role.to_string());
                }
            } else if k == "kubernetes.io/role"
                && let Some(v) = v.as_str().filter(|v| !v.is_empty())
            {
                roles.push(v.to_string());
            }
        }
    }
    roles.sort();
    roles.dedup();
    let address = |t: &str| {
        arr(node, "/status/addresses")
            .iter()
            .find(|a| s(a, "/type") == t)
            .map(|a| s(a, "/address").to_string())
            .unwrap_or_else(|| "<none>".into())
    };
    let info = |f: &str| {
        let v = s(node, &format!("/status/nodeInfo/{f}"));
        if v.is_empty() {
            "<unknown>".to_string()
        } else {
            v.to_string()
        }
    };
    vec![
        name(node),
        json!(status.join(",")),
        json!(or_none(&roles.join(","))),
        age(node, now),
        json!(s(node, "/status/nodeInfo/kubeletVersion")),
        json!(address("InternalIP")),
        json!(address("ExternalIP")),
        json!(info("osImage")),
        json!(info("kernelVersion")),
        json!(info("containerRuntimeVersion")),
    ]
}

/// `layoutContainerCells`: names and images, comma-separated.
fn containers(o: &Value, ptr: &str) -> (String, String) {
    let cs = arr(o, ptr);
    let names: Vec<&str> = cs.iter().map(|c| s(c, "/name")).collect();
    let images: Vec<&str> = cs.iter().map(|c| s(c, "/image")).collect();
    (names.join(","), images.join(","))
}

/// `metav1.LabelSelectorAsSelector(...).String()`: requirements sorted by key,
/// `Err` for an invalid operator. A missing selector selects nothing (""),
/// an empty one everything ("").
fn selector_string(sel: Option<&Value>) -> Result<String, ()> {
    let Some(sel) = sel.filter(|v| v.is_object()) else {
        return Ok(String::new());
    };
    let mut reqs: Vec<(String, String)> = Vec::new();
    if let Some(m) = sel.get("matchLabels").and_then(Value::as_object) {
        for (k, v) in m {
            reqs.push((k.clone(), format!("{k}={}", v.as_str().unwrap_or(""))));
        }
    }
    for e in sel
        .get("matchExpressions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let key = s(e, "/key");
        let mut values: Vec<&str> = arr(e, "/values").iter().filter_map(Value::as_str).collect();
        values.sort();
        values.dedup();
        let r = match s(e, "/operator") {
            "In" => format!("{key} in ({})", values.join(",")),
            "NotIn" => format!("{key} notin ({})", values.join(",")),
            "Exists" => key.to_string(),
            "DoesNotExist" => format!("!{key}"),
            _ => return Err(()),
        };
        reqs.push((key.to_string(), r));
    }
    reqs.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(reqs.into_iter().map(|r| r.1).collect::<Vec<_>>().join(","))
}

/// `metav1.FormatLabelSelector`.
fn format_label_selector(sel: Option<&Value>) -> String {
    match selector_string(sel) {
        Ok(s) if s.is_empty() => "<none>".into(),
        Ok(s) => s,
        Err(()) => "<error>".into(),
    }
}

/// `labels.FormatLabels` of a map: sorted `k=v`, `<none>` when empty.
fn format_labels(m: Option<&Value>) -> String {
    let pairs: Vec<String> = m
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
        .collect();
    or_none(&pairs.join(","))
}

fn print_deployment(d: &Value, now: Timestamp) -> Vec<Value> {
    // spec.replicas defaults to 1 on the real server
    let desired = d
        .pointer("/spec/replicas")
        .and_then(Value::as_i64)
        .unwrap_or(1);
    let (names, images) = containers(d, "/spec/template/spec/containers");
    let selector =
        selector_string(d.pointer("/spec/selector")).unwrap_or_else(|()| "<invalid>".into());
    vec![
        name(d),
        json!(format!("{}/{desired}", int(d, "/status/readyReplicas"))),
        json!(int(d, "/status/updatedReplicas")),
        json!(int(d, "/status/availableReplicas")),
        age(d, now),
        json!(names),
        json!(images),
        json!(selector),
    ]
}

fn condition_true(o: &Value, type_: &str) -> bool {
    arr(o, "/status/conditions")
        .iter()
        .find(|c| s(c, "/type") == type_)
        .is_some_and(|c| s(c, "/status") == "True")
}

fn print_job(j: &Value, now: Timestamp) -> Vec<Value> {
    let succeeded = int(j, "/status/succeeded");
    let completions = j.pointer("/spec/completions").and_then(Value::as_i64);
    let parallelism = j.pointer("/spec/parallelism").and_then(Value::as_i64);
    // SetDefaults_Job: both unset means completions = parallelism = 1
    let (completions, parallelism) = match (completions, parallelism) {
        (None, None) => (Some(1), 1),
        (c, p) => (c, p.unwrap_or(1)),
    };
    let completions = match completions {
        Some(c) => format!("{succeeded}/{c}"),
        None if parallelism > 1 => format!("{succeeded}/1 of {parallelism}"),
        None => format!("{succeeded}/1"),
    };
    let start = parse_time(j.pointer("/status/startTime"));
    let end = parse_time(j.pointer("/status/completionTime"));
    let duration = match (start, end) {
        (None, _) => String::new(),
        (Some(st), None) => human_duration(now.duration_since(st)),
        (Some(st), Some(en)) => human_duration(en.duration_since(st)),
    };
    let deleting = j
        .pointer("/metadata/deletionTimestamp")
        .is_some_and(|v| !v.is_null());
    let status = if condition_true(j, "Complete") {
        "Complete"
    } else if condition_true(j, "Failed") {
        "Failed"
    } else if deleting {
        "Terminating"
    } else if condition_true(j, "Suspended") {
        "Suspended"
    } else if condition_true(j, "FailureTarget") {
        "FailureTarget"
    } else {
        "Running"
    };
    let (names, images) = containers(j, "/spec/template/spec/containers");
    vec![
        name(j),
        json!(status),
        json!(completions),
        json!(duration),
        age(j, now),
        json!(names),
        json!(images),
        json!(format_label_selector(j.pointer("/spec/selector"))),
    ]
}

fn print_service(svc: &Value, now: Timestamp) -> Vec<Value> {
    // spec.type defaults to ClusterIP
    let type_ = match s(svc, "/spec/type") {
        "" => "ClusterIP",
        t => t,
    };
    // the internal ServiceSpec takes clusterIP first (v1 conversion), then clusterIPs
    let mut cluster_ip = s(svc, "/spec/clusterIP").to_string();
    if cluster_ip.is_empty() {
        cluster_ip = arr(svc, "/spec/clusterIPs")
            .first()
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
    }
    let external_ips: Vec<&str> = arr(svc, "/spec/externalIPs")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let external = match type_ {
        "ClusterIP" | "NodePort" => or_none(&external_ips.join(",")),
        "LoadBalancer" => {
            // loadBalancerStatusStringer with wide=true (the server's form): sorted, deduplicated
            let mut lb: Vec<&str> = arr(svc, "/status/loadBalancer/ingress")
                .iter()
                .filter_map(|i| match (s(i, "/ip"), s(i, "/hostname")) {
                    ("", "") => None,
                    ("", h) => Some(h),
                    (ip, _) => Some(ip),
                })
                .collect();
            lb.sort();
            lb.dedup();
            let mut all: Vec<&str> = lb;
            all.extend(external_ips.iter().copied());
            if all.is_empty() {
                "<pending>".to_string()
            } else {
                all.join(",")
            }
        }
        "ExternalName" => s(svc, "/spec/externalName").to_string(),
        _ => "<unknown>".to_string(),
    };
    let ports: Vec<String> = arr(svc, "/spec/ports")
        .iter()
        .map(|p| {
            let protocol = match s(p, "/protocol") {
                "" => "TCP",
                pr => pr,
            };
            let node_port = int(p, "/nodePort");
            if node_port > 0 {
                format!("{}:{node_port}/{protocol}", int(p, "/port"))
            } else {
                format!("{}/{protocol}", int(p, "/port"))
            }
        })
        .collect();
    vec![
        name(svc),
        json!(type_),
        json!(or_none(&cluster_ip)),
        json!(external),
        json!(or_none(&ports.join(","))),
        age(svc, now),
        json!(format_labels(svc.pointer("/spec/selector"))),
    ]
}

/// The core/v1 printer (events.k8s.io Events are converted to this form first).
fn print_event(ev: &Value, now: Timestamp) -> Vec<Value> {
    let first = match parse_time(ev.get("firstTimestamp")) {
        Some(t) => human_duration(now.duration_since(t)),
        None => since(ev.get("eventTime"), now),
    };
    let mut last = match parse_time(ev.get("lastTimestamp")) {
        Some(t) => human_duration(now.duration_since(t)),
        None => first.clone(),
    };
    let mut count = ev.get("count").and_then(Value::as_i64).unwrap_or(0);
    if let Some(series) = ev.get("series").filter(|v| v.is_object()) {
        last = since(series.get("lastObservedTime"), now);
        count = series.get("count").and_then(Value::as_i64).unwrap_or(0);
    } else if count == 0 {
        // singleton events of the new API have no count
        count = 1;
    }
    let kind = s(ev, "/involvedObject/kind").to_lowercase();
    let obj_name = s(ev, "/involvedObject/name");
    let target = if obj_name.is_empty() {
        kind
    } else {
        format!("{kind}/{obj_name}")
    };
    let component = match s(ev, "/source/component") {
        "" => s(ev, "/reportingComponent"),
        c => c,
    };
    let instance = match s(ev, "/source/host") {
        "" => s(ev, "/reportingInstance"),
        h => h,
    };
    let source = if instance.is_empty() {
        component.to_string()
    } else {
        format!("{component}, {instance}")
    };
    vec![
        json!(last),
        json!(s(ev, "/type")),
        json!(s(ev, "/reason")),
        json!(target),
        json!(s(ev, "/involvedObject/fieldPath")),
        json!(source),
        json!(s(ev, "/message").trim()),
        json!(first),
        json!(count),
        name(ev),
    ]
}

fn print_namespace(o: &Value, now: Timestamp) -> Vec<Value> {
    vec![name(o), json!(s(o, "/status/phase")), age(o, now)]
}

fn len_of(o: &Value, key: &str) -> usize {
    match o.get(key) {
        Some(Value::Object(m)) => m.len(),
        Some(Value::Array(a)) => a.len(),
        _ => 0,
    }
}

fn print_secret(o: &Value, now: Timestamp) -> Vec<Value> {
    // type defaults to Opaque
    let type_ = match s(o, "/type") {
        "" => "Opaque",
        t => t,
    };
    vec![name(o), json!(type_), json!(len_of(o, "data")), age(o, now)]
}

fn print_configmap(o: &Value, now: Timestamp) -> Vec<Value> {
    vec![
        name(o),
        json!(len_of(o, "data") + len_of(o, "binaryData")),
        age(o, now),
    ]
}

fn print_service_account(o: &Value, now: Timestamp) -> Vec<Value> {
    vec![name(o), json!(len_of(o, "secrets")), age(o, now)]
}

fn print_lease(o: &Value, now: Timestamp) -> Vec<Value> {
    vec![name(o), json!(s(o, "/spec/holderIdentity")), age(o, now)]
}

/// `rest.DefaultTableConvertor`: the creation time in RFC3339, UTC.
fn print_default(o: &Value, _now: Timestamp) -> Vec<Value> {
    let created = parse_time(o.pointer("/metadata/creationTimestamp"))
        .map(|t| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
        .unwrap_or_else(|| "0001-01-01T00:00:00Z".into());
    vec![name(o), json!(created)]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(secs: i64) -> SignedDuration {
        SignedDuration::from_secs(secs)
    }

    /// The cases of apimachinery's duration_test.go (TestHumanDuration).
    #[test]
    fn human_duration_matches_apimachinery() {
        let cases = [
            (-2, "<invalid>"),
            (-1, "0s"),
            (0, "0s"),
            (1, "1s"),
            (119, "119s"),
            (120, "2m"),
            (121, "2m1s"),
            (9 * 60 + 59, "9m59s"),
            (10 * 60, "10m"),
            (3 * 3600 - 1, "179m"),
            (3 * 3600, "3h"),
            (3 * 3600 + 60, "3h1m"),
            (8 * 3600 - 1, "7h59m"),
            (8 * 3600, "8h"),
            (48 * 3600 - 1, "47h"),
            (48 * 3600, "2d"),
            (48 * 3600 + 3600, "2d1h"),
            (8 * 86400 - 1, "7d23h"),
            (8 * 86400, "8d"),
            (2 * 365 * 86400 - 1, "729d"),
            (2 * 365 * 86400, "2y"),
            (2 * 365 * 86400 + 86400, "2y1d"),
            (8 * 365 * 86400, "8y"),
        ];
        for (secs, want) in cases {
            assert_eq!(human_duration(d(secs)), want, "{secs}s");
        }
    }

    #[test]
    fn label_selectors_format_as_apimachinery() {
        let sel = json!({"matchLabels": {"b": "2", "a": "1"},
            "matchExpressions": [{"key": "c", "operator": "In", "values": ["y", "x"]},
                                 {"key": "0", "operator": "DoesNotExist"}]});
        assert_eq!(
            selector_string(Some(&sel)).unwrap(),
            "!0,a=1,b=2,c in (x,y)"
        );
        assert_eq!(format_label_selector(None), "<none>");
        assert_eq!(
            format_label_selector(Some(
                &json!({"matchExpressions": [{"key": "k", "operator": "Bad"}]})
            )),
            "<error>"
        );
        assert_eq!(format_labels(Some(&json!({"z": "1", "a": "2"}))), "a=2,z=1");
    }
}
