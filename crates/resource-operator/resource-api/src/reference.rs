//! The CRD reference (`docs/crd-reference.md`), generated from the CRD schemas so it can never
//! disagree with them. A test fails when the committed file differs; regenerate it with
//! `UPDATE_REFERENCE=1 cargo test -p resource-api --test suite reference::`.

use serde_json::Value;

use crate::all_crds;

/// The command that rewrites `docs/crd-reference.md`.
pub const REGENERATE: &str =
    "UPDATE_REFERENCE=1 cargo test -p resource-api --test suite reference::";

/// One documented field.
#[derive(Debug, Clone, PartialEq)]
pub struct Field {
    /// Path such as `.spec.subnets[].cidr`.
    pub path: String,
    /// Type as shown, e.g. `string (date-time)`, `array of object`, `map of string`.
    pub type_: String,
    /// Whether the parent object requires it.
    pub required: bool,
    /// The structural default, as compact JSON.
    pub default: Option<String>,
    /// Constraints (enum, bounds, lengths, pattern, list type, CEL messages).
    pub constraints: Vec<String>,
    /// The schema description, on one line.
    pub description: String,
}

/// One CEL rule (`x-kubernetes-validations`) and where it applies.
#[derive(Debug, Clone, PartialEq)]
pub struct Rule {
    /// Path of the schema node carrying the rule.
    pub path: String,
    /// The CEL expression.
    pub rule: String,
    /// The message shown when it fails.
    pub message: String,
}

fn number(v: &Value) -> String {
    match v.as_f64() {
        Some(f) if f.fract() == 0.0 && f.abs() < 1e15 => format!("{}", f as i64),
        _ => v.to_string(),
    }
}

fn type_of(s: &Value) -> String {
    let base = s["type"].as_str().unwrap_or("any");
    let mut t = match base {
        "array" => format!("array of {}", type_of(&s["items"])),
        "object" if s["properties"].is_null() && s["additionalProperties"].is_object() => {
            format!("map of {}", type_of(&s["additionalProperties"]))
        }
        other => other.to_string(),
    };
    if let Some(f) = s["format"].as_str() {
        t.push_str(&format!(" ({f})"));
    }
    if s["x-kubernetes-preserve-unknown-fields"] == Value::Bool(true) {
        t.push_str(", free-form");
    }
    t
}

fn constraints(s: &Value) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(e) = s["enum"].as_array() {
        let vals: Vec<String> = e
            .iter()
            .map(|v| {
                format!(
                    "`{}`",
                    v.as_str()
                        .map(str::to_string)
                        .unwrap_or_else(|| v.to_string())
                )
            })
            .collect();
        out.push(format!("one of {}", vals.join(", ")));
    }
    for (key, label) in [
        ("minimum", "≥"),
        ("maximum", "≤"),
        ("minLength", "min length"),
        ("maxLength", "max length"),
        ("minItems", "min items"),
        ("maxItems", "max items"),
        ("minProperties", "min entries"),
        ("maxProperties", "max entries"),
    ] {
        if !s[key].is_null() {
            let exclusive = match key {
                "minimum" if s["exclusiveMinimum"] == Value::Bool(true) => ">",
                "maximum" if s["exclusiveMaximum"] == Value::Bool(true) => "<",
                _ => label,
            };
            let sep = if exclusive.chars().all(|c| !c.is_alphanumeric()) {
                ""
            } else {
                " "
            };
            out.push(format!("{exclusive}{sep}{}", number(&s[key])));
        }
    }
    if let Some(p) = s["pattern"].as_str() {
        out.push(format!("pattern `{p}`"));
    }
    if let Some(t) = s["x-kubernetes-list-type"].as_str() {
        let keys: Vec<String> = s["x-kubernetes-list-map-keys"]
            .as_array()
            .map(|k| {
                k.iter()
                    .filter_map(|k| k.as_str())
                    .map(|k| format!("`{k}`"))
                    .collect()
            })
            .unwrap_or_default();
        if keys.is_empty() {
            out.push(format!("list type {t}"));
        } else {
            out.push(format!("list type {t}, keyed by {}", keys.join(", ")));
        }
    }
    if let Some(rules) = s["x-kubernetes-validations"].as_array() {
        for r in rules {
            let msg = r["message"]
                .as_str()
                .or(r["rule"].as_str())
                .unwrap_or_default();
            out.push(format!("CEL: {}", one_line(msg)));
        }
    }
    out
}

