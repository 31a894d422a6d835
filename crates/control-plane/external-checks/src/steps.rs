//! What one endpoint's check saw, step by step, and how endpoints combine into a [`Report`].

use crate::{Outcome, Report, reason};

/// The three conditions, in the order a check reaches them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stage {
    Reachable,
    Tls,
    Auth,
}

impl Stage {
    /// The condition type this stage reports.
    pub(crate) fn condition(self) -> &'static str {
        match self {
            Stage::Reachable => "EndpointReachable",
            Stage::Tls => "TLSReady",
            Stage::Auth => "Authenticated",
        }
    }
}

/// A failed step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Failure {
    pub stage: Stage,
    pub reason: &'static str,
    pub message: String,
}

impl Failure {
    pub(crate) fn new(stage: Stage, reason: &'static str, message: impl Into<String>) -> Self {
        Failure {
            stage,
            reason,
            message: message.into(),
        }
    }
}

/// The steps one endpoint has passed so far.
#[derive(Debug, Default)]
pub(crate) struct Steps {
    pub tls_configured: bool,
    reachable: Option<String>,
    tls: Option<String>,
    auth: Option<String>,
    /// OVSDB databases the endpoint serves (OVN only).
    pub served: Vec<String>,
}

impl Steps {
    pub(crate) fn new(tls_configured: bool) -> Self {
        Steps {
            tls_configured,
            ..Steps::default()
        }
    }

    /// Records (or refines) the detail of a passed step.
    pub(crate) fn pass(&mut self, stage: Stage, detail: impl Into<String>) {
        let slot = match stage {
            Stage::Reachable => &mut self.reachable,
            Stage::Tls => &mut self.tls,
            Stage::Auth => &mut self.auth,
        };
        *slot = Some(detail.into());
    }

    /// The first stage not passed yet: where a timeout struck.
    pub(crate) fn pending(&self) -> Stage {
        if self.reachable.is_none() {
            Stage::Reachable
        } else if self.tls_configured && self.tls.is_none() {
            Stage::Tls
        } else {
            Stage::Auth
        }
    }

    /// The outcomes of this endpoint, prefixed with its name; `failure` ends the check.
    pub(crate) fn finish(self, endpoint: &str, failure: Option<Failure>) -> [Outcome; 3] {
        let mut out = [Stage::Reachable, Stage::Tls, Stage::Auth].map(|stage| {
            let passed = match stage {
                Stage::Reachable => &self.reachable,
                Stage::Tls => &self.tls,
                Stage::Auth => &self.auth,
            };
            match (&failure, passed) {
                (Some(f), _) if f.stage == stage => Outcome::Failed {
                    reason: f.reason.to_string(),
                    message: format!("{endpoint}: {}", f.message),
                },
                (_, Some(detail)) => Outcome::Passed {
                    detail: format!("{endpoint}: {detail}"),
                },
                _ if stage == Stage::Tls && !self.tls_configured => Outcome::NotChecked {
                    why: "TLS not configured".into(),
                },
                (Some(f), None) => Outcome::NotChecked {
                    why: format!("{endpoint}: not checked: {} failed", f.stage.condition()),
                },
                (None, None) => Outcome::NotChecked {
                    why: format!("{endpoint}: not reached"),
                },
            }
        });
        // A failure found late (a TLS alert on the first read) leaves later steps unproven.
        if let Some(f) = &failure {
            let order = |s: Stage| s as usize;
            for (i, o) in out.iter_mut().enumerate() {
                if i > order(f.stage) && o.is_passed() {
                    *o = Outcome::NotChecked {
                        why: format!("{endpoint}: not checked: {} failed", f.stage.condition()),
                    };
                }
            }
        }
        out
    }
}

/// Combines the outcomes of all endpoints: any failure wins (the first endpoint's reason, every
/// failed endpoint's message), all passed is passed, otherwise not checked.
pub(crate) fn combine(per_endpoint: Vec<[Outcome; 3]>) -> Report {
    let mut columns: [Vec<Outcome>; 3] = [Vec::new(), Vec::new(), Vec::new()];
    for row in per_endpoint {
        for (i, o) in row.into_iter().enumerate() {
            columns[i].push(o);
        }
    }
    let [reachable, tls, auth] = columns.map(combine_one);
    Report {
        endpoint_reachable: reachable,
        tls_ready: tls,
        authenticated: auth,
    }
}

