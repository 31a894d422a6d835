//! `openstack-operator plan`: what reconciling (or deleting) objects would do in OpenStack.
//!
//! There is no second planner: [`plan_object`] runs the kind's own reconcile pass
//! ([`Managed::apply`], or [`Managed::cleanup`] for a deletion) on a [`Context`] whose cloud is
//! the dry-run port ([`openstack::dry_run`]), which reads the real cloud and records writes
//! instead of sending them. The recorded writes, per resource, are the plan. The rendering
//! ([`render_text`], [`to_json`]) is pure.

use serde::Serialize;
use serde_json::{Value, json};

use openstack::dry_run::{FieldChange, Intent, Journal, NEW_ID_PREFIX, Op, shown_id};

use crate::context::Context;
use crate::framework::{Managed, Progress};

/// What a resource's pass would end in (besides its writes).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "state", rename_all = "camelCase")]
pub enum Outcome {
    /// The pass would finish: OpenStack would match the spec (or the deletion be done).
    Done,
    /// The pass would finish its writes and then wait (e.g. an image import).
    InProgress {
        /// Condition reason, e.g. `Importing`.
        reason: String,
        /// Detail.
        message: String,
    },
    /// The pass would stop with this error (invalid spec, policy, a dependency missing, an
    /// object owned by someone else); the writes listed are those before it.
    Fails {
        /// Condition reason, e.g. `PolicyViolation`.
        reason: String,
        /// Detail.
        message: String,
    },
}

/// The plan of one resource.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourcePlan {
    /// Kind, e.g. `OpenstackProject`.
    pub kind: String,
    /// Namespace of a namespaced kind.
    pub namespace: Option<String>,
    /// metadata.name.
    pub name: String,
    /// Whether the object exists in the cluster (its status, and so its recorded IDs, were
    /// used); `false` when planned from the manifest alone.
    pub in_cluster: bool,
    /// Whether this is the plan of deleting the object.
    pub delete: bool,
    /// The writes, in the order the pass would send them.
    pub changes: Vec<Intent>,
    /// How the pass would end.
    pub outcome: Outcome,
}

impl ResourcePlan {
    /// Number of writes of each op.
    pub fn counts(&self) -> (usize, usize, usize) {
        let n = |op| self.changes.iter().filter(|c| c.op == op).count();
        (n(Op::Create), n(Op::Update), n(Op::Delete))
    }
}

/// The plan of every resource given.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Plan {
    /// Per resource, in the order they were planned.
    pub resources: Vec<ResourcePlan>,
}

impl Plan {
    /// Total writes.
    pub fn change_count(&self) -> usize {
        self.resources.iter().map(|r| r.changes.len()).sum()
    }

    /// Resources whose pass would fail.
    pub fn failures(&self) -> Vec<&ResourcePlan> {
        self.resources
            .iter()
            .filter(|r| matches!(r.outcome, Outcome::Fails { .. }))
            .collect()
    }

    /// The process exit code: 1 when a pass would fail (the plan is incomplete), 2 when
    /// something would change, 0 when nothing would.
    pub fn exit_code(&self) -> i32 {
        if !self.failures().is_empty() {
            1
        } else if self.change_count() > 0 {
            2
        } else {
            0
        }
    }

    /// What cannot be known before applying, given these writes.
    pub fn unknowns(&self) -> Vec<String> {
        let all = || self.resources.iter().flat_map(|r| r.changes.iter());
        // A Kubernetes object is named by its namespace and name: nothing of it is unknown.
        let creates = all()
            .filter(|c| c.op == Op::Create && !is_link(c.kind) && c.service != KUBERNETES)
            .count();
        let mut out = Vec::new();
        if creates > 0 {
            out.push(format!(
                "the IDs of the {creates} object(s) to create (shown as \"(known after apply)\")"
            ));
            out.push(
                "attributes the services set by default on new objects (e.g. the egress rules \
                 Neutron adds to a new security group, the quota limits a new project starts \
                 with, a subnet's allocation pool when none is given)"
                    .to_string(),
            );
        }
        if all().any(|c| c.kind == "image import") {
            out.push("an imported image's checksum, size and final status".to_string());
        }
        let credentials = all()
            .filter(|c| c.op == Op::Create && c.kind == "application credential")
            .count();
        if credentials > 0 {
            out.push(format!(
                "the secret of the {credentials} application credential(s) to create (Keystone \
                 tells it once, when it makes one; the delivered Secret holds it) and their \
                 exact expiry (counted from the moment each is made)"
            ));
        }
        if self
            .resources
            .iter()
            .any(|r| !r.in_cluster && !r.delete && r.changes.is_empty())
        {
            out.push(
                "whether objects not yet in the cluster keep their OpenStack objects: a new \
                 resource gets a new UID and adopts nothing it did not create"
                    .to_string(),
            );
        }
        out
    }
}

