//! The shared client core: one authenticated `openstack_sdk` session plus the
//! rate limiter, retries, timeouts, request-id logging and metrics that every
//! adapter call goes through.
//!
//! Every call is a [`Request`] (which implements `openstack_sdk`'s
//! `RestEndpoint`, so the SDK builds the URL from the service catalog and
//! negotiates microversion headers) executed by [`Core::send`], the single
//! place where HTTP happens. Typed SDK endpoints are not used: we need the
//! raw status and body of every attempt to classify retries and to keep the
//! services' error text verbatim, and one uniform request type keeps the
//! adapters short.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Instant;

use backon::{BackoffBuilder, ExponentialBuilder};
use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use openstack_sdk::api::rest_endpoint::prepare_request;
use openstack_sdk::api::{ApiError, AsyncClient, BodyError, QueryParams, RestEndpoint};
use openstack_sdk::types::{ApiVersion, ServiceType};
use openstack_sdk::{AsyncOpenStack, RenewHandle, RestError};
use openstack_sdk_core::catalog::ServiceEndpoint;
use serde::de::DeserializeOwned;
use tracing::{debug, info, warn};

use super::config::{ClientOptions, CloudSelector, load_cloud_config};
use super::metrics::Metrics;
use super::ratelimit::RateLimiter;
use super::retry::{Attempt, error_for_status, extract_message, parse_retry_after, should_retry};
use crate::error::{Error, Result};

/// The OpenStack services the port talks to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Service {
    /// Keystone.
    Identity,
    /// Nova.
    Compute,
    /// Glance.
    Image,
    /// Neutron.
    Network,
    /// Cinder.
    BlockStorage,
    /// Zun (catalog type `container`).
    Container,
    /// Octavia (catalog type `load-balancer`).
    LoadBalancer,
}

impl Service {
    /// The `service` metric label (seed values).
    pub fn label(self) -> &'static str {
        match self {
            Self::Identity => "identity",
            Self::Compute => "compute",
            Self::Image => "image",
            Self::Network => "network",
            Self::BlockStorage => "block_storage",
            Self::Container => "container",
            Self::LoadBalancer => "load_balancer",
        }
    }

    fn sdk_type(self) -> ServiceType {
        match self {
            Self::Identity => ServiceType::Identity,
            Self::Compute => ServiceType::Compute,
            Self::Image => ServiceType::Image,
            Self::Network => ServiceType::Network,
            Self::BlockStorage => ServiceType::BlockStorage,
            // The SDK knows no Zun type; its catalog lookup takes the name.
            Self::Container => ServiceType::Other("container".into()),
            Self::LoadBalancer => ServiceType::LoadBalancer,
        }
    }
}

/// One API request. Paths are relative to the service's versioned endpoint
/// from the catalog (e.g. `projects`, `flavors/detail`, `networks`).
#[derive(Clone, Debug)]
pub struct Request {
    service: Service,
    operation: &'static str,
    method: Method,
    path: String,
    query: Vec<(String, String)>,
    body: Option<(&'static str, Vec<u8>)>,
    headers: HeaderMap,
    microversion: Option<ApiVersion>,
    idempotent: bool,
}

impl Request {
    /// A request; `operation` is the metric/log label (the port method name).
    pub fn new(
        service: Service,
        operation: &'static str,
        method: Method,
        path: impl Into<String>,
    ) -> Self {
        // POST creates or triggers something; a retry after a lost response
        // could do it twice, so only the other methods retry on ambiguity.
        let idempotent = method != Method::POST;
        Self {
            service,
            operation,
            method,
            path: path.into(),
            query: Vec::new(),
            body: None,
            headers: HeaderMap::new(),
            microversion: None,
            idempotent,
        }
    }

    /// GET shorthand.
    pub fn get(service: Service, operation: &'static str, path: impl Into<String>) -> Self {
        Self::new(service, operation, Method::GET, path)
    }

    /// POST shorthand.
    pub fn post(service: Service, operation: &'static str, path: impl Into<String>) -> Self {
        Self::new(service, operation, Method::POST, path)
    }

    /// PUT shorthand.
    pub fn put(service: Service, operation: &'static str, path: impl Into<String>) -> Self {
        Self::new(service, operation, Method::PUT, path)
    }

