//! The deployment manifests: the kustomize overlay and the Helm chart render the same objects,
//! their RBAC grants exactly the API calls the operator makes, and the CRD copies under
//! deploy/helm and deploy/kustomize equal deploy/crds.
//!
//! The overlay is rendered by `kubectl kustomize` (kubectl must be installed). Helm is not
//! installable on our build machines, so the chart is rendered by [`helm`] below: a small
//! renderer for exactly the template subset the chart uses (values substitution, `if`/`else`,
//! `quote`, `toYaml`, `nindent`, `b64enc`, whitespace trimming). It panics on anything else,
//! so a template that outgrows it fails loudly instead of rendering wrongly. When a real `helm`
//! is on PATH, `real_helm_agrees_with_the_renderer` also compares the two.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};

const NAMESPACE: &str = "openstack-operator";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
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
                        "unsupported template action `{a}`: extend the renderer in crates/api/tests/deploy.rs or simplify the template"
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
                "unsupported template function `{f}` with {} argument(s): extend the renderer in crates/api/tests/deploy.rs or simplify the template",
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
        "crates/openstack/src",
        "crates/controllers/src",
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
    let mut out = Vec::new();
    for (kind, scope) in [("ClusterRole", Scope::Cluster), ("Role", Scope::Operator)] {
        let role = find(docs, kind, "openstack-operator");
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
    let rules = rules(docs);
    let calls = calls();
    for r in &rules {
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
    for c in &calls {
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
    for r in &rules {
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
    ];
    let mut found = BTreeSet::new();
    for dir in ["crates/controllers/src", "crates/openstack-operator/src"] {
        for file in rust_files(&repo().join(dir)) {
            if file.file_name().is_some_and(|n| n == "tests.rs") {
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
                        "{} opens Api<{ty}>: add the calls it makes to calls() in crates/api/tests/deploy.rs and to the RBAC rules (deploy/kustomize/base/rbac.yaml, deploy/helm/openstack-operator/templates)",
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
        let hint = "copy them with `DEPLOY_SYNC_CRDS=1 cargo test -p api --test deploy crd_copies`";
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
}
