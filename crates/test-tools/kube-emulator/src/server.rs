//! HTTP layer: routing of Kubernetes API paths, request decoding, response
//! encoding (JSON, `Table`, `PartialObjectMetadata`), admin endpoints and the
//! fault-injection middleware.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State as AxState};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::{Value, json};

use crate::discovery;
use crate::error::{ApiError, ApiResult, Cause};
use crate::faults::{FaultConfig, FaultRequest};
use crate::ops::{DeleteOpts, FieldValidation, State, Sub, WriteOpts, WriteOutcome};
use crate::patch::PatchKind;
use crate::resources::{Registry, ResourceInfo, StorageKey};
use crate::selectors::{FieldSelector, LabelSelector};
use crate::util::meta;
use crate::watch;
use crate::webhooks;

/// Shared server state.
pub struct App {
    /// The cluster state; never held across an `.await`.
    pub state: Mutex<State>,
    /// Fault injection configuration.
    pub faults: Mutex<FaultConfig>,
    /// What the review APIs answer (see [`crate::review`]).
    pub auth: Mutex<crate::review::AuthConfig>,
    /// `host:port` the server is reachable at (for `/api`).
    pub server_address: String,
}

impl App {
    /// Lock the cluster state (a panic while locked does not make it unusable for tests).
    pub fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Lock the fault configuration.
    pub fn lock_faults(&self) -> MutexGuard<'_, FaultConfig> {
        self.faults.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Apply a fault request (shared by the HTTP admin endpoint and the library handle).
    pub fn apply_faults(&self, req: &FaultRequest) -> Value {
        {
            let mut f = self.lock_faults();
            if req.reset {
                *f = FaultConfig::default();
            }
            if let Some(ms) = req.latency_ms {
                f.latency_ms = ms;
            }
            if let Some(rule) = &req.fail {
                f.rules.push(rule.clone());
            }
        }
        let mut dropped = 0;
        {
            let mut st = self.lock();
            if req.compact_history {
                st.store.compact();
            }
            if req.drop_watches {
                dropped = st.store.drop_watches();
            }
        }
        let cfg = self.lock_faults().clone();
        json!({"droppedWatches": dropped, "config": cfg})
    }
}

/// Build the router for an app.
pub fn router(app: Arc<App>) -> Router {
    Router::new()
        .route("/_emulator/healthz", get(|| async { "ok" }))
        .route(
            "/_emulator/faults",
            get(get_faults).post(post_faults).delete(delete_faults),
        )
        .route("/_emulator/state", get(dump_state))
        .route("/healthz", get(|| async { "ok" }))
        .route("/livez", get(|| async { "ok" }))
        .route("/readyz", get(|| async { "ok" }))
        .route(
            "/version",
            get(|| async { json_response(StatusCode::OK, &discovery::version()) }),
        )
        .route(
            "/apis/authentication.k8s.io/v1/tokenreviews",
            axum::routing::post(token_review),
        )
        .route(
            "/apis/authorization.k8s.io/v1/subjectaccessreviews",
            axum::routing::post(subject_access_review),
        )
        .route(
            "/api/v1/namespaces/{ns}/serviceaccounts/{name}/token",
            axum::routing::post(token_request),
        )
        .route("/openapi/v3", get(openapi_root))
        .route("/openapi/v3/{*gv}", get(openapi_gv))
        .fallback(api_handler)
        .layer(middleware::from_fn_with_state(app.clone(), fault_layer))
        .with_state(app)
}

async fn review(
    app: &App,
    body: &[u8],
    f: fn(&crate::review::AuthConfig, Value) -> ApiResult<Value>,
) -> Response {
    let r = decode_body("application/json", body).and_then(|v| {
        let cfg = app.auth.lock().unwrap_or_else(|e| e.into_inner()).clone();
        f(&cfg, v)
    });
    match r {
        Ok(v) => json_response(StatusCode::CREATED, &v),
        Err(e) => e.into_response(),
    }
}

async fn token_review(AxState(app): AxState<Arc<App>>, body: Bytes) -> Response {
    review(&app, &body, crate::review::token_review).await
}

