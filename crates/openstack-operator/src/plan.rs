//! `openstack-operator plan -f FILE|DIR`: what applying manifests would do in OpenStack.
//!
//! The I/O around [`controllers::plan`]: read the manifests, the objects' current state from
//! the cluster (when one is reachable) and the cloud, run each object's own reconcile pass on
//! the dry-run port, print the plan. Nothing is written anywhere: OpenStack is reached through
//! [`openstack::dry_run`], Kubernetes through a client whose transport answers every
//! non-GET request itself (an Event, a mid-pass status save, a tenant credential's Secret)
//! and never forwards one; what such a request would have written is remembered for the
//! later reads of the same plan, and a Secret's write is listed in the plan.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use anyhow::Context as _;
use clap::{Args, ValueEnum};
use controllers::framework::Managed;
use controllers::plan::{Plan, plan_object, render_text, to_json};
use controllers::{Config, Context};
use kube::api::Api;
use kube::client::Body;
use kube::{Client, Resource, ResourceExt as _};
use openstack::Cloud;
use openstack::adapter::{ClientOptions, CloudSelector};
use openstack::dry_run::{FieldChange, Journal, Op};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use api::{OpenstackDomain, OpenstackFlavor, OpenstackImage, OpenstackNetwork, OpenstackProject};

/// Output format of `plan`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// For people: per resource, `+` create, `~` change (old → new), `-` delete.
    Text,
    /// For CI: one JSON document.
    Json,
}

/// Flags of `openstack-operator plan`. The operator's policy flags have the same names and
/// environment variables as `run`'s, so a plan judges the manifests as the operator would.
#[derive(Args, Debug)]
pub struct PlanArgs {
    /// Manifest file, or directory of `*.yaml`/`*.yml`/`*.json` files (not recursive);
    /// repeatable.
    #[arg(short = 'f', long = "filename", required = true)]
    filename: Vec<PathBuf>,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value = "text")]
    output: Output,
    /// Plan deleting these objects instead of applying them.
    #[arg(long)]
    delete: bool,
    /// Namespace of namespaced objects that name none (default: the kubeconfig's, else
    /// `default`).
    #[arg(short = 'n', long)]
    namespace: Option<String>,
    /// Plan from the manifests alone, without reading the cluster in KUBECONFIG.
    #[arg(long)]
    no_cluster: bool,
    /// The operator's --cluster-id (ownership marks).
    #[arg(long, env = "CLUSTER_ID", default_value = "default")]
    cluster_id: String,
    /// The operator's --allowed-roles.
    #[arg(
        long,
        env = "ALLOWED_ROLES",
        value_delimiter = ',',
        default_value = "member,reader"
    )]
    allowed_roles: Vec<String>,
    /// The operator's --allow-project-adoption.
    #[arg(long, env = "ALLOW_PROJECT_ADOPTION")]
    allow_project_adoption: bool,
    /// The operator's --adopt-legacy.
    #[arg(long, env = "ADOPT_LEGACY")]
    adopt_legacy: bool,
    /// The operator's --federation-namespaces.
    #[arg(long, env = "FEDERATION_NAMESPACES", value_delimiter = ',')]
    federation_namespaces: Vec<String>,
}

/// The manifests' objects, by kind, plus the ConfigMaps they define.
#[derive(Default)]
struct Manifests {
    domains: Vec<OpenstackDomain>,
    flavors: Vec<OpenstackFlavor>,
    images: Vec<OpenstackImage>,
    networks: Vec<OpenstackNetwork>,
    projects: Vec<OpenstackProject>,
    /// Other objects a pass may read (ConfigMaps), by API path.
    others: HashMap<String, Value>,
    /// Documents neither reconciled nor read (Namespaces, ...), as `Kind name`.
    skipped: Vec<String>,
}

