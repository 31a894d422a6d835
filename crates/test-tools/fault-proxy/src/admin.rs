//! A small admin HTTP API over a running proxy (used by the `fault-proxy` binary):
//!
//! | request | effect |
//! |---|---|
//! | `GET /routes` | the listeners: service, upstream origin, proxy origin |
//! | `GET /rules` | the rules with their `matched`/`fired` counters |
//! | `POST /rules` (a [`Rule`] as JSON) | adds a rule; answers `{"id": n}` |
//! | `DELETE /rules` | removes every rule |
//! | `DELETE /rules/{id}` | removes one rule (404 if unknown) |
//! | `GET /requests` | the request log |
//! | `DELETE /requests` | empties the request log |

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{delete, get};
use axum::{Json, Router};
use serde_json::{Value, json};

use crate::{FaultProxy, Rule};

/// The admin API for `proxy`.
pub fn router(proxy: FaultProxy) -> Router {
    Router::new()
        .route("/routes", get(routes))
        .route("/rules", get(list_rules).post(add_rule).delete(clear_rules))
        .route("/rules/{id}", delete(remove_rule))
        .route("/requests", get(requests).delete(clear_requests))
        .with_state(proxy)
}

async fn routes(State(p): State<FaultProxy>) -> Json<Value> {
    Json(json!(p.routes()))
}

async fn list_rules(State(p): State<FaultProxy>) -> Json<Value> {
    Json(json!(p.rules()))
}

async fn add_rule(
    State(p): State<FaultProxy>,
    Json(rule): Json<Rule>,
) -> (StatusCode, Json<Value>) {
    match p.add_rule(rule) {
        Ok(id) => (StatusCode::CREATED, Json(json!({ "id": id }))),
        Err(e) => (
            StatusCode::BAD_REQUEST,
            Json(json!({ "error": e.to_string() })),
        ),
    }
}

async fn clear_rules(State(p): State<FaultProxy>) -> StatusCode {
    p.clear_rules();
    StatusCode::NO_CONTENT
}

async fn remove_rule(State(p): State<FaultProxy>, Path(id): Path<u64>) -> StatusCode {
    if p.remove_rule(id) {
        StatusCode::NO_CONTENT
    } else {
        StatusCode::NOT_FOUND
    }
}

async fn requests(State(p): State<FaultProxy>) -> Json<Value> {
    Json(json!(p.requests()))
}

async fn clear_requests(State(p): State<FaultProxy>) -> StatusCode {
    p.clear_requests();
    StatusCode::NO_CONTENT
}
