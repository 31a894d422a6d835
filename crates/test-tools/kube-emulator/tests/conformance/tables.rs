//! Server-side Tables (`Accept: application/json;as=Table;v=v1;g=meta.k8s.io`),
//! the shape a real kube-apiserver returns to `kubectl get`.
//!
//! Built-in kinds: the column definitions of `AddHandlers` and the cells of
//! `printPod`, `printNode`, `printDeployment`, `printJob`, `printService` and
//! `printEvent` in kubernetes `pkg/printers/internalversion/printers.go`; the
//! server generates the wide form (`pkg/printers/storage`,
//! `GenerateOptions{Wide: true}`), so priority-1 cells are always present.
//! Custom resources: apiextensions-apiserver's `tableconvertor` (client-go
//! JSONPath with missing keys allowed; `integer`/`number`/`boolean` cells as
//! JSON values, `date` as an age, `string` as printed text) with the project's
//! real CRDs from `deploy/`.

use std::path::Path;

use jiff::{SignedDuration, Timestamp};
use serde_json::{Value, json};

use crate::common::*;

const TABLE_ACCEPT: &str = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json";

struct Http {
    base: String,
    http: reqwest::Client,
}

impl Http {
    fn new(env: &Env) -> Self {
        Http {
            base: env.handle.url(),
            http: reqwest::Client::new(),
        }
    }

    /// POST an object to a collection and set its status through `/status`.
    async fn create(&self, collection: &str, obj: Value) -> Value {
        let r = self
            .http
            .post(format!("{}{collection}", self.base))
            .json(&obj)
            .send()
            .await
            .unwrap();
        assert!(
            r.status().is_success(),
            "create {collection}: {}",
            r.text().await.unwrap()
        );
        let created: Value = r.json().await.unwrap();
        if let Some(status) = obj.get("status") {
            let name = created["metadata"]["name"].as_str().unwrap();
            let r = self
                .http
                .patch(format!("{}{collection}/{name}/status", self.base))
                .header("content-type", "application/merge-patch+json")
                .json(&json!({"status": status}))
                .send()
                .await
                .unwrap();
            assert!(
                r.status().is_success(),
                "status of {name}: {}",
                r.text().await.unwrap()
            );
            return r.json().await.unwrap();
        }
        created
    }

    async fn table(&self, path: &str) -> Value {
        let r = self
            .http
            .get(format!("{}{path}", self.base))
            .header("accept", TABLE_ACCEPT)
            .send()
            .await
            .unwrap();
        assert!(
            r.status().is_success(),
            "table {path}: {}",
            r.text().await.unwrap()
        );
        let t: Value = r.json().await.unwrap();
        assert_eq!(t["kind"], "Table");
        assert_eq!(t["apiVersion"], "meta.k8s.io/v1");
        t
    }
}

/// The column definitions as (name, type, format, priority).
fn columns(t: &Value) -> Vec<(String, String, String, i64)> {
    t["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap().to_string(),
                c["type"].as_str().unwrap().to_string(),
                c["format"].as_str().unwrap().to_string(),
                c["priority"].as_i64().unwrap(),
            )
        })
        .collect()
}

fn cols(spec: &[(&str, &str, &str, i64)]) -> Vec<(String, String, String, i64)> {
    spec.iter()
        .map(|(n, t, f, p)| (n.to_string(), t.to_string(), f.to_string(), *p))
        .collect()
}

