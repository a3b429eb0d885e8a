//! The rules of a port every backend applies: a new port, a changed one, its name.

use uuid::Uuid;

use super::StoreError;
use crate::clock::Timestamp;
use crate::node::{self, Port};

/// A new port of `node` with `mac` (normalised), made at `now`.
pub(crate) fn new_port(
    node: Uuid,
    mac: &str,
    extra: node::JsonMap,
    now: Timestamp,
) -> Result<Port, StoreError> {
    inserted(
        Port {
            uuid: Uuid::new_v4(),
            address: mac.to_owned(),
            node_uuid: node,
            extra,
            pxe_enabled: true,
            attrs: node::JsonMap::new(),
            created_at: now,
            updated_at: None,
        },
        now,
    )
}

/// A port built by the caller, as it is stored: its address normalised, made at `now`.
pub(crate) fn inserted(mut port: Port, now: Timestamp) -> Result<Port, StoreError> {
    port.address = node::normalize_mac(&port.address)?;
    port.created_at = now;
    port.updated_at = None;
    no_nul(&port, None)?;
    Ok(port)
}

/// A port after a change at `now`: its uuid kept, its address normalised, stamped.
pub(crate) fn changed(
    uuid: Uuid,
    port: &mut Port,
    old: &Port,
    now: Timestamp,
) -> Result<(), StoreError> {
    port.uuid = uuid;
    port.address = node::normalize_mac(&port.address)?;
    port.updated_at = Some(now);
    no_nul(port, Some(old))
}

fn no_nul(port: &Port, old: Option<&Port>) -> Result<(), StoreError> {
    let json = serde_json::to_vec(port).expect("a port serialises");
    Ok(node::check_no_nul("the port", port, &json, old)?)
}

/// A port's name (API 1.88), if it has one.
pub(crate) fn name_of(port: &Port) -> Option<&str> {
    port.attrs.get("name").and_then(serde_json::Value::as_str)
}
