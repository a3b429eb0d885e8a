//! `/v1/volume/connectors` and `/v1/volume/targets`: kept and validated as Ironic does;
//! deployd has no storage backend to act on them.

use std::sync::Arc;

use axum::extract::Path;
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{Value, json};

use super::http::error::ApiError;
use super::http::gate::TooOld;
use super::http::gate::since;
use super::http::version::Version;
use super::resources::{Resource, check_node, missing, text};
use super::schema::{Field, Schema, Ty};
use super::{App, State, view};
use crate::node::Node;
use crate::store::documents::Doc;

pub const VOLUME_CONNECTOR: Resource = Resource {
    kind: "VolumeConnector",
    path: "volume/connectors",
    key: "connectors",
    since: 32,
    patch_since: 32,
    schema: Schema {
        kind: "VolumeConnector",
        fields: &[
            Field::create("uuid", Ty::Uuid, 32),
            Field::rw("node_uuid", Ty::Uuid, 32),
            Field::rw("type", Ty::Text, 32),
            Field::rw("connector_id", Ty::Text, 32),
            Field::rw("extra", Ty::Map, 32),
            Field::ro("created_at", Ty::Text, 32),
            Field::ro("updated_at", Ty::Text, 32),
        ],
    },
    unique: &["type+connector_id"],
    short: &["uuid", "type", "connector_id", "node_uuid", "links"],
    filters: &[("node", 32)],
    sublinks: &[],
    check: |a, d, o, v| Box::pin(check_connector(a, d, o, v)),
    on_create: None,
    on_delete: Some(|a, _, d| Box::pin(may_delete(a, d, "volume connector deletion"))),
    shown: None,
    of_node: Some(32),
    too_old_writes: TooOld::NotFound,
};

pub const VOLUME_TARGET: Resource = Resource {
    kind: "VolumeTarget",
    path: "volume/targets",
    key: "targets",
    since: 32,
    patch_since: 32,
    schema: Schema {
        kind: "VolumeTarget",
        fields: &[
            Field::create("uuid", Ty::Uuid, 32),
            Field::rw("node_uuid", Ty::Uuid, 32),
            Field::rw("volume_type", Ty::Text, 32),
            Field::rw("properties", Ty::Map, 32),
            Field::rw("boot_index", Ty::Int, 32),
            Field::rw("volume_id", Ty::Text, 32),
            Field::rw("extra", Ty::Map, 32),
            Field::ro("created_at", Ty::Text, 32),
            Field::ro("updated_at", Ty::Text, 32),
        ],
    },
    unique: &["node_uuid+boot_index", "node_uuid+volume_id"],
    short: &[
        "uuid",
        "volume_type",
        "boot_index",
        "volume_id",
        "node_uuid",
        "links",
    ],
    filters: &[("node", 32)],
    sublinks: &[],
    check: |a, d, o, v| Box::pin(check_target(a, d, o, v)),
    on_create: None,
    on_delete: Some(|a, _, d| Box::pin(may_delete(a, d, "volume target deletion"))),
    shown: None,
    of_node: Some(32),
    too_old_writes: TooOld::NotFound,
};

pub fn routes() -> Router<Arc<App>> {
    Router::new()
        .route("/v1/volume", since(32, get(|a| index(a, None))))
        .route("/v1/volume/", since(32, get(|a| index(a, None))))
        .route(
            "/v1/nodes/{node}/volume",
            since(32, get(|a, Path(n): Path<String>| index(a, Some(n)))),
        )
}

/// `/v1/volume` (or a node's `…/volume`): links to the connectors and the targets.
async fn index(app: State, node: Option<String>) -> Result<Json<Value>, ApiError> {
    let (kind, prefix) = match &node {
        Some(ident) => {
            let uuid = app.conductor.store().find_node(ident).await?.uuid();
            ("nodes", format!("{uuid}/volume"))
        }
        None => ("volume", String::new()),
    };
    let at = |sub: &str| match prefix.is_empty() {
        true => sub.to_owned(),
        false => format!("{prefix}/{sub}"),
    };
    let base = &app.base();
    Ok(Json(json!({
        "links": view::links(base, kind, &at("")),
        "connectors": view::links(base, kind, &at("connectors")),
        "targets": view::links(base, kind, &at("targets")),
    })))
}

