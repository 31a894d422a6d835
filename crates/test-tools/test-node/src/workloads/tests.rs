use super::*;
use serde_json::json;

fn now() -> Timestamp {
    "2026-01-01T00:10:00Z".parse().unwrap()
}

fn dep(replicas: i32, image: &str) -> Deployment {
    serde_json::from_value(json!({
        "metadata": {"name": "api", "namespace": "ns", "uid": "d-1", "generation": 2},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "api"}},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
            "template": {"metadata": {"labels": {"app": "api"}},
                         "spec": {"containers": [{"name": "c", "image": image}]}}
        }
    }))
    .unwrap()
}

fn pod_of(d: &Deployment, name: &str, hash: &str, ready: bool, phase: &str) -> Pod {
    let t = &d.spec.template;
    let mut p = pod_from_template(
        t,
        name,
        "ns",
        "node",
        owner_ref("apps/v1", "Deployment", &d.metadata),
        BTreeMap::from([(TEMPLATE_HASH_LABEL.to_string(), hash.to_string())]),
    );
    p.status = Some(
        serde_json::from_value(json!({"phase": phase, "conditions": [
            {"type": "Ready", "status": if ready {"True"} else {"False"}}]}))
        .unwrap(),
    );
    p
}

#[test]
fn a_new_deployment_gets_its_replicas_bound_to_the_node_and_its_status() {
    let d = dep(3, "img:1");
    let plan = plan_deployment(&d, &[], now());
    assert_eq!(plan.create, 3);
    assert!(plan.delete.is_empty());
    let st = plan.status.unwrap();
    assert_eq!(st.observed_generation, Some(2));
    assert_eq!(st.ready_replicas, Some(0));
    let avail = &st.conditions.unwrap()[0];
    assert_eq!(
        (avail.type_.as_deref(), avail.status.as_deref()),
        (Some("Available"), Some("False"))
    );

    let t = &d.spec.template;
    let p = pod_from_template(
        t,
        "api-x",
        "ns",
        "node-1",
        owner_ref("apps/v1", "Deployment", &d.metadata),
        BTreeMap::new(),
    );
    assert_eq!(p.spec.unwrap().node_name.as_deref(), Some("node-1"));
    assert_eq!(p.metadata.labels.unwrap()["app"], "api");
    assert_eq!(p.metadata.owner_references.unwrap()[0].uid, "d-1");
}

#[test]
fn all_ready_is_available_and_complete_and_written_once() {
    let d = dep(2, "img:1");
    let h = template_hash(&d.spec.template);
    let pods = [
        pod_of(&d, "a", &h, true, "Running"),
        pod_of(&d, "b", &h, true, "Running"),
    ];
    let plan = plan_deployment(&d, &pods, now());
    assert_eq!((plan.create, plan.delete.len()), (0, 0));
    let st = plan.status.unwrap();
    assert_eq!(st.available_replicas, Some(2));
    let conds = st.conditions.clone().unwrap();
    assert_eq!(conds[0].status.as_deref(), Some("True"));
    assert_eq!(conds[1].reason.as_deref(), Some("NewReplicaSetAvailable"));
    let mut d2 = d.clone();
    d2.status = Some(st);
    let later = now()
        .checked_add(jiff::SignedDuration::from_secs(30))
        .unwrap();
    assert_eq!(plan_deployment(&d2, &pods, later).status, None);
}

#[test]
fn a_rolling_update_surges_one_and_removes_old_pods_only_while_enough_are_ready() {
    let old = dep(2, "img:1");
    let oh = template_hash(&old.spec.template);
    let d = dep(2, "img:2");
    let h = template_hash(&d.spec.template);
    assert_ne!(oh, h);
    let mut pods = vec![
        pod_of(&d, "o1", &oh, true, "Running"),
        pod_of(&d, "o2", &oh, true, "Running"),
    ];
    let plan = plan_deployment(&d, &pods, now());
    assert_eq!(plan.create, 1, "maxSurge 1");
    assert!(
        plan.delete.is_empty(),
        "maxUnavailable 0: no old pod goes yet"
    );
    pods.push(pod_of(&d, "n1", &h, false, "Running"));
    let plan = plan_deployment(&d, &pods, now());
    assert_eq!((plan.create, plan.delete.len()), (0, 0));
    pods[2] = pod_of(&d, "n1", &h, true, "Running");
    let plan = plan_deployment(&d, &pods, now());
    assert_eq!(plan.delete.len(), 1, "three Ready, two needed");
}

