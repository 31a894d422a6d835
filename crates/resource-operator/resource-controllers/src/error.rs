//! Reconcile errors, classified so each gets the right retry and condition.

use std::time::Duration;

use api::FieldError;

/// Why a reconcile pass did not finish.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    /// The spec is invalid; nothing is retried until it changes.
    #[error("invalid spec: {}", api::validation::summarize(.0))]
    InvalidSpec(Vec<FieldError>),
    /// Something the spec refers to does not exist yet; retried on a timer.
    #[error("waiting for {0}")]
    DependencyMissing(String),
    /// An existing OpenStack object is not ours and adopting it was not asked for, or it
    /// belongs to another resource or cluster.
    #[error("{0}")]
    NotOwned(String),
    /// The spec asks for something the operator's policy forbids (tenancy boundary).
    #[error("not allowed: {0}")]
    PolicyViolation(String),
    /// OpenStack refused or failed.
    #[error("OpenStack: {0}")]
    OpenStack(#[from] openstack::Error),
    /// The resource's `spec.cloudRef` cannot be used (missing, not allowed for its namespace,
    /// or its credentials fail); nothing was touched in any cloud.
    #[error("blocked: {0}")]
    CloudBlocked(#[from] api::cloud::CloudRefError),
    /// The Kubernetes API failed.
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
}

impl ReconcileError {
    /// The condition reason for this error.
    pub fn reason(&self) -> &'static str {
        match self {
            ReconcileError::InvalidSpec(_) => "InvalidSpec",
            ReconcileError::DependencyMissing(_) => "DependencyMissing",
            ReconcileError::NotOwned(_) => "NotOwned",
            ReconcileError::PolicyViolation(_) => "PolicyViolation",
            ReconcileError::OpenStack(e) if e.is_transient() => "TransientError",
            ReconcileError::OpenStack(_) => "OpenStackError",
            ReconcileError::CloudBlocked(_) => "Blocked",
            ReconcileError::Kube(_) => "KubernetesError",
        }
    }

    /// Whether retrying without a spec change can help soon.
    pub fn is_transient(&self) -> bool {
        match self {
            ReconcileError::OpenStack(e) => {
                e.is_transient() || matches!(e, openstack::Error::Conflict { .. })
            }
            ReconcileError::Kube(_) | ReconcileError::DependencyMissing(_) => true,
            // The cloud (or its Secret) may appear or be repaired at any time; a refused
            // namespace needs an edit of the cloud's allow-list, seen at the next resync.
            ReconcileError::CloudBlocked(e) => matches!(
                e,
                api::cloud::CloudRefError::Missing(_)
                    | api::cloud::CloudRefError::Unreachable { .. }
            ),
            _ => false,
        }
    }

    /// When to try again (the caller adds backoff for repeated transient failures).
    pub fn retry_after(&self, resync: Duration) -> Duration {
        match self {
            ReconcileError::InvalidSpec(_)
            | ReconcileError::PolicyViolation(_)
            | ReconcileError::NotOwned(_) => resync,
            ReconcileError::DependencyMissing(_) => Duration::from_secs(15),
            e if e.is_transient() => Duration::from_secs(5),
            _ => Duration::from_secs(60),
        }
    }

    /// A `spec`-level invalid-spec error with one message.
    pub fn invalid(path: &str, message: impl Into<String>) -> Self {
        ReconcileError::InvalidSpec(vec![FieldError {
            path: path.to_string(),
            message: message.into(),
        }])
    }
}

/// Result of a reconcile step.
pub type Result<T, E = ReconcileError> = std::result::Result<T, E>;
