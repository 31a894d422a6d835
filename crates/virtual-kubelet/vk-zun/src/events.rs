//! Warning Events on the Kubernetes objects the node's side controllers act on (Services,
//! NetworkPolicies): what a user reads in `kubectl describe` when we refuse or fail.

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, PostParams};
use kube::{Client, Resource, ResourceExt};
use tracing::warn;

/// Posts a Warning Event on `obj` from `component`; a failure to post it is only logged.
pub async fn warning<K>(client: &Client, obj: &K, component: &str, reason: &str, message: &str)
where
    K: Resource<DynamicType = ()>,
{
    let ns = obj.namespace().unwrap_or_default();
    let now = Time(jiff::Timestamp::now());
    let ev = Event {
        metadata: kube::api::ObjectMeta {
            generate_name: Some(format!("{}.", obj.name_any())),
            namespace: Some(ns.clone()),
            ..Default::default()
        },
        involved_object: ObjectReference {
            api_version: Some(K::api_version(&()).into_owned()),
            kind: Some(K::kind(&()).into_owned()),
            name: Some(obj.name_any()),
            namespace: Some(ns.clone()),
            uid: obj.uid(),
            ..Default::default()
        },
        reason: Some(reason.into()),
        message: Some(message.into()),
        type_: Some("Warning".into()),
        first_timestamp: Some(now.clone()),
        last_timestamp: Some(now),
        count: Some(1),
        source: Some(EventSource {
            component: Some(component.into()),
            ..Default::default()
        }),
        ..Default::default()
    };
    if let Err(e) = Api::<Event>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &ev)
        .await
    {
        warn!(error = %e, reason, "posting an Event failed");
    }
}
