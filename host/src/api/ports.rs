//! `/v1/ports`: the MAC addresses agents are looked up by.

use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::Path;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde::Deserialize;
use serde_json::{Value, json};
use uuid::Uuid;

use super::error::{ApiError, parse};
use super::{App, State, view};
use crate::node::JsonMap;

pub fn routes() -> Router<Arc<App>> {
    Router::new()
        .route("/v1/ports", get(list).post(create))
        .route("/v1/ports/", get(list).post(create))
        .route("/v1/ports/detail", get(list_detail))
        .route("/v1/ports/{uuid}", get(show).delete(remove))
        .route("/v1/nodes/{ident}/ports", get(of_node))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NewPort {
    address: String,
    node_uuid: Uuid,
    #[serde(default)]
    extra: JsonMap,
    pxe_enabled: Option<bool>,
}

async fn create(app: State, body: Bytes) -> Result<Response, ApiError> {
    let new: NewPort = parse(&body)?;
    let _ = new.pxe_enabled;
    let port = app
        .conductor
        .store
        .create_port(new.node_uuid, &new.address, new.extra)?;
    let base = &app.public_url;
    let location = format!("{base}/v1/ports/{}", port.uuid);
    Ok((
        StatusCode::CREATED,
        [(header::LOCATION, location)],
        Json(view::port(base, &port)),
    )
        .into_response())
}

fn short(doc: Value) -> Value {
    view::fields(doc, &["uuid", "address", "links"])
}

async fn list(app: State) -> Result<Json<Value>, ApiError> {
    let base = &app.public_url;
    let ports = app.conductor.store.list_ports()?;
    Ok(Json(
        json!({"ports": ports.iter().map(|p| short(view::port(base, p))).collect::<Vec<_>>()}),
    ))
}

async fn list_detail(app: State) -> Result<Json<Value>, ApiError> {
    let base = &app.public_url;
    let ports = app.conductor.store.list_ports()?;
    Ok(Json(
        json!({"ports": ports.iter().map(|p| view::port(base, p)).collect::<Vec<_>>()}),
    ))
}

async fn of_node(app: State, Path(ident): Path<String>) -> Result<Json<Value>, ApiError> {
    let node = app.conductor.store.find_node(&ident)?;
    let base = &app.public_url;
    let ports = app.conductor.store.ports_of(node.uuid())?;
    Ok(Json(
        json!({"ports": ports.iter().map(|p| short(view::port(base, p))).collect::<Vec<_>>()}),
    ))
}

fn port_uuid(text: &str) -> Result<Uuid, ApiError> {
    Uuid::parse_str(text)
        .map_err(|_| ApiError::not_found(format!("Port {text} could not be found.")))
}

async fn show(app: State, Path(id): Path<String>) -> Result<Json<Value>, ApiError> {
    let port = app.conductor.store.port(port_uuid(&id)?)?;
    Ok(Json(view::port(&app.public_url, &port)))
}

async fn remove(app: State, Path(id): Path<String>) -> Result<StatusCode, ApiError> {
    app.conductor.store.delete_port(port_uuid(&id)?)?;
    Ok(StatusCode::NO_CONTENT)
}