    /// PATCH shorthand.
    pub fn patch(service: Service, operation: &'static str, path: impl Into<String>) -> Self {
        Self::new(service, operation, Method::PATCH, path)
    }

    /// DELETE shorthand.
    pub fn delete(service: Service, operation: &'static str, path: impl Into<String>) -> Self {
        Self::new(service, operation, Method::DELETE, path)
    }

    /// Add a query parameter.
    pub fn query(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.query.push((key.into(), value.into()));
        self
    }

    /// Add a query parameter if `value` is `Some`.
    pub fn query_opt(self, key: impl Into<String>, value: Option<impl Into<String>>) -> Self {
        match value {
            Some(v) => self.query(key, v),
            None => self,
        }
    }

    /// Set a JSON body.
    pub fn json(mut self, body: &impl serde::Serialize) -> Result<Self> {
        let bytes = serde_json::to_vec(body).map_err(|e| {
            Error::unexpected(format!(
                "{} {}: cannot encode request body: {e}",
                self.service.label(),
                self.operation
            ))
        })?;
        self.body = Some(("application/json", bytes));
        Ok(self)
    }

    /// Set a body with an explicit content type (e.g. Glance's JSON patch).
    pub fn body_with_type(mut self, content_type: &'static str, body: Vec<u8>) -> Self {
        self.body = Some((content_type, body));
        self
    }

    /// Add a request header.
    pub fn header(mut self, name: &'static str, value: &str) -> Result<Self> {
        let v = HeaderValue::from_str(value).map_err(|e| {
            Error::unexpected(format!(
                "{} {}: invalid header {name}: {e}",
                self.service.label(),
                self.operation
            ))
        })?;
        self.headers.insert(HeaderName::from_static(name), v);
        Ok(self)
    }

    /// Request this microversion (Nova/Cinder `OpenStack-API-Version`).
    pub fn microversion(mut self, major: u8, minor: u8) -> Self {
        self.microversion = Some(ApiVersion::new(major, minor));
        self
    }

    /// Mark the request as not safe to repeat after an ambiguous failure
    /// (e.g. attaching a router interface with PUT).
    pub fn non_idempotent(mut self) -> Self {
        self.idempotent = false;
        self
    }

    /// Mark a POST as safe to repeat (e.g. setting flavor extra specs).
    pub fn retry_safe(mut self) -> Self {
        self.idempotent = true;
        self
    }

    /// "service operation", used as error and log context.
    pub fn context(&self) -> String {
        format!("{} {}", self.service.label(), self.operation)
    }
}

impl RestEndpoint for Request {
    fn method(&self) -> Method {
        self.method.clone()
    }

    fn endpoint(&self) -> Cow<'static, str> {
        Cow::Owned(self.path.clone())
    }

    fn service_type(&self) -> ServiceType {
        self.service.sdk_type()
    }

    fn parameters(&self) -> QueryParams<'_> {
        let mut p = QueryParams::default();
        for (k, v) in &self.query {
            p.push(k.as_str(), v.as_str());
        }
        p
    }

    fn body(&self) -> std::result::Result<Option<(&'static str, Vec<u8>)>, BodyError> {
        Ok(self.body.clone())
    }

    fn request_headers(&self) -> Option<&HeaderMap> {
        (!self.headers.is_empty()).then_some(&self.headers)
    }

    fn api_version(&self) -> Option<ApiVersion> {
        // Always the catalog's (discovered) endpoint; paths never carry a
        // version prefix.
        None
    }

    fn min_version(&self) -> Option<ApiVersion> {
        self.microversion
    }
}

/// A successful response.
#[derive(Clone, Debug)]
pub struct Response {
    /// HTTP status.
    pub status: StatusCode,
    /// Response headers.
    pub headers: HeaderMap,
    /// Raw body.
    pub body: Bytes,
    context: String,
}

impl Response {
    /// Decode the whole body.
    pub fn json<T: DeserializeOwned>(&self) -> Result<T> {
        serde_json::from_slice(&self.body).map_err(|e| {
            Error::unexpected(format!(
                "{}: cannot decode response: {e}: {}",
                self.context,
                String::from_utf8_lossy(&self.body)
                    .chars()
                    .take(300)
                    .collect::<String>()
            ))
        })
    }

