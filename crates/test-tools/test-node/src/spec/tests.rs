use super::*;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{
    ConfigMapEnvSource, ConfigMapKeySelector, EnvFromSource, EnvVar, EnvVarSource,
    ObjectFieldSelector, PodSecurityContext, PodSpec, SecretKeySelector, SecurityContext,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

fn pod(c: Container) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some("web-1".into()),
            namespace: Some("ns".into()),
            uid: Some("0123456789ab".into()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            containers: vec![c],
            ..Default::default()
        }),
        status: None,
    }
}

fn var(name: &str, value: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value: Some(value.into()),
        ..Default::default()
    }
}

fn refs() -> Refs {
    let mut r = Refs::default();
    r.config_maps.insert(
        "cm".into(),
        ConfigMap {
            data: Some([("A".to_string(), "from-cm".to_string())].into()),
            ..Default::default()
        },
    );
    r.secrets.insert(
        "s".into(),
        Secret {
            data: Some([("pw".to_string(), ByteString(b"hunter2".to_vec()))].into()),
            ..Default::default()
        },
    );
    r
}

fn ctx_env(p: &Pod, c: &Container, r: &Refs) -> Result<BTreeMap<String, String>, TranslateError> {
    let cfg = downward_config("test-node", "10.244.0.1");
    let ips = vec!["10.244.0.7".to_string()];
    let ctx = downward::Context {
        cfg: &cfg,
        pod_ips: &ips,
        node_cpu: 2.0,
    };
    environment("spec.containers[0]", p, c, r, &ctx)
}

