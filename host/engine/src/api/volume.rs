//! `/v1/volume/connectors` and `/v1/volume/targets`: kept and validated as Ironic does;
//! deployd has no storage backend to act on them.

use serde_json::{Value, json};

use super::App;
use super::http::error::ApiError;
use super::http::version::Version;
use super::resources::{Resource, check_node, missing, text};
use super::schema::{Field, Schema, Ty};
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
    on_delete: None,
    shown: None,
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
    on_delete: None,
    shown: None,
};

const CONNECTOR_TYPES: &[&str] = &["iqn", "ip", "mac", "wwnn", "wwpn", "port", "portgroup"];

async fn check_connector(
    app: &App,
    doc: &mut Doc,
    _: Option<&Doc>,
    _: Version,
) -> Result<(), ApiError> {
    check_node(app, doc).await?;
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
    _: Option<&Doc>,
    _: Version,
) -> Result<(), ApiError> {
    check_node(app, doc).await?;
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
