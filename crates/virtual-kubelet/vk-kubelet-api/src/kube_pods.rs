//! [`Pods`] on the Kubernetes API: a GET per request (the pod must be bound
//! to this node) and a field-selected list for stats.

use async_trait::async_trait;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};

use crate::backend::{KubeletError, Pods};

/// The node's pods, read from the API server.
pub struct KubePods {
    client: kube::Client,
    node: String,
}

impl KubePods {
    /// Pods bound to `node`.
    pub fn new(client: kube::Client, node: String) -> Self {
        Self { client, node }
    }
}

#[async_trait]
impl Pods for KubePods {
    async fn get(&self, namespace: &str, name: &str) -> Result<Option<Pod>, KubeletError> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        let pod = api.get_opt(name).await.map_err(|e| {
            KubeletError::unavailable(format!("reading pod {namespace}/{name}: {e}"))
        })?;
        Ok(pod.filter(|p| {
            p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(self.node.as_str())
        }))
    }

    async fn list(&self) -> Result<Vec<Pod>, KubeletError> {
        let api: Api<Pod> = Api::all(self.client.clone());
        let lp = ListParams::default().fields(&format!("spec.nodeName={}", self.node));
        Ok(api
            .list(&lp)
            .await
            .map_err(|e| KubeletError::unavailable(format!("listing the node's pods: {e}")))?
            .items)
    }
}
