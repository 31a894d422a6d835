//! The docs name only what exists: every `cargo test -p CRATE --test NAME` a test target of
//! that crate, every `scripts/X` a file of the repository, every flag after
//! `openstack-operator <subcommand>` a flag of that subcommand (from the command line's own
//! definition, [`crate::cli::command`]), every `--flag` alone in a code span a flag of one of
//! its subcommands or of another tool the docs name, and every row of README.md's configuration table a
//! flag and environment variable of `run` with the default it states.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The repository's root (this crate is `crates/openstack-operator`).
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// README.md and every docs/*.md, as (path relative to the root, text).
fn docs() -> Vec<(String, String)> {
    let mut files = vec!["README.md".to_string()];
    let mut in_docs: Vec<String> = std::fs::read_dir(root().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .filter(|n| n.ends_with(".md"))
        .map(|n| format!("docs/{n}"))
        .collect();
    in_docs.sort();
    files.extend(in_docs);
    files
        .into_iter()
        .map(|f| {
            let text = std::fs::read_to_string(root().join(&f)).unwrap();
            (f, text)
        })
        .collect()
}

/// Words of a text, with the punctuation of prose and Markdown around them removed.
fn words(text: &str) -> Vec<String> {
    text.split(|c: char| c.is_whitespace() || "`()[],;|\"'".contains(c))
        // A sentence's `.` or `:` goes; a test filter's `MODULE::` stays.
        .map(|w| {
            let w = w.trim_end_matches('.');
            if w.ends_with("::") {
                w
            } else {
                w.trim_end_matches(':')
            }
            .to_string()
        })
        .filter(|w| !w.is_empty())
        .collect()
}

/// A workspace member's folder, relative to the root, by package name (each crate's folder is
/// named after its package: `crates/<group>/<package>`).
fn crate_dir(krate: &str) -> Option<String> {
    let manifest = std::fs::read_to_string(root().join("Cargo.toml")).unwrap();
    manifest
        .lines()
        .map(|l| l.trim().trim_end_matches(',').trim_matches('"'))
        .find(|m| m.starts_with("crates/") && m.rsplit('/').next() == Some(krate))
        .map(str::to_string)
}

/// The integration-test targets of a crate: `tests/NAME.rs`, `tests/NAME/main.rs` and
/// `[[test]]` names in its Cargo.toml.
fn test_targets(krate: &str) -> Option<BTreeSet<String>> {
    let dir = root().join(crate_dir(krate)?);
    let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).ok()?;
    let mut out = BTreeSet::new();
    if let Ok(entries) = std::fs::read_dir(dir.join("tests")) {
        for e in entries.map(Result::unwrap) {
            let name = e.file_name().to_string_lossy().to_string();
            if let Some(stem) = name.strip_suffix(".rs") {
                out.insert(stem.to_string());
            } else if e.path().join("main.rs").is_file() {
                out.insert(name);
            }
        }
    }
    let mut in_test = false;
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            in_test = line == "[[test]]";
        } else if in_test && let Some(v) = line.strip_prefix("name") {
            out.insert(
                v.trim_start_matches([' ', '='])
                    .trim_matches('"')
                    .to_string(),
            );
        }
    }
    Some(out)
}

/// Every `--test NAME` of a text whose crate (the last `-p CRATE` before it) has no such test.
fn missing_tests(file: &str, text: &str) -> Vec<String> {
    let mut problems = Vec::new();
    let mut krate: Option<String> = None;
    let w = words(text);
    for (i, word) in w.iter().enumerate() {
        let Some(next) = w.get(i + 1) else { break };
        match word.as_str() {
            "-p" | "--package" => krate = Some(next.clone()),
            "--test" => match &krate {
                None => problems.push(format!(
                    "{file}: `--test {next}` without a `-p CRATE` before it"
                )),
                Some(k) => match test_targets(k) {
                    None => {
                        problems.push(format!("{file}: `-p {k}`: no crate {k} in the workspace"))
                    }
                    Some(t) if !t.contains(next) => problems.push(format!(
                        "{file}: `-p {k} --test {next}`: {} has no test {next} (tests/{next}.rs)",
                        crate_dir(k).unwrap_or_default()
                    )),
                    // `--test suite MODULE::`: a module of the crate's one test binary.
                    Some(_) => {
                        if let Some(module) = w.get(i + 2).and_then(|m| m.strip_suffix("::")) {
                            let dir = root()
                                .join(crate_dir(k).unwrap_or_default())
                                .join("tests")
                                .join(next);
                            let module = module.split("::").next().unwrap_or(module);
                            if !dir.join(format!("{module}.rs")).is_file()
                                && !dir.join(module).join("mod.rs").is_file()
                            {
                                problems.push(format!(
                                    "{file}: `-p {k} --test {next} {module}::`: {}/tests/{next} has no module {module}",
                                    crate_dir(k).unwrap_or_default()
                                ));
                            }
                        }
                    }
                },
            },
            _ => {}
        }
    }
    problems
}

