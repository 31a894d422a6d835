//! Fake Nova.

use std::collections::BTreeMap;

use async_trait::async_trait;

use super::{FakeCloud, State, apply_quota_update, new_id};
use crate::error::{Error, Result};
use crate::model::*;
use crate::traits::Compute;

/// Nova's default quota limits (no usage).
pub(crate) fn default_quota() -> QuotaSet {
    [
        ("cores", 20),
        ("instances", 10),
        ("ram", 51200),
        ("key_pairs", 100),
        ("metadata_items", 128),
        ("server_groups", 10),
        ("server_group_members", 10),
        ("injected_files", 5),
        ("injected_file_content_bytes", 10240),
        ("injected_file_path_bytes", 255),
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

fn flavor<'a>(st: &'a State, id: &str) -> Result<&'a Flavor> {
    st.flavors
        .get(id)
        .ok_or_else(|| Error::not_found(format!("nova: Flavor {id} could not be found.")))
}

fn flavor_mut<'a>(st: &'a mut State, id: &str) -> Result<&'a mut Flavor> {
    st.flavors
        .get_mut(id)
        .ok_or_else(|| Error::not_found(format!("nova: Flavor {id} could not be found.")))
}

#[async_trait]
impl Compute for FakeCloud {
    async fn get_flavor(&self, id: &str) -> Result<Flavor> {
        self.run("compute.get_flavor", |st| flavor(st, id).cloned())
            .await
    }

    async fn list_flavors(&self) -> Result<Vec<Flavor>> {
        self.run("compute.list_flavors", |st| {
            Ok(st.flavors.values().cloned().collect())
        })
        .await
    }

    async fn find_flavor(&self, name: &str) -> Result<Option<Flavor>> {
        self.run("compute.find_flavor", |st| {
            Ok(st.flavors.values().find(|f| f.name == name).cloned())
        })
        .await
    }

    async fn create_flavor(&self, req: &FlavorCreate) -> Result<Flavor> {
        self.run("compute.create_flavor", |st| {
            if req.vcpus == 0 {
                return Err(Error::bad_request(
                    "nova: Invalid input for field/attribute vcpus. Value: 0. 0 is less than the minimum of 1",
                ));
            }
            if req.ram_mb == 0 {
                return Err(Error::bad_request(
                    "nova: Invalid input for field/attribute ram. Value: 0. 0 is less than the minimum of 1",
                ));
            }
            if st.flavors.values().any(|f| f.name == req.name) {
                return Err(Error::conflict(format!(
                    "nova: Flavor with name {} already exists.",
                    req.name
                )));
            }
            let id = req.id.clone().unwrap_or_else(new_id);
            if st.flavors.contains_key(&id) {
                return Err(Error::conflict(format!(
                    "nova: Flavor with ID {id} already exists."
                )));
            }
            let f = Flavor {
                id: id.clone(),
                name: req.name.clone(),
                vcpus: req.vcpus,
                ram_mb: req.ram_mb,
                disk_gb: req.disk_gb,
                ephemeral_gb: req.ephemeral_gb,
                swap_mb: req.swap_mb,
                is_public: req.is_public,
                description: req.description.clone(),
                extra_specs: BTreeMap::new(),
            };
            st.flavors.insert(id, f.clone());
            Ok(f)
        }).await
    }

    async fn update_flavor_description(&self, id: &str, description: &str) -> Result<Flavor> {
        self.run("compute.update_flavor_description", |st| {
            let f = flavor_mut(st, id)?;
            f.description = Some(description.to_string());
            Ok(f.clone())
        })
        .await
    }

    async fn delete_flavor(&self, id: &str) -> Result<()> {
        self.run("compute.delete_flavor", |st| {
            flavor(st, id)?;
            st.flavors.remove(id);
            st.flavor_access.remove(id);
            Ok(())
        })
        .await
    }

    async fn get_flavor_extra_specs(&self, id: &str) -> Result<BTreeMap<String, String>> {
        self.run("compute.get_flavor_extra_specs", |st| {
            Ok(flavor(st, id)?.extra_specs.clone())
        })
        .await
    }

    async fn set_flavor_extra_specs(
        &self,
        id: &str,
        specs: &BTreeMap<String, String>,
    ) -> Result<()> {
        self.run("compute.set_flavor_extra_specs", |st| {
            let f = flavor_mut(st, id)?;
            for (k, v) in specs {
                if k.is_empty() || k.len() > 255 {
                    return Err(Error::bad_request(format!(
                        "nova: Invalid input for field/attribute extra_specs. Value: {k}"
                    )));
                }
                f.extra_specs.insert(k.clone(), v.clone());
            }
            Ok(())
        })
        .await
    }

    async fn delete_flavor_extra_spec(&self, id: &str, key: &str) -> Result<()> {
        self.run("compute.delete_flavor_extra_spec", |st| {
            let f = flavor_mut(st, id)?;
            f.extra_specs.remove(key).map(|_| ()).ok_or_else(|| {
                Error::not_found(format!(
                    "nova: Flavor {id} has no extra specs with key {key}."
                ))
            })
        })
        .await
    }

