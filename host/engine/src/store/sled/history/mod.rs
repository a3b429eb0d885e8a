//! A node's history (Ironic's node history, API 1.78): one event per provision state
//! change, written by the same code that makes the change, so no transition goes
//! unrecorded whoever made it (an operator, a driver step, the sweeper, recovery).
//!
//! Each event says where the node went, why (the event, or the error that failed it),
//! and how long it spent in the state it left; milestones within a state (power on, the
//! agent's lookup and first heartbeat, an image transfer's start and end, with its bytes
//! and rate) sit between them: a deploy's timeline, phase by phase.
//!
//! Tree `history`: `node uuid (16 bytes) ‖ 0xff ‖ chunk number (u32, big-endian)` maps to
//! a chunk of the node's events, appended to until it holds [`CHUNK_BYTES`] (see
//! [`encoding`]: about 38 bytes for a state change). A key per event cost sled a key, an
//! index slot and its share of a leaf each (history made a node 2–4× larger); a key per
//! chunk makes a node's first dozen events one small value beside it. What is the same for
//! every event (type, conductor, the wording of a state change) is added when read.
//! Stores of format 3 and before hold `node uuid ‖ time ‖ sequence` keys with a JSON
//! event each; they sort before the chunks (a time's first byte is 0 until the year
//! 2540) and are read as they are.
//!
//! An event's uuid is made of its time and sequence (sled's monotonic id), so it is
//! unique and leads back to the event. A node keeps about its last [`MAX_EVENTS`] events
//! (Ironic's `node_history_max_entries` default): older chunks are dropped every
//! [`PRUNE_EVERY`]th event, and never shown; they go with the node.

mod encoding;

use uuid::Uuid;

use super::{StoreError, record};
use crate::clock::Timestamp;
use crate::store::history::{Event, MAX_EVENTS};
use crate::store::history::{MILESTONE, no_event, shown};
pub use encoding::Change;
pub(super) use encoding::Entry;

/// How often (in events, engine-wide) a node's old events are dropped.
const PRUNE_EVERY: u64 = 32;
/// A chunk takes events until it is this long; then the next chunk starts.
const CHUNK_BYTES: usize = 480;
/// The byte after the node's uuid in a chunk's key.
const CHUNK_MARK: u8 = 0xff;

pub struct History {
    db: sled::Db,
    tree: sled::Tree,
    /// Off: nothing is recorded (what was recorded before is still shown).
    enabled: bool,
}

fn chunk_key(node: Uuid, chunk: u32) -> [u8; 21] {
    let mut k = [0u8; 21];
    k[..16].copy_from_slice(node.as_bytes());
    k[16] = CHUNK_MARK;
    k[17..].copy_from_slice(&chunk.to_be_bytes());
    k
}

/// The chunk number of a chunk's key; `None` for a format 3 event's key.
fn chunk_of(key: &[u8]) -> Option<u32> {
    match key {
        [_node @ .., CHUNK_MARK, a, b, c, d] if key.len() == 21 => {
            Some(u32::from_be_bytes([*a, *b, *c, *d]))
        }
        _ => None,
    }
}

fn corrupt(what: String) -> StoreError {
    StoreError::Corrupt(format!("history of node {what}"))
}

/// The events under one key, oldest first: a chunk's, or a format 3 key's one.
fn entries_of(node: Uuid, key: &[u8], value: &[u8]) -> Result<Vec<Entry>, StoreError> {
    if chunk_of(key).is_some() {
        return encoding::entries(value)
            .ok_or_else(|| corrupt(format!("{node}: chunk {value:02x?}")));
    }
    let number = |at: std::ops::Range<usize>| {
        key.get(at)
            .and_then(|b| b.try_into().ok())
            .map(u64::from_be_bytes)
    };
    let (Some(micros), Some(sequence), 32) = (number(16..24), number(24..32), key.len()) else {
        return Err(corrupt(format!("{node}: key {key:02x?}")));
    };
    let change =
        encoding::decode(value).ok_or_else(|| corrupt(format!("{node}: event {value:02x?}")))?;
    Ok(vec![Entry {
        micros,
        sequence,
        change,
    }])
}

fn event(node: Uuid, entry: Entry) -> Result<Event, StoreError> {
    shown(node, entry.micros, entry.sequence, entry.change)
}

impl super::SledStore {
    /// Records a milestone of the node's flow in its history (see this module), in the
    /// state it is in now.
    pub fn milestone(&self, uuid: Uuid, note: String) -> Result<(), StoreError> {
        self.event_in_place(uuid, None, Some(&note))
    }

    /// Records an operation on the node that failed outside any flow (a BMC call the API
    /// took and the management interface could not do), as an error event.
    pub fn failure(&self, uuid: Uuid, error: String) -> Result<(), StoreError> {
        self.event_in_place(uuid, Some(&error), None)
    }

