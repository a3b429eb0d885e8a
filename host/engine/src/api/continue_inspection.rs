//! `POST /v1/continue_inspection` (1.84): a ramdisk agent's inventory for in-band
//! inspection, as ironic-python-agent posts it (no microversion header, which Ironic
//! accepts as 1.1 for compatibility, or 1.84 and later). The node is found by the MACs or
//! the BMC address the inventory reports and must be in `inspect wait`; anything else is a
//! 404 that says no more (as Ironic's, which discloses nothing to an unauthenticated
//! caller). The inventory is applied in the background: 202 with the node's uuid.

use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::Extension;
use axum::http::StatusCode;
use axum::routing::post;
use serde_json::{Map, Value, json};

use super::http::error::{ApiError, parse};
use super::http::version::Version;
use super::{App, State};
use crate::conductor::ConductorError;

pub fn routes() -> Router<Arc<App>> {
    Router::new().route("/v1/continue_inspection", post(continue_inspection))
}

async fn continue_inspection(
    app: State,
    Extension(version): Extension<Version>,
    body: Bytes,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    if version.at_least(2) && !version.at_least(84) {
        return Err(ApiError::not_found("API version 1.84 or newer is required"));
    }
    let mut data: Map<String, Value> = parse(&body)?;
    let inventory = match data.remove("inventory") {
        Some(Value::Object(i)) => Value::Object(i),
        _ => {
            return Err(ApiError::bad_request(
                "Invalid inspection data: \"inventory\" (an object) is required",
            ));
        }
    };
    if !inventory["interfaces"].is_array() {
        return Err(ApiError::bad_request(
            "Invalid inspection data: \"inventory.interfaces\" (a list) is required",
        ));
    }
    let not_found = || ApiError::not_found("The requested resource could not be found.");
    let node = app
        .conductor
        .inspected_node(&inventory)
        .await
        .map_err(ConductorError::from)?
        .ok_or_else(not_found)?;
    // Only the node's conductor group's engines act on it: for another group's node the
    // answer says so, and `api::forward` sends the call on to one of them.
    let group = app.conductor.store().node(node).await?.body.attrs;
    let group = super::node_doc::conductor_group(&group);
    if group != app.conductor.store().conductor_group() {
        let group = group.to_owned();
        return Err(ConductorError::OtherGroup { node, group }.into());
    }
    match app
        .conductor
        .continue_inspection(node, inventory, Value::Object(data))
        .await
    {
        Ok(()) => Ok((StatusCode::ACCEPTED, Json(json!({"uuid": node})))),
        Err(ConductorError::Invalid(_)) => Err(not_found()),
        Err(e) => Err(e.into()),
    }
}