    /// Decode the value under a top-level key (e.g. `project`).
    pub fn json_at<T: DeserializeOwned>(&self, key: &str) -> Result<T> {
        let mut v: serde_json::Value = self.json()?;
        let inner = v.get_mut(key).map(serde_json::Value::take).ok_or_else(|| {
            Error::unexpected(format!("{}: response has no {key:?} field", self.context))
        })?;
        serde_json::from_value(inner)
            .map_err(|e| Error::unexpected(format!("{}: cannot decode {key:?}: {e}", self.context)))
    }

    /// The OpenStack request id, if the service sent one.
    pub fn request_id(&self) -> Option<&str> {
        request_id(&self.headers)
    }
}

fn request_id(headers: &HeaderMap) -> Option<&str> {
    headers
        .get("x-openstack-request-id")
        .or_else(|| headers.get("x-compute-request-id"))
        .and_then(|v| v.to_str().ok())
}

struct CoreInner {
    os: AsyncOpenStack,
    limiter: RateLimiter,
    opts: ClientOptions,
    cloud: String,
    /// Discovered (versioned) endpoints. The SDK forgets what it discovered
    /// whenever a 401 makes it re-authenticate: it reprocesses the new
    /// token's catalog, whose Glance and Neutron URLs carry no version, so
    /// every later request would go to `/networks` (404) or `/images`
    /// (300). Requests are built on these instead.
    endpoints: RwLock<HashMap<Service, ServiceEndpoint>>,
    /// One discovery at a time.
    discovery: tokio::sync::Mutex<()>,
    /// Background token renewal; aborted when the core is dropped.
    _renew: Option<RenewHandle>,
    /// How the cloud is reached (no credentials), for the `clouds.yaml` given to tenants.
    endpoint: CloudEndpoint,
}

/// How a cloud is reached, without any credential: what a `clouds.yaml` entry for another
/// user of the same cloud needs besides its `auth`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CloudEndpoint {
    /// Keystone's URL.
    pub auth_url: String,
    /// `region_name`, if set.
    pub region_name: Option<String>,
    /// `interface` (public, internal, admin), if set.
    pub interface: Option<String>,
    /// `identity_api_version`, if set.
    pub identity_api_version: Option<String>,
    /// `cacert`, if set (a path on the operator's side).
    pub cacert: Option<String>,
    /// `verify`, if set.
    pub verify: Option<bool>,
}

impl CloudEndpoint {
    fn of(cfg: &openstack_sdk::config::CloudConfig) -> Self {
        let option = |k: &str| {
            cfg.options.get(k).and_then(|v| {
                v.clone()
                    .into_string()
                    .ok()
                    .or_else(|| v.clone().into_int().ok().map(|i| i.to_string()))
            })
        };
        CloudEndpoint {
            auth_url: cfg
                .auth
                .as_ref()
                .and_then(|a| a.auth_url.clone())
                .unwrap_or_default(),
            region_name: cfg.region_name.clone(),
            interface: cfg.interface.clone(),
            identity_api_version: option("identity_api_version"),
            cacert: cfg.cacert.clone(),
            verify: cfg.verify,
        }
    }
}

/// The user (and application credential) a token was issued to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenSubject {
    /// Keystone user id.
    pub user_id: String,
    /// The application credential the token came from, if any.
    pub application_credential: Option<TokenCredential>,
}

/// The application credential a token came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenCredential {
    /// Its id.
    pub id: String,
    /// Whether it is restricted (it then cannot create or delete application credentials).
    pub restricted: bool,
}

/// The shared, authenticated client. Cheap to clone.
#[derive(Clone)]
pub struct Core {
    inner: Arc<CoreInner>,
}

impl std::fmt::Debug for Core {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Deliberately no config or session: they hold credentials.
        f.debug_struct("Core")
            .field("cloud", &self.inner.cloud)
            .finish_non_exhaustive()
    }
}

