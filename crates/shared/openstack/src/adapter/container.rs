//! Zun (container service v1) adapter.
//!
//! The SDK knows no Zun microversions, so every request carries the header
//! `OpenStack-API-Version: container 1.40` itself: 1.40 adds `entrypoint`,
//! which Kubernetes' `command` needs (it replaces the image's ENTRYPOINT,
//! while `args` replace its CMD). Zun 18 (2026.1) serves up to 1.40.
//!
//! Creates are POSTs, never repeated after an ambiguous failure (Zun picks
//! the id, so a repeat would make a second container). Callers find what a
//! lost create made by its labels.

use std::collections::BTreeMap;

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{Core, Request, Service, seg};
use crate::container::*;
use crate::error::{Error, Result};

const S: Service = Service::Container;
/// The Zun API microversion every request asks for.
pub const MICROVERSION: &str = "container 1.40";

/// The Zun port.
#[derive(Clone, Debug)]
pub struct ContainerAdapter {
    core: Core,
}

impl ContainerAdapter {
    /// Zun on `core`.
    pub fn new(core: Core) -> Self {
        Self { core }
    }

    fn req(&self, r: Request) -> Result<Request> {
        r.header("openstack-api-version", MICROVERSION)
    }
}

#[derive(Deserialize)]
struct WireZone {
    availability_zone: String,
}

fn quota_value(v: &Value, key: &str) -> ZunQuotaValue {
    let e = v.get(key);
    let num = |k: &str| {
        e.and_then(|e| e.get(k)).and_then(|x| {
            x.as_f64()
                .or_else(|| x.as_str().and_then(|s| s.parse().ok()))
        })
    };
    ZunQuotaValue {
        limit: num("limit").unwrap_or(-1.0),
        in_use: num("in_use").unwrap_or(0.0),
    }
}

/// Parse `GET /quotas/{project}?usages=true`.
pub(crate) fn parse_quota(v: &Value) -> ZunQuota {
    ZunQuota {
        containers: quota_value(v, "containers"),
        cpu: quota_value(v, "cpu"),
        memory: quota_value(v, "memory"),
        disk: quota_value(v, "disk"),
    }
}

#[async_trait]
impl Container for ContainerAdapter {
    async fn create_container(&self, req: &ZunContainerCreate) -> Result<ZunContainer> {
        let mut r = Request::post(S, "create_container", "containers").json(req)?;
        if req.run {
            r = r.query("run", "true");
        }
        self.core.send(&self.req(r)?).await?.json()
    }

    async fn get_container(&self, id: &str) -> Result<ZunContainer> {
        self.core
            .send(&self.req(Request::get(
                S,
                "get_container",
                format!("containers/{}", seg(id)),
            ))?)
            .await?
            .json()
    }

    async fn list_containers(
        &self,
        labels: &BTreeMap<String, String>,
        name: Option<&str>,
    ) -> Result<Vec<ZunContainer>> {
        let r =
            self.req(Request::get(S, "list_containers", "containers").query_opt("name", name))?;
        let all: Vec<ZunContainer> = self.core.list_all(r, "containers").await?;
        Ok(all
            .into_iter()
            .filter(|c| labels_match(&c.labels, labels))
            .collect())
    }

    async fn delete_container(&self, id: &str, stop: bool, force: bool) -> Result<()> {
        let mut r = Request::delete(S, "delete_container", format!("containers/{}", seg(id)));
        if stop {
            r = r.query("stop", "true");
        }
        if force {
            r = r.query("force", "true");
        }
        self.core.send(&self.req(r)?).await.map(|_| ())
    }

    async fn start_container(&self, id: &str) -> Result<()> {
        let r = Request::post(
            S,
            "start_container",
            format!("containers/{}/start", seg(id)),
        )
        .retry_safe();
        self.core.send(&self.req(r)?).await.map(|_| ())
    }

    async fn stop_container(&self, id: &str, timeout_s: u64) -> Result<()> {
        let r = Request::post(S, "stop_container", format!("containers/{}/stop", seg(id)))
            .query("timeout", timeout_s.to_string())
            .retry_safe();
        self.core.send(&self.req(r)?).await.map(|_| ())
    }

    async fn container_logs(&self, id: &str, opts: &LogOptions) -> Result<String> {
        let r = Request::get(S, "container_logs", format!("containers/{}/logs", seg(id)))
            .query("stdout", "true")
            .query("stderr", "true")
            .query("timestamps", if opts.timestamps { "true" } else { "false" })
            .query_opt("tail", opts.tail.map(|t| t.to_string()))
            .query_opt("since", opts.since.map(|t| t.to_string()));
        let rsp = self.core.send(&self.req(r)?).await?;
        // A JSON string (pecan's `json` exposure of Docker's text), or raw
        // text from a proxy that unwrapped it.
        Ok(serde_json::from_slice::<String>(&rsp.body)
            .unwrap_or_else(|_| String::from_utf8_lossy(&rsp.body).into_owned()))
    }