fn manifest_files(paths: &[PathBuf]) -> anyhow::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for p in paths {
        if p.is_dir() {
            let mut files: Vec<PathBuf> = std::fs::read_dir(p)
                .with_context(|| format!("reading the directory {}", p.display()))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|f| {
                    f.is_file()
                        && matches!(
                            f.extension().and_then(|e| e.to_str()),
                            Some("yaml" | "yml" | "json")
                        )
                })
                .collect();
            files.sort();
            out.extend(files);
        } else {
            out.push(p.clone());
        }
    }
    Ok(out)
}

fn typed<K: DeserializeOwned>(doc: &Value, file: &Path) -> anyhow::Result<K> {
    serde_json::from_value(doc.clone()).with_context(|| {
        format!(
            "{}: {} {} does not match its schema",
            file.display(),
            doc["kind"].as_str().unwrap_or("?"),
            doc["metadata"]["name"].as_str().unwrap_or("?")
        )
    })
}

fn load(paths: &[PathBuf], namespace: &str) -> anyhow::Result<Manifests> {
    let mut m = Manifests::default();
    for file in manifest_files(paths)? {
        let text = std::fs::read_to_string(&file)
            .with_context(|| format!("reading {}", file.display()))?;
        let docs = api::manifest::documents(&text)
            .with_context(|| format!("parsing {}", file.display()))?;
        for mut doc in docs {
            let api_version = doc["apiVersion"].as_str().unwrap_or_default().to_string();
            let kind = doc["kind"].as_str().unwrap_or_default().to_string();
            let name = doc["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            if name.is_empty() {
                anyhow::bail!("{}: a {kind} without metadata.name", file.display());
            }
            let namespaced = matches!(kind.as_str(), "OpenstackProject" | "ConfigMap");
            if namespaced && doc["metadata"]["namespace"].as_str().is_none() {
                doc["metadata"]["namespace"] = json!(namespace);
            }
            match (api_version.as_str(), kind.as_str()) {
                ("sunet.se/v1alpha1", "OpenstackDomain") => m.domains.push(typed(&doc, &file)?),
                ("sunet.se/v1alpha1", "OpenstackFlavor") => m.flavors.push(typed(&doc, &file)?),
                ("sunet.se/v1alpha1", "OpenstackImage") => m.images.push(typed(&doc, &file)?),
                ("sunet.se/v1alpha1", "OpenstackNetwork") => m.networks.push(typed(&doc, &file)?),
                ("sunet.se/v1alpha1", "OpenstackProject") => m.projects.push(typed(&doc, &file)?),
                // A cloud has no OpenStack object of its own; resources naming it are
                // reported as not planned.
                ("sunet.se/v1alpha1", "OpenstackCloud") => {
                    m.skipped.push(format!("OpenstackCloud {name}"))
                }
                (v, k) if v.starts_with("sunet.se/") => {
                    anyhow::bail!("{}: unknown kind {k} in {v} ({name})", file.display())
                }
                ("v1", "ConfigMap") => {
                    let ns = doc["metadata"]["namespace"].as_str().unwrap_or(namespace);
                    m.others
                        .insert(format!("/api/v1/namespaces/{ns}/configmaps/{name}"), doc);
                }
                (_, k) => m.skipped.push(format!("{k} {name}")),
            }
        }
    }
    Ok(m)
}

fn json_response(status: u16, v: &Value) -> http::Response<Body> {
    let mut r = http::Response::new(Body::from(v.to_string().into_bytes()));
    *r.status_mut() = http::StatusCode::from_u16(status).unwrap_or(http::StatusCode::OK);
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    r
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

fn not_found(path: &str, why: &str) -> http::Response<Body> {
    json_response(
        404,
        &json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                "reason": "NotFound", "code": 404, "message": format!("{path}: {why}")}),
    )
}

/// What the plan's passes would have written, by object path (`None`: deleted): later reads
/// of the same plan see it, as the dry-run port's overlay does for OpenStack (a tenant
/// credential's pass reads back the Secret it wrote). In memory, for one plan run.
#[derive(Default)]
struct Written(Mutex<HashMap<String, Option<Value>>>);

