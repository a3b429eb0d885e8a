//! Vendor passthru (`/v1/nodes/{node}/vendor_passthru…`, `/v1/drivers/{name}/vendor_passthru…`),
//! answered as Ironic answers for vendor interfaces that have no methods: deployd's
//! vendor interfaces (`no-vendor`, `ipmitool`, `redfish`) expose none, so the lists are
//! `{}` and every call is refused with Ironic's "No handler for method" (400).

use std::collections::HashMap;
use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::extract::{Path, Query};
use axum::routing::{any, get};
use serde::Deserialize;
use serde_json::{Value, json};

use super::http::error::ApiError;
use super::node_access::find;
use super::{App, State};

pub fn routes() -> Router<Arc<App>> {
    Router::new()
        .route("/v1/nodes/{ident}/vendor_passthru/methods", get(methods))
        .route("/v1/nodes/{ident}/vendor_passthru", any(call))
        .route("/v1/nodes/{ident}/vendor_passthru/{method}", any(call))
        .route("/v1/drivers/{name}/vendor_passthru/methods", get(methods))
        .route("/v1/drivers/{name}/vendor_passthru", any(call))
        .route("/v1/drivers/{name}/vendor_passthru/{method}", any(call))
}

#[derive(Deserialize, Default)]
struct Call {
    method: Option<String>,
}

/// The route's parameters: a node (`ident`) or a driver (`name`), and the method when
/// the path names it (as python-ironicclient calls it; Ironic takes it there or in
/// `?method=`, as gophercloud sends it).
type Params = Path<HashMap<String, String>>;

/// The node or driver exists (else 404).
async fn subject(app: &App, params: &HashMap<String, String>) -> Result<(), ApiError> {
    match (params.get("ident"), params.get("name")) {
        (Some(ident), _) => find(app, ident).await.map(drop),
        (None, Some(name)) => driver(app, name),
        (None, None) => Err(ApiError::not_found("No node or driver named.")),
    }
}

async fn methods(app: State, Path(params): Params) -> Result<Json<Value>, ApiError> {
    subject(&app, &params).await?;
    Ok(Json(json!({})))
}

async fn call(
    app: State,
    Path(mut params): Params,
    Query(query): Query<Call>,
) -> Result<Json<Value>, ApiError> {
    subject(&app, &params).await?;
    Err(no_handler(params.remove("method").or(query.method)))
}

fn driver(app: &App, name: &str) -> Result<(), ApiError> {
    match app.conductor.hardware().exists(name) {
        true => Ok(()),
        false => Err(ApiError::not_found(format!(
            "Could not find the following driver(s) or hardware type(s): {name}."
        ))),
    }
}

fn no_handler(method: Option<String>) -> ApiError {
    match method.filter(|m| !m.is_empty()) {
        None => ApiError::bad_request("Method not specified"),
        Some(method) => ApiError::bad_request(format!("No handler for method {method}")),
    }
}
