//! `openstack-operator`: Kubernetes-native OpenStack. `run` starts the controllers; `crds`
//! prints the CustomResourceDefinitions.

mod run;
mod vk;

use std::path::PathBuf;

use anyhow::Context;
use clap::{Parser, Subcommand};

/// Command line of the operator binary.
#[derive(Parser, Debug)]
#[command(
    name = "openstack-operator",
    version,
    about = "Manage OpenStack resources declaratively from Kubernetes custom resources"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the controllers against the cluster in KUBECONFIG (or in-cluster) and the cloud
    /// named by OS_CLOUD in OS_CLIENT_CONFIG_FILE.
    Run(Box<run::RunArgs>),
    /// Register a Node and run the pods bound to it as OpenStack Zun containers.
    VirtualKubelet(Box<vk::VkArgs>),
    /// Print every CRD as YAML (or write one file per CRD with --out-dir).
    Crds {
        /// Write `<crd name>.yaml` files into this directory instead of printing.
        #[arg(long)]
        out_dir: Option<PathBuf>,
    },
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Crds { out_dir } => print_crds(out_dir),
        Command::Run(args) => {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
                .context("starting the async runtime")?;
            rt.block_on(run::run(*args))
        }
        Command::VirtualKubelet(args) => {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
                .context("starting the async runtime")?;
            rt.block_on(vk::run(*args))
        }
    }
}

fn print_crds(out_dir: Option<PathBuf>) -> anyhow::Result<()> {
    match out_dir {
        None => {
            print!("{}", api::all_crds_yaml().context("rendering the CRDs")?);
        }
        Some(dir) => {
            std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
            for crd in api::all_crds() {
                let name = crd.metadata.name.clone().unwrap_or_default();
                let path = dir.join(format!("{name}.yaml"));
                let yaml = api::crd_yaml(&crd).context("rendering a CRD")?;
                std::fs::write(&path, yaml)
                    .with_context(|| format!("writing {}", path.display()))?;
            }
        }
    }
    Ok(())
}
