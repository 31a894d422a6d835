//! `openstack-operator plan -f FILE|DIR`: what applying manifests would do in OpenStack.
//!
//! The I/O around [`controllers::plan`]: read the manifests, the objects' current state from
//! the cluster (when one is reachable) and the cloud, run each object's own reconcile pass on
//! the dry-run port, print the plan. Nothing is written anywhere: OpenStack is reached through
//! [`openstack::dry_run`], Kubernetes through a client whose transport answers every
//! non-GET request itself (an Event, a mid-pass status save) and never forwards one.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

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

/// A Kubernetes client that reads (the manifests' objects first, then the cluster when there is
/// one) and never writes: a non-GET request is answered here (with the object it names, or its
/// own body) and not sent on. A pass publishes Events and may save its status mid-way; in a
/// plan both go nowhere.
fn read_only_client(
    cluster: Option<Client>,
    objects: Arc<HashMap<String, Value>>,
    namespace: &str,
) -> Client {
    let svc = tower::service_fn(move |req: http::Request<Body>| {
        let cluster = cluster.clone();
        let objects = objects.clone();
        async move {
            let path = req.uri().path().to_string();
            if req.method() == http::Method::GET {
                if let Some(v) = objects.get(&path) {
                    return Ok::<_, BoxError>(json_response(200, v));
                }
                return match cluster {
                    Some(c) => c.send(req).await.map_err(BoxError::from),
                    None => Ok(json_response(
                        404,
                        &json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                "reason": "NotFound", "code": 404,
                                "message": format!("{path}: not in the manifests (no cluster)")}),
                    )),
                };
            }
            let body = req.into_body().collect_bytes().await?;
            let answer = objects
                .get(path.trim_end_matches("/status"))
                .cloned()
                .or_else(|| serde_json::from_slice(&body).ok())
                .unwrap_or_else(|| json!({}));
            Ok(json_response(200, &answer))
        }
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

    let client = read_only_client(cluster, Arc::new(objects), &namespace);
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
