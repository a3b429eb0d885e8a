//! `/v1/allocations`: reserving an available node by resource class and traits, as
//! Ironic's allocation API does for Nova-less deployments.
//!
//! A new allocation answers `allocating` at once; a task then looks for a node that is
//! `available`, not in maintenance, has a known power state, the resource class, every
//! requested trait, no instance and no allocation (and is among `candidate_nodes`, if
//! given), in random order, but a node named as the allocation first (Ironic 1.79). The node is taken under its claim with the conditions checked
//! again, so two allocations never take one node. The allocation ends `active` with the
//! node's uuid (the node's `instance_uuid` and `allocation_uuid` name it), or `error` with
//! a `last_error` that says what was asked.

use futures_util::future::BoxFuture;
use std::sync::Arc;

use axum::extract::{Extension, Path};
use axum::http::StatusCode;
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{Value, json};
use uuid::Uuid;

use super::http::error::ApiError;
use super::http::gate::TooOld;
use super::http::gate::since;
use super::http::version::Version;
use super::resources::Resource;
use super::schema::{Field, Schema, Ty};
use super::traits::check_trait;
use super::{App, State};
use crate::conductor::allocations;
use crate::node::strings;
use crate::store::StoreError;
use crate::store::documents::Doc;

pub const ALLOCATION: Resource = Resource {
    kind: allocations::KIND,
    path: "allocations",
    key: "allocations",
    since: 52,
    patch_since: 57,
    schema: Schema {
        kind: "Allocation",
        fields: &[
            Field::create("uuid", Ty::Uuid, 52),
            Field::rw("name", Ty::Text, 52),
            Field::create("node_uuid", Ty::Text, 52),
            Field::ro("state", Ty::Text, 52),
            Field::ro("last_error", Ty::Text, 52),
            Field::create("resource_class", Ty::Text, 52),
            Field::create("candidate_nodes", Ty::List, 52),
            Field::create("traits", Ty::List, 52),
            Field::rw("extra", Ty::Map, 52),
            Field::create("owner", Ty::Text, 60),
            // Backfill came with 1.58; Ironic refuses it before with a 400 of its own.
            Field::input("node", Ty::Text, 52),
            Field::ro("created_at", Ty::Text, 52),
            Field::ro("updated_at", Ty::Text, 52),
        ],
    },
    unique: allocations::UNIQUE,
    short: &[
        "uuid",
        "name",
        "node_uuid",
        "state",
        "last_error",
        "resource_class",
        "candidate_nodes",
        "traits",
        "extra",
        "owner",
        "created_at",
        "updated_at",
        "links",
    ],
    filters: &[
        ("node", 52),
        ("resource_class", 52),
        ("state", 52),
        ("owner", 60),
    ],
    sublinks: &[],
    check: |a, d, o, v| Box::pin(check(a, d, o, v)),
    on_create: Some(start),
    on_delete: Some(|a, u, d| Box::pin(release(a, u, d))),
    shown: None,
    of_node: None,
    too_old_writes: TooOld::NotAllowed,
};

pub fn routes() -> Router<Arc<App>> {
    Router::new().route(
        "/v1/nodes/{ident}/allocation",
        since(52, get(of_node).delete(remove_of_node)),
    )
}

/// The allocation that holds a node, if one does.
async fn holding(app: &App, node: Uuid) -> Result<Option<(Uuid, Doc)>, ApiError> {
    let wanted = json!(node);
    let mut allocations = app.conductor.store().documents_after(ALLOCATION.kind, None);
    while let Some(item) = allocations.next().await {
        let (uuid, doc) = item?;
        if doc.get("node_uuid") == Some(&wanted) {
            return Ok(Some((uuid, doc)));
        }
    }
    Ok(None)
}

/// A node an allocation request names (to backfill, or whose allocation to show): an
/// unknown one is the request's fault there, a 400, as Ironic answers it.
async fn named_node(app: &App, ident: &str) -> Result<crate::node::Node, ApiError> {
    app.conductor
        .store()
        .find_node(ident)
        .await
        .map_err(|e| match e {
            StoreError::NodeNotFound(_) => {
                ApiError::bad_request(format!("Node {ident} could not be found."))
            }
            other => other.into(),
        })
}

fn none_for(ident: &str) -> ApiError {
    ApiError::not_found(format!("Allocation for node {ident} was not found"))
}

