//! End to end: the bad-input corpus (`tests/bad-input`, including its `runtime/` cases)
//! against the real binary. Every manifest is refused at admission (a 4xx naming the field or
//! the file's expected text, or for an apply whose values do not fit the schema's types the
//! 500 `failed to create typed patch object ...` a real kube-apiserver answers) or is admitted and ends in `Ready=False` with reason
//! `InvalidSpec`/`PolicyViolation`, a message naming the field and a Warning Event naming
//! it too. The whole corpus costs zero OpenStack writes, nothing with its names exists in
//! the cloud, and the admitted objects delete cleanly (the finalizer of an object that never
//! touched OpenStack does not hold it).
//!
//! Each file starts with `# expect: <text>` and may add `# field: <path>` when the expected
//! text is not the full field path (serde wording such as `invalid type`).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use api::naming::project_group_name;
use e2e::k8s::{Applied, events_for, names_field};
use e2e::metrics::{delta, is_read_operation};
use e2e::wait::{Check, wait_for};
use e2e::{EnvOptions, TestEnv};
use futures::StreamExt as _;
use kube::api::DynamicObject;
use openstack::model::{NetworkFilter, ProjectFilter};
use serde_json::{Value, json};

const BIN: &str = env!("CARGO_BIN_EXE_openstack-operator");
/// The floor for the corpus size.
const MIN_FILES: usize = 40;
/// Every kind is covered by at least this many files.
const MIN_PER_KIND: usize = 6;
/// Manifests judged at once (the operator reconciles 4 objects of a kind at once).
const PARALLEL: usize = 8;
/// Time for an admitted object to get its verdict (one reconcile pass, queued behind others).
const VERDICT: Duration = Duration::from_secs(150);
/// Time for an admitted object to be deleted.
const DELETE: Duration = Duration::from_secs(90);
/// `Ready=False` reasons that count as the operator refusing an admitted bad manifest.
const REFUSALS: [&str; 2] = ["InvalidSpec", "PolicyViolation"];
/// Reasons of a pass that decided nothing yet (the operator retries); the wait goes on.
const TRANSIENT: [&str; 2] = ["TransientError", "KubernetesError"];
const KINDS: [&str; 5] = [
    "OpenstackDomain",
    "OpenstackFlavor",
    "OpenstackImage",
    "OpenstackNetwork",
    "OpenstackProject",
];

fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/bad-input")
}

/// Every `.yaml` file under `dir`, subdirectories included, sorted by path.
fn discover(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).with_context(|| format!("listing {}", d.display()))? {
            let path = entry
                .with_context(|| format!("listing {}", d.display()))?
                .path();
            if path.is_dir() {
                todo.push(path);
            } else if path.extension().is_some_and(|x| x == "yaml") {
                out.push(path);
            }
        }
    }
    out.sort();
    Ok(out)
}

/// One corpus file, made ready to apply in this run.
#[derive(Clone, Debug)]
struct Case {
    /// Path relative to `tests/bad-input`.
    file: String,
    /// The header's `# expect:` text.
    expect: String,
    /// The field the refusal must name: `# field:`, else the expected text.
    field: String,
    kind: String,
    /// `metadata.name` as applied (unique for the run).
    name: String,
    /// `spec.name` as applied, when it is a string.
    spec_name: Option<String>,
    manifest: Value,
}

/// Reads a file's header and document, and makes its names unique for this run: the
/// `metadata.name` always, `spec.name` unless the file is about `spec.name`; namespaced
/// objects go into the test's namespace.
fn prepare(path: &Path, index: usize, run: &str, namespace: &str) -> anyhow::Result<Case> {
    let file = path
        .strip_prefix(corpus_dir())
        .unwrap_or(path)
        .display()
        .to_string();
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let header: Vec<&str> = text.lines().take_while(|l| l.starts_with('#')).collect();
    let value_of = |key: &str| {
        header
            .iter()
            .find_map(|l| l.strip_prefix(key))
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
    };
    let expect = value_of("# expect:").with_context(|| format!("{file}: no `# expect:` line"))?;
    anyhow::ensure!(
        text.starts_with("# expect:"),
        "{file}: the first line must be `# expect: ...` (crates/resource-operator/resource-api/tests/suite/bad_input.rs reads it)"
    );
    let field = value_of("# field:").unwrap_or_else(|| expect.clone());
    let mut docs = api::manifest::documents(&text).with_context(|| format!("parsing {file}"))?;
    anyhow::ensure!(docs.len() == 1, "{file}: {} documents, want 1", docs.len());
    let mut doc = docs.remove(0);
    let kind = doc["kind"].as_str().unwrap_or_default().to_string();
    anyhow::ensure!(KINDS.contains(&kind.as_str()), "{file}: kind {kind:?}");
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().to_string())
        .unwrap_or_default();
    let mut name = format!("e2e-bad-{run}-{index:02}-{stem}");
    name.truncate(63);
    let name = name.trim_end_matches('-').to_string();
    doc["metadata"]["name"] = json!(name);
    if kind == "OpenstackProject" {
        doc["metadata"]["namespace"] = json!(namespace);
    }
    let about_spec_name = field == "spec.name" || expect == "spec.name";
    if !about_spec_name && doc["spec"]["name"].is_string() {
        doc["spec"]["name"] = json!(format!("{}{index:02}", prefix(run)));
    }
    let spec_name = doc["spec"]["name"].as_str().map(str::to_string);
    Ok(Case {
        file,
        expect,
        field,
        kind,
        name,
        spec_name,
        manifest: doc,
    })
}

