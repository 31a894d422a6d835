//! `OpenStackExternalService`: resolve the Secrets, check the service for real
//! (`external_checks::check`), write `SecretResolved`, `EndpointReachable`, `TLSReady`,
//! `Authenticated` and the standard conditions. Checked again periodically and whenever a
//! Secret it names changes.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use api::Condition;
use controlplane_api::condition_types as ct;
use controlplane_api::external::{ServiceKind, VerifyMode};
use controlplane_api::validation::Validate;
use controlplane_api::{ControlPlaneStatus, OpenStackExternalService};
use external_checks::{Outcome, Report, Target, TlsSettings};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Api, ResourceExt};
use secrecy::SecretString;
use tracing::info;

use crate::runtime::{self, Ctx, Error, State};

/// The order the sub-conditions are reported in (and the first failing one named).
pub const SUB_CONDITIONS: [&str; 4] = [
    ct::SECRET_RESOLVED,
    ct::ENDPOINT_REACHABLE,
    ct::TLS_READY,
    ct::AUTHENTICATED,
];

/// Why an external service is not usable, in the words the services it blocks repeat:
/// `not Authenticated: access denied for user 'keystone'`. `None` when it is Ready.
pub fn not_ready_reason(svc: &OpenStackExternalService) -> Option<String> {
    let status = svc.status.clone().unwrap_or_default();
    if status.ready_at(svc.metadata.generation) {
        return None;
    }
    if let Some(c) = status.condition(ct::INVALID_SPEC).filter(|c| c.is_true()) {
        return Some(format!(
            "has an invalid spec: {}",
            c.message.clone().unwrap_or_default()
        ));
    }
    for t in SUB_CONDITIONS {
        if let Some(c) = status.condition(t)
            && !c.is_true()
        {
            return Some(format!(
                "not {t}: {}",
                c.message.clone().unwrap_or_default()
            ));
        }
    }
    Some("not checked yet".into())
}

fn secret_value(secret: &Secret, key: &str) -> Option<Vec<u8>> {
    secret
        .data
        .as_ref()
        .and_then(|d| d.get(key))
        .map(|b| b.0.clone())
        .or_else(|| {
            secret
                .string_data
                .as_ref()
                .and_then(|d| d.get(key))
                .map(|s| s.clone().into_bytes())
        })
}

async fn read_key(
    api: &Api<Secret>,
    name: &str,
    key: &str,
) -> Result<Result<Vec<u8>, String>, Error> {
    Ok(match api.get_opt(name).await? {
        None => Err(format!("Secret {name} not found")),
        Some(s) => secret_value(&s, key).ok_or_else(|| format!("Secret {name} has no key {key}")),
    })
}

/// Resolves the Secrets of `svc` into a check target, or says which Secret or key is missing.
pub async fn resolve(
    secrets: &Api<Secret>,
    svc: &OpenStackExternalService,
) -> Result<Result<Target, String>, Error> {
    let spec = &svc.spec;
    let (mut username, mut password) = (None, None);
    if let Some(c) = &spec.credentials {
        let user = match read_key(secrets, &c.secret_name, &c.username_key).await? {
            Ok(v) => v,
            Err(e) => return Ok(Err(e)),
        };
        let pass = match read_key(secrets, &c.secret_name, &c.password_key).await? {
            Ok(v) => v,
            Err(e) => return Ok(Err(e)),
        };
        username = Some(String::from_utf8_lossy(&user).trim().to_string());
        password = Some(SecretString::from(
            String::from_utf8_lossy(&pass).into_owned(),
        ));
    }
    let tls = match &spec.tls {
        None => None,
        Some(t) => {
            let ca = match read_key(secrets, &t.ca_secret.name, &t.ca_secret.key).await? {
                Ok(v) => v,
                Err(e) => return Ok(Err(e)),
            };
            let (mut cert, mut key) = (None, None);
            if let Some(cc) = &t.client_cert_secret {
                cert = match read_key(secrets, &cc.name, "tls.crt").await? {
                    Ok(v) => Some(v),
                    Err(e) => return Ok(Err(e)),
                };
                key = match read_key(secrets, &cc.name, "tls.key").await? {
                    Ok(v) => Some(secrecy::SecretSlice::from(v)),
                    Err(e) => return Ok(Err(e)),
                };
            }
            Some(TlsSettings {
                ca_pem: Some(ca),
                client_cert_pem: cert,
                client_key_pem: key,
                verify: match t.verify {
                    VerifyMode::Full => external_checks::VerifyMode::Full,
                    VerifyMode::CaOnly => external_checks::VerifyMode::CaOnly,
                    VerifyMode::Insecure => external_checks::VerifyMode::Insecure,
                },
                server_name: t.server_name.clone(),
            })
        }
    };
    let kind = match spec.type_ {
        ServiceKind::Database => external_checks::ServiceKind::Database,
        ServiceKind::Messaging => external_checks::ServiceKind::Messaging,
        ServiceKind::Cache => external_checks::ServiceKind::Cache,
        ServiceKind::ObjectStorage => external_checks::ServiceKind::ObjectStorage,
        ServiceKind::Ovn => external_checks::ServiceKind::Ovn,
    };
    Ok(Ok(Target {
        kind,
        endpoints: spec.endpoints.clone(),
        username,
        password,
        tls,
        extra: spec.extra.clone(),
    }))
}