impl Written {
    fn get(&self, path: &str) -> Option<Option<Value>> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(path)
            .cloned()
    }

    fn put(&self, path: String, v: Option<Value>) {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(path, v);
    }
}

/// RFC 7386: `patch` merged into `target` (`null` removes a key). Also how a strategic-merge
/// or apply patch of a Secret's maps reads (the only kind of object whose patch a plan shows).
fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(p) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = json!({});
    }
    if let Value::Object(t) = target {
        for (k, v) in p {
            if v.is_null() {
                t.remove(k);
            } else {
                merge_patch(t.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
    }
}

/// `(namespace, name)` of a Secret path (`name` empty for the collection).
fn secret_path(path: &str) -> Option<(&str, &str)> {
    let rest = path.strip_prefix("/api/v1/namespaces/")?;
    let (ns, rest) = rest.split_once('/')?;
    let name = match rest.strip_prefix("secrets") {
        Some("") => "",
        Some(r) => r.strip_prefix('/').filter(|n| !n.contains('/'))?,
        None => return None,
    };
    Some((ns, name))
}

/// A Secret's write as field changes: the keys whose value changes (never the value) and the
/// annotations.
fn secret_changes(before: Option<&Value>, after: Option<&Value>) -> Vec<FieldChange> {
    const HIDDEN: &str = "(not shown)";
    let keys = |v: Option<&Value>, at: &str| -> BTreeSet<String> {
        v.and_then(|v| v.pointer(at))
            .and_then(Value::as_object)
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default()
    };
    let at = |v: Option<&Value>, ptr: &str| v.and_then(|v| v.pointer(ptr)).cloned();
    let mut out = Vec::new();
    for section in ["data", "stringData"] {
        let all: BTreeSet<String> = keys(before, &format!("/{section}"))
            .union(&keys(after, &format!("/{section}")))
            .cloned()
            .collect();
        for k in all {
            let ptr = format!("/{section}/{}", k.replace('~', "~0").replace('/', "~1"));
            let (old, new) = (at(before, &ptr), at(after, &ptr));
            if old != new {
                out.push(FieldChange {
                    field: format!("data.{k}"),
                    old: None,
                    new: new.map(|_| json!(HIDDEN)),
                });
            }
        }
    }
    let all: BTreeSet<String> = keys(before, "/metadata/annotations")
        .union(&keys(after, "/metadata/annotations"))
        .cloned()
        .collect();
    for k in all {
        let ptr = format!(
            "/metadata/annotations/{}",
            k.replace('~', "~0").replace('/', "~1")
        );
        let (old, new) = (at(before, &ptr), at(after, &ptr));
        if old != new {
            out.push(FieldChange {
                field: format!("annotations.{k}"),
                old,
                new,
            });
        }
    }
    out
}

/// The Kubernetes side of a plan: the manifests' objects, the cluster (if any) and what the
/// plan's passes wrote so far.
struct Kube {
    cluster: Option<Client>,
    objects: Arc<HashMap<String, Value>>,
    written: Written,
    journal: Arc<Journal>,
}

impl Kube {
    /// The object at `path` as the plan sees it now.
    async fn current(&self, path: &str) -> Result<Option<Value>, BoxError> {
        if let Some(w) = self.written.get(path) {
            return Ok(w);
        }
        if let Some(v) = self.objects.get(path) {
            return Ok(Some(v.clone()));
        }
        let Some(c) = &self.cluster else {
            return Ok(None);
        };
        let req = http::Request::get(path).body(Body::empty())?;
        let resp = c.send(req).await?;
        if resp.status() == http::StatusCode::NOT_FOUND {
            return Ok(None);
        }
        if !resp.status().is_success() {
            return Err(format!("reading {path} from the cluster: {}", resp.status()).into());
        }
        let body = resp.into_body().collect_bytes().await?;
        Ok(Some(serde_json::from_slice(&body)?))
    }

    /// Remembers a write of `path` (`after` `None`: a delete) and, for a Secret, lists it in
    /// the plan.
    fn wrote(&self, op: Op, path: &str, before: Option<&Value>, after: Option<Value>) {
        if let Some((ns, name)) = secret_path(path)
            && !name.is_empty()
        {
            let changes = secret_changes(before, after.as_ref());
            if op == Op::Delete || !changes.is_empty() {
                self.journal
                    .record_kubernetes(op, "Secret", format!("{ns}/{name}"), changes);
            }
        }
        self.written.put(path.to_string(), after);
    }

    async fn answer(&self, req: http::Request<Body>) -> Result<http::Response<Body>, BoxError> {
        let path = req.uri().path().to_string();
        let method = req.method().clone();
        if method == http::Method::GET {
            if let Some(w) = self.written.get(&path) {
                return Ok(match w {
                    Some(v) => json_response(200, &v),
                    None => not_found(&path, "deleted by this plan"),
                });
            }
            if let Some(v) = self.objects.get(&path) {
                return Ok(json_response(200, v));
            }
            return match &self.cluster {
                Some(c) => c.send(req).await.map_err(BoxError::from),
                None => Ok(not_found(&path, "not in the manifests (no cluster)")),
            };
        }
        let json_patch = req
            .headers()
            .get(http::header::CONTENT_TYPE)
            .is_some_and(|t| t.as_bytes().starts_with(b"application/json-patch"));
        let body = req.into_body().collect_bytes().await?;
        let sent: Option<Value> = serde_json::from_slice(&body).ok();
        // A status save is answered with the object as the plan read it, and not remembered:
        // the pass goes on with the status it holds (a plan shows OpenStack's changes).
        let today = || {
            self.objects
                .get(path.trim_end_matches("/status"))
                .cloned()
                .or_else(|| sent.clone())
                .unwrap_or_else(|| json!({}))
        };
        if path.ends_with("/status") {
            return Ok(json_response(200, &today()));
        }
        let answer = match method {
            http::Method::POST => {
                let name = sent
                    .as_ref()
                    .and_then(|v| v.pointer("/metadata/name"))
                    .and_then(Value::as_str)
                    .filter(|n| !n.is_empty());
                if let (Some(name), Some(v)) = (name, &sent) {
                    self.wrote(Op::Create, &format!("{path}/{name}"), None, Some(v.clone()));
                }
                today()
            }
            http::Method::PUT => {
                let before = self.current(&path).await?;
                if let Some(v) = &sent {
                    self.wrote(Op::Update, &path, before.as_ref(), Some(v.clone()));
                }
                sent.clone().unwrap_or_else(|| json!({}))
            }
            http::Method::PATCH if !json_patch => {
                let before = self.current(&path).await?;
                // Nothing known to patch (no such object read or written): answered as any
                // other write, and not remembered.
                let Some(base) = before.clone() else {
                    return Ok(json_response(200, &today()));
                };
                let mut after = base;
                if let Some(p) = &sent {
                    merge_patch(&mut after, p);
                }
                self.wrote(Op::Update, &path, before.as_ref(), Some(after.clone()));
                after
            }
            http::Method::DELETE => {
                let Some(before) = self.current(&path).await? else {
                    return Ok(not_found(&path, "nothing to delete"));
                };
                self.wrote(Op::Delete, &path, Some(&before), None);
                json!({"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 200})
            }
            _ => today(),
        };
        Ok(json_response(200, &answer))
    }
}

/// A Kubernetes client that reads (what this plan wrote, then the manifests' objects, then the
/// cluster when there is one) and never writes: a non-GET request is answered here and not
/// sent on. A pass publishes Events and may save its status mid-way; in a plan both go
/// nowhere. An object's create, replace, merge patch or delete is remembered for the later
/// reads of the plan (a tenant credential's pass reads back its Secret), and a Secret's is
/// recorded in `journal` as an intent of service `kubernetes` (its keys, never its data).
fn read_only_client(
    cluster: Option<Client>,
    objects: Arc<HashMap<String, Value>>,
    namespace: &str,
    journal: Arc<Journal>,
) -> Client {
    let kube = Arc::new(Kube {
        cluster,
        objects,
        written: Written::default(),
        journal,
    });
    let svc = tower::service_fn(move |req: http::Request<Body>| {
        let kube = kube.clone();
        async move { kube.answer(req).await }
    });
    Client::new(svc, namespace.to_string())
}

fn object_path<K: Resource<DynamicType = ()>>(obj: &K) -> String {
    format!(
        "{}/{}",
        K::url_path(&(), obj.namespace().as_deref()),
        obj.name_any()
    )
}

/// The manifest's object with the cluster's UID and status when it exists there (the spec
/// stays the manifest's: that is what applying would set).
async fn with_live_state<K>(cluster: Option<&Client>, mut obj: K) -> anyhow::Result<(K, bool)>
where
    K: Managed + HasStatus,
{
    let Some(client) = cluster else {
        return Ok((obj, false));
    };
    let api: Api<K> = K::api(client.clone(), &obj);
    let live = api.get_opt(&obj.name_any()).await.with_context(|| {
        format!(
            "reading {} {} from the cluster",
            K::kind(&()),
            obj.name_any()
        )
    })?;
    Ok(match live {
        Some(live) => {
            obj.meta_mut().uid = live.meta().uid.clone();
            obj.meta_mut().generation = live.meta().generation;
            obj.meta_mut().resource_version = live.meta().resource_version.clone();
            obj.take_status_from(live);
            (obj, true)
        }
        None => (obj, false),
    })
}

/// Copies `status` from the live object.
trait HasStatus {
    fn take_status_from(&mut self, live: Self);
}

macro_rules! has_status {
    ($($t:ty),*) => {$(
        impl HasStatus for $t {
            fn take_status_from(&mut self, live: Self) {
                self.status = live.status;
            }
        }
    )*};
}
has_status!(
    OpenstackDomain,
    OpenstackFlavor,
    OpenstackImage,
    OpenstackNetwork,
    OpenstackProject
);

/// Runs `plan`; returns the exit code (0 nothing to do, 2 changes, 1 a pass would fail).
pub async fn run(args: PlanArgs) -> anyhow::Result<i32> {
    crate::logging::init_logging_with(crate::run::LogFormat::Text, "warn")?;
    let cluster = if args.no_cluster {
        None
    } else {
        match kube::Config::infer().await {
            Ok(cfg) => Some(Client::try_from(cfg).context("connecting to Kubernetes")?),
            Err(e) => {
                eprintln!("note: no cluster ({e}); planning from the manifests alone");
                None
            }
        }
    };
    let namespace = args
        .namespace
        .clone()
        .or_else(|| cluster.as_ref().map(|c| c.default_namespace().to_string()))
        .unwrap_or_else(|| "default".to_string());
    let m = load(&args.filename, &namespace)?;
    for s in &m.skipped {
        eprintln!("note: {s}: not planned (no OpenStack objects of its own)");
    }

    // The operator's OPENSTACK_* client limits apply to a plan too.
    let options = ClientOptions::from_env().context("reading the OPENSTACK_* client settings")?;
    let real = Cloud::connect(&CloudSelector::Env, options)
        .await
        .context("connecting to OpenStack (check OS_CLOUD and OS_CLIENT_CONFIG_FILE)")?;
    let (cloud, journal) = openstack::dry_run::dry_run(real);

    // Every object as a pass would read it, so a mid-pass status save finds it.
    let mut objects = m.others.clone();
    let c = cluster.as_ref();
    let mut domains = Vec::new();
    for o in m.domains {
        domains.push(with_live_state(c, o).await?);
    }
    let mut flavors = Vec::new();
    for o in m.flavors {
        flavors.push(with_live_state(c, o).await?);
    }
    let mut images = Vec::new();
    for o in m.images {
        images.push(with_live_state(c, o).await?);
    }
    let mut networks = Vec::new();
    for o in m.networks {
        networks.push(with_live_state(c, o).await?);
    }
    let mut projects = Vec::new();
    for o in m.projects {
        projects.push(with_live_state(c, o).await?);
    }
    macro_rules! register {
        ($($v:ident),*) => {$(
            for (o, _) in &$v {
                objects.insert(object_path(o), serde_json::to_value(o)?);
            }
        )*};
    }
    register!(domains, flavors, images, networks, projects);

    let client = read_only_client(cluster, Arc::new(objects), &namespace, journal.clone());
    let config = Config {
        cluster_id: args.cluster_id.clone(),
        allowed_roles: args
            .allowed_roles
            .iter()
            .map(|r| r.trim().to_string())
            .filter(|r| !r.is_empty())
            .collect(),
        allow_project_adoption: args.allow_project_adoption,
        adopt_legacy: args.adopt_legacy,
        federation_namespaces: args
            .federation_namespaces
            .iter()
            .cloned()
            .collect::<BTreeSet<_>>(),
        ..Config::default()
    };
    let ctx = Context::new(client, cloud, config, Default::default(), None);

    // Dependencies first (a project's domain), so later passes see what earlier ones would
    // create; a deletion goes the other way.
    let mut plan = Plan::default();
    macro_rules! plan_all {
        ($($v:ident),*) => {$(
            for (o, in_cluster) in &$v {
                plan.resources
                    .push(plan_object(&ctx, &journal, o, *in_cluster, args.delete).await);
            }
        )*};
    }
    if args.delete {
        plan_all!(projects, networks, images, flavors, domains);
    } else {
        plan_all!(domains, flavors, images, networks, projects);
    }

    match args.output {
        Output::Text => print!("{}", render_text(&plan)),
        Output::Json => println!(
            "{}",
            serde_json::to_string_pretty(&to_json(&plan)).context("rendering the plan")?
        ),
    }
    Ok(plan.exit_code())
}

#[cfg(test)]
mod tests {
    use super::*;
    use controllers::plan::Outcome;
    use k8s_openapi::api::core::v1::Secret;
    use openstack::fake::FakeCloud;

    fn project() -> OpenstackProject {
        serde_json::from_value(json!({
            "apiVersion": "sunet.se/v1alpha1",
            "kind": "OpenstackProject",
            "metadata": {"name": "team", "namespace": "ns", "uid": "0123abcd-uid"},
            "spec": {
                "name": "team.example.com",
                "domain": "Default",
                "applicationCredential": {"lifetimeSeconds": 86400, "leadTimeSeconds": 3600},
            },
        }))
        .expect("a project")
    }

    fn context(client: Client, cloud: Cloud) -> Context {
        Context::new(client, cloud, Config::default(), Default::default(), None)
    }

    fn summary(changes: &[openstack::dry_run::Intent]) -> Vec<(Op, &str, &str)> {
        changes.iter().map(|i| (i.op, i.service, i.kind)).collect()
    }

    #[tokio::test]
    async fn a_tenant_credential_is_planned_with_its_secret_and_nothing_is_written() {
        let fake = FakeCloud::new();
        fake.enable_tenant_users();
        let obj = project();
        let (cloud, journal) = openstack::dry_run::dry_run(fake.cloud());
        let client = read_only_client(None, Arc::default(), "ns", journal.clone());
        let ctx = context(client.clone(), cloud);
        fake.reset_calls();
        let plan = plan_object(&ctx, &journal, &obj, false, false).await;
        assert_eq!(plan.outcome, Outcome::Done, "{plan:#?}");
        let got = summary(&plan.changes);
        // The project group's role and the user's, granted twice by the pass (at the
        // user's creation and before its credential), listed once.
        let user_role = plan
            .changes
            .iter()
            .filter(|i| i.kind == "role assignment")
            .filter(|i| {
                i.label
                    .contains("for user team.example.com-tenant-credentials")
            })
            .count();
        assert_eq!(user_role, 1, "{:#?}", plan.changes);
        for want in [
            (Op::Create, "identity", "project"),
            (Op::Create, "identity", "user"),
            (Op::Update, "identity", "user password"),
            (Op::Create, "identity", "application credential"),
            (Op::Create, "kubernetes", "Secret"),
        ] {
            assert_eq!(
                got.iter().filter(|g| **g == want).count(),
                1,
                "{want:?} once in {got:?}"
            );
        }
        let secret = plan
            .changes
            .iter()
            .find(|i| i.kind == "Secret")
            .expect("the Secret");
        assert_eq!(secret.label, "ns/team-clouds");
        assert_eq!(
            secret.changes,
            [FieldChange {
                field: "data.clouds.yaml".into(),
                old: None,
                new: Some(json!("(not shown)")),
            }]
        );
        assert_eq!(fake.writes(), 0, "{:?}", fake.write_calls());
        // The plan's own later reads see the Secret it would write; its credential is a
        // placeholder.
        let s: Secret = Api::namespaced(client, "ns")
            .get("team-clouds")
            .await
            .unwrap();
        let yaml = s
            .data
            .as_ref()
            .and_then(|d| d.get("clouds.yaml"))
            .map(|b| String::from_utf8_lossy(&b.0).to_string())
            .unwrap_or_default();
        assert!(yaml.contains("known-after-apply-"), "{yaml}");
        let text = controllers::plan::render_text(&Plan {
            resources: vec![plan],
        });
        assert!(text.contains("  + Secret ns/team-clouds\n"), "{text}");
        assert!(text.contains("application credential(s)"), "{text}");
    }

    #[tokio::test]
    async fn a_delivered_tenant_credential_plans_nothing_until_it_is_due() {
        let fake = FakeCloud::new();
        fake.enable_tenant_users();
        let mut obj = project();
        // A real pass on the fake, with a client that keeps its writes: the "cluster".
        let cluster = read_only_client(None, Arc::default(), "ns", Arc::default());
        let mut status = Default::default();
        let real = context(cluster.clone(), fake.cloud());
        controllers::framework::Managed::apply(&obj, &real, &mut status)
            .await
            .expect("a real pass");
        obj.status = Some(status);
        let secret: Secret = Api::namespaced(cluster.clone(), "ns")
            .get("team-clouds")
            .await
            .unwrap();

        fake.reset_calls();
        let (cloud, journal) = openstack::dry_run::dry_run(fake.cloud());
        let client = read_only_client(Some(cluster.clone()), Arc::default(), "ns", journal.clone());
        let plan = plan_object(&context(client, cloud), &journal, &obj, true, false).await;
        assert_eq!(plan.outcome, Outcome::Done, "{plan:#?}");
        assert_eq!(summary(&plan.changes), [], "{plan:#?}");
        assert_eq!(fake.writes(), 0, "{:?}", fake.write_calls());

        // Due (a lead time beyond the current credential's expiry): the next credential and
        // the Secret's switch to it; the user keeps its role, so no grant is listed.
        let mut due = obj.clone();
        if let Some(c) = due.spec.application_credential.as_mut() {
            c.lifetime_seconds = 200_000;
            c.lead_time_seconds = 199_000;
        }
        let (cloud, journal) = openstack::dry_run::dry_run(fake.cloud());
        let client = read_only_client(Some(cluster.clone()), Arc::default(), "ns", journal.clone());
        let plan = plan_object(&context(client, cloud), &journal, &due, true, false).await;
        assert_eq!(plan.outcome, Outcome::Done, "{plan:#?}");
        assert_eq!(
            summary(&plan.changes),
            [
                (Op::Update, "identity", "user password"),
                (Op::Create, "identity", "application credential"),
                (Op::Update, "kubernetes", "Secret"),
            ],
            "{plan:#?}"
        );
        let fields: Vec<&str> = plan.changes[2]
            .changes
            .iter()
            .map(|c| c.field.as_str())
            .collect();
        assert!(
            fields.contains(&"data.clouds.yaml")
                && fields.contains(&"annotations.openstack-operator.sunet.se/rotation-previous"),
            "{fields:?}"
        );
        assert_eq!(fake.writes(), 0, "{:?}", fake.write_calls());

        // Deleting it would revoke the credential and the user (the Secret goes with its
        // owner), and delete nothing else of Kubernetes.
        let (cloud, journal) = openstack::dry_run::dry_run(fake.cloud());
        let client = read_only_client(Some(cluster.clone()), Arc::default(), "ns", journal.clone());
        let plan = plan_object(&context(client, cloud), &journal, &obj, true, true).await;
        assert_eq!(plan.outcome, Outcome::Done, "{plan:#?}");
        let got = summary(&plan.changes);
        for want in [
            (Op::Delete, "identity", "application credential"),
            (Op::Delete, "identity", "user"),
            (Op::Delete, "identity", "project"),
        ] {
            assert!(got.contains(&want), "{want:?} in {got:?}");
        }
        assert!(!got.iter().any(|g| g.1 == "kubernetes"), "{got:?}");
        assert_eq!(fake.writes(), 0, "{:?}", fake.write_calls());
        // The "cluster" still holds the Secret as the real pass wrote it.
        let after: Secret = Api::namespaced(cluster, "ns")
            .get("team-clouds")
            .await
            .unwrap();
        assert_eq!(after.data, secret.data);
    }

    #[tokio::test]
    async fn writes_are_remembered_for_later_reads_and_only_secrets_are_listed() {
        let journal: Arc<Journal> = Arc::default();
        let objects = HashMap::from([(
            "/api/v1/namespaces/ns/configmaps/fed".to_string(),
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": "fed", "namespace": "ns"}, "data": {"a": "1"}}),
        )]);
        let client = read_only_client(None, Arc::new(objects), "ns", journal.clone());
        let secrets: Api<Secret> = Api::namespaced(client.clone(), "ns");
        assert!(secrets.get_opt("s").await.unwrap().is_none());
        let mut s: Secret = serde_json::from_value(json!({
            "metadata": {"name": "s", "namespace": "ns"},
            "stringData": {"k": "value-1"},
        }))
        .unwrap();
        secrets
            .create(&kube::api::PostParams::default(), &s)
            .await
            .unwrap();
        assert!(secrets.get_opt("s").await.unwrap().is_some());
        s.string_data = Some([("k".to_string(), "value-2".to_string())].into());
        secrets
            .replace("s", &kube::api::PostParams::default(), &s)
            .await
            .unwrap();
        secrets
            .patch(
                "s",
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(json!({"metadata": {"annotations": {"a": "b"}}})),
            )
            .await
            .unwrap();
        let read = secrets.get("s").await.unwrap();
        assert_eq!(
            read.metadata.annotations,
            Some([("a".to_string(), "b".to_string())].into())
        );
        secrets
            .delete("s", &kube::api::DeleteParams::default())
            .await
            .unwrap();
        assert!(secrets.get_opt("s").await.unwrap().is_none());
        // A ConfigMap's write is remembered, not listed.
        let cms: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(client, "ns");
        cms.patch(
            "fed",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"data": {"a": null, "b": "2"}})),
        )
        .await
        .unwrap();
        let cm = cms.get("fed").await.unwrap();
        assert_eq!(cm.data, Some([("b".to_string(), "2".to_string())].into()));

        let intents = journal.take();
        let got: Vec<(Op, &str, &str)> = intents
            .iter()
            .map(|i| (i.op, i.kind, i.label.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                (Op::Create, "Secret", "ns/s"),
                (Op::Update, "Secret", "ns/s"),
                (Op::Update, "Secret", "ns/s"),
                (Op::Delete, "Secret", "ns/s"),
            ]
        );
        let all = serde_json::to_string(&intents).unwrap();
        assert!(!all.contains("value-"), "no Secret data in the plan: {all}");
        assert_eq!(intents[2].changes[0].field, "annotations.a");
    }
}