    fn event_in_place(
        &self,
        uuid: Uuid,
        error: Option<&str>,
        note: Option<&str>,
    ) -> Result<(), StoreError> {
        let t = self.w()?;
        let value = self.value(uuid)?;
        let (p, _) = record::split(uuid, &value)?;
        let change = Change {
            from: p.state,
            to: p.state,
            event: MILESTONE,
            target: p.target,
            error,
            seconds: 0.0,
            note,
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

    /// How many events are stored (reading every chunk: for `store verify`).
    pub fn count(&self) -> Result<u64, StoreError> {
        let mut count = 0;
        for item in self.tree.iter() {
            let (key, value) = item?;
            let node = super::uuid_from(key.get(..16).unwrap_or(&key))?;
            count += entries_of(node, &key, &value)?.len() as u64;
        }
        Ok(count)
    }

    /// Appends an event to the node's last chunk, or starts the next one (the caller
    /// flushes with the transition it records). A compare-and-swap, so two events of one
    /// node recorded at once (a milestone beside a transition) both land, in some order.
    pub fn record(&self, node: Uuid, at: Timestamp, change: &Change) -> Result<(), StoreError> {
        if !self.enabled {
            return Ok(());
        }
        let micros = at.to_datetime().timestamp_micros().max(0) as u64;
        let sequence = self.db.generate_id()?;
        self.append(node, micros, sequence, change)?;
        if sequence % PRUNE_EVERY == 0 {
            self.prune(node)?;
        }
        Ok(())
    }

    /// Appends an event made at `micros` with `sequence` (a restore's, as its backup has
    /// it) to the node's last chunk, or starts the next one.
    pub(super) fn append(
        &self,
        node: Uuid,
        micros: u64,
        sequence: u64,
        change: &Change,
    ) -> Result<(), StoreError> {
        loop {
            let last = self
                .tree
                .scan_prefix(node.as_bytes())
                .next_back()
                .transpose()?;
            let (number, old) = match last.as_ref().map(|(k, v)| (chunk_of(k), v)) {
                Some((Some(n), v)) if v.len() < CHUNK_BYTES => (n, Some(v)),
                Some((Some(n), _)) => (n + 1, None),
                // None yet, or only format 3 events.
                _ => (0, None),
            };
            let mut chunk = Vec::with_capacity(CHUNK_BYTES + 64);
            chunk.extend_from_slice(old.map_or(&[][..], |v| v));
            encoding::append(&mut chunk, micros, sequence, change);
            let key = chunk_key(node, number);
            if self.tree.compare_and_swap(key, old, Some(chunk))?.is_ok() {
                return Ok(());
            }
        }
    }

    /// Drops the node's oldest keys while the rest still hold [`MAX_EVENTS`]. A damaged
    /// key counts as one event: pruning runs inside a transition that has already moved
    /// the node, which must not fail for it (the damage is `store verify`'s to report).
    fn prune(&self, node: Uuid) -> Result<(), StoreError> {
        let mut counts = Vec::new();
        for item in self.tree.scan_prefix(node.as_bytes()) {
            let (key, value) = item?;
            let events = entries_of(node, &key, &value).map_or(1, |e| e.len());
            counts.push((events, key));
        }
        let mut total: usize = counts.iter().map(|(n, _)| n).sum();
        for (n, key) in counts {
            if total - n < MAX_EVENTS {
                break;
            }
            self.tree.remove(key)?;
            total -= n;
        }
        Ok(())
    }

    /// All the node's stored entries, oldest first.
    pub(super) fn entries(&self, node: Uuid) -> Result<Vec<Entry>, StoreError> {
        let mut all = Vec::new();
        for item in self.tree.scan_prefix(node.as_bytes()) {
            let (key, value) = item?;
            all.extend(entries_of(node, &key, &value)?);
        }
        Ok(all)
    }

    /// A node's last [`MAX_EVENTS`] events, oldest first.
    pub fn list(&self, node: Uuid) -> Result<Vec<Event>, StoreError> {
        let mut entries = self.entries(node)?;
        let extra = entries.len().saturating_sub(MAX_EVENTS);
        entries
            .drain(extra..)
            .map(|entry| event(node, entry))
            .collect()
    }

    pub fn get(&self, node: Uuid, uuid: Uuid) -> Result<Event, StoreError> {
        let (micros, sequence) = uuid.as_u64_pair();
        match self
            .entries(node)?
            .into_iter()
            .find(|e| (e.micros, e.sequence) == (micros, sequence))
        {
            Some(entry) => event(node, entry),
            None => Err(no_event(uuid)),
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

#[cfg(test)]
mod tests;
