//! A node's history (Ironic's node history, API 1.78): one event per provision state
//! change, written by the same code that makes the change, so no transition goes
//! unrecorded whoever made it (an operator, a driver step, the sweeper, recovery).
//!
//! Each event says where the node went, why (the event, or the error that failed it),
//! and how long it spent in the state it left: a deploy's timeline, phase by phase.
//!
//! Tree `history`: `node uuid (16 bytes) ‖ time (8 bytes, big-endian µs) ‖ sequence
//! (8 bytes, sled's monotonic id, for events in the same microsecond)` maps to the event's JSON, so a node's events are one ordered prefix scan. A node keeps
//! its last [`MAX_EVENTS`] events (Ironic's `node_history_max_entries` default); they
//! go with the node.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::StoreError;
use crate::clock::Timestamp;

/// Events kept per node; older ones are dropped as new ones come.
pub const MAX_EVENTS: usize = 300;

/// One history event, as the API shows it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Event {
    pub uuid: Uuid,
    pub created_at: chrono::DateTime<chrono::Utc>,
    /// `INFO`, or `ERROR` when the change failed the node.
    pub severity: String,
    pub event_type: String,
    pub event: String,
    pub conductor: String,
    pub user: Option<String>,
    /// The provision state the node entered (1.115).
    pub state: String,
    pub target_provision_state: Option<String>,
    /// How long the node was in the state it left (1.115).
    pub duration_seconds: Option<f64>,
}

pub struct History {
    db: sled::Db,
    tree: sled::Tree,
}

fn key(node: Uuid, at: Timestamp, sequence: u64) -> Vec<u8> {
    let micros = at.to_datetime().timestamp_micros().max(0) as u64;
    let mut k = Vec::with_capacity(32);
    k.extend_from_slice(node.as_bytes());
    k.extend_from_slice(&micros.to_be_bytes());
    k.extend_from_slice(&sequence.to_be_bytes());
    k
}

fn parse(value: &[u8]) -> Result<Event, StoreError> {
    serde_json::from_slice(value).map_err(|e| StoreError::Corrupt(format!("history event: {e}")))
}

impl History {
    pub(super) fn open(db: &sled::Db) -> Result<History, StoreError> {
        Ok(History {
            db: db.clone(),
            tree: db.open_tree("history")?,
        })
    }

    /// Appends an event (the caller flushes with the transition it records).
    pub fn record(&self, node: Uuid, at: Timestamp, event: &Event) -> Result<(), StoreError> {
        let json = serde_json::to_vec(event).expect("an event serialises");
        self.tree
            .insert(key(node, at, self.db.generate_id()?), json)?;
        let keys: Vec<sled::IVec> = self
            .tree
            .scan_prefix(node.as_bytes())
            .keys()
            .collect::<Result<_, _>>()?;
        for old in keys.iter().take(keys.len().saturating_sub(MAX_EVENTS)) {
            self.tree.remove(old)?;
        }
        Ok(())
    }

    /// A node's events, oldest first.
    pub fn list(&self, node: Uuid) -> Result<Vec<Event>, StoreError> {
        self.tree
            .scan_prefix(node.as_bytes())
            .values()
            .map(|v| parse(&v?))
            .collect()
    }

    pub fn get(&self, node: Uuid, event: Uuid) -> Result<Event, StoreError> {
        self.list(node)?
            .into_iter()
            .find(|e| e.uuid == event)
            .ok_or_else(|| StoreError::DocumentNotFound {
                kind: "Node history event",
                ident: event.to_string(),
            })
    }

    /// Drops a node's events (the node is gone).
    pub fn forget(&self, node: Uuid) -> Result<(), StoreError> {
        for k in self.tree.scan_prefix(node.as_bytes()).keys() {
            self.tree.remove(k?)?;
        }
        Ok(())
    }
}
