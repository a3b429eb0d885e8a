//! A node's BIOS settings (1.40; deployd's drivers report none) and its target RAID
//! configuration (`PUT /v1/nodes/{node}/states/raid`, 1.12).

use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::Path;
use axum::http::StatusCode;
use axum::routing::{get, put};
use serde_json::{Value, json};

use super::http::error::{ApiError, parse};
use super::http::gate::{TooOld, gated, since};
use super::node_access::{edit, find};
use super::{App, State};

pub fn routes() -> Router<Arc<App>> {
    Router::new()
        .route("/v1/nodes/{ident}/bios", since(40, get(bios)))
        .route(
            "/v1/nodes/{ident}/states/raid",
            gated(12, TooOld::NotAcceptable, put(raid)),
        )
}

async fn bios(app: State, Path(ident): Path<String>) -> Result<Json<Value>, ApiError> {
    find(&app, &ident).await?;
    Ok(Json(json!({"bios": []})))
}

/// `PUT /v1/nodes/{id}/states/raid`: checked against Ironic's RAID schema and stored as
/// the target; `{}` (or no body) clears it. A node whose `raid_interface` is `no-raid` is
/// refused with 404, as Ironic refuses it.
async fn raid(app: State, Path(ident): Path<String>, body: Bytes) -> Result<StatusCode, ApiError> {
    let target: Value = match body.iter().all(u8::is_ascii_whitespace) {
        true => json!({}),
        false => parse(&body)?,
    };
    if !target.is_object() {
        return Err(ApiError::bad_request(
            crate::raid::validate(&target).unwrap_err(),
        ));
    }
    edit(&app, &ident, |b| {
        if b.interfaces.get("raid").is_none_or(|r| r == "no-raid") {
            return Err(ApiError::not_found(format!(
                "Driver {} does not support raid (disabled or not implemented).",
                b.driver
            )));
        }
        crate::raid::validate(&target).map_err(ApiError::bad_request)?;
        match target.as_object().is_some_and(|t| t.is_empty()) {
            true => b.attrs.remove("target_raid_config"),
            false => b.attrs.insert("target_raid_config".into(), target.clone()),
        };
        Ok(())
    })
    .await?;
    Ok(StatusCode::NO_CONTENT)
}