async fn token_request(
    AxState(app): AxState<Arc<App>>,
    axum::extract::Path((ns, name)): axum::extract::Path<(String, String)>,
    body: Bytes,
) -> Response {
    let r = decode_body("application/json", &body)
        .and_then(|v| crate::token_request::token_request(&app, &ns, &name, v));
    match r {
        Ok(v) => json_response(StatusCode::CREATED, &v),
        Err(e) => e.into_response(),
    }
}

async fn subject_access_review(AxState(app): AxState<Arc<App>>, body: Bytes) -> Response {
    review(&app, &body, crate::review::subject_access_review).await
}

async fn get_faults(AxState(app): AxState<Arc<App>>) -> Response {
    let cfg = app.lock_faults().clone();
    json_response(StatusCode::OK, &json!(cfg))
}

async fn post_faults(AxState(app): AxState<Arc<App>>, body: Bytes) -> Response {
    let req: FaultRequest = if body.is_empty() {
        FaultRequest::default()
    } else {
        match serde_json::from_slice(&body) {
            Ok(r) => r,
            Err(e) => {
                return ApiError::bad_request(format!("invalid fault request: {e}"))
                    .into_response();
            }
        }
    };
    json_response(StatusCode::OK, &app.apply_faults(&req))
}

async fn delete_faults(AxState(app): AxState<Arc<App>>) -> Response {
    json_response(
        StatusCode::OK,
        &app.apply_faults(&FaultRequest {
            reset: true,
            ..FaultRequest::default()
        }),
    )
}

async fn openapi_root(AxState(app): AxState<Arc<App>>) -> Response {
    let doc = discovery::openapi_v3_root(&app.lock().registry);
    json_response(StatusCode::OK, &doc)
}

async fn openapi_gv(AxState(app): AxState<Arc<App>>, uri: Uri) -> Response {
    let rest = uri.path().trim_start_matches("/openapi/v3/");
    let segs: Vec<&str> = rest.split('/').collect();
    let (group, version) = match segs.as_slice() {
        ["api", v] => ("", *v),
        ["apis", g, v] => (*g, *v),
        _ => return ApiError::path_not_found().into_response(),
    };
    match discovery::openapi_v3_gv(&app.lock().registry, group, version) {
        Some(doc) => json_response(StatusCode::OK, &doc),
        None => ApiError::path_not_found().into_response(),
    }
}

async fn dump_state(AxState(app): AxState<Arc<App>>) -> Response {
    let snap = app.lock().store.snapshot();
    json_response(StatusCode::OK, &snap)
}

/// JSON response with the given status.
pub fn json_response(code: StatusCode, v: &Value) -> Response {
    let mut r = (code, v.to_string()).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

/// The Kubernetes verb of a request, for fault matching and logs.
fn k8s_verb(method: &Method, uri: &Uri, named: bool) -> &'static str {
    let q = uri.query().unwrap_or("");
    let watching = q.split('&').any(|kv| kv == "watch=true" || kv == "watch=1");
    match *method {
        Method::GET if watching => "watch",
        Method::GET if named => "get",
        Method::GET => "list",
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE if named => "delete",
        Method::DELETE => "deletecollection",
        _ => "unknown",
    }
}

async fn fault_layer(AxState(app): AxState<Arc<App>>, req: Request, next: Next) -> Response {
    let path = req.uri().path().to_string();
    if path.starts_with("/_emulator") {
        return next.run(req).await;
    }
    let named = {
        let st = app.lock();
        matches!(
            route(&st.registry, &path),
            Ok(Route::Resource { name: Some(_), .. })
        )
    };
    let verb = k8s_verb(req.method(), req.uri(), named);
    let pq = req
        .uri()
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or(path.clone());
    let (latency, failure) = {
        let mut f = app.lock_faults();
        let failure = f.take_failure(req.method().as_str(), verb, &pq);
        (f.latency(), failure)
    };
    if !latency.is_zero() {
        tokio::time::sleep(latency).await;
    }
    if let Some((status, retry)) = failure {
        tracing::debug!(%pq, verb, status, "injected failure");
        let err = if status == 429 {
            ApiError::too_many_requests(retry)
        } else {
            let mut e = ApiError::internal("injected failure (kube-emulator fault hook)");
            e.code = status;
            e
        };
        return err.into_response();
    }
    next.run(req).await
}

