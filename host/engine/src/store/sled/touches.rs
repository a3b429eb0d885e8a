//! Touches on sled: what every heartbeat of a live agent does to its waiting node.
//!
//! A touch moves `provision_updated_at` and the deadline of a waiting node and nothing
//! else: one write of the node's value under its lock, the index untouched (heartbeats are
//! the hot path; moving an index entry per heartbeat cost more than the rest together).
//! The sweeper re-files an entry that comes due early (see `expiry`).

use std::collections::HashMap;

use uuid::Uuid;

use super::health::Missed;
use super::{SledStore, Trees, parse_body, record};
use crate::node::{Node, Provision};
use crate::store::StoreError;
use crate::store::touches::{progressed, touched};

impl SledStore {
    /// Moves a waiting node's `provision_updated_at` (and so its deadline) to now, leaving
    /// its state alone. This is what every heartbeat of a live agent does. One write: the
    /// record is replaced and the body's JSON copied as it is, not parsed.
    pub fn touch_provisioning(&self, uuid: Uuid) -> Result<Touched, StoreError> {
        self.touch(uuid, None)
    }

    /// A touch that also reports the agent's progress: `progress` is a fingerprint of
    /// what the agent says it has done ([`progress_fingerprint`](crate::store::progress_fingerprint) of its status, its bytes
    /// written, its command list). One that differs from the last is progress and restarts
    /// the stall timeout; the same one again only proves the agent alive.
    pub fn touch(&self, uuid: Uuid, progress: Option<u64>) -> Result<Touched, StoreError> {
        let now = self.clock.now();
        let t = match self.w() {
            Ok(t) => t,
            Err(refused) => return self.remember(uuid, now, progress, refused),
        };
        let owner = self.locks.lock(uuid);
        let value = self.value_in(&t, uuid)?;
        let (old, json) = record::split(uuid, &value)?;
        waiting(uuid, &old)?;
        let new = touched(&self.timeouts, &old, now, progress);
        if let Err(e) = t.nodes.insert(uuid.as_bytes(), record::join(&new, json)) {
            drop(owner);
            return self.remember(uuid, now, progress, self.refused(e.into()));
        }
        self.metrics.touches.inc();
        Ok(Touched {
            provision: new,
            uuid,
            value,
            recorded: true,
        })
    }

    /// A touch the store cannot write now (`refused`): remembered, and written when the
    /// store writes again ([`SledStore::leave_fault`]) before its sweeper may fail anyone,
    /// so a waiting node's heartbeat is acknowledged from memory and loses nothing. Any
    /// other refusal, or a node that is not waiting, is answered as it is.
    fn remember(
        &self,
        uuid: Uuid,
        now: crate::clock::Timestamp,
        progress: Option<u64>,
        refused: StoreError,
    ) -> Result<Touched, StoreError> {
        if !matches!(refused, StoreError::Unavailable(_)) {
            return Err(refused);
        }
        // Reads go on while writes are refused; while the database is being opened again
        // they do not, and the heartbeat is kept in case it was a waiting node's.
        let Ok(t) = self.t() else {
            self.health.missed(uuid, now, progress);
            return Err(refused);
        };
        let value = self.value_in(&t, uuid)?;
        let (old, _) = record::split(uuid, &value)?;
        waiting(uuid, &old)?;
        if !self.health.missed(uuid, now, progress) {
            return Err(refused);
        }
        self.metrics.touches_remembered.inc();
        Ok(Touched {
            provision: touched(&self.timeouts, &old, now, progress),
            uuid,
            value,
            recorded: false,
        })
    }

    /// Notes, for a reopen, the clock of each waiting node as the faulty database `old`
    /// holds it in memory: the touches since its last good flush are there and nowhere
    /// else.
    pub(super) fn note_clocks(&self, old: &Trees) {
        for key in old.deadlines.iter().keys().flatten() {
            let Ok((_, uuid)) = record::parse_deadline_key(&key) else {
                continue;
            };
            let Ok(Some(value)) = old.nodes.get(uuid.as_bytes()) else {
                continue;
            };
            if let Ok((p, _)) = record::split(uuid, &value)
                && p.state.accepts_touch()
            {
                self.health.missed(uuid, p.updated_at, Some(p.progress));
            }
        }
    }

    /// Writes the touches a degraded store missed, each where the node is still waiting
    /// and has not been touched since, then flushes.
    pub(super) fn record_missed(&self, missed: &HashMap<Uuid, Missed>) -> Result<(), StoreError> {
        let t = self.t()?;
        for (&uuid, m) in missed {
            let _owner = self.locks.lock(uuid);
            let Some(value) = t.nodes.get(uuid.as_bytes())? else {
                continue;
            };
            let (old, json) = record::split(uuid, &value)?;
            if !old.state.accepts_touch() || old.updated_at >= m.at {
                continue;
            }
            let new = touched(&self.timeouts, &old, m.at, m.progress);
            t.nodes.insert(uuid.as_bytes(), record::join(&new, json))?;
        }
        // Still degraded here: the store says it writes again only after this.
        self.wrote(super::flush(&t.db))
    }

    /// Records progress seen elsewhere than in a heartbeat (a driver reading its agent's
    /// command list): like [`SledStore::touch`] with `progress`, but it writes only when the
    /// fingerprint differs, and leaves `provision_updated_at` alone. Returns whether it
    /// was progress.
    pub fn report_progress(&self, uuid: Uuid, progress: u64) -> Result<bool, StoreError> {
        let t = self.w()?;
        let _owner = self.locks.lock(uuid);
        let value = self.value(uuid)?;
        let (old, json) = record::split(uuid, &value)?;
        let Some(new) = progressed(&self.timeouts, &old, self.clock.now(), progress) else {
            return Ok(false);
        };
        t.nodes.insert(uuid.as_bytes(), record::join(&new, json))?;
        Ok(true)
    }
}

/// A node just touched on sled: its new provision record, and its body as it was read for
/// the touch, which the handle's [`crate::store::Store::touched_node`] parses instead of
/// reading the node again.
pub struct Touched {
    pub provision: Provision,
    uuid: Uuid,
    value: sled::IVec,
    /// False when the store could not write it and remembers it instead (see
    /// [`SledStore::touch`]).
    pub recorded: bool,
}

impl Touched {
    /// The node, parsed now, with its new provision record.
    pub fn node(&self) -> Result<Node, StoreError> {
        let (_, json) = record::split(self.uuid, &self.value)?;
        Ok(Node {
            body: parse_body(self.uuid, json)?,
            provision: self.provision,
        })
    }
}

/// Refuses a touch of a node that is not waiting for its agent.
fn waiting(uuid: Uuid, old: &Provision) -> Result<(), StoreError> {
    if old.state.accepts_touch() {
        return Ok(());
    }
    Err(StoreError::NotWaiting {
        node: uuid,
        state: old.state,
    })
}