fn outcome_condition(type_: &str, o: &Outcome, tls_configured: bool) -> Condition {
    match o {
        Outcome::Passed { detail } => Condition::new(type_, true, "Passed", detail.clone()),
        Outcome::Failed { reason, message } => {
            Condition::new(type_, false, reason.clone(), message.clone())
        }
        Outcome::NotChecked { why } if type_ == ct::TLS_READY && !tls_configured => Condition::new(
            type_,
            true,
            "NotRequested",
            format!("no tls block: plain connection ({why})"),
        ),
        Outcome::NotChecked { why } => {
            let mut c = Condition::new(type_, false, "NotChecked", why.clone());
            c.status = api::ConditionStatus::Unknown;
            c
        }
    }
}

/// Conditions and overall state from a check report (pure).
pub fn from_report(report: &Report, tls_configured: bool) -> (Vec<Condition>, State) {
    let conds = vec![
        outcome_condition(
            ct::ENDPOINT_REACHABLE,
            &report.endpoint_reachable,
            tls_configured,
        ),
        outcome_condition(ct::TLS_READY, &report.tls_ready, tls_configured),
        outcome_condition(ct::AUTHENTICATED, &report.authenticated, tls_configured),
    ];
    let state = if report.is_ready() {
        State::Ready(
            [
                report.endpoint_reachable.message(),
                report.authenticated.message(),
            ]
            .into_iter()
            .filter(|m| !m.is_empty())
            .collect::<Vec<_>>()
            .join("; "),
        )
    } else if let Some((t, o)) = report.first_failure() {
        State::Degraded {
            reason: o.reason().unwrap_or("CheckFailed").to_string(),
            message: format!("{t} failed: {}", o.message()),
        }
    } else {
        State::Degraded {
            reason: "NotChecked".into(),
            message: report.endpoint_reachable.message().to_string(),
        }
    };
    (conds, state)
}

async fn reconcile(obj: Arc<OpenStackExternalService>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let started = Instant::now();
    let ns = obj.namespace().ok_or(Error::Incomplete("namespace"))?;
    let api: Api<OpenStackExternalService> = Api::namespaced(ctx.client.clone(), &ns);
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &ns);
    let generation = obj.metadata.generation;
    let before = obj.status.clone().unwrap_or_default();
    let mut status = before.clone();
    let now = jiff::Timestamp::now().to_string();
    let mut errors = api::validation::cel_errors(&*obj);
    for e in obj.spec.validate() {
        if !errors.iter().any(|x| x.path == e.path) {
            errors.push(e);
        }
    }
    let state = if !errors.is_empty() {
        State::InvalidSpec(api::validation::summarize(&errors))
    } else {
        match resolve(&secrets, &obj).await? {
            Err(missing) => {
                runtime::set(
                    &mut status,
                    Condition::new(ct::SECRET_RESOLVED, false, "SecretMissing", missing.clone()),
                    generation,
                    &now,
                );
                for t in [ct::ENDPOINT_REACHABLE, ct::TLS_READY, ct::AUTHENTICATED] {
                    let mut c = Condition::new(
                        t,
                        false,
                        "NotChecked",
                        "the credentials Secret is not resolved",
                    );
                    c.status = api::ConditionStatus::Unknown;
                    runtime::set(&mut status, c, generation, &now);
                }
                State::Blocked {
                    reason: "SecretMissing".into(),
                    message: missing,
                }
            }
            Ok(target) => {
                runtime::set(
                    &mut status,
                    Condition::new(
                        ct::SECRET_RESOLVED,
                        true,
                        "Resolved",
                        "credentials and TLS material found",
                    ),
                    generation,
                    &now,
                );
                let report = external_checks::check(&target, ctx.config.check_timeout).await;
                let (conds, state) = from_report(&report, obj.spec.tls.is_some());
                for c in conds {
                    runtime::set(&mut status, c, generation, &now);
                }
                state
            }
        }
    };
    runtime::set_state(&mut status, &state, generation);
    info!(name = %obj.name_any(), namespace = %ns, state = ?state.summary(), "external service checked");
    runtime::after_pass(&ctx, &*obj, &before, &status).await;
    runtime::write_status(&api, &obj, &before, &status).await?;
    runtime::observe(&ctx, "OpenStackExternalService", true, started);
    Ok(match state {
        State::InvalidSpec(_) => Action::await_change(),
        _ => Action::requeue(ctx.config.check_interval),
    })
}