/// A parsed API path.
#[derive(Debug)]
pub enum Route {
    /// `/api`.
    CoreRoot,
    /// `/apis`.
    GroupsRoot,
    /// `/apis/{group}`.
    Group(String),
    /// `/api/v1` or `/apis/{group}/{version}`.
    ResourceList(String, String),
    /// A resource path.
    Resource {
        /// The resource.
        info: Box<ResourceInfo>,
        /// Namespace from the path ("" for cluster-scoped or all-namespace requests).
        ns: String,
        /// Whether the path contained `namespaces/{ns}`.
        in_namespace: bool,
        /// Object name.
        name: Option<String>,
        /// Subresource.
        sub: Option<String>,
    },
}

/// Parse a request path against the registry.
pub fn route(reg: &Registry, path: &str) -> ApiResult<Route> {
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let (group, version, rest): (&str, &str, &[&str]) = match segs.as_slice() {
        ["api"] => return Ok(Route::CoreRoot),
        ["apis"] => return Ok(Route::GroupsRoot),
        ["apis", g] => return Ok(Route::Group((*g).to_string())),
        ["api", v, rest @ ..] => ("", v, rest),
        ["apis", g, v, rest @ ..] => (g, v, rest),
        _ => return Err(ApiError::path_not_found()),
    };
    if rest.is_empty() {
        return Ok(Route::ResourceList(group.to_string(), version.to_string()));
    }
    let (res, ns, in_namespace, tail): (&str, &str, bool, &[&str]) = match rest {
        ["namespaces", ns, res, tail @ ..]
            if !(group.is_empty()
                && (*res == "status" || *res == "finalize")
                && tail.is_empty()) =>
        {
            (res, ns, true, tail)
        }
        [res, tail @ ..] => (res, "", false, tail),
        [] => return Err(ApiError::path_not_found()),
    };
    if tail.len() > 2 {
        return Err(ApiError::path_not_found());
    }
    let info = reg
        .find(group, version, res)
        .ok_or_else(ApiError::path_not_found)?
        .clone();
    let name = tail.first().map(|s| (*s).to_string());
    let sub = tail.get(1).map(|s| (*s).to_string());
    if in_namespace && !info.namespaced {
        return Err(ApiError::path_not_found());
    }
    if !in_namespace && info.namespaced && name.is_some() {
        return Err(ApiError::path_not_found());
    }
    if let Some(s) = &sub
        && !(s == "status" && info.status_subresource)
        && !(s == "approval" && info.flavor == crate::resources::Flavor::Csr)
    {
        return Err(ApiError::path_not_found());
    }
    Ok(Route::Resource {
        info: Box::new(info),
        ns: ns.to_string(),
        in_namespace,
        name,
        sub,
    })
}

/// How the client wants objects rendered (from the Accept header).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Render {
    /// Full objects.
    Full,
    /// `meta.k8s.io/v1 Table` (kubectl get).
    Table,
    /// `PartialObjectMetadata` (kube-rs metadata API).
    Metadata,
}

fn render_mode(headers: &HeaderMap) -> ApiResult<Render> {
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if accept.contains("as=Table") {
        return Ok(Render::Table);
    }
    if accept.contains("as=PartialObjectMetadata") {
        return Ok(Render::Metadata);
    }
    if !accept.is_empty()
        && accept.contains("protobuf")
        && !accept.contains("json")
        && !accept.contains("*/*")
        && !accept.contains("yaml")
    {
        return Err(ApiError::not_acceptable(
            "only the following media types are accepted: application/json",
        ));
    }
    Ok(Render::Full)
}

/// Wrap an object's metadata as `PartialObjectMetadata`.
pub fn partial_metadata(obj: &Value) -> Value {
    json!({
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": obj.get("metadata").cloned().unwrap_or(json!({})),
    })
}

fn render_object(
    info: &ResourceInfo,
    obj: Value,
    mode: Render,
    params: &Params,
) -> ApiResult<Value> {
    Ok(match mode {
        Render::Full => obj,
        Render::Metadata => partial_metadata(&obj),
        Render::Table => crate::table::object_table(info, &obj, include_object(params)?),
    })
}

