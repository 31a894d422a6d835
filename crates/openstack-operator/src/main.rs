//! `openstack-operator`: Kubernetes-native OpenStack. `run` starts the controllers; `crds`
//! prints the CustomResourceDefinitions.

mod control_plane;
mod run;
mod vk;
mod vk_tenants;
mod webhook;

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
    /// Run the control-plane operator (OpenStackCluster, Keystone, OpenStackExternalService)
    /// against the cluster in KUBECONFIG (or in-cluster). Needs no OpenStack credentials.
    ControlPlane(Box<control_plane::ControlPlaneArgs>),
    /// Register a Node and run the pods bound to it as OpenStack Zun containers.
    VirtualKubelet(Box<vk::VkArgs>),
    /// Print every CRD as YAML, the resource operator's and the control plane's (or write one
    /// file per CRD with --out-dir / --control-plane-out-dir).
    Crds {
        /// Write the resource operator's CRDs (`sunet.se`) as `<crd name>.yaml` files into this
        /// directory instead of printing.
        #[arg(long)]
        out_dir: Option<PathBuf>,
        /// Write the control-plane CRDs (`controlplane.sunet.se`) into this directory.
        #[arg(long)]
        control_plane_out_dir: Option<PathBuf>,
        /// Write the Zun virtual kubelet's CRDs (`virtual-kubelet.sunet.se`: `ZunTenant`)
        /// into this directory.
        #[arg(long)]
        virtual_kubelet_out_dir: Option<PathBuf>,
    },
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Crds {
            out_dir,
            control_plane_out_dir,
            virtual_kubelet_out_dir,
        } => print_crds(out_dir, control_plane_out_dir, virtual_kubelet_out_dir),
        Command::Run(args) => {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
                .context("starting the async runtime")?;
            rt.block_on(run::run(*args))
        }
        Command::ControlPlane(args) => {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
                .context("starting the async runtime")?;
            rt.block_on(control_plane::run(*args))
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

fn print_crds(
    out_dir: Option<PathBuf>,
    control_plane_out_dir: Option<PathBuf>,
    virtual_kubelet_out_dir: Option<PathBuf>,
) -> anyhow::Result<()> {
    if out_dir.is_none() && control_plane_out_dir.is_none() && virtual_kubelet_out_dir.is_none() {
        print!("{}", api::all_crds_yaml().context("rendering the CRDs")?);
        print!(
            "{}",
            controlplane_api::all_crds_yaml().context("rendering the control-plane CRDs")?
        );
        return Ok(());
    }
    if let Some(dir) = out_dir {
        write_crds(&dir, api::all_crds())?;
    }
    if let Some(dir) = control_plane_out_dir {
        write_crds(&dir, controlplane_api::all_crds())?;
    }
    if let Some(dir) = virtual_kubelet_out_dir {
        write_crds(&dir, api::vk_crds())?;
    }
    Ok(())
}

fn write_crds(
    dir: &std::path::Path,
    crds: Vec<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition>,
) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    for crd in crds {
        let name = crd.metadata.name.clone().unwrap_or_default();
        let path = dir.join(format!("{name}.yaml"));
        let yaml = api::crd_yaml(&crd).context("rendering a CRD")?;
        std::fs::write(&path, yaml).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}