/// The prefix of every `spec.name` this run gives out (what the cloud check looks for).
fn prefix(run: &str) -> String {
    format!("e2e-bad-{run}-")
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Route {
    /// Refused by the API server.
    Admission,
    /// Admitted; the operator refused it with a condition.
    Condition,
}

/// What happened to one file.
#[derive(Debug)]
struct Outcome {
    case: Case,
    route: Option<Route>,
    /// HTTP code, or the condition's reason.
    how: String,
    message: String,
    /// Set when the file was admitted (it must be deleted afterwards).
    applied: Option<Applied>,
    /// Whether the admitted object went away when deleted.
    deleted: Option<bool>,
    problems: Vec<String>,
}

fn condition_of(obj: &DynamicObject, type_: &str) -> Option<Value> {
    obj.data["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
        .cloned()
}

async fn judge(env: &TestEnv, case: Case) -> Outcome {
    let mut out = Outcome {
        case: case.clone(),
        route: None,
        how: String::new(),
        message: String::new(),
        applied: None,
        deleted: None,
        problems: Vec::new(),
    };
    let manifest = match serde_json::to_string(&case.manifest) {
        Ok(m) => m,
        Err(e) => {
            out.problems.push(format!("serializing: {e}"));
            return out;
        }
    };
    match env.try_apply(&manifest).await {
        Err(e) => {
            let described = e.describe();
            // a 4xx, or the 500 a real server gives an apply that does not fit the schema
            match e.status().filter(|_| e.refusal().is_some()) {
                Some(s) => {
                    out.route = Some(Route::Admission);
                    out.how = format!("{} {}", s.code, s.reason);
                    out.message = s.message.clone();
                    if !described.contains(&case.expect) && !names_field(&described, &case.field) {
                        out.problems.push(format!(
                            "refused at admission, but neither {:?} nor the field {:?} is named: {described}",
                            case.expect, case.field
                        ));
                    }
                }
                None => out.problems.push(format!(
                    "the apply failed without a refusal of the object: {described}"
                )),
            }
        }
        Ok(mut applied) => {
            let Some(applied) = applied.pop() else {
                out.problems.push("the apply returned no object".into());
                return out;
            };
            out.route = Some(Route::Condition);
            let api = applied.api(env.client.clone());
            out.applied = Some(applied);
            let verdict = wait_for(
                VERDICT,
                Duration::from_millis(500),
                &format!("a settled Ready condition on {} {}", case.kind, case.name),
                async || {
                    let obj = api.get(&case.name).await?;
                    let generation = obj.metadata.generation;
                    Ok(match condition_of(&obj, "Ready") {
                        Some(c)
                            if c["observedGeneration"].as_i64() == generation
                                && !TRANSIENT
                                    .contains(&c["reason"].as_str().unwrap_or_default()) =>
                        {
                            Check::Done((c, obj.data["status"].clone()))
                        }
                        other => Check::Pending(format!(
                            "generation {generation:?}, Ready condition {other:?}"
                        )),
                    })
                },
            )
            .await;
            let (ready, status) = match verdict {
                Ok(v) => v,
                Err(e) => {
                    out.problems.push(format!("{e:#}"));
                    return out;
                }
            };
            let reason = ready["reason"].as_str().unwrap_or_default().to_string();
            out.how = reason.clone();
            out.message = ready["message"].as_str().unwrap_or_default().to_string();
            if ready["status"] != "False" || !REFUSALS.contains(&reason.as_str()) {
                out.problems.push(format!(
                    "admitted and not refused by the operator: Ready={} reason {reason:?}: {}",
                    ready["status"], out.message
                ));
            }
            if !names_field(&out.message, &case.field) {
                out.problems.push(format!(
                    "the Ready condition does not name {:?}: {}",
                    case.field, out.message
                ));
            }
            // No OpenStack object was recorded: every `*Id` field of the status is empty.
            for (k, v) in status.as_object().into_iter().flatten() {
                if k.ends_with("Id") && !v.is_null() {
                    out.problems.push(format!(
                        "status.{k} = {v}: an OpenStack object was recorded"
                    ));
                }
            }
            let event = wait_for(
                VERDICT,
                Duration::from_millis(500),
                &format!(
                    "a Warning Event naming {:?} about {} {}",
                    case.field, case.kind, case.name
                ),
                async || {
                    let events = events_for(&env.client, &case.kind, &case.name).await?;
                    Ok(
                        match events
                            .iter()
                            .find(|e| e.type_ == "Warning" && names_field(&e.message, &case.field))
                        {
                            Some(e) => Check::Done(e.clone()),
                            None => Check::Pending(format!("events: {events:?}")),
                        },
                    )
                },
            )
            .await;
            if let Err(e) = event {
                out.problems.push(format!("{e:#}"));
            }
        }
    }
    out
}

fn one_line(s: &str, max: usize) -> String {
    let flat: String = s
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if flat.chars().count() <= max {
        flat
    } else {
        format!("{}…", flat.chars().take(max).collect::<String>())
    }
}

/// The summary table: file, route, code or reason, message (problems marked).
fn table(outcomes: &[Outcome]) -> String {
    let width = outcomes
        .iter()
        .map(|o| o.case.file.len())
        .max()
        .unwrap_or(4);
    let mut t = format!(
        "{:<width$}  {:<9}  {:<16}  {:<7}  message\n",
        "file", "route", "code/reason", "deleted"
    );
    for o in outcomes {
        let route = match o.route {
            Some(Route::Admission) => "admission",
            Some(Route::Condition) => "condition",
            None => "-",
        };
        let deleted = match o.deleted {
            Some(true) => "yes",
            Some(false) => "NO",
            None => "-",
        };
        let mark = if o.problems.is_empty() { "" } else { "FAIL " };
        let _ = writeln!(
            t,
            "{:<width$}  {route:<9}  {:<16}  {deleted:<7}  {mark}{}",
            o.case.file,
            o.how,
            one_line(&o.message, 160)
        );
    }
    let count = |r: Route| outcomes.iter().filter(|o| o.route == Some(r)).count();
    let _ = writeln!(
        t,
        "{} files: {} refused at admission, {} refused by the operator, {} with problems",
        outcomes.len(),
        count(Route::Admission),
        count(Route::Condition),
        outcomes.iter().filter(|o| !o.problems.is_empty()).count()
    );
    t
}

/// OpenStack objects carrying one of the corpus' names (a leak: the corpus must create
/// nothing).
async fn found_in_cloud(env: &TestEnv, cases: &[Case], run: &str) -> anyhow::Result<Vec<String>> {
    let prefix = prefix(run);
    let mut found = Vec::new();
    // Names the run did not make unique are invalid ones (blank, too long, control
    // characters); those OpenStack would refuse anyway, and blank ones cannot be searched.
    let checkable = |n: &&str| !n.trim().is_empty() && !n.chars().any(char::is_control);
    let names = |kind: &str| -> BTreeSet<&str> {
        cases
            .iter()
            .filter(|c| c.kind == kind)
            .filter_map(|c| c.spec_name.as_deref())
            .filter(checkable)
            .collect()
    };
    let ours = |n: &str, set: &BTreeSet<&str>| n.starts_with(&prefix) || set.contains(n);

    let domains = names("OpenstackDomain");
    for d in env.cloud.identity.list_domains().await? {
        if ours(&d.name, &domains) {
            found.push(format!("Keystone domain {} ({})", d.name, d.id));
        }
    }
    let flavors = names("OpenstackFlavor");
    for f in env.cloud.compute.list_flavors().await? {
        if ours(&f.name, &flavors) {
            found.push(format!("Nova flavor {} ({})", f.name, f.id));
        }
    }
    for name in names("OpenstackImage") {
        for i in env.cloud.image.list_images_by_name(name).await? {
            found.push(format!("Glance image {} ({})", i.name, i.id));
        }
    }
    for name in names("OpenstackNetwork") {
        let filter = NetworkFilter {
            name: Some(name.to_string()),
            ..Default::default()
        };
        for n in env.cloud.network.list_networks(&filter).await? {
            found.push(format!("Neutron network {} ({})", n.name, n.id));
        }
    }
    let projects = names("OpenstackProject");
    for name in &projects {
        let filter = ProjectFilter {
            name: Some(name.to_string()),
            ..Default::default()
        };
        for p in env.cloud.identity.list_projects(&filter).await? {
            found.push(format!("Keystone project {} ({})", p.name, p.id));
        }
    }
    let groups: BTreeSet<String> = projects.iter().map(|p| project_group_name(p)).collect();
    for g in env.cloud.identity.list_groups(None).await? {
        if g.name.starts_with(&prefix) || groups.contains(&g.name) {
            found.push(format!("Keystone group {} ({})", g.name, g.id));
        }
    }
    Ok(found)
}

async fn write_calls(env: &TestEnv, before: &BTreeMap<String, f64>) -> anyhow::Result<String> {
    let after = env.operator.metrics().await?.api_calls();
    let writes: BTreeMap<String, f64> = delta(before, &after)
        .into_iter()
        .filter(|(op, _)| !is_read_operation(op))
        .collect();
    Ok(if writes.is_empty() {
        String::new()
    } else {
        format!("{writes:?}")
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_bad_manifest_is_refused_without_openstack_writes() -> anyhow::Result<()> {
    let files = discover(&corpus_dir())?;
    anyhow::ensure!(
        files.len() >= MIN_FILES,
        "the corpus has {} manifests, want at least {MIN_FILES}",
        files.len()
    );
    let mut opts = EnvOptions::new(BIN, "bad_input");
    // The test deletes what it applied itself; the harness's cleanup only mops up after a
    // failure, and waiting long there would only repeat a deletion the test saw hang.
    opts.cleanup_timeout = Duration::from_secs(30);
    TestEnv::start("bad_input", opts)
        .await?
        .run(async |env| {
            let run = e2e::names::random_suffix();
            let cases = files
                .iter()
                .enumerate()
                .map(|(i, f)| prepare(f, i, &run, &env.namespace))
                .collect::<anyhow::Result<Vec<_>>>()?;
            let mut general = Vec::new();
            for kind in KINDS {
                let n = cases.iter().filter(|c| c.kind == kind).count();
                if n < MIN_PER_KIND {
                    general.push(format!(
                        "{kind} has {n} bad manifests, want at least {MIN_PER_KIND}"
                    ));
                }
            }
            let before = env.operator.metrics().await?.api_calls();

            let started = Instant::now();
            let mut outcomes: Vec<Outcome> = futures::stream::iter(cases.clone())
                .map(|c| judge(env, c))
                .buffer_unordered(PARALLEL)
                .collect()
                .await;
            outcomes.sort_by(|a, b| a.case.file.cmp(&b.case.file));
            let judged = started.elapsed();

            // Read before deleting: a leak shows while its object still exists.
            match write_calls(env, &before).await {
                Ok(w) if w.is_empty() => {}
                Ok(w) => general.push(format!("OpenStack writes while judging the corpus: {w}")),
                Err(e) => general.push(format!("reading the metrics: {e:#}")),
            }
            match found_in_cloud(env, &cases, &run).await {
                Ok(found) if found.is_empty() => {}
                Ok(found) => general.push(format!(
                    "OpenStack objects with the corpus' names: {}",
                    found.join(", ")
                )),
                Err(e) => general.push(format!("checking the cloud: {e:#}")),
            }

            // The admitted objects must go away; their finalizer has nothing to clean up.
            let started = Instant::now();
            let deletions: Vec<(usize, anyhow::Result<()>)> = futures::stream::iter(
                outcomes
                    .iter()
                    .enumerate()
                    .filter_map(|(i, o)| o.applied.as_ref().map(|a| (i, a.clone()))),
            )
            .map(move |(i, a)| async move {
                let api = a.api(env.client.clone());
                let r = e2e::k8s::delete_dynamic_and_wait(&api, &a.name, DELETE).await;
                if r.is_err() {
                    // Reported below; out of the way now so the harness's cleanup does not
                    // wait for it a second time.
                    let _ = e2e::k8s::strip_finalizers(&api, &a.name).await;
                }
                (i, r)
            })
            .buffer_unordered(PARALLEL)
            .collect()
            .await;
            let deleted = started.elapsed();
            for (i, r) in deletions {
                outcomes[i].deleted = Some(r.is_ok());
                if let Err(e) = r {
                    outcomes[i]
                        .problems
                        .push(format!("deleting the admitted object: {e:#}"));
                }
            }
            match write_calls(env, &before).await {
                Ok(w) if w.is_empty() => {}
                Ok(w) => general.push(format!(
                    "OpenStack writes while judging and deleting the corpus: {w}"
                )),
                Err(e) => general.push(format!("reading the metrics: {e:#}")),
            }

            let summary = format!(
                "{}verdicts of all files in {:.1}s, deletion of the admitted ones in {:.1}s\n",
                table(&outcomes),
                judged.as_secs_f64(),
                deleted.as_secs_f64()
            );
            eprintln!("bad-input corpus, end to end:\n{summary}");
            let mut problems: Vec<String> = outcomes
                .iter()
                .flat_map(|o| o.problems.iter().map(|p| format!("{}: {p}", o.case.file)))
                .collect();
            problems.extend(general);
            anyhow::ensure!(
                problems.is_empty(),
                "{} problems:\n  {}\n\n{summary}",
                problems.len(),
                problems.join("\n  ")
            );
            Ok(())
        })
        .await
}
