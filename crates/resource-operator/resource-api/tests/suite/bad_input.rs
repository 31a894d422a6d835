//! Every manifest of tests/bad-input is rejected, and the error names what its header says.

use std::path::PathBuf;

#[test]
fn every_bad_manifest_is_rejected_with_the_expected_message() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../tests/bad-input");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("tests/bad-input exists")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    assert!(
        files.len() >= 40,
        "the corpus has {} manifests, want at least 40",
        files.len()
    );
    let mut failures = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).expect("readable");
        let expect = text
            .lines()
            .next()
            .and_then(|l| l.strip_prefix("# expect: "))
            .unwrap_or_else(|| panic!("{}: first line must be `# expect: ...`", file.display()))
            .trim()
            .to_string();
        let docs = api::manifest::documents(&text).expect("valid YAML");
        assert_eq!(docs.len(), 1, "{}", file.display());
        let message = match api::manifest::check(&docs[0]) {
            Err(e) => e.to_string(),
            Ok(Some(c)) if !c.errors.is_empty() => api::validation::summarize(&c.errors),
            Ok(_) => {
                failures.push(format!("{}: accepted", file.display()));
                continue;
            }
        };
        if !message.contains(&expect) {
            failures.push(format!(
                "{}: error {message:?} does not mention {expect:?}",
                file.display()
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