/// Names of the Secrets an external service reads.
pub fn secret_names(svc: &OpenStackExternalService) -> Vec<String> {
    let mut names: Vec<String> = svc
        .spec
        .credentials
        .iter()
        .map(|c| c.secret_name.clone())
        .collect();
    if let Some(t) = &svc.spec.tls {
        names.push(t.ca_secret.name.clone());
        names.extend(t.client_cert_secret.iter().map(|c| c.name.clone()));
    }
    names
}

/// Runs the controller until `shutdown` resolves.
pub async fn run(
    ctx: Arc<Ctx>,
    api: Api<OpenStackExternalService>,
    secrets: Api<Secret>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let controller = Controller::new(api, watcher::Config::default());
    let store = controller.store();
    controller
        .watches(
            secrets,
            watcher::Config::default(),
            move |secret: Secret| {
                let ns = secret.namespace();
                let name = secret.name_any();
                store
                    .state()
                    .into_iter()
                    .filter(|s| s.namespace() == ns && secret_names(s).contains(&name))
                    .map(|s| ObjectRef::from_obj(&*s))
                    .collect::<Vec<_>>()
            },
        )
        .graceful_shutdown_on(shutdown)
        .run(reconcile, runtime::error_policy, ctx)
        .for_each(|_| futures::future::ready(()))
        .await;
}

/// Condition messages by type, for tests and the roll-up.
pub fn conditions_by_type(status: &ControlPlaneStatus) -> BTreeMap<String, (bool, String)> {
    status
        .conditions
        .iter()
        .map(|c| {
            (
                c.type_.clone(),
                (c.is_true(), c.message.clone().unwrap_or_default()),
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failed(reason: &str, message: &str) -> Outcome {
        Outcome::Failed {
            reason: reason.into(),
            message: message.into(),
        }
    }

    #[test]
    fn a_report_becomes_sub_conditions_and_names_the_first_failure() {
        let report = Report {
            endpoint_reachable: Outcome::Passed {
                detail: "127.0.0.1:13306 answered (MariaDB 10.11)".into(),
            },
            tls_ready: Outcome::NotChecked {
                why: "no TLS configured".into(),
            },
            authenticated: failed("AuthenticationFailed", "Access denied for user 'x'"),
        };
        let (conds, state) = from_report(&report, false);
        let by: BTreeMap<_, _> = conds.iter().map(|c| (c.type_.as_str(), c)).collect();
        assert!(by[ct::ENDPOINT_REACHABLE].is_true());
        assert!(
            by[ct::TLS_READY].is_true(),
            "no tls block: TLS is not required"
        );
        assert!(!by[ct::AUTHENTICATED].is_true());
        assert_eq!(
            state,
            State::Degraded {
                reason: "AuthenticationFailed".into(),
                message: "Authenticated failed: Access denied for user 'x'".into()
            }
        );
        // With a tls block, a TLS step that did not run is Unknown, not True.
        let (conds, _) = from_report(&report, true);
        let tls = conds
            .iter()
            .find(|c| c.type_ == ct::TLS_READY)
            .expect("TLSReady");
        assert_eq!(tls.status, api::ConditionStatus::Unknown);
    }
}
