//! The command line: its definition ([`command`], reachable from tests), `crds`, and the
//! dispatch to the other subcommands.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use clap::{CommandFactory as _, FromArgMatches as _, Parser, Subcommand, ValueEnum as _};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

use crate::{control_plane, plan, run, vk};

/// Command line of the operator binary.
#[derive(Parser, Debug)]
#[command(
    name = "openstack-operator",
    version,
    about = "Manage OpenStack resources declaratively from Kubernetes custom resources"
)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the controllers against the cluster in KUBECONFIG (or in-cluster) and the cloud
    /// named by OS_CLOUD in OS_CLIENT_CONFIG_FILE.
    Run(Box<run::RunArgs>),
    /// Run the control-plane operator (its kinds are listed by `command()`, from the
    /// `--controllers` values).
    ControlPlane(Box<control_plane::ControlPlaneArgs>),
    /// Show what applying the manifests would create, change and delete in OpenStack, without
    /// writing anything (exit code 0: nothing would change, 2: something would, 1: error).
    /// Reads the cloud named by OS_CLOUD and, when KUBECONFIG reaches one, the cluster.
    /// Also runs as the kubectl plugins `kubectl-openstack_plan` / `kubectl-openstack-plan`.
    Plan(Box<plan::PlanArgs>),
    /// Register a Node and run the pods bound to it as OpenStack Zun containers.
    VirtualKubelet(Box<vk::VkArgs>),
    /// Print every CRD the binary serves as YAML: the resource operator's, the control
    /// plane's and the virtual kubelet's (or write one file per CRD with --out-dir /
    /// --control-plane-out-dir / --virtual-kubelet-out-dir).
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

/// The kinds the control-plane operator reconciles, from the values of its `--controllers`
/// flag (one controller per kind), so its help cannot name fewer than it runs.
pub fn control_plane_kinds() -> Vec<String> {
    control_plane::CpKind::value_variants()
        .iter()
        .filter_map(|k| k.to_possible_value())
        .filter_map(|v| v.get_help().map(|h| h.to_string()))
        .map(|h| h.trim_end_matches('.').to_string())
        .collect()
}

/// The whole command line, as `openstack-operator --help` shows it.
pub fn command() -> clap::Command {
    let about = format!(
        "Run the control-plane operator ({}) against the cluster in KUBECONFIG (or in-cluster). \
         Needs no OpenStack credentials.",
        control_plane_kinds().join(", ")
    );
    Cli::command().mut_subcommand("control-plane", |c| c.about(about).long_about(None))
}

/// Parses the process's arguments and runs the subcommand they name.
pub fn main() -> anyhow::Result<()> {
    let cli = Cli::from_arg_matches(&command().get_matches_from(plugin_args(std::env::args_os())))
        .unwrap_or_else(|e| e.exit());
    match cli.command {
        Command::Crds {
            out_dir,
            control_plane_out_dir,
            virtual_kubelet_out_dir,
        } => print_crds(out_dir, control_plane_out_dir, virtual_kubelet_out_dir),
        Command::Run(args) => runtime()?.block_on(run::run(*args)),
        Command::Plan(args) => {
            let code = runtime()?.block_on(plan::run(*args))?;
            std::process::exit(code)
        }
        Command::ControlPlane(args) => runtime()?.block_on(control_plane::run(*args)),
        Command::VirtualKubelet(args) => runtime()?.block_on(vk::run(*args)),
    }
}

/// Names under which the binary is the `plan` subcommand: kubectl runs a plugin found on PATH as
/// `kubectl-<words joined by ->`, and `_` in its name stands for a `-` in the command
/// (`kubectl-openstack_plan` is `kubectl openstack-plan`, `kubectl-openstack-plan` is
/// `kubectl openstack plan`). A symlink with either name to the binary is the plugin.
pub const PLUGIN_NAMES: [&str; 2] = ["kubectl-openstack_plan", "kubectl-openstack-plan"];

/// The arguments with `plan` inserted when the binary runs under a plugin name.
pub fn plugin_args(args: impl IntoIterator<Item = std::ffi::OsString>) -> Vec<std::ffi::OsString> {
    let mut args: Vec<std::ffi::OsString> = args.into_iter().collect();
    let as_plugin = args
        .first()
        .and_then(|a| Path::new(a).file_name())
        .and_then(|n| n.to_str())
        .is_some_and(|n| PLUGIN_NAMES.contains(&n));
    if as_plugin {
        args.insert(1, "plan".into());
    }
    args
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")
}

