//! Every Compute and BlockStorage operation against the real test cloud.

use crate::common;

use std::collections::BTreeMap;

use common::{Created, DEFAULT_DOMAIN, Janitor, cloud, skipped, unique};
use openstack::Error;
use openstack::model::*;

#[tokio::test]
async fn private_flavor_lifecycle_extra_specs_and_access() {
    if skipped() {
        return;
    }
    let (cloud, core) = cloud().await;
    let c = cloud.compute.clone();
    let j = Janitor::default();
    j.run(&cloud, async {
        let name = unique("flv");
        let f = c
            .create_flavor(&FlavorCreate {
                name: name.clone(),
                id: None,
                vcpus: 2,
                ram_mb: 128,
                disk_gb: 1,
                ephemeral_gb: 1,
                swap_mb: 64,
                is_public: false,
                description: Some("integration".into()),
            })
            .await
            .unwrap();
        j.track(Created::Flavor(f.id.clone()));
        assert_eq!(
            (f.vcpus, f.ram_mb, f.disk_gb, f.ephemeral_gb, f.swap_mb),
            (2, 128, 1, 1, 64)
        );
        assert!(!f.is_public);
        assert_eq!(f.description.as_deref(), Some("integration"));

        let got = c.get_flavor(&f.id).await.unwrap();
        assert_eq!(got, f);
        // Private flavors are visible to list and find (W19).
        assert!(c.list_flavors().await.unwrap().iter().any(|x| x.id == f.id));
        assert_eq!(
            c.find_flavor(&name).await.unwrap().map(|x| x.id),
            Some(f.id.clone())
        );
        assert!(c.find_flavor(&unique("none")).await.unwrap().is_none());

        let dup = c
            .create_flavor(&FlavorCreate {
                name: name.clone(),
                vcpus: 1,
                ram_mb: 64,
                is_public: true,
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert!(dup.is_conflict(), "{dup}");
        let bad = c
            .create_flavor(&FlavorCreate {
                name: unique("flv"),
                vcpus: 0,
                ram_mb: 64,
                is_public: true,
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert!(matches!(bad, Error::BadRequest { .. }), "{bad}");
        assert!(
            bad.to_string().contains("compute create_flavor: HTTP 400"),
            "{bad}"
        );

        let upd = c.update_flavor_description(&f.id, "changed").await.unwrap();
        assert_eq!(upd.description.as_deref(), Some("changed"));

        let specs: BTreeMap<String, String> = [
            ("hw:cpu_policy".to_string(), "dedicated".to_string()),
            (
                "quota:disk_read_bytes_sec".to_string(),
                "10240000".to_string(),
            ),
        ]
        .into();
        c.set_flavor_extra_specs(&f.id, &specs).await.unwrap();
        assert_eq!(c.get_flavor_extra_specs(&f.id).await.unwrap(), specs);
        // Extra specs come inline with the flavor (microversion 2.61+).
        assert_eq!(c.get_flavor(&f.id).await.unwrap().extra_specs, specs);
        c.delete_flavor_extra_spec(&f.id, "hw:cpu_policy")
            .await
            .unwrap();
        assert_eq!(c.get_flavor_extra_specs(&f.id).await.unwrap().len(), 1);
        let e = c
            .delete_flavor_extra_spec(&f.id, "hw:cpu_policy")
            .await
            .unwrap_err();
        assert!(e.is_not_found(), "{e}");

        let project = core.current_project_id().expect("token is project scoped");
        assert!(c.list_flavor_access(&f.id).await.unwrap().is_empty());
        c.add_flavor_access(&f.id, &project).await.unwrap();
        let e = c.add_flavor_access(&f.id, &project).await.unwrap_err();
        assert!(e.is_conflict(), "{e}");
        assert_eq!(
            c.list_flavor_access(&f.id).await.unwrap(),
            vec![project.clone()]
        );
        c.remove_flavor_access(&f.id, &project).await.unwrap();
        let e = c.remove_flavor_access(&f.id, &project).await.unwrap_err();
        assert!(e.is_not_found(), "{e}");

        c.delete_flavor(&f.id).await.unwrap();
        assert!(c.get_flavor(&f.id).await.unwrap_err().is_not_found());
        assert!(c.delete_flavor(&f.id).await.unwrap_err().is_not_found());
    })
    .await;
}

#[tokio::test]
async fn public_flavor_access_is_refused() {
    if skipped() {
        return;
    }
    let (cloud, core) = cloud().await;
    let c = cloud.compute.clone();
    let j = Janitor::default();
    j.run(&cloud, async {
        let f = c
            .create_flavor(&FlavorCreate {
                name: unique("pub"),
                id: Some(uuid::Uuid::new_v4().to_string()),
                vcpus: 1,
                ram_mb: 64,
                is_public: true,
                ..Default::default()
            })
            .await
            .unwrap();
        j.track(Created::Flavor(f.id.clone()));
        assert!(f.is_public);
        assert_eq!(f.swap_mb, 0);
        let project = core.current_project_id().expect("project scoped");
        let e = c.add_flavor_access(&f.id, &project).await.unwrap_err();
        assert!(e.is_conflict(), "{e}");
        let e = c.list_flavor_access(&f.id).await.unwrap_err();
        assert!(e.is_not_found(), "{e}");
        let dup_id = c
            .create_flavor(&FlavorCreate {
                name: unique("pub"),
                id: Some(f.id.clone()),
                vcpus: 1,
                ram_mb: 64,
                is_public: true,
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert!(dup_id.is_conflict(), "{dup_id}");
    })
    .await;
}

#[tokio::test]
async fn compute_and_volume_quotas_update_only_given_keys() {
    if skipped() {
        return;
    }
    let (cloud, _core) = cloud().await;
    let j = Janitor::default();
    j.run(&cloud, async {
        let p = cloud
            .identity
            .create_project(&ProjectCreate {
                name: unique("quota"),
                domain_id: DEFAULT_DOMAIN.into(),
                enabled: true,
                ..Default::default()
            })
            .await
            .unwrap();
        j.track(Created::Project(p.id.clone()));

        let c = cloud.compute.clone();
        let before = c.get_compute_quota(&p.id).await.unwrap();
        for k in ["cores", "instances", "ram", "key_pairs", "server_groups"] {
            assert!(before.contains_key(k), "missing {k} in {before:?}");
        }
        assert_eq!(before["cores"].in_use, 0);
        c.update_compute_quota(&p.id, &[("cores".to_string(), 7)].into())
            .await
            .unwrap();
        let after = c.get_compute_quota(&p.id).await.unwrap();
        assert_eq!(after["cores"].limit, 7);
        assert_eq!(after["instances"], before["instances"]);
        assert_eq!(after["ram"], before["ram"]);
        // The defaults are what a project without its own limits has, whatever this one has.
        let defaults = c.get_compute_quota_defaults(&p.id).await.unwrap();
        assert_eq!(defaults["cores"], before["cores"].limit);
        assert_eq!(defaults["ram"], before["ram"].limit);
        assert!(!defaults.contains_key("id"));
        let e = c
            .update_compute_quota(&p.id, &[("bogus_key".to_string(), 1)].into())
            .await
            .unwrap_err();
        assert!(matches!(e, Error::BadRequest { .. }), "{e}");
        c.update_compute_quota(&p.id, &QuotaUpdate::new())
            .await
            .unwrap();

        let b = cloud.block_storage.clone();
        let before = b.get_volume_quota(&p.id).await.unwrap();
        for k in [
            "volumes",
            "snapshots",
            "gigabytes",
            "backups",
            "backup_gigabytes",
        ] {
            assert!(before.contains_key(k), "missing {k} in {before:?}");
        }
        b.update_volume_quota(
            &p.id,
            &[("gigabytes".to_string(), 55), ("volumes".to_string(), 4)].into(),
        )
        .await
        .unwrap();
        let after = b.get_volume_quota(&p.id).await.unwrap();
        assert_eq!(after["gigabytes"].limit, 55);
        assert_eq!(after["volumes"].limit, 4);
        assert_eq!(after["snapshots"], before["snapshots"]);
        let defaults = b.get_volume_quota_defaults(&p.id).await.unwrap();
        assert_eq!(defaults["gigabytes"], before["gigabytes"].limit);
        assert_eq!(defaults["volumes"], before["volumes"].limit);
        let e = b
            .update_volume_quota(&p.id, &[("bogus_key".to_string(), 1)].into())
            .await
            .unwrap_err();
        assert!(matches!(e, Error::BadRequest { .. }), "{e}");
    })
    .await;
}
