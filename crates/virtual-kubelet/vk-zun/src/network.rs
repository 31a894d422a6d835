//! The pod's Neutron network, as a pure function: the
//! [`NETWORK_ANNOTATION`] (a Neutron network ID or name), else the
//! [`PROJECT_NETWORK_ANNOTATION`] naming a network of an `OpenstackProject`
//! of the resource operator (resolved through its status to the Neutron
//! ID), else the node's `--network`.
//!
//! A malformed annotation can never work: the pod fails (`ProviderFailed`).
//! A project that is missing, lacks the network or has not created it yet
//! is what the kubelet does with a missing ConfigMap: the container waits
//! (`CreateContainerConfigError`, the annotation named) and the create is
//! retried every pass, because objects applied together arrive in any order
//! and a project takes a while to reconcile; the pod starts once the
//! network exists.

use api::OpenstackProject;
use k8s_openapi::api::core::v1::Pod;

use crate::translate::TranslateError;

/// Pod annotation naming the Neutron network (id or name) of the pod.
pub const NETWORK_ANNOTATION: &str = "virtual-kubelet.sunet.se/network";
/// Pod annotation naming a network of an `OpenstackProject` in the pod's
/// namespace: `<OpenstackProject name>/<network name>`.
pub const PROJECT_NETWORK_ANNOTATION: &str = "virtual-kubelet.sunet.se/project-network";

/// A network of an `OpenstackProject`, named by the pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProjectNetwork {
    /// The `OpenstackProject`'s `metadata.name` (in the pod's namespace).
    pub project: String,
    /// The entry of its `spec.networks[].name`.
    pub network: String,
}

/// Where the pod's network comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Choice {
    /// A Neutron network ID or name, from the pod or the node's flag.
    Neutron(String),
    /// A network of an `OpenstackProject`, to resolve.
    Project(ProjectNetwork),
    /// Neither: Zun picks (its default network).
    Default,
}

fn field(annotation: &str) -> String {
    format!("metadata.annotations[{annotation}]")
}

fn refused(annotation: &str, why: impl Into<String>) -> TranslateError {
    TranslateError::Unsupported {
        field: field(annotation),
        why: why.into(),
    }
}

/// What the pod's annotations (and the node's default) ask for; refuses
/// both annotations at once and a project network not of the form
/// `<project>/<network>`.
pub fn choice(pod: &Pod, default: Option<&str>) -> Result<Choice, TranslateError> {
    let ann = pod.metadata.annotations.as_ref();
    let get = |k: &str| ann.and_then(|a| a.get(k)).map(|v| v.trim().to_string());
    match (get(NETWORK_ANNOTATION), get(PROJECT_NETWORK_ANNOTATION)) {
        (Some(_), Some(_)) => Err(refused(
            PROJECT_NETWORK_ANNOTATION,
            format!("the pod also sets {NETWORK_ANNOTATION}: name the network one way only"),
        )),
        (Some(n), None) if n.is_empty() => Err(refused(
            NETWORK_ANNOTATION,
            "empty: give a Neutron network ID or name",
        )),
        (Some(n), None) => Ok(Choice::Neutron(n)),
        (None, Some(v)) => parse_project_network(&v).map(Choice::Project),
        (None, None) => Ok(default
            .filter(|d| !d.is_empty())
            .map_or(Choice::Default, |d| Choice::Neutron(d.to_string()))),
    }
}

/// `<project>/<network>`, both non-empty.
pub fn parse_project_network(v: &str) -> Result<ProjectNetwork, TranslateError> {
    match v.split_once('/') {
        Some((p, n)) if !p.is_empty() && !n.is_empty() && !n.contains('/') => Ok(ProjectNetwork {
            project: p.to_string(),
            network: n.to_string(),
        }),
        _ => Err(refused(
            PROJECT_NETWORK_ANNOTATION,
            format!(
                "{v:?} is not <OpenstackProject name>/<network name> (an OpenstackProject in the pod's namespace and one of its spec.networks)"
            ),
        )),
    }
}

