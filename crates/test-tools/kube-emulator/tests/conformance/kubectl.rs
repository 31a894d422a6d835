//! kubectl against the emulator (skipped with a note when kubectl is not installed).

use std::path::Path;

use serde_json::Value;

use crate::common::*;

const KUBECTL: &str = "/usr/bin/kubectl";

const CRD_YAML: &str = r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.sunet.se
spec:
  group: sunet.se
  scope: Namespaced
  names:
    kind: Widget
    plural: widgets
    singular: widget
    shortNames: [wg]
  versions:
    - name: v1alpha1
      served: true
      storage: true
      subresources:
        status: {}
      additionalPrinterColumns:
        - name: Size
          type: integer
          jsonPath: .spec.size
      schema:
        openAPIV3Schema:
          type: object
          properties:
            spec:
              type: object
              required: [name]
              properties:
                name:
                  type: string
                  pattern: '^[a-z][a-z0-9-]*$'
                size:
                  type: integer
                  minimum: 1
                  default: 3
                color:
                  type: string
                  enum: [red, green, blue]
                  default: red
            status:
              type: object
              x-kubernetes-preserve-unknown-fields: true
"#;

async fn kubectl(kubeconfig: &Path, args: &[&str]) -> (bool, String, String) {
    let out = tokio::process::Command::new(KUBECTL)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .output()
        .await
        .expect("kubectl runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

async fn ok(kc: &Path, args: &[&str]) -> String {
    let (success, out, err) = kubectl(kc, args).await;
    assert!(
        success,
        "kubectl {args:?} failed:\nstdout: {out}\nstderr: {err}"
    );
    out
}

#[tokio::test]
async fn kubectl_apply_get_delete_with_a_crd() {
    if !Path::new(KUBECTL).exists() {
        println!("note: {KUBECTL} not found; skipping the kubectl conformance test");
        return;
    }
    let env = start().await;
    let dir = tempfile::tempdir().unwrap();
    let kc = dir.path().join("kubeconfig");
    env.handle.write_kubeconfig(&kc).unwrap();
    let crd = dir.path().join("crd.yaml");
    std::fs::write(&crd, CRD_YAML).unwrap();
    let w = dir.path().join("widget.yaml");
    std::fs::write(&w, "apiVersion: sunet.se/v1alpha1\nkind: Widget\nmetadata:\n  name: w1\nspec:\n  name: first\n").unwrap();

    assert!(
        ok(&kc, &["apply", "-f", crd.to_str().unwrap()])
            .await
            .contains("created")
    );
    ok(
        &kc,
        &[
            "wait",
            "--for=condition=Established",
            "crd/widgets.sunet.se",
            "--timeout=10s",
        ],
    )
    .await;
    assert!(
        ok(&kc, &["apply", "-f", w.to_str().unwrap()])
            .await
            .contains("widget.sunet.se/w1 created")
    );

    let json: Value =
        serde_json::from_str(&ok(&kc, &["get", "widget", "w1", "-o", "json"]).await).unwrap();
    assert_eq!(json["spec"]["size"], 3, "server-side defaults visible");
    assert!(
        json["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"]
            .is_string()
    );

    // re-apply with a change goes through a JSON merge patch
    std::fs::write(&w, "apiVersion: sunet.se/v1alpha1\nkind: Widget\nmetadata:\n  name: w1\nspec:\n  name: first\n  size: 7\n").unwrap();
    assert!(
        ok(&kc, &["apply", "-f", w.to_str().unwrap()])
            .await
            .contains("configured")
    );
    let table = ok(&kc, &["get", "wg"]).await;
    assert!(
        table.contains("SIZE") && table.contains("w1") && table.contains('7'),
        "{table}"
    );

    // server-side validation errors reach the user
    let bad = dir.path().join("bad.yaml");
    std::fs::write(&bad, "apiVersion: sunet.se/v1alpha1\nkind: Widget\nmetadata:\n  name: bad\nspec:\n  name: first\n  color: pink\n").unwrap();
    let (success, _, err) = kubectl(&kc, &["apply", "-f", bad.to_str().unwrap()]).await;
    assert!(!success && err.contains("Unsupported value"), "{err}");

    // server-side apply through kubectl
    ok(&kc, &["apply", "--server-side", "-f", w.to_str().unwrap()]).await;

    assert!(
        ok(&kc, &["delete", "-f", w.to_str().unwrap()])
            .await
            .contains("deleted")
    );
    let (success, _, err) = kubectl(&kc, &["get", "widget", "w1"]).await;
    assert!(!success && err.contains("NotFound"), "{err}");

    // built-in kinds through kubectl too
    let cm = dir.path().join("cm.yaml");
    std::fs::write(
        &cm,
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\ndata:\n  a: b\n",
    )
    .unwrap();
    ok(&kc, &["apply", "-f", cm.to_str().unwrap()]).await;
    std::fs::write(
        &cm,
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\ndata:\n  a: c\n",
    )
    .unwrap();
    ok(&kc, &["apply", "-f", cm.to_str().unwrap()]).await;
    assert_eq!(
        ok(&kc, &["get", "cm", "c", "-o", "jsonpath={.data.a}"]).await,
        "c"
    );
    ok(&kc, &["delete", "cm", "c"]).await;

    // typed generators send protobuf bodies
    ok(&kc, &["create", "namespace", "team-a"]).await;
    ok(
        &kc,
        &[
            "-n",
            "team-a",
            "create",
            "configmap",
            "settings",
            "--from-literal=mode=fast",
        ],
    )
    .await;
    ok(
        &kc,
        &[
            "-n",
            "team-a",
            "create",
            "secret",
            "generic",
            "creds",
            "--from-literal=password=hunter2",
        ],
    )
    .await;
    ok(&kc, &["-n", "team-a", "create", "serviceaccount", "robot"]).await;
    assert_eq!(
        ok(
            &kc,
            &[
                "-n",
                "team-a",
                "get",
                "cm",
                "settings",
                "-o",
                "jsonpath={.data.mode}"
            ]
        )
        .await,
        "fast"
    );
    assert_eq!(
        ok(
            &kc,
            &[
                "-n",
                "team-a",
                "get",
                "secret",
                "creds",
                "-o",
                "jsonpath={.data.password}"
            ]
        )
        .await,
        "aHVudGVyMg=="
    );
    ok(
        &kc,
        &["label", "-n", "team-a", "cm", "settings", "tier=gold"],
    )
    .await;
    assert!(
        ok(
            &kc,
            &["-n", "team-a", "get", "cm", "-l", "tier=gold", "-o", "name"]
        )
        .await
        .contains("configmap/settings")
    );
    ok(&kc, &["delete", "namespace", "team-a"]).await;
}
