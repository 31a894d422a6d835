//! Quotas: only the keys the spec sets are compared and sent. The keys we set are recorded
//! in `status.quotaKeysSet`; one removed from the spec goes back to the cloud's default (read
//! from the service's defaults, so only that key changes: the services' own "delete quota"
//! calls reset every key). Keys never set are left alone (Terraform's lesson: unset must not
//! mean 0).

use std::collections::{BTreeMap, BTreeSet};

use api::OpenstackProjectStatus;
use api::project::{QuotaService, QuotaUsage, Quotas};
use openstack::model::{QuotaSet, QuotaUpdate};

use super::{AreaOutcome, Env, os};
use crate::error::ReconcileError;

/// The spec's key (`ramMB`) for a service's quota key (`ram`), for `status.quotaUsage`.
pub fn spec_key(service: QuotaService, key: &str) -> &str {
    match (service, key) {
        (QuotaService::Compute, "ram") => "ramMB",
        (QuotaService::Compute, "server_groups") => "serverGroups",
        (QuotaService::Compute, "server_group_members") => "serverGroupMembers",
        (QuotaService::Storage, "gigabytes") => "volumesGB",
        (QuotaService::Storage, "backup_gigabytes") => "backupsGB",
        (QuotaService::Network, "floatingip") => "floatingIps",
        (QuotaService::Network, "network") => "networks",
        (QuotaService::Network, "subnet") => "subnets",
        (QuotaService::Network, "router") => "routers",
        (QuotaService::Network, "port") => "ports",
        (QuotaService::Network, "security_group") => "securityGroups",
        (QuotaService::Network, "security_group_rule") => "securityGroupRules",
        (_, k) => k,
    }
}

/// The quota plan of one service.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ServicePlan {
    /// Keys whose limit differs from the spec (empty = no write).
    pub update: QuotaUpdate,
    /// `<service>.<specKey>` → limit (as it will be) and usage, for every spec key.
    pub usage: BTreeMap<String, QuotaUsage>,
}

/// The record of a key in `status.quotaKeysSet`.
pub fn record_key(service: QuotaService, key: &str) -> String {
    format!("{}.{key}", service.as_str())
}

/// Keys of `service` recorded as set by us that the spec no longer sets.
pub fn removed_keys(quotas: &Quotas, service: QuotaService, recorded: &[String]) -> Vec<String> {
    let prefix = format!("{}.", service.as_str());
    let wanted: BTreeSet<&str> = quotas
        .openstack_keys()
        .into_iter()
        .filter(|(svc, _, _)| *svc == service)
        .map(|(_, k, _)| k)
        .collect();
    recorded
        .iter()
        .filter_map(|r| r.strip_prefix(&prefix))
        .filter(|k| !wanted.contains(k))
        .map(str::to_string)
        .collect()
}

/// Adds the resets of `removed` keys to `plan`: each goes back to its default where it
/// differs. A key the service does not know (any more) is dropped: there is nothing to reset.
pub fn plan_resets(
    plan: &mut ServicePlan,
    removed: &[String],
    observed: &QuotaSet,
    defaults: &QuotaUpdate,
) {
    for key in removed {
        if let (Some(default), Some(current)) = (defaults.get(key), observed.get(key))
            && current.limit != *default
        {
            plan.update.insert(key.clone(), *default);
        }
    }
}

/// Plans one service: the spec's keys for it against its current quota set.
pub fn plan_service(quotas: &Quotas, service: QuotaService, observed: &QuotaSet) -> ServicePlan {
    let mut plan = ServicePlan::default();
    for (svc, key, limit) in quotas.openstack_keys() {
        if svc != service {
            continue;
        }
        let current = observed.get(key);
        if current.is_none_or(|c| c.limit != limit) {
            plan.update.insert(key.to_string(), limit);
        }
        plan.usage.insert(
            format!("{}.{}", svc.as_str(), spec_key(svc, key)),
            QuotaUsage {
                limit,
                in_use: current.map_or(0, |c| c.in_use),
            },
        );
    }
    plan
}