fn one_line(s: &str) -> String {
    s.split("\n\n")
        .map(|p| p.split_whitespace().collect::<Vec<_>>().join(" "))
        .filter(|p| !p.is_empty())
        .collect::<Vec<_>>()
        .join("<br><br>")
}

fn cell(s: &str) -> String {
    s.replace('|', "\\|")
}

fn walk(s: &Value, path: &str, required: bool, fields: &mut Vec<Field>, rules: &mut Vec<Rule>) {
    fields.push(Field {
        path: path.to_string(),
        type_: type_of(s),
        required,
        default: (!s["default"].is_null()).then(|| s["default"].to_string()),
        constraints: constraints(s),
        description: one_line(s["description"].as_str().unwrap_or_default()),
    });
    if let Some(rs) = s["x-kubernetes-validations"].as_array() {
        for r in rs {
            rules.push(Rule {
                path: path.to_string(),
                rule: r["rule"].as_str().unwrap_or_default().to_string(),
                message: one_line(r["message"].as_str().unwrap_or_default()),
            });
        }
    }
    children(s, path, fields, rules);
}

fn children(s: &Value, path: &str, fields: &mut Vec<Field>, rules: &mut Vec<Rule>) {
    if let Some(props) = s["properties"].as_object() {
        let req: Vec<&str> = s["required"]
            .as_array()
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        for (name, sub) in props {
            walk(
                sub,
                &format!("{path}.{name}"),
                req.contains(&name.as_str()),
                fields,
                rules,
            );
        }
    }
    let items = &s["items"];
    if items.is_object() {
        if let Some(rs) = items["x-kubernetes-validations"].as_array() {
            for r in rs {
                rules.push(Rule {
                    path: format!("{path}[]"),
                    rule: r["rule"].as_str().unwrap_or_default().to_string(),
                    message: one_line(r["message"].as_str().unwrap_or_default()),
                });
            }
        }
        children(items, &format!("{path}[]"), fields, rules);
    }
    let values = &s["additionalProperties"];
    if values.is_object() {
        children(values, &format!("{path}.<key>"), fields, rules);
    }
}

/// The documented fields and CEL rules of one CRD's schema (`.spec…` and `.status…`).
pub fn fields(crd: &Value) -> (Vec<Field>, Vec<Rule>) {
    let schema = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
    let (mut fields, mut rules) = (Vec::new(), Vec::new());
    if let Some(rs) = schema["x-kubernetes-validations"].as_array() {
        for r in rs {
            rules.push(Rule {
                path: "(object)".into(),
                rule: r["rule"].as_str().unwrap_or_default().to_string(),
                message: one_line(r["message"].as_str().unwrap_or_default()),
            });
        }
    }
    children(schema, "", &mut fields, &mut rules);
    (fields, rules)
}

fn table(out: &mut String, fields: &[Field]) {
    out.push_str("| Field | Type | Required | Default | Constraints | Description |\n");
    out.push_str("|---|---|---|---|---|---|\n");
    for f in fields {
        out.push_str(&format!(
            "| `{}` | {} | {} | {} | {} | {} |\n",
            f.path,
            cell(&f.type_),
            if f.required { "yes" } else { "" },
            f.default
                .as_deref()
                .map(|d| format!("`{}`", cell(d)))
                .unwrap_or_default(),
            cell(&f.constraints.join("; ")),
            cell(&f.description),
        ));
    }
}