/// The cells of the row whose object is named `name` (rows carry PartialObjectMetadata).
fn cells(t: &Value, name: &str) -> Vec<Value> {
    let row = t["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["object"]["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no row for {name} in {t:#}"));
    assert_eq!(row["object"]["kind"], "PartialObjectMetadata");
    let mut cells = row["cells"].as_array().unwrap().clone();
    // the objects are seconds old; a slow run may print "1s" or "2s" for them
    for (i, c) in t["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .enumerate()
    {
        if c["name"] == "Age"
            && let Some(age) = cells[i].as_str()
            && age
                .strip_suffix('s')
                .and_then(|n| n.parse::<u32>().ok())
                .is_some_and(|n| n < 60)
        {
            cells[i] = json!("0s");
        }
    }
    cells
}

/// An RFC 3339 time `secs` seconds ago.
fn ago(secs: i64) -> String {
    (Timestamp::now() - SignedDuration::from_secs(secs))
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// 3 h 30 s ago prints "3h" for the next minutes; 10 days ago "10d".
const H3: i64 = 3 * 3600 + 30;
const D10: i64 = 10 * 86400 + 30;

fn pod(name: &str, spec: Value, status: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec, "status": status})
}

fn container(name: &str) -> Value {
    json!({"name": name, "image": "busybox"})
}

#[tokio::test]
async fn pods_print_as_kubectl_printers() {
    let env = start().await;
    let h = Http::new(&env);
    let pods = "/api/v1/namespaces/default/pods";
    h.create(
        pods,
        pod(
            "running",
            json!({"containers": [container("a"), container("b")], "nodeName": "node-a",
                   "readinessGates": [{"conditionType": "example.com/lb"}, {"conditionType": "example.com/dns"}]}),
            json!({"phase": "Running", "podIP": "10.0.0.5", "nominatedNodeName": "node-b",
                   "conditions": [{"type": "Ready", "status": "True"}, {"type": "example.com/lb", "status": "True"},
                                  {"type": "example.com/dns", "status": "False"}],
                   "containerStatuses": [
                       {"name": "a", "ready": true, "restartCount": 2, "image": "busybox", "imageID": "", "state": {"running": {"startedAt": ago(60)}},
                        "lastState": {"terminated": {"exitCode": 1, "finishedAt": ago(H3)}}},
                       {"name": "b", "ready": true, "restartCount": 0, "image": "busybox", "imageID": "", "state": {"running": {"startedAt": ago(60)}}}]}),
        ),
    )
    .await;
    h.create(
        pods,
        pod(
            "crashing",
            json!({"containers": [container("a")], "nodeName": "node-a"}),
            json!({"phase": "Running", "containerStatuses": [
                {"name": "a", "ready": false, "restartCount": 5, "image": "busybox", "imageID": "",
                 "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                 "lastState": {"terminated": {"exitCode": 2, "finishedAt": ago(D10)}}}]}),
        ),
    )
    .await;
    h.create(
        pods,
        pod(
            "init-second",
            json!({"initContainers": [container("i1"), container("i2")], "containers": [container("a")]}),
            json!({"phase": "Pending", "initContainerStatuses": [
                {"name": "i1", "ready": false, "restartCount": 0, "image": "busybox", "imageID": "", "state": {"terminated": {"exitCode": 0}}},
                {"name": "i2", "ready": false, "restartCount": 0, "image": "busybox", "imageID": "", "state": {"running": {}}}]}),
        ),
    )
    .await;
    h.create(
        pods,
        pod(
            "init-failed",
            json!({"initContainers": [container("i1")], "containers": [container("a")]}),
            json!({"phase": "Pending", "initContainerStatuses": [
                {"name": "i1", "ready": false, "restartCount": 3, "image": "busybox", "imageID": "",
                 "state": {"terminated": {"exitCode": 1, "reason": "Error"}},
                 "lastState": {"terminated": {"exitCode": 1, "finishedAt": ago(H3)}}}]}),
        ),
    )
    .await;
    h.create(
        pods,
        pod(
            "init-killed",
            json!({"initContainers": [container("i1")], "containers": [container("a")]}),
            json!({"phase": "Pending", "initContainerStatuses": [
                {"name": "i1", "ready": false, "restartCount": 0, "image": "busybox", "imageID": "",
                 "state": {"terminated": {"exitCode": 137, "signal": 9}}}]}),
        ),
    )
    .await;
    h.create(
        pods,
        pod(
            "initializing",
            json!({"initContainers": [container("i1")], "containers": [container("a")]}),
            json!({"phase": "Pending", "conditions": [{"type": "Initialized", "status": "True"}],
                   "initContainerStatuses": [
                       {"name": "i1", "ready": true, "restartCount": 0, "image": "busybox", "imageID": "", "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}],
                   "containerStatuses": [
                       {"name": "a", "ready": false, "restartCount": 0, "image": "busybox", "imageID": "", "state": {"waiting": {"reason": "PodInitializing"}}}]}),
        ),
    )
    .await;
    h.create(
        pods,
        pod(
            "sidecar",
            json!({"initContainers": [{"name": "proxy", "image": "envoy", "restartPolicy": "Always"}], "containers": [container("a")]}),
            json!({"phase": "Running", "conditions": [{"type": "Initialized", "status": "True"}, {"type": "Ready", "status": "True"}],
                   "initContainerStatuses": [
                       {"name": "proxy", "ready": true, "started": true, "restartCount": 1, "image": "envoy", "imageID": "",
                        "state": {"running": {}}, "lastState": {"terminated": {"exitCode": 1, "finishedAt": ago(H3)}}}],
                   "containerStatuses": [
                       {"name": "a", "ready": true, "restartCount": 0, "image": "busybox", "imageID": "", "state": {"running": {}}}]}),
        ),
    )
    .await;
    h.create(
        pods,
        pod(
            "done",
            json!({"containers": [container("a")], "nodeName": "node-a"}),
            json!({"phase": "Succeeded", "podIPs": [{"ip": "10.0.0.9"}], "containerStatuses": [
                {"name": "a", "ready": false, "restartCount": 0, "image": "busybox", "imageID": "",
                 "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}]}),
        ),
    )
    .await;
    h.create(
        pods,
        pod(
            "gated",
            json!({"containers": [container("a")], "schedulingGates": [{"name": "example.com/wait"}]}),
            json!({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}]}),
        ),
    )
    .await;
    h.create(
        pods,
        pod("fresh", json!({"containers": [container("a")]}), json!({})),
    )
    .await;
    // bound to a node, so a delete only sets deletionTimestamp (graceful deletion)
    h.create(
        pods,
        pod(
            "leaving",
            json!({"containers": [container("a")], "nodeName": "node-a"}),
            json!({"phase": "Running"}),
        ),
    )
    .await;
    let r = h
        .http
        .delete(format!("{}{pods}/leaving", h.base))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success());

    let t = h.table(pods).await;
    assert_eq!(
        columns(&t),
        cols(&[
            ("Name", "string", "name", 0),
            ("Ready", "string", "", 0),
            ("Status", "string", "", 0),
            ("Restarts", "string", "", 0),
            ("Age", "string", "", 0),
            ("IP", "string", "", 1),
            ("Node", "string", "", 1),
            ("Nominated Node", "string", "", 1),
            ("Readiness Gates", "string", "", 1),
        ])
    );
    assert_eq!(
        t["columnDefinitions"][3]["description"],
        "The number of times the containers in this pod have been restarted and when the last container in this pod has restarted."
    );
    let c = cells(&t, "running");
    assert_eq!(
        c,
        vec![
            json!("running"),
            json!("2/2"),
            json!("Running"),
            json!("2 (3h ago)"),
            json!("0s"),
            json!("10.0.0.5"),
            json!("node-a"),
            json!("node-b"),
            json!("1/2"),
        ]
    );
    let status_of = |name: &str| {
        let c = cells(&t, name);
        (c[1].clone(), c[2].clone(), c[3].clone())
    };
    assert_eq!(
        status_of("crashing"),
        (
            json!("0/1"),
            json!("CrashLoopBackOff"),
            json!("5 (10d ago)")
        )
    );
    assert_eq!(
        status_of("init-second"),
        (json!("0/1"), json!("Init:1/2"), json!("0"))
    );
    assert_eq!(
        status_of("init-failed"),
        (json!("0/1"), json!("Init:Error"), json!("3 (3h ago)"))
    );
    assert_eq!(status_of("init-killed").1, json!("Init:Signal:9"));
    assert_eq!(
        status_of("initializing"),
        (json!("0/1"), json!("PodInitializing"), json!("0"))
    );
    // a restartable init container (sidecar) counts in READY and RESTARTS
    assert_eq!(
        status_of("sidecar"),
        (json!("2/2"), json!("Running"), json!("1 (3h ago)"))
    );
    assert_eq!(
        status_of("done"),
        (json!("0/1"), json!("Completed"), json!("0"))
    );
    assert_eq!(status_of("gated").1, json!("SchedulingGated"));
    assert_eq!(status_of("leaving").1, json!("Terminating"));
    let fresh = cells(&t, "fresh");
    assert_eq!(
        fresh,
        vec![
            json!("fresh"),
            json!("0/1"),
            json!("Pending"),
            json!("0"),
            json!("0s"),
            json!("<none>"),
            json!("<none>"),
            json!("<none>"),
            json!("<none>"),
        ]
    );
    assert_eq!(
        cells(&t, "done")[5],
        json!("10.0.0.9"),
        "podIPs[0] when podIP is unset"
    );
    // a finished pod's row carries the Completed row condition
    let done_row = t["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["object"]["metadata"]["name"] == "done")
        .unwrap();
    assert_eq!(done_row["conditions"][0]["type"], "Completed");
    assert_eq!(done_row["conditions"][0]["reason"], "Succeeded");

    // one object: the same columns, one row, that object's resourceVersion
    let one = h.table(&format!("{pods}/crashing")).await;
    assert_eq!(one["rows"].as_array().unwrap().len(), 1);
    assert_eq!(columns(&one).len(), 9);
    let rv = cells(&one, "crashing");
    assert_eq!(rv[2], "CrashLoopBackOff");
}

#[tokio::test]
async fn nodes_print_status_roles_and_node_info() {
    let env = start().await;
    let h = Http::new(&env);
    let nodes = "/api/v1/nodes";
    h.create(
        nodes,
        json!({"apiVersion": "v1", "kind": "Node",
               "metadata": {"name": "cp-1", "labels": {"node-role.kubernetes.io/control-plane": "", "kubernetes.io/role": "master"}},
               "spec": {"unschedulable": true},
               "status": {"conditions": [{"type": "MemoryPressure", "status": "False"}, {"type": "Ready", "status": "True"}],
                          "addresses": [{"type": "Hostname", "address": "cp-1"}, {"type": "InternalIP", "address": "192.0.2.10"},
                                        {"type": "ExternalIP", "address": "203.0.113.10"}],
                          "nodeInfo": {"kubeletVersion": "v1.36.0", "osImage": "Debian GNU/Linux 13 (trixie)", "kernelVersion": "6.12.0-1-amd64",
                                       "containerRuntimeVersion": "containerd://2.1.0", "machineID": "", "systemUUID": "", "bootID": "",
                                       "kubeProxyVersion": "", "operatingSystem": "linux", "architecture": "amd64"}}}),
    )
    .await;
    h.create(
        nodes,
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "down"},
               "status": {"conditions": [{"type": "Ready", "status": "Unknown"}]}}),
    )
    .await;
    h.create(
        nodes,
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "new"}}),
    )
    .await;

    let t = h.table(nodes).await;
    assert_eq!(
        columns(&t),
        cols(&[
            ("Name", "string", "name", 0),
            ("Status", "string", "", 0),
            ("Roles", "string", "", 0),
            ("Age", "string", "", 0),
            ("Version", "string", "", 0),
            ("Internal-IP", "string", "", 1),
            ("External-IP", "string", "", 1),
            ("OS-Image", "string", "", 1),
            ("Kernel-Version", "string", "", 1),
            ("Container-Runtime", "string", "", 1),
        ])
    );
    assert_eq!(
        cells(&t, "cp-1"),
        vec![
            json!("cp-1"),
            json!("Ready,SchedulingDisabled"),
            json!("control-plane,master"),
            json!("0s"),
            json!("v1.36.0"),
            json!("192.0.2.10"),
            json!("203.0.113.10"),
            json!("Debian GNU/Linux 13 (trixie)"),
            json!("6.12.0-1-amd64"),
            json!("containerd://2.1.0"),
        ]
    );
    // any status but True is NotReady; no Ready condition at all is Unknown
    assert_eq!(cells(&t, "down")[1], "NotReady");
    assert_eq!(
        cells(&t, "new"),
        vec![
            json!("new"),
            json!("Unknown"),
            json!("<none>"),
            json!("0s"),
            json!(""),
            json!("<none>"),
            json!("<none>"),
            json!("<unknown>"),
            json!("<unknown>"),
            json!("<unknown>"),
        ]
    );
}

#[tokio::test]
async fn deployments_jobs_and_services_print_as_kubectl_printers() {
    let env = start().await;
    let h = Http::new(&env);
    let template = json!({"metadata": {"labels": {"app": "web"}},
                          "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}, {"name": "sidecar", "image": "busybox"}]}});
    h.create(
        "/apis/apps/v1/namespaces/default/deployments",
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
               "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}}, "template": template},
               "status": {"replicas": 3, "readyReplicas": 2, "updatedReplicas": 3, "availableReplicas": 2}}),
    )
    .await;
    h.create(
        "/apis/apps/v1/namespaces/default/deployments",
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "fresh"},
               "spec": {"selector": {"matchLabels": {"app": "web"}, "matchExpressions": [{"key": "tier", "operator": "In", "values": ["b", "a"]}]},
                        "template": template}}),
    )
    .await;
    let t = h
        .table("/apis/apps/v1/namespaces/default/deployments")
        .await;
    assert_eq!(
        columns(&t),
        cols(&[
            ("Name", "string", "name", 0),
            ("Ready", "string", "", 0),
            ("Up-to-date", "string", "", 0),
            ("Available", "string", "", 0),
            ("Age", "string", "", 0),
            ("Containers", "string", "", 1),
            ("Images", "string", "", 1),
            ("Selector", "string", "", 1),
        ])
    );
    assert_eq!(
        cells(&t, "web"),
        vec![
            json!("web"),
            json!("2/3"),
            json!(3),
            json!(2),
            json!("0s"),
            json!("web,sidecar"),
            json!("nginx:1.27,busybox"),
            json!("app=web"),
        ]
    );
    // replicas defaults to 1; requirements sort by key, In values sorted
    let fresh = cells(&t, "fresh");
    assert_eq!(
        (fresh[1].clone(), fresh[7].clone()),
        (json!("0/1"), json!("app=web,tier in (a,b)"))
    );

    let jobs = "/apis/batch/v1/namespaces/default/jobs";
    let job = |name: &str, spec: Value, status: Value| {
        let mut spec = spec;
        spec["template"] = json!({"spec": {"restartPolicy": "Never", "containers": [{"name": "work", "image": "busybox"}]}});
        json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name}, "spec": spec, "status": status})
    };
    h.create(
        jobs,
        job(
            "running",
            json!({"completions": 3, "selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": "u1"}}}),
            json!({"succeeded": 1, "startTime": ago(H3)}),
        ),
    )
    .await;
    h.create(
        jobs,
        job(
            "complete",
            json!({}),
            json!({"succeeded": 1, "startTime": ago(H3 + 90), "completionTime": ago(H3),
                   "conditions": [{"type": "SuccessCriteriaMet", "status": "True"}, {"type": "Complete", "status": "True"}]}),
        ),
    )
    .await;
    h.create(
        jobs,
        job(
            "failed",
            json!({"parallelism": 2}),
            json!({"failed": 1, "conditions": [{"type": "FailureTarget", "status": "True"}, {"type": "Failed", "status": "True"}]}),
        ),
    )
    .await;
    h.create(
        jobs,
        job(
            "suspended",
            json!({"suspend": true}),
            json!({"conditions": [{"type": "Suspended", "status": "True"}]}),
        ),
    )
    .await;
    let t = h.table(jobs).await;
    assert_eq!(
        columns(&t),
        cols(&[
            ("Name", "string", "name", 0),
            ("Status", "string", "", 0),
            ("Completions", "string", "", 0),
            ("Duration", "string", "", 0),
            ("Age", "string", "", 0),
            ("Containers", "string", "", 1),
            ("Images", "string", "", 1),
            ("Selector", "string", "", 1),
        ])
    );
    assert_eq!(
        cells(&t, "running"),
        vec![
            json!("running"),
            json!("Running"),
            json!("1/3"),
            json!("3h"),
            json!("0s"),
            json!("work"),
            json!("busybox"),
            json!("batch.kubernetes.io/controller-uid=u1"),
        ]
    );
    let complete = cells(&t, "complete");
    assert_eq!(
        (
            complete[1].clone(),
            complete[2].clone(),
            complete[3].clone(),
            complete[7].clone()
        ),
        (
            json!("Complete"),
            json!("1/1"),
            json!("90s"),
            json!("<none>")
        )
    );
    let failed = cells(&t, "failed");
    assert_eq!(
        (failed[1].clone(), failed[2].clone(), failed[3].clone()),
        (json!("Failed"), json!("0/1 of 2"), json!(""))
    );
    assert_eq!(cells(&t, "suspended")[1], "Suspended");

    let svcs = "/api/v1/namespaces/default/services";
    let svc = |name: &str, spec: Value| json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name}, "spec": spec});
    h.create(
        svcs,
        svc(
            "dns",
            json!({"type": "ClusterIP", "clusterIP": "10.96.0.10", "clusterIPs": ["10.96.0.10"],
                   "selector": {"k8s-app": "kube-dns", "a": "b"},
                   "ports": [{"name": "dns", "port": 53, "protocol": "UDP"}, {"name": "dns-tcp", "port": 53, "protocol": "TCP"}]}),
        ),
    )
    .await;
    h.create(
        svcs,
        svc(
            "np",
            json!({"type": "NodePort", "clusterIP": "10.96.0.20", "externalIPs": ["198.51.100.1"],
                   "ports": [{"port": 80, "nodePort": 30080}]}),
        ),
    )
    .await;
    h.create(svcs, svc("lb-pending", json!({"type": "LoadBalancer", "clusterIP": "10.96.0.30", "ports": [{"port": 443, "protocol": "TCP"}]})))
        .await;
    h.create(
        svcs,
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "lb"},
               "spec": {"type": "LoadBalancer", "clusterIP": "10.96.0.31", "ports": [{"port": 443, "protocol": "TCP"}]},
               "status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.9"}, {"hostname": "lb.example.org"}]}}}),
    )
    .await;
    h.create(
        svcs,
        svc(
            "ext",
            json!({"type": "ExternalName", "externalName": "db.example.org"}),
        ),
    )
    .await;
    h.create(
        svcs,
        svc(
            "headless",
            json!({"clusterIP": "None", "selector": {"app": "db"}}),
        ),
    )
    .await;
    let t = h.table(svcs).await;
    assert_eq!(
        columns(&t),
        cols(&[
            ("Name", "string", "name", 0),
            ("Type", "string", "", 0),
            ("Cluster-IP", "string", "", 0),
            ("External-IP", "string", "", 0),
            ("Port(s)", "string", "", 0),
            ("Age", "string", "", 0),
            ("Selector", "string", "", 1),
        ])
    );
    assert_eq!(
        cells(&t, "dns"),
        vec![
            json!("dns"),
            json!("ClusterIP"),
            json!("10.96.0.10"),
            json!("<none>"),
            json!("53/UDP,53/TCP"),
            json!("0s"),
            json!("a=b,k8s-app=kube-dns"),
        ]
    );
    let np = cells(&t, "np");
    assert_eq!(
        (np[3].clone(), np[4].clone()),
        (json!("198.51.100.1"), json!("80:30080/TCP"))
    );
    assert_eq!(cells(&t, "lb-pending")[3], "<pending>");
    assert_eq!(cells(&t, "lb")[3], "203.0.113.9,lb.example.org");
    let ext = cells(&t, "ext");
    assert_eq!(
        (
            ext[1].clone(),
            ext[2].clone(),
            ext[3].clone(),
            ext[4].clone(),
            ext[6].clone()
        ),
        (
            json!("ExternalName"),
            json!("<none>"),
            json!("db.example.org"),
            json!("<none>"),
            json!("<none>")
        )
    );
    let headless = cells(&t, "headless");
    assert_eq!(
        (headless[1].clone(), headless[2].clone()),
        (json!("ClusterIP"), json!("None"))
    );
}