/// The service of the Kubernetes writes a pass makes besides its status and Events.
const KUBERNETES: &str = "kubernetes";

/// Writes that link objects rather than create one with an ID.
fn is_link(kind: &str) -> bool {
    matches!(
        kind,
        "role assignment"
            | "group membership"
            | "router interface"
            | "flavor access"
            | "image import"
            | "federation protocol"
            | "mapping"
    )
}

/// Plans one object: its own reconcile pass (or cleanup, with `delete`) on `ctx`, whose cloud
/// must be the dry-run view whose journal is `journal`.
pub async fn plan_object<K: Managed>(
    ctx: &Context,
    journal: &Journal,
    obj: &K,
    in_cluster: bool,
    delete: bool,
) -> ResourcePlan {
    use kube::ResourceExt as _;
    journal.take();
    let mut status = obj.status().cloned().unwrap_or_default();
    let errors = obj.validate();
    let outcome = if !errors.is_empty() {
        Outcome::Fails {
            reason: "InvalidSpec".into(),
            message: api::validation::summarize(&errors),
        }
    } else if let Some(cloud) = obj.cloud_ref() {
        // Planning it against the operator's own cloud would show writes that never happen
        // there; said plainly instead.
        Outcome::Fails {
            reason: "NotPlanned".into(),
            message: format!(
                "spec.cloudRef.name names OpenstackCloud {cloud:?}: plan reads only the operator's own cloud (OS_CLOUD)"
            ),
        }
    } else if delete {
        match obj.cleanup(ctx, &mut status).await {
            Ok(()) => Outcome::Done,
            Err(e) => Outcome::Fails {
                reason: e.reason().into(),
                message: e.to_string(),
            },
        }
    } else {
        match obj.apply(ctx, &mut status).await {
            Ok(Progress::Ready { .. }) => Outcome::Done,
            Ok(Progress::InProgress {
                reason, message, ..
            }) => Outcome::InProgress { reason, message },
            Ok(Progress::Failed { reason, message }) => Outcome::Fails { reason, message },
            Err(e) => Outcome::Fails {
                reason: e.reason().into(),
                message: e.to_string(),
            },
        }
    };
    ResourcePlan {
        kind: K::kind(&()).to_string(),
        namespace: obj.namespace(),
        name: obj.name_any(),
        in_cluster,
        delete,
        changes: journal.take(),
        outcome,
    }
}

/// A value for display: placeholders become "(known after apply)", strings unquoted when
/// plain.
fn shown(v: &Value) -> String {
    match v {
        Value::String(s) if s.starts_with(NEW_ID_PREFIX) => shown_id(s),
        Value::String(s) => format!("{s:?}"),
        Value::Array(a) => format!("[{}]", a.iter().map(shown).collect::<Vec<_>>().join(", ")),
        Value::Object(_) => v.to_string(),
        other => other.to_string(),
    }
}

fn field_line(c: &FieldChange) -> String {
    match (&c.old, &c.new) {
        (None, Some(n)) => format!("{}: {}", c.field, shown(n)),
        (Some(o), Some(n)) => format!("{}: {} → {}", c.field, shown(o), shown(n)),
        (Some(o), None) => format!("{}: {} → (removed)", c.field, shown(o)),
        (None, None) => format!("{}: (removed)", c.field),
    }
}

fn symbol(op: Op) -> char {
    match op {
        Op::Create => '+',
        Op::Update => '~',
        Op::Delete => '-',
    }
}