/// Every CRD the binary serves, in the order `crds` prints them: the resource operator's,
/// the control plane's, the virtual kubelet's.
pub fn served_crds() -> Vec<CustomResourceDefinition> {
    let mut all = api::all_crds();
    all.extend(controlplane_api::all_crds());
    all.extend(api::vk_crds());
    all
}

fn print_crds(
    out_dir: Option<PathBuf>,
    control_plane_out_dir: Option<PathBuf>,
    virtual_kubelet_out_dir: Option<PathBuf>,
) -> anyhow::Result<()> {
    if out_dir.is_none() && control_plane_out_dir.is_none() && virtual_kubelet_out_dir.is_none() {
        let mut out = String::new();
        for crd in served_crds() {
            out.push_str("---\n");
            out.push_str(&api::crd_yaml(&crd).with_context(|| {
                format!(
                    "rendering the CRD {}",
                    crd.metadata.name.as_deref().unwrap_or_default()
                )
            })?);
        }
        print!("{out}");
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

fn write_crds(dir: &Path, crds: Vec<CustomResourceDefinition>) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    for crd in crds {
        let name = crd.metadata.name.clone().unwrap_or_default();
        let path = dir.join(format!("{name}.yaml"));
        let yaml = api::crd_yaml(&crd).context("rendering a CRD")?;
        std::fs::write(&path, yaml).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The repository's root (this crate is `crates/openstack-operator`).
    fn root() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
    }

    #[test]
    fn a_plugin_name_runs_plan() {
        let args = |v: &[&str]| v.iter().map(std::ffi::OsString::from).collect::<Vec<_>>();
        assert_eq!(
            plugin_args(args(&[
                "/usr/local/bin/kubectl-openstack_plan",
                "-f",
                "x.yaml"
            ])),
            args(&[
                "/usr/local/bin/kubectl-openstack_plan",
                "plan",
                "-f",
                "x.yaml"
            ])
        );
        assert_eq!(
            plugin_args(args(&["kubectl-openstack-plan", "-f", "d"])),
            args(&["kubectl-openstack-plan", "plan", "-f", "d"])
        );
        assert_eq!(
            plugin_args(args(&["openstack-operator", "run"])),
            args(&["openstack-operator", "run"])
        );
        let m = command()
            .try_get_matches_from(plugin_args(args(&["kubectl-openstack_plan", "-f", "x"])))
            .unwrap();
        assert_eq!(m.subcommand_name(), Some("plan"));
    }

    #[test]
    fn the_command_line_is_consistent() {
        command().debug_assert();
    }

    #[test]
    fn crds_prints_one_crd_for_every_committed_crd_file() {
        let mut committed: Vec<String> = Vec::new();
        for dir in [
            "deploy/crds",
            "deploy/crds-controlplane",
            "deploy/crds-virtual-kubelet",
        ] {
            for entry in std::fs::read_dir(root().join(dir)).unwrap() {
                let name = entry.unwrap().file_name().to_string_lossy().to_string();
                committed.push(name.trim_end_matches(".yaml").to_string());
            }
        }
        committed.sort();
        let mut served: Vec<String> = served_crds()
            .into_iter()
            .map(|c| c.metadata.name.unwrap_or_default())
            .collect();
        served.sort();
        assert_eq!(served, committed);
        assert!(served.contains(&"zuntenants.virtual-kubelet.sunet.se".to_string()));
    }

    #[test]
    fn control_plane_help_names_every_kind_it_runs() {
        let kinds = control_plane_kinds();
        assert_eq!(kinds.len(), control_plane::CpKind::value_variants().len());
        let mut cmd = command();
        let help = cmd
            .find_subcommand_mut("control-plane")
            .unwrap()
            .render_help()
            .to_string();
        for kind in &kinds {
            assert!(help.contains(kind.as_str()), "{kind} missing from:\n{help}");
        }
        for kind in [
            "OpenStackExternalService",
            "Keystone",
            "Horizon",
            "OpenStackCluster",
        ] {
            assert!(kinds.iter().any(|k| k == kind), "{kinds:?}");
        }
    }

    #[test]
    fn control_plane_runs_every_controller_by_default() {
        let cmd = command();
        let cp = cmd.find_subcommand("control-plane").unwrap();
        let arg = cp
            .get_arguments()
            .find(|a| a.get_id() == "controllers")
            .unwrap();
        let defaults: Vec<String> = arg
            .get_default_values()
            .iter()
            .flat_map(|v| {
                v.to_string_lossy()
                    .split(',')
                    .map(str::to_string)
                    .collect::<Vec<_>>()
            })
            .collect();
        for kind in control_plane::CpKind::value_variants() {
            let name = kind.to_possible_value().unwrap().get_name().to_string();
            assert!(defaults.contains(&name), "{name} not in {defaults:?}");
        }
    }
}
