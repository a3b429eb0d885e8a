//! `/v1/nodes/{node}/maintenance`: an operator's flag that keeps flows off a node.

use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::Path;
use axum::http::StatusCode;
use axum::routing::put;
use serde_json::Value;

use super::http::error::{ApiError, parse};
use super::node_access::edit;
use super::{App, State};

pub fn routes() -> Router<Arc<App>> {
    Router::new().route(
        "/v1/nodes/{ident}/maintenance",
        put(maintenance_on).delete(maintenance_off),
    )
}

async fn maintenance_on(
    app: State,
    Path(ident): Path<String>,
    body: Bytes,
) -> Result<StatusCode, ApiError> {
    let reason = if body.is_empty() {
        None
    } else {
        let v: Value = parse(&body)?;
        v.get("reason").and_then(Value::as_str).map(str::to_owned)
    };
    edit(&app, &ident, |b| {
        b.maintenance = true;
        b.maintenance_reason = reason.clone();
        Ok(())
    })
    .await?;
    Ok(StatusCode::ACCEPTED)
}

async fn maintenance_off(app: State, Path(ident): Path<String>) -> Result<StatusCode, ApiError> {
    edit(&app, &ident, |b| {
        b.maintenance = false;
        b.maintenance_reason = None;
        Ok(())
    })
    .await?;
    Ok(StatusCode::ACCEPTED)
}