    async fn exec(&self, id: &str, command: &[String]) -> Result<ExecOutput> {
        // Zun splits the command string with shlex: quote each word.
        let line = command
            .iter()
            .map(|w| shell_quote(w))
            .collect::<Vec<_>>()
            .join(" ");
        let r = Request::post(S, "exec", format!("containers/{}/execute", seg(id)))
            .query("command", line)
            .query("run", "true")
            .query("interactive", "false");
        let v: Value = self.core.send(&self.req(r)?).await?.json()?;
        Ok(ExecOutput {
            output: v
                .get("output")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
            exit_code: v
                .get("exit_code")
                .and_then(Value::as_i64)
                .and_then(|c| i32::try_from(c).ok()),
        })
    }

    async fn create_capsule(&self, req: &ZunCapsuleCreate) -> Result<ZunCapsule> {
        let template = serde_json::to_string(&req.template).map_err(|e| {
            Error::unexpected(format!(
                "container create_capsule: cannot encode template: {e}"
            ))
        })?;
        let r = Request::post(S, "create_capsule", "capsules")
            .json(&json!({ "template": template }))?;
        self.core.send(&self.req(r)?).await?.json()
    }

    async fn get_capsule(&self, id: &str) -> Result<ZunCapsule> {
        self.core
            .send(&self.req(Request::get(
                S,
                "get_capsule",
                format!("capsules/{}", seg(id)),
            ))?)
            .await?
            .json()
    }

    async fn list_capsules(&self, labels: &BTreeMap<String, String>) -> Result<Vec<ZunCapsule>> {
        let r = self.req(Request::get(S, "list_capsules", "capsules"))?;
        let all: Vec<ZunCapsule> = self.core.list_all(r, "capsules").await?;
        Ok(all
            .into_iter()
            .filter(|c| labels_match(&c.labels, labels))
            .collect())
    }

    async fn delete_capsule(&self, id: &str) -> Result<()> {
        self.core
            .send(&self.req(Request::delete(
                S,
                "delete_capsule",
                format!("capsules/{}", seg(id)),
            ))?)
            .await
            .map(|_| ())
    }

    async fn get_quota(&self, project_id: &str) -> Result<ZunQuota> {
        let r = Request::get(S, "get_quota", format!("quotas/{}", seg(project_id)))
            .query("usages", "true");
        let v: Value = self.core.send(&self.req(r)?).await?.json()?;
        Ok(parse_quota(&v))
    }

    async fn list_availability_zones(&self) -> Result<Vec<String>> {
        let r = self.req(Request::get(
            S,
            "list_availability_zones",
            "availability_zones",
        ))?;
        let v: Vec<WireZone> = self.core.list_all(r, "availability_zones").await?;
        Ok(v.into_iter().map(|z| z.availability_zone).collect())
    }

    async fn list_services(&self) -> Result<Vec<ZunService>> {
        let r = self.req(Request::get(S, "list_services", "services"))?;
        self.core.send(&r).await?.json_at("services")
    }

    async fn container_stats(&self, id: &str) -> Result<ZunStats> {
        let r = Request::get(
            S,
            "container_stats",
            format!("containers/{}/stats", seg(id)),
        );
        let v: Value = self.core.send(&self.req(r)?).await?.json()?;
        Ok(parse_stats(&v))
    }

    async fn container_top(&self, id: &str, ps_args: &str) -> Result<ZunTop> {
        let r = Request::get(S, "container_top", format!("containers/{}/top", seg(id)))
            .query("ps_args", ps_args);
        self.core.send(&self.req(r)?).await?.json()
    }

    async fn exec_interactive(&self, id: &str, command: &[String]) -> Result<ZunSession> {
        let line = command
            .iter()
            .map(|w| shell_quote(w))
            .collect::<Vec<_>>()
            .join(" ");
        // run=false leaves the exec created, not started: zun-wsproxy starts
        // it when the client connects (interactive gives it stdin and a TTY).
        let r = Request::post(
            S,
            "exec_interactive",
            format!("containers/{}/execute", seg(id)),
        )
        .query("command", line)
        .query("run", "false")
        .query("interactive", "true");
        let v: Value = self.core.send(&self.req(r)?).await?.json()?;
        let url = v.get("proxy_url").and_then(Value::as_str).ok_or_else(|| {
            Error::unexpected("container exec_interactive: no proxy_url in the answer")
        })?;
        Ok(ZunSession {
            url: url.to_string(),
            exec_id: v.get("exec_id").and_then(Value::as_str).map(str::to_string),
        })
    }

    async fn attach(&self, id: &str) -> Result<ZunSession> {
        let r = Request::get(S, "attach", format!("containers/{}/attach", seg(id)));
        let url: String = self.core.send(&self.req(r)?).await?.json()?;
        Ok(ZunSession { url, exec_id: None })
    }

