//! Cinder across availability zones: one `cinder-volume` per zone, each reading `cinder.conf`
//! and then its zone's file, which sets the zone (`storage_availability_zone`), the backends
//! the zone serves (`enabled_backends`) and the zone's own `backend_host`, so each zone's
//! volumes belong to a host of that zone (`<host>-<zone>@<backend>`) and the scheduler places a
//! volume asked for in a zone only on that zone's backends. The API and the scheduler read
//! `cinder.conf` alone, where the first zone is the default one.

use controlplane_api::zones::AvailabilityZone;

use crate::ini::Ini;

use super::Paths;

/// The volume service of one zone.
#[derive(Clone, Debug, PartialEq)]
pub struct ZoneVolume {
    /// The zone.
    pub zone: AvailabilityZone,
    /// `backend_host` of the zone's backends.
    pub host: String,
    /// Names of the backends the zone serves.
    pub backends: Vec<String>,
}

impl ZoneVolume {
    /// The zone's file in the config Secret.
    pub fn file_name(&self) -> String {
        format!("volume-{}.conf", self.zone.name)
    }

    /// The zone's file: read after `cinder.conf`, its options win.
    pub fn conf(&self) -> String {
        let mut ini = Ini::default();
        ini.set(
            "DEFAULT",
            "storage_availability_zone",
            self.zone.name.clone(),
        )
        .set("DEFAULT", "enabled_backends", self.backends.join(","));
        for b in &self.backends {
            ini.set(b, "backend_host", self.host.clone());
        }
        ini.render()
    }

    /// The zone's `cinder-volume` command: `cinder.conf`, then the zone's file.
    pub fn command(&self, program: &str, paths: &Paths) -> Vec<String> {
        vec![
            program.to_string(),
            "--config-file".into(),
            paths.cinder_conf(),
            "--config-file".into(),
            format!(
                "{}/{}",
                paths.config_dir.trim_end_matches('/'),
                self.file_name()
            ),
        ]
    }
}

/// The volume service of each zone (pure): a backend with a zone is served in that zone only,
/// one without in every zone; a zone serving no backend gets none. `volume_host` is the host
/// of the service without zones; each zone's is `<volume_host>-<zone>`.
pub fn volumes(
    volume_host: &str,
    zones: &[AvailabilityZone],
    backends: &[(String, Option<String>)],
) -> Vec<ZoneVolume> {
    zones
        .iter()
        .filter_map(|z| {
            let served: Vec<String> = backends
                .iter()
                .filter(|(_, bz)| bz.as_deref().is_none_or(|bz| bz == z.name))
                .map(|(n, _)| n.clone())
                .collect();
            (!served.is_empty()).then(|| ZoneVolume {
                zone: z.clone(),
                host: format!("{volume_host}-{}", z.name),
                backends: served,
            })
        })
        .collect()
}

/// `cinder.conf` with the first zone as the zone of the API and the scheduler
/// (`storage_availability_zone`) and of volumes created without one
/// (`default_availability_zone`). Unchanged without zones.
pub fn with_default_zone(cinder_conf: &str, zones: &[AvailabilityZone]) -> String {
    let Some(first) = zones.first() else {
        return cinder_conf.to_string();
    };
    let mut ini = Ini::parse(cinder_conf);
    ini.set("DEFAULT", "storage_availability_zone", first.name.clone())
        .set("DEFAULT", "default_availability_zone", first.name.clone());
    ini.render()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zones(names: &[&str]) -> Vec<AvailabilityZone> {
        names
            .iter()
            .map(|n| AvailabilityZone {
                name: (*n).into(),
                ..AvailabilityZone::default()
            })
            .collect()
    }

    #[test]
    fn two_zones_serve_the_shared_backend_each_under_its_own_host() {
        let v = volumes("cinder", &zones(&["az1", "az2"]), &[("ceph".into(), None)]);
        assert_eq!(v.len(), 2);
        assert_eq!(v[0].host, "cinder-az1");
        assert_eq!(v[1].host, "cinder-az2");
        assert_eq!(v[1].file_name(), "volume-az2.conf");
        assert_eq!(
            v[1].conf(),
            "[DEFAULT]\nenabled_backends = ceph\nstorage_availability_zone = az2\n\n[ceph]\nbackend_host = cinder-az2\n\n"
        );
        assert_eq!(
            v[0].command("cinder-volume", &Paths::pod()),
            [
                "cinder-volume",
                "--config-file",
                "/etc/cinder/rendered/cinder.conf",
                "--config-file",
                "/etc/cinder/rendered/volume-az1.conf"
            ]
        );
    }

    #[test]
    fn three_zones_with_zonal_backends() {
        let v = volumes(
            "c",
            &zones(&["az1", "az2", "az3"]),
            &[
                ("ceph".into(), None),
                ("nfs-a".into(), Some("az1".into())),
                ("nfs-c".into(), Some("az3".into())),
            ],
        );
        let served: Vec<_> = v
            .iter()
            .map(|z| (z.zone.name.as_str(), z.backends.join(",")))
            .collect();
        assert_eq!(
            served,
            [
                ("az1", "ceph,nfs-a".to_string()),
                ("az2", "ceph".to_string()),
                ("az3", "ceph,nfs-c".to_string())
            ]
        );
        assert!(v[2].conf().contains("[nfs-c]\nbackend_host = c-az3\n"));
        assert!(!v[1].conf().contains("nfs"));
    }

    #[test]
    fn a_zone_serving_nothing_gets_no_volume_service() {
        let v = volumes(
            "c",
            &zones(&["az1", "az2"]),
            &[("nfs".into(), Some("az2".into()))],
        );
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].zone.name, "az2");
    }

    #[test]
    fn the_first_zone_is_the_default() {
        let conf = "[DEFAULT]\ndebug = false\n";
        assert_eq!(with_default_zone(conf, &[]), conf);
        let z = with_default_zone(conf, &zones(&["az1", "az2"]));
        let ini = Ini::parse(&z);
        assert_eq!(ini.get("DEFAULT", "storage_availability_zone"), Some("az1"));
        assert_eq!(ini.get("DEFAULT", "default_availability_zone"), Some("az1"));
        assert_eq!(ini.get("DEFAULT", "debug"), Some("false"));
    }
}
