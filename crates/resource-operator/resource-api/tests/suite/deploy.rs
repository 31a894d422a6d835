//! The deployment manifests: the kustomize overlay and the Helm chart render the same objects,
//! their RBAC grants exactly the API calls the operator makes, and the CRD copies under
//! deploy/helm and deploy/kustomize equal deploy/crds. The same for the two other parts of the
//! binary (the control-plane operator and the Zun virtual kubelet: kustomize bases
//! deploy/kustomize/{control-plane,virtual-kubelet}, chart flags controlPlane.enabled and
//! virtualKubelet.enabled), whose Deployments are also checked against the clap flags of their
//! subcommands.
//!
//! The overlay is rendered by `kubectl kustomize` (kubectl must be installed). Helm is not
//! installable on our build machines, so the chart is rendered by [`helm`] below: a small
//! renderer for exactly the template subset the chart uses (values substitution, `if`/`else`,
//! `quote`, `toYaml`, `nindent`, `b64enc`, whitespace trimming). It panics on anything else,
//! so a template that outgrows it fails loudly instead of rendering wrongly. When a real `helm`
//! is on PATH, `real_helm_agrees_with_the_renderer` also compares the two.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};

const NAMESPACE: &str = "openstack-operator";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../..")
}

fn chart_dir() -> PathBuf {
    repo().join("deploy/helm/openstack-operator")
}

fn parse(text: &str, origin: &str) -> Vec<Value> {
    api::manifest::documents(text).unwrap_or_else(|e| panic!("{origin}: {e}"))
}

// ------------------------------------------------------------------------------------------
// kustomize

fn kubectl() -> String {
    std::env::var("KUBECTL").unwrap_or_else(|_| "kubectl".to_string())
}

/// Renders a kustomization directory with `kubectl kustomize`.
fn kustomize(dir: &Path) -> Vec<Value> {
    let out = Command::new(kubectl())
        .arg("kustomize")
        .arg(dir)
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run `{} kustomize` ({e}): the deploy tests render deploy/kustomize with kubectl; install kubectl (1.27 or later) or point KUBECTL at it",
                kubectl()
            )
        });
    assert!(
        out.status.success(),
        "kubectl kustomize {} failed: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    parse(
        &String::from_utf8_lossy(&out.stdout),
        &dir.display().to_string(),
    )
}

/// Renders the example overlay plus kustomize components, through a temporary kustomization
/// (kustomize wants relative paths).
fn kustomize_with_components(components: &[&str]) -> Vec<Value> {
    let tmp = std::env::temp_dir().join(format!("deploy-test-{}", std::process::id()));
    let dir = tmp.join(components.join("-"));
    std::fs::create_dir_all(&dir).unwrap();
    let dir = dir.canonicalize().unwrap();
    let repo = repo().canonicalize().unwrap();
    let up = "../".repeat(dir.components().count() - 1);
    let rel = |p: &str| format!("{up}{}/{p}", repo.strip_prefix("/").unwrap().display());
    let mut k = format!(
        "namespace: {NAMESPACE}\nresources:\n- {}\ncomponents:\n",
        rel("deploy/kustomize/overlays/example")
    );
    for c in components {
        k.push_str(&format!(
            "- {}\n",
            rel(&format!("deploy/kustomize/components/{c}"))
        ));
    }
    std::fs::write(dir.join("kustomization.yaml"), k).unwrap();
    let docs = kustomize(&dir);
    let _ = std::fs::remove_dir_all(&tmp);
    docs
}

fn overlay() -> Vec<Value> {
    kustomize(&repo().join("deploy/kustomize/overlays/example"))
}

fn overlay_clouds_yaml() -> String {
    std::fs::read_to_string(repo().join("deploy/kustomize/overlays/example/clouds.yaml")).unwrap()
}

// ------------------------------------------------------------------------------------------
// A renderer for the Helm template subset the chart uses.

mod helm {
    use super::*;

    enum Tok {
        Text(String),
        Action(String),
    }

    enum Node {
        Text(String),
        Expr(String),
        If(String, Vec<Node>, Vec<Node>),
    }

    /// Splits a template into text and actions, applying `{{-` / `-}}` whitespace trimming.
    fn tokenize(src: &str) -> Vec<Tok> {
        let mut toks = Vec::new();
        let mut rest = src;
        while let Some(start) = rest.find("{{") {
            let mut text = rest[..start].to_string();
            let after = &rest[start + 2..];
            let end = after.find("}}").expect("unclosed {{ in template");
            let mut inner = &after[..end];
            if let Some(s) = inner.strip_prefix('-')
                && s.starts_with(char::is_whitespace)
            {
                text = text.trim_end().to_string();
                inner = s;
            }
            let mut trim_right = false;
            if let Some(s) = inner.strip_suffix('-')
                && s.ends_with(char::is_whitespace)
            {
                trim_right = true;
                inner = s;
            }
            toks.push(Tok::Text(text));
            toks.push(Tok::Action(inner.trim().to_string()));
            rest = &after[end + 2..];
            if trim_right {
                rest = rest.trim_start();
            }
        }
        toks.push(Tok::Text(rest.to_string()));
        toks
    }

    /// Parses tokens up to `else`/`end` (returned as the terminator).
    fn parse_nodes(toks: &[Tok], i: &mut usize) -> (Vec<Node>, Option<String>) {
        let mut nodes = Vec::new();
        while *i < toks.len() {
            let t = &toks[*i];
            *i += 1;
            match t {
                Tok::Text(s) => nodes.push(Node::Text(s.clone())),
                Tok::Action(a) if a.starts_with("/*") => {}
                Tok::Action(a) if a == "else" || a == "end" => return (nodes, Some(a.clone())),
                Tok::Action(a) if a.starts_with("if ") => {
                    let (then, term) = parse_nodes(toks, i);
                    let otherwise = match term.as_deref() {
                        Some("else") => {
                            let (e, term) = parse_nodes(toks, i);
                            assert_eq!(term.as_deref(), Some("end"), "if without end");
                            e
                        }
                        Some("end") => Vec::new(),
                        _ => panic!("`{{{{ {a} }}}}` without end"),
                    };
                    nodes.push(Node::If(a[3..].trim().to_string(), then, otherwise));
                }
                Tok::Action(a) => {
                    let word = a.split_whitespace().next().unwrap_or_default();
                    assert!(
                        ![
                            "range", "with", "define", "template", "include", "block", "tpl"
                        ]
                        .contains(&word),
                        "unsupported template action `{a}`: extend the renderer in crates/resource-operator/resource-api/tests/suite/deploy.rs or simplify the template"
                    );
                    nodes.push(Node::Expr(a.clone()));
                }
            }
        }
        (nodes, None)
    }

    fn words(s: &str) -> Vec<String> {
        let mut out = Vec::new();
        let mut chars = s.trim().chars().peekable();
        while let Some(&c) = chars.peek() {
            if c.is_whitespace() {
                chars.next();
            } else if c == '"' {
                let mut w = String::from('"');
                chars.next();
                while let Some(c) = chars.next() {
                    w.push(c);
                    if c == '\\' {
                        w.push(chars.next().unwrap());
                    } else if c == '"' {
                        break;
                    }
                }
                out.push(w);
            } else {
                let mut w = String::new();
                while let Some(&c) = chars.peek() {
                    if c.is_whitespace() {
                        break;
                    }
                    w.push(c);
                    chars.next();
                }
                out.push(w);
            }
        }
        out
    }

    fn term(w: &str, root: &Value) -> Value {
        if let Some(path) = w.strip_prefix('.') {
            let mut v = root;
            for key in path.split('.') {
                v = v.get(key).unwrap_or_else(|| {
                    panic!("template refers to {w}, which the values do not define")
                });
            }
            v.clone()
        } else if w.starts_with('"') {
            serde_json::from_str(w).unwrap_or_else(|e| panic!("string literal {w}: {e}"))
        } else if let Ok(n) = w.parse::<i64>() {
            json!(n)
        } else {
            panic!("unsupported template term `{w}`")
        }
    }

    pub fn truthy(v: &Value) -> bool {
        match v {
            Value::Null => false,
            Value::Bool(b) => *b,
            Value::Number(n) => n.as_f64() != Some(0.0),
            Value::String(s) => !s.is_empty(),
            Value::Array(a) => !a.is_empty(),
            Value::Object(o) => !o.is_empty(),
        }
    }

    fn text(v: &Value) -> String {
        match v {
            Value::String(s) => s.clone(),
            Value::Number(n) => n.to_string(),
            Value::Bool(b) => b.to_string(),
            other => panic!("cannot print {other} directly; use toYaml"),
        }
    }

    fn indent(n: usize, s: &str) -> String {
        let pad = " ".repeat(n);
        s.lines()
            .map(|l| format!("{pad}{l}"))
            .collect::<Vec<_>>()
            .join("\n")
    }

    fn b64(bytes: &[u8]) -> String {
        const A: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        let mut out = String::new();
        for chunk in bytes.chunks(3) {
            let b = [
                chunk[0],
                *chunk.get(1).unwrap_or(&0),
                *chunk.get(2).unwrap_or(&0),
            ];
            let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
            for i in 0..4 {
                if i <= chunk.len() {
                    out.push(A[((n >> (18 - 6 * i)) & 63) as usize] as char);
                } else {
                    out.push('=');
                }
            }
        }
        out
    }

    fn call(f: &str, args: &[Value]) -> Value {
        let int = |v: &Value| {
            v.as_u64()
                .unwrap_or_else(|| panic!("{f}: {v} is not a number")) as usize
        };
        match (f, args) {
            ("quote", [v]) => json!(serde_json::to_string(&text(v)).unwrap()),
            ("toYaml", [v]) => json!(
                serde_saphyr::to_string(v)
                    .unwrap()
                    .trim_end_matches('\n')
                    .to_string()
            ),
            ("nindent", [n, s]) => json!(format!("\n{}", indent(int(n), &text(s)))),
            ("indent", [n, s]) => json!(indent(int(n), &text(s))),
            ("b64enc", [s]) => json!(b64(text(s).as_bytes())),
            ("not", [v]) => json!(!truthy(v)),
            ("default", [d, v]) => {
                if truthy(v) {
                    v.clone()
                } else {
                    d.clone()
                }
            }
            _ => panic!(
                "unsupported template function `{f}` with {} argument(s): extend the renderer in crates/resource-operator/resource-api/tests/suite/deploy.rs or simplify the template",
                args.len()
            ),
        }
    }

    const FUNCTIONS: &[&str] = &[
        "quote", "toYaml", "nindent", "indent", "b64enc", "not", "default",
    ];

