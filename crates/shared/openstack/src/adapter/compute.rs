//! Nova (compute v2.1) adapter.
//!
//! Microversion: every request sends `OpenStack-API-Version: compute 2.75`.
//! 2.55 is the minimum for flavor descriptions, 2.61 returns extra specs
//! inline in flavor responses (one list call gives the whole picture), and
//! 2.75 makes `swap` an integer (0 instead of ""). Nova 2026.1 supports up to
//! 2.103; nothing we use changed after 2.75.
//!
//! A flavor is created with an ID chosen here (a UUID, as Nova would choose)
//! unless the caller gives one: when the answer to the create is lost (5xx,
//! dropped connection, timeout), one GET of that ID tells whether Nova made
//! it, and the flavor is returned as if the answer had arrived. Without that,
//! the retry finds an unmarked flavor of the same name it may not adopt.

use std::collections::BTreeMap;

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{Core, Request, Service, seg};
use crate::error::{Error, Result};
use crate::model::*;
use crate::traits::Compute;

const S: Service = Service::Compute;
const MV_MAJOR: u8 = 2;
const MV_MINOR: u8 = 75;

/// The Nova port.
#[derive(Clone, Debug)]
pub struct ComputeAdapter {
    core: Core,
}

impl ComputeAdapter {
    /// Nova on `core`.
    pub fn new(core: Core) -> Self {
        Self { core }
    }

    fn req(&self, r: Request) -> Request {
        r.microversion(MV_MAJOR, MV_MINOR)
    }
}

#[derive(Deserialize)]
struct WireFlavor {
    id: String,
    name: String,
    #[serde(default)]
    vcpus: u32,
    #[serde(default)]
    ram: u64,
    #[serde(default)]
    disk: u64,
    #[serde(rename = "OS-FLV-EXT-DATA:ephemeral", default)]
    ephemeral: u64,
    // An integer since 2.75, "" for 0 before.
    #[serde(default)]
    swap: Value,
    #[serde(rename = "os-flavor-access:is_public", default = "yes")]
    is_public: bool,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    extra_specs: BTreeMap<String, String>,
}

fn yes() -> bool {
    true
}

impl From<WireFlavor> for Flavor {
    fn from(w: WireFlavor) -> Self {
        let swap_mb = match &w.swap {
            Value::Number(n) => n.as_u64().unwrap_or(0),
            Value::String(s) => s.parse().unwrap_or(0),
            _ => 0,
        };
        Self {
            id: w.id,
            name: w.name,
            vcpus: w.vcpus,
            ram_mb: w.ram,
            disk_gb: w.disk,
            ephemeral_gb: w.ephemeral,
            swap_mb,
            is_public: w.is_public,
            description: w.description,
            extra_specs: w.extra_specs,
        }
    }
}

#[derive(Deserialize)]
struct WireAccess {
    tenant_id: String,
}

/// Parse a quota-set `detail` response (`{"cores": {"limit", "in_use", ...}}`);
/// the `id` member and non-object members are skipped.
pub(crate) fn parse_quota_detail(ctx: &str, v: &Value) -> Result<QuotaSet> {
    let obj = v
        .as_object()
        .ok_or_else(|| Error::unexpected(format!("{ctx}: quota set is not an object")))?;
    let mut out = QuotaSet::new();
    for (k, val) in obj {
        let Some(entry) = val.as_object() else {
            continue;
        };
        let limit = entry.get("limit").and_then(Value::as_i64);
        let in_use = entry.get("in_use").and_then(Value::as_i64).unwrap_or(0);
        if let Some(limit) = limit {
            out.insert(k.clone(), QuotaValue { limit, in_use });
        }
    }
    Ok(out)
}

/// Parse a defaults response (`{"cores": 20, "id": "..."}`): the numeric members.
pub(crate) fn parse_quota_defaults(ctx: &str, v: &Value) -> Result<QuotaUpdate> {
    let obj = v
        .as_object()
        .ok_or_else(|| Error::unexpected(format!("{ctx}: quota defaults are not an object")))?;
    Ok(obj
        .iter()
        .filter_map(|(k, v)| v.as_i64().map(|v| (k.clone(), v)))
        .collect())
}

