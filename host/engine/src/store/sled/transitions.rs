//! Provision-state transitions on sled: an event applied through the state machine
//! ([`crate::store::transitions::advanced`]), under the node's lock, so transitions are
//! totally ordered with every other write to the node.
//!
//! A transition stamps `provision_updated_at`, derives the new deadline and files the
//! node's index entry at it; the caller flushes before it tells anyone. Index writes go
//! around the node's write in a fixed order (new entry, node, old entry out), so a crash in
//! between leaves at worst a stale entry, which the sweeper and recovery drop; never a
//! waiting node without one.

use uuid::Uuid;

use super::{SledStore, history, parse_body, record};
use crate::clock::Timestamp;
use crate::node::{Node, Provision};
use crate::state_machine::{Event, ProvisionState};
use crate::store::StoreError;
use crate::store::transitions::{advanced, settle_body};

impl SledStore {
    /// Applies `event` to a node, flushed to disk before it returns. `last_error` replaces
    /// the node's: a failure sets it, an operator's new action clears it with `None`.
    pub fn apply_event(
        &self,
        uuid: Uuid,
        event: Event,
        last_error: Option<String>,
    ) -> Result<Node, StoreError> {
        let node = self.transition(uuid, None, event, last_error)?;
        self.flush()?;
        Ok(node)
    }

    /// Like [`SledStore::apply_event`], but only if the node is still in `expected`; this is
    /// how a caller that decided on an old read avoids acting on a node that moved on.
    pub fn apply_event_from(
        &self,
        uuid: Uuid,
        expected: ProvisionState,
        event: Event,
        last_error: Option<String>,
    ) -> Result<Node, StoreError> {
        let node = self.transition(uuid, Some(expected), event, last_error)?;
        self.flush()?;
        Ok(node)
    }

    /// Applies many events with one flush at the end. Each event is all-or-nothing.
    pub fn apply_events(
        &self,
        events: impl IntoIterator<Item = (Uuid, Event)>,
    ) -> Result<Vec<Result<Node, StoreError>>, StoreError> {
        let results = events
            .into_iter()
            .map(|(uuid, e)| self.transition(uuid, None, e, None))
            .collect();
        self.flush()?;
        Ok(results)
    }

    /// Writes a node whose record goes from `old` to `new`, moving its index entry from
    /// `old.indexed` to `new.indexed`: new entry, then the node (one atomic insert), then the
    /// old entry out. The caller holds the node's lock.
    pub(super) fn write_node(
        &self,
        uuid: Uuid,
        old: &Provision,
        new: &Provision,
        json: &[u8],
    ) -> Result<(), StoreError> {
        let t = self.w()?;
        if let Some(d) = new.indexed.filter(|&d| Some(d) != old.indexed) {
            t.deadlines.insert(record::deadline_key(d, uuid), &[])?;
            self.waker.deadline_added(d);
        }
        t.nodes.insert(uuid.as_bytes(), record::join(new, json))?;
        if let Some(d) = old.indexed.filter(|&d| Some(d) != new.indexed) {
            t.deadlines.remove(record::deadline_key(d, uuid))?;
        }
        Ok(())
    }

    /// One transition, not yet flushed.
    pub(super) fn transition(
        &self,
        uuid: Uuid,
        expected: Option<ProvisionState>,
        event: Event,
        last_error: Option<String>,
    ) -> Result<Node, StoreError> {
        let _owner = self.locks.lock(uuid);
        let value = self.value(uuid)?;
        let (old, json) = record::split(uuid, &value)?;
        if let Some(expected) = expected.filter(|&e| e != old.state) {
            return Err(StoreError::StateChanged {
                node: uuid,
                expected,
                actual: old.state,
            });
        }
        self.transition_locked(uuid, old, json, event, last_error, self.clock.now())
    }

    /// The transition itself; the caller holds the node's lock and has read `old` and
    /// the body's `json`.
    pub(super) fn transition_locked(
        &self,
        uuid: Uuid,
        old: Provision,
        json: &[u8],
        event: Event,
        last_error: Option<String>,
        now: Timestamp,
    ) -> Result<Node, StoreError> {
        let t = self.w()?;
        let new = advanced(old, event, now, &self.timeouts)
            .map_err(|source| StoreError::IllegalTransition { node: uuid, source })?;
        let to = new.state;
        let mut body = parse_body(uuid, json)?;
        let settled = settle_body(&mut body, to);
        if body.last_error == last_error && !settled {
            self.write_node(uuid, &old, &new, json)?;
        } else {
            body.last_error = last_error;
            body.updated_at = Some(now);
            let json = serde_json::to_vec(&body).expect("a node body serialises");
            self.write_node(uuid, &old, &new, &json)?;
        }
        // The body now holds `last_error` either way.
        let change = history::Change {
            from: old.state,
            to,
            event: event.as_str(),
            target: new.target,
            error: body.last_error.as_deref().filter(|_| to.is_failed()),
            seconds: now.since(old.updated_at).as_secs_f64(),
            note: None,
        };
        t.history.record(uuid, now, &change)?;
        if matches!(event, Event::Done | Event::Fail) && (to.is_stable() || to.is_failed()) {
            self.metrics.flow(&body.driver, to.as_str());
        }
        Ok(Node {
            body,
            provision: new,
        })
    }
}