#[tokio::test]
async fn events_print_the_same_for_core_and_events_k8s_io() {
    let env = start().await;
    let h = Http::new(&env);
    h.create(
        "/api/v1/namespaces/default/events",
        json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "p.1"},
               "involvedObject": {"kind": "Pod", "name": "p", "namespace": "default", "fieldPath": "spec.containers{a}"},
               "reason": "Pulled", "message": "  Successfully pulled image  \n", "type": "Normal", "count": 4,
               "firstTimestamp": ago(D10), "lastTimestamp": ago(H3),
               "source": {"component": "kubelet", "host": "node-a"}}),
    )
    .await;
    h.create(
        "/apis/events.k8s.io/v1/namespaces/default/events",
        json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "web.1"},
               "eventTime": format!("{}.000000Z", ago(H3).trim_end_matches('Z')),
               "regarding": {"kind": "Deployment", "name": "web", "namespace": "default"},
               "reason": "ScalingReplicaSet", "note": "Scaled up replica set web-1 to 3", "type": "Normal", "action": "Scale",
               "reportingController": "deployment-controller", "reportingInstance": "cm-1"}),
    )
    .await;
    h.create(
        "/apis/events.k8s.io/v1/namespaces/default/events",
        json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "web.2"},
               "eventTime": format!("{}.000000Z", ago(D10).trim_end_matches('Z')),
               "series": {"count": 7, "lastObservedTime": format!("{}.000000Z", ago(H3).trim_end_matches('Z'))},
               "regarding": {"kind": "Deployment", "name": "web", "namespace": "default"},
               "reason": "Retrying", "note": "again", "type": "Warning", "action": "Retry",
               "reportingController": "x-controller", "reportingInstance": "x-1"}),
    )
    .await;
    let want_columns = cols(&[
        ("Last Seen", "string", "", 0),
        ("Type", "string", "", 0),
        ("Reason", "string", "", 0),
        ("Object", "string", "", 0),
        ("Subobject", "string", "", 1),
        ("Source", "string", "", 1),
        ("Message", "string", "", 0),
        ("First Seen", "string", "", 1),
        ("Count", "string", "", 1),
        ("Name", "string", "name", 1),
    ]);
    for path in [
        "/api/v1/namespaces/default/events",
        "/apis/events.k8s.io/v1/namespaces/default/events",
    ] {
        let t = h.table(path).await;
        assert_eq!(columns(&t), want_columns, "{path}");
        assert_eq!(
            cells(&t, "p.1"),
            vec![
                json!("3h"),
                json!("Normal"),
                json!("Pulled"),
                json!("pod/p"),
                json!("spec.containers{a}"),
                json!("kubelet, node-a"),
                json!("Successfully pulled image"),
                json!("10d"),
                json!(4),
                json!("p.1"),
            ],
            "{path}"
        );
        // new-API singleton: eventTime for both times, count 1, reporting controller as source
        assert_eq!(
            cells(&t, "web.1"),
            vec![
                json!("3h"),
                json!("Normal"),
                json!("ScalingReplicaSet"),
                json!("deployment/web"),
                json!(""),
                json!("deployment-controller, cm-1"),
                json!("Scaled up replica set web-1 to 3"),
                json!("3h"),
                json!(1),
                json!("web.1"),
            ],
            "{path}"
        );
        // a series: last seen and count from it
        let series = cells(&t, "web.2");
        assert_eq!(
            (series[0].clone(), series[7].clone(), series[8].clone()),
            (json!("3h"), json!("10d"), json!(7)),
            "{path}"
        );
    }
}

