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
use super::http::gate::since;
use super::node_access::{edit, find};
use super::{App, State};

pub fn routes() -> Router<Arc<App>> {
    Router::new()
        .route("/v1/nodes/{ident}/bios", since(40, get(bios)))
        .route("/v1/nodes/{ident}/states/raid", since(12, put(raid)))
}

async fn bios(app: State, Path(ident): Path<String>) -> Result<Json<Value>, ApiError> {
    find(&app, &ident)?;
    Ok(Json(json!({"bios": []})))
}

/// `PUT /v1/nodes/{id}/states/raid`: stored as the target for a RAID-capable interface; a
/// node whose `raid_interface` is `no-raid` is refused, as Ironic refuses it.
async fn raid(app: State, Path(ident): Path<String>, body: Bytes) -> Result<StatusCode, ApiError> {
    let target: Value = parse(&body)?;
    if !target.is_object() {
        return Err(ApiError::bad_request(
            "The RAID configuration must be an object.",
        ));
    }
    edit(&app, &ident, |b| {
        let iface = b
            .interfaces
            .get("raid")
            .cloned()
            .unwrap_or_else(|| "no-raid".into());
        if iface == "no-raid" {
            return Err(ApiError::bad_request(format!(
                "Node {} does not support RAID: its raid_interface is \"no-raid\".",
                b.uuid
            )));
        }
        match target.as_object().is_some_and(|t| t.is_empty()) {
            true => b.attrs.remove("target_raid_config"),
            false => b.attrs.insert("target_raid_config".into(), target.clone()),
        };
        Ok(())
    })
    .await?;
    Ok(StatusCode::NO_CONTENT)
}
