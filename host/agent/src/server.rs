//! The agent's HTTP endpoints (ironic-python-agent's `api/app.py`), on its own port.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::Json;
use axum::Router;
use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, put};
use serde::Deserialize;
use serde_json::{Value, json};

use super::commands::{AgentError, CommandApi};
use super::disk;

impl IntoResponse for AgentError {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.status()).unwrap_or(StatusCode::BAD_REQUEST);
        (
            status,
            Json(json!({"faultcode": "Client", "faultstring": self.to_string()})),
        )
            .into_response()
    }
}

#[derive(Deserialize)]
struct Params {
    agent_token: Option<String>,
    wait: Option<String>,
}

impl Params {
    fn wait(&self) -> bool {
        matches!(self.wait.as_deref(), Some("true" | "True" | "1"))
    }
}

#[derive(Deserialize)]
struct Run {
    name: String,
    #[serde(default)]
    params: Value,
}

pub fn router(api: Arc<CommandApi>) -> Router {
    Router::new()
        .route("/", get(root))
        .route("/v1", get(v1))
        .route("/v1/", get(v1))
        .route("/v1/status", get(status))
        .route("/v1/commands", get(list).post(run))
        .route("/v1/commands/", get(list).post(run))
        .route("/v1/commands/{id}", get(one))
        .route("/v1/disk", put(receive_disk))
        .with_state(api)
}

async fn root() -> Json<Value> {
    let v1 = json!({"id": "v1", "links": [{"href": "/v1/", "rel": "self"}]});
    Json(
        json!({"name": "deployd agent", "description": "deployd's ramdisk agent", "versions": [v1.clone()], "default_version": v1}),
    )
}

async fn v1() -> Json<Value> {
    Json(
        json!({"id": "v1", "links": [{"href": "/v1/", "rel": "self"}], "commands": [{"href": "/v1/commands", "rel": "self"}]}),
    )
}

async fn status() -> Json<Value> {
    Json(json!({"version": env!("CARGO_PKG_VERSION")}))
}

async fn list(
    State(api): State<Arc<CommandApi>>,
    Query(p): Query<Params>,
) -> Result<Json<Value>, AgentError> {
    api.check_token(p.agent_token.as_deref())?;
    Ok(Json(json!({"commands": api.list()})))
}

async fn run(
    State(api): State<Arc<CommandApi>>,
    Query(p): Query<Params>,
    body: axum::body::Bytes,
) -> Result<Json<Value>, AgentError> {
    api.check_token(p.agent_token.as_deref())?;
    let request: Run = serde_json::from_slice(&body)
        .map_err(|e| AgentError::InvalidParams(format!("invalid command body: {e}")))?;
    let mut result = api.execute(&request.name, &request.params)?;
    if p.wait() && result.is_running() {
        result = api.wait_for(&result.id).await?;
    }
    Ok(Json(
        serde_json::to_value(result).expect("a result serialises"),
    ))
}

async fn one(
    State(api): State<Arc<CommandApi>>,
    Path(id): Path<String>,
    Query(p): Query<Params>,
) -> Result<Json<Value>, AgentError> {
    api.check_token(p.agent_token.as_deref())?;
    let result = if p.wait() {
        api.wait_for(&id).await?
    } else {
        api.get(&id)?
    };
    Ok(Json(
        serde_json::to_value(result).expect("a result serialises"),
    ))
}

/// The pxe family's write path: the engine streams the image here, onto the disk.
async fn receive_disk(
    State(api): State<Arc<CommandApi>>,
    Query(p): Query<Params>,
    headers: axum::http::HeaderMap,
    body: Body,
) -> Response {
    if let Err(e) = api.check_token(p.agent_token.as_deref()) {
        return e.into_response();
    }
    if !api.is_exposed() {
        return AgentError::NotExposed.into_response();
    }
    let length = headers
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse().ok());
    api.total.store(length.unwrap_or(0), Ordering::SeqCst);
    let stream = body.into_data_stream();
    // The engine verifies the checksum end to end; sha256 here only counts and syncs.
    let written = async {
        let path = api.disk.chosen()?;
        let mut disk =
            disk::DiskWriter::open(&path, "sha256", &api.written, api.disk.throttle).await?;
        disk.write_all(stream).await?;
        disk.finish().await
    };
    match written.await {
        Ok(done) => Json(json!({
            "bytes_written": api.written.load(Ordering::SeqCst),
            "bytes_zeroed": done.zeroed,
            "sha256": done.digest,
        }))
        .into_response(),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            Json(json!({"faultcode": "Server", "faultstring": e})),
        )
            .into_response(),
    }
}