fn read_crd(rel: &str) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../..")
        .join(rel);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_saphyr::from_str(&text).unwrap()
}

#[tokio::test]
async fn crd_printer_columns_follow_the_tableconvertor() {
    let env = start().await;
    env.install_crd(read_crd(
        "deploy/crds-controlplane/keystones.controlplane.sunet.se.yaml",
    ))
    .await;
    env.install_crd(read_crd("deploy/crds/openstacknetworks.sunet.se.yaml"))
        .await;
    env.install_crd(widget_crd()).await;
    env.install_crd(gadget_crd()).await;
    let h = Http::new(&env);

    let ks = "/apis/controlplane.sunet.se/v1alpha1/namespaces/default/keystones";
    let spec = json!({"database": {"service": {"name": "db"}}});
    h.create(
        ks,
        json!({"apiVersion": "controlplane.sunet.se/v1alpha1", "kind": "Keystone", "metadata": {"name": "ready"},
               "spec": {"database": {"service": {"name": "db"}}, "replicas": 2},
               "status": {"endpoint": "https://keystone.example.org",
                          "conditions": [{"type": "Reconciling", "status": "False", "reason": "Done"},
                                         {"type": "Ready", "status": "True", "reason": "AllReady", "message": "ok"}]}}),
    )
    .await;
    h.create(
        ks,
        json!({"apiVersion": "controlplane.sunet.se/v1alpha1", "kind": "Keystone", "metadata": {"name": "new"}, "spec": spec}),
    )
    .await;
    let t = h.table(ks).await;
    assert_eq!(
        columns(&t),
        cols(&[
            ("Name", "string", "name", 0),
            ("Release", "string", "", 0),
            ("Replicas", "integer", "", 0),
            ("Ready", "string", "", 0),
            ("Reason", "string", "", 0),
            ("Endpoint", "string", "", 1),
            ("Age", "date", "", 0),
        ])
    );
    assert_eq!(
        t["columnDefinitions"][3]["description"],
        "Custom resource definition column (in JSONPath format): .status.conditions[?(@.type==\"Ready\")].status"
    );
    assert_eq!(
        cells(&t, "ready"),
        vec![
            json!("ready"),
            json!("2026.1"),
            json!(2),
            json!("True"),
            json!("AllReady"),
            json!("https://keystone.example.org"),
            json!("0s"),
        ]
    );
    // nothing to find: null cells (kubectl prints them blank)
    assert_eq!(
        cells(&t, "new"),
        vec![
            json!("new"),
            json!("2026.1"),
            Value::Null,
            Value::Null,
            Value::Null,
            Value::Null,
            json!("0s"),
        ]
    );

    // boolean columns are JSON booleans
    let nets = "/apis/sunet.se/v1alpha1/openstacknetworks";
    h.create(
        nets,
        json!({"apiVersion": "sunet.se/v1alpha1", "kind": "OpenstackNetwork", "metadata": {"name": "ext"},
               "spec": {"name": "public", "external": true}}),
    )
    .await;
    let t = h.table(nets).await;
    let ext = cells(&t, "ext");
    assert_eq!(
        (ext[1].clone(), ext[2].clone()),
        (json!("public"), json!(true))
    );
    assert_eq!(columns(&t)[2].1, "boolean");

    // a version with columns gets no Age unless it declares one
    let widgets = "/apis/sunet.se/v1alpha1/namespaces/default/widgets";
    h.create(
        widgets,
        json!({"apiVersion": "sunet.se/v1alpha1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"name": "w", "size": 4}}),
    )
    .await;
    let t = h.table(widgets).await;
    assert_eq!(
        columns(&t),
        cols(&[("Name", "string", "name", 0), ("Size", "integer", "", 0)])
    );
    assert_eq!(cells(&t, "w"), vec![json!("w"), json!(4)]);
    // a version without columns gets Name and Age (type date)
    h.create(
        "/apis/sunet.se/v1alpha1/gadgets",
        json!({"apiVersion": "sunet.se/v1alpha1", "kind": "Gadget", "metadata": {"name": "g"}}),
    )
    .await;
    let t = h.table("/apis/sunet.se/v1alpha1/gadgets").await;
    assert_eq!(
        columns(&t),
        cols(&[("Name", "string", "name", 0), ("Age", "date", "", 0)])
    );
    assert_eq!(cells(&t, "g"), vec![json!("g"), json!("0s")]);

    // the CRD kind has no printer: the default convertor's Name and Created At
    let t = h
        .table("/apis/apiextensions.k8s.io/v1/customresourcedefinitions")
        .await;
    assert_eq!(
        columns(&t),
        cols(&[("Name", "string", "name", 0), ("Created At", "date", "", 0)])
    );
    let created = cells(&t, "widgets.sunet.se")[1]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        created.parse::<Timestamp>().is_ok() && created.ends_with('Z'),
        "{created}"
    );
}

#[tokio::test]
async fn include_object_selects_the_row_object() {
    let env = start().await;
    let h = Http::new(&env);
    h.create(
        "/api/v1/namespaces/default/configmaps",
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "1", "b": "2"}, "binaryData": {"c": "AA=="}}),
    )
    .await;
    let t = h.table("/api/v1/namespaces/default/configmaps").await;
    assert_eq!(
        columns(&t),
        cols(&[
            ("Name", "string", "name", 0),
            ("Data", "string", "", 0),
            ("Age", "string", "", 0)
        ])
    );
    assert_eq!(cells(&t, "c"), vec![json!("c"), json!(3), json!("0s")]);
    let t = h
        .table("/api/v1/namespaces/default/configmaps?includeObject=Object")
        .await;
    assert_eq!(t["rows"][0]["object"]["data"]["a"], "1");
    let t = h
        .table("/api/v1/namespaces/default/configmaps?includeObject=None")
        .await;
    assert!(t["rows"][0].get("object").is_none());
    let r = h
        .http
        .get(format!(
            "{}/api/v1/namespaces/default/configmaps?includeObject=All",
            h.base
        ))
        .header("accept", TABLE_ACCEPT)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
}

