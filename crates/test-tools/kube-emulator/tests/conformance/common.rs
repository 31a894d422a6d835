//! Shared fixtures: an emulator per test and the example `Widget`/`Gadget` CRDs.

use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
use kube::{Client, CustomResource};
use kube_emulator::{Emulator, EmulatorOptions, Handle};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// Typed view of the example CRD (the schema is served from `widget_crd()`).
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "sunet.se",
    version = "v1alpha1",
    kind = "Widget",
    namespaced,
    status = "WidgetStatus",
    schema = "disabled"
)]
pub struct WidgetSpec {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub color: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
}

/// Status of a Widget.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct WidgetStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

pub fn widget_crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.sunet.se"},
        "spec": {
            "group": "sunet.se",
            "scope": "Namespaced",
            "names": {"kind": "Widget", "plural": "widgets", "singular": "widget", "shortNames": ["wg"], "categories": ["all", "sunet"]},
            "versions": [{
                "name": "v1alpha1",
                "served": true,
                "storage": true,
                "subresources": {"status": {}},
                "additionalPrinterColumns": [{"name": "Size", "type": "integer", "jsonPath": ".spec.size"}],
                "selectableFields": [{"jsonPath": ".spec.color"}],
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {
                        "spec": {
                            "type": "object",
                            "required": ["name"],
                            "x-kubernetes-validations": [
                                {"rule": "!has(self.size) || self.size <= 5 || self.color != 'blue'", "message": "big widgets cannot be blue"}
                            ],
                            "properties": {
                                "name": {"type": "string", "pattern": "^[a-z][a-z0-9-]*$", "minLength": 1, "maxLength": 20,
                                         "x-kubernetes-validations": [{"rule": "self == oldSelf", "message": "name is immutable"}]},
                                "size": {"type": "integer", "minimum": 1, "maximum": 10, "default": 3},
                                "color": {"type": "string", "enum": ["red", "green", "blue"], "default": "red"},
                                "enabled": {"type": "boolean", "default": true},
                                "ratio": {"type": "number", "nullable": true},
                                "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
                                "labels": {"type": "object", "additionalProperties": {"type": "string", "maxLength": 5}},
                                "network": {"type": "object", "properties": {
                                    "cidr": {"type": "string", "default": "10.0.0.0/24"},
                                    "mtu": {"type": "integer", "default": 1500}
                                }},
                                "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
                            }
                        },
                        "status": {
                            "type": "object",
                            "properties": {
                                "phase": {"type": "string"},
                                "observedGeneration": {"type": "integer"},
                                "conditions": {"type": "array", "items": {"type": "object", "properties": {
                                    "type": {"type": "string"}, "status": {"type": "string"}
                                }}}
                            }
                        }
                    }
                }}
            }]
        }
    })
}

/// A cluster-scoped kind without a status subresource.
pub fn gadget_crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "gadgets.sunet.se"},
        "spec": {
            "group": "sunet.se",
            "scope": "Cluster",
            "names": {"kind": "Gadget", "plural": "gadgets"},
            "versions": [{
                "name": "v1alpha1",
                "served": true,
                "storage": true,
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {
                        "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                        "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
                    }
                }}
            }]
        }
    })
}

/// A running emulator plus a client for it.
pub struct Env {
    pub handle: Handle,
    pub client: Client,
}

pub async fn start() -> Env {
    start_with(EmulatorOptions::default()).await
}

pub async fn start_with(opts: EmulatorOptions) -> Env {
    let handle = Emulator::start(opts).await.expect("emulator starts");
    let client = handle.client().await.expect("client builds");
    Env { handle, client }
}

impl Env {
    pub async fn install_crd(&self, crd: Value) -> CustomResourceDefinition {
        let api: Api<CustomResourceDefinition> = Api::all(self.client.clone());
        let crd: CustomResourceDefinition = serde_json::from_value(crd).expect("valid CRD");
        api.create(&PostParams::default(), &crd)
            .await
            .expect("CRD created")
    }

    pub async fn with_widgets(self) -> Self {
        self.install_crd(widget_crd()).await;
        self
    }

    pub fn widgets(&self, ns: &str) -> Api<Widget> {
        Api::namespaced(self.client.clone(), ns)
    }

    pub fn dyn_widgets(&self, ns: &str) -> Api<DynamicObject> {
        Api::namespaced_with(self.client.clone(), ns, &widget_ar())
    }
}

pub fn widget_ar() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("sunet.se", "v1alpha1", "Widget"),
        "widgets",
    )
}

pub fn gadget_ar() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("sunet.se", "v1alpha1", "Gadget"),
        "gadgets",
    )
}

pub fn widget(name: &str, spec_name: &str) -> Widget {
    Widget::new(
        name,
        WidgetSpec {
            name: spec_name.into(),
            ..Default::default()
        },
    )
}

pub fn dyn_obj(v: Value) -> DynamicObject {
    serde_json::from_value(v).expect("valid object")
}

/// The `Status` of a failed call.
pub fn api_err<T: std::fmt::Debug>(r: Result<T, kube::Error>) -> Box<kube::core::Status> {
    match r {
        Err(kube::Error::Api(s)) => s,
        other => panic!("expected an API error, got {other:?}"),
    }
}

/// Poll `f` until it returns Some, for at most 5 s.
pub async fn eventually<T, F, Fut>(mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "condition not met within 5s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
