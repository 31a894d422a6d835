//! End to end: the operator process itself. Started before the CRDs exist it is alive but
//! not ready; it becomes ready once they are installed; SIGTERM stops it cleanly.

use std::time::Duration;

use e2e::wait::{Check, wait_for};
use e2e::{Operator, OperatorOptions, Target};
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;

const BIN: &str = env!("CARGO_BIN_EXE_openstack-operator");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn starts_unready_without_crds_becomes_ready_and_stops_on_sigterm() -> anyhow::Result<()> {
    let target = Target::from_env().await?;
    // On a shared real cluster the CRDs are usually installed already, and removing them would
    // delete every object of other users; the "before the CRDs" half needs a fresh cluster.
    let fresh = !target.crds_installed().await?;
    if !fresh {
        eprintln!(
            "NOTE: the CRDs exist already in this cluster; skipping the 'not ready before the CRDs' checks"
        );
    }
    let operator = Operator::start(
        &target,
        OperatorOptions::new(BIN, "lifecycle-starts_unready"),
    )?;
    let result = async {
        operator.wait_healthy(Duration::from_secs(60)).await?;
        if fresh {
            // The operator says in its log when it waits for a CRD: by then it has connected
            // to OpenStack, and only the CRDs keep it from being ready.
            wait_for(
                Duration::from_secs(90),
                Duration::from_millis(200),
                "the operator to log that it waits for the CRDs",
                async || {
                    let log = operator.log_text()?;
                    Ok(if log.contains("waiting for the CRD") {
                        Check::Done(())
                    } else {
                        Check::Pending(format!("log tail:\n{}", operator.log_tail(5)))
                    })
                },
            )
            .await?;
            assert_eq!(
                operator.healthz().await?,
                200,
                "/healthz while the CRDs are missing"
            );
            assert_eq!(
                operator.readyz().await?,
                503,
                "/readyz while the CRDs are missing"
            );
            target.install_crds(Duration::from_secs(60)).await?;
        }
        operator.wait_ready(Duration::from_secs(90)).await?;
        assert_eq!(operator.healthz().await?, 200, "/healthz when ready");
        let metrics = operator.metrics_text().await?;
        assert!(
            metrics.contains("openstack_operator_"),
            "/metrics exposes the operator's metrics:\n{}",
            metrics.lines().take(20).collect::<Vec<_>>().join("\n")
        );

        // Leader election is off by default: no Lease is taken.
        if target.is_emulated() {
            let leases: Api<Lease> = Api::all(target.client().await?);
            let names: Vec<String> = leases
                .list(&Default::default())
                .await?
                .items
                .into_iter()
                .filter_map(|l| l.metadata.name)
                .collect();
            assert!(
                names.is_empty(),
                "no Lease without --leader-election, found {names:?}"
            );
        }

        let status = operator.stop(Duration::from_secs(20)).await?;
        assert!(status.success(), "exit status after SIGTERM: {status}");
        let log = operator.log_text()?;
        assert!(
            !log.contains("panicked"),
            "the log shows a panic:\n{}",
            operator.log_tail(50)
        );
        let json_lines = log
            .lines()
            .filter(|l| !l.starts_with("=== e2e:") && !l.trim().is_empty());
        for line in json_lines {
            assert!(
                serde_json::from_str::<serde_json::Value>(line).is_ok(),
                "--log-format json, yet a line is not JSON: {line}"
            );
        }
        assert!(
            log.contains("SIGTERM received"),
            "the log records the SIGTERM:\n{}",
            operator.log_tail(20)
        );
        anyhow::Ok(())
    }
    .await;
    if result.is_err() {
        operator.print_log_tail();
    }
    result
}