    async fn get_archive(&self, id: &str, path: &str) -> Result<Vec<u8>> {
        use base64::Engine as _;
        // `{"data": <base64 tar>, "stat": ...}`: zun-compute encodes the archive from API 1.25.
        let r = Request::get(
            S,
            "get_archive",
            format!("containers/{}/get_archive", seg(id)),
        )
        .query("path", path);
        let v: serde_json::Value = self.core.send(&self.req(r)?).await?.json()?;
        let data = v.get("data").and_then(|d| d.as_str()).ok_or_else(|| {
            crate::error::Error::unexpected(format!(
                "get_archive of {path} in {id}: Zun's answer has no \"data\" string"
            ))
        })?;
        base64::engine::general_purpose::STANDARD
            .decode(data.trim())
            .map_err(|e| {
                crate::error::Error::unexpected(format!(
                    "get_archive of {path} in {id}: \"data\" is not base64: {e}"
                ))
            })
    }

    async fn put_archive(&self, id: &str, path: &str, tar: &[u8]) -> Result<()> {
        use base64::Engine as _;
        // From API 1.25 Zun expects the archive base64-encoded in `data`
        // (python-zunclient's `put_archive`); zun-compute answers synchronously.
        let data = base64::engine::general_purpose::STANDARD.encode(tar);
        let r = Request::post(
            S,
            "put_archive",
            format!("containers/{}/put_archive", seg(id)),
        )
        .query("path", path)
        .json(&json!({ "data": data }))?;
        self.core.send(&self.req(r)?).await?;
        Ok(())
    }

    async fn exec_resize(&self, id: &str, exec_id: &str, width: u16, height: u16) -> Result<()> {
        // Docker waits (up to 10 s) for an exec zun-wsproxy has not started yet.
        let r = Request::post(
            S,
            "exec_resize",
            format!("containers/{}/execute_resize", seg(id)),
        )
        .query("exec_id", exec_id)
        .query("h", height.to_string())
        .query("w", width.to_string());
        self.core.send(&self.req(r)?).await?;
        Ok(())
    }

    async fn resize_tty(&self, id: &str, width: u16, height: u16) -> Result<()> {
        let r = Request::post(S, "resize_tty", format!("containers/{}/resize", seg(id)))
            .query("h", height.to_string())
            .query("w", width.to_string());
        self.core.send(&self.req(r)?).await?;
        Ok(())
    }
}

/// Parse `GET /containers/{id}/stats` (numbers, or strings of numbers).
pub(crate) fn parse_stats(v: &Value) -> ZunStats {
    let num = |k: &str| {
        v.get(k)
            .and_then(|x| {
                x.as_f64()
                    .or_else(|| x.as_str().and_then(|s| s.trim().parse().ok()))
            })
            .unwrap_or(0.0)
    };
    ZunStats {
        memory_usage_mib: num("MEM USAGE(MiB)"),
        memory_limit_mib: num("MEM LIMIT(MiB)"),
        cpu_percent: num("CPU %"),
    }
}

/// POSIX shell quoting, as Python's `shlex.quote` (which Zun's `shlex.split`
/// undoes).
fn shell_quote(w: &str) -> String {
    if !w.is_empty()
        && w.chars()
            .all(|c| c.is_ascii_alphanumeric() || "@%+=:,./-_".contains(c))
    {
        return w.to_string();
    }
    format!("'{}'", w.replace('\'', "'\"'\"'"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting_survives_shlex() {
        assert_eq!(shell_quote("ls"), "ls");
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), "'it'\"'\"'s'");
        assert_eq!(shell_quote(""), "''");
    }

    #[test]
    fn stats_parsing() {
        let v = json!({"CONTAINER": "c", "CPU %": 0.01, "MEM USAGE(MiB)": 1.5, "MEM LIMIT(MiB)": "64",
                       "MEM %": 2.3, "BLOCK I/O(B)": "0/0", "NET I/O(B)": "0/0"});
        let s = parse_stats(&v);
        assert_eq!(s.memory_usage_mib, 1.5);
        assert_eq!(s.memory_limit_mib, 64.0);
        assert_eq!(s.cpu_percent, 0.01);
    }

    #[test]
    fn quota_parsing() {
        let v = json!({"containers": {"limit": 40, "in_use": 2}, "cpu": {"limit": 20, "in_use": 1},
                        "memory": {"limit": 51200, "in_use": 128}, "disk": {"limit": -1, "in_use": 0}});
        let q = parse_quota(&v);
        assert_eq!(
            q.containers,
            ZunQuotaValue {
                limit: 40.0,
                in_use: 2.0
            }
        );
        assert_eq!(q.memory.in_use, 128.0);
        assert!(!q.disk.is_limited());
        assert!(!parse_quota(&json!({})).cpu.is_limited());
        let frac = parse_quota(&json!({"cpu": {"limit": 20, "in_use": 1.5}}));
        assert_eq!(frac.cpu.in_use, 1.5);
    }
}
