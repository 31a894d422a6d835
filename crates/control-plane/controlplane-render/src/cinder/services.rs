//! Whether the deployed `cinder-volume` services are up, from Cinder's own service list
//! (`GET /v3/{project_id}/os-services?binary=cinder-volume`, admin only): each backend is
//! reported under `<backend_host>@<backend>` (the stable host the rendering sets), with `state`
//! `up` while its heartbeat is younger than Cinder's `service_down_time`. A Cinder whose API
//! answers while its volume service is down cannot create a volume, so it is not Ready.

use serde_json::Value;

use super::zones::ZoneVolume;

/// The hosts Cinder lists the volume services of this rendering under (pure): every backend
/// at `volume_host` without zones, each zone's backends at the zone's host with them.
pub fn volume_hosts(volume_host: &str, backends: &[String], zones: &[ZoneVolume]) -> Vec<String> {
    if zones.is_empty() {
        return backends
            .iter()
            .map(|b| format!("{volume_host}@{b}"))
            .collect();
    }
    zones
        .iter()
        .flat_map(|z| z.backends.iter().map(move |b| format!("{}@{b}", z.host)))
        .collect()
}

/// The volume services of `hosts` in an `os-services` answer.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VolumeServices {
    /// Hosts reported up.
    pub up: Vec<String>,
    /// Hosts reported down, with their last heartbeat (`updated_at`) when given.
    pub down: Vec<(String, Option<String>)>,
    /// Hosts Cinder has no record of (the service has not started yet).
    pub missing: Vec<String>,
}

impl VolumeServices {
    /// Reads `body` (`{"services": [...]}`) for `hosts` (pure). A record that is disabled by
    /// an operator still counts by its state: disabling stops scheduling, not the service.
    pub fn read(hosts: &[String], body: &Value) -> Result<VolumeServices, String> {
        let list = body["services"]
            .as_array()
            .ok_or_else(|| format!("os-services answered without a services list: {body}"))?;
        let mut out = VolumeServices::default();
        for h in hosts {
            let rec = list
                .iter()
                .find(|s| s["binary"] == "cinder-volume" && s["host"] == h.as_str());
            match rec {
                None => out.missing.push(h.clone()),
                Some(s) if s["state"] == "up" => out.up.push(h.clone()),
                Some(s) => out
                    .down
                    .push((h.clone(), s["updated_at"].as_str().map(str::to_string))),
            }
        }
        Ok(out)
    }

    /// What is wrong, for a condition: `None` when no listed service is down.
    pub fn down_message(&self) -> Option<String> {
        if self.down.is_empty() {
            return None;
        }
        let list: Vec<String> = self
            .down
            .iter()
            .map(|(h, at)| match at {
                Some(at) => format!("{h} (last heartbeat {at})"),
                None => h.clone(),
            })
            .collect();
        Some(format!(
            "Cinder reports cinder-volume down: {}; volumes cannot be created or attached there",
            list.join(", ")
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use controlplane_api::zones::AvailabilityZone;
    use serde_json::json;

    #[test]
    fn hosts_follow_backend_host_and_zones() {
        let b = vec!["ceph".to_string(), "nfs".to_string()];
        assert_eq!(volume_hosts("cn", &b, &[]), ["cn@ceph", "cn@nfs"]);
        let zone = |n: &str| -> AvailabilityZone {
            serde_json::from_value(json!({"name": n})).expect("zone")
        };
        let zones = vec![
            ZoneVolume {
                zone: zone("az1"),
                host: "cn-az1".into(),
                backends: vec!["ceph".into()],
            },
            ZoneVolume {
                zone: zone("az2"),
                host: "cn-az2".into(),
                backends: vec!["ceph".into(), "nfs".into()],
            },
        ];
        assert_eq!(
            volume_hosts("cn", &b, &zones),
            ["cn-az1@ceph", "cn-az2@ceph", "cn-az2@nfs"]
        );
    }

    #[test]
    fn down_missing_and_up_are_told_apart() {
        let body = json!({"services": [
            {"binary": "cinder-scheduler", "host": "cn", "state": "up", "status": "enabled"},
            {"binary": "cinder-volume", "host": "cn@ceph", "state": "down", "status": "enabled",
             "updated_at": "2026-12-06T08:00:00.000000"},
            {"binary": "cinder-volume", "host": "cn@nfs", "state": "up", "status": "disabled"},
            // A record of a host no longer rendered (an old zone) says nothing.
            {"binary": "cinder-volume", "host": "cn-old@ceph", "state": "down"}]});
        let hosts = vec!["cn@ceph".into(), "cn@nfs".into(), "cn@lvm".into()];
        let v = VolumeServices::read(&hosts, &body).expect("read");
        assert_eq!(v.up, ["cn@nfs"]);
        assert_eq!(
            v.down,
            [(
                "cn@ceph".to_string(),
                Some("2026-12-06T08:00:00.000000".to_string())
            )]
        );
        assert_eq!(v.missing, ["cn@lvm"]);
        assert_eq!(
            v.down_message().as_deref(),
            Some(
                "Cinder reports cinder-volume down: cn@ceph (last heartbeat 2026-12-06T08:00:00.000000); volumes cannot be created or attached there"
            )
        );
        let up = VolumeServices::read(&["cn@nfs".into()], &body).expect("read");
        assert_eq!(up.down_message(), None);
        assert!(VolumeServices::read(&hosts, &json!({"error": "x"})).is_err());
    }
}
