//! A node as an Ironic document: its fields ([`NODE`]), enrolling from a create body, and
//! the editable document a PATCH applies to.
//!
//! The engine's own fields are typed in [`NodeBody`]; the interfaces live in
//! `body.interfaces` and every other Ironic field in `body.attrs`, by its API name.

use serde_json::{Map, Value, json};
use uuid::Uuid;

use super::http::error::ApiError;
use super::http::version::Version;
use super::schema::{Field, Schema, Ty};
use crate::hardware::{self, Hardware, Interfaces};
use crate::node::{JsonMap, NewNode, NodeBody};

const FIELDS: &[Field] = &[
    Field::create("uuid", Ty::Uuid, 1),
    Field::rw("name", Ty::Text, 5),
    Field::rw("driver", Ty::Text, 1),
    Field::rw("driver_info", Ty::Map, 1),
    Field::ro("driver_internal_info", Ty::Map, 3),
    Field::rw("instance_info", Ty::Map, 1),
    Field::rw("properties", Ty::Map, 1),
    Field::rw("extra", Ty::Map, 1),
    Field::rw("chassis_uuid", Ty::Uuid, 1),
    Field::rw("instance_uuid", Ty::Uuid, 1),
    Field::rw("maintenance", Ty::Bool, 1),
    Field::rw("maintenance_reason", Ty::Text, 1),
    Field::ro("power_state", Ty::Text, 1),
    Field::ro("target_power_state", Ty::Text, 1),
    Field::ro("provision_state", Ty::Text, 1),
    Field::ro("target_provision_state", Ty::Text, 1),
    Field::ro("provision_updated_at", Ty::Text, 1),
    Field::ro("last_error", Ty::Text, 1),
    Field::ro("console_enabled", Ty::Bool, 1),
    Field::ro("reservation", Ty::Text, 1),
    Field::ro("created_at", Ty::Text, 1),
    Field::ro("updated_at", Ty::Text, 1),
    Field::ro("ports", Ty::Any, 1),
    Field::ro("states", Ty::Any, 1),
    Field::ro("inspection_started_at", Ty::Text, 6),
    Field::ro("inspection_finished_at", Ty::Text, 6),
    Field::ro("clean_step", Ty::Map, 7),
    Field::ro("raid_config", Ty::Map, 12),
    Field::ro("target_raid_config", Ty::Map, 12),
    Field::rw("network_interface", Ty::Text, 20),
    Field::rw("resource_class", Ty::Text, 21),
    Field::ro("portgroups", Ty::Any, 24),
    Field::rw("boot_interface", Ty::Text, 31),
    Field::rw("console_interface", Ty::Text, 31),
    Field::rw("deploy_interface", Ty::Text, 31),
    Field::rw("inspect_interface", Ty::Text, 31),
    Field::rw("management_interface", Ty::Text, 31),
    Field::rw("power_interface", Ty::Text, 31),
    Field::rw("raid_interface", Ty::Text, 31),
    Field::rw("vendor_interface", Ty::Text, 31),
    Field::ro("volume", Ty::Any, 32),
    Field::rw("storage_interface", Ty::Text, 33),
    Field::ro("traits", Ty::List, 37),
    Field::rw("rescue_interface", Ty::Text, 38),
    Field::rw("bios_interface", Ty::Text, 40),
    Field::ro("fault", Ty::Text, 42),
    Field::ro("deploy_step", Ty::Map, 44),
    Field::rw("conductor_group", Ty::Text, 46),
    Field::rw("automated_clean", Ty::OptionalBool, 47),
    Field::rw("protected", Ty::Bool, 48),
    Field::rw("protected_reason", Ty::Text, 48),
    Field::ro("conductor", Ty::Text, 49),
    Field::rw("owner", Ty::Text, 50),
    Field::rw("description", Ty::Text, 51),
    Field::ro("allocation_uuid", Ty::Uuid, 52),
    Field::rw("retired", Ty::Bool, 61),
    Field::rw("retired_reason", Ty::Text, 61),
    Field::rw("lessee", Ty::Text, 65),
    Field::rw("network_data", Ty::Map, 66),
    Field::ro("boot_mode", Ty::Text, 75),
    Field::ro("secure_boot", Ty::Bool, 75),
    Field::rw("shard", Ty::Text, 82),
    Field::rw("parent_node", Ty::Text, 83),
    Field::rw("firmware_interface", Ty::Text, 86),
    Field::ro("service_step", Ty::Map, 87),
    Field::rw("disable_power_off", Ty::Bool, 95),
    Field::rw("instance_name", Ty::Text, 104),
    Field::ro("health", Ty::Text, 109),
];