    /// Evaluates a pipeline such as `toYaml .Values.x | nindent 4`.
    fn eval(expr: &str, root: &Value) -> Value {
        let mut acc: Option<Value> = None;
        for segment in expr.split('|') {
            let w = words(segment);
            assert!(!w.is_empty(), "empty pipeline segment in `{expr}`");
            let mut args: Vec<Value> = Vec::new();
            if FUNCTIONS.contains(&w[0].as_str()) {
                args.extend(w[1..].iter().map(|a| term(a, root)));
                args.extend(acc.take());
                acc = Some(call(&w[0], &args));
            } else {
                assert!(
                    acc.is_none() && w.len() == 1,
                    "unsupported pipeline `{expr}`"
                );
                acc = Some(term(&w[0], root));
            }
        }
        acc.unwrap()
    }

    fn render_nodes(nodes: &[Node], root: &Value, out: &mut String) {
        for n in nodes {
            match n {
                Node::Text(s) => out.push_str(s),
                Node::Expr(e) => out.push_str(&text(&eval(e, root))),
                Node::If(cond, then, otherwise) => {
                    let branch = if truthy(&eval(cond, root)) {
                        then
                    } else {
                        otherwise
                    };
                    render_nodes(branch, root, out);
                }
            }
        }
    }

    /// Renders one template with the given root (`.Values`, `.Release`, `.Chart`).
    pub fn render(src: &str, root: &Value) -> String {
        let toks = tokenize(src);
        let mut i = 0;
        let (nodes, term) = parse_nodes(&toks, &mut i);
        assert!(
            term.is_none(),
            "`{{{{ {} }}}}` without if",
            term.unwrap_or_default()
        );
        let mut out = String::new();
        render_nodes(&nodes, root, &mut out);
        out
    }

    fn merge(base: &mut Value, over: &Value) {
        match (base, over) {
            (Value::Object(b), Value::Object(o)) => {
                for (k, v) in o {
                    merge(b.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
            (b, o) => *b = o.clone(),
        }
    }

    /// What `helm template` with `--include-crds` renders: crds/ then templates/*.yaml.
    pub fn template(chart: &Path, namespace: &str, overrides: &Value) -> Vec<Value> {
        let read = |p: PathBuf| {
            std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        };
        let mut values = parse(&read(chart.join("values.yaml")), "values.yaml")
            .pop()
            .unwrap();
        merge(&mut values, overrides);
        let meta = parse(&read(chart.join("Chart.yaml")), "Chart.yaml")
            .pop()
            .unwrap();
        let root = json!({
            "Values": values,
            "Release": {"Name": "openstack-operator", "Namespace": namespace, "Service": "Helm"},
            "Chart": {"Name": meta["name"], "Version": meta["version"], "AppVersion": meta["appVersion"]},
        });
        let mut docs = Vec::new();
        for f in yaml_files(&chart.join("crds")) {
            docs.extend(parse(&read(f.clone()), &f.display().to_string()));
        }
        for f in yaml_files(&chart.join("templates")) {
            let rendered = render(&read(f.clone()), &root);
            docs.extend(parse(&rendered, &f.display().to_string()));
        }
        // NOTES.txt is not a manifest, but it must render too.
        render(&read(chart.join("templates/NOTES.txt")), &root);
        docs
    }

    #[test]
    fn renderer_subset() {
        let root =
            json!({"Values": {"a": "x", "n": 3, "on": true, "off": false, "m": {"k": [1, 2]}}});
        let r = |s: &str| render(s, &root);
        assert_eq!(r("v: {{ .Values.a }}"), "v: x");
        assert_eq!(r("v: {{ .Values.n | quote }}"), "v: \"3\"");
        assert_eq!(
            r("a:\n  {{- if .Values.on }}\n  b: 1\n  {{- end }}\n"),
            "a:\n  b: 1\n"
        );
        assert_eq!(
            r("a:\n  {{- if .Values.off }}\n  b: 1\n  {{- else }}\n  c: 2\n  {{- end }}"),
            "a:\n  c: 2"
        );
        assert_eq!(
            r("m:\n  {{- toYaml .Values.m | nindent 2 }}"),
            "m:\n  k:\n  - 1\n  - 2"
        );
        assert_eq!(
            r("{{ \"ab\" | b64enc }} {{ \"abcd\" | b64enc }}"),
            "YWI= YWJjZA=="
        );
        assert_eq!(r("{{- if not .Values.off }}x{{ end -}} \n y"), "xy");
        assert_eq!(r("{{ .Values.off | default \"d\" }}"), "d");
    }
}

fn yaml_files(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    out.sort();
    out
}

fn chart(overrides: Value) -> Vec<Value> {
    helm::template(&chart_dir(), NAMESPACE, &overrides)
}

// ------------------------------------------------------------------------------------------
// Comparing object sets

/// Who rendered it is not part of the object: drop the tool's own labels.
fn normalize(mut docs: Vec<Value>) -> Vec<Value> {
    for d in &mut docs {
        // kustomize wraps long base64 lines; the API server's decoder ignores line breaks.
        if d["kind"] == "Secret"
            && let Some(data) = d.get_mut("data").and_then(Value::as_object_mut)
        {
            for v in data.values_mut() {
                *v = json!(v.as_str().unwrap_or_default().replace('\n', ""));
            }
        }
        // The chart keeps the control-plane CRDs on `helm uninstall`; kustomize has no such
        // notion.
        if let Some(ann) = d
            .pointer_mut("/metadata/annotations")
            .and_then(Value::as_object_mut)
        {
            ann.remove("helm.sh/resource-policy");
            if ann.is_empty() {
                d["metadata"].as_object_mut().unwrap().remove("annotations");
            }
        }
        if let Some(labels) = d
            .pointer_mut("/metadata/labels")
            .and_then(Value::as_object_mut)
        {
            labels.remove("app.kubernetes.io/managed-by");
            labels.remove("helm.sh/chart");
            if labels.is_empty() {
                d["metadata"].as_object_mut().unwrap().remove("labels");
            }
        }
    }
    docs.sort_by_key(key);
    docs
}

fn key(d: &Value) -> String {
    format!(
        "{}/{}/{}",
        d["kind"].as_str().unwrap_or_default(),
        d["metadata"]["namespace"].as_str().unwrap_or_default(),
        d["metadata"]["name"].as_str().unwrap_or_default()
    )
}

fn diffs(a: &Value, b: &Value, path: &str, out: &mut Vec<String>) {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            for k in keys {
                diffs(
                    x.get(k).unwrap_or(&Value::Null),
                    y.get(k).unwrap_or(&Value::Null),
                    &format!("{path}/{k}"),
                    out,
                );
            }
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            for (i, (p, q)) in x.iter().zip(y).enumerate() {
                diffs(p, q, &format!("{path}/{i}"), out);
            }
        }
        // kustomize prints `minimum: 0.0` as 0: the same number.
        (Value::Number(x), Value::Number(y)) if x.as_f64() == y.as_f64() => {}
        _ if a != b => out.push(format!("{path}: {a} (first) vs {b} (second)")),
        _ => {}
    }
}

fn assert_same(kustomize: Vec<Value>, helm: Vec<Value>, what: &str) {
    let (k, h) = (normalize(kustomize), normalize(helm));
    let kk: Vec<String> = k.iter().map(key).collect();
    let hk: Vec<String> = h.iter().map(key).collect();
    assert_eq!(
        kk, hk,
        "{what}: kustomize and Helm render different objects"
    );
    let mut out = Vec::new();
    for (a, b) in k.iter().zip(&h) {
        diffs(a, b, &key(a), &mut out);
    }
    assert!(
        out.is_empty(),
        "{what}: objects differ:\n{}",
        out.join("\n")
    );
}

fn without_kinds(docs: Vec<Value>, kinds: &[&str]) -> Vec<Value> {
    docs.into_iter()
        .filter(|d| !kinds.contains(&d["kind"].as_str().unwrap_or_default()))
        .collect()
}

fn find<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name}"))
}

#[test]
fn chart_defaults_render_the_overlay() {
    // The overlay also creates its Namespace (Helm: --create-namespace) and generates the
    // credentials Secret from a placeholder file (the chart's default expects an existing
    // Secret of the same name).
    assert_same(
        without_kinds(overlay(), &["Namespace", "Secret"]),
        chart(json!({})),
        "chart defaults vs overlays/example",
    );
}

#[test]
fn chart_with_inline_clouds_yaml_renders_the_overlay_secret() {
    assert_same(
        without_kinds(overlay(), &["Namespace"]),
        chart(json!({"credentials": {"cloudsYaml": overlay_clouds_yaml()}})),
        "chart with credentials.cloudsYaml vs overlays/example",
    );
}

#[test]
fn optional_parts_render_the_kustomize_components() {
    assert_same(
        without_kinds(
            kustomize_with_components(&["networkpolicy", "servicemonitor"]),
            &["Namespace"],
        ),
        chart(json!({
            "credentials": {"cloudsYaml": overlay_clouds_yaml()},
            "networkPolicy": {"enabled": true},
            "metrics": {"serviceMonitor": {"enabled": true}},
        })),
        "chart with networkPolicy and serviceMonitor vs components",
    );
}

#[test]
fn tenant_credentials_off_leaves_secrets_out_of_the_cluster_role() {
    let secret_rules = |docs: &[Value]| -> usize {
        find(docs, "ClusterRole", "openstack-operator")["rules"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["resources"] == json!(["secrets"]))
            .count()
    };
    assert_eq!(secret_rules(&chart(json!({}))), 1);
    assert_eq!(secret_rules(&chart(json!({"tenantCredentials": false}))), 0);
}

