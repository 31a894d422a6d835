//! The virtual kubelet's HTTPS API, provider-agnostic: the kubelet's paths
//! (`/containerLogs`, `/exec`, `/attach`, `/portForward`, `/healthz`,
//! `/stats/summary`, `/metrics/resource`, `/metrics`, `/pods`) with its
//! authentication (client certificates, TokenReview) and authorisation
//! (SubjectAccessReview on `nodes/<subresource>`).
//!
//! - [`attrs`], [`query`], [`summary`], [`channel`], [`spdy`] (SPDY/3.1
//!   frames): the pure parts.
//! - [`backend`]: what a provider implements ([`backend::Backend`]) and the
//!   pods of the node ([`backend::Pods`]).
//! - [`auth`]: who is asking and whether they may.
//! - [`server`]: the routes; [`tls`]: certificates and the accept loop;
//!   [`serving_cert`]: the serving certificate from a CertificateSigningRequest.
//! - [`kube_pods`]: [`backend::Pods`] on the Kubernetes API.

pub mod attrs;
pub mod auth;
pub mod backend;
pub mod channel;
pub mod kube_pods;
pub mod query;
pub mod server;
pub mod serving_cert;
pub mod spdy;
pub mod summary;
pub mod tls;

pub use server::KubeletApi;