    async fn list_flavor_access(&self, id: &str) -> Result<Vec<String>> {
        self.run("compute.list_flavor_access", |st| {
            if flavor(st, id)?.is_public {
                return Err(Error::not_found(
                    "nova: Access list not available for public flavors.",
                ));
            }
            Ok(st
                .flavor_access
                .get(id)
                .map(|s| s.iter().cloned().collect())
                .unwrap_or_default())
        })
        .await
    }

    async fn add_flavor_access(&self, id: &str, project_id: &str) -> Result<()> {
        self.run("compute.add_flavor_access", |st| {
            if flavor(st, id)?.is_public {
                return Err(Error::conflict(
                    "nova: Can not add access to a public flavor.",
                ));
            }
            if !st
                .flavor_access
                .entry(id.into())
                .or_default()
                .insert(project_id.into())
            {
                return Err(Error::conflict(format!(
                    "nova: Flavor access already exists for flavor {id} and project {project_id} combination."
                )));
            }
            Ok(())
        }).await
    }

    async fn remove_flavor_access(&self, id: &str, project_id: &str) -> Result<()> {
        self.run("compute.remove_flavor_access", |st| {
            flavor(st, id)?;
            if !st
                .flavor_access
                .get_mut(id)
                .is_some_and(|s| s.remove(project_id))
            {
                return Err(Error::not_found(format!(
                    "nova: Flavor access not found for {id} / {project_id} combination."
                )));
            }
            Ok(())
        })
        .await
    }

    async fn get_compute_quota(&self, project_id: &str) -> Result<QuotaSet> {
        self.run("compute.get_compute_quota", |st| {
            Ok(st
                .compute_quotas
                .get(project_id)
                .cloned()
                .unwrap_or_else(default_quota))
        })
        .await
    }

    async fn get_compute_quota_defaults(&self, _project_id: &str) -> Result<QuotaUpdate> {
        self.run("compute.get_compute_quota_defaults", |_| {
            Ok(default_quota()
                .into_iter()
                .map(|(k, v)| (k, v.limit))
                .collect())
        })
        .await
    }

    async fn update_compute_quota(&self, project_id: &str, limits: &QuotaUpdate) -> Result<()> {
        self.run("compute.update_compute_quota", |st| {
            let q = st
                .compute_quotas
                .entry(project_id.into())
                .or_insert_with(default_quota);
            apply_quota_update("nova update_compute_quota", q, limits)
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(name: &str, public: bool) -> FlavorCreate {
        FlavorCreate {
            name: name.into(),
            vcpus: 1,
            ram_mb: 512,
            disk_gb: 1,
            is_public: public,
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn private_flavors_are_listed_and_access_is_managed() {
        let fake = FakeCloud::new();
        let f = fake.create_flavor(&req("priv", false)).await.unwrap();
        assert!(fake.find_flavor("priv").await.unwrap().is_some());
        assert!(
            fake.create_flavor(&req("priv", true))
                .await
                .unwrap_err()
                .is_conflict()
        );
        fake.add_flavor_access(&f.id, "p1").await.unwrap();
        assert!(
            fake.add_flavor_access(&f.id, "p1")
                .await
                .unwrap_err()
                .is_conflict()
        );
        assert_eq!(fake.list_flavor_access(&f.id).await.unwrap(), vec!["p1"]);
        fake.remove_flavor_access(&f.id, "p1").await.unwrap();
        let public = fake.create_flavor(&req("pub", true)).await.unwrap();
        assert!(
            fake.add_flavor_access(&public.id, "p1")
                .await
                .unwrap_err()
                .is_conflict()
        );
    }

    #[tokio::test]
    async fn extra_specs_and_quota() {
        let fake = FakeCloud::new();
        let f = fake.create_flavor(&req("f", true)).await.unwrap();
        let specs: BTreeMap<_, _> = [("hw:cpu_policy".to_string(), "dedicated".to_string())].into();
        fake.set_flavor_extra_specs(&f.id, &specs).await.unwrap();
        assert_eq!(fake.get_flavor_extra_specs(&f.id).await.unwrap(), specs);
        fake.delete_flavor_extra_spec(&f.id, "hw:cpu_policy")
            .await
            .unwrap();
        assert!(
            fake.delete_flavor_extra_spec(&f.id, "hw:cpu_policy")
                .await
                .unwrap_err()
                .is_not_found()
        );

        fake.set_compute_usage("p", "cores", 8);
        let upd: QuotaUpdate = [("cores".to_string(), 4)].into();
        assert!(fake.update_compute_quota("p", &upd).await.is_err());
        let upd: QuotaUpdate = [("cores".to_string(), 16)].into();
        fake.update_compute_quota("p", &upd).await.unwrap();
        let q = fake.get_compute_quota("p").await.unwrap();
        assert_eq!(
            q["cores"],
            QuotaValue {
                limit: 16,
                in_use: 8
            }
        );
        assert_eq!(q["instances"].limit, 10);
        let bad: QuotaUpdate = [("bogus".to_string(), 1)].into();
        assert!(matches!(
            fake.update_compute_quota("p", &bad).await.unwrap_err(),
            Error::BadRequest { .. }
        ));
    }
}