/// The plan as text for people: per resource its writes (`+` create, `~` change, `-` delete)
/// with the fields they set (old → new), then a summary and what is known only after apply.
pub fn render_text(plan: &Plan) -> String {
    let mut out = String::new();
    let (mut c, mut u, mut d) = (0, 0, 0);
    for r in &plan.resources {
        let (rc, ru, rd) = r.counts();
        c += rc;
        u += ru;
        d += rd;
        let who = match &r.namespace {
            Some(ns) => format!("{} {ns}/{}", r.kind, r.name),
            None => format!("{} {}", r.kind, r.name),
        };
        let verb = if r.delete { " (delete)" } else { "" };
        let summary = if r.changes.is_empty() {
            "no changes".to_string()
        } else {
            format!("{rc} to create, {ru} to change, {rd} to delete")
        };
        out.push_str(&format!("{who}{verb}: {summary}\n"));
        for ch in &r.changes {
            let id = ch
                .id
                .as_deref()
                .map(|i| format!(" ({i})"))
                .unwrap_or_default();
            out.push_str(&format!(
                "  {} {} {}{id}\n",
                symbol(ch.op),
                ch.kind,
                if ch.label.is_empty() {
                    "(unnamed)"
                } else {
                    &ch.label
                }
            ));
            for f in &ch.changes {
                out.push_str(&format!("      {}\n", field_line(f)));
            }
        }
        match &r.outcome {
            Outcome::Done => {}
            Outcome::InProgress { reason, message } => {
                out.push_str(&format!("  then waits: {reason}: {message}\n"));
            }
            Outcome::Fails { reason, message } => {
                out.push_str(&format!("  ! would fail: {reason}: {message}\n"));
            }
        }
    }
    if plan.change_count() == 0 {
        out.push_str("\nNo changes: OpenStack matches these manifests.\n");
    } else {
        out.push_str(&format!(
            "\nPlan: {c} to create, {u} to change, {d} to delete.\n"
        ));
    }
    let failures = plan.failures();
    if !failures.is_empty() {
        out.push_str(&format!(
            "{} resource(s) would fail; their plan stops where the pass would.\n",
            failures.len()
        ));
    }
    let unknown = plan.unknowns();
    if !unknown.is_empty() {
        out.push_str("Known only after apply:\n");
        for u in unknown {
            out.push_str(&format!("  - {u}\n"));
        }
    }
    out
}

