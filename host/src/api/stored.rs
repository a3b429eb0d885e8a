//! The stored-only resources and their checks: chassis, port groups, deploy templates,
//! volume connectors and volume targets (allocations, which act on nodes, are in
//! [`super::allocations`]). deployd keeps and validates them as Ironic does; it has no
//! storage backend or bonding to act on them.

use serde_json::{Value, json};
use uuid::Uuid;

use super::App;
use super::error::ApiError;
use super::resources::Resource;
use super::schema::{Field, Schema, Ty};
use super::version::Version;
use crate::node;
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
    on_delete: Some(chassis_may_go),
    shown: None,
};

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
    check: check_portgroup,
    on_create: None,
    on_delete: Some(portgroup_may_go),
    shown: None,
};

pub const DEPLOY_TEMPLATE: Resource = Resource {
    kind: "DeployTemplate",
    path: "deploy_templates",
    key: "deploy_templates",
    since: 55,
    patch_since: 55,
    schema: Schema {
        kind: "DeployTemplate",
        fields: &[
            Field::create("uuid", Ty::Uuid, 55),
            Field::rw("name", Ty::Text, 55),
            Field::rw("steps", Ty::Any, 55),
            Field::rw("extra", Ty::Map, 55),
            Field::ro("created_at", Ty::Text, 55),
            Field::ro("updated_at", Ty::Text, 55),
        ],
    },
    unique: &["name"],
    short: &["uuid", "name", "links"],
    filters: &[],
    sublinks: &[],
    check: check_deploy_template,
    on_create: None,
    on_delete: None,
    shown: None,
};

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
    check: check_connector,
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
    check: check_target,
    on_create: None,
    on_delete: None,
    shown: None,
};

/// What goes with a node when it is deleted: (kind, unique fields).
pub const OF_NODE: &[(&str, &[&str])] = &[
    (PORTGROUP.kind, PORTGROUP.unique),
    (VOLUME_CONNECTOR.kind, VOLUME_CONNECTOR.unique),
    (VOLUME_TARGET.kind, VOLUME_TARGET.unique),
];

fn no_check(_: &App, _: &mut Doc, _: Option<&Doc>, _: Version) -> Result<(), ApiError> {
    Ok(())
}

fn missing(field: &str) -> ApiError {
    ApiError::bad_request(format!("Mandatory field missing: '{field}'"))
}

fn text<'a>(doc: &'a Doc, field: &str) -> Option<&'a str> {
    doc.get(field).and_then(Value::as_str)
}

/// `node_uuid` must name an existing node (400 otherwise, as Ironic answers).
pub fn check_node(app: &App, doc: &mut Doc) -> Result<Uuid, ApiError> {
    let ident = text(doc, "node_uuid").ok_or_else(|| missing("node_uuid"))?;
    let node = app
        .conductor
        .store
        .find_node(ident)
        .map_err(|_| ApiError::bad_request(format!("Node {ident} could not be found.")))?;
    doc.insert("node_uuid".into(), json!(node.uuid()));
    Ok(node.uuid())
}

