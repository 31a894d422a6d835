//! Why a Deployment does not become available, from what the kubelet and the Deployment
//! controller report (pure): a container of a current pod waiting in a back-off
//! (`CrashLoopBackOff`, image pull or container-config errors) or the Deployment's `Progressing`
//! condition at `ProgressDeadlineExceeded` becomes `Degraded`, naming the container, its pod and
//! its last termination (exit code, reason and the termination message's last line). A rollout
//! merely in progress stays `Reconciling`.
//!
//! The termination message is the container's own output (with `FallbackToLogsOnError`, the
//! tail of its log): it is cut to one line of at most [`MESSAGE_LIMIT`] characters and
//! credentials that look like ones (`scheme://user:password@`, `password=…`) are masked before
//! it reaches a condition or an Event.

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ContainerStatus, Pod};
use kube::ResourceExt;

use crate::runtime::State;
use controlplane_render::objects::CONFIG_HASH_ANNOTATION;

/// Longest excerpt of a termination or waiting message put in a condition (characters).
pub const MESSAGE_LIMIT: usize = 300;

/// Waiting reasons of a container the kubelet cannot run (it retries with back-off, but the
/// cause is usually the configuration or the image, so the user must be told now).
const FAILING_WAITING: [&str; 8] = [
    "CrashLoopBackOff",
    "ImagePullBackOff",
    "ErrImagePull",
    "ErrImageNeverPull",
    "InvalidImageName",
    "CreateContainerConfigError",
    "CreateContainerError",
    "RunContainerError",
];

/// The Deployment controller's reason on `Progressing=False` once `progressDeadlineSeconds`
/// passed without progress (`TimedOutReason` in the Deployment controller).
pub const DEADLINE_REASON: &str = "ProgressDeadlineExceeded";

/// The `Degraded` state of Deployment `dep` whose pods (those its selector matches) are `pods`,
/// or `None` while its rollout may still succeed on its own.
pub fn diagnose(dep: &Deployment, pods: &[Pod]) -> Option<State> {
    let name = dep.name_any();
    let current = current_pods(dep, pods);
    for pod in &current {
        if let Some((reason, what)) = failing_container(pod) {
            return Some(State::Degraded {
                reason,
                message: format!("Deployment {name}: {what}"),
            });
        }
    }
    let deadline = deadline_exceeded(dep)?;
    let detail = current
        .iter()
        .find_map(|p| not_ready(p))
        .unwrap_or_else(|| "no pod of the current template exists".to_string());
    Some(State::Degraded {
        reason: DEADLINE_REASON.into(),
        message: format!("Deployment {name} exceeded its progress deadline ({deadline}); {detail}"),
    })
}

/// The pods of the current pod template (same configuration hash), not being deleted, by name:
/// an old ReplicaSet's pods going away say nothing about the rollout.
fn current_pods<'a>(dep: &Deployment, pods: &'a [Pod]) -> Vec<&'a Pod> {
    let want = dep
        .spec
        .template
        .metadata
        .as_ref()
        .and_then(|m| m.annotations.as_ref())
        .and_then(|a| a.get(CONFIG_HASH_ANNOTATION));
    let mut v: Vec<&Pod> = pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| want.is_none() || p.annotations().get(CONFIG_HASH_ANNOTATION) == want)
        .collect();
    v.sort_by_key(|p| p.name_any());
    v
}

/// The `Progressing=False ProgressDeadlineExceeded` condition's message, when it is about the
/// current generation (the controller resets it when a new rollout starts).
fn deadline_exceeded(dep: &Deployment) -> Option<String> {
    let st = dep.status.as_ref()?;
    if st.observed_generation < dep.metadata.generation {
        return None;
    }
    st.conditions
        .iter()
        .flatten()
        .find(|c| {
            c.type_.as_deref() == Some("Progressing")
                && c.status.as_deref() == Some("False")
                && c.reason.as_deref() == Some(DEADLINE_REASON)
        })
        .map(|c| excerpt(c.message.as_deref().unwrap_or(DEADLINE_REASON)))
}