impl Core {
    /// Authenticate against the selected cloud and discover the endpoints
    /// of all five services.
    ///
    /// The token is never written to disk (`disable_auth_cache`); it is
    /// renewed in the background shortly before it expires (with 10% of its
    /// lifetime left) and, failing that, on the first 401.
    pub async fn connect(selector: &CloudSelector, opts: ClientOptions) -> Result<Self> {
        // Reference the auth plugins so the linker keeps their `inventory`
        // registrations (without this, `v3applicationcredential` is reported
        // as unsupported).
        let _ = (
            &openstack_sdk_auth_applicationcredential::ANCHOR,
            &openstack_sdk_auth_password::ANCHOR,
        );
        let (cfg, cloud) = load_cloud_config(selector)?;
        let endpoint = CloudEndpoint::of(&cfg);
        let os = AsyncOpenStack::builder(&cfg)
            .disable_auth_cache(true)
            .max_auth_retries(1)
            .http_timeout(opts.timeout)
            .connect()
            .await
            .map_err(|e| connect_error(&cloud, &e))?;
        let mut endpoints = HashMap::new();
        for svc in [
            Service::Compute,
            Service::Image,
            Service::Network,
            Service::BlockStorage,
        ] {
            // A missing service only fails the calls that need it; one that
            // is down is discovered again at its first call.
            match os.discover_service_endpoint(&svc.sdk_type()).await {
                Ok(()) => {
                    if let Ok(ep) = os.get_service_endpoint(&svc.sdk_type(), None).await {
                        endpoints.insert(svc, ep);
                    }
                }
                Err(e) => {
                    warn!(cloud = %cloud, service = svc.label(), error = %e, "endpoint discovery failed");
                }
            }
        }
        let renew = os.get_auth_info().and_then(|info| {
            let issued = info.token.issued_at?;
            let margin = (info.token.expires_at - issued) / 10;
            Some(os.enable_auto_renew(margin))
        });
        info!(cloud = %cloud, "connected to OpenStack");
        Ok(Self {
            inner: Arc::new(CoreInner {
                limiter: RateLimiter::new(
                    opts.max_concurrent,
                    opts.requests_per_second,
                    opts.burst,
                ),
                os,
                opts,
                cloud,
                endpoints: RwLock::new(endpoints),
                discovery: tokio::sync::Mutex::new(()),
                _renew: renew,
                endpoint,
            }),
        })
    }

    /// Revoke the session's current token so the next request meets a 401.
    /// Test support for the re-authentication path; not for production use.
    #[doc(hidden)]
    pub async fn revoke_current_token_for_tests(&self) -> Result<()> {
        use secrecy::ExposeSecret;
        let token = self
            .inner
            .os
            .get_auth_token()
            .ok_or_else(|| Error::config("the session holds no token"))?;
        let req = Request::delete(Service::Identity, "revoke_token", "auth/tokens")
            .header("x-subject-token", token.expose_secret())?;
        self.send(&req).await.map(|_| ())
    }

    /// The clouds.yaml entry this core is connected to.
    pub fn cloud_name(&self) -> &str {
        &self.inner.cloud
    }

    /// How the cloud is reached (no credentials).
    pub fn cloud_endpoint(&self) -> &CloudEndpoint {
        &self.inner.endpoint
    }

    /// The metrics this core records.
    pub fn metrics(&self) -> &Metrics {
        &self.inner.opts.metrics
    }

    /// Who the session's token belongs to: its user and, when it came from an application
    /// credential, that credential (its id and whether it is restricted).
    pub fn token_subject(&self) -> Option<TokenSubject> {
        let info = self.inner.os.get_auth_info()?;
        let cred = info.token.application_credential.and_then(|c| {
            Some(TokenCredential {
                id: c.id?,
                // Keystone reports `restricted` only when it knows; an unknown one is taken as
                // restricted, so rotation is refused rather than failing half-way.
                restricted: c.restricted.unwrap_or(true),
            })
        });
        Some(TokenSubject {
            user_id: info.token.user.id,
            application_credential: cred,
        })
    }

    /// The project the token is scoped to, if any.
    pub fn current_project_id(&self) -> Option<String> {
        use openstack_sdk::api::RestClient;
        self.inner.os.get_current_project().and_then(|p| p.id)
    }

    /// Execute a request: rate-limited, timed out, retried per
    /// [`super::retry`], logged with the request id, and counted.
    /// Non-2xx final responses become [`Error`]s carrying the service's text.
    pub async fn send(&self, req: &Request) -> Result<Response> {
        let inner = &self.inner;
        let ctx = req.context();
        let service = req.service.label();
        let op = req.operation;
        let metrics = &inner.opts.metrics;
        let result = self.send_inner(req, &ctx).await;
        metrics.observe_call(service, op, result.is_ok());
        result
    }