/// The plan as JSON for CI: `{changes, create, update, delete, failures, resources,
/// knownAfterApply}`; placeholder IDs are `null`-free strings starting with
/// `known-after-apply-`.
pub fn to_json(plan: &Plan) -> Value {
    let (c, u, d) = plan.resources.iter().fold((0, 0, 0), |acc, r| {
        let (rc, ru, rd) = r.counts();
        (acc.0 + rc, acc.1 + ru, acc.2 + rd)
    });
    json!({
        "changes": plan.change_count(),
        "create": c,
        "update": u,
        "delete": d,
        "failures": plan.failures().len(),
        "resources": plan.resources,
        "knownAfterApply": plan.unknowns(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn intent(op: Op, kind: &'static str, label: &str, changes: Vec<FieldChange>) -> Intent {
        Intent {
            op,
            service: "network",
            kind,
            label: label.into(),
            id: (op != Op::Create).then(|| "abc".to_string()),
            changes,
        }
    }

    fn resource(changes: Vec<Intent>, outcome: Outcome) -> ResourcePlan {
        ResourcePlan {
            kind: "OpenstackProject".into(),
            namespace: Some("team".into()),
            name: "p".into(),
            in_cluster: true,
            delete: false,
            changes,
            outcome,
        }
    }

    #[test]
    fn nothing_to_do_renders_no_changes_and_exits_0() {
        let plan = Plan {
            resources: vec![resource(vec![], Outcome::Done)],
        };
        assert_eq!(plan.exit_code(), 0);
        let text = render_text(&plan);
        assert_eq!(
            text,
            "OpenstackProject team/p: no changes\n\nNo changes: OpenStack matches these manifests.\n"
        );
        assert_eq!(to_json(&plan)["changes"], json!(0));
    }

    #[test]
    fn changes_render_field_by_field_and_exit_2() {
        let plan = Plan {
            resources: vec![resource(
                vec![
                    intent(
                        Op::Create,
                        "security group",
                        "web",
                        vec![FieldChange {
                            field: "project_id".into(),
                            old: None,
                            new: Some(json!("known-after-apply-project-0")),
                        }],
                    ),
                    intent(
                        Op::Update,
                        "compute quota",
                        "project p",
                        vec![FieldChange {
                            field: "cores".into(),
                            old: Some(json!(40)),
                            new: Some(json!(20)),
                        }],
                    ),
                    intent(
                        Op::Delete,
                        "security group rule",
                        "ingress IPv4 tcp port 22 from 0.0.0.0/0",
                        vec![],
                    ),
                ],
                Outcome::Done,
            )],
        };
        assert_eq!(plan.exit_code(), 2);
        let text = render_text(&plan);
        let want = "\
OpenstackProject team/p: 1 to create, 1 to change, 1 to delete
  + security group web
      project_id: (known after apply)
  ~ compute quota project p (abc)
      cores: 40 → 20
  - security group rule ingress IPv4 tcp port 22 from 0.0.0.0/0 (abc)

Plan: 1 to create, 1 to change, 1 to delete.
Known only after apply:
";
        assert!(text.starts_with(want), "{text}");
        assert!(
            text.contains("the IDs of the 1 object(s) to create"),
            "{text}"
        );
        let j = to_json(&plan);
        assert_eq!(j["changes"], json!(3));
        assert_eq!(j["create"], json!(1));
        assert_eq!(j["update"], json!(1));
        assert_eq!(j["delete"], json!(1));
        let ch = &j["resources"][0]["changes"][1];
        assert_eq!(ch["op"], json!("update"));
        assert_eq!(
            ch["changes"][0],
            json!({"field": "cores", "old": 40, "new": 20})
        );
    }

    #[test]
    fn a_failing_pass_is_named_and_exits_1() {
        let plan = Plan {
            resources: vec![resource(
                vec![],
                Outcome::Fails {
                    reason: "PolicyViolation".into(),
                    message: "not allowed: role admin".into(),
                },
            )],
        };
        assert_eq!(plan.exit_code(), 1);
        let text = render_text(&plan);
        assert!(
            text.contains("  ! would fail: PolicyViolation: not allowed: role admin\n"),
            "{text}"
        );
        assert!(text.contains("1 resource(s) would fail"), "{text}");
        assert_eq!(to_json(&plan)["failures"], json!(1));
    }

    #[test]
    fn removed_fields_and_links_render() {
        let plan = Plan {
            resources: vec![resource(
                vec![
                    intent(
                        Op::Update,
                        "flavor extra specs",
                        "f",
                        vec![FieldChange {
                            field: "extra_specs.hw:cpu_policy".into(),
                            old: Some(json!("shared")),
                            new: None,
                        }],
                    ),
                    intent(
                        Op::Delete,
                        "role assignment",
                        "role member for user bob on project p",
                        vec![],
                    ),
                ],
                Outcome::InProgress {
                    reason: "Importing".into(),
                    message: "import running".into(),
                },
            )],
        };
        let text = render_text(&plan);
        assert!(
            text.contains("      extra_specs.hw:cpu_policy: \"shared\" → (removed)\n"),
            "{text}"
        );
        assert!(
            text.contains("  - role assignment role member for user bob on project p (abc)\n"),
            "{text}"
        );
        assert!(
            text.contains("  then waits: Importing: import running\n"),
            "{text}"
        );
        // Links create no object, so nothing is "known after apply" for them.
        assert!(!text.contains("Known only after apply"), "{text}");
    }

    #[test]
    fn a_tenant_credential_names_its_secret_as_unknown_and_its_secret_object_not() {
        let mut secret = intent(Op::Create, "Secret", "team/p-clouds", vec![]);
        secret.service = "kubernetes";
        let plan = Plan {
            resources: vec![resource(
                vec![
                    intent(Op::Create, "user", "p-tenant-credentials", vec![]),
                    intent(
                        Op::Create,
                        "role assignment",
                        "role member for user p-tenant-credentials on project p",
                        vec![],
                    ),
                    intent(
                        Op::Update,
                        "user password",
                        "p-tenant-credentials",
                        vec![FieldChange {
                            field: "password".into(),
                            old: None,
                            new: Some(json!("(random, not shown)")),
                        }],
                    ),
                    intent(Op::Create, "application credential", "c-1", vec![]),
                    secret,
                ],
                Outcome::Done,
            )],
        };
        let unknown = plan.unknowns();
        assert!(
            unknown
                .iter()
                .any(|u| u.starts_with("the IDs of the 2 object(s)")),
            "the user and the credential, not the assignment nor the Secret: {unknown:?}"
        );
        assert!(
            unknown
                .iter()
                .any(|u| u.starts_with("the secret of the 1 application credential(s)")),
            "{unknown:?}"
        );
        let text = render_text(&plan);
        assert!(text.contains("  + Secret team/p-clouds\n"), "{text}");
        assert!(
            text.contains("      password: \"(random, not shown)\"\n"),
            "{text}"
        );
    }
}
