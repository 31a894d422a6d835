//! Fake Cinder.

use async_trait::async_trait;

use super::{FakeCloud, apply_quota_update};
use crate::error::Result;
use crate::model::*;
use crate::traits::BlockStorage;

/// Cinder's default quota limits (no usage).
pub(crate) fn default_quota() -> QuotaSet {
    [
        ("volumes", 10),
        ("snapshots", 10),
        ("gigabytes", 1000),
        ("backups", 10),
        ("backup_gigabytes", 1000),
        ("groups", 10),
        ("per_volume_gigabytes", -1),
    ]
    .into_iter()
    .map(|(k, v)| {
        (
            k.to_string(),
            QuotaValue {
                limit: v,
                in_use: 0,
            },
        )
    })
    .collect()
}

#[async_trait]
impl BlockStorage for FakeCloud {
    async fn get_volume_quota(&self, project_id: &str) -> Result<QuotaSet> {
        self.run("block_storage.get_volume_quota", |st| {
            Ok(st
                .volume_quotas
                .get(project_id)
                .cloned()
                .unwrap_or_else(default_quota))
        })
        .await
    }

    async fn get_volume_quota_defaults(&self, _project_id: &str) -> Result<QuotaUpdate> {
        self.run("block_storage.get_volume_quota_defaults", |_| {
            Ok(default_quota()
                .into_iter()
                .map(|(k, v)| (k, v.limit))
                .collect())
        })
        .await
    }

    async fn update_volume_quota(&self, project_id: &str, limits: &QuotaUpdate) -> Result<()> {
        self.run("block_storage.update_volume_quota", |st| {
            let q = st
                .volume_quotas
                .entry(project_id.into())
                .or_insert_with(default_quota);
            apply_quota_update("cinder update_volume_quota", q, limits)
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn only_given_keys_change() {
        let fake = FakeCloud::new();
        let upd: QuotaUpdate = [("gigabytes".to_string(), 50)].into();
        fake.update_volume_quota("p", &upd).await.unwrap();
        let q = fake.get_volume_quota("p").await.unwrap();
        assert_eq!(q["gigabytes"].limit, 50);
        assert_eq!(q["volumes"].limit, 10);
    }
}
