//! Parsing manifests (YAML streams) into the typed kinds, for tests, the demo and tools.

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::validation::{FieldError, Validate, object_errors};
use crate::{OpenstackDomain, OpenstackFlavor, OpenstackImage, OpenstackNetwork, OpenstackProject};

/// Errors from reading a manifest.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    /// The text is not YAML.
    #[error("not valid YAML: {0}")]
    Yaml(String),
    /// The document does not fit the kind's schema (wrong type, unknown enum value, ...).
    #[error("{kind} {name}: does not match the schema: {message}")]
    Schema {
        /// Kind of the document.
        kind: String,
        /// metadata.name of the document.
        name: String,
        /// The deserializer's message.
        message: String,
    },
}

/// Splits a YAML stream into its non-empty documents.
pub fn documents(text: &str) -> Result<Vec<Value>, ManifestError> {
    let docs: Vec<Value> =
        serde_saphyr::from_multiple(text).map_err(|e| ManifestError::Yaml(e.to_string()))?;
    Ok(docs.into_iter().filter(|d| !d.is_null()).collect())
}

fn typed<K: DeserializeOwned>(doc: &Value) -> Result<K, ManifestError> {
    serde_json::from_value(doc.clone()).map_err(|e| ManifestError::Schema {
        kind: doc["kind"].as_str().unwrap_or("?").to_string(),
        name: doc["metadata"]["name"].as_str().unwrap_or("?").to_string(),
        message: e.to_string(),
    })
}

/// The result of checking one document of our API group.
#[derive(Debug)]
pub struct Checked {
    /// Kind of the document.
    pub kind: String,
    /// The document as the typed kind serializes it back (what the operator sees).
    pub roundtrip: Value,
    /// CEL and semantic problems found.
    pub errors: Vec<FieldError>,
}

fn check_kind<K>(doc: &Value, spec: impl Fn(&K) -> &dyn Validate) -> Result<Checked, ManifestError>
where
    K: DeserializeOwned + serde::Serialize + kube::CustomResourceExt,
{
    let obj: K = typed(doc)?;
    let errors = object_errors(&obj, spec(&obj));
    Ok(Checked {
        kind: doc["kind"].as_str().unwrap_or_default().to_string(),
        roundtrip: serde_json::to_value(&obj).unwrap_or(Value::Null),
        errors,
    })
}

/// Parses a `sunet.se` document into its kind and validates it (schema via types, CEL, and
/// semantic checks). Returns `Ok(None)` for documents of other groups (Namespaces, ConfigMaps).
pub fn check(doc: &Value) -> Result<Option<Checked>, ManifestError> {
    if !doc["apiVersion"]
        .as_str()
        .unwrap_or_default()
        .starts_with("sunet.se/")
    {
        return Ok(None);
    }
    let checked = match doc["kind"].as_str().unwrap_or_default() {
        "OpenstackDomain" => check_kind::<OpenstackDomain>(doc, |o| &o.spec)?,
        "OpenstackFlavor" => check_kind::<OpenstackFlavor>(doc, |o| &o.spec)?,
        "OpenstackImage" => check_kind::<OpenstackImage>(doc, |o| &o.spec)?,
        "OpenstackNetwork" => check_kind::<OpenstackNetwork>(doc, |o| &o.spec)?,
        "OpenstackProject" => check_kind::<OpenstackProject>(doc, |o| &o.spec)?,
        "OpenstackCloud" => check_kind::<crate::OpenstackCloud>(doc, |o| &o.spec)?,
        other => {
            return Err(ManifestError::Schema {
                kind: other.to_string(),
                name: doc["metadata"]["name"].as_str().unwrap_or("?").to_string(),
                message: "unknown kind in group sunet.se".into(),
            });
        }
    };
    Ok(Some(checked))
}

/// JSON paths of every leaf in `original` that `roundtrip` lost (fields the types do not
/// know, which a server would prune).
pub fn lost_fields(original: &Value, roundtrip: &Value) -> Vec<String> {
    fn walk(path: &str, a: &Value, b: &Value, out: &mut Vec<String>) {
        match (a, b) {
            (Value::Object(a), Value::Object(b)) => {
                for (k, v) in a {
                    let p = format!("{path}.{k}");
                    match b.get(k) {
                        Some(w) => walk(&p, v, w, out),
                        None => out.push(p),
                    }
                }
            }
            (Value::Array(a), Value::Array(b)) => {
                for (i, v) in a.iter().enumerate() {
                    let p = format!("{path}[{i}]");
                    match b.get(i) {
                        Some(w) => walk(&p, v, w, out),
                        None => out.push(p),
                    }
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk("", original, roundtrip, &mut out);
    out
}