/// `GET /v1/nodes/{node}/allocation`; an unknown node is a 400 here, as in Ironic.
async fn of_node(
    app: State,
    Extension(version): Extension<Version>,
    Path(ident): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let node = named_node(&app, &ident).await?;
    let (uuid, doc) = holding(&app, node.uuid())
        .await?
        .ok_or_else(|| none_for(&ident))?;
    let shown = super::resources::document(&app, &ALLOCATION, uuid, doc, version);
    Ok(Json(Value::Object(shown)))
}

/// `DELETE /v1/nodes/{node}/allocation`: frees the node as deleting the allocation does.
async fn remove_of_node(app: State, Path(ident): Path<String>) -> Result<StatusCode, ApiError> {
    let node = app.conductor.store().find_node(&ident).await?;
    let (uuid, doc) = holding(&app, node.uuid())
        .await?
        .ok_or_else(|| none_for(&ident))?;
    super::resources::delete(&ALLOCATION, &app, uuid, &doc).await
}

async fn check(
    app: &App,
    doc: &mut Doc,
    old: Option<&Doc>,
    version: Version,
) -> Result<(), ApiError> {
    if old.is_some() {
        return Ok(());
    }
    if let Some(name) = doc.get("name").and_then(Value::as_str) {
        crate::node::validate_name(name).map_err(|_| {
            ApiError::bad_request(format!(
                "Cannot create allocation with an invalid name '{name}'"
            ))
        })?;
    }
    if let Some(rc) = doc.get("resource_class").and_then(Value::as_str) {
        super::node_doc::check_resource_class(rc)?;
    }
    let backfill = doc.get("node").and_then(Value::as_str).map(str::to_owned);
    if backfill.is_some() && !version.at_least(58) {
        return Err(ApiError::bad_request(
            "Cannot set node when creating an allocation in this API version",
        ));
    }
    if let Some(ident) = backfill {
        // Backfilling: the allocation records a node already deployed (1.58).
        let node = named_node(app, &ident).await?;
        doc.insert("node".into(), json!(node.uuid()));
        if doc.get("resource_class").is_none_or(Value::is_null) {
            let class = node.body.attrs.get("resource_class").cloned();
            doc.insert("resource_class".into(), class.unwrap_or(Value::Null));
        }
    } else if let Some(ident) = doc
        .get("node_uuid")
        .and_then(Value::as_str)
        .map(str::to_owned)
    {
        let node = app.conductor.store().find_node(&ident).await?;
        doc.insert("candidate_nodes".into(), json!([node.uuid()]));
        doc.insert("node_uuid".into(), Value::Null);
    } else if doc.get("resource_class").is_none_or(Value::is_null) {
        return Err(ApiError::bad_request(
            "Mandatory field missing: 'resource_class'",
        ));
    }
    let (mut candidates, mut missing) = (Vec::new(), Vec::new());
    for ident in strings(doc, "candidate_nodes") {
        match app.conductor.store().find_node(&ident).await {
            Ok(node) => candidates.push(json!(node.uuid())),
            Err(_) => missing.push(ident),
        }
    }
    if !missing.is_empty() {
        return Err(ApiError::bad_request(format!(
            "Nodes cannot be found: {}",
            missing.join(", ")
        )));
    }
    doc.insert("candidate_nodes".into(), Value::Array(candidates));
    for t in strings(doc, "traits") {
        check_trait(&t)?;
    }
    doc.insert("traits".into(), json!(strings(doc, "traits")));
    doc.insert("state".into(), json!("allocating"));
    doc.insert("last_error".into(), Value::Null);
    doc.insert("node_uuid".into(), Value::Null);
    doc.entry("extra").or_insert(json!({}));
    Ok(())
}

/// Ironic's (Placement's) limit on a resource class name.
/// Whether a node may be given to the allocation `want`.
/// Starts the allocator on a new allocation, or backfills one that names its node.
pub fn start(app: Arc<App>, uuid: Uuid) -> BoxFuture<'static, ()> {
    Box::pin(async move { app.conductor.allocate(uuid).await })
}

pub async fn release(app: &App, uuid: Uuid, doc: &Doc) -> Result<(), ApiError> {
    Ok(app.conductor.release_allocation(uuid, doc).await?)
}
