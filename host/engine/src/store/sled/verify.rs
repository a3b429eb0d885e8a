//! `deployd store verify`: a store at rest checked through, with the engine stopped.
//!
//! Opening already refuses a store that lost data (its manifest), one sled cannot read,
//! and one of another format. Verify then reads every record and every index entry:
//! each node and port parses, each name, MAC and node-port entry agrees with its record
//! both ways, each document index entry names a document. A stale deadline entry is no
//! fault (the engine drops it at start); it is counted.

use std::path::Path;

use serde::Serialize;

use super::{StoreConfig, StoreError, Trees, pair_key, parse_json, record, uuid_from};
use crate::node::Port;

/// The problems shown; past these, only their count.
const SHOWN: usize = 100;

#[derive(Debug, Default, Serialize)]
pub struct Verified {
    pub nodes: u64,
    pub ports: u64,
    pub documents: u64,
    pub history_events: u64,
    pub stale_deadlines: u64,
    pub problems: u64,
    /// The first [`SHOWN`] problems, in words.
    pub found: Vec<String>,
}

impl Verified {
    fn problem(&mut self, what: String) {
        self.problems += 1;
        if self.found.len() < SHOWN {
            self.found.push(what);
        }
    }
}

/// Verifies the store in `path` (see the module's doc).
pub fn verify(path: &Path, config: &StoreConfig) -> Result<Verified, StoreError> {
    if !path.exists() {
        return Err(StoreError::Manifest(format!(
            "there is no store in {}",
            path.display()
        )));
    }
    let t = Trees::open(path, config)?;
    let mut v = Verified::default();
    for item in t.nodes.iter() {
        let (key, value) = item?;
        let uuid = uuid_from(&key)?;
        v.nodes += 1;
        let body = record::split(uuid, &value)
            .and_then(|(_, json)| parse_json::<serde_json::Value>("node", json));
        match body {
            Err(e) => v.problem(format!("node {uuid}: {e}")),
            Ok(body) => {
                if let Some(name) = body["name"].as_str()
                    && t.names.get(name.as_bytes())?.as_deref() != Some(uuid.as_bytes())
                {
                    v.problem(format!(
                        "node {uuid}: its name {name:?} is not indexed to it"
                    ));
                }
            }
        }
    }
    for item in t.names.iter() {
        let (name, uuid) = item?;
        let named = t.nodes.get(&uuid)?.and_then(|value| {
            let uuid = uuid_from(&uuid).ok()?;
            let (_, json) = record::split(uuid, &value).ok()?;
            let body: serde_json::Value = serde_json::from_slice(json).ok()?;
            Some(body["name"].as_str() == Some(&*String::from_utf8_lossy(&name)))
        });
        if named != Some(true) {
            v.problem(format!(
                "the name {:?} is indexed to no node of that name",
                String::from_utf8_lossy(&name)
            ));
        }
    }
    for item in t.ports.iter() {
        let (key, json) = item?;
        v.ports += 1;
        let port: Port = match parse_json("port", &json) {
            Ok(p) => p,
            Err(e) => {
                v.problem(format!("port {:02x?}: {e}", &key[..]));
                continue;
            }
        };
        if !t.nodes.contains_key(port.node_uuid.as_bytes())? {
            v.problem(format!(
                "port {}: its node {} does not exist",
                port.uuid, port.node_uuid
            ));
        }
        if t.macs.get(port.address.as_bytes())?.as_deref() != Some(port.uuid.as_bytes()) {
            v.problem(format!(
                "port {}: its MAC {} is not indexed to it",
                port.uuid, port.address
            ));
        }
        if !t
            .node_ports
            .contains_key(pair_key(port.node_uuid, port.uuid))?
        {
            v.problem(format!(
                "port {}: it is not listed under its node",
                port.uuid
            ));
        }
    }
    for item in t.macs.iter() {
        let (mac, port) = item?;
        if !t.ports.contains_key(&port)? {
            v.problem(format!(
                "the MAC {} is indexed to a port that does not exist",
                String::from_utf8_lossy(&mac)
            ));
        }
    }
    for item in t.node_ports.iter() {
        let (key, _) = item?;
        if key.len() != 32 || !t.ports.contains_key(&key[16..])? {
            v.problem(format!("a node-port entry {:02x?} names no port", &key[..]));
        }
    }
    for item in t.deadlines.iter() {
        let (key, _) = item?;
        let (deadline, uuid) = record::parse_deadline_key(&key)?;
        let live = match t.nodes.get(uuid.as_bytes())? {
            Some(value) => {
                record::split(uuid, &value).is_ok_and(|(p, _)| p.indexed == Some(deadline))
            }
            None => false,
        };
        v.stale_deadlines += u64::from(!live);
    }
    v.documents = t.docs.docs.len() as u64;
    for item in t.docs.index.iter() {
        let (key, uuid) = item?;
        let kind_len = key.iter().position(|&b| b == 0).unwrap_or(key.len());
        let mut doc = key[..kind_len].to_vec();
        doc.push(0);
        doc.extend_from_slice(&uuid);
        if !t.docs.docs.contains_key(doc)? {
            v.problem(format!(
                "the document index entry {:?} names no document",
                String::from_utf8_lossy(&key)
            ));
        }
    }
    match t.history.count() {
        Ok(events) => v.history_events = events,
        Err(StoreError::Corrupt(what)) => v.problem(format!("damaged: {what}")),
        Err(e) => return Err(e),
    }
    Ok(v)
}
