//! Log setup shared by the subcommands: the filter (our crates at the chosen level,
//! dependencies at `warn`) and colour only where a person reads it.

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::io::IsTerminal as _;
use std::str::FromStr as _;

use anyhow::Context as _;

use crate::run::LogFormat;

/// Whether log lines carry ANSI colour codes: only when they go to a terminal, and never
/// when `NO_COLOR` is set to a non-empty value (<https://no-color.org>). A log file or a
/// container runtime's log collector gets plain text.
pub(crate) fn use_ansi(is_terminal: bool, no_color: Option<&OsStr>) -> bool {
    is_terminal && no_color.is_none_or(OsStr::is_empty)
}

/// The operator's own crates: a bare level in the log filter applies to these.
const OWN_TARGETS: [&str; 11] = [
    "openstack_operator",
    "vk_runtime",
    "vk_zun",
    "vk_kubelet_api",
    "controllers",
    "openstack",
    "api",
    "controlplane_api",
    "controlplane_controllers",
    "controlplane_render",
    "external_checks",
];
/// Dependencies whose target starts with one of ours (tracing matches targets by prefix), so
/// they need their own `warn` to stay out of `openstack=...`.
const SHADOWED_DEPENDENCIES: [&str; 2] = ["openstack_sdk", "openstack_types"];

/// Turns the user's filter into the one installed: bare levels (`info`) set the level of our
/// own crates, everything else stays at `warn` (openstack_sdk logs two INFO lines per HTTP
/// request, kube-runtime its watch restarts), and directives naming a target are kept as
/// given and win over these defaults.
fn log_filter(spec: &str) -> String {
    let mut level = "info".to_string();
    let mut named: Vec<&str> = Vec::new();
    for d in spec.split(',').map(str::trim).filter(|d| !d.is_empty()) {
        if d.contains('=') || d.contains('[') {
            named.push(d);
        } else if tracing_subscriber::filter::LevelFilter::from_str(d).is_ok() {
            level = d.to_string();
        } else {
            // A bare target (`controllers`) means that target at every level, as in tracing.
            named.push(d);
        }
    }
    let target_of = |d: &str| {
        d.split(['=', '['])
            .next()
            .unwrap_or_default()
            .trim()
            .to_string()
    };
    let user_targets: BTreeSet<String> = named.iter().map(|d| target_of(d)).collect();
    let mut out = vec!["warn".to_string()];
    for t in OWN_TARGETS {
        if !user_targets.contains(t) {
            out.push(format!("{t}={level}"));
        }
    }
    for t in SHADOWED_DEPENDENCIES {
        if !user_targets.contains(t) {
            out.push(format!("{t}=warn"));
        }
    }
    out.extend(named.iter().map(|d| d.to_string()));
    out.join(",")
}

/// Sets up logging in the given format and filter (`RUST_LOG` wins over `level`; either goes
/// through [`log_filter`]).
pub(crate) fn init_logging_with(format: LogFormat, level: &str) -> anyhow::Result<()> {
    let (source, spec) = match std::env::var("RUST_LOG") {
        Ok(v) if !v.trim().is_empty() => ("RUST_LOG", v),
        _ => ("--log-level", level.to_string()),
    };
    let filter = tracing_subscriber::EnvFilter::try_new(log_filter(&spec))
        .with_context(|| format!("parsing {source} {spec:?}"))?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(use_ansi(
            std::io::stderr().is_terminal(),
            std::env::var_os("NO_COLOR").as_deref(),
        ));
    match format {
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .init(),
        LogFormat::Text => builder.init(),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn colour_only_on_a_terminal_without_no_color() {
        assert!(use_ansi(true, None));
        assert!(!use_ansi(false, None), "a file or a pipe gets no colour");
        assert!(!use_ansi(true, Some(OsStr::new("1"))), "NO_COLOR=1");
        assert!(!use_ansi(false, Some(OsStr::new("1"))));
        // no-color.org: "when present and not an empty string".
        assert!(use_ansi(true, Some(OsStr::new(""))));
    }

    #[test]
    fn a_bare_level_is_ours_and_dependencies_stay_at_warn() {
        let f = log_filter("info");
        assert!(f.starts_with("warn,"), "{f}");
        for t in OWN_TARGETS {
            assert!(f.contains(&format!("{t}=info")), "{f}");
        }
        assert!(f.contains("openstack_sdk=warn"), "{f}");
        assert!(tracing_subscriber::EnvFilter::try_new(&f).is_ok());
        // The level of our crates follows the bare level.
        assert!(log_filter("debug").contains("controllers=debug"));
    }

    #[test]
    fn named_targets_win_over_the_defaults() {
        let f = log_filter("info,openstack_sdk=info,openstack::adapter::core=debug");
        assert!(!f.contains("openstack_sdk=warn"), "{f}");
        assert!(f.contains("openstack_sdk=info"), "{f}");
        assert!(f.contains("openstack::adapter::core=debug"), "{f}");
        assert!(f.contains("controllers=info"), "{f}");
        let f = log_filter("controllers=debug");
        // Compare whole directives: `controlplane_controllers=info` must stay.
        assert!(!f.split(',').any(|d| d == "controllers=info"), "{f}");
        assert!(f.split(',').any(|d| d == "controllers=debug"), "{f}");
        assert!(tracing_subscriber::EnvFilter::try_new(&f).is_ok());
    }
}