fn include_object(params: &Params) -> ApiResult<crate::table::IncludeObject> {
    crate::table::IncludeObject::parse(params.get("includeObject")).map_err(ApiError::bad_request)
}

/// Query parameters of API requests.
#[derive(Debug, Default)]
pub struct Params(HashMap<String, String>);

impl Params {
    fn parse(uri: &Uri) -> ApiResult<Self> {
        let map = axum::extract::Query::<HashMap<String, String>>::try_from_uri(uri)
            .map_err(|e| ApiError::bad_request(format!("invalid query: {e}")))?;
        Ok(Params(map.0))
    }

    /// A parameter, if non-empty.
    pub fn get(&self, k: &str) -> Option<&str> {
        self.0.get(k).map(String::as_str).filter(|s| !s.is_empty())
    }

    /// A boolean parameter (`true`/`1`).
    pub fn flag(&self, k: &str) -> bool {
        matches!(self.get(k), Some("true") | Some("1"))
    }
}

fn content_type(headers: &HeaderMap) -> String {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string()
}

/// Decode a JSON (or YAML) request body.
fn decode_body(ct: &str, body: &[u8]) -> ApiResult<Value> {
    let base = ct.split(';').next().unwrap_or("").trim();
    match base {
        "" | "application/json" | "*/*" => serde_json::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("error decoding JSON request body: {e}"))),
        "application/yaml" | "application/x-yaml" | "text/yaml" => decode_yaml(body),
        "application/vnd.kubernetes.protobuf" => crate::protobuf::decode(body),
        other => Err(ApiError::unsupported_media_type(other)),
    }
}

/// YAML bodies (server-side apply); JSON is tried first since it is the common case.
fn decode_yaml(body: &[u8]) -> ApiResult<Value> {
    if let Ok(v) = serde_json::from_slice::<Value>(body) {
        return Ok(v);
    }
    serde_saphyr::from_slice::<Value>(body)
        .map_err(|e| ApiError::bad_request(format!("error decoding YAML request body: {e}")))
}

/// 422 for invalid `{Create,Update,Patch}Options`, as the real server words it.
fn invalid_options(options_kind: &str, causes: Vec<Cause>) -> ApiError {
    ApiError::invalid("meta.k8s.io", options_kind, "", causes)
}

fn write_opts(params: &Params, headers: &HeaderMap, options_kind: &str) -> ApiResult<WriteOpts> {
    if let Some(fm) = params.get("fieldManager")
        && fm.len() > 128
    {
        return Err(invalid_options(
            options_kind,
            vec![Cause::new(
                "FieldValueTooLong",
                "fieldManager",
                "Too long: may not be more than 128 bytes",
            )],
        ));
    }
    let dry_run = match params.get("dryRun") {
        None => false,
        Some("All") => true,
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "unsupported dryRun value {other:?}: supported values: \"All\""
            )));
        }
    };
    let field_validation = match params.get("fieldValidation") {
        None | Some("Warn") => FieldValidation::Warn,
        Some("Ignore") => FieldValidation::Ignore,
        Some("Strict") => FieldValidation::Strict,
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "fieldValidation must be one of \"Ignore\", \"Warn\" or \"Strict\", got {other:?}"
            )));
        }
    };
    // without an explicit manager the real server derives one from the User-Agent
    let field_manager = params
        .get("fieldManager")
        .map(str::to_string)
        .unwrap_or_else(|| {
            headers
                .get(header::USER_AGENT)
                .and_then(|v| v.to_str().ok())
                .map(|ua| ua.split('/').next().unwrap_or("").trim().to_string())
                .filter(|s| !s.is_empty())
                .unwrap_or_else(|| "unknown".into())
        });
    Ok(WriteOpts {
        dry_run,
        field_manager,
        field_validation,
        force: params.flag("force"),
        user: None,
    })
}

/// The user a bearer token stands for in the review configuration (the
/// emulator authenticates nobody; unknown or absent tokens are its admin).
fn requester(app: &App, headers: &HeaderMap) -> Option<crate::review::ReviewUser> {
    let token = headers
        .get(header::AUTHORIZATION)?
        .to_str()
        .ok()?
        .strip_prefix("Bearer ")?;
    let cfg = app.auth.lock().unwrap_or_else(|e| e.into_inner());
    cfg.tokens.get(token.trim()).cloned()
}

