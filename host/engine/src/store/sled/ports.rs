//! Ports: a node's network interfaces, by MAC address.
//!
//! A port is one value in `ports`; three indexes point at it, each kept in the same sled
//! transaction as the port: `macs` (a MAC belongs to one port across the fleet, and agent
//! lookup finds its node by it), `port_names` (a name, from API 1.88, belongs to one
//! port) and `node_ports` (a node's ports in order). A taken MAC or name aborts the
//! transaction, so two creates racing for one cannot both win.
//!
//! `port_names` is derived from `ports` and rebuilt when the store opens, so a store
//! written before the index existed gets it, and it can never disagree with the ports.

use sled::transaction::{ConflictableTransactionError, Transactional, TransactionalTree};
use uuid::Uuid;

use super::{SledStore, StoreError, Trees, TxResult, abort, pair_key, parse_json, uuid_from};
use crate::node::{self, Port};
use crate::store::ports::{changed, inserted, name_of, new_port};

impl SledStore {
    /// Adds a port (a MAC address) to a node. MACs are unique across the fleet.
    pub fn create_port(
        &self,
        node: Uuid,
        mac: &str,
        extra: node::JsonMap,
    ) -> Result<Port, StoreError> {
        self.insert_port(new_port(node, mac, extra, self.clock.now())?)
    }

    /// Adds a port built by the caller (its address is normalised, its times set here).
    pub fn insert_port(&self, port: Port) -> Result<Port, StoreError> {
        let port = inserted(port, self.clock.now())?;
        let node = port.node_uuid;
        let json = serde_json::to_vec(&port).expect("a port serialises");
        let _owner = self.locks.lock(node);
        port_trees(&*self.w()?).transaction(|(nodes, ports, macs, names, node_ports)| {
            if nodes.get(node.as_bytes())?.is_none() {
                return abort(StoreError::NodeNotFound(node.to_string()));
            }
            // A port is never overwritten by another of the same uuid.
            if ports.get(port.uuid.as_bytes())?.is_some() {
                return abort(StoreError::DocumentTaken {
                    kind: "port",
                    field: "uuid",
                    value: port.uuid.to_string(),
                });
            }
            take_mac(macs, &port.address, port.uuid)?;
            take_port_name(names, name_of(&port), port.uuid)?;
            ports.insert(port.uuid.as_bytes(), json.as_slice())?;
            node_ports.insert(&pair_key(node, port.uuid), &[])?;
            Ok(())
        })?;
        self.flush()?;
        Ok(port)
    }

    /// Every port, in uuid order.
    pub fn list_ports(&self) -> Result<Vec<Port>, StoreError> {
        let t = self.t()?;
        t.ports
            .iter()
            .map(|item| parse_json("port", &item?.1))
            .collect()
    }

    pub fn port(&self, uuid: Uuid) -> Result<Port, StoreError> {
        let json = self
            .t()?
            .ports
            .get(uuid.as_bytes())?
            .ok_or_else(|| StoreError::PortNotFound(uuid.to_string()))?;
        parse_json("port", &json)
    }

    /// The port with this name, if one has it.
    pub fn port_named(&self, name: &str) -> Result<Option<Uuid>, StoreError> {
        let t = self.t()?;
        t.port_names
            .get(name.as_bytes())?
            .map(|uuid| uuid_from(&uuid))
            .transpose()
    }

    /// The port with this MAC address (normalised), if one has it.
    pub fn port_with_mac(&self, mac: &str) -> Result<Option<Port>, StoreError> {
        let t = self.t()?;
        match t.macs.get(mac.as_bytes())? {
            Some(uuid) => self.port(uuid_from(&uuid)?).map(Some),
            None => Ok(None),
        }
    }