/// Every container status of a pod, init containers first, with what to call it.
fn statuses(pod: &Pod) -> Vec<(&'static str, &ContainerStatus)> {
    let st = pod.status.as_ref();
    let init = st
        .and_then(|s| s.init_container_statuses.as_ref())
        .into_iter()
        .flatten()
        .map(|c| ("init container", c));
    let main = st
        .and_then(|s| s.container_statuses.as_ref())
        .into_iter()
        .flatten()
        .map(|c| ("container", c));
    init.chain(main).collect()
}

/// A container of `pod` waiting in one of the [`FAILING_WAITING`] reasons: (reason, what).
fn failing_container(pod: &Pod) -> Option<(String, String)> {
    statuses(pod).into_iter().find_map(|(kind, cs)| {
        let w = cs.state.as_ref()?.waiting.as_ref()?;
        let reason = w.reason.as_deref()?;
        if !FAILING_WAITING.contains(&reason) {
            return None;
        }
        let mut what = format!(
            "{kind} {} of pod {} is in {reason}",
            cs.name,
            pod.name_any()
        );
        match last_termination(cs) {
            Some(t) => what.push_str(&format!("; {t}")),
            // Image and configuration errors never ran: the kubelet's own message says why.
            None => {
                if let Some(m) = w.message.as_deref().filter(|m| !m.trim().is_empty()) {
                    what.push_str(&format!(": {}", excerpt(m)));
                }
            }
        }
        Some((reason.to_string(), what))
    })
}

/// What keeps a current pod from being available (for a Deployment past its deadline).
fn not_ready(pod: &Pod) -> Option<String> {
    let pname = pod.name_any();
    let st = pod.status.as_ref();
    if let Some(c) = st
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .find(|c| c.type_ == "PodScheduled" && c.status == "False")
    {
        let why = c
            .message
            .as_deref()
            .or(c.reason.as_deref())
            .unwrap_or("no reason given");
        return Some(format!("pod {pname} is not scheduled: {}", excerpt(why)));
    }
    for (kind, cs) in statuses(pod) {
        if cs.ready {
            continue;
        }
        let state = cs.state.as_ref();
        let now = if let Some(w) = state.and_then(|s| s.waiting.as_ref()) {
            format!(
                "is waiting ({})",
                w.reason.as_deref().unwrap_or("no reason")
            )
        } else if state.and_then(|s| s.running.as_ref()).is_some() {
            "is running but not ready".to_string()
        } else if let Some(t) = state.and_then(|s| s.terminated.as_ref()) {
            format!("terminated with exit code {}", t.exit_code)
        } else {
            "has no state yet".to_string()
        };
        let mut what = format!("{kind} {} of pod {pname} {now}", cs.name);
        if let Some(t) = last_termination(cs) {
            what.push_str(&format!("; {t}"));
        }
        return Some(what);
    }
    if st.is_none_or(|s| s.container_statuses.as_ref().is_none_or(Vec::is_empty)) {
        return Some(format!("pod {pname} has no container status yet"));
    }
    None
}

/// The container's last termination: exit code, reason, message excerpt.
fn last_termination(cs: &ContainerStatus) -> Option<String> {
    let t = cs.last_state.as_ref()?.terminated.as_ref()?;
    let mut s = format!(
        "restarted {} times, last exit code {}",
        cs.restart_count, t.exit_code
    );
    if let Some(r) = t.reason.as_deref().filter(|r| !r.is_empty()) {
        s.push_str(&format!(" ({r})"));
    }
    match t.message.as_deref().map(excerpt).filter(|m| !m.is_empty()) {
        Some(m) => s.push_str(&format!(": {m}")),
        None => s.push_str(", no termination message"),
    }
    Some(s)
}

