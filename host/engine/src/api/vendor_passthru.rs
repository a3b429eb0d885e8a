//! Vendor passthru (`/v1/nodes/{node}/vendor_passthru…`, `/v1/drivers/{name}/vendor_passthru…`),
//! answered as Ironic answers for vendor interfaces that have no methods: deployd's
//! vendor interfaces (`no-vendor`, `ipmitool`, `redfish`) expose none, so the lists are
//! `{}` and every call is refused with Ironic's "No handler for method" (400).

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
use crate::hardware::Hardware;

pub fn routes() -> Router<Arc<App>> {
    Router::new()
        .route(
            "/v1/nodes/{ident}/vendor_passthru/methods",
            get(node_methods),
        )
        .route("/v1/nodes/{ident}/vendor_passthru", any(node_call))
        .route(
            "/v1/nodes/{ident}/vendor_passthru/{method}",
            any(node_call_named),
        )
        .route(
            "/v1/drivers/{name}/vendor_passthru/methods",
            get(driver_methods),
        )
        .route("/v1/drivers/{name}/vendor_passthru", any(driver_call))
        .route(
            "/v1/drivers/{name}/vendor_passthru/{method}",
            any(driver_call_named),
        )
}

#[derive(Deserialize, Default)]
struct Call {
    method: Option<String>,
}

async fn node_methods(app: State, Path(ident): Path<String>) -> Result<Json<Value>, ApiError> {
    find(&app, &ident)?;
    Ok(Json(json!({})))
}

async fn node_call(
    app: State,
    Path(ident): Path<String>,
    Query(call): Query<Call>,
) -> Result<Json<Value>, ApiError> {
    find(&app, &ident)?;
    Err(no_handler(call))
}

async fn driver_methods(app: State, Path(name): Path<String>) -> Result<Json<Value>, ApiError> {
    driver(&app, &name)?;
    Ok(Json(json!({})))
}

async fn driver_call(
    app: State,
    Path(name): Path<String>,
    Query(call): Query<Call>,
) -> Result<Json<Value>, ApiError> {
    driver(&app, &name)?;
    Err(no_handler(call))
}

/// The method named in the path (`…/vendor_passthru/{method}`), as python-ironicclient
/// calls it; Ironic takes both forms.
async fn node_call_named(
    app: State,
    Path((ident, method)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    find(&app, &ident)?;
    Err(no_handler(Call {
        method: Some(method),
    }))
}

async fn driver_call_named(
    app: State,
    Path((name, method)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    driver(&app, &name)?;
    Err(no_handler(Call {
        method: Some(method),
    }))
}

fn driver(app: &App, name: &str) -> Result<(), ApiError> {
    match Hardware::new(app.conductor.registry()).exists(name) {
        true => Ok(()),
        false => Err(ApiError::not_found(format!(
            "Could not find the following driver(s) or hardware type(s): {name}."
        ))),
    }
}

fn no_handler(call: Call) -> ApiError {
    match call.method.filter(|m| !m.is_empty()) {
        None => ApiError::bad_request("Method not specified"),
        Some(method) => ApiError::bad_request(format!("No handler for method {method}")),
    }
}