    /// The node that owns one of these MAC addresses, as agent lookup needs. Addresses that
    /// are not MACs are ignored (Ironic drops them with a warning).
    pub fn node_by_macs<'a>(
        &self,
        macs: impl IntoIterator<Item = &'a str>,
    ) -> Result<Option<Uuid>, StoreError> {
        for mac in macs {
            let Ok(mac) = node::normalize_mac(mac) else {
                continue;
            };
            if let Some(port) = self.port_with_mac(&mac)? {
                return Ok(Some(port.node_uuid));
            }
        }
        Ok(None)
    }

    pub fn ports_of(&self, node: Uuid) -> Result<Vec<Port>, StoreError> {
        self.port_uuids_of(node)?
            .into_iter()
            .map(|p| self.port(p))
            .collect()
    }

    pub fn delete_port(&self, uuid: Uuid) -> Result<(), StoreError> {
        let t = self.w()?;
        let port = self.port(uuid)?;
        let _owner = self.locks.lock(port.node_uuid);
        let trees = (&t.ports, &t.macs, &t.port_names, &t.node_ports);
        trees.transaction(|(ports, macs, names, node_ports)| {
            let Some(json) = ports.remove(uuid.as_bytes())? else {
                return abort(StoreError::PortNotFound(uuid.to_string()));
            };
            unindex_port(macs, names, &json)?;
            node_ports.remove(&pair_key(port.node_uuid, uuid))?;
            Ok(())
        })?;
        self.flush()
    }

    /// Changes a port; a new address, name or node moves the port's index entries with it.
    pub fn update_port<E: From<StoreError>>(
        &self,
        uuid: Uuid,
        change: impl FnOnce(&mut Port) -> Result<(), E>,
    ) -> Result<Port, E> {
        let old = self.port(uuid)?;
        let mut port = old.clone();
        change(&mut port)?;
        changed(uuid, &mut port, &old, self.clock.now())?;
        let json = serde_json::to_vec(&port).expect("a port serialises");
        let old_json = serde_json::to_vec(&old).expect("a port serialises");
        let _old_owner = self.locks.lock(old.node_uuid);
        port_trees(&*self.w()?)
            .transaction(|(nodes, ports, macs, names, node_ports)| {
                if ports.get(uuid.as_bytes())?.as_deref() != Some(&old_json[..]) {
                    return abort(StoreError::PortNotFound(uuid.to_string()));
                }
                if nodes.get(port.node_uuid.as_bytes())?.is_none() {
                    return abort(StoreError::NodeNotFound(port.node_uuid.to_string()));
                }
                if port.address != old.address {
                    take_mac(macs, &port.address, uuid)?;
                    macs.remove(old.address.as_bytes())?;
                }
                if name_of(&port) != name_of(&old) {
                    take_port_name(names, name_of(&port), uuid)?;
                    if let Some(name) = name_of(&old) {
                        names.remove(name.as_bytes())?;
                    }
                }
                if port.node_uuid != old.node_uuid {
                    node_ports.remove(&pair_key(old.node_uuid, uuid))?;
                    node_ports.insert(&pair_key(port.node_uuid, uuid), &[])?;
                }
                ports.insert(uuid.as_bytes(), json.as_slice())?;
                Ok(())
            })
            .map_err(StoreError::from)?;
        drop(_old_owner);
        self.flush()?;
        Ok(port)
    }

    /// The trees a port's create or change writes in one transaction: nodes (read, for
    /// the owner), ports, and the MAC, name and node indexes.
    pub(super) fn port_uuids_of(&self, node: Uuid) -> Result<Vec<Uuid>, StoreError> {
        let t = self.t()?;
        t.node_ports
            .scan_prefix(node.as_bytes())
            .map(|item| uuid_from(&item?.0[16..]))
            .collect()
    }
}

/// Rebuilds `port_names` from the ports (see the module's doc).
pub(super) fn index_port_names(t: &Trees) -> Result<(), StoreError> {
    let mut batch = sled::Batch::default();
    for key in t.port_names.iter().keys() {
        batch.remove(key?);
    }
    for item in t.ports.iter() {
        let (uuid, json) = item?;
        let port: Port = parse_json("port", &json)?;
        if let Some(name) = name_of(&port) {
            batch.insert(name.as_bytes(), uuid);
        }
    }
    Ok(t.port_names.apply_batch(batch)?)
}

/// The trees a port's writes touch, for one transaction.
fn port_trees(
    t: &Trees,
) -> (
    &sled::Tree,
    &sled::Tree,
    &sled::Tree,
    &sled::Tree,
    &sled::Tree,
) {
    (&t.nodes, &t.ports, &t.macs, &t.port_names, &t.node_ports)
}

/// Takes `key` for `port` in a unique index (MACs, names); another port's key is
/// refused with `taken(key, holder)`.
fn take(
    index: &TransactionalTree,
    key: &str,
    port: Uuid,
    taken: fn(String, Uuid) -> StoreError,
) -> TxResult<()> {
    match index.insert(key.as_bytes(), port.as_bytes())? {
        Some(holder) if holder != port.as_bytes() => {
            let holder = uuid_from(&holder).map_err(ConflictableTransactionError::Abort)?;
            abort(taken(key.to_owned(), holder))
        }
        _ => Ok(()),
    }
}

fn take_mac(macs: &TransactionalTree, mac: &str, port: Uuid) -> TxResult<()> {
    take(macs, mac, port, |mac, port| StoreError::MacTaken {
        mac,
        port,
    })
}

fn take_port_name(names: &TransactionalTree, name: Option<&str>, port: Uuid) -> TxResult<()> {
    match name {
        Some(name) => take(names, name, port, |name, port| StoreError::PortNameTaken {
            name,
            port,
        }),
        None => Ok(()),
    }
}

/// Drops a removed port (its stored JSON) from the MAC and name indexes.
pub(super) fn unindex_port(
    macs: &TransactionalTree,
    names: &TransactionalTree,
    json: &[u8],
) -> TxResult<()> {
    let port: Port = parse_json("port", json).map_err(ConflictableTransactionError::Abort)?;
    macs.remove(port.address.as_bytes())?;
    if let Some(name) = name_of(&port) {
        names.remove(name.as_bytes())?;
    }
    Ok(())
}