fn delete_opts(params: &Params, body: &[u8]) -> ApiResult<DeleteOpts> {
    let mut o = DeleteOpts::default();
    if !body.is_empty() {
        let v: Value = serde_json::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("error decoding DeleteOptions: {e}")))?;
        o.propagation = v
            .get("propagationPolicy")
            .and_then(Value::as_str)
            .map(str::to_string);
        o.orphan_dependents = v.get("orphanDependents").and_then(Value::as_bool);
        o.precondition_uid = v
            .pointer("/preconditions/uid")
            .and_then(Value::as_str)
            .map(str::to_string);
        o.precondition_rv = v
            .pointer("/preconditions/resourceVersion")
            .and_then(Value::as_str)
            .map(str::to_string);
        o.dry_run = v
            .get("dryRun")
            .and_then(Value::as_array)
            .is_some_and(|a| a.iter().any(|x| x == "All"));
        o.grace_period_seconds = v.get("gracePeriodSeconds").and_then(Value::as_i64);
    }
    if let Some(g) = params.get("gracePeriodSeconds") {
        o.grace_period_seconds = Some(
            g.parse()
                .map_err(|_| ApiError::bad_request(format!("invalid gracePeriodSeconds {g:?}")))?,
        );
    }
    if let Some(p) = params.get("propagationPolicy") {
        o.propagation = Some(p.to_string());
    }
    if let Some(b) = params.get("orphanDependents") {
        o.orphan_dependents = Some(b == "true");
    }
    if params.get("dryRun") == Some("All") {
        o.dry_run = true;
    }
    Ok(o)
}

fn with_warnings(mut r: Response, warnings: &[String]) -> Response {
    for w in warnings {
        let escaped = w.replace('"', "\\\"");
        if let Ok(v) = HeaderValue::from_str(&format!("299 - \"{escaped}\"")) {
            r.headers_mut().append(header::WARNING, v);
        }
    }
    r
}