#[async_trait]
impl Compute for ComputeAdapter {
    async fn get_flavor(&self, id: &str) -> Result<Flavor> {
        let w: WireFlavor = self
            .core
            .send(&self.req(Request::get(
                S,
                "get_flavor",
                format!("flavors/{}", seg(id)),
            )))
            .await?
            .json_at("flavor")?;
        Ok(w.into())
    }

    async fn list_flavors(&self) -> Result<Vec<Flavor>> {
        // Nova lists only public flavors unless an admin asks for
        // is_public=none (verified against Nova 2026.1: the default list
        // omits private flavors).
        let v: Vec<WireFlavor> = self
            .core
            .list_all(
                self.req(
                    Request::get(S, "list_flavors", "flavors/detail").query("is_public", "none"),
                ),
                "flavors",
            )
            .await?;
        Ok(v.into_iter().map(Into::into).collect())
    }

    async fn find_flavor(&self, name: &str) -> Result<Option<Flavor>> {
        // Nova has no name filter; one full list is still one call.
        let v: Vec<WireFlavor> = self
            .core
            .list_all(
                self.req(
                    Request::get(S, "find_flavor", "flavors/detail").query("is_public", "none"),
                ),
                "flavors",
            )
            .await?;
        Ok(v.into_iter().find(|f| f.name == name).map(Into::into))
    }

    async fn create_flavor(&self, req: &FlavorCreate) -> Result<Flavor> {
        let mut f = json!({
            "name": req.name,
            "vcpus": req.vcpus,
            "ram": req.ram_mb,
            "disk": req.disk_gb,
            "OS-FLV-EXT-DATA:ephemeral": req.ephemeral_gb,
            "swap": req.swap_mb,
            "os-flavor-access:is_public": req.is_public,
        });
        let id = req
            .id
            .clone()
            .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
        f["id"] = json!(id);
        if let Some(d) = &req.description {
            f["description"] = json!(d);
        }
        let r = self.req(Request::post(S, "create_flavor", "flavors").json(&json!({"flavor": f}))?);
        let err = match self.core.send(&r).await {
            Ok(rsp) => return Ok(rsp.json_at::<WireFlavor>("flavor")?.into()),
            Err(e @ (Error::Transient { .. } | Error::Timeout { .. })) => e,
            Err(e) => return Err(e),
        };
        // The answer may have been lost after Nova made the flavor.
        match self.get_flavor(&id).await {
            Ok(made) if made.name == req.name => {
                tracing::warn!(id, error = %err, "the answer of a flavor create was lost; Nova made it: using it");
                Ok(made)
            }
            _ => Err(err),
        }
    }

    async fn update_flavor_description(&self, id: &str, description: &str) -> Result<Flavor> {
        let w: WireFlavor = self
            .core
            .send(
                &self.req(
                    Request::put(
                        S,
                        "update_flavor_description",
                        format!("flavors/{}", seg(id)),
                    )
                    .json(&json!({"flavor": {"description": description}}))?,
                ),
            )
            .await?
            .json_at("flavor")?;
        Ok(w.into())
    }

    async fn delete_flavor(&self, id: &str) -> Result<()> {
        self.core
            .send(&self.req(Request::delete(
                S,
                "delete_flavor",
                format!("flavors/{}", seg(id)),
            )))
            .await
            .map(|_| ())
    }

    async fn get_flavor_extra_specs(&self, id: &str) -> Result<BTreeMap<String, String>> {
        self.core
            .send(&self.req(Request::get(
                S,
                "get_flavor_extra_specs",
                format!("flavors/{}/os-extra_specs", seg(id)),
            )))
            .await?
            .json_at("extra_specs")
    }

    async fn set_flavor_extra_specs(
        &self,
        id: &str,
        specs: &BTreeMap<String, String>,
    ) -> Result<()> {
        if specs.is_empty() {
            return Ok(());
        }
        // POST here merges keys: repeating it is harmless.
        self.core
            .send(
                &self.req(
                    Request::post(
                        S,
                        "set_flavor_extra_specs",
                        format!("flavors/{}/os-extra_specs", seg(id)),
                    )
                    .retry_safe()
                    .json(&json!({ "extra_specs": specs }))?,
                ),
            )
            .await
            .map(|_| ())
    }