fn combine_one(outcomes: Vec<Outcome>) -> Outcome {
    let failed: Vec<&Outcome> = outcomes.iter().filter(|o| o.is_failed()).collect();
    if let Some(first) = failed.first() {
        return Outcome::Failed {
            reason: first.reason().unwrap_or(reason::PROTOCOL_ERROR).to_string(),
            message: failed
                .iter()
                .map(|o| o.message())
                .collect::<Vec<_>>()
                .join("; "),
        };
    }
    if !outcomes.is_empty() && outcomes.iter().all(Outcome::is_passed) {
        return Outcome::Passed {
            detail: outcomes
                .iter()
                .map(Outcome::message)
                .collect::<Vec<_>>()
                .join("; "),
        };
    }
    let mut whys: Vec<&str> = outcomes
        .iter()
        .filter(|o| !o.is_passed())
        .map(Outcome::message)
        .collect();
    whys.dedup();
    Outcome::NotChecked {
        why: if whys.is_empty() {
            "no endpoint".to_string()
        } else {
            whys.join("; ")
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failed(stage: Stage, r: &'static str) -> Option<Failure> {
        Some(Failure::new(stage, r, "boom"))
    }

    #[test]
    fn a_failure_names_the_endpoint_and_leaves_later_steps_unchecked() {
        let mut s = Steps::new(true);
        s.pass(Stage::Reachable, "connected");
        let [r, t, a] = s.finish(
            "db:3306",
            failed(Stage::Tls, reason::CERTIFICATE_NOT_TRUSTED),
        );
        assert!(r.is_passed());
        assert_eq!(t.reason(), Some(reason::CERTIFICATE_NOT_TRUSTED));
        assert_eq!(t.message(), "db:3306: boom");
        assert_eq!(a.message(), "db:3306: not checked: TLSReady failed");
    }

    #[test]
    fn a_late_tls_alert_unproves_the_steps_after_it() {
        let mut s = Steps::new(true);
        s.pass(Stage::Reachable, "connected");
        s.pass(Stage::Tls, "TLS 1.3");
        s.pass(Stage::Auth, "logged in");
        let [_, t, a] = s.finish(
            "x:1",
            failed(Stage::Tls, reason::CLIENT_CERTIFICATE_REJECTED),
        );
        assert!(t.is_failed());
        assert!(matches!(a, Outcome::NotChecked { .. }));
    }

    #[test]
    fn tls_not_configured_is_not_checked_and_not_pending() {
        let mut s = Steps::new(false);
        assert_eq!(s.pending(), Stage::Reachable);
        s.pass(Stage::Reachable, "connected");
        assert_eq!(s.pending(), Stage::Auth);
        let [_, t, _] = s.finish("x:1", None);
        assert_eq!(t.message(), "TLS not configured");
    }

    #[test]
    fn any_failed_endpoint_fails_the_condition_and_all_are_named() {
        let ok = {
            let mut s = Steps::new(false);
            s.pass(Stage::Reachable, "up");
            s.pass(Stage::Auth, "in");
            s.finish("a:1", None)
        };
        let bad =
            Steps::new(false).finish("b:1", failed(Stage::Reachable, reason::CONNECTION_REFUSED));
        let bad2 = Steps::new(false).finish("c:1", failed(Stage::Reachable, reason::TIMEOUT));
        let report = combine(vec![ok.clone(), bad, bad2]);
        assert_eq!(
            report.endpoint_reachable.reason(),
            Some(reason::CONNECTION_REFUSED)
        );
        assert_eq!(report.endpoint_reachable.message(), "b:1: boom; c:1: boom");
        assert!(!report.is_ready());
        assert_eq!(
            report.first_failure().map(|(c, _)| c),
            Some("EndpointReachable")
        );
        let all_ok = combine(vec![ok.clone(), ok]);
        assert!(all_ok.is_ready());
        assert_eq!(all_ok.authenticated.message(), "a:1: in; a:1: in");
    }
}