fn check_portgroup(
    app: &App,
    doc: &mut Doc,
    old: Option<&Doc>,
    _: Version,
) -> Result<(), ApiError> {
    check_node(app, doc)?;
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

fn portgroup_may_go(app: &App, uuid: Uuid, _: &Doc) -> Result<(), ApiError> {
    let ports = app.conductor.store.list_ports()?;
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

fn chassis_may_go(app: &App, uuid: Uuid, _: &Doc) -> Result<(), ApiError> {
    let wanted = json!(uuid.to_string());
    for node in app.conductor.store.nodes_after(None) {
        if node?.body.attrs.get("chassis_uuid") == Some(&wanted) {
            return Err(ApiError::bad_request(format!(
                "Chassis {uuid} contains nodes; remove them from the chassis first."
            )));
        }
    }
    Ok(())
}

/// A trait name as Ironic (and Placement) take them: upper case letters, digits and `_`,
/// at most 255 characters; custom ones start with `CUSTOM_`.
pub fn check_trait(name: &str) -> Result<(), ApiError> {
    let ok = !name.is_empty()
        && name.len() <= 255
        && name
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_');
    if ok {
        return Ok(());
    }
    Err(ApiError::bad_request(format!(
        "'{name}' does not match '^CUSTOM_[A-Z0-9_]+$' nor the form of a standard trait (upper case letters, digits and _, at most 255 characters)"
    )))
}

const STEP_INTERFACES: &[&str] = &[
    "bios",
    "deploy",
    "firmware",
    "management",
    "network",
    "power",
    "raid",
    "storage",
];

fn check_deploy_template(
    _: &App,
    doc: &mut Doc,
    _: Option<&Doc>,
    _: Version,
) -> Result<(), ApiError> {
    check_trait(text(doc, "name").ok_or_else(|| missing("name"))?)?;
    check_steps(doc, "priority")?;
    doc.entry("extra").or_insert(json!({}));
    Ok(())
}

/// A document's `steps`: at least one, each `{interface, step, args, <rank>}` with a
/// known interface and a non-negative rank (a deploy template's `priority`, a runbook's
/// `order`; Ironic takes a string of digits too). `args` defaults to `{}`.
pub fn check_steps(doc: &mut Doc, rank: &str) -> Result<(), ApiError> {
    let steps = doc
        .get_mut("steps")
        .and_then(Value::as_array_mut)
        .ok_or_else(|| missing("steps"))?;
    if steps.is_empty() {
        return Err(ApiError::bad_request(
            "[] is too short: at least one step is needed.",
        ));
    }
    for step in steps.iter_mut() {
        let shown = step.to_string();
        let obj = step.as_object_mut().ok_or_else(|| {
            ApiError::bad_request(format!("Invalid step {shown}: expected an object"))
        })?;
        let interface = obj
            .get("interface")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if !STEP_INTERFACES.contains(&interface) {
            return Err(ApiError::bad_request(format!(
                "Invalid step interface {interface:?}; expected one of {}",
                STEP_INTERFACES.join(", ")
            )));
        }
        if obj
            .get("step")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
        {
            return Err(missing("step"));
        }
        let value = match obj.get(rank) {
            Some(Value::Number(n)) => n.as_u64(),
            Some(Value::String(s)) if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) => {
                s.parse().ok()
            }
            _ => None,
        };
        let Some(value) = value else {
            return Err(ApiError::bad_request(format!(
                "A step's {rank} must be a non-negative integer: {shown}"
            )));
        };
        obj.insert(rank.into(), json!(value));
        match obj.get("args") {
            None | Some(Value::Null) => {
                obj.insert("args".into(), json!({}));
            }
            Some(Value::Object(_)) => {}
            Some(other) => {
                return Err(ApiError::bad_request(format!(
                    "A step's args must be an object, not {other}"
                )));
            }
        }
    }
    Ok(())
}

/// Ironic's limit on the traits of a node or a runbook.
pub const MAX_TRAITS: usize = 50;

pub fn too_many_traits() -> ApiError {
    ApiError::bad_request(format!("At most {MAX_TRAITS} traits are allowed."))
}

/// The body of a `PUT …/traits`: `{"traits": [...]}`, each a valid trait, without repeats.
pub fn trait_list(body: &[u8]) -> Result<Vec<String>, ApiError> {
    let doc: Value = super::error::parse(body)?;
    let Some(given) = doc.get("traits").and_then(Value::as_array) else {
        return Err(ApiError::bad_request("Expected {\"traits\": [...]}"));
    };
    let mut unique: Vec<String> = Vec::new();
    for t in given {
        let t = t
            .as_str()
            .ok_or_else(|| ApiError::bad_request("Every trait must be a string."))?;
        check_trait(t)?;
        if !unique.iter().any(|u| u == t) {
            unique.push(t.to_owned());
        }
    }
    if unique.len() > MAX_TRAITS {
        return Err(too_many_traits());
    }
    Ok(unique)
}

const CONNECTOR_TYPES: &[&str] = &["iqn", "ip", "mac", "wwnn", "wwpn", "port", "portgroup"];

fn check_connector(app: &App, doc: &mut Doc, _: Option<&Doc>, _: Version) -> Result<(), ApiError> {
    check_node(app, doc)?;
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

fn check_target(app: &App, doc: &mut Doc, _: Option<&Doc>, _: Version) -> Result<(), ApiError> {
    check_node(app, doc)?;
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
