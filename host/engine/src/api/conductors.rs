//! `/v1/conductors` (1.49): the engines, as Ironic's conductors — this one (named
//! `deployd` on sled, where it is the only one), and on the shared store every other engine
//! its table names, alive or not, one per host.

use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::extract::Path;
use serde_json::{Value, json};

use super::http::error::ApiError;
use super::http::gate::since;
use super::{App, State, view};
use crate::store::EngineInfo;

pub fn routes() -> Router<Arc<App>> {
    Router::new()
        .route("/v1/conductors", since(49, axum::routing::get(conductors)))
        .route(
            "/v1/conductors/{hostname}",
            since(49, axum::routing::get(conductor)),
        )
}

/// This engine as a conductor.
fn this_engine(app: &App, detail: bool) -> Value {
    let store = app.conductor.store();
    let mut doc = json!({
        "hostname": store.conductor_name(),
        "conductor_group": store.conductor_group(),
        "alive": true,
        "links": view::links(&app.base(), "conductors", store.conductor_name()),
    });
    // Not Ironic's: whether this engine's store can write (see `store::health`).
    doc["store"] = match store.health().degraded() {
        None => json!({"writable": true}),
        Some(d) => json!({
            "writable": false,
            "degraded_since": d.since.to_datetime(),
            "cause": d.cause,
            "reopened": d.reopened,
        }),
    };
    if detail {
        doc["drivers"] = json!(app.conductor.hardware().types());
        doc["created_at"] = json!(app.started_at.to_datetime());
        doc["updated_at"] = json!(store.clock().now().to_datetime());
    }
    doc
}

/// Another engine on the shared store, as its row there says it.
fn other_engine(app: &App, e: &EngineInfo, detail: bool) -> Value {
    let mut doc = json!({
        "hostname": e.hostname,
        "conductor_group": e.conductor_group,
        "alive": e.alive,
        "links": view::links(&app.base(), "conductors", &e.hostname),
    });
    if detail {
        doc["drivers"] = json!(e.drivers);
        doc["created_at"] = json!(e.started_at.to_datetime());
        doc["updated_at"] = json!(e.lease_until.to_datetime());
    }
    doc
}

/// Every engine that serves (or served) the store: this one, and on the shared store the
/// others its table names, one per host.
async fn all(app: &App, detail: bool) -> Result<Vec<Value>, ApiError> {
    let me = app.conductor.store().conductor_name();
    let others = app.conductor.store().engines().await?;
    let mut docs = vec![this_engine(app, detail)];
    docs.extend(
        others
            .iter()
            .filter(|e| e.hostname != me)
            .map(|e| other_engine(app, e, detail)),
    );
    Ok(docs)
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
    Ok(Json(json!({"conductors": all(&app, detail).await?})))
}

async fn conductor(app: State, Path(hostname): Path<String>) -> Result<Json<Value>, ApiError> {
    let found = all(&app, true)
        .await?
        .into_iter()
        .find(|doc| doc["hostname"] == hostname.as_str());
    found
        .map(Json)
        .ok_or_else(|| ApiError::not_found(format!("Conductor {hostname} could not be found.")))
}