    async fn send_inner(&self, req: &Request, ctx: &str) -> Result<Response> {
        let inner = &self.inner;
        let service = req.service.label();
        let op = req.operation;
        let metrics = &inner.opts.metrics;

        let ep = self.endpoint(req.service, ctx).await?;
        let url = ep
            .build_request_url(&req.path)
            .map_err(|e| Error::config(format!("{ctx}: cannot build URL for {}: {e}", req.path)))?;
        let (builder, body) = prepare_request::<AsyncOpenStack, Request>(&ep, url, req, &inner.os)
            .map_err(|e| Error::config(format!("{ctx}: cannot prepare request: {e}")))?;
        // http's request builder is not Clone: keep its parts to rebuild it
        // for each retry.
        let method = builder.method_ref().cloned().unwrap_or(Method::GET);
        let uri = builder.uri_ref().cloned().unwrap_or_default();
        let headers = builder.headers_ref().cloned().unwrap_or_default();
        let path = uri.path().to_string();

        let mut backoff = ExponentialBuilder::default()
            .with_min_delay(inner.opts.min_backoff)
            .with_max_delay(inner.opts.max_backoff)
            .with_max_times(inner.opts.max_retries)
            .with_jitter()
            .build();
        let mut first = Some(builder);
        let mut attempt_no = 0u32;
        let mut retried_401 = false;
        loop {
            attempt_no += 1;
            let builder = first.take().unwrap_or_else(|| {
                let mut b = http::Request::builder()
                    .method(method.clone())
                    .uri(uri.clone());
                if let Some(h) = b.headers_mut() {
                    h.extend(headers.clone());
                }
                b
            });

            let (permit, waited) = inner.limiter.acquire().await;
            metrics.observe_rate_limit_wait(waited.as_secs_f64());
            let started = Instant::now();
            let result = tokio::time::timeout(
                inner.opts.timeout,
                inner.os.rest_async(builder, body.clone()),
            )
            .await;
            // Release the slot before any backoff sleep.
            drop(permit);
            let elapsed = started.elapsed();

            let (attempt, response, failure) = match result {
                Err(_) => (
                    Attempt::TimedOut,
                    None,
                    format!("no response within {}s", inner.opts.timeout.as_secs_f64()),
                ),
                Ok(Err(e)) => (classify_transport(&e), None, e.to_string()),
                Ok(Ok(rsp)) => (Attempt::Status(rsp.status()), Some(rsp), String::new()),
            };
            let code = match (&attempt, &response) {
                (_, Some(r)) => r.status().as_str().to_string(),
                (Attempt::TimedOut, None) => "timeout".into(),
                _ => "transport".into(),
            };
            metrics.observe_attempt(service, op, &code, elapsed.as_secs_f64());
            let rid = response
                .as_ref()
                .and_then(|r| request_id(r.headers()))
                .map(str::to_string);
            debug!(
                service,
                operation = op,
                method = %method,
                path = %path,
                status = %code,
                duration_ms = elapsed.as_millis() as u64,
                request_id = rid.as_deref().unwrap_or(""),
                attempt = attempt_no,
                "openstack request"
            );

            if let Some(rsp) = &response
                && rsp.status().is_success()
            {
                return Ok(Response {
                    status: rsp.status(),
                    headers: rsp.headers().clone(),
                    body: rsp.body().clone(),
                    context: ctx.to_string(),
                });
            }

            let message = response
                .as_ref()
                .map(|r| extract_message(r.body()))
                .unwrap_or_else(|| failure.clone());
            // The SDK already re-authenticated once inside this attempt. A
            // 401 after that usually means Keystone revoked the user's
            // tokens (e.g. a group membership change) within the same second
            // the new token was issued: revocation is second-granular, so
            // try once more a second later.
            let reauth_retry = attempt == Attempt::Status(StatusCode::UNAUTHORIZED) && !retried_401;
            if reauth_retry {
                retried_401 = true;
            }
            if (reauth_retry || should_retry(attempt, &message, req.idempotent))
                && let Some(delay) = backoff.next()
            {
                let retry_after = response
                    .as_ref()
                    .and_then(|r| r.headers().get(http::header::RETRY_AFTER))
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| parse_retry_after(v, jiff::Timestamp::now()))
                    .map(|d| d.min(inner.opts.max_retry_after))
                    .unwrap_or_default();
                let mut delay = delay.max(retry_after);
                if reauth_retry {
                    delay = delay.max(std::time::Duration::from_millis(1100));
                }
                metrics.observe_retry(service, op);
                debug!(
                    service,
                    operation = op,
                    status = %code,
                    delay_ms = delay.as_millis() as u64,
                    attempt = attempt_no,
                    "retrying openstack request"
                );
                tokio::time::sleep(delay).await;
                continue;
            }

            return Err(match (response, attempt) {
                (Some(rsp), _) => error_for_status(rsp.status(), ctx, &message, rid.as_deref()),
                (None, Attempt::TimedOut) => Error::Timeout {
                    message: format!("{ctx}: {failure} (after {attempt_no} attempts)"),
                },
                (None, _) => transport_error(ctx, &failure, attempt_no),
            });
        }
    }

    fn cached_endpoint(&self, svc: Service) -> Option<ServiceEndpoint> {
        self.inner
            .endpoints
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&svc)
            .cloned()
    }

    /// The service's discovered endpoint: cached (see [`CoreInner`]'s
    /// `endpoints`), else discovered now and cached. Keystone's catalog URL
    /// is versioned and the SDK keeps it across re-authentications, so it
    /// comes from the SDK. A failed discovery (the service is down) is
    /// transient; a service missing from the catalog is a configuration
    /// error.
    async fn endpoint(&self, svc: Service, ctx: &str) -> Result<ServiceEndpoint> {
        let os = &self.inner.os;
        let lookup = async || {
            os.get_service_endpoint(&svc.sdk_type(), None)
                .await
                .map_err(|e| {
                    Error::config(format!("{ctx}: no usable {} endpoint: {e}", svc.label()))
                })
        };
        if svc == Service::Identity {
            return lookup().await;
        }
        if let Some(ep) = self.cached_endpoint(svc) {
            return Ok(ep);
        }
        let _turn = self.inner.discovery.lock().await;
        if let Some(ep) = self.cached_endpoint(svc) {
            return Ok(ep);
        }
        let discovered = os.discover_service_endpoint(&svc.sdk_type()).await;
        let ep = lookup().await?;
        if let Err(e) = discovered {
            // A catalog URL with a version works without discovery (some
            // services publish no version document); without one, requests
            // would meet 404s that read as "object gone". Try again next time.
            if !url_has_version(ep.url()) {
                return Err(Error::Transient {
                    message: format!(
                        "{ctx}: {} version discovery failed and its catalog URL {} names no version: {e}",
                        svc.label(),
                        ep.url()
                    ),
                });
            }
            warn!(cloud = %self.inner.cloud, service = svc.label(), error = %e, "endpoint discovery failed; using the versioned catalog URL");
        }
        self.inner
            .endpoints
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(svc, ep.clone());
        info!(cloud = %self.inner.cloud, service = svc.label(), "endpoint discovered");
        Ok(ep)
    }

    /// GET a collection following `next` links (Nova/Neutron
    /// `<key>_links`, Glance `next`), one request (and permit) per page.
    pub async fn list_all<T: DeserializeOwned>(&self, req: Request, key: &str) -> Result<Vec<T>> {
        let mut out = Vec::new();
        let mut req = req;
        // A hard cap guards against a service that keeps returning the same
        // next link.
        for _ in 0..1000 {
            let rsp = self.send(&req).await?;
            let v: serde_json::Value = rsp.json()?;
            let items = v.get(key).cloned().ok_or_else(|| {
                Error::unexpected(format!("{}: response has no {key:?} field", req.context()))
            })?;
            let mut page: Vec<T> = serde_json::from_value(items).map_err(|e| {
                Error::unexpected(format!("{}: cannot decode {key:?}: {e}", req.context()))
            })?;
            let empty = page.is_empty();
            out.append(&mut page);
            match next_link(&v, key) {
                Some(next) if !empty => {
                    let Ok(url) = url::Url::parse(&next).or_else(|_| {
                        url::Url::parse("http://placeholder/").and_then(|b| b.join(&next))
                    }) else {
                        break;
                    };
                    req.query = url
                        .query_pairs()
                        .map(|(k, v)| (k.into_owned(), v.into_owned()))
                        .collect();
                }
                _ => break,
            }
        }
        Ok(out)
    }
}

