//! The checked-in option schemas are what the installed services define: this re-runs the real
//! `oslo-config-generator` over the test cloud's venv (scripts/option-schemas --check) and fails
//! when a service upgrade changed its options without the schemas being regenerated.

use std::path::Path;
use std::process::Command;

#[test]
fn option_schemas_match_the_installed_services() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../..");
    let out = Command::new(root.join("scripts/option-schemas"))
        .arg("--check")
        .current_dir(&root)
        .output()
        .expect("run scripts/option-schemas");
    assert!(
        out.status.success(),
        "scripts/option-schemas --check failed (run scripts/test-cloud up, then \
         scripts/option-schemas to regenerate):\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