#[test]
fn a_deployment_that_makes_no_progress_exceeds_its_deadline() {
    let d = dep(1, "img:1");
    let h = template_hash(&d.spec.template);
    let pods = [pod_of(&d, "a", &h, false, "Running")];
    let first = plan_deployment(&d, &pods, now());
    let mut d2 = d.clone();
    d2.status = first.status;
    let later = now()
        .checked_add(jiff::SignedDuration::from_secs(601))
        .unwrap();
    let st = plan_deployment(&d2, &pods, later).status.unwrap();
    let p = &st.conditions.unwrap()[1];
    assert_eq!(
        (p.status.as_deref(), p.reason.as_deref()),
        (Some("False"), Some("ProgressDeadlineExceeded"))
    );
}

fn job(backoff: i32) -> Job {
    serde_json::from_value(json!({
        "metadata": {"name": "db-init", "namespace": "ns", "uid": "j-1"},
        "spec": {"backoffLimit": backoff, "template": {"spec": {
            "restartPolicy": "Never", "containers": [{"name": "c", "image": "i"}]}}}
    }))
    .unwrap()
}

fn job_pod(j: &Job, name: &str, phase: &str, finished: &str) -> Pod {
    let t = &j.spec.as_ref().unwrap().template;
    let mut p = pod_from_template(
        t,
        name,
        "ns",
        "node",
        owner_ref("batch/v1", "Job", &j.metadata),
        BTreeMap::new(),
    );
    p.status = Some(
        serde_json::from_value(json!({"phase": phase, "containerStatuses": [{
            "name": "c", "image": "i", "imageID": "", "ready": false, "restartCount": 0,
            "state": {"terminated": {"exitCode": 1, "finishedAt": finished}}}]}))
        .unwrap(),
    );
    p
}

#[test]
fn a_job_runs_one_pod_then_completes() {
    let j = job(2);
    let plan = plan_job(&j, &[], now());
    assert!(plan.create);
    let ok = job_pod(&j, "p1", "Succeeded", "2026-01-01T00:09:00Z");
    let plan = plan_job(&j, &[ok], now());
    assert!(!plan.create);
    let st = plan.status.unwrap();
    let c = &st.conditions.unwrap()[0];
    assert_eq!((c.type_.as_str(), c.status.as_str()), ("Complete", "True"));
    assert_eq!(st.succeeded, Some(1));
}

#[test]
fn a_failed_job_pod_is_retried_after_the_back_off_until_the_limit() {
    let j = job(1);
    let f1 = job_pod(&j, "p1", "Failed", "2026-01-01T00:09:55Z");
    let plan = plan_job(&j, std::slice::from_ref(&f1), now());
    assert!(!plan.create, "10 s back-off, 5 s passed");
    assert_eq!(plan.wait, Some(Duration::from_secs(5)));
    let later = now()
        .checked_add(jiff::SignedDuration::from_secs(5))
        .unwrap();
    assert!(plan_job(&j, std::slice::from_ref(&f1), later).create);
    let f2 = job_pod(&j, "p2", "Failed", "2026-01-01T00:09:58Z");
    let plan = plan_job(&j, &[f1, f2], now());
    assert!(!plan.create);
    let c = &plan.status.unwrap().conditions.unwrap()[0];
    assert_eq!(
        (c.type_.as_str(), c.reason.as_deref()),
        ("Failed", Some("BackoffLimitExceeded"))
    );
}