pub const NODE: Schema = Schema {
    kind: "Node",
    fields: FIELDS,
};

/// Every field kept in `body.attrs`, with its default, in the table's order: computed
/// once, since every node shown walks it.
pub fn attrs() -> &'static [(&'static str, Value)] {
    static ATTRS: std::sync::LazyLock<Vec<(&'static str, Value)>> =
        std::sync::LazyLock::new(|| {
            FIELDS
                .iter()
                .filter_map(|f| attr_default(f.name).map(|d| (f.name, d)))
                .collect()
        });
    &ATTRS
}

/// Fields kept in `body.attrs`, with the value a node has when none was given.
pub fn attr_default(name: &str) -> Option<Value> {
    Some(match name {
        "chassis_uuid"
        | "instance_uuid"
        | "resource_class"
        | "protected_reason"
        | "owner"
        | "description"
        | "allocation_uuid"
        | "retired_reason"
        | "lessee"
        | "automated_clean"
        | "fault"
        | "boot_mode"
        | "secure_boot"
        | "shard"
        | "parent_node"
        | "instance_name"
        | "health"
        | "inspection_started_at"
        | "inspection_finished_at" => Value::Null,
        "conductor_group" => json!(""),
        "protected" | "retired" | "disable_power_off" | "console_enabled" => json!(false),
        "traits" => json!([]),
        "network_data" | "raid_config" | "target_raid_config" => json!({}),
        _ => return None,
    })
}

fn interface_kind(field: &str) -> Option<&'static str> {
    let kind = field.strip_suffix("_interface")?;
    hardware::KINDS.iter().map(|(k, _)| *k).find(|k| *k == kind)
}

/// Reads a create body into what the store enrolls; the interfaces are resolved for the
/// hardware type (defaults filled in, unsupported ones refused).
pub fn new_node(body: &[u8], version: Version, hardware: &Hardware) -> Result<NewNode, ApiError> {
    let input: Map<String, Value> = super::http::error::parse(body)?;
    let input = NODE.create(input, version)?;
    let mut new = NewNode::default();
    let mut given = Interfaces::new();
    for (key, value) in input {
        let text = || value.as_str().map(str::to_owned);
        match key.as_str() {
            "uuid" => new.uuid = text().and_then(|s| Uuid::parse_str(&s).ok()),
            "name" => new.name = text(),
            "driver" => new.driver = text().unwrap_or_default(),
            "driver_info" => new.driver_info = map(value),
            "instance_info" => new.instance_info = map(value),
            "properties" => new.properties = map(value),
            "extra" => new.extra = map(value),
            "maintenance" | "maintenance_reason" => {
                return Err(ApiError::bad_request(format!(
                    "{key} can not be set at enrollment; use PUT /v1/nodes/{{node}}/maintenance"
                )));
            }
            field => match interface_kind(field) {
                Some(kind) => {
                    if let Some(name) = text() {
                        given.insert(kind.to_owned(), name);
                    }
                }
                None => {
                    new.attrs.insert(key, value);
                }
            },
        }
    }
    if let Some(rc) = new.attrs.get("resource_class").and_then(Value::as_str) {
        check_resource_class(rc)?;
    }
    check_conductor_group(&mut new.attrs)?;
    check_root_device(&new.properties)?;
    if new.driver.is_empty() {
        return Err(ApiError::bad_request("Mandatory field missing: 'driver'"));
    }
    new.interfaces = interfaces(hardware, &new.driver, &given, &new.attrs)?;
    Ok(new)
}

