//! `kube-emulator` binary: a TEST TOOL that serves an emulated Kubernetes API
//! on 127.0.0.1 and writes a kubeconfig for it. Not part of the product.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use kube_emulator::{Emulator, EmulatorOptions};

/// Emulated Kubernetes API server for end-to-end tests (test tool, not part of the product).
#[derive(Debug, Parser)]
#[command(name = "kube-emulator", version)]
struct Cli {
    /// Address to listen on (port 0 picks a free port).
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// Write a kubeconfig pointing at the emulator to this path.
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// Persist state into this directory and restore it from there at start.
    #[arg(long)]
    state_dir: Option<PathBuf>,
    /// Watch events kept per resource for resuming watches (older ones get 410 Gone).
    #[arg(long, default_value_t = 1000)]
    history_limit: usize,
    /// Interval between watch BOOKMARK events, in milliseconds.
    #[arg(long, default_value_t = 1000)]
    bookmark_interval_ms: u64,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let handle = Emulator::start(EmulatorOptions {
        listen: cli.listen,
        kubeconfig_path: cli.kubeconfig.clone(),
        state_dir: cli.state_dir.clone(),
        history_limit: cli.history_limit,
        bookmark_interval: Duration::from_millis(cli.bookmark_interval_ms),
    })
    .await?;
    // the first stdout line is the contract with scripts that start us; a
    // reader that closes the pipe afterwards must not take the server down
    let mut out = std::io::stdout().lock();
    let mut announce = writeln!(out, "listening on {}", handle.url());
    if let Some(p) = &cli.kubeconfig {
        announce = announce.and_then(|()| writeln!(out, "kubeconfig written to {}", p.display()));
    }
    if let Err(e) = announce.and_then(|()| out.flush()) {
        tracing::warn!(error = %e, "could not write the address to stdout");
    }
    drop(out);
    wait_for_signal().await?;
    handle.shutdown().await;
    Ok(())
}

async fn wait_for_signal() -> anyhow::Result<()> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("installing SIGTERM handler")?;
    tokio::select! {
        r = tokio::signal::ctrl_c() => r.context("waiting for Ctrl-C")?,
        _ = term.recv() => {}
    }
    Ok(())
}