async fn api_handler(
    AxState(app): AxState<Arc<App>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    match handle(app, method, uri, headers, body).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

async fn handle(
    app: Arc<App>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult<Response> {
    let params = Params::parse(&uri)?;
    let route = {
        let st = app.lock();
        route(&st.registry, uri.path())?
    };
    let (info, ns, in_namespace, name, sub) = match route {
        Route::CoreRoot => {
            return Ok(json_response(
                StatusCode::OK,
                &discovery::core_versions(&app.server_address),
            ));
        }
        Route::GroupsRoot => {
            let st = app.lock();
            return Ok(json_response(
                StatusCode::OK,
                &discovery::group_list(&st.registry),
            ));
        }
        Route::Group(g) => {
            let st = app.lock();
            let doc = discovery::group(&st.registry, &g).ok_or_else(ApiError::path_not_found)?;
            return Ok(json_response(StatusCode::OK, &doc));
        }
        Route::ResourceList(g, v) => {
            let st = app.lock();
            let doc = discovery::resource_list(&st.registry, &g, &v)
                .ok_or_else(ApiError::path_not_found)?;
            return Ok(json_response(StatusCode::OK, &doc));
        }
        Route::Resource {
            info,
            ns,
            in_namespace,
            name,
            sub,
        } => (*info, ns, in_namespace, name, sub),
    };
    let sub = match sub.as_deref() {
        Some("status") => Sub::Status,
        Some("approval") => Sub::Approval,
        _ => Sub::Main,
    };
    let mode = render_mode(&headers)?;
    match (method, name) {
        (Method::GET, None) => {
            let labels = LabelSelector::parse(params.get("labelSelector").unwrap_or(""))?;
            let fields = FieldSelector::parse(
                params.get("fieldSelector").unwrap_or(""),
                &info.field_selectors,
            )?;
            let ns_filter = in_namespace.then_some(ns.as_str());
            if params.flag("watch") {
                return watch::serve(
                    app,
                    info,
                    ns_filter.map(str::to_string),
                    labels,
                    fields,
                    &params,
                    mode,
                );
            }
            let (items, rv) = app.lock().list(&info, ns_filter, &labels, &fields);
            let doc = match mode {
                Render::Table => {
                    crate::table::table(&info, &items, &rv.to_string(), include_object(&params)?)
                }
                Render::Metadata => json!({
                    "kind": "PartialObjectMetadataList",
                    "apiVersion": "meta.k8s.io/v1",
                    "metadata": {"resourceVersion": rv.to_string()},
                    "items": items.iter().map(partial_metadata).collect::<Vec<_>>(),
                }),
                Render::Full => json!({
                    "kind": info.list_kind,
                    "apiVersion": info.api_version(),
                    "metadata": {"resourceVersion": rv.to_string()},
                    "items": items,
                }),
            };
            Ok(json_response(StatusCode::OK, &doc))
        }
        (Method::GET, Some(name)) => {
            let st = app.lock();
            let obj = st.get(&info, &ns, &name)?;
            Ok(json_response(
                StatusCode::OK,
                &render_object(&info, obj, mode, &params)?,
            ))
        }
        (Method::POST, None) => {
            let mut opts = write_opts(&params, &headers, "CreateOptions")?;
            opts.user = requester(&app, &headers);
            let obj = decode_body(&content_type(&headers), &body)?;
            if !in_namespace && info.namespaced {
                return Err(ApiError::path_not_found());
            }
            let out = with_webhooks(&app, &info, &ns, None, Sub::Main, &opts, |st, o| {
                st.create(&info, &ns, obj.clone(), o)
            })
            .await?;
            Ok(with_warnings(
                json_response(
                    StatusCode::CREATED,
                    &render_object(&info, out.object, mode, &params)?,
                ),
                &out.warnings,
            ))
        }
        (Method::PUT, Some(name)) => {
            let opts = write_opts(&params, &headers, "UpdateOptions")?;
            let obj = decode_body(&content_type(&headers), &body)?;
            let out = with_webhooks(&app, &info, &ns, Some(&name), sub, &opts, |st, o| {
                st.update(&info, &ns, &name, sub, obj.clone(), o)
            })
            .await?;
            let code = if out.created {
                StatusCode::CREATED
            } else {
                StatusCode::OK
            };
            Ok(with_warnings(
                json_response(code, &render_object(&info, out.object, mode, &params)?),
                &out.warnings,
            ))
        }
        (Method::PATCH, Some(name)) => {
            let ct = content_type(&headers);
            let kind = PatchKind::from_content_type(&ct)
                .ok_or_else(|| ApiError::unsupported_media_type(&ct))?;
            let patch = if kind == PatchKind::Apply {
                decode_yaml(&body)?
            } else {
                serde_json::from_slice(&body)
                    .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))?
            };
            let mut opts = write_opts(&params, &headers, "PatchOptions")?;
            if kind == PatchKind::Apply && params.get("fieldManager").is_none() {
                opts.field_manager.clear();
            }
            if kind != PatchKind::Apply && params.get("force").is_some() {
                return Err(invalid_options(
                    "PatchOptions",
                    vec![Cause::new(
                        "FieldValueForbidden",
                        "force",
                        "Forbidden: may not be specified for non-apply patch",
                    )],
                ));
            }
            let out = with_webhooks(&app, &info, &ns, Some(&name), sub, &opts, |st, o| {
                st.patch(&info, &ns, &name, sub, kind, patch.clone(), o)
            })
            .await?;
            let code = if out.created {
                StatusCode::CREATED
            } else {
                StatusCode::OK
            };
            Ok(with_warnings(
                json_response(code, &render_object(&info, out.object, mode, &params)?),
                &out.warnings,
            ))
        }
        (Method::DELETE, Some(name)) => {
            if sub != Sub::Main {
                return Err(ApiError::method_not_allowed(
                    "delete is not supported on the status subresource",
                ));
            }
            let opts = delete_opts(&params, &body)?;
            let obj = app.lock().delete(&info, &ns, &name, &opts)?;
            Ok(json_response(StatusCode::OK, &obj))
        }
        (Method::DELETE, None) => {
            let opts = delete_opts(&params, &body)?;
            let labels = LabelSelector::parse(params.get("labelSelector").unwrap_or(""))?;
            let fields = FieldSelector::parse(
                params.get("fieldSelector").unwrap_or(""),
                &info.field_selectors,
            )?;
            let ns_filter = in_namespace.then_some(ns.as_str());
            let mut st = app.lock();
            let (items, _) = st.list(&info, ns_filter, &labels, &fields);
            let mut deleted = Vec::new();
            for it in items {
                let n = crate::util::meta_str(&it, "name").to_string();
                let ons = crate::util::meta_str(&it, "namespace").to_string();
                match st.delete(&info, &ons, &n, &opts) {
                    Ok(o) => deleted.push(o),
                    Err(e) if e.code == 404 => {}
                    Err(e) => return Err(e),
                }
            }
            let rv = st.store.rv();
            Ok(json_response(
                StatusCode::OK,
                &json!({
                    "kind": info.list_kind,
                    "apiVersion": info.api_version(),
                    "metadata": {"resourceVersion": rv.to_string()},
                    "items": deleted,
                }),
            ))
        }
        (m, _) => Err(ApiError::method_not_allowed(format!(
            "the server does not allow this method ({m}) on the requested resource"
        ))),
    }
}