/// A node's interfaces, each default filled in and each given one checked; a driver no
/// engine runs is refused in Ironic's words, which name the node's conductor group.
fn interfaces(
    hardware: &Hardware,
    driver: &str,
    given: &Interfaces,
    attrs: &JsonMap,
) -> Result<Interfaces, ApiError> {
    hardware.resolve(driver, given).map_err(|e| match e {
        hardware::HardwareError::UnknownType(driver) => ApiError::bad_request(
            crate::conductor_groups::no_valid_host(&driver, conductor_group(attrs)),
        ),
        e => ApiError::bad_request(e.to_string()),
    })
}

fn map(v: Value) -> JsonMap {
    match v {
        Value::Object(m) => m,
        _ => JsonMap::new(),
    }
}

/// The document a PATCH applies to: every writable field, unmasked.
pub fn editable(body: &NodeBody) -> Map<String, Value> {
    let mut doc = Map::new();
    let b = body;
    for (key, value) in [
        ("name", json!(b.name)),
        ("driver", json!(b.driver)),
        ("driver_info", Value::Object(b.driver_info.clone())),
        ("instance_info", Value::Object(b.instance_info.clone())),
        ("properties", Value::Object(b.properties.clone())),
        ("extra", Value::Object(b.extra.clone())),
        ("maintenance", json!(b.maintenance)),
        ("maintenance_reason", json!(b.maintenance_reason)),
    ] {
        doc.insert(key.into(), value);
    }
    for field in NODE.fields {
        if let Some(kind) = interface_kind(field.name) {
            doc.insert(field.name.into(), json!(b.interfaces.get(kind)));
        } else if let Some(default) = attr_default(field.name) {
            let value = b.attrs.get(field.name).cloned().unwrap_or(default);
            doc.insert(field.name.into(), value);
        }
    }
    doc
}

/// Writes a patched document back into the body. Interfaces named by the patch are
/// checked; the others the node had are kept as they are while its driver stays, checked
/// against a new driver (as Ironic does), or, with `reset`, replaced by the new driver's
/// defaults.
pub fn write_back(
    body: &mut NodeBody,
    doc: Map<String, Value>,
    patched: &[String],
    hardware: &Hardware,
    reset: bool,
) -> Result<(), ApiError> {
    let driver_changed = doc.get("driver").and_then(Value::as_str) != Some(body.driver.as_str());
    check_reasons(body, &doc, patched)?;
    let (mut given, mut kept) = (Interfaces::new(), Interfaces::new());
    for (key, value) in doc {
        let text = value.as_str().map(str::to_owned);
        match key.as_str() {
            "name" => body.name = text,
            "driver" => {
                body.driver = text.ok_or_else(|| ApiError::bad_request("Cannot remove /driver."))?
            }
            "driver_info" => body.driver_info = map(value),
            "instance_info" => body.instance_info = map(value),
            "properties" => body.properties = map(value),
            "extra" => body.extra = map(value),
            "maintenance" => body.maintenance = value.as_bool().unwrap_or(false),
            "maintenance_reason" => body.maintenance_reason = text,
            field => match interface_kind(field) {
                // What the patch names is checked; what the node had, with its driver
                // unchanged, is kept as it is (it was checked when it was set).
                Some(kind) => match (text, patched.iter().any(|p| p == field)) {
                    (Some(name), true) => {
                        given.insert(kind.to_owned(), name);
                    }
                    (Some(name), false) if !driver_changed => {
                        kept.insert(kind.to_owned(), name);
                    }
                    (Some(name), false) if !reset => {
                        given.insert(kind.to_owned(), name);
                    }
                    _ => {}
                },
                None if attr_default(field) == Some(value.clone()) => {
                    body.attrs.remove(field);
                }
                None => {
                    body.attrs.insert(key, value);
                }
            },
        }
    }
    if let Some(rc) = body.attrs.get("resource_class").and_then(Value::as_str) {
        check_resource_class(rc)?;
    }
    check_conductor_group(&mut body.attrs)?;
    check_root_device(&body.properties)?;
    if !body.maintenance {
        body.maintenance_reason = None;
    }
    if body.attrs.get("retired") != Some(&Value::Bool(true)) {
        body.attrs.remove("retired_reason");
    }
    if body.attrs.get("protected") != Some(&Value::Bool(true)) {
        body.attrs.remove("protected_reason");
    }
    body.interfaces = interfaces(hardware, &body.driver, &given, &body.attrs)?;
    body.interfaces.extend(kept);
    Ok(())
}