#[test]
fn env_resolves_sources_in_the_kubelet_order() {
    let c = Container {
        name: "c".into(),
        env_from: Some(vec![EnvFromSource {
            config_map_ref: Some(ConfigMapEnvSource {
                name: "cm".into(),
                optional: None,
            }),
            prefix: Some("CM_".into()),
            ..Default::default()
        }]),
        env: Some(vec![
            var("X", "x-$(CM_A)-$$(NOPE)-$(MISSING)"),
            EnvVar {
                name: "PW".into(),
                value_from: Some(EnvVarSource {
                    secret_key_ref: Some(SecretKeySelector {
                        name: "s".into(),
                        key: "pw".into(),
                        optional: None,
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            },
            EnvVar {
                name: "IP".into(),
                value_from: Some(EnvVarSource {
                    field_ref: Some(ObjectFieldSelector {
                        field_path: "status.podIP".into(),
                        api_version: None,
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            },
            EnvVar {
                name: "NS".into(),
                value_from: Some(EnvVarSource {
                    field_ref: Some(ObjectFieldSelector {
                        field_path: "metadata.namespace".into(),
                        api_version: None,
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            },
        ]),
        ..Default::default()
    };
    let p = pod(c.clone());
    let env = ctx_env(&p, &c, &refs()).unwrap();
    assert_eq!(env["CM_A"], "from-cm");
    assert_eq!(env["X"], "x-from-cm-$(NOPE)-$(MISSING)");
    assert_eq!(env["PW"], "hunter2");
    assert_eq!(env["IP"], "10.244.0.7");
    assert_eq!(env["NS"], "ns");
}

#[test]
fn a_missing_key_is_a_config_error_naming_the_field() {
    let c = Container {
        name: "c".into(),
        env: Some(vec![EnvVar {
            name: "A".into(),
            value_from: Some(EnvVarSource {
                config_map_key_ref: Some(ConfigMapKeySelector {
                    name: "cm".into(),
                    key: "nope".into(),
                    optional: None,
                }),
                ..Default::default()
            }),
            ..Default::default()
        }]),
        ..Default::default()
    };
    let p = pod(c.clone());
    let e = ctx_env(&p, &c, &refs()).unwrap_err();
    assert!(matches!(e, TranslateError::MissingReference(_)));
    assert!(e.to_string().contains("spec.containers[0].env[0]"), "{e}");
    // Optional: absent, no error.
    let mut c2 = c.clone();
    c2.env.as_mut().unwrap()[0]
        .value_from
        .as_mut()
        .unwrap()
        .config_map_key_ref
        .as_mut()
        .unwrap()
        .optional = Some(true);
    assert!(!ctx_env(&p, &c2, &refs()).unwrap().contains_key("A"));
}

#[test]
fn users_and_groups_follow_the_security_contexts() {
    let mut c = Container {
        name: "c".into(),
        ..Default::default()
    };
    let mut p = pod(c.clone());
    assert_eq!(user(&p, &c, "keystone"), None);
    p.spec.as_mut().unwrap().security_context = Some(PodSecurityContext {
        run_as_user: Some(1000),
        fs_group: Some(42),
        supplemental_groups: Some(vec![7]),
        ..Default::default()
    });
    assert_eq!(user(&p, &c, "keystone").as_deref(), Some("1000"));
    assert_eq!(extra_groups(&p), vec!["42".to_string(), "7".to_string()]);
    c.security_context = Some(SecurityContext {
        run_as_group: Some(5),
        ..Default::default()
    });
    assert_eq!(user(&p, &c, "keystone").as_deref(), Some("1000:5"));
    p.spec.as_mut().unwrap().security_context = None;
    // runAsGroup alone keeps the image's user.
    assert_eq!(
        user(&p, &c, "keystone:keystone").as_deref(),
        Some("keystone:5")
    );
    assert_eq!(user(&p, &c, "").as_deref(), Some("0:5"));
}

#[test]
fn the_create_request_maps_command_args_and_limits() {
    let mut c = Container {
        name: "api".into(),
        image: Some("localhost/keystone:1".into()),
        command: Some(vec!["/bin/sh".into(), "-c".into()]),
        args: Some(vec!["echo $(GREETING)".into()]),
        working_dir: Some("/srv".into()),
        ..Default::default()
    };
    c.resources = Some(k8s_openapi::api::core::v1::ResourceRequirements {
        limits: Some(
            [
                ("memory".to_string(), Quantity("64Mi".into())),
                ("cpu".to_string(), Quantity("250m".into())),
            ]
            .into(),
        ),
        ..Default::default()
    });
    let p = pod(c.clone());
    let env: BTreeMap<String, String> = [("GREETING".to_string(), "hi".to_string())].into();
    let b = create_body(
        &p,
        Role::Main,
        &c,
        &env,
        &Placement {
            node: "test-node",
            sandbox_id: "sbx",
            binds: vec!["/h:/c:ro".into()],
            image_user: "",
            attempt: 3,
        },
    );
    assert_eq!(b["Entrypoint"], json!(["/bin/sh", "-c"]));
    assert_eq!(b["Cmd"], json!(["echo hi"]));
    assert_eq!(b["Env"], json!(["GREETING=hi"]));
    assert_eq!(b["WorkingDir"], json!("/srv"));
    assert_eq!(b["HostConfig"]["NetworkMode"], json!("container:sbx"));
    assert_eq!(b["HostConfig"]["Binds"], json!(["/h:/c:ro"]));
    assert_eq!(b["HostConfig"]["Memory"], json!(64 * 1024 * 1024));
    assert_eq!(b["HostConfig"]["NanoCpus"], json!(250_000_000));
    assert_eq!(b["Labels"][labels::ATTEMPT], json!("3"));
    assert_eq!(b["Labels"][labels::ROLE], json!("main"));
    assert!(b.get("User").is_none());
    // args alone keep the image's entrypoint.
    c.command = None;
    let b = create_body(
        &p,
        Role::Main,
        &c,
        &env,
        &Placement {
            node: "n",
            sandbox_id: "s",
            binds: vec![],
            image_user: "",
            attempt: 0,
        },
    );
    assert!(b.get("Entrypoint").is_none());
    assert_eq!(b["Cmd"], json!(["echo hi"]));
    assert_eq!(container_name(&p, "api", 2), "k8s_api_web-1_ns_01234567_2");
}

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
