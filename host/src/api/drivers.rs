//! `GET /v1/drivers`: the loaded WebAssembly drivers, as Ironic lists hardware types.
//!
//! The extension `/v1/deployd/drivers` loads and unloads drivers at runtime:
//! - `POST /v1/deployd/drivers[?memory_mib=N&deadline_ms=N]` with the component as the
//!   body: validated, compiled, made the active version of its name → 201 with the driver;
//!   kept in `plugins_dir` so a restart loads it again.
//! - `DELETE /v1/deployd/drivers/{name}[?force=true]`: refused with 409 while nodes are
//!   mid-flow on it, unless forced.

use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, Query};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{delete, get, post};
use serde::Deserialize;
use serde_json::{Value, json};

use super::error::ApiError;
use super::{App, MAX_DRIVER, State, base_url, view};
use crate::plugin::{Limits, LoadError, LoadedDriver};

pub fn routes() -> Router<Arc<App>> {
    Router::new()
        .route("/v1/drivers", get(list))
        .route("/v1/drivers/", get(list))
        .route("/v1/drivers/{name}", get(show))
        .route(
            "/v1/deployd/drivers",
            post(load).layer(DefaultBodyLimit::max(MAX_DRIVER)),
        )
        .route("/v1/deployd/drivers/{name}", delete(unload))
}

fn family(d: &LoadedDriver) -> &'static str {
    use crate::plugin::bindings::Family;
    match d.description.family {
        Family::Agent => "agent",
        Family::Pxe => "pxe",
        Family::Fake => "fake",
    }
}

fn doc(base: &str, d: &LoadedDriver) -> Value {
    let name = &d.description.name;
    json!({
        "name": name,
        "hosts": ["deployd"],
        "type": "dynamic",
        "links": view::links(base, "drivers", name),
        "properties": view::links(base, "drivers", &format!("{name}/properties")),
        "deployd": {
            "version": d.description.version,
            "family": family(d),
            "power": d.description.power,
            "summary": d.description.summary,
            "hash": d.hash,
            "size": d.size,
            "loaded_at": d.loaded_at.to_datetime(),
            "limits": d.limits,
        },
    })
}

async fn list(app: State, headers: HeaderMap) -> Json<Value> {
    let base = base_url(&headers);
    Json(
        json!({"drivers": app.conductor.registry.list().iter().map(|d| doc(&base, d)).collect::<Vec<_>>()}),
    )
}

async fn show(
    app: State,
    headers: HeaderMap,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let driver = app
        .conductor
        .registry
        .get(&name)
        .ok_or_else(|| ApiError::not_found(format!("The driver {name} is not loaded.")))?;
    Ok(Json(doc(&base_url(&headers), &driver)))
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct LoadQuery {
    memory_mib: Option<usize>,
    deadline_ms: Option<u64>,
}

async fn load(
    app: State,
    headers: HeaderMap,
    Query(q): Query<LoadQuery>,
    body: Bytes,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let mut limits = Limits::default();
    if let Some(m) = q.memory_mib {
        limits.memory_bytes = m << 20;
    }
    if let Some(d) = q.deadline_ms {
        limits.deadline = std::time::Duration::from_millis(d);
    }
    let driver = app
        .conductor
        .registry
        .load(&body, limits)
        .await
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    if let Some(dir) = &app.plugins_dir {
        std::fs::create_dir_all(dir)
            .and_then(|()| {
                std::fs::write(dir.join(format!("{}.wasm", driver.description.name)), &body)
            })
            .map_err(|e| {
                ApiError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    format!("driver loaded but not saved: {e}"),
                )
            })?;
    }
    Ok((StatusCode::CREATED, Json(doc(&base_url(&headers), &driver))))
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct UnloadQuery {
    force: Option<bool>,
}

async fn unload(
    app: State,
    Path(name): Path<String>,
    Query(q): Query<UnloadQuery>,
) -> Result<StatusCode, ApiError> {
    if app.conductor.registry.get(&name).is_none() {
        return Err(ApiError::not_found(format!(
            "The driver {name} is not loaded."
        )));
    }
    let in_use = app.conductor.nodes_pinned_to(&name)?;
    app.conductor
        .registry
        .unload(&name, in_use, q.force.unwrap_or(false))
        .map_err(|e| match e {
            LoadError::InUse { .. } => ApiError::conflict(e.to_string()),
            other => ApiError::bad_request(other.to_string()),
        })?;
    if let Some(dir) = &app.plugins_dir {
        let _ = std::fs::remove_file(dir.join(format!("{name}.wasm")));
    }
    Ok(StatusCode::NO_CONTENT)
}