#[test]
fn chart_options_change_what_they_say() {
    let docs = chart(json!({
        "replicaCount": 2,
        "leaderElection": {"enabled": true},
        "adoptLegacy": true,
        "allowProjectAdoption": true,
        "federationNamespaces": "idp-config",
        "watchNamespace": "tenants",
        "clusterId": "prod-1",
        "imagePullSecrets": [{"name": "reg"}],
        "nodeSelector": {"role": "ops"},
    }));
    let dep = find(&docs, "Deployment", "openstack-operator");
    assert_eq!(dep["spec"]["replicas"], 2);
    assert_eq!(dep["spec"]["strategy"]["type"], "RollingUpdate");
    let pod = &dep["spec"]["template"]["spec"];
    assert_eq!(pod["imagePullSecrets"], json!([{"name": "reg"}]));
    assert_eq!(pod["nodeSelector"], json!({"role": "ops"}));
    let env: Vec<(String, Value)> = pod["containers"][0]["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["name"].as_str().unwrap().to_string(), e["value"].clone()))
        .collect();
    for (name, value) in [
        ("LEADER_ELECTION", "true"),
        ("LEADER_ELECTION_LEASE", "openstack-operator"),
        ("ADOPT_LEGACY", "true"),
        ("ALLOW_PROJECT_ADOPTION", "true"),
        ("FEDERATION_NAMESPACES", "idp-config"),
        ("WATCH_NAMESPACE", "tenants"),
        ("CLUSTER_ID", "prod-1"),
    ] {
        assert!(
            env.contains(&(name.to_string(), json!(value))),
            "{name}={value} missing from {env:?}"
        );
    }
}

#[test]
fn deployment_runs_hardened_and_probes_the_operator() {
    let docs = overlay();
    let dep = find(&docs, "Deployment", "openstack-operator");
    let pod = &dep["spec"]["template"]["spec"];
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(pod["securityContext"]["runAsUser"], 65532);
    assert_eq!(
        pod["securityContext"]["seccompProfile"]["type"],
        "RuntimeDefault"
    );
    let c = &pod["containers"][0];
    assert_eq!(
        c["image"],
        format!("openstack-operator:{}", env!("CARGO_PKG_VERSION"))
    );
    assert_eq!(c["args"], json!(["run"]));
    assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(c["securityContext"]["allowPrivilegeEscalation"], false);
    assert_eq!(c["securityContext"]["capabilities"]["drop"], json!(["ALL"]));
    assert_eq!(
        c["livenessProbe"]["httpGet"],
        json!({"path": "/healthz", "port": "health"})
    );
    assert_eq!(
        c["readinessProbe"]["httpGet"],
        json!({"path": "/readyz", "port": "health"})
    );
    assert_eq!(
        c["ports"],
        json!([
            {"name": "health", "containerPort": 8080, "protocol": "TCP"},
            {"name": "metrics", "containerPort": 9090, "protocol": "TCP"},
        ])
    );
    assert_eq!(
        c["volumeMounts"],
        json!([{"name": "credentials", "mountPath": "/etc/openstack", "readOnly": true}])
    );
    let env = c["env"].as_array().unwrap();
    let value = |n: &str| {
        env.iter()
            .find(|e| e["name"] == n)
            .map(|e| e["value"].clone())
            .unwrap_or(Value::Null)
    };
    assert_eq!(value("OS_CLIENT_CONFIG_FILE"), "/etc/openstack/clouds.yaml");
    assert_eq!(value("OS_CLOUD"), "openstack");
    assert_eq!(value("METRICS_PORT"), "9090");
    let secret = find(&docs, "Secret", "openstack-operator-credentials");
    assert!(secret["data"]["clouds.yaml"].is_string());
    assert_eq!(
        pod["volumes"][0]["secret"]["secretName"],
        "openstack-operator-credentials"
    );
}

/// Every environment variable the chart can set is one the code reads (a typo would be
/// ignored silently by the binary).
#[test]
fn every_env_var_the_chart_sets_is_read_by_the_operator() {
    let mut known = BTreeSet::new();
    for dir in [
        "crates/openstack-operator/src",
        "crates/shared/openstack/src",
        "crates/resource-operator/resource-controllers/src",
    ] {
        for file in rust_files(&repo().join(dir)) {
            let src = std::fs::read_to_string(&file).unwrap();
            for pat in [
                "env = \"",
                "env::var(\"",
                "env::var_os(\"",
                "env_num::<usize>(\"",
                "env_num::<u32>(\"",
                "env_num::<u64>(\"",
            ] {
                for (i, _) in src.match_indices(pat) {
                    let rest = &src[i + pat.len()..];
                    known.insert(rest[..rest.find('"').unwrap()].to_string());
                }
            }
        }
    }
    let docs = chart(json!({
        "leaderElection": {"enabled": true},
        "adoptLegacy": true,
        "allowProjectAdoption": true,
        "federationNamespaces": "x",
    }));
    let dep = find(&docs, "Deployment", "openstack-operator");
    for e in dep["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_array()
        .unwrap()
    {
        let name = e["name"].as_str().unwrap();
        assert!(
            known.contains(name),
            "the chart sets {name}, which no code reads (known: {known:?})"
        );
    }
}

#[test]
fn versions_agree() {
    let meta = parse(
        &std::fs::read_to_string(chart_dir().join("Chart.yaml")).unwrap(),
        "Chart.yaml",
    )
    .pop()
    .unwrap();
    let version = env!("CARGO_PKG_VERSION");
    assert_eq!(meta["appVersion"], version, "Chart.yaml appVersion");
    let values = parse(
        &std::fs::read_to_string(chart_dir().join("values.yaml")).unwrap(),
        "values.yaml",
    )
    .pop()
    .unwrap();
    assert_eq!(values["image"]["tag"], version, "values.yaml image.tag");
}

// ------------------------------------------------------------------------------------------
// RBAC: exactly the calls the code makes

#[derive(Clone, Copy, PartialEq, Debug)]
enum Scope {
    /// Anywhere in the cluster: a ClusterRole rule.
    Cluster,
    /// Only in the operator's namespace: a Role rule.
    Operator,
}

struct Call {
    group: &'static str,
    resource: &'static str,
    verb: &'static str,
    /// A single object by name, or any object.
    name: Option<&'static str>,
    scope: Scope,
}

const KINDS: [&str; 5] = [
    "openstackdomains",
    "openstackflavors",
    "openstackimages",
    "openstacknetworks",
    "openstackprojects",
];

fn calls() -> Vec<Call> {
    use Scope::*;
    let c = |group, resource, verb, name, scope| Call {
        group,
        resource,
        verb,
        name,
        scope,
    };
    let mut out = Vec::new();
    for kind in KINDS {
        // controllers/src/framework.rs `run`: watcher(Api::all) lists and watches each kind.
        out.push(c("sunet.se", kind, "list", None, Cluster));
        out.push(c("sunet.se", kind, "watch", None, Cluster));
        // framework.rs `reconcile`: kube::runtime::finalizer adds/removes the finalizer by
        // JSON patch.
        out.push(c("sunet.se", kind, "patch", None, Cluster));
        // Not called today; granted because `get` reveals nothing `list` does not, and reads
        // of single objects (e.g. a referenced OpenstackDomain) need it.
        out.push(c("sunet.se", kind, "get", None, Cluster));
        // framework.rs `write_status`: Api::patch_status with a server-side apply patch.
        let status: &'static str = Box::leak(format!("{kind}/status").into_boxed_str());
        out.push(c("sunet.se", status, "patch", None, Cluster));
    }
    for crd in KINDS {
        // openstack-operator/src/run.rs `wait_for_crd`: Api::<CustomResourceDefinition>::get_opt.
        let name: &'static str = Box::leak(format!("{crd}.sunet.se").into_boxed_str());
        out.push(c(
            "apiextensions.k8s.io",
            "customresourcedefinitions",
            "get",
            Some(name),
            Cluster,
        ));
    }
    // framework.rs `publish` -> kube::runtime::events::Recorder::publish: POST of an
    // events.k8s.io/v1 Event, PATCH when it repeats. Namespace of the object, `default` for
    // cluster-scoped objects.
    out.push(c("events.k8s.io", "events", "create", None, Cluster));
    out.push(c("events.k8s.io", "events", "patch", None, Cluster));
    // controllers/src/project/mod.rs `read_federation`: Api::<ConfigMap>::get_opt in the
    // project's (or an allowed) namespace.
    out.push(c("", "configmaps", "get", None, Cluster));
    // openstack-operator/src/run.rs, --leader-election: kube-lease-manager creates the Lease
    // (POST, cannot be limited by name), reads it and renews/takes it by patch.
    out.push(c("coordination.k8s.io", "leases", "create", None, Operator));
    out.push(c(
        "coordination.k8s.io",
        "leases",
        "get",
        Some("openstack-operator"),
        Operator,
    ));
    out.push(c(
        "coordination.k8s.io",
        "leases",
        "patch",
        Some("openstack-operator"),
        Operator,
    ));
    // controllers/src/gc.rs `registry_ids` / `write_registry`: the seed's registry ConfigMap
    // openstack-operator-managed-resources in the operator's namespace: get_opt, create when
    // missing, replace (PUT, resourceVersion precondition) otherwise.
    out.push(c("", "configmaps", "create", None, Operator));
    // controllers/src/clouds.rs `resolve`: Api::<OpenstackCloud>::get_opt by the name in
    // spec.cloudRef, patch_status with the connection's outcome; gc.rs `sweep_all` lists
    // them; Api::<Secret>::get_opt of the cloud's clouds.yaml Secret, which the RBAC allows
    // in the operator's namespace.
    out.push(c("sunet.se", "openstackclouds", "get", None, Cluster));
    out.push(c("sunet.se", "openstackclouds", "list", None, Cluster));
    out.push(c(
        "sunet.se",
        "openstackclouds/status",
        "patch",
        None,
        Cluster,
    ));
    out.push(c("", "secrets", "get", None, Operator));
    // rotation/run.rs: the new application credential is written to the cloud's Secret
    // (replace, over the version read) and the switch's annotations removed (patch).
    out.push(c("", "secrets", "update", None, Operator));
    out.push(c("", "secrets", "patch", None, Operator));
    // rotation/tenant/run.rs: an OpenstackProject's tenant credential is delivered as a
    // Secret in the project's namespace (read, created, replaced over the version read, its
    // rotation annotations removed by patch, deleted when spec.applicationCredential goes).
    for verb in ["get", "create", "update", "patch", "delete"] {
        out.push(c("", "secrets", verb, None, Cluster));
    }
    for verb in ["get", "update"] {
        out.push(c(
            "",
            "configmaps",
            verb,
            Some("openstack-operator-managed-resources"),
            Operator,
        ));
    }
    out
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| a.iter().map(|s| s.as_str().unwrap().to_string()).collect())
        .unwrap_or_default()
}

struct Rule {
    groups: Vec<String>,
    resources: Vec<String>,
    verbs: Vec<String>,
    names: Vec<String>,
    scope: Scope,
}

fn rules(docs: &[Value]) -> Vec<Rule> {
    rules_of(docs, "openstack-operator", true)
}

/// The rules of the ClusterRole `name` and, with `with_role`, of the Role of the same name.
fn rules_of(docs: &[Value], name: &str, with_role: bool) -> Vec<Rule> {
    let mut out = Vec::new();
    for (kind, scope) in [("ClusterRole", Scope::Cluster), ("Role", Scope::Operator)] {
        if kind == "Role" && !with_role {
            assert!(
                !docs
                    .iter()
                    .any(|d| d["kind"] == "Role" && d["metadata"]["name"] == name),
                "unexpected Role {name}"
            );
            continue;
        }
        let role = find(docs, kind, name);
        if scope == Scope::Operator {
            assert_eq!(role["metadata"]["namespace"], NAMESPACE);
        }
        for r in role["rules"].as_array().unwrap() {
            out.push(Rule {
                groups: strings(&r["apiGroups"]),
                resources: strings(&r["resources"]),
                verbs: strings(&r["verbs"]),
                names: strings(&r["resourceNames"]),
                scope,
            });
        }
    }
    out
}

fn check_rbac(docs: &[Value]) {
    check_rules(&rules(docs), &calls());
    // The bindings give the rules to the operator's ServiceAccount.
    for kind in ["ClusterRoleBinding", "RoleBinding"] {
        let b = find(docs, kind, "openstack-operator");
        assert_eq!(
            b["subjects"],
            json!([{"kind": "ServiceAccount", "name": "openstack-operator", "namespace": NAMESPACE}]),
            "{kind} subjects"
        );
    }
    let dep = find(docs, "Deployment", "openstack-operator");
    assert_eq!(
        dep["spec"]["template"]["spec"]["serviceAccountName"],
        "openstack-operator"
    );
}

/// Every call is allowed by a rule, and every rule allows only calls of the list.
fn check_rules(rules: &[Rule], calls: &[Call]) {
    for r in rules {
        for s in r
            .groups
            .iter()
            .chain(&r.resources)
            .chain(&r.verbs)
            .chain(&r.names)
        {
            assert!(!s.contains('*'), "wildcard in RBAC rule: {s}");
        }
    }
    // Every call is allowed, in the right place.
    for c in calls {
        let ok = rules.iter().any(|r| {
            r.scope == c.scope
                && r.groups.iter().any(|g| g == c.group)
                && r.resources.iter().any(|x| x == c.resource)
                && r.verbs.iter().any(|v| v == c.verb)
                && (r.names.is_empty() || c.name.is_some_and(|n| r.names.iter().any(|x| x == n)))
        });
        assert!(
            ok,
            "no {:?} rule allows {} {}/{} {:?}",
            c.scope, c.verb, c.group, c.resource, c.name
        );
    }
    // Nothing else is granted: every (group, resource, verb[, name]) a rule grants is a call.
    for r in rules {
        for g in &r.groups {
            for res in &r.resources {
                for v in &r.verbs {
                    let matching: Vec<&Call> = calls
                        .iter()
                        .filter(|c| {
                            c.scope == r.scope && c.group == g && c.resource == res && c.verb == v
                        })
                        .collect();
                    assert!(
                        !matching.is_empty(),
                        "{:?} rule grants {v} {g}/{res}, which the code never calls",
                        r.scope
                    );
                    if r.names.is_empty() {
                        assert!(
                            matching.iter().any(|c| c.name.is_none()),
                            "{:?} rule grants {v} {g}/{res} on every object; the code needs only {:?}: use resourceNames",
                            r.scope,
                            matching.iter().map(|c| c.name).collect::<Vec<_>>()
                        );
                    } else {
                        for n in &r.names {
                            assert!(
                                matching.iter().any(|c| c.name == Some(n.as_str())),
                                "{:?} rule grants {v} {g}/{res} {n}, which the code never calls",
                                r.scope
                            );
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn rbac_grants_exactly_the_calls_the_code_makes() {
    check_rbac(&overlay());
    check_rbac(&chart(json!({})));
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(rust_files(&p));
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
    out.sort();
    out
}

/// A guard for the list above: every Kubernetes API type the operator's code opens an `Api`
/// on, and every client-side helper that makes calls of its own, must be known here. A new
/// one fails this test until its calls are added to `calls()` and to the RBAC rules.
#[test]
fn calls_list_covers_the_apis_the_code_uses() {
    let known = [
        "Self",                     // the five kinds (framework.rs, Managed::api)
        "K",                        // the five kinds (framework.rs, generic)
        "CustomResourceDefinition", // run.rs wait_for_crd
        "ConfigMap",                // project/mod.rs read_federation, gc.rs registry
        "$t",                       // gc.rs live_resources: lists the five kinds (macro)
        // The five kinds by name (run.rs: the watched Api, namespaced with WATCH_NAMESPACE).
        "OpenstackDomain",
        "OpenstackFlavor",
        "OpenstackImage",
        "OpenstackNetwork",
        "OpenstackProject",
        "OpenstackCloud", // clouds.rs resolve and status, gc.rs sweep_all
        "Secret",         // clouds.rs: an OpenstackCloud's clouds.yaml; rotation/run.rs writes it
    ];
    let mut found = BTreeSet::new();
    for dir in [
        "crates/resource-operator/resource-controllers/src",
        "crates/openstack-operator/src",
    ] {
        for file in rust_files(&repo().join(dir)) {
            // vk_tenants.rs is the virtual kubelet's and webhook.rs the control plane's
            // (`call_lists_cover_the_apis_the_parts_use`).
            if file
                .file_name()
                .is_some_and(|n| n == "tests.rs" || n == "vk_tenants.rs" || n == "webhook.rs")
            {
                continue;
            }
            let src = std::fs::read_to_string(&file).unwrap();
            // Inline unit-test modules do not run in the cluster.
            let src = src.split("#[cfg(test)]\nmod tests {").next().unwrap();
            for pat in ["Api<", "Api::<"] {
                for (i, _) in src.match_indices(pat) {
                    let rest = &src[i + pat.len()..];
                    let ty: String = rest
                        .chars()
                        .take_while(|c| c.is_alphanumeric() || matches!(c, '_' | ':' | '$'))
                        .collect();
                    let ty = ty.rsplit("::").next().unwrap().to_string();
                    assert!(
                        known.contains(&ty.as_str()),
                        "{} opens Api<{ty}>: add the calls it makes to calls() in crates/resource-operator/resource-api/tests/suite/deploy.rs and to the RBAC rules (deploy/kustomize/base/rbac.yaml, deploy/helm/openstack-operator/templates)",
                        file.display()
                    );
                    found.insert(ty);
                }
            }
            for (helper, what) in [
                ("kube_lease_manager", "leases (leader election)"),
                ("Recorder", "events.k8s.io events"),
                ("finalizer(", "patches of the kinds"),
                ("patch_status", "patches of /status"),
            ] {
                if src.contains(helper) {
                    found.insert(format!("{helper} ({what})"));
                }
            }
        }
    }
    // The helpers whose calls are in the list are still used (otherwise drop their rules).
    for needed in [
        "Recorder",
        "finalizer(",
        "patch_status",
        "ConfigMap",
        "CustomResourceDefinition",
    ] {
        assert!(
            found.iter().any(|f| f.starts_with(needed)),
            "{needed} is no longer used: remove its calls from calls() and the RBAC rules ({found:?})"
        );
    }
}

// ------------------------------------------------------------------------------------------
// CRD copies

#[test]
fn crd_copies_equal_deploy_crds() {
    let src = repo().join("deploy/crds");
    let sync = std::env::var_os("DEPLOY_SYNC_CRDS").is_some();
    for copy in [
        "deploy/helm/openstack-operator/crds",
        "deploy/kustomize/base/crds",
    ] {
        let dst = repo().join(copy);
        if sync {
            for f in yaml_files(&dst) {
                std::fs::remove_file(f).unwrap();
            }
            for f in yaml_files(&src) {
                std::fs::copy(&f, dst.join(f.file_name().unwrap())).unwrap();
            }
        }
        let names = |d: &Path| -> Vec<String> {
            yaml_files(d)
                .iter()
                .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
                .collect()
        };
        let hint = "copy them with `DEPLOY_SYNC_CRDS=1 cargo test -p resource-api --test suite deploy::crd_copies`";
        assert_eq!(
            names(&src),
            names(&dst),
            "{copy} holds other files than deploy/crds; {hint}"
        );
        for n in names(&src) {
            let a = std::fs::read(src.join(&n)).unwrap();
            let b = std::fs::read(dst.join(&n)).unwrap();
            assert!(a == b, "{copy}/{n} differs from deploy/crds/{n}; {hint}");
        }
    }
}

/// When a real `helm` is installed, it must render what the renderer above renders.
#[test]
fn real_helm_agrees_with_the_renderer() {
    let Ok(out) = Command::new("helm")
        .args(["template", "openstack-operator"])
        .arg(chart_dir())
        .args(["--namespace", NAMESPACE, "--include-crds"])
        .output()
    else {
        eprintln!("helm is not installed; the chart was checked with the test's own renderer only");
        return;
    };
    assert!(
        out.status.success(),
        "helm template: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let real = parse(&String::from_utf8_lossy(&out.stdout), "helm template");
    assert_same(real, chart(json!({})), "helm template vs the test renderer");
    // And with the other two parts on.
    let out = Command::new("helm")
        .args(["template", "openstack-operator"])
        .arg(chart_dir())
        .args(["--namespace", NAMESPACE, "--include-crds"])
        .args([
            "--set",
            "controlPlane.enabled=true,virtualKubelet.enabled=true",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "helm template with both parts: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let real = parse(&String::from_utf8_lossy(&out.stdout), "helm template");
    assert_same(
        real,
        chart(json!({"controlPlane": {"enabled": true}, "virtualKubelet": {"enabled": true}})),
        "helm template with both parts vs the test renderer",
    );
}

// ------------------------------------------------------------------------------------------
// The two other parts of the binary: the control-plane operator and the Zun virtual kubelet.
// Each has a namespace-less kustomize base (deploy/kustomize/control-plane,
// deploy/kustomize/virtual-kubelet) and a chart flag (controlPlane.enabled,
// virtualKubelet.enabled) rendering the same objects.

const CP: &str = "openstack-operator-control-plane";
const VK: &str = "openstack-operator-virtual-kubelet";
const VK_NODE: &str = "virtual-kubelet";

const CP_CRDS: [&str; 9] = [
    "cinders.controlplane.sunet.se",
    "glances.controlplane.sunet.se",
    "horizons.controlplane.sunet.se",
    "keystones.controlplane.sunet.se",
    "neutrons.controlplane.sunet.se",
    "novas.controlplane.sunet.se",
    "openstackclusters.controlplane.sunet.se",
    "openstackexternalservices.controlplane.sunet.se",
    "placements.controlplane.sunet.se",
];

/// Renders the example overlay plus the given bases (`deploy/kustomize/<base>`) in the
/// operator's namespace with the chart's image tag, as an overlay of the user's would.
fn overlay_with_parts(bases: &[&str]) -> Vec<Value> {
    // Tests run in parallel and several render the same parts: one directory per call.
    static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!(
        "deploy-parts-test-{}-{call}-{}",
        std::process::id(),
        bases.join("-")
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let dir = dir.canonicalize().unwrap();
    let repo = repo().canonicalize().unwrap();
    let up = "../".repeat(dir.components().count() - 1);
    let rel = |p: &str| format!("{up}{}/{p}", repo.strip_prefix("/").unwrap().display());
    let mut k = format!(
        "namespace: {NAMESPACE}\nimages:\n- name: openstack-operator\n  newTag: \"{}\"\nresources:\n- {}\n",
        env!("CARGO_PKG_VERSION"),
        rel("deploy/kustomize/overlays/example")
    );
    for b in bases {
        k.push_str(&format!("- {}\n", rel(&format!("deploy/kustomize/{b}"))));
    }
    std::fs::write(dir.join("kustomization.yaml"), k).unwrap();
    let docs = kustomize(&dir);
    let _ = std::fs::remove_dir_all(&dir);
    docs
}

#[test]
fn parts_are_off_by_default() {
    let docs = chart(json!({}));
    for d in &docs {
        let name = d["metadata"]["name"].as_str().unwrap_or_default();
        assert!(
            name != CP && name != VK && !CP_CRDS.contains(&name),
            "the default render has {} {name}",
            d["kind"]
        );
    }
}

#[test]
fn chart_with_control_plane_renders_the_control_plane_base() {
    assert_same(
        without_kinds(
            overlay_with_parts(&["control-plane"]),
            &["Namespace", "Secret"],
        ),
        chart(json!({"controlPlane": {"enabled": true}})),
        "chart with controlPlane.enabled vs overlays/example + control-plane",
    );
}

/// The control plane's objects in a render: named after it, or its CRDs.
fn control_plane_objects(docs: Vec<Value>) -> Vec<Value> {
    docs.into_iter()
        .filter(|d| {
            let name = d["metadata"]["name"].as_str().unwrap_or_default();
            name.starts_with(CP) || CP_CRDS.contains(&name)
        })
        .collect()
}

#[test]
fn chart_with_the_webhook_renders_the_webhook_overlay() {
    let kustomized = without_kinds(
        kustomize(&repo().join("deploy/kustomize/overlays/control-plane-webhook")),
        &["Namespace"],
    );
    // The overlay's certificate names and CA injection follow the namespace.
    let text = serde_json::to_string(&kustomized).unwrap();
    assert!(
        !text.contains("NAMESPACE/") && !text.contains(".NAMESPACE."),
        "{text}"
    );
    assert_same(
        kustomized,
        control_plane_objects(chart(
            json!({"controlPlane": {"enabled": true, "webhook": {"enabled": true}}}),
        )),
        "chart with controlPlane.webhook.enabled vs overlays/control-plane-webhook",
    );
    // Off by default: no webhook objects, no webhook listener.
    let off = serde_json::to_string(&chart(json!({"controlPlane": {"enabled": true}}))).unwrap();
    for absent in [
        "ValidatingWebhookConfiguration",
        "WEBHOOK_ADDR",
        "cert-manager.io",
    ] {
        assert!(
            !off.contains(absent),
            "{absent} rendered without the webhook"
        );
    }
}

/// The packaged webhook configuration checks every kind the webhook decides on, and only the
/// main resources (the operator's status writes must not depend on it).
#[test]
fn the_packaged_webhook_matches_every_kind_the_operator_checks() {
    let docs = kustomize(&repo().join("deploy/kustomize/overlays/control-plane-webhook"));
    let config = docs
        .iter()
        .find(|d| d["kind"] == "ValidatingWebhookConfiguration")
        .expect("a ValidatingWebhookConfiguration");
    let hook = &config["webhooks"][0];
    assert_eq!(hook["failurePolicy"], "Fail");
    assert_eq!(hook["sideEffects"], "None");
    assert_eq!(hook["clientConfig"]["service"]["path"], "/validate");
    assert_eq!(hook["clientConfig"]["service"]["namespace"], NAMESPACE);
    let resources: Vec<String> = strings(&hook["rules"][0]["resources"]);
    let mut plural: Vec<String> = CP_CRDS
        .iter()
        .map(|c| c.split('.').next().unwrap().to_string())
        .filter(|p| p != "openstackexternalservices")
        .collect();
    plural.sort();
    let mut got = resources.clone();
    got.sort();
    assert_eq!(got, plural, "webhook rules");
    assert!(resources.iter().all(|r| !r.contains('/')), "{resources:?}");
    // Every kind the rules send is decided by webhook.rs (none admitted unchecked).
    let webhook =
        std::fs::read_to_string(repo().join("crates/openstack-operator/src/webhook.rs")).unwrap();
    for kind in [
        "OpenStackCluster",
        "Keystone",
        "Placement",
        "Glance",
        "Nova",
        "Neutron",
        "Cinder",
        "Horizon",
    ] {
        assert!(
            webhook.contains(&format!("\"{kind}\" =>")),
            "webhook.rs does not check {kind}"
        );
    }
    // The Deployment listens where the Service sends it, with the certificate where the
    // operator reads it by default.
    let dep = docs.iter().find(|d| d["kind"] == "Deployment").unwrap();
    let c = &dep["spec"]["template"]["spec"]["containers"][0];
    assert!(
        c["env"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["name"] == "WEBHOOK_ADDR" && e["value"] == "0.0.0.0:9443")
    );
    assert!(
        c["volumeMounts"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["mountPath"] == "/tmp/k8s-webhook-server/serving-certs")
    );
}

#[test]
fn chart_with_virtual_kubelet_renders_the_virtual_kubelet_base() {
    assert_same(
        without_kinds(
            overlay_with_parts(&["virtual-kubelet"]),
            &["Namespace", "Secret"],
        ),
        chart(json!({"virtualKubelet": {"enabled": true}})),
        "chart with virtualKubelet.enabled vs overlays/example + virtual-kubelet",
    );
}

#[test]
fn chart_with_every_part_renders_every_base() {
    assert_same(
        without_kinds(
            overlay_with_parts(&["control-plane", "virtual-kubelet"]),
            &["Namespace"],
        ),
        chart(json!({
            "credentials": {"cloudsYaml": overlay_clouds_yaml()},
            "controlPlane": {"enabled": true},
            "virtualKubelet": {"enabled": true},
        })),
        "chart with both parts vs overlays/example + both bases",
    );
}

#[test]
fn virtual_kubelet_options_change_what_they_say() {
    let docs = chart(json!({"virtualKubelet": {
        "enabled": true,
        "nodeName": "zun-a",
        "network": "pods-net",
        "rotateServerCertificates": false,
        "credentials": {"cloudsYaml": "clouds: {}\n", "secretName": "vk-creds", "cloud": "zun"},
        "log": {"format": "text", "level": "debug"},
        "transitionPollMillis": 0,
        "zunCallTimeoutSeconds": 12,
        "exitCheckSeconds": 0,
    }}));
    let dep = find(&docs, "Deployment", VK);
    let c = &dep["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(c["args"], json!(["virtual-kubelet", "--log-format=text"]));
    let env = c["env"].as_array().unwrap();
    let value = |n: &str| {
        env.iter()
            .find(|e| e["name"] == n)
            .map(|e| e["value"].clone())
            .unwrap_or(Value::Null)
    };
    assert_eq!(value("VK_NODE_NAME"), "zun-a");
    assert_eq!(value("VK_NETWORK"), "pods-net");
    assert_eq!(value("OS_CLOUD"), "zun");
    assert_eq!(value("LOG_LEVEL"), "debug");
    assert_eq!(value("VK_TRANSITION_POLL_MILLIS"), "0");
    assert_eq!(value("VK_ZUN_CALL_TIMEOUT_SECONDS"), "12");
    assert_eq!(value("VK_EXIT_CHECK_SECONDS"), "0");
    assert_eq!(
        dep["spec"]["template"]["spec"]["volumes"][0]["secret"]["secretName"],
        "vk-creds"
    );
    let secret = find(&docs, "Secret", "vk-creds");
    assert_eq!(secret["data"]["clouds.yaml"], "Y2xvdWRzOiB7fQo=");
    // Without the CSR path the CSR rule goes, and the node's name follows nodeName.
    let rules = rules_of(&docs, VK, false);
    check_rules(&rules, &virtual_kubelet_calls("zun-a", false));
}

/// The pod's address is the Node's InternalIP: the API server reaches the kubelet API there.
#[test]
fn virtual_kubelet_publishes_its_pod_ip_and_kubelet_port() {
    let docs = overlay_with_parts(&["virtual-kubelet"]);
    let dep = find(&docs, "Deployment", VK);
    assert_eq!(dep["spec"]["replicas"], 1);
    assert_eq!(dep["spec"]["strategy"]["type"], "Recreate");
    let pod = &dep["spec"]["template"]["spec"];
    assert!(
        pod["hostNetwork"].is_null(),
        "the VK runs on the pod network"
    );
    let c = &pod["containers"][0];
    let env = c["env"].as_array().unwrap();
    let ip = env.iter().find(|e| e["name"] == "VK_INTERNAL_IP").unwrap();
    assert_eq!(ip["valueFrom"]["fieldRef"]["fieldPath"], "status.podIP");
    let port = env.iter().find(|e| e["name"] == "KUBELET_PORT").unwrap();
    assert_eq!(
        c["ports"],
        json!([{"name": "kubelet", "containerPort": port["value"].as_str().unwrap().parse::<u16>().unwrap(), "protocol": "TCP"}])
    );
    assert_eq!(c["readinessProbe"]["tcpSocket"]["port"], "kubelet");
    assert_eq!(
        c["image"],
        format!("openstack-operator:{}", env!("CARGO_PKG_VERSION"))
    );
    assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true);
}

// --- the calls each part makes -------------------------------------------------------------

fn leak(s: String) -> &'static str {
    Box::leak(s.into_boxed_str())
}

/// What `openstack-operator control-plane` calls (crates/openstack-operator/src/control_plane.rs
/// and crates/control-plane/controlplane-controllers/src).
fn control_plane_calls() -> Vec<Call> {
    use Scope::Cluster;
    let c = |group, resource, verb| Call {
        group,
        resource,
        verb,
        name: None,
        scope: Cluster,
    };
    let g = "controlplane.sunet.se";
    let mut out = Vec::new();
    for kind in [
        "openstackclusters",
        "keystones",
        "openstackexternalservices",
        "placements",
        "novas",
        "cinders",
        "glances",
        "neutrons",
        "horizons",
    ] {
        // Controller::new (cluster.rs, external.rs, service.rs `run`), service.rs .watches of
        // the external services and Keystones, cluster.rs .owns of the Keystones: list + watch.
        out.push(c(g, kind, "list"));
        out.push(c(g, kind, "watch"));
        // service.rs `reconcile` reads the service CR fresh, `external` the external services
        // and `keystone` the Keystone (get_opt); granted on clusters too: get reveals nothing
        // list does not.
        out.push(c(g, kind, "get"));
        // runtime.rs `write_status`: patch_status with a server-side apply patch.
        out.push(c(g, leak(format!("{kind}/status")), "patch"));
    }
    // cluster.rs `reconcile`: runtime::apply of each service CR (server-side apply creates it).
    for kind in [
        "keystones",
        "placements",
        "novas",
        "cinders",
        "glances",
        "neutrons",
        "horizons",
    ] {
        out.push(c(g, kind, "patch"));
        out.push(c(g, kind, "create"));
    }
    // Not granted: the owner references (kube's controller_owner_ref) have no
    // blockOwnerDeletion, so no update of the owners' finalizers; where the
    // OwnerReferencesPermissionEnforcement admission plugin is on (OpenShift), setting an owner
    // reference needs delete on the child, which docs/install.md tells to add there.
    // control_plane.rs -> run.rs `wait_for_crd`: get of each CRD by name.
    for crd in CP_CRDS {
        out.push(Call {
            name: Some(crd),
            ..c("apiextensions.k8s.io", "customresourcedefinitions", "get")
        });
    }
    // runtime.rs `Ctx::event`: kube Recorder (events.k8s.io/v1 create, patch when repeated).
    out.push(c("events.k8s.io", "events", "create"));
    out.push(c("events.k8s.io", "events", "patch"));
    // external.rs `run` .watches(secrets): list + watch; `read_key` and keystone.rs
    // `ensure_generated`/`fernet`/admin password: get; `ensure_generated`: create;
    // runtime::apply of the config and fernet Secrets: patch (and create when new);
    // keystone/credential_keys.rs `rotate`: replace with the resourceVersion read (update), so a
    // rotation never overwrites keys it did not see.
    for verb in ["list", "watch", "get", "create", "patch", "update"] {
        out.push(c("", "secrets", verb));
    }
    // keystone.rs `run` .owns(jobs): list + watch; `step`: get_opt, create; `cleanup_jobs`:
    // list by label, delete.
    for verb in ["list", "watch", "get", "create", "delete"] {
        out.push(c("batch", "jobs", verb));
    }
    // keystone.rs `run` .owns(deployments): list + watch; `pass`: runtime::apply.
    for verb in ["list", "watch", "create", "patch"] {
        out.push(c("apps", "deployments", verb));
    }
    // keystone.rs `pass`: runtime::apply of the API Service.
    out.push(c("", "services", "create"));
    out.push(c("", "services", "patch"));
    // glance.rs `ensure_claim`: get_opt of the images PVC, create when missing (never
    // patched or deleted: the images outlive the Glance).
    out.push(c("", "persistentvolumeclaims", "get"));
    out.push(c("", "persistentvolumeclaims", "create"));
    // service.rs `pods_of`: list of a Deployment's pods by its selector while it does not
    // become available (the pods' container statuses name a crash loop); never watched.
    out.push(c("", "pods", "list"));
    out
}

/// What `openstack-operator virtual-kubelet` calls (crates/openstack-operator/src/vk.rs,
/// crates/virtual-kubelet/vk-runtime, crates/virtual-kubelet/vk-kubelet-api; crates/virtual-kubelet/vk-zun makes no Kubernetes call).
fn virtual_kubelet_calls(node: &'static str, rotate: bool) -> Vec<Call> {
    use Scope::Cluster;
    let c = |group, resource, verb| Call {
        group,
        resource,
        verb,
        name: None,
        scope: Cluster,
    };
    let named = |group, resource, verb| Call {
        name: Some(node),
        ..c(group, resource, verb)
    };
    let mut out = vec![
        // vk-runtime runtime.rs `register`: get_opt, create when missing, merge patch.
        named("", "nodes", "get"),
        c("", "nodes", "create"),
        named("", "nodes", "patch"),
        // `write_node_status`: merge patch of nodes/status.
        named("", "nodes/status", "patch"),
        // `run`, --on-shutdown delete.
        named("", "nodes", "delete"),
        // `renew_lease`: get_opt, replace (PUT), create when missing.
        named("coordination.k8s.io", "leases", "get"),
        named("coordination.k8s.io", "leases", "update"),
        c("coordination.k8s.io", "leases", "create"),
        // `run`: watcher(Api::all) with the field selector spec.nodeName: list + watch;
        // vk-kubelet-api kube_pods.rs: get_opt and list with the same selector.
        c("", "pods", "list"),
        c("", "pods", "watch"),
        c("", "pods", "get"),
        // `apply_update`: replace_status (PUT of pods/status); delete with grace period 0 and
        // the uid precondition once the containers are gone.
        c("", "pods/status", "update"),
        c("", "pods", "delete"),
        // `record_event`: core v1 Event create.
        c("", "events", "create"),
        // `KubeObjects`: get_opt of ConfigMaps and Secrets named by env valueFrom/envFrom.
        c("", "configmaps", "get"),
        c("", "secrets", "get"),
        // `KubeObjects::custom` (a DynamicObject): get_opt of the OpenstackProject named by the
        // pod annotation virtual-kubelet.sunet.se/project-network (vk-zun provider.rs).
        c("sunet.se", "openstackprojects", "get"),
        // `KubeObjects::service_account_token`: the TokenRequest of a pod's projected
        // serviceAccountToken volume (vk-zun provider/volume_sync.rs).
        c("", "serviceaccounts/token", "create"),
        // vk-kubelet-api auth.rs `KubeReviewer`.
        c("authentication.k8s.io", "tokenreviews", "create"),
        c("authorization.k8s.io", "subjectaccessreviews", "create"),
    ];
    // Not granted: `renew_lease` creates the namespace kube-node-lease when the Lease create
    // answers 404 (bare test clusters only; the result is ignored). Every real cluster has it.
    if rotate {
        // vk-kubelet-api serving_cert.rs `request_certificate` / `wait_issued`: create (with
        // generateName), get, watch with the field selector metadata.name.
        for verb in ["create", "get", "watch"] {
            out.push(c("certificates.k8s.io", "certificatesigningrequests", verb));
        }
    }
    out
}

fn check_part_rbac(docs: &[Value], sa: &str, calls: &[Call]) {
    check_rules(&rules_of(docs, sa, false), calls);
    let b = find(docs, "ClusterRoleBinding", sa);
    assert_eq!(b["roleRef"]["name"], sa);
    assert_eq!(
        b["subjects"],
        json!([{"kind": "ServiceAccount", "name": sa, "namespace": NAMESPACE}]),
        "ClusterRoleBinding {sa} subjects"
    );
    find(docs, "ServiceAccount", sa);
    let dep = find(docs, "Deployment", sa);
    assert_eq!(dep["spec"]["template"]["spec"]["serviceAccountName"], sa);
}

#[test]
fn control_plane_rbac_grants_exactly_its_calls() {
    let calls = control_plane_calls();
    check_part_rbac(&overlay_with_parts(&["control-plane"]), CP, &calls);
    check_part_rbac(
        &chart(json!({"controlPlane": {"enabled": true}})),
        CP,
        &calls,
    );
}

#[test]
fn virtual_kubelet_rbac_grants_exactly_its_calls() {
    let calls = virtual_kubelet_calls(VK_NODE, true);
    check_part_rbac(&overlay_with_parts(&["virtual-kubelet"]), VK, &calls);
    check_part_rbac(
        &chart(json!({"virtualKubelet": {"enabled": true}})),
        VK,
        &calls,
    );
}

/// Every Kubernetes API type the code opens an `Api` on (and the `Api`-calling helpers it
/// uses) in `dirs`: a new one must be added to the part's call list and RBAC.
fn api_types_in(paths: &[&str]) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for p in paths {
        let path = repo().join(p);
        let files = if path.is_dir() {
            rust_files(&path)
        } else {
            vec![path]
        };
        for file in files {
            if file.file_name().is_some_and(|n| n == "tests.rs")
                || file.components().any(|c| c.as_os_str() == "tests")
            {
                continue;
            }
            let src = std::fs::read_to_string(&file).unwrap();
            let src = src.split("#[cfg(test)]\nmod tests {").next().unwrap();
            for pat in ["Api<", "Api::<"] {
                for (i, _) in src.match_indices(pat) {
                    let rest = &src[i + pat.len()..];
                    let ty: String = rest
                        .chars()
                        .take_while(|c| c.is_alphanumeric() || matches!(c, '_' | ':' | '$'))
                        .collect();
                    found.insert(ty.rsplit("::").next().unwrap().to_string());
                }
            }
            for helper in [
                "Recorder",
                "patch_status",
                "replace_status",
                "Controller::new",
                "watcher(",
                "kube_lease_manager",
                "finalizer(",
            ] {
                if src.contains(helper) {
                    found.insert(helper.to_string());
                }
            }
        }
    }
    found
}

#[test]
fn call_lists_cover_the_apis_the_parts_use() {
    let cp = api_types_in(&[
        "crates/control-plane/controlplane-controllers/src",
        "crates/openstack-operator/src/control_plane.rs",
        "crates/openstack-operator/src/webhook.rs",
    ]);
    let want: BTreeSet<String> = [
        "K",                        // control_plane.rs `api`, runtime.rs apply/write_status
        "T",                        // service.rs `ready_peer` (get of a Placement)
        "OpenStackCluster",         // cluster.rs
        "Keystone",                 // cluster.rs, keystone.rs, service.rs
        "Placement",                // placement.rs, nova.rs (`ready_peer`)
        "Nova",                     // nova.rs, cluster.rs
        "Cinder",                   // cinder.rs, cluster.rs
        "Glance",                   // cluster.rs
        "Neutron",                  // cluster.rs
        "Horizon",                  // cluster.rs
        "PersistentVolumeClaim",    // glance.rs images claim
        "Pod",                      // service.rs `pods_of` (list by a Deployment's selector)
        "OpenStackExternalService", // external.rs, keystone.rs, webhook.rs (get)
        "Secret",                   // external.rs, keystone.rs
        "Job",                      // keystone.rs
        "Deployment",               // keystone.rs
        "Service",                  // keystone.rs
        "Recorder",                 // runtime.rs events
        "patch_status",             // runtime.rs write_status
        "Controller::new",          // list + watch of the kinds, owned and watched types
    ]
    .map(String::from)
    .into();
    assert_eq!(
        cp, want,
        "the control plane's Kubernetes calls changed: update control_plane_calls() in crates/resource-operator/resource-api/tests/suite/deploy.rs and deploy/kustomize/control-plane/rbac.yaml (and the chart)"
    );
    let vk = api_types_in(&[
        "crates/virtual-kubelet/vk-runtime/src",
        "crates/virtual-kubelet/vk-kubelet-api/src",
        "crates/virtual-kubelet/vk-zun/src",
        "crates/openstack-operator/src/vk.rs",
        "crates/openstack-operator/src/vk_tenants.rs",
    ]);
    let want: BTreeSet<String> = [
        "Node",                      // runtime.rs register, status, delete
        "Lease",                     // runtime.rs renew_lease
        "Namespace",                 // runtime.rs renew_lease fallback (deliberately not granted)
        "Pod",                       // runtime.rs watch/status/delete, kube_pods.rs
        "Event",                     // runtime.rs record_event
        "ConfigMap",                 // runtime.rs KubeObjects
        "Secret",                    // runtime.rs KubeObjects
        "DynamicObject",             // runtime.rs KubeObjects::custom (OpenstackProject)
        "ServiceAccount",            // runtime.rs KubeObjects::service_account_token
        "TokenReview",               // auth.rs
        "SubjectAccessReview",       // auth.rs
        "CertificateSigningRequest", // serving_cert.rs
        "replace_status",            // runtime.rs apply_update
        "patch_status",              // runtime.rs write_node_status
        "watcher(",                  // runtime.rs pod watch
        // vk_tenants.rs, only with --tenants (not what the kustomize base and the chart run:
        // docs/virtual-kubelet.md#tenants lists its RBAC): watch, its finalizer (patch), status.
        "ZunTenant",
        // vk-zun services.rs, only with --load-balancers (opt-in, so not granted by the base
        // role: docs/virtual-kubelet.md lists its RBAC): list, finalizer patch, status patch.
        "Service",
        // vk-zun netpol_sync.rs, only with --network-policies (opt-in likewise; its RBAC is in
        // docs/virtual-kubelet.md): list of NetworkPolicies (and of Namespaces, above).
        "NetworkPolicy",
    ]
    .map(String::from)
    .into();
    assert_eq!(
        vk, want,
        "the virtual kubelet's Kubernetes calls changed: update virtual_kubelet_calls() in crates/resource-operator/resource-api/tests/suite/deploy.rs and deploy/kustomize/virtual-kubelet/rbac.yaml (and the chart)"
    );
}

// --- the Deployments run flags that exist ---------------------------------------------------

/// A flag of a clap `Args` struct: its value type and environment variable.
struct Flag {
    /// The field's type with `Option<>`/`Vec<>` removed, e.g. `bool`, `u64`, `LogFormat`.
    ty: String,
    env: Option<String>,
}

/// The flags (`--long`) of the clap `Args` struct in `file`, read from its `#[arg(...)]`
/// attributes and fields.
fn clap_args(file: &str) -> BTreeMap<String, Flag> {
    let src = std::fs::read_to_string(repo().join(file)).unwrap();
    let mut flags = BTreeMap::new();
    for (i, _) in src.match_indices("#[arg(") {
        let rest = &src[i..];
        let end = rest.find(")]").unwrap();
        let attr = &rest[..end];
        let quoted = |key: &str| {
            attr.find(&format!("{key} = \"")).map(|j| {
                let v = &attr[j + key.len() + 4..];
                v[..v.find('"').unwrap()].to_string()
            })
        };
        // The field: the first `name: Type,` line after the attribute(s).
        let field = rest[end..]
            .lines()
            .skip(1)
            .map(str::trim)
            .find(|l| !l.starts_with("#[") && !l.starts_with("///") && l.contains(':'))
            .unwrap();
        let field = field.trim_start_matches("pub ").trim_end_matches(',');
        let (name, ty) = field.split_once(':').unwrap();
        assert!(attr.contains("long"), "{file}: {name} has no --long flag");
        let ty = ty.trim();
        let ty = ["Option<", "Vec<"]
            .iter()
            .find_map(|w| ty.strip_prefix(w).and_then(|t| t.strip_suffix('>')))
            .unwrap_or(ty);
        flags.insert(
            format!(
                "--{}",
                quoted("long").unwrap_or_else(|| name.replace('_', "-"))
            ),
            Flag {
                ty: ty.rsplit("::").next().unwrap().to_string(),
                env: quoted("env"),
            },
        );
    }
    assert!(!flags.is_empty(), "{file}: no #[arg] found");
    flags
}

/// The literal defaults of the flags in `file` that have an environment variable, by that
/// variable (`default_value_t = 500` or `default_value = "info"`; defaults naming a constant
/// are left out).
fn clap_env_defaults(file: &str) -> BTreeMap<String, String> {
    let src = std::fs::read_to_string(repo().join(file)).unwrap();
    let mut out = BTreeMap::new();
    for (i, _) in src.match_indices("#[arg(") {
        let rest = &src[i..];
        let attr = &rest[..rest.find(")]").unwrap()];
        let after = |key: &str| attr.find(key).map(|j| &attr[j + key.len()..]);
        let Some(env) = after("env = \"").map(|v| v[..v.find('"').unwrap()].to_string()) else {
            continue;
        };
        let default = after("default_value = \"")
            .map(|v| v[..v.find('"').unwrap()].to_string())
            .or_else(|| {
                after("default_value_t = ").map(|v| {
                    v[..v.find([',', ')']).unwrap_or(v.len())]
                        .trim()
                        .to_string()
                })
            });
        if let Some(d) = default.filter(|d| !d.contains("::")) {
            out.insert(env, d);
        }
    }
    out
}

/// What the chart's and the kustomize base's virtual kubelet set by default through a flag's
/// environment variable is that flag's default in the binary: a value that restates a default
/// must not drift from it.
#[test]
fn virtual_kubelet_deployments_restate_the_binarys_defaults() {
    let defaults = clap_env_defaults("crates/openstack-operator/src/vk.rs");
    for name in [
        "VK_TRANSITION_POLL_MILLIS",
        "VK_ZUN_CALL_TIMEOUT_SECONDS",
        "VK_EXIT_CHECK_SECONDS",
    ] {
        assert!(defaults.contains_key(name), "{name} in {defaults:?}");
    }
    for (what, docs) in [
        ("chart", chart(json!({"virtualKubelet": {"enabled": true}}))),
        ("kustomize", overlay_with_parts(&["virtual-kubelet"])),
    ] {
        let dep = find(&docs, "Deployment", VK);
        let mut checked = 0;
        for e in dep["spec"]["template"]["spec"]["containers"][0]["env"]
            .as_array()
            .unwrap()
        {
            let name = e["name"].as_str().unwrap();
            if let (Some(v), Some(d)) = (e["value"].as_str(), defaults.get(name)) {
                assert_eq!(v, d, "{what}: {name} is {v}, the binary's default {d}");
                checked += 1;
            }
        }
        assert!(checked >= 3, "{what}: {checked} defaults checked");
    }
}

/// The values clap accepts for a `ValueEnum` defined in crates/openstack-operator/src: its
/// variants in kebab case; `None` when `ty` is no such enum.
fn value_enum(ty: &str) -> Option<Vec<String>> {
    for file in rust_files(&repo().join("crates/openstack-operator/src")) {
        let src = std::fs::read_to_string(&file).unwrap();
        let Some(i) = src.find(&format!("pub enum {ty} {{")) else {
            continue;
        };
        let derive = &src[..i].rsplit("#[derive(").next().unwrap();
        assert!(derive.contains("ValueEnum"), "{ty} is not a clap ValueEnum");
        let body = &src[i..i + src[i..].find('}').unwrap()];
        let variants = body
            .lines()
            .skip(1)
            .map(str::trim)
            .filter(|l| !l.starts_with("//") && !l.is_empty())
            .map(|l| {
                let v = l.trim_end_matches(',');
                let mut kebab = String::new();
                for (n, ch) in v.chars().enumerate() {
                    if ch.is_uppercase() && n > 0 {
                        kebab.push('-');
                    }
                    kebab.push(ch.to_ascii_lowercase());
                }
                kebab
            })
            .collect();
        return Some(variants);
    }
    None
}

/// `value` is one clap accepts for a flag of type `ty` (only types the manifests use).
fn check_value(what: &str, ty: &str, value: &str) {
    let ok = match ty {
        "String" | "PathBuf" => true,
        "bool" => ["true", "false"].contains(&value),
        "u64" | "i32" | "u16" => value.parse::<i64>().is_ok(),
        "f64" => value.parse::<f64>().is_ok(),
        "SocketAddr" => value.parse::<std::net::SocketAddr>().is_ok(),
        "IpAddr" => value.parse::<std::net::IpAddr>().is_ok(),
        other => {
            let variants = value_enum(other)
                .unwrap_or_else(|| panic!("{what}: unknown flag type {other}: extend check_value"));
            value.split(',').all(|v| variants.iter().any(|x| x == v))
        }
    };
    assert!(ok, "{what}: {value:?} is not a valid {ty}");
}

/// Environment variables the code under `dirs` reads itself (not through clap).
fn env_reads(dirs: &[&str]) -> BTreeSet<String> {
    let mut known = BTreeSet::new();
    for dir in dirs {
        for file in rust_files(&repo().join(dir)) {
            let src = std::fs::read_to_string(&file).unwrap();
            for pat in [
                "env::var(\"",
                "env::var_os(\"",
                "env_num::<usize>(\"",
                "env_num::<u32>(\"",
                "env_num::<u64>(\"",
                "set(\"",
            ] {
                for (i, _) in src.match_indices(pat) {
                    let rest = &src[i + pat.len()..];
                    known.insert(rest[..rest.find('"').unwrap()].to_string());
                }
            }
        }
    }
    known
}

fn check_command(dep: &Value, subcommand: &str, args_file: &str, env_dirs: &[&str]) {
    // The subcommands are defined in the binary's library (`cli.rs`), where tests reach them.
    let main =
        std::fs::read_to_string(repo().join("crates/openstack-operator/src/cli.rs")).unwrap();
    let variant: String = subcommand
        .split('-')
        .map(|w| w[..1].to_uppercase() + &w[1..])
        .collect();
    assert!(
        main.contains(&format!("    {variant}(")),
        "cli.rs has no subcommand {subcommand} ({variant})"
    );
    let flags = clap_args(args_file);
    let c = &dep["spec"]["template"]["spec"]["containers"][0];
    let args = strings(&c["args"]);
    assert_eq!(args.first().map(String::as_str), Some(subcommand));
    for a in &args[1..] {
        let (flag, value) = match a.split_once('=') {
            Some((f, v)) => (f, Some(v)),
            None => (a.as_str(), None),
        };
        let f = flags.get(flag).unwrap_or_else(|| {
            panic!(
                "{}: {flag} is not a flag of `openstack-operator {subcommand}` ({:?})",
                key(dep),
                flags.keys().collect::<Vec<_>>()
            )
        });
        match (f.ty.as_str(), value) {
            ("bool", None) => {}
            ("bool", Some(_)) => panic!("{}: {a}: a switch takes no value", key(dep)),
            (_, None) => panic!("{}: {a}: write values as {flag}=VALUE", key(dep)),
            (ty, Some(v)) => check_value(&format!("{} {flag}", key(dep)), ty, v),
        }
    }
    let read = env_reads(env_dirs);
    for e in c["env"].as_array().unwrap() {
        let name = e["name"].as_str().unwrap();
        match flags.values().find(|f| f.env.as_deref() == Some(name)) {
            Some(f) => {
                if let Some(v) = e["value"].as_str()
                    && !(v.is_empty() && f.ty == "String")
                {
                    check_value(&format!("{} env {name}", key(dep)), &f.ty, v);
                }
            }
            None => assert!(
                read.contains(name),
                "{}: {name} is neither the env of a flag of `openstack-operator {subcommand}` nor read by the code",
                key(dep)
            ),
        }
    }
}

#[test]
fn deployments_run_their_subcommand_with_existing_flags() {
    let docs = chart(json!({
        "controlPlane": {"enabled": true},
        "virtualKubelet": {"enabled": true, "network": "n"},
    }));
    let kdocs = overlay_with_parts(&["control-plane", "virtual-kubelet"]);
    for d in [&docs, &kdocs] {
        check_command(
            find(d, "Deployment", CP),
            "control-plane",
            "crates/openstack-operator/src/control_plane.rs",
            &["crates/openstack-operator/src"],
        );
        check_command(
            find(d, "Deployment", VK),
            "virtual-kubelet",
            "crates/openstack-operator/src/vk.rs",
            &[
                "crates/openstack-operator/src",
                "crates/shared/openstack/src",
            ],
        );
    }
    // The probes and the Service use the ports the defaults of --health-addr/--metrics-addr
    // name, which the Deployment also sets explicitly.
    let dep = find(&kdocs, "Deployment", CP);
    let c = &dep["spec"]["template"]["spec"]["containers"][0];
    let env = c["env"].as_array().unwrap();
    let value = |n: &str| {
        env.iter()
            .find(|e| e["name"] == n)
            .and_then(|e| e["value"].as_str())
            .unwrap()
            .to_string()
    };
    let port = |addr: String| addr.rsplit(':').next().unwrap().parse::<u64>().unwrap();
    assert_eq!(
        c["ports"],
        json!([
            {"name": "health", "containerPort": port(value("HEALTH_ADDR")), "protocol": "TCP"},
            {"name": "metrics", "containerPort": port(value("METRICS_ADDR")), "protocol": "TCP"},
        ])
    );
    assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz");
    let svc = find(&kdocs, "Service", CP);
    assert_eq!(svc["spec"]["ports"][1]["targetPort"], "metrics");
}

// --- control-plane CRD copies ---------------------------------------------------------------

/// The chart's template of a control-plane CRD: the CRD, kept on uninstall, under the flag.
fn cp_crd_template(crd: &str) -> String {
    let body = crd.replacen(
        "metadata:\n",
        "metadata:\n  annotations:\n    # helm uninstall must not delete the CRDs: that would delete every object of the kind.\n    helm.sh/resource-policy: keep\n",
        1,
    );
    format!("{{{{- if .Values.controlPlane.enabled }}}}\n{body}{{{{- end }}}}\n")
}

#[test]
fn control_plane_crd_copies_equal_deploy_crds_controlplane() {
    let src = repo().join("deploy/crds-controlplane");
    let sync = std::env::var_os("DEPLOY_SYNC_CRDS").is_some();
    let hint = "copy them with `DEPLOY_SYNC_CRDS=1 cargo test -p resource-api --test suite deploy::control_plane_crd_copies`";
    let names: Vec<String> = yaml_files(&src)
        .iter()
        .map(|p| p.file_stem().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, CP_CRDS.map(String::from), "deploy/crds-controlplane");
    let kdir = repo().join("deploy/kustomize/control-plane/crds");
    let tdir = chart_dir().join("templates");
    for n in &names {
        let crd = std::fs::read_to_string(src.join(format!("{n}.yaml"))).unwrap();
        assert!(
            !crd.contains("{{") && !crd.contains("annotations:"),
            "{n}: the chart template wrapper assumes no template braces and no annotations"
        );
        let k = kdir.join(format!("{n}.yaml"));
        let t = tdir.join(format!("controlplane-crd-{n}.yaml"));
        if sync {
            std::fs::write(&k, &crd).unwrap();
            std::fs::write(&t, cp_crd_template(&crd)).unwrap();
        }
        assert!(
            std::fs::read_to_string(&k).ok().as_deref() == Some(crd.as_str()),
            "{} differs from deploy/crds-controlplane/{n}.yaml; {hint}",
            k.display()
        );
        assert!(
            std::fs::read_to_string(&t).ok().as_deref() == Some(cp_crd_template(&crd).as_str()),
            "{} differs from deploy/crds-controlplane/{n}.yaml; {hint}",
            t.display()
        );
    }
    let kfiles: Vec<String> = yaml_files(&kdir)
        .iter()
        .map(|p| p.file_stem().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        kfiles,
        names,
        "{} holds other files; {hint}",
        kdir.display()
    );
    let tfiles: Vec<String> = yaml_files(&tdir)
        .iter()
        .filter_map(|p| {
            p.file_stem()
                .unwrap()
                .to_string_lossy()
                .strip_prefix("controlplane-crd-")
                .map(String::from)
        })
        .collect();
    assert_eq!(
        tfiles,
        names,
        "{} holds other CRD templates; {hint}",
        tdir.display()
    );
    // The rendered chart has them exactly once, kept on uninstall.
    let docs = chart(json!({"controlPlane": {"enabled": true}}));
    for n in CP_CRDS {
        let crd = find(&docs, "CustomResourceDefinition", n);
        assert_eq!(
            crd["metadata"]["annotations"]["helm.sh/resource-policy"],
            "keep"
        );
    }
}

/// What the chart adds for a flag: its render minus the default render's objects.
fn chart_part(overrides: Value) -> Vec<Value> {
    let base: BTreeSet<String> = chart(json!({})).iter().map(key).collect();
    chart(overrides)
        .into_iter()
        .filter(|d| !base.contains(&key(d)))
        .collect()
}

/// The example overlays of each part install what the chart's flag adds (image tag included).
#[test]
fn part_overlays_render_what_the_chart_adds() {
    assert_same(
        without_kinds(
            kustomize(&repo().join("deploy/kustomize/overlays/control-plane")),
            &["Namespace"],
        ),
        chart_part(json!({"controlPlane": {"enabled": true}})),
        "overlays/control-plane vs the chart's controlPlane part",
    );
    let clouds = std::fs::read_to_string(
        repo().join("deploy/kustomize/overlays/virtual-kubelet/clouds.yaml"),
    )
    .unwrap();
    assert_same(
        without_kinds(
            kustomize(&repo().join("deploy/kustomize/overlays/virtual-kubelet")),
            &["Namespace"],
        ),
        chart_part(
            json!({"virtualKubelet": {"enabled": true, "credentials": {"cloudsYaml": clouds}}}),
        ),
        "overlays/virtual-kubelet vs the chart's virtualKubelet part",
    );
}

/// `d` read as its Kubernetes type and written back: what the type does not know (a
/// misspelt or misplaced field) is dropped and shows as a difference.
fn round_trip(d: &Value) -> Value {
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::core::v1::{Namespace, Secret, Service, ServiceAccount};
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    fn rt<T: serde::de::DeserializeOwned + serde::Serialize>(d: &Value) -> Value {
        let typed: T =
            serde_json::from_value(d.clone()).unwrap_or_else(|e| panic!("{}: {e}", key(d)));
        serde_json::to_value(typed).unwrap()
    }
    match d["kind"].as_str().unwrap_or_default() {
        "Deployment" => rt::<Deployment>(d),
        "Service" => rt::<Service>(d),
        "ServiceAccount" => rt::<ServiceAccount>(d),
        "Secret" => rt::<Secret>(d),
        "Namespace" => rt::<Namespace>(d),
        "ClusterRole" => rt::<ClusterRole>(d),
        "ClusterRoleBinding" => rt::<ClusterRoleBinding>(d),
        "Role" => rt::<Role>(d),
        "RoleBinding" => rt::<RoleBinding>(d),
        "CustomResourceDefinition" => rt::<CustomResourceDefinition>(d),
        other => panic!("{}: no schema check for kind {other}", key(d)),
    }
}

/// Every object the parts install is valid for its Kubernetes type (no unknown fields).
#[test]
fn part_objects_match_their_kubernetes_types() {
    let docs = chart(json!({
        "controlPlane": {"enabled": true},
        "virtualKubelet": {"enabled": true, "network": "n", "credentials": {"cloudsYaml": "x"}},
    }));
    let kdocs = overlay_with_parts(&["control-plane", "virtual-kubelet"]);
    let mut out = Vec::new();
    // normalize: kustomize wraps Secret data, which the API server's decoder accepts.
    for d in normalize(docs).iter().chain(&normalize(kdocs)) {
        diffs(d, &round_trip(d), &key(d), &mut out);
    }
    assert!(
        out.is_empty(),
        "fields their types do not have:\n{}",
        out.join("\n")
    );
}

#[test]
fn chart_without_the_resource_operator_renders_only_the_other_parts() {
    let keys =
        |docs: &[Value]| -> std::collections::BTreeSet<String> { docs.iter().map(key).collect() };
    let parts = json!({"controlPlane": {"enabled": true}, "virtualKubelet": {"enabled": true}});
    let mut without = parts.clone();
    without["resourceOperator"] = json!({"enabled": false});
    let all = keys(&chart(parts));
    let rest = keys(&chart(without));
    // Gone: exactly the resource operator's own objects (what the default chart renders
    // besides the CRDs, which Helm installs from crds/ regardless of values).
    let resource_operator: std::collections::BTreeSet<String> = chart(json!({}))
        .iter()
        .filter(|d| d["kind"] != "CustomResourceDefinition")
        .map(key)
        .collect();
    assert!(!resource_operator.is_empty());
    assert!(rest.is_subset(&all));
    assert_eq!(
        all.difference(&rest)
            .cloned()
            .collect::<std::collections::BTreeSet<_>>(),
        resource_operator
    );
    assert!(
        rest.iter()
            .any(|k| k.contains("openstack-operator-control-plane"))
    );
}
