//! Workload kinds the control-plane operator writes: `apps/v1` Deployments, `batch/v1` Jobs and
//! `v1` Services. CRUD and server-side apply through their real group/versions, generation
//! bumped by spec changes and not by status, the status subresource, and owner-reference
//! garbage collection. No controller runs for them (as in envtest): status is written by
//! whoever plays the controller manager.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec, DeploymentStatus};
use k8s_openapi::api::batch::v1::{Job, JobCondition, JobSpec, JobStatus};
use k8s_openapi::api::core::v1::{
    Container, PodSpec, PodTemplateSpec, Service, ServicePort, ServiceSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, OwnerReference};
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams};

use crate::common::*;

fn template(image: &str) -> PodTemplateSpec {
    PodTemplateSpec {
        metadata: Some(ObjectMeta {
            labels: Some(BTreeMap::from([("app".to_string(), "x".to_string())])),
            ..Default::default()
        }),
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "c".into(),
                image: Some(image.into()),
                ..Default::default()
            }],
            ..Default::default()
        }),
    }
}

fn deployment(name: &str, image: &str) -> Deployment {
    Deployment {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        spec: DeploymentSpec {
            replicas: Some(1),
            selector: LabelSelector {
                match_labels: Some(BTreeMap::from([("app".to_string(), "x".to_string())])),
                ..Default::default()
            },
            template: template(image),
            ..Default::default()
        },
        ..Default::default()
    }
}

#[tokio::test]
async fn deployment_generation_and_status() {
    let env = start().await;
    let api: Api<Deployment> = Api::namespaced(env.client.clone(), "default");
    let d = api
        .create(&PostParams::default(), &deployment("d", "img:1"))
        .await
        .unwrap();
    assert_eq!(d.metadata.generation, Some(1));
    let applied = api
        .patch(
            "d",
            &PatchParams::apply("test").force(),
            &Patch::Apply(
                serde_json::json!({"apiVersion": "apps/v1", "kind": "Deployment",
                "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "img:2"}]}}}}),
            ),
        )
        .await
        .unwrap();
    assert_eq!(
        applied.metadata.generation,
        Some(2),
        "a spec change bumps generation"
    );
    let st = api
        .patch_status(
            "d",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"status": DeploymentStatus {
                observed_generation: Some(2), available_replicas: Some(1), ..Default::default()}})),
        )
        .await
        .unwrap();
    assert_eq!(
        st.metadata.generation,
        Some(2),
        "status does not bump generation"
    );
    assert_eq!(st.status.and_then(|s| s.available_replicas), Some(1));
    let listed = api.list(&ListParams::default().labels("")).await.unwrap();
    assert_eq!(listed.items.len(), 1);
}

#[tokio::test]
async fn job_status_and_owner_garbage_collection() {
    let env = start().await;
    let services: Api<Service> = Api::namespaced(env.client.clone(), "default");
    let owner = services
        .create(
            &PostParams::default(),
            &Service {
                metadata: ObjectMeta {
                    name: Some("owner".into()),
                    ..Default::default()
                },
                spec: Some(ServiceSpec {
                    ports: Some(vec![ServicePort {
                        port: 5000,
                        ..Default::default()
                    }]),
                    ..Default::default()
                }),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let jobs: Api<Job> = Api::namespaced(env.client.clone(), "default");
    let mut tpl = template("img");
    if let Some(s) = tpl.spec.as_mut() {
        s.restart_policy = Some("Never".into());
    }
    let job = Job {
        metadata: ObjectMeta {
            name: Some("j".into()),
            owner_references: Some(vec![OwnerReference {
                api_version: "v1".into(),
                kind: "Service".into(),
                name: "owner".into(),
                uid: owner.metadata.uid.clone().unwrap(),
                controller: Some(true),
                ..Default::default()
            }]),
            ..Default::default()
        },
        spec: Some(JobSpec {
            template: tpl,
            ..Default::default()
        }),
        ..Default::default()
    };
    let created = jobs.create(&PostParams::default(), &job).await.unwrap();
    assert_eq!(created.metadata.generation, Some(1));
    let failed = jobs
        .patch_status(
            "j",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"status": JobStatus {
                failed: Some(3),
                conditions: Some(vec![JobCondition {
                    type_: "Failed".into(), status: "True".into(),
                    reason: Some("BackoffLimitExceeded".into()),
                    message: Some("Job has reached the specified backoff limit".into()),
                    ..Default::default()
                }]),
                ..Default::default()}})),
        )
        .await
        .unwrap();
    let cond = failed.status.and_then(|s| s.conditions).unwrap_or_default();
    assert_eq!(cond[0].reason.as_deref(), Some("BackoffLimitExceeded"));
    services
        .delete("owner", &DeleteParams::default())
        .await
        .unwrap();
    // The garbage collector removes dependents of a deleted owner.
    let mut gone = false;
    for _ in 0..50 {
        if jobs.get_opt("j").await.unwrap().is_none() {
            gone = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(gone, "the Job owned by the deleted Service was collected");
}
