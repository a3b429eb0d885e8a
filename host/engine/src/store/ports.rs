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
    Ok(Port {
        uuid: Uuid::new_v4(),
        address: node::normalize_mac(mac)?,
        node_uuid: node,
        extra,
        pxe_enabled: true,
        attrs: node::JsonMap::new(),
        created_at: now,
        updated_at: None,
    })
}

/// A port after a change at `now`: its uuid kept, its address normalised, stamped.
pub(crate) fn changed(uuid: Uuid, port: &mut Port, now: Timestamp) -> Result<(), StoreError> {
    port.uuid = uuid;
    port.address = node::normalize_mac(&port.address)?;
    port.updated_at = Some(now);
    Ok(())
}

/// A port's name (API 1.88), if it has one.
pub(crate) fn name_of(port: &Port) -> Option<&str> {
    port.attrs.get("name").and_then(serde_json::Value::as_str)
}