/// One line of `msg` fit for a condition: its last non-empty line (a traceback ends with the
/// exception), credentials masked, at most [`MESSAGE_LIMIT`] characters.
pub fn excerpt(msg: &str) -> String {
    let line = msg
        .lines()
        .map(str::trim)
        .rfind(|l| !l.is_empty())
        .unwrap_or("");
    let masked = mask_credentials(line);
    if masked.chars().count() <= MESSAGE_LIMIT {
        return masked;
    }
    let mut cut: String = masked.chars().take(MESSAGE_LIMIT - 1).collect();
    cut.push('…');
    cut
}

/// `msg` with the password of `scheme://user:password@host` and the value after `password=`,
/// `password: ` or `"password": ` (any case, also `passwd`, `secret`, `token`) masked.
pub fn mask_credentials(msg: &str) -> String {
    let mut out = mask_url_passwords(msg);
    for key in ["password", "passwd", "secret", "token"] {
        out = mask_after_key(&out, key);
    }
    out
}

fn mask_url_passwords(msg: &str) -> String {
    let mut out = String::with_capacity(msg.len());
    let mut rest = msg;
    while let Some(i) = rest.find("://") {
        let (head, tail) = rest.split_at(i + 3);
        out.push_str(head);
        // The authority ends at the first '/', whitespace or quote; credentials end at its
        // last '@'.
        let end = tail
            .find(|c: char| c == '/' || c.is_whitespace() || c == '"' || c == '\'')
            .unwrap_or(tail.len());
        let authority = &tail[..end];
        match authority.rfind('@') {
            Some(at) => {
                let userinfo = &authority[..at];
                match userinfo.find(':') {
                    Some(colon) => {
                        out.push_str(&userinfo[..colon]);
                        out.push_str(":***");
                    }
                    None => out.push_str(userinfo),
                }
                out.push_str(&authority[at..]);
            }
            None => out.push_str(authority),
        }
        rest = &tail[end..];
    }
    out.push_str(rest);
    out
}