/// `status.quotaUsage` entries as OpenStack has them now (limits not yet changed).
pub fn in_force(
    quotas: &Quotas,
    service: QuotaService,
    observed: &QuotaSet,
) -> BTreeMap<String, QuotaUsage> {
    quotas
        .openstack_keys()
        .into_iter()
        .filter(|(svc, _, _)| *svc == service)
        .filter_map(|(svc, key, _)| {
            observed.get(key).map(|c| {
                (
                    format!("{}.{}", svc.as_str(), spec_key(svc, key)),
                    QuotaUsage {
                        limit: c.limit,
                        in_use: c.in_use,
                    },
                )
            })
        })
        .collect()
}

/// The services the spec sets any key for, in the seed's order (compute, storage, network).
pub fn services(quotas: &Quotas) -> Vec<QuotaService> {
    let mut out: Vec<QuotaService> = Vec::new();
    for (svc, _, _) in quotas.openstack_keys() {
        if !out.contains(&svc) {
            out.push(svc);
        }
    }
    out
}

/// The services to visit: those of the spec and those with recorded keys to reset.
fn services_to_visit(quotas: &Quotas, recorded: &[String]) -> Vec<QuotaService> {
    [
        QuotaService::Compute,
        QuotaService::Storage,
        QuotaService::Network,
    ]
    .into_iter()
    .filter(|svc| {
        services(quotas).contains(svc) || !removed_keys(quotas, *svc, recorded).is_empty()
    })
    .collect()
}

/// Reads each service's quotas once (with usage), writes only differing keys, and records
/// `status.quotaUsage`. The services run at the same time (each its own API); a failing one
/// does not stop the others. `fresh`: the project was created in this pass (nothing used, no
/// limit of its own): nothing is read and every spec key is written.
pub(crate) async fn apply(
    env: &Env<'_>,
    quotas: &Quotas,
    project_id: &str,
    status: &mut OpenstackProjectStatus,
    fresh: bool,
) -> AreaOutcome {
    let mut out = AreaOutcome::default();
    let recorded = status.quota_keys_set.clone();
    // Every spec key counts as set by us from now on (recorded before the write, so a crash
    // after it cannot lose the record); a removed key stays recorded until it is reset.
    let mut keep: BTreeSet<String> = quotas
        .openstack_keys()
        .into_iter()
        .map(|(svc, k, _)| record_key(svc, k))
        .collect();
    keep.extend(recorded.iter().cloned());
    status.quota_keys_set = keep.iter().cloned().collect();
    let known = &status.quota_usage;
    let runs = futures::future::join_all(
        services_to_visit(quotas, &recorded)
            .into_iter()
            .map(|svc| apply_service(env, quotas, svc, project_id, &recorded, known, fresh)),
    )
    .await;
    let mut usage = BTreeMap::new();
    for run in runs {
        out.changed |= run.changed;
        out.errors.extend(run.errors);
        usage.extend(run.usage);
        keep.retain(|k| !run.reset.contains(k));
    }
    status.quota_keys_set = keep.into_iter().collect();
    status.quota_usage = usage;
    out
}

/// What one service's quota run did.
#[derive(Default)]
struct ServiceRun {
    changed: bool,
    errors: Vec<ReconcileError>,
    /// Its `status.quotaUsage` entries.
    usage: BTreeMap<String, QuotaUsage>,
    /// Removed keys now back at their defaults (their records go).
    reset: BTreeSet<String>,
}

