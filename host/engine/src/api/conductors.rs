//! `/v1/conductors` (1.49): this engine, as Ironic's one conductor.

use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::extract::Path;
use serde_json::{Value, json};

use super::http::error::ApiError;
use super::http::gate::since;
use super::{App, State, view};

pub fn routes() -> Router<Arc<App>> {
    Router::new()
        .route("/v1/conductors", since(49, axum::routing::get(conductors)))
        .route(
            "/v1/conductors/{hostname}",
            since(49, axum::routing::get(conductor)),
        )
}

fn conductor_doc(app: &App, detail: bool) -> Value {
    let mut doc = json!({
        "hostname": view::CONDUCTOR,
        "conductor_group": "",
        "alive": true,
        "links": view::links(&app.base(), "conductors", view::CONDUCTOR),
    });
    // Not Ironic's: whether this engine's store can write (see `store::health`).
    doc["store"] = match app.conductor.store().health().degraded() {
        None => json!({"writable": true}),
        Some(d) => json!({
            "writable": false,
            "degraded_since": d.since.to_datetime(),
            "cause": d.cause,
            "reopened": d.reopened,
        }),
    };
    if detail {
        doc["drivers"] = json!(crate::hardware::Hardware::new(app.conductor.registry()).types());
        doc["created_at"] = json!(app.started_at.to_datetime());
        doc["updated_at"] = json!(app.conductor.store().clock().now().to_datetime());
    }
    doc
}

async fn conductors(
    app: State,
    axum::extract::Query(q): axum::extract::Query<Vec<(String, String)>>,
) -> Result<Json<Value>, ApiError> {
    const KNOWN: &[&str] = &[
        "detail", "fields", "limit", "marker", "sort_key", "sort_dir",
    ];
    if let Some((unknown, _)) = q.iter().find(|(k, _)| !KNOWN.contains(&k.as_str())) {
        return Err(ApiError::bad_request(format!(
            "Unknown argument: \"{unknown}\""
        )));
    }
    let detail = q
        .iter()
        .any(|(k, val)| k == "detail" && super::schema::parse_bool(&json!(val)) == Some(true));
    Ok(Json(json!({"conductors": [conductor_doc(&app, detail)]})))
}

async fn conductor(app: State, Path(hostname): Path<String>) -> Result<Json<Value>, ApiError> {
    if hostname != view::CONDUCTOR {
        return Err(ApiError::not_found(format!(
            "Conductor {hostname} could not be found."
        )));
    }
    Ok(Json(conductor_doc(&app, true)))
}