/// Whether a URL's path names an API version (`/v2.0`, `/v3/<project>`).
fn url_has_version(url: &url::Url) -> bool {
    url.path_segments().is_some_and(|mut segs| {
        segs.any(|s| {
            s.strip_prefix('v').is_some_and(|n| {
                !n.is_empty()
                    && n.chars().all(|c| c.is_ascii_digit() || c == '.')
                    && n.starts_with(|c: char| c.is_ascii_digit())
            })
        })
    })
}

/// The `next` link of a paginated response, if any.
fn next_link(v: &serde_json::Value, key: &str) -> Option<String> {
    if let Some(n) = v.get("next").and_then(|n| n.as_str()) {
        return Some(n.to_string());
    }
    v.get(format!("{key}_links"))?
        .as_array()?
        .iter()
        .find(|l| l.get("rel").and_then(|r| r.as_str()) == Some("next"))
        .and_then(|l| l.get("href"))
        .and_then(|h| h.as_str())
        .map(str::to_string)
}

fn classify_transport(e: &ApiError<RestError>) -> Attempt {
    match e {
        ApiError::Client {
            source: RestError::Communication { source },
        } => {
            if source.is_connect() {
                Attempt::ConnectFailed
            } else if source.is_timeout() {
                Attempt::TimedOut
            } else {
                Attempt::TransportFailed
            }
        }
        _ => Attempt::TransportFailed,
    }
}