/// kubectl renders the server's Tables: the headers a real cluster shows,
/// priority-1 columns only with `-o wide`.
#[tokio::test]
async fn kubectl_get_prints_the_server_columns() {
    const KUBECTL: &str = "/usr/bin/kubectl";
    if !Path::new(KUBECTL).exists() {
        println!("note: {KUBECTL} not found; skipping the kubectl table test");
        return;
    }
    let env = start().await;
    env.install_crd(read_crd(
        "deploy/crds-controlplane/keystones.controlplane.sunet.se.yaml",
    ))
    .await;
    let h = Http::new(&env);
    h.create(
        "/api/v1/namespaces/default/pods",
        pod(
            "web",
            json!({"containers": [container("a")], "nodeName": "node-a"}),
            json!({"phase": "Running", "podIP": "10.0.0.5", "conditions": [{"type": "Ready", "status": "True"}],
                   "containerStatuses": [{"name": "a", "ready": true, "restartCount": 0, "image": "busybox", "imageID": "", "state": {"running": {}}}]}),
        ),
    )
    .await;
    h.create(
        "/apis/controlplane.sunet.se/v1alpha1/namespaces/default/keystones",
        json!({"apiVersion": "controlplane.sunet.se/v1alpha1", "kind": "Keystone", "metadata": {"name": "ks"},
               "spec": {"database": {"service": {"name": "db"}}},
               "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "AllReady"}]}}),
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let kc = dir.path().join("kubeconfig");
    env.handle.write_kubeconfig(&kc).unwrap();
    let get = |args: &'static [&'static str]| {
        let kc = kc.clone();
        async move {
            let out = tokio::process::Command::new(KUBECTL)
                .arg("--kubeconfig")
                .arg(&kc)
                .args(args)
                .output()
                .await
                .expect("kubectl runs");
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            String::from_utf8(out.stdout).unwrap()
        }
    };
    let words = |s: &str, line: usize| -> Vec<String> {
        s.lines()
            .nth(line)
            .unwrap_or("")
            .split_whitespace()
            .map(str::to_string)
            .collect()
    };
    let out = get(&["get", "pods"]).await;
    assert_eq!(
        words(&out, 0),
        ["NAME", "READY", "STATUS", "RESTARTS", "AGE"],
        "{out}"
    );
    assert_eq!(words(&out, 1)[..4], ["web", "1/1", "Running", "0"], "{out}");
    let out = get(&["get", "pods", "-o", "wide"]).await;
    assert_eq!(
        words(&out, 0),
        [
            "NAME",
            "READY",
            "STATUS",
            "RESTARTS",
            "AGE",
            "IP",
            "NODE",
            "NOMINATED",
            "NODE",
            "READINESS",
            "GATES"
        ],
        "{out}"
    );
    assert_eq!(
        words(&out, 1)[5..],
        ["10.0.0.5", "node-a", "<none>", "<none>"],
        "{out}"
    );
    let out = get(&["get", "ks"]).await;
    assert_eq!(
        words(&out, 0),
        ["NAME", "RELEASE", "REPLICAS", "READY", "REASON", "AGE"],
        "{out}"
    );
    // the null REPLICAS cell prints blank; READY and REASON come from the filters
    assert_eq!(
        words(&out, 1)[..4],
        ["ks", "2026.1", "True", "AllReady"],
        "{out}"
    );

    // `get -w`: the pod's change prints with the same columns as the list (the watch's
    // Tables), not NAME and AGE only.
    use tokio::io::AsyncBufReadExt;
    let mut child = tokio::process::Command::new(KUBECTL)
        .arg("--kubeconfig")
        .arg(&kc)
        .args(["get", "pods", "-w"])
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("kubectl runs");
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let mut next = async || {
        tokio::time::timeout(std::time::Duration::from_secs(20), lines.next_line())
            .await
            .expect("kubectl printed a line within 20 s")
            .unwrap()
            .expect("kubectl still running")
    };
    let header = next().await;
    let first = next().await;
    let r = h
        .http
        .patch(format!("{}/api/v1/namespaces/default/pods/web", h.base))
        .header("content-type", "application/merge-patch+json")
        .json(&json!({"metadata": {"labels": {"changed": "yes"}}}))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success());
    let changed = next().await;
    for (line, want) in [
        (&header, vec!["NAME", "READY", "STATUS", "RESTARTS", "AGE"]),
        (&first, vec!["web", "1/1", "Running", "0"]),
        (&changed, vec!["web", "1/1", "Running", "0"]),
    ] {
        let got: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(got[..want.len()], want[..], "{header}\n{first}\n{changed}");
    }
}

/// A watch with `as=Table` sends each event's object as a one-row Table, with the column
/// definitions on the first event only (the apiserver's watch handler sets `NoHeaders` after
/// the first object), which is what `kubectl get -w` prints from.
#[tokio::test]
async fn watch_events_carry_one_row_tables_with_headers_once() {
    let env = start().await;
    let h = Http::new(&env);
    let list = h.table("/api/v1/namespaces/default/configmaps").await;
    let rv = list["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    let mut watch = h
        .http
        .get(format!(
            "{}/api/v1/namespaces/default/configmaps?watch=true&resourceVersion={rv}",
            h.base
        ))
        .header("accept", TABLE_ACCEPT)
        .send()
        .await
        .unwrap();
    assert!(watch.status().is_success());
    for name in ["one", "two"] {
        h.create(
            "/api/v1/namespaces/default/configmaps",
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"a": "1"}}),
        )
        .await;
    }
    let mut buf = String::new();
    while buf.lines().count() < 2 {
        let chunk = tokio::time::timeout(std::time::Duration::from_secs(10), watch.chunk())
            .await
            .expect("a watch event within 10 s")
            .unwrap()
            .expect("the watch stays open");
        buf.push_str(std::str::from_utf8(&chunk).unwrap());
    }
    let events: Vec<Value> = buf
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    for (i, (ev, name)) in events.iter().zip(["one", "two"]).enumerate() {
        assert_eq!(ev["type"], "ADDED", "{ev}");
        let t = &ev["object"];
        assert_eq!(t["kind"], "Table", "{ev}");
        assert_eq!(t["rows"].as_array().unwrap().len(), 1, "{ev}");
        assert_eq!(t["rows"][0]["cells"][0], name, "{ev}");
        assert_eq!(
            t["rows"][0]["object"]["kind"], "PartialObjectMetadata",
            "{ev}"
        );
        assert!(
            t["metadata"]["resourceVersion"]
                .as_str()
                .is_some_and(|v| !v.is_empty()),
            "{ev}"
        );
        if i == 0 {
            assert_eq!(
                columns(t),
                cols(&[
                    ("Name", "string", "name", 0),
                    ("Data", "string", "", 0),
                    ("Age", "string", "", 0)
                ])
            );
        } else {
            assert!(t["columnDefinitions"].is_null(), "headers sent again: {ev}");
        }
    }
}
