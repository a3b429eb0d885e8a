//! `/v1/portgroups`: kept and validated as Ironic does (deployd bonds nothing); a port
//! group with member ports cannot go.

use serde_json::{Value, json};
use uuid::Uuid;

use super::App;
use super::http::error::ApiError;
use super::http::gate::TooOld;
use super::http::version::Version;
use super::resources::{Resource, check_node, text};
use super::schema::{Field, Schema, Ty};
use crate::node;
use crate::store::documents::Doc;

pub const PORTGROUP: Resource = Resource {
    kind: "Portgroup",
    path: "portgroups",
    key: "portgroups",
    since: 23,
    patch_since: 23,
    schema: Schema {
        kind: "Portgroup",
        fields: &[
            Field::create("uuid", Ty::Uuid, 23),
            Field::rw("name", Ty::Text, 23),
            Field::rw("address", Ty::Text, 23),
            Field::rw("node_uuid", Ty::Uuid, 23),
            Field::rw("extra", Ty::Map, 23),
            Field::rw("standalone_ports_supported", Ty::Bool, 23),
            Field::ro("internal_info", Ty::Map, 23),
            Field::rw("mode", Ty::Text, 26),
            Field::rw("properties", Ty::Map, 26),
            Field::rw("physical_network", Ty::Text, 102),
            Field::rw("category", Ty::Text, 103),
            Field::ro("dynamic_portgroup", Ty::Bool, 111),
            Field::ro("created_at", Ty::Text, 23),
            Field::ro("updated_at", Ty::Text, 23),
            Field::ro("ports", Ty::Any, 23),
        ],
    },
    unique: &["name", "address"],
    short: &["uuid", "address", "name", "links"],
    filters: &[
        ("node", 23),
        ("address", 23),
        ("conductor_group", 99),
        ("shard", 106),
    ],
    sublinks: &["ports"],
    check: |a, d, o, v| Box::pin(check_portgroup(a, d, o, v)),
    on_create: None,
    on_delete: Some(|a, u, d| Box::pin(portgroup_may_go(a, u, d))),
    shown: None,
    of_node: Some(24),
    too_old_writes: TooOld::NotFound,
};

async fn check_portgroup(
    app: &App,
    doc: &mut Doc,
    old: Option<&Doc>,
    _: Version,
) -> Result<(), ApiError> {
    check_node(app, doc).await?;
    if let Some(mac) = text(doc, "address") {
        let mac = node::normalize_mac(mac).map_err(|e| ApiError::bad_request(e.to_string()))?;
        doc.insert("address".into(), json!(mac));
    }
    if let Some(name) = text(doc, "name") {
        node::validate_name(name).map_err(|e| {
            ApiError::bad_request(e.to_string().replace("node name", "port group name"))
        })?;
    }
    if old.is_none() {
        doc.entry("standalone_ports_supported")
            .or_insert(json!(true));
        doc.entry("mode").or_insert(json!("active-backup"));
        doc.entry("properties").or_insert(json!({}));
        doc.entry("internal_info").or_insert(json!({}));
        doc.entry("extra").or_insert(json!({}));
        doc.entry("dynamic_portgroup").or_insert(json!(false));
    }
    if doc
        .get("standalone_ports_supported")
        .is_some_and(Value::is_null)
    {
        doc.insert("standalone_ports_supported".into(), json!(true));
    }
    Ok(())
}

async fn portgroup_may_go(app: &App, uuid: Uuid, _: &Doc) -> Result<(), ApiError> {
    let ports = app.conductor.store().list_ports().await?;
    let member = ports
        .iter()
        .find(|p| p.attrs.get("portgroup_uuid").and_then(Value::as_str) == Some(&uuid.to_string()));
    match member {
        Some(p) => Err(ApiError::bad_request(format!(
            "Port group {uuid} still has ports (port {}). Remove them first.",
            p.uuid
        ))),
        None => Ok(()),
    }
}