    async fn delete_flavor_extra_spec(&self, id: &str, key: &str) -> Result<()> {
        self.core
            .send(&self.req(Request::delete(
                S,
                "delete_flavor_extra_spec",
                format!("flavors/{}/os-extra_specs/{}", seg(id), seg(key)),
            )))
            .await
            .map(|_| ())
    }

    async fn list_flavor_access(&self, id: &str) -> Result<Vec<String>> {
        let v: Vec<WireAccess> = self
            .core
            .send(&self.req(Request::get(
                S,
                "list_flavor_access",
                format!("flavors/{}/os-flavor-access", seg(id)),
            )))
            .await?
            .json_at("flavor_access")?;
        Ok(v.into_iter().map(|a| a.tenant_id).collect())
    }

    async fn add_flavor_access(&self, id: &str, project_id: &str) -> Result<()> {
        self.core
            .send(
                &self.req(
                    Request::post(
                        S,
                        "add_flavor_access",
                        format!("flavors/{}/action", seg(id)),
                    )
                    .json(&json!({"addTenantAccess": {"tenant": project_id}}))?,
                ),
            )
            .await
            .map(|_| ())
    }

    async fn remove_flavor_access(&self, id: &str, project_id: &str) -> Result<()> {
        self.core
            .send(
                &self.req(
                    Request::post(
                        S,
                        "remove_flavor_access",
                        format!("flavors/{}/action", seg(id)),
                    )
                    .json(&json!({"removeTenantAccess": {"tenant": project_id}}))?,
                ),
            )
            .await
            .map(|_| ())
    }

    async fn get_compute_quota(&self, project_id: &str) -> Result<QuotaSet> {
        let req = self.req(Request::get(
            S,
            "get_compute_quota",
            format!("os-quota-sets/{}/detail", seg(project_id)),
        ));
        let v: Value = self.core.send(&req).await?.json_at("quota_set")?;
        parse_quota_detail(&req.context(), &v)
    }

    async fn get_compute_quota_defaults(&self, project_id: &str) -> Result<QuotaUpdate> {
        let req = self.req(Request::get(
            S,
            "get_compute_quota_defaults",
            format!("os-quota-sets/{}/defaults", seg(project_id)),
        ));
        let v: Value = self.core.send(&req).await?.json_at("quota_set")?;
        parse_quota_defaults(&req.context(), &v)
    }

    async fn update_compute_quota(&self, project_id: &str, limits: &QuotaUpdate) -> Result<()> {
        if limits.is_empty() {
            return Ok(());
        }
        self.core
            .send(
                &self.req(
                    Request::put(
                        S,
                        "update_compute_quota",
                        format!("os-quota-sets/{}", seg(project_id)),
                    )
                    .json(&json!({ "quota_set": limits }))?,
                ),
            )
            .await
            .map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flavor_wire_handles_both_swap_forms() {
        let a: WireFlavor = serde_json::from_value(
            json!({"id": "1", "name": "a", "swap": "", "vcpus": 1, "ram": 64, "disk": 0}),
        )
        .unwrap();
        assert_eq!(Flavor::from(a).swap_mb, 0);
        let b: WireFlavor = serde_json::from_value(
            json!({"id": "1", "name": "a", "swap": 512, "os-flavor-access:is_public": false}),
        )
        .unwrap();
        let b = Flavor::from(b);
        assert_eq!(b.swap_mb, 512);
        assert!(!b.is_public);
    }

    #[test]
    fn quota_detail_parsing() {
        let v = json!({"id": "p", "cores": {"limit": 20, "in_use": 2, "reserved": 0}, "ram": {"limit": -1, "in_use": 0}});
        let q = parse_quota_detail("c", &v).unwrap();
        assert_eq!(q.len(), 2);
        assert_eq!(
            q["cores"],
            QuotaValue {
                limit: 20,
                in_use: 2
            }
        );
        assert_eq!(q["ram"].limit, -1);
    }
}