/// Every `scripts/X` of a text that is not a file or folder of the repository (paths under
/// another folder, `…/scripts/x`, are not the repository's).
fn missing_scripts(file: &str, text: &str) -> Vec<String> {
    let mut problems = Vec::new();
    for (at, _) in text.match_indices("scripts/") {
        let before = text[..at].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || "/._-$".contains(c)) {
            continue;
        }
        let path: String = text[at..]
            .chars()
            .take_while(|c| c.is_alphanumeric() || "/._-".contains(*c))
            .collect();
        let path = path.trim_end_matches(['.', '/']);
        if path != "scripts" && !root().join(path).exists() {
            problems.push(format!("{file}: {path} does not exist"));
        }
    }
    problems
}

/// The code of a Markdown text: each inline code span, and each line of a fenced block (a
/// line ending in `\` joined with the next).
fn code_spans(text: &str) -> Vec<String> {
    let mut spans = Vec::new();
    let mut fenced = false;
    let mut pending = String::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            match line.strip_suffix('\\') {
                Some(head) => pending.push_str(head),
                None => spans.push(std::mem::take(&mut pending) + line),
            }
        } else {
            spans.extend(line.split('`').skip(1).step_by(2).map(str::to_string));
        }
    }
    spans
}

/// The long flags of each subcommand of the binary (`--help` included).
fn cli_flags() -> Vec<(String, BTreeSet<String>)> {
    let mut cmd = crate::cli::command();
    cmd.build();
    cmd.get_subcommands()
        .map(|sub| {
            let flags = sub
                .get_arguments()
                .filter_map(|a| a.get_long())
                .map(|l| format!("--{l}"))
                .collect();
            (sub.get_name().to_string(), flags)
        })
        .collect()
}

/// Every flag after `openstack-operator SUBCOMMAND` in a code span that the subcommand lacks.
fn unknown_flags(file: &str, text: &str, cli: &[(String, BTreeSet<String>)]) -> Vec<String> {
    let mut problems = Vec::new();
    for span in code_spans(text) {
        let w: Vec<&str> = span.split_whitespace().collect();
        for (i, word) in w.iter().enumerate() {
            if !word.ends_with("openstack-operator") {
                continue;
            }
            let mut j = i + 1;
            if w.get(j) == Some(&"--") {
                j += 1;
            }
            let Some((sub, flags)) = w.get(j).and_then(|s| cli.iter().find(|(n, _)| n == s)) else {
                continue;
            };
            for arg in w[j + 1..].iter().map(|a| a.trim_matches('`')) {
                if ["|", "&&", ";", "#", ">", "2>&1"].contains(&arg) || arg.starts_with('#') {
                    break;
                }
                if let Some(flag) = arg
                    .strip_prefix("--")
                    .map(|f| format!("--{}", f.split('=').next().unwrap_or(f)))
                    && !flags.contains(&flag)
                {
                    problems.push(format!(
                        "{file}: `openstack-operator {sub} {flag}`: {sub} has no flag {flag}"
                    ));
                }
            }
        }
    }
    problems
}