/// One service of [`apply`]; `known` is the usage recorded before this pass.
async fn apply_service(
    env: &Env<'_>,
    quotas: &Quotas,
    svc: QuotaService,
    project_id: &str,
    recorded: &[String],
    known: &BTreeMap<String, QuotaUsage>,
    fresh: bool,
) -> ServiceRun {
    let mut run = ServiceRun::default();
    let path = format!("spec.quotas.{}", svc.as_str());
    let removed = removed_keys(quotas, svc, recorded);
    let observed = match svc {
        _ if fresh => Ok(QuotaSet::new()),
        QuotaService::Compute => env.cloud.compute.get_compute_quota(project_id).await,
        QuotaService::Storage => env.cloud.block_storage.get_volume_quota(project_id).await,
        QuotaService::Network => env.cloud.network.get_network_quota(project_id).await,
    };
    let observed = match observed {
        Ok(q) => q,
        Err(e) => {
            run.errors.push(os(format!("{path}: reading quotas"), e));
            // Keep the last known usage rather than dropping the keys from status.
            let prefix = format!("{}.", svc.as_str());
            run.usage.extend(
                known
                    .iter()
                    .filter(|(k, _)| k.starts_with(&prefix))
                    .map(|(k, v)| (k.clone(), v.clone())),
            );
            return run;
        }
    };
    let mut plan = plan_service(quotas, svc, &observed);
    let mut reset_candidates: BTreeSet<String> = BTreeSet::new();
    if !removed.is_empty() {
        // Read only when a key was removed, so the steady state costs no extra call.
        let defaults = match svc {
            QuotaService::Compute => {
                env.cloud
                    .compute
                    .get_compute_quota_defaults(project_id)
                    .await
            }
            QuotaService::Storage => {
                env.cloud
                    .block_storage
                    .get_volume_quota_defaults(project_id)
                    .await
            }
            QuotaService::Network => {
                env.cloud
                    .network
                    .get_network_quota_defaults(project_id)
                    .await
            }
        };
        match defaults {
            Ok(d) => {
                plan_resets(&mut plan, &removed, &observed, &d);
                // Reset once the write below succeeds (or nothing differed).
                reset_candidates.extend(removed.iter().map(|k| record_key(svc, k)));
            }
            Err(e) => run.errors.push(os(
                format!(
                    "{path}: reading the default quotas to reset {}",
                    removed.join(", ")
                ),
                e,
            )),
        }
    }
    if !plan.update.is_empty() {
        let res = match svc {
            QuotaService::Compute => {
                env.cloud
                    .compute
                    .update_compute_quota(project_id, &plan.update)
                    .await
            }
            QuotaService::Storage => {
                env.cloud
                    .block_storage
                    .update_volume_quota(project_id, &plan.update)
                    .await
            }
            QuotaService::Network => {
                env.cloud
                    .network
                    .update_network_quota(project_id, &plan.update)
                    .await
            }
        };
        match res {
            Ok(()) => run.changed = true,
            Err(e) => {
                let keys: Vec<&str> = plan.update.keys().map(String::as_str).collect();
                run.errors
                    .push(os(format!("{path}: setting {}", keys.join(", ")), e));
                // Report what is in force, not what was refused.
                run.usage.extend(in_force(quotas, svc, &observed));
                return run;
            }
        }
    }
    run.reset = reset_candidates;
    run.usage.extend(plan.usage);
    run
}