const CONNECTOR_TYPES: &[&str] = &["iqn", "ip", "mac", "wwnn", "wwpn", "port", "portgroup"];

/// Ironic's refusal of a change to a node's storage while the node is in `state`.
fn refused(action: &str, node: &Node, state: &str) -> ApiError {
    ApiError::bad_request(format!(
        "The requested action \"{action}\" can not be performed on node \"{}\" while it is in state \"{state}\".",
        node.uuid()
    ))
}

/// How long a volume change waits for a power change in flight on its node.
const POWER_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// The node a volume document names, once a power change in flight on it has ended (for
/// up to [`POWER_WAIT`]): as Ironic's node lock makes the change wait for it, so "power
/// off, then change the volume" is judged on the power it asked for.
async fn powered(app: &App, doc: &Doc) -> Result<Node, ApiError> {
    let ident = text(doc, "node_uuid").unwrap_or_default();
    let until = tokio::time::Instant::now() + POWER_WAIT;
    loop {
        let node = app.conductor.store().find_node(ident).await?;
        if node.body.target_power_state.is_none() || tokio::time::Instant::now() >= until {
            return Ok(node);
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// A node's volume is changed only while the node is powered off (Ironic's rule: a
/// running instance may be using it).
async fn may_update(app: &App, doc: &Doc, action: &str) -> Result<(), ApiError> {
    let node = powered(app, doc).await?;
    match node.body.power_state.as_deref() {
        Some("power off") => Ok(()),
        other => Err(refused(action, &node, other.unwrap_or("None"))),
    }
}

/// ...and deleted only while it is powered off or the node is in a state it could be
/// deleted in itself.
async fn may_delete(app: &App, doc: &Doc, action: &str) -> Result<(), ApiError> {
    use crate::state_machine::ProvisionState as S;
    let node = powered(app, doc).await?;
    let deletable = matches!(node.state(), S::Manageable | S::Enroll | S::AdoptFailed);
    match node.body.power_state.as_deref() {
        Some("power off") => Ok(()),
        _ if deletable => Ok(()),
        other => Err(refused(action, &node, other.unwrap_or("None"))),
    }
}

async fn check_connector(
    app: &App,
    doc: &mut Doc,
    old: Option<&Doc>,
    _: Version,
) -> Result<(), ApiError> {
    check_node(app, doc).await?;
    if old.is_some() {
        may_update(app, doc, "volume connector update").await?;
    }
    let kind = text(doc, "type").ok_or_else(|| missing("type"))?;
    if !CONNECTOR_TYPES.contains(&kind) {
        return Err(ApiError::bad_request(format!(
            "Invalid volume connector type {kind:?}; expected one of {}",
            CONNECTOR_TYPES.join(", ")
        )));
    }
    text(doc, "connector_id").ok_or_else(|| missing("connector_id"))?;
    doc.entry("extra").or_insert(json!({}));
    Ok(())
}

async fn check_target(
    app: &App,
    doc: &mut Doc,
    old: Option<&Doc>,
    _: Version,
) -> Result<(), ApiError> {
    check_node(app, doc).await?;
    if old.is_some() {
        may_update(app, doc, "volume target update").await?;
    }
    text(doc, "volume_type").ok_or_else(|| missing("volume_type"))?;
    text(doc, "volume_id").ok_or_else(|| missing("volume_id"))?;
    match doc.get("boot_index").and_then(Value::as_i64) {
        Some(i) if i >= 0 => {}
        Some(_) => {
            return Err(ApiError::bad_request(
                "boot_index must be a non-negative integer.",
            ));
        }
        None => return Err(missing("boot_index")),
    }
    doc.entry("properties").or_insert(json!({}));
    doc.entry("extra").or_insert(json!({}));
    Ok(())
}
