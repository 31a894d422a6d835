//! Cinder (block storage v3) adapter.

use async_trait::async_trait;
use serde_json::{Value, json};

use super::compute::{parse_quota_defaults, parse_quota_detail};
use super::{Core, Request, Service, seg};
use crate::error::Result;
use crate::model::*;
use crate::traits::BlockStorage;

const S: Service = Service::BlockStorage;

/// The Cinder port.
#[derive(Clone, Debug)]
pub struct BlockStorageAdapter {
    core: Core,
}

impl BlockStorageAdapter {
    /// Cinder on `core`.
    pub fn new(core: Core) -> Self {
        Self { core }
    }
}

#[async_trait]
impl BlockStorage for BlockStorageAdapter {
    async fn get_volume_quota(&self, project_id: &str) -> Result<QuotaSet> {
        let req = Request::get(
            S,
            "get_volume_quota",
            format!("os-quota-sets/{}", seg(project_id)),
        )
        .query("usage", "true");
        let v: Value = self.core.send(&req).await?.json_at("quota_set")?;
        parse_quota_detail(&req.context(), &v)
    }

    async fn get_volume_quota_defaults(&self, project_id: &str) -> Result<QuotaUpdate> {
        let req = Request::get(
            S,
            "get_volume_quota_defaults",
            format!("os-quota-sets/{}/defaults", seg(project_id)),
        );
        let v: Value = self.core.send(&req).await?.json_at("quota_set")?;
        parse_quota_defaults(&req.context(), &v)
    }

    async fn update_volume_quota(&self, project_id: &str, limits: &QuotaUpdate) -> Result<()> {
        if limits.is_empty() {
            return Ok(());
        }
        self.core
            .send(
                &Request::put(
                    S,
                    "update_volume_quota",
                    format!("os-quota-sets/{}", seg(project_id)),
                )
                .json(&json!({ "quota_set": limits }))?,
            )
            .await
            .map(|_| ())
    }
}