/// Runs a create, update or patch through the validating admission webhooks that match it
/// (see [`crate::webhooks`]): a dry run under the lock gives the object as it would be stored
/// and whether it is a CREATE or an UPDATE, the webhooks are called without the lock, then the
/// write runs for real. Without a matching webhook the write runs once, as before.
#[allow(clippy::too_many_arguments)]
async fn with_webhooks<F>(
    app: &Arc<App>,
    info: &ResourceInfo,
    ns: &str,
    name: Option<&str>,
    sub: Sub,
    opts: &WriteOpts,
    write: F,
) -> ApiResult<WriteOutcome>
where
    F: Fn(&mut State, &WriteOpts) -> ApiResult<WriteOutcome>,
{
    let pending = {
        let mut st = app.lock();
        let configs: Vec<Value> = st
            .store
            .list(&webhooks::config_key(), None)
            .into_iter()
            .cloned()
            .collect();
        if configs.is_empty() {
            None
        } else {
            let old = name
                .and_then(|n| st.store.get(&info.storage, ns, n))
                .map(|o| info.from_stored(o));
            let mut dry = opts.clone();
            dry.dry_run = true;
            let preview = write(&mut st, &dry)?;
            let subresource = match sub {
                Sub::Main => "",
                Sub::Status => "status",
                Sub::Approval => "approval",
            };
            let namespace_labels = st
                .store
                .get(&StorageKey::new("", "namespaces"), "", ns)
                .and_then(|n| n.pointer("/metadata/labels"))
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default();
            let attrs = webhooks::Attributes {
                operation: if preview.created { "CREATE" } else { "UPDATE" },
                info: info.clone(),
                subresource: subresource.into(),
                namespace: ns.to_string(),
                name: crate::util::meta_str(&preview.object, "name").to_string(),
                object: preview.object,
                old_object: if preview.created { None } else { old },
                dry_run: opts.dry_run,
                namespace_labels,
            };
            let services: BTreeMap<String, String> = st
                .store
                .list(&StorageKey::new("", "services"), None)
                .into_iter()
                .filter_map(|svc| {
                    let ip = svc.pointer("/spec/clusterIP").and_then(Value::as_str)?;
                    Some((
                        format!(
                            "{}/{}",
                            crate::util::meta_str(svc, "namespace"),
                            crate::util::meta_str(svc, "name")
                        ),
                        ip.to_string(),
                    ))
                })
                .collect();
            let hooks = webhooks::matching(&configs, &services, &attrs);
            (!hooks.is_empty()).then_some((hooks, attrs))
        }
    };
    if let Some((hooks, attrs)) = pending {
        webhooks::admit(&hooks, &attrs).await?;
    }
    write(&mut app.lock(), opts)
}

/// Turn a raw request into a streaming response body (used by watch).
pub fn stream_response(body: Body) -> Response {
    let mut r = Response::new(body);
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r.headers_mut().insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache, private"),
    );
    r
}

/// Metadata field of a stored object, helper for watch filtering.
pub fn object_namespace(obj: &Value) -> &str {
    meta(obj)
        .and_then(|m| m.get("namespace"))
        .and_then(Value::as_str)
        .unwrap_or("")
}