fn transport_error(ctx: &str, failure: &str, attempts: u32) -> Error {
    let message = format!("{ctx}: {failure} (after {attempts} attempts)");
    if failure.contains("authentication") {
        Error::Unauthorized { message }
    } else {
        Error::Transient { message }
    }
}

fn connect_error(cloud: &str, e: &openstack_sdk::OpenStackError) -> Error {
    use openstack_sdk::OpenStackError as E;
    let text = e.to_string();
    let message = format!("cannot connect to cloud {cloud:?}: {text}");
    let lower = text.to_ascii_lowercase();
    match e {
        // Keystone unreachable or not answering its version document: most
        // often it is down or restarting, so let callers retry.
        E::Discovery { .. } | E::Communication { .. } => Error::Transient { message },
        E::AuthError { .. } | E::AuthHelperError { .. } | E::NoAuth => {
            Error::Unauthorized { message }
        }
        _ if lower.contains("401") || lower.contains("unauthorized") => {
            Error::Unauthorized { message }
        }
        _ => Error::Config { message },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versioned_urls() {
        for (u, v) in [
            ("http://h:9696", false),
            ("http://h:9292/", false),
            ("http://h:9696/v2.0", true),
            ("http://h:8776/v3/abc123", true),
            ("http://h/compute/v2.1", true),
            ("http://h/volume", false),
            ("http://h/v", false),
        ] {
            assert_eq!(url_has_version(&url::Url::parse(u).unwrap()), v, "{u}");
        }
    }

    #[test]
    fn next_links() {
        let nova = serde_json::json!({"flavors": [], "flavors_links": [{"rel": "next", "href": "http://x/v2.1/flavors/detail?marker=abc&is_public=none"}]});
        assert_eq!(
            next_link(&nova, "flavors").as_deref(),
            Some("http://x/v2.1/flavors/detail?marker=abc&is_public=none")
        );
        let glance = serde_json::json!({"images": [], "next": "/v2/images?marker=m"});
        assert_eq!(
            next_link(&glance, "images").as_deref(),
            Some("/v2/images?marker=m")
        );
        assert_eq!(
            next_link(&serde_json::json!({"networks": []}), "networks"),
            None
        );
    }

    #[test]
    fn request_defaults() {
        let r = Request::post(Service::Identity, "create_project", "projects");
        assert!(!r.idempotent);
        let r = Request::put(
            Service::Network,
            "add_router_interface",
            "routers/x/add_router_interface",
        );
        assert!(r.idempotent);
        assert!(!r.non_idempotent().idempotent);
        let r = Request::get(Service::Compute, "list_flavors", "flavors/detail")
            .query("is_public", "none")
            .microversion(2, 75);
        assert_eq!(r.min_version(), Some(ApiVersion::new(2, 75)));
        assert_eq!(r.api_version(), None);
        assert_eq!(r.context(), "compute list_flavors");
    }
}