/// Updates `inUse` of the spec's network keys in `status.quotaUsage` from a fresh read, after
/// the pass created or removed Neutron objects. Best effort: if the read fails, the usage read
/// earlier in the pass stays and the next pass corrects it.
pub(crate) async fn refresh_network_usage(
    env: &Env<'_>,
    quotas: &Quotas,
    project_id: &str,
    status: &mut OpenstackProjectStatus,
) {
    let keys: Vec<(QuotaService, &str)> = quotas
        .openstack_keys()
        .into_iter()
        .filter(|(svc, _, _)| *svc == QuotaService::Network)
        .map(|(svc, key, _)| (svc, key))
        .collect();
    if keys.is_empty() {
        return;
    }
    let observed = match env.cloud.network.get_network_quota(project_id).await {
        Ok(q) => q,
        Err(e) => {
            tracing::warn!(error = %e, "could not refresh the network quota usage");
            return;
        }
    };
    for (svc, key) in keys {
        let k = format!("{}.{}", svc.as_str(), spec_key(svc, key));
        if let (Some(u), Some(c)) = (status.quota_usage.get_mut(&k), observed.get(key)) {
            u.in_use = c.in_use;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use api::project::{ComputeQuotas, NetworkQuotas};
    use openstack::model::QuotaValue;

    fn qs(entries: &[(&str, i64, i64)]) -> QuotaSet {
        entries
            .iter()
            .map(|(k, l, u)| {
                (
                    k.to_string(),
                    QuotaValue {
                        limit: *l,
                        in_use: *u,
                    },
                )
            })
            .collect()
    }

    #[test]
    fn only_differing_spec_keys_are_sent() {
        let q = Quotas {
            compute: Some(ComputeQuotas {
                cores: Some(40),
                ram_mb: Some(1024),
                ..Default::default()
            }),
            ..Default::default()
        };
        let observed = qs(&[("cores", 40, 3), ("ram", 512, 256), ("instances", 10, 1)]);
        let plan = plan_service(&q, QuotaService::Compute, &observed);
        assert_eq!(plan.update, [("ram".to_string(), 1024)].into());
        assert_eq!(
            plan.usage["compute.ramMB"],
            QuotaUsage {
                limit: 1024,
                in_use: 256
            }
        );
        assert_eq!(
            plan.usage["compute.cores"],
            QuotaUsage {
                limit: 40,
                in_use: 3
            }
        );
        assert!(!plan.usage.contains_key("compute.instances"));
    }

    #[test]
    fn in_sync_plans_no_write() {
        let q = Quotas {
            network: Some(NetworkQuotas {
                floating_ips: Some(-1),
                ..Default::default()
            }),
            ..Default::default()
        };
        let plan = plan_service(&q, QuotaService::Network, &qs(&[("floatingip", -1, 2)]));
        assert!(plan.update.is_empty());
        assert_eq!(plan.usage["network.floatingIps"].in_use, 2);
        assert_eq!(services(&q), vec![QuotaService::Network]);
        // Another service's plan ignores these keys.
        assert!(
            plan_service(&q, QuotaService::Compute, &QuotaSet::new())
                .usage
                .is_empty()
        );
    }

    #[test]
    fn removed_keys_we_set_go_back_to_the_default() {
        let q = Quotas {
            compute: Some(ComputeQuotas {
                cores: Some(40),
                ..Default::default()
            }),
            ..Default::default()
        };
        let recorded = vec![
            "compute.cores".to_string(),
            "compute.ram".to_string(),
            "network.router".to_string(),
        ];
        assert_eq!(
            removed_keys(&q, QuotaService::Compute, &recorded),
            vec!["ram"]
        );
        assert_eq!(
            removed_keys(&q, QuotaService::Network, &recorded),
            vec!["router"]
        );
        assert!(removed_keys(&q, QuotaService::Storage, &recorded).is_empty());
        // Network has no spec key but a recorded one: it is visited to reset it.
        assert_eq!(
            services_to_visit(&q, &recorded),
            vec![QuotaService::Compute, QuotaService::Network]
        );
        let observed = qs(&[("cores", 40, 0), ("ram", 12345, 0), ("instances", 17, 0)]);
        let defaults: QuotaUpdate = [
            ("cores".to_string(), 20),
            ("ram".to_string(), 51200),
            ("instances".to_string(), 10),
        ]
        .into();
        let mut plan = plan_service(&q, QuotaService::Compute, &observed);
        plan_resets(&mut plan, &["ram".to_string()], &observed, &defaults);
        // Only the removed key: `instances` was never ours and keeps 17.
        assert_eq!(plan.update, [("ram".to_string(), 51200)].into());
        // Already at the default: nothing to write.
        let at_default = qs(&[("cores", 40, 0), ("ram", 51200, 0)]);
        let mut plan = plan_service(&q, QuotaService::Compute, &at_default);
        plan_resets(&mut plan, &["ram".to_string()], &at_default, &defaults);
        assert!(plan.update.is_empty());
    }

    #[test]
    fn every_spec_key_has_a_camel_case_name() {
        for (svc, key) in [
            (QuotaService::Compute, "server_group_members"),
            (QuotaService::Storage, "backup_gigabytes"),
            (QuotaService::Network, "security_group_rule"),
        ] {
            assert!(!spec_key(svc, key).contains('_'));
        }
        assert_eq!(spec_key(QuotaService::Storage, "volumes"), "volumes");
    }
}