fn mask_after_key(msg: &str, key: &str) -> String {
    let lower = msg.to_ascii_lowercase();
    let mut out = String::with_capacity(msg.len());
    let mut pos = 0;
    while let Some(found) = lower[pos..].find(key) {
        let k_end = pos + found + key.len();
        out.push_str(&msg[pos..k_end]);
        // Separator: optional quote, then '=' or ':', then spaces and an optional quote.
        let after = &msg[k_end..];
        let sep_len = after
            .char_indices()
            .take_while(|(_, c)| matches!(c, '"' | '\'' | ' '))
            .count();
        let after_sep = &after[sep_len..];
        if !after_sep.starts_with(['=', ':']) {
            pos = k_end;
            continue;
        }
        let mut v = 1 + after_sep[1..]
            .chars()
            .take_while(|c| *c == ' ' || *c == '"' || *c == '\'')
            .count();
        out.push_str(&after[..sep_len]);
        out.push_str(&after_sep[..v]);
        let value_len = after_sep[v..]
            .find(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | ',' | ';' | '&' | ')'))
            .unwrap_or(after_sep.len() - v);
        if value_len > 0 {
            out.push_str("***");
        }
        v += value_len;
        pos = k_end + sep_len + v;
    }
    out.push_str(&msg[pos..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn dep(hash: &str, generation: i64, conditions: serde_json::Value) -> Deployment {
        serde_json::from_value(json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "cloud-nova-api", "namespace": "os", "generation": generation},
            "spec": {"selector": {"matchLabels": {"app.kubernetes.io/component": "api"}},
                "template": {"metadata": {"annotations": {CONFIG_HASH_ANNOTATION: hash}},
                    "spec": {"containers": [{"name": "api", "image": "nova"}]}}},
            "status": {"observedGeneration": 2, "replicas": 1, "unavailableReplicas": 1,
                "conditions": conditions}
        }))
        .expect("deployment")
    }

    fn pod(name: &str, hash: &str, status: serde_json::Value) -> Pod {
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "os",
                "annotations": {CONFIG_HASH_ANNOTATION: hash}},
            "spec": {"containers": [{"name": "api", "image": "nova"}]},
            "status": status
        }))
        .expect("pod")
    }

    const TRACEBACK: &str = "Traceback (most recent call last):\n  File \"/opt/openstack/bin/nova-api\", line 10, in <module>\n    sys.exit(main())\noslo_config.cfg.ConfigFilesNotFoundError: Failed to find some config files: /etc/nova/api-paste.ini\n";

    fn crash_looping(message: &str) -> serde_json::Value {
        json!({"phase": "Running", "containerStatuses": [{
            "name": "api", "image": "nova", "imageID": "", "ready": false, "restartCount": 5,
            "state": {"waiting": {"reason": "CrashLoopBackOff",
                "message": "back-off 2m40s restarting failed container=api pod=cloud-nova-api-7d-x"}},
            "lastState": {"terminated": {"exitCode": 1, "reason": "Error", "message": message}}}]})
    }

    fn progressing() -> serde_json::Value {
        json!([{"type": "Progressing", "status": "True", "reason": "ReplicaSetUpdated",
            "message": "ReplicaSet \"cloud-nova-api-7d\" is progressing."}])
    }

    fn deadline() -> serde_json::Value {
        json!([{"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded",
            "message": "ReplicaSet \"cloud-nova-api-7d\" has timed out progressing."},
            {"type": "Available", "status": "False", "reason": "MinimumReplicasUnavailable"}])
    }

    fn degraded(s: Option<State>) -> (String, String) {
        match s {
            Some(State::Degraded { reason, message }) => (reason, message),
            other => panic!("not Degraded: {other:?}"),
        }
    }

    #[test]
    fn a_crash_looping_container_is_degraded_with_its_last_termination() {
        let d = dep("h2", 2, progressing());
        let (reason, message) = degraded(diagnose(
            &d,
            &[pod("cloud-nova-api-7d-x", "h2", crash_looping(TRACEBACK))],
        ));
        assert_eq!(reason, "CrashLoopBackOff");
        assert_eq!(
            message,
            "Deployment cloud-nova-api: container api of pod cloud-nova-api-7d-x is in CrashLoopBackOff; \
             restarted 5 times, last exit code 1 (Error): oslo_config.cfg.ConfigFilesNotFoundError: \
             Failed to find some config files: /etc/nova/api-paste.ini"
        );
    }

    #[test]
    fn a_rollout_in_progress_is_not_degraded() {
        let d = dep("h2", 2, progressing());
        let starting = json!({"phase": "Running", "containerStatuses": [{
            "name": "api", "image": "nova", "imageID": "", "ready": false, "restartCount": 0,
            "state": {"running": {"startedAt": "2026-12-06T08:00:00Z"}}}]});
        assert_eq!(diagnose(&d, &[pod("p", "h2", starting)]), None);
        assert_eq!(diagnose(&d, &[]), None);
    }

    #[test]
    fn an_old_templates_crash_loop_says_nothing_about_the_rollout() {
        let d = dep("h2", 2, progressing());
        assert_eq!(
            diagnose(&d, &[pod("old", "h1", crash_looping(TRACEBACK))]),
            None
        );
    }

    #[test]
    fn a_deadline_passed_is_degraded_naming_what_is_not_ready() {
        let d = dep("h2", 2, deadline());
        let never_ready = json!({"phase": "Running", "containerStatuses": [{
            "name": "api", "image": "nova", "imageID": "", "ready": false, "restartCount": 2,
            "state": {"running": {"startedAt": "2026-12-06T08:00:00Z"}},
            "lastState": {"terminated": {"exitCode": 137, "reason": "Error"}}}]});
        let (reason, message) = degraded(diagnose(&d, &[pod("p1", "h2", never_ready)]));
        assert_eq!(reason, "ProgressDeadlineExceeded");
        assert_eq!(
            message,
            "Deployment cloud-nova-api exceeded its progress deadline (ReplicaSet \"cloud-nova-api-7d\" \
             has timed out progressing.); container api of pod p1 is running but not ready; \
             restarted 2 times, last exit code 137 (Error), no termination message"
        );
        // Unschedulable pods.
        let pending = json!({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
            "reason": "Unschedulable", "message": "0/3 nodes are available: 3 Insufficient memory."}]});
        let (_, message) = degraded(diagnose(&d, &[pod("p2", "h2", pending)]));
        assert!(
            message.ends_with(
                "pod p2 is not scheduled: 0/3 nodes are available: 3 Insufficient memory."
            ),
            "{message}"
        );
        let (_, message) = degraded(diagnose(&d, &[]));
        assert!(
            message.ends_with("no pod of the current template exists"),
            "{message}"
        );
    }

    #[test]
    fn a_deadline_of_an_earlier_generation_is_not_this_rollouts() {
        // observedGeneration 2 < generation 3: the controller has not seen the new spec yet.
        let d = dep("h3", 3, deadline());
        assert_eq!(diagnose(&d, &[]), None);
    }

    #[test]
    fn image_and_config_errors_carry_the_kubelets_message() {
        let d = dep("h2", 2, progressing());
        let pull = json!({"phase": "Pending", "containerStatuses": [{
            "name": "api", "image": "nova", "imageID": "", "ready": false, "restartCount": 0,
            "state": {"waiting": {"reason": "ImagePullBackOff",
                "message": "Back-off pulling image \"localhost/openstack-nova:2026.1\""}}}]});
        let (reason, message) = degraded(diagnose(&d, &[pod("p", "h2", pull)]));
        assert_eq!(reason, "ImagePullBackOff");
        assert!(
            message.ends_with(
                "is in ImagePullBackOff: Back-off pulling image \"localhost/openstack-nova:2026.1\""
            ),
            "{message}"
        );
        let init = json!({"phase": "Pending", "initContainerStatuses": [{
            "name": "wait", "image": "nova", "imageID": "", "ready": false, "restartCount": 3,
            "state": {"waiting": {"reason": "CrashLoopBackOff"}},
            "lastState": {"terminated": {"exitCode": 2, "message": "boom"}}}]});
        let (_, message) = degraded(diagnose(&d, &[pod("p", "h2", init)]));
        assert!(
            message.contains("init container wait of pod p is in CrashLoopBackOff; restarted 3 times, last exit code 2: boom"),
            "{message}"
        );
    }

    #[test]
    fn termination_messages_are_one_masked_line_of_bounded_length() {
        let leaked = "sqlalchemy.exc.OperationalError: (2003) mysql+pymysql://nova:s3cr3t-pw@db.example:3306/nova?ssl_ca=/x failed";
        let m = excerpt(leaked);
        assert!(!m.contains("s3cr3t-pw"), "{m}");
        assert!(
            m.contains("mysql+pymysql://nova:***@db.example:3306/nova"),
            "{m}"
        );
        for (input, secret) in [
            ("auth failed: password=hunter2 user=admin", "hunter2"),
            ("{\"password\": \"hunter2\", \"user\": \"a\"}", "hunter2"),
            ("PASSWORD: hunter2", "hunter2"),
            ("transport_url = rabbit://nova:hunter2@mq:5672/", "hunter2"),
            ("X-Auth-Token: gAAAAABtoken", "gAAAAABtoken"),
        ] {
            let m = excerpt(input);
            assert!(!m.contains(secret), "{input} -> {m}");
            assert!(m.contains("***"), "{input} -> {m}");
        }
        // Text without credentials is kept as it is.
        let plain =
            "ConnectionRefusedError: [Errno 111] Connection refused (http://keystone:5000/v3)";
        assert_eq!(excerpt(plain), plain);
        // Bounded, on a character boundary.
        let long = "é".repeat(1000);
        let m = excerpt(&long);
        assert_eq!(m.chars().count(), MESSAGE_LIMIT);
        assert!(m.ends_with('…'));
        assert_eq!(excerpt("\n\n  \n"), "");
        assert_eq!(excerpt(TRACEBACK).lines().count(), 1);
    }
}