/// Flags the docs name in a code span of their own (`--flag`) that belong to other tools.
const OTHER_TOOLS_FLAGS: &[&str] = &[
    "--test",                            // cargo
    "--skip",                            // libtest (run-tests.py)
    "--include-ignored",                 // libtest
    "--timeout",                         // scripts/run-tests.py
    "--set",                             // helm
    "--netns",                           // test-node (crates/test-tools/test-node/src/main.rs)
    "--sandbox-image",                   // test-node
    "--relay-port",                      // test-node
    "--workload-controllers",            // test-node
    "--set-file",                        // helm
    "--previous",                        // kubectl logs
    "--anonymous-auth",                  // kube-apiserver, kubelet
    "--kubelet-certificate-authority",   // kube-apiserver
    "--kubelet-preferred-address-types", // kube-apiserver
    "--keystone-user",                   // keystone-manage
    "--keystone-group",                  // keystone-manage
    "--config-file",                     // oslo.config services
    "--https-socket",                    // uwsgi
    "--check",                           // scripts/option-schemas
    "--migrate",                         // neutron-db-manage, nova-manage
    "--uploaded-prior-to",               // pip
    "--purge",                           // scripts/test-cloud down
    "--provider-physical-network",       // openstack network create
];

/// Every code span that is a flag alone (`--flag`, `--flag value`) and is neither a flag of
/// one of the binary's subcommands nor of another tool the docs name.
fn unknown_bare_flags(file: &str, text: &str, cli: &[(String, BTreeSet<String>)]) -> Vec<String> {
    let ours: BTreeSet<&str> = cli
        .iter()
        .flat_map(|(_, f)| f.iter().map(String::as_str))
        .chain(["--help", "--version"])
        .collect();
    let mut problems = Vec::new();
    for span in text
        .lines()
        .flat_map(|l| l.split('`').skip(1).step_by(2))
        .filter(|s| s.starts_with("--") && s.len() > 2)
    {
        let flag = span
            .split([' ', '=', ':'])
            .next()
            .unwrap_or(span)
            .trim_end_matches(['/', ',']);
        if !ours.contains(flag) && !OTHER_TOOLS_FLAGS.contains(&flag) {
            problems.push(format!(
                "{file}: `{flag}` is no flag of openstack-operator (nor of another tool listed in OTHER_TOOLS_FLAGS)"
            ));
        }
    }
    problems
}

/// README.md's configuration table: each row's `--flag` and `ENV` are a flag of `run` and
/// its environment variable, with the default the row states (when it states one as code or
/// a number).
fn configuration_table(readme: &str) -> Vec<String> {
    let mut cmd = crate::cli::command();
    cmd.build();
    let run = cmd.find_subcommand("run").unwrap();
    let mut problems = Vec::new();
    let section = readme
        .split("\n## ")
        .find(|s| s.starts_with("Configuration"))
        .expect("README.md has a Configuration section");
    let mut rows = 0;
    for row in section.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        let names: Vec<&str> = cells[1].split('`').skip(1).step_by(2).collect();
        let flag = names.iter().find_map(|n| n.strip_prefix("--"));
        let envs: Vec<&&str> = names.iter().filter(|n| !n.starts_with("--")).collect();
        let arg = match flag {
            Some(f) => match run.get_arguments().find(|a| a.get_long() == Some(f)) {
                Some(a) => Some(a),
                None => {
                    problems.push(format!("README.md: `--{f}` is not a flag of run"));
                    continue;
                }
            },
            None => envs.iter().find_map(|e| {
                run.get_arguments()
                    .find(|a| a.get_env().is_some_and(|v| v == **e))
            }),
        };
        rows += 1;
        let Some(arg) = arg else {
            // Read by the OpenStack client, not a flag: OS_CLOUD, OS_CLIENT_CONFIG_FILE.
            if !envs.iter().all(|e| e.starts_with("OS_")) {
                problems.push(format!(
                    "README.md: {envs:?} is no environment variable of run"
                ));
            }
            continue;
        };
        let env = arg.get_env().map(|e| e.to_string_lossy().to_string());
        if let Some(e) = envs
            .iter()
            .find(|e| ***e != "RUST_LOG" && env.as_deref() != Some(***e))
        {
            problems.push(format!(
                "README.md: `{e}` is not the environment variable of --{} ({env:?})",
                arg.get_long().unwrap_or_default()
            ));
        }
        let stated = cells[2].trim_matches('`');
        let is_value = cells[2].starts_with('`') || stated.parse::<f64>().is_ok();
        let default: Vec<String> = arg
            .get_default_values()
            .iter()
            .map(|v| v.to_string_lossy().to_string())
            .collect();
        if is_value && default.join(",") != stated {
            problems.push(format!(
                "README.md: --{} defaults to {default:?}, the table says {stated:?}",
                arg.get_long().unwrap_or_default()
            ));
        }
    }
    assert!(
        rows >= 10,
        "the configuration table was not found ({rows} rows)"
    );
    problems
}

