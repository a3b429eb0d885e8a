//! `/v1/chassis`: kept and validated as Ironic does; a chassis with nodes cannot go.

use serde_json::json;
use uuid::Uuid;

use super::App;
use super::http::error::ApiError;
use super::resources::{Resource, no_check};
use super::schema::{Field, Schema, Ty};
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
};

async fn may_go(app: &App, uuid: Uuid, _: &Doc) -> Result<(), ApiError> {
    let wanted = json!(uuid.to_string());
    for node in app.conductor.store().nodes_after(None) {
        if node?.body.attrs.get("chassis_uuid") == Some(&wanted) {
            return Err(ApiError::bad_request(format!(
                "Chassis {uuid} contains nodes; remove them from the chassis first."
            )));
        }
    }
    Ok(())
}