/// A reason may only be given to a node that is (or becomes) protected or retired, as
/// Ironic checks it; clearing the flag in the same change clears its reason instead.
fn check_reasons(
    before: &NodeBody,
    doc: &Map<String, Value>,
    patched: &[String],
) -> Result<(), ApiError> {
    for (flag, reason) in [
        ("protected", "protected_reason"),
        ("retired", "retired_reason"),
    ] {
        let set = Some(&Value::Bool(true));
        let flagged = before.attrs.get(flag) == set || doc.get(flag) == set;
        let given = doc.get(reason).is_some_and(|r| !r.is_null());
        if !flagged && given && patched.iter().any(|p| p == reason) {
            return Err(ApiError::bad_request(format!(
                "The {reason} field can only be set when {flag} is True"
            )));
        }
    }
    Ok(())
}

/// A conductor group as Ironic takes it (see [`crate::conductor_groups::normalise`]),
/// kept lowercased; the default group is kept as no value.
fn check_conductor_group(attrs: &mut JsonMap) -> Result<(), ApiError> {
    let Some(given) = attrs.get("conductor_group") else {
        return Ok(());
    };
    let name = match given {
        Value::String(name) => name.as_str(),
        Value::Null => "",
        other => {
            return Err(ApiError::bad_request(format!(
                "Invalid conductor group {other}: a conductor group is a string."
            )));
        }
    };
    match crate::conductor_groups::normalise(name).map_err(ApiError::bad_request)? {
        name if name.is_empty() => attrs.remove("conductor_group"),
        name => attrs.insert("conductor_group".into(), Value::String(name)),
    };
    Ok(())
}

/// The conductor group of a node's fields ("" for the default group).
pub fn conductor_group(attrs: &JsonMap) -> &str {
    attrs
        .get("conductor_group")
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// `properties.root_device` must be hints the agent can read: a typo there would send the
/// image to the wrong disk or fail the deploy after the machine booted.
fn check_root_device(properties: &JsonMap) -> Result<(), ApiError> {
    deployd_wire::root_device::Hints::parse(properties.get("root_device"))
        .map(|_| ())
        .map_err(|e| ApiError::bad_request(format!("Invalid root device hints: {e}")))
}

/// The top-level fields a PATCH names.
pub fn patched_fields(ops: &Value) -> Vec<String> {
    ops.as_array()
        .into_iter()
        .flatten()
        .filter_map(|op| op.get("path")?.as_str())
        .filter_map(|p| p.trim_start_matches('/').split('/').next())
        .map(str::to_owned)
        .collect()
}

const MAX_RESOURCE_CLASS: usize = 80;

/// A resource class of at most [`MAX_RESOURCE_CLASS`] characters (JSON schema's words).
pub fn check_resource_class(rc: &str) -> Result<(), ApiError> {
    if rc.chars().count() <= MAX_RESOURCE_CLASS {
        return Ok(());
    }
    Err(ApiError::bad_request(format!("'{rc}' is too long")))
}

/// Node fields that lists of a node's parts (ports, port groups) filter on.
pub const NODE_FILTERS: &[&str] = &["conductor_group", "shard"];

/// The nodes whose `field` (one of [`NODE_FILTERS`]) is `value`.
pub async fn nodes_where(
    app: &super::App,
    field: &str,
    value: &str,
) -> Result<std::collections::HashSet<Uuid>, ApiError> {
    let mut found = std::collections::HashSet::new();
    let mut nodes = app.conductor.store().nodes_after(None);
    while let Some(node) = nodes.next().await {
        let node = node?;
        let default = attr_default(field).unwrap_or(Value::Null);
        let actual = node.body.attrs.get(field).unwrap_or(&default);
        if actual.as_str() == Some(value) {
            found.insert(node.uuid());
        }
    }
    Ok(found)
}
