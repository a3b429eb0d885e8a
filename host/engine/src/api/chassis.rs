//! `/v1/chassis`: kept and validated as Ironic does; a chassis with nodes cannot go.

use std::sync::Arc;

use axum::Router;
use axum::extract::{Extension, Path};
use axum::response::Response;
use axum::routing::get;
use serde_json::json;
use uuid::Uuid;

use super::http::error::ApiError;
use super::http::gate::TooOld;
use super::http::version::Version;
use super::node_list::Pairs;
use super::resources::{Resource, no_check};
use super::schema::{Field, Schema, Ty};
use super::{App, State};
use crate::store::documents::Doc;

pub const CHASSIS: Resource = Resource {
    kind: "Chassis",
    path: "chassis",
    key: "chassis",
    since: 1,
    patch_since: 1,
    schema: Schema {
        kind: "Chassis",
        fields: &[
            Field::create("uuid", Ty::Uuid, 1),
            Field::rw("description", Ty::Text, 1),
            Field::rw("extra", Ty::Map, 1),
            Field::ro("created_at", Ty::Text, 1),
            Field::ro("updated_at", Ty::Text, 1),
            Field::ro("nodes", Ty::Any, 1),
        ],
    },
    unique: &[],
    short: &["uuid", "description", "links"],
    filters: &[],
    sublinks: &["nodes"],
    check: no_check,
    on_create: None,
    on_delete: Some(|a, u, d| Box::pin(may_go(a, u, d))),
    shown: None,
    of_node: None,
    too_old_writes: TooOld::NotFound,
};

pub fn routes() -> Router<Arc<App>> {
    Router::new()
        .route(
            "/v1/chassis/{ident}/nodes",
            get(|a, v, p, q| nodes(a, v, p, q, false)),
        )
        .route(
            "/v1/chassis/{ident}/nodes/detail",
            get(|a, v, p, q| nodes(a, v, p, q, true)),
        )
}

/// The chassis' nodes, as the node list shows them.
async fn nodes(
    app: State,
    Extension(version): Extension<Version>,
    Path(ident): Path<String>,
    query: Pairs,
    detail: bool,
) -> Result<Response, ApiError> {
    let uuid = Uuid::parse_str(&ident)
        .map_err(|_| ApiError::bad_request(format!("Expected a UUID but received {ident}.")))?;
    app.conductor.store().document(CHASSIS.kind, uuid).await?;
    Ok(super::node_list::of_chassis(app, version, uuid, query, detail).await)
}

async fn may_go(app: &App, uuid: Uuid, _: &Doc) -> Result<(), ApiError> {
    let wanted = json!(uuid.to_string());
    let mut nodes = app.conductor.store().nodes_after(None);
    while let Some(node) = nodes.next().await {
        if node?.body.attrs.get("chassis_uuid") == Some(&wanted) {
            return Err(ApiError::bad_request(format!(
                "Chassis {uuid} contains nodes; remove them from the chassis first."
            )));
        }
    }
    Ok(())
}