/// References to the project's issue numbers ("issue 39"): the docs describe what the code does
/// now, and an issue number means nothing to a reader of a clone.
fn issue_references(file: &str, text: &str) -> Vec<String> {
    let lower = text.to_lowercase();
    let mut found = Vec::new();
    for (at, _) in lower.match_indices("issue") {
        let rest = lower[at + "issue".len()..].trim_start_matches('s');
        let digits = rest.trim_start_matches([' ', '#']);
        if rest.len() > digits.len() && digits.starts_with(|c: char| c.is_ascii_digit()) {
            let line = text[..at].lines().count().max(1);
            let number: String = digits.chars().take_while(char::is_ascii_digit).collect();
            found.push(format!(
                "{file}:{line}: names issue {number}; say what the code does instead"
            ));
        }
    }
    found
}

#[test]
fn the_docs_name_only_tests_scripts_and_flags_that_exist() {
    let cli = cli_flags();
    let mut problems = Vec::new();
    for (file, text) in docs() {
        problems.extend(missing_tests(&file, &text));
        problems.extend(missing_scripts(&file, &text));
        problems.extend(unknown_flags(&file, &text, &cli));
        problems.extend(issue_references(&file, &text));
        // performance.md is about the bench command's flags (`crates/test-tools/bench`).
        if file != "docs/performance.md" {
            problems.extend(unknown_bare_flags(&file, &text, &cli));
        }
        if file == "README.md" {
            problems.extend(configuration_table(&text));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_check_sees_a_wrong_test_script_or_flag() {
    let cli = cli_flags();
    let text = "Run `cargo test -p openstack-operator --test suite e2e_project::` and (`--test e2e_nope`), \
                `--test suite e2e_nope::`, \
                then `scripts/demo vk` and `scripts/nope`; `openstack-operator crds \
                --virtual-kubelet-out-dir x` but not `openstack-operator run --nope=1`.\n\
                ```sh\nopenstack-operator virtual-kubelet \\\n  --tenants --bogus\n```\n";
    let mut found = missing_tests("x.md", text);
    found.extend(missing_scripts("x.md", text));
    found.extend(unknown_flags("x.md", text, &cli));
    found.extend(unknown_bare_flags(
        "x.md",
        "`--tenants` and `--teanats`, `--set x=1`",
        &cli,
    ));
    assert_eq!(
        found,
        vec![
            "x.md: `-p openstack-operator --test e2e_nope`: crates/openstack-operator has no test e2e_nope (tests/e2e_nope.rs)",
            "x.md: `-p openstack-operator --test suite e2e_nope::`: crates/openstack-operator/tests/suite has no module e2e_nope",
            "x.md: scripts/nope does not exist",
            "x.md: `openstack-operator run --nope`: run has no flag --nope",
            "x.md: `openstack-operator virtual-kubelet --bogus`: virtual-kubelet has no flag --bogus",
            "x.md: `--teanats` is no flag of openstack-operator (nor of another tool listed in OTHER_TOOLS_FLAGS)",
        ]
    );
    assert_eq!(
        issue_references(
            "z.md",
            "An issue we met.\nFixed (issue 39: x), see Issues #12 and issue tracker 3."
        ),
        vec![
            "z.md:2: names issue 39; say what the code does instead",
            "z.md:2: names issue 12; say what the code does instead",
        ]
    );
    assert_eq!(
        missing_tests("y.md", "`--test suite`"),
        vec!["y.md: `--test suite` without a `-p CRATE` before it"]
    );
}
