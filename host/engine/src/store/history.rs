//! A node's history (Ironic's node history, API 1.78): one event per provision state
//! change, written by the same code that makes the change, so no transition goes
//! unrecorded whoever made it (an operator, a driver step, the sweeper, recovery).
//!
//! Each event says where the node went, why (the event, or the error that failed it),
//! and how long it spent in the state it left; milestones within a state (power on, the
//! agent's lookup and first heartbeat, an image transfer's start and end, with its bytes
//! and rate) sit between them: a deploy's timeline, phase by phase.
//!
//! Tree `history`: `node uuid (16 bytes) ‖ time (8 bytes, big-endian µs) ‖ sequence
//! (8 bytes, sled's monotonic id)` maps to a small record ([`Stored`]); what is the same
//! for every event (type, conductor, the wording of a state change) is added when read,
//! so a transition costs one small insert. An event's uuid is made of its time and
//! sequence, so it leads back to its key. A node keeps about its last [`MAX_EVENTS`]
//! events (Ironic's `node_history_max_entries` default): older ones are dropped every
//! [`PRUNE_EVERY`]th event, and never shown; they go with the node.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::{StoreError, record};
use crate::clock::Timestamp;

/// Events shown per node; older ones are dropped.
pub const MAX_EVENTS: usize = 300;
/// How often (in events, engine-wide) a node's old events are dropped.
const PRUNE_EVERY: u64 = 32;

/// A state change as stored.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Change {
    /// The state left and the state entered (Ironic's spelling).
    pub from: String,
    pub to: String,
    /// The state machine event.
    pub event: String,
    pub target: Option<String>,
    /// The error that failed the node, if this change did.
    pub error: Option<String>,
    /// Seconds spent in the state left.
    pub seconds: f64,
    /// A milestone within the state instead of a change of it (power on, the agent's
    /// lookup and first heartbeat, an image transfer's start and end): its words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// One history event, as the API shows it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Event {
    pub uuid: Uuid,
    pub created_at: chrono::DateTime<chrono::Utc>,
    /// `INFO`, or `ERROR` when the change failed the node.
    pub severity: &'static str,
    pub event_type: &'static str,
    pub event: String,
    pub conductor: &'static str,
    pub user: Option<String>,
    /// The provision state the node entered (1.115).
    pub state: String,
    pub target_provision_state: Option<String>,
    /// How long the node was in the state it left (1.115).
    pub duration_seconds: f64,
}

pub struct History {
    db: sled::Db,
    tree: sled::Tree,
    /// Off: nothing is recorded (what was recorded before is still shown).
    enabled: bool,
}

fn key(node: Uuid, micros: u64, sequence: u64) -> Vec<u8> {
    let mut k = Vec::with_capacity(32);
    k.extend_from_slice(node.as_bytes());
    k.extend_from_slice(&micros.to_be_bytes());
    k.extend_from_slice(&sequence.to_be_bytes());
    k
}

fn event(k: &[u8], value: &[u8]) -> Result<Event, StoreError> {
    let corrupt = |e: String| StoreError::Corrupt(format!("history event: {e}"));
    let number = |at: std::ops::Range<usize>| {
        k.get(at)
            .and_then(|b| b.try_into().ok())
            .map(u64::from_be_bytes)
            .ok_or_else(|| corrupt("short key".into()))
    };
    let (micros, sequence) = (number(16..24)?, number(24..32)?);
    let change: Change = serde_json::from_slice(value).map_err(|e| corrupt(e.to_string()))?;
    let created_at = chrono::DateTime::from_timestamp_micros(micros as i64)
        .ok_or_else(|| corrupt(format!("time {micros}")))?;
    Ok(Event {
        uuid: Uuid::from_u64_pair(micros, sequence),
        created_at,
        severity: if change.error.is_some() {
            "ERROR"
        } else {
            "INFO"
        },
        event_type: "provisioning",
        event: match (change.error, change.note) {
            (Some(error), _) => error,
            (None, Some(note)) => note,
            (None, None) => format!(
                "Provision state changed from \"{}\" to \"{}\" ({})",
                change.from, change.to, change.event
            ),
        },
        conductor: crate::node::CONDUCTOR,
        user: None,
        state: change.to,
        target_provision_state: change.target,
        duration_seconds: change.seconds,
    })
}

impl super::Store {
    /// Records a milestone of the node's flow in its history (see this module), in the
    /// state it is in now.
    pub fn milestone(&self, uuid: Uuid, note: String) -> Result<(), StoreError> {
        let t = self.w()?;
        let value = self.value(uuid)?;
        let (p, _) = record::split(uuid, &value)?;
        let change = Change {
            from: p.state.to_string(),
            to: p.state.to_string(),
            event: "milestone".into(),
            target: p.target.map(|t| t.to_string()),
            error: None,
            seconds: 0.0,
            note: Some(note),
        };
        t.history.record(uuid, self.clock.now(), &change)
    }
}

impl History {
    pub(super) fn open(db: &sled::Db, enabled: bool) -> Result<History, StoreError> {
        Ok(History {
            db: db.clone(),
            tree: db.open_tree("history")?,
            enabled,
        })
    }

    /// How many events are stored.
    pub fn len(&self) -> usize {
        self.tree.len()
    }

    /// Whether no event is stored.
    pub fn is_empty(&self) -> bool {
        self.tree.is_empty()
    }

    /// Appends an event (the caller flushes with the transition it records).
    pub fn record(&self, node: Uuid, at: Timestamp, change: &Change) -> Result<(), StoreError> {
        if !self.enabled {
            return Ok(());
        }
        let micros = at.to_datetime().timestamp_micros().max(0) as u64;
        let sequence = self.db.generate_id()?;
        let json = serde_json::to_vec(change).expect("a change serialises");
        self.tree.insert(key(node, micros, sequence), json)?;
        if sequence % PRUNE_EVERY == 0 {
            let keys: Vec<sled::IVec> = self
                .tree
                .scan_prefix(node.as_bytes())
                .keys()
                .collect::<Result<_, _>>()?;
            for old in keys.iter().take(keys.len().saturating_sub(MAX_EVENTS)) {
                self.tree.remove(old)?;
            }
        }
        Ok(())
    }

    /// A node's last [`MAX_EVENTS`] events, oldest first.
    pub fn list(&self, node: Uuid) -> Result<Vec<Event>, StoreError> {
        let mut events: Vec<Event> = self
            .tree
            .scan_prefix(node.as_bytes())
            .map(|item| {
                let (k, v) = item?;
                event(&k, &v)
            })
            .collect::<Result<_, _>>()?;
        let extra = events.len().saturating_sub(MAX_EVENTS);
        events.drain(..extra);
        Ok(events)
    }

    pub fn get(&self, node: Uuid, uuid: Uuid) -> Result<Event, StoreError> {
        let (micros, sequence) = uuid.as_u64_pair();
        let k = key(node, micros, sequence);
        match self.tree.get(&k)? {
            Some(v) => event(&k, &v),
            None => Err(StoreError::DocumentNotFound {
                kind: "Node history event",
                ident: uuid.to_string(),
            }),
        }
    }

    /// Drops a node's events (the node is gone).
    pub fn forget(&self, node: Uuid) -> Result<(), StoreError> {
        for k in self.tree.scan_prefix(node.as_bytes()).keys() {
            self.tree.remove(k?)?;
        }
        Ok(())
    }
}
