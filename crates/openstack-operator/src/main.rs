//! `openstack-operator`: Kubernetes-native OpenStack.

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
