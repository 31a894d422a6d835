//! `fault-proxy`: the fault-injecting proxy as a process, with an admin HTTP API.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context as _;
use clap::Parser;
use fault_proxy::{FaultProxy, ProxyConfig};

/// A fault-injecting reverse proxy in front of an OpenStack cloud (a test tool).
///
/// Upstreams come from the Keystone catalog of `--cloud` in `--clouds-yaml` (authenticating
/// with its credentials), or from `--upstream service=url` (repeatable). With `--write-clouds-yaml`
/// a clouds.yaml whose `auth_url` goes through the proxy is written for the client. Rules are
/// managed through the admin API (see the crate README).
#[derive(Debug, Parser)]
#[command(name = "fault-proxy", version)]
struct Args {
    /// clouds.yaml to read the cloud from.
    #[arg(long, env = "OS_CLIENT_CONFIG_FILE")]
    clouds_yaml: Option<PathBuf>,
    /// Entry of the clouds.yaml.
    #[arg(long, env = "OS_CLOUD")]
    cloud: Option<String>,
    /// `service=url` instead of discovery (e.g. `identity=http://127.0.0.1:5000`).
    #[arg(long = "upstream", value_name = "SERVICE=URL")]
    upstreams: Vec<String>,
    /// Write a clouds.yaml pointing at the proxy here (needs --clouds-yaml and --cloud).
    #[arg(long)]
    write_clouds_yaml: Option<PathBuf>,
    /// Address of the admin API.
    #[arg(long, default_value = "127.0.0.1:9899")]
    admin_addr: SocketAddr,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let args = Args::parse();
    let config = if args.upstreams.is_empty() {
        let (Some(file), Some(cloud)) = (&args.clouds_yaml, &args.cloud) else {
            anyhow::bail!("give --upstream service=url, or --clouds-yaml and --cloud to discover");
        };
        ProxyConfig::discover(file, cloud).await.with_context(|| {
            format!("discovering the upstreams of {cloud} in {}", file.display())
        })?
    } else {
        let mut c = ProxyConfig::default();
        for u in &args.upstreams {
            let (service, url) = u
                .split_once('=')
                .with_context(|| format!("--upstream {u:?} is not service=url"))?;
            c = c.upstream(service, url)?;
        }
        c
    };
    let proxy = FaultProxy::start(config)
        .await
        .context("starting the proxy")?;
    for r in proxy.routes() {
        println!("{:<14} {} -> {}", r.service, r.proxy, r.upstream);
    }
    if let Some(dest) = &args.write_clouds_yaml {
        let (Some(file), Some(cloud)) = (&args.clouds_yaml, &args.cloud) else {
            anyhow::bail!("--write-clouds-yaml needs --clouds-yaml and --cloud");
        };
        proxy.write_clouds_yaml(file, cloud, dest)?;
        println!(
            "wrote {} (export OS_CLIENT_CONFIG_FILE={} OS_CLOUD={cloud})",
            dest.display(),
            dest.display()
        );
    }
    let listener = tokio::net::TcpListener::bind(args.admin_addr)
        .await
        .with_context(|| format!("binding the admin API on {}", args.admin_addr))?;
    println!("admin API on http://{}", args.admin_addr);
    axum::serve(listener, fault_proxy::admin::router(proxy.clone()))
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await
        .context("serving the admin API")?;
    proxy.shutdown();
    Ok(())
}