/// The whole reference as Markdown.
pub fn markdown() -> String {
    let crds: Vec<Value> = all_crds()
        .iter()
        .map(|c| serde_json::to_value(c).unwrap_or(Value::Null))
        .collect();
    markdown_for(
        "CRD reference",
        &format!(
            "<!-- GENERATED by `api::reference::markdown()` from the CRD schemas: do not edit. Regenerate with `{REGENERATE}`. -->"
        ),
        "All kinds are in API group `sunet.se`, version `v1alpha1` (served and stored), with a \
         `status` subresource.",
        &crds,
    )
}

/// The reference of any set of CRDs (as JSON): a title, a generated-file marker, a sentence
/// on their group, then one section per kind (names, printer columns, fields, CEL rules).
pub fn markdown_for(title: &str, marker: &str, group: &str, crds: &[Value]) -> String {
    let mut out = String::new();
    out.push_str(&format!("# {title}\n\n{marker}\n\n{group} "));
    out.push_str(
        "Paths are relative to the object: `[]` is any list item, \
         `<key>` any map key. *Required* means required within its parent object; a default \
         applies when the parent object is present. Constraints are enforced by the API server \
         at admission (OpenAPI schema and CEL rules); the operator re-checks them and reports \
         violations as condition reason `InvalidSpec`.\n\n",
    );
    for crd in crds {
        let kind = crd["spec"]["names"]["kind"].as_str().unwrap_or_default();
        out.push_str(&format!("- [{kind}](#{})\n", kind.to_lowercase()));
    }
    for crd in crds {
        let names = &crd["spec"]["names"];
        let kind = names["kind"].as_str().unwrap_or_default();
        let version = &crd["spec"]["versions"][0];
        let schema = &version["schema"]["openAPIV3Schema"];
        out.push_str(&format!("\n## {kind}\n\n"));
        out.push_str(&format!(
            "{}\n\n",
            one_line(schema["description"].as_str().unwrap_or_default())
        ));
        let short: Vec<String> = names["shortNames"]
            .as_array()
            .map(|s| {
                s.iter()
                    .filter_map(Value::as_str)
                    .map(|s| format!("`{s}`"))
                    .collect()
            })
            .unwrap_or_default();
        out.push_str("| | |\n|---|---|\n");
        out.push_str(&format!(
            "| CRD | `{}` |\n| Scope | {} |\n| Plural / singular | `{}` / `{}` |\n| Short names | {} |\n",
            crd["metadata"]["name"].as_str().unwrap_or_default(),
            crd["spec"]["scope"].as_str().unwrap_or_default(),
            names["plural"].as_str().unwrap_or_default(),
            names["singular"].as_str().unwrap_or_default(),
            short.join(", "),
        ));
        if let Some(cols) = version["additionalPrinterColumns"].as_array() {
            out.push_str("\n`kubectl get` columns (priority 1 only with `-o wide`):\n\n");
            out.push_str("| Column | JSONPath | Type | Priority |\n|---|---|---|---|\n");
            for c in cols {
                out.push_str(&format!(
                    "| {} | `{}` | {} | {} |\n",
                    cell(c["name"].as_str().unwrap_or_default()),
                    c["jsonPath"].as_str().unwrap_or_default(),
                    c["type"].as_str().unwrap_or_default(),
                    c["priority"].as_i64().unwrap_or(0),
                ));
            }
        }
        let (fields, rules) = fields(crd);
        for part in ["spec", "status"] {
            let prefix = format!(".{part}");
            let rows: Vec<Field> = fields
                .iter()
                .filter(|f| f.path == prefix || f.path.starts_with(&format!("{prefix}.")))
                .cloned()
                .collect();
            if rows.is_empty() {
                continue;
            }
            out.push_str(&format!("\n### {kind} {part}\n\n"));
            table(&mut out, &rows);
        }
        if !rules.is_empty() {
            out.push_str(&format!("\n### {kind} validation rules (CEL)\n\n"));
            out.push_str("| Applies to | Message | Rule |\n|---|---|---|\n");
            for r in &rules {
                out.push_str(&format!(
                    "| `{}` | {} | `{}` |\n",
                    r.path,
                    cell(&r.message),
                    cell(&r.rule)
                ));
            }
        }
    }
    out
}