/// The Neutron network ID of `r`, given the `OpenstackProject` found in the
/// pod's namespace `ns` (`None`: not found). Anything missing is a
/// [`TranslateError::MissingReference`] naming the annotation.
pub fn resolve(
    r: &ProjectNetwork,
    ns: &str,
    project: Option<&OpenstackProject>,
) -> Result<String, TranslateError> {
    let at = field(PROJECT_NETWORK_ANNOTATION);
    let missing = |why: String| TranslateError::MissingReference(format!("{at}: {why}"));
    let Some(p) = project else {
        return Err(missing(format!(
            "OpenstackProject {:?} not found in namespace {ns:?}",
            r.project
        )));
    };
    if p.metadata.deletion_timestamp.is_some() {
        return Err(missing(format!(
            "OpenstackProject {:?} is being deleted",
            r.project
        )));
    }
    let in_spec: Vec<&str> = p
        .spec
        .networks
        .iter()
        .flatten()
        .map(|n| n.name.as_str())
        .collect();
    if !in_spec.contains(&r.network.as_str()) {
        return Err(missing(format!(
            "OpenstackProject {:?} has no network {:?} in spec.networks (it has: {})",
            r.project,
            r.network,
            if in_spec.is_empty() {
                "none".to_string()
            } else {
                in_spec.join(", ")
            }
        )));
    }
    let created = p
        .status
        .as_ref()
        .and_then(|s| s.networks.iter().find(|n| n.name == r.network))
        .and_then(|n| n.network_id.clone())
        .filter(|id| !id.is_empty());
    created.ok_or_else(|| {
        let phase = p
            .status
            .as_ref()
            .and_then(|s| s.phase.as_ref())
            .map_or_else(|| "none yet".to_string(), |ph| format!("{ph:?}"));
        missing(format!(
            "network {:?} of OpenstackProject {:?} is not created yet (status.networks has no networkId; project phase {phase})",
            r.network, r.project
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(annotations: serde_json::Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "team-a", "annotations": annotations},
            "spec": {"containers": []}
        }))
        .unwrap()
    }

    fn project(status: serde_json::Value) -> OpenstackProject {
        serde_json::from_value(json!({
            "apiVersion": "sunet.se/v1alpha1", "kind": "OpenstackProject",
            "metadata": {"name": "tenant", "namespace": "team-a"},
            "spec": {"name": "tenant", "domain": "default",
                     "networks": [{"name": "pods", "cidr": "10.9.0.0/24"}, {"name": "db", "cidr": "10.9.1.0/24"}]},
            "status": status
        }))
        .unwrap()
    }

    fn pn() -> ProjectNetwork {
        ProjectNetwork {
            project: "tenant".into(),
            network: "pods".into(),
        }
    }

    fn missing(r: Result<String, TranslateError>) -> String {
        match r {
            Err(TranslateError::MissingReference(m)) => m,
            other => panic!("expected a missing reference, got {other:?}"),
        }
    }

    #[test]
    fn choice_follows_annotations_then_flag() {
        assert_eq!(
            choice(&pod(json!({NETWORK_ANNOTATION: "net-1"})), Some("flag")).unwrap(),
            Choice::Neutron("net-1".into())
        );
        assert_eq!(
            choice(
                &pod(json!({PROJECT_NETWORK_ANNOTATION: "tenant/pods"})),
                Some("flag")
            )
            .unwrap(),
            Choice::Project(pn())
        );
        assert_eq!(
            choice(&pod(json!({})), Some("flag")).unwrap(),
            Choice::Neutron("flag".into())
        );
        assert_eq!(choice(&pod(json!({})), None).unwrap(), Choice::Default);
    }

    #[test]
    fn malformed_or_double_annotations_are_refused_naming_them() {
        for bad in ["tenant", "/pods", "tenant/", "a/b/c", ""] {
            let e = choice(&pod(json!({PROJECT_NETWORK_ANNOTATION: bad})), None).unwrap_err();
            match e {
                TranslateError::Unsupported { field, .. } => assert_eq!(
                    field,
                    format!("metadata.annotations[{PROJECT_NETWORK_ANNOTATION}]"),
                    "{bad:?}"
                ),
                other => panic!("{bad:?}: {other:?}"),
            }
        }
        let both = choice(
            &pod(json!({NETWORK_ANNOTATION: "n", PROJECT_NETWORK_ANNOTATION: "tenant/pods"})),
            None,
        )
        .unwrap_err();
        assert!(both.to_string().contains(NETWORK_ANNOTATION), "{both}");
        let empty = choice(&pod(json!({NETWORK_ANNOTATION: " "})), None).unwrap_err();
        assert!(matches!(empty, TranslateError::Unsupported { .. }));
    }

    #[test]
    fn resolves_the_created_network_id() {
        let p = project(json!({"phase": "Ready", "networks": [
            {"name": "db", "networkId": "id-db"}, {"name": "pods", "networkId": "id-pods"}]}));
        assert_eq!(resolve(&pn(), "team-a", Some(&p)).unwrap(), "id-pods");
    }

    #[test]
    fn missing_project_network_or_id_waits_naming_the_annotation() {
        let m = missing(resolve(&pn(), "team-a", None));
        assert!(m.starts_with(&format!(
            "metadata.annotations[{PROJECT_NETWORK_ANNOTATION}]: "
        )));
        assert!(
            m.contains("OpenstackProject \"tenant\" not found in namespace \"team-a\""),
            "{m}"
        );

        let other = ProjectNetwork {
            project: "tenant".into(),
            network: "web".into(),
        };
        let m = missing(resolve(&other, "team-a", Some(&project(json!({})))));
        assert!(
            m.contains("has no network \"web\"") && m.contains("pods, db"),
            "{m}"
        );

        let m = missing(resolve(
            &pn(),
            "team-a",
            Some(&project(
                json!({"phase": "Provisioning", "networks": [{"name": "pods"}]}),
            )),
        ));
        assert!(
            m.contains("not created yet") && m.contains("Provisioning"),
            "{m}"
        );

        let mut deleting = project(json!({"networks": [{"name": "pods", "networkId": "x"}]}));
        deleting.metadata.deletion_timestamp = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::UNIX_EPOCH),
        );
        let m = missing(resolve(&pn(), "team-a", Some(&deleting)));
        assert!(m.contains("being deleted"), "{m}");
    }
}
