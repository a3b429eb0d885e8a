//! Provision-state changes: transitions, touches, and the sweeper's expiry step.
//!
//! All three are read-check-write sequences on one node's record, run under the node's
//! lock, so they are totally ordered per node:
//!
//! - a **transition** applies an event through the state machine, stamps
//!   `provision_updated_at`, derives the new deadline and files the node's index entry at
//!   it; the caller flushes before it tells anyone;
//! - a **touch** moves `provision_updated_at` and the deadline of a waiting node and
//!   nothing else: one write of the node's value, the index untouched (heartbeats are the
//!   hot path; moving an index entry per heartbeat cost more than the rest together);
//! - **expiry** takes the index entries that came due from the front. Under the node's
//!   lock it fails the node only if the record's own deadline has passed (the compare in
//!   compare-and-swap); if a touch moved the deadline on, it re-files the entry there.
//!   An entry therefore moves at most once per timeout period, not once per heartbeat.
//!
//! Index writes go around the node's write in a fixed order (new entry, node, old entry
//! out), so a crash in between leaves at worst a stale entry, which the sweeper and
//! recovery drop; never a waiting node without one.

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use tokio::sync::Notify;
use uuid::Uuid;

use super::{Store, StoreError, history, parse_body, record};
use crate::clock::Timestamp;
use crate::metrics::Metrics;
use crate::node::{Node, Provision};
use crate::state_machine::{Event, Expiry, ProvisionState, Timeouts};

/// A node the sweeper failed because its agent went silent, or made no progress.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TimedOut {
    pub node: Uuid,
    /// The wait state it was in.
    pub waited_in: ProvisionState,
    /// The failed state it is in now.
    pub failed_to: ProvisionState,
    /// Which check failed it: no callback, or no progress.
    pub expiry: Expiry,
    /// The timeout that was in force.
    pub timeout: Duration,
    /// How long since its clock last moved.
    pub silent_for: Duration,
    pub last_error: String,
}

/// How writers tell a sleeping sweeper that a deadline earlier than the one it sleeps
/// towards has appeared. The sweeper publishes its wake-up time, then re-reads the index;
/// a writer inserts its entry, then compares. One of the two always sees the other.
pub struct SweeperWaker {
    sleeping_until: AtomicI64,
    notify: Notify,
}

impl Default for SweeperWaker {
    fn default() -> Self {
        SweeperWaker {
            sleeping_until: AtomicI64::new(i64::MIN),
            notify: Notify::new(),
        }
    }
}

impl SweeperWaker {
    pub(crate) fn sleep_until(&self, t: Timestamp) {
        self.sleeping_until.store(t.as_micros(), Ordering::SeqCst);
    }

    pub(crate) async fn woken(&self) {
        self.notify.notified().await
    }

    fn deadline_added(&self, d: Timestamp) {
        if d.as_micros() < self.sleeping_until.load(Ordering::SeqCst) {
            self.notify.notify_one();
        }
    }
}

impl Store {
    pub(crate) fn waker(&self) -> &SweeperWaker {
        &self.waker
    }

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

    /// Like [`Store::apply_event`], but only if the node is still in `expected`; this is
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

    /// Moves a waiting node's `provision_updated_at` (and so its deadline) to now, leaving
    /// its state alone. This is what every heartbeat of a live agent does. One write: the
    /// record is replaced and the body's JSON copied as it is, not parsed.
    pub fn touch_provisioning(&self, uuid: Uuid) -> Result<Touched, StoreError> {
        self.touch(uuid, None)
    }

    /// A touch that also reports the agent's progress: `progress` is a fingerprint of
    /// what the agent says it has done ([`progress_fingerprint`] of its status, its bytes
    /// written, its command list). One that differs from the last is progress and restarts
    /// the stall timeout; the same one again only proves the agent alive.
    pub fn touch(&self, uuid: Uuid, progress: Option<u64>) -> Result<Touched, StoreError> {
        let _owner = self.locks.lock(uuid);
        let value = self.value(uuid)?;
        let (old, json) = record::split(uuid, &value)?;
        if old.state.wait_kind().is_none() {
            return Err(StoreError::NotWaiting {
                node: uuid,
                state: old.state,
            });
        }
        let now = self.clock.now();
        let (progress_at, progress) = match progress {
            Some(mark) if mark != old.progress => (now, mark),
            _ => (old.progress_at, old.progress),
        };
        let new = Provision {
            updated_at: now,
            deadline: self
                .timeouts
                .deadline(old.state, now, progress_at)
                .map(|(d, _)| d),
            progress_at,
            progress,
            ..old
        };
        self.nodes
            .insert(uuid.as_bytes(), record::join(&new, json))?;
        Metrics::count(&self.metrics.touches, 1);
        Ok(Touched {
            provision: new,
            uuid,
            value,
        })
    }

    /// Records a milestone of the node's flow in its history (see [`history`]), in the
    /// state it is in now.
    pub fn milestone(&self, uuid: Uuid, note: String) -> Result<(), StoreError> {
        let value = self.value(uuid)?;
        let (p, _) = record::split(uuid, &value)?;
        let change = history::Change {
            from: p.state.to_string(),
            to: p.state.to_string(),
            event: "milestone".into(),
            target: p.target.map(|t| t.to_string()),
            error: None,
            seconds: 0.0,
            note: Some(note),
        };
        self.history.record(uuid, self.clock.now(), &change)
    }

    /// Records progress seen elsewhere than in a heartbeat (a driver reading its agent's
    /// command list): like [`Store::touch`] with `progress`, but it writes only when the
    /// fingerprint differs, and leaves `provision_updated_at` alone. Returns whether it
    /// was progress.
    pub fn report_progress(&self, uuid: Uuid, progress: u64) -> Result<bool, StoreError> {
        let _owner = self.locks.lock(uuid);
        let value = self.value(uuid)?;
        let (old, json) = record::split(uuid, &value)?;
        if old.state.wait_kind().is_none() || old.progress == progress {
            return Ok(false);
        }
        let now = self.clock.now();
        let new = Provision {
            deadline: self
                .timeouts
                .deadline(old.state, old.updated_at, now)
                .map(|(d, _)| d),
            progress_at: now,
            progress,
            ..old
        };
        self.nodes
            .insert(uuid.as_bytes(), record::join(&new, json))?;
        Ok(true)
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
        if let Some(d) = new.indexed.filter(|&d| Some(d) != old.indexed) {
            self.deadlines.insert(record::deadline_key(d, uuid), &[])?;
            self.waker.deadline_added(d);
        }
        self.nodes
            .insert(uuid.as_bytes(), record::join(new, json))?;
        if let Some(d) = old.indexed.filter(|&d| Some(d) != new.indexed) {
            self.deadlines.remove(record::deadline_key(d, uuid))?;
        }
        Ok(())
    }

    /// The earliest deadline in the index (possibly stale; the sweep step checks).
    pub fn next_deadline(&self) -> Result<Option<Timestamp>, StoreError> {
        match self.deadlines.iter().next() {
            Some(item) => Ok(Some(record::parse_deadline_key(&item?.0)?.0)),
            None => Ok(None),
        }
    }

    /// Every entry of the deadline index, in deadline order (for diagnostics and tests).
    pub fn deadline_index(&self) -> Result<Vec<(Timestamp, Uuid)>, StoreError> {
        self.deadlines
            .iter()
            .map(|item| record::parse_deadline_key(&item?.0))
            .collect()
    }

    /// Fails up to `limit` nodes whose deadline is at or before `now` and whose clock has
    /// not moved since; returns them. Its cost grows with the entries it finds expired, not
    /// with the fleet: it stops at the first deadline in the future.
    pub fn fail_expired(&self, now: Timestamp, limit: usize) -> Result<Vec<TimedOut>, StoreError> {
        self.fail_expired_describing(now, limit, &|_| None)
    }

    /// [`Store::fail_expired`], with what each node's agent last reported of its progress
    /// (`describe`) quoted in a stall's `last_error`.
    pub fn fail_expired_describing(
        &self,
        now: Timestamp,
        limit: usize,
        describe: &dyn Fn(Uuid) -> Option<String>,
    ) -> Result<Vec<TimedOut>, StoreError> {
        let mut expired = Vec::new();
        for item in self.deadlines.iter().take(limit) {
            let (deadline, uuid) = record::parse_deadline_key(&item?.0)?;
            if deadline > now {
                break;
            }
            expired.push((deadline, uuid));
        }
        let mut timed_out = Vec::new();
        for (deadline, uuid) in expired {
            if let Some(t) = self.fail_if_still_expired(uuid, deadline, now, describe)? {
                timed_out.push(t);
            }
        }
        if !timed_out.is_empty() {
            self.flush()?;
        }
        Ok(timed_out)
    }

    /// Handles one index entry that came due: fails the node if its own deadline passed,
    /// re-files the entry if a touch moved the deadline on, drops it if it is stale.
    fn fail_if_still_expired(
        &self,
        uuid: Uuid,
        entry: Timestamp,
        now: Timestamp,
        describe: &dyn Fn(Uuid) -> Option<String>,
    ) -> Result<Option<TimedOut>, StoreError> {
        let _owner = self.locks.lock(uuid);
        let value = self.nodes.get(uuid.as_bytes())?;
        let current = value
            .as_deref()
            .map(|v| record::split(uuid, v))
            .transpose()?;
        let Some((p, json)) = current.filter(|(p, _)| p.indexed == Some(entry)) else {
            // The node moved on or is gone since the entry was written: it is stale.
            self.deadlines.remove(record::deadline_key(entry, uuid))?;
            return Ok(None);
        };
        let deadline = match p.deadline {
            Some(d) if d <= now && p.state.wait_kind().is_some() => d,
            // Touched since: file the entry at the deadline the record now has.
            later => {
                self.write_node(
                    uuid,
                    &p,
                    &Provision {
                        indexed: later,
                        ..p
                    },
                    json,
                )?;
                return Ok(None);
            }
        };
        let kind = p.state.wait_kind().expect("filtered on wait states");
        let silent_for = now.since(p.updated_at);
        let expiry = self
            .timeouts
            .deadline(p.state, p.updated_at, p.progress_at)
            .map_or(Expiry::Callback, |(_, e)| e);
        let (timeout, last_error) = match expiry {
            Expiry::Callback => {
                let timeout = deadline.since(p.updated_at);
                let last_error = format!(
                    "Timeout reached while waiting for callback for node {uuid}: no callback for {:.1} s in \"{}\" ({} is {} s)",
                    silent_for.as_secs_f64(),
                    p.state,
                    kind.option_name(),
                    timeout.as_secs_f64(),
                );
                (timeout, last_error)
            }
            Expiry::Stall => {
                let timeout = deadline.since(p.progress_at);
                let last =
                    describe(uuid).map_or(String::new(), |d| format!("; last progress: {d}"));
                let last_error = format!(
                    "Stalled: node {uuid}'s agent kept calling back, but its work made no progress for {:.1} s in \"{}\" ({} is {} s){last}",
                    now.since(p.progress_at).as_secs_f64(),
                    p.state,
                    Timeouts::stall_option_name(kind),
                    timeout.as_secs_f64(),
                );
                (timeout, last_error)
            }
        };
        let node =
            self.transition_locked(uuid, p, json, Event::Fail, Some(last_error.clone()), now)?;
        self.metrics.timed_out(expiry);
        Ok(Some(TimedOut {
            node: uuid,
            waited_in: p.state,
            failed_to: node.provision.state,
            expiry,
            timeout,
            silent_for,
            last_error,
        }))
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
    fn transition_locked(
        &self,
        uuid: Uuid,
        old: Provision,
        json: &[u8],
        event: Event,
        last_error: Option<String>,
        now: Timestamp,
    ) -> Result<Node, StoreError> {
        let to = old
            .state
            .next(event)
            .map_err(|source| StoreError::IllegalTransition { node: uuid, source })?;
        let new = Provision {
            state: to,
            target: target(old, event, to),
            updated_at: now,
            deadline: self.timeouts.deadline(to, now, now).map(|(d, _)| d),
            indexed: None,
            // A new state is progress; its agent's reports start afresh.
            progress_at: now,
            progress: 0,
        };
        let new = Provision {
            indexed: new.deadline,
            ..new
        };
        let mut body = parse_body(uuid, json)?;
        let change = history::Change {
            from: old.state.to_string(),
            to: to.to_string(),
            event: event.to_string(),
            target: new.target.map(|t| t.to_string()),
            error: last_error.clone().filter(|_| to.is_failed()),
            seconds: now.since(old.updated_at).as_secs_f64(),
            note: None,
        };
        if body.last_error == last_error {
            self.write_node(uuid, &old, &new, json)?;
        } else {
            body.last_error = last_error;
            body.updated_at = Some(now);
            let json = serde_json::to_vec(&body).expect("a node body serialises");
            self.write_node(uuid, &old, &new, &json)?;
        }
        self.history.record(uuid, now, &change)?;
        if matches!(event, Event::Done | Event::Fail) && (to.is_stable() || to.is_failed()) {
            self.metrics.flow(&body.driver, to.as_str());
        }
        Ok(Node {
            body,
            provision: new,
        })
    }
}

/// Where the flow is heading after `old --event--> to`. Mostly the state's own target (a
/// failed state keeps its flow's, as Ironic's does); manual cleaning, which shares its
/// states with an undeploy's, heads back to manageable from start to end.
fn target(old: Provision, event: Event, to: ProvisionState) -> Option<ProvisionState> {
    use ProvisionState as S;
    let cleaning = matches!(
        to,
        S::Cleaning | S::CleanWait | S::CleanHold | S::CleanFailed
    );
    match (old.state, event) {
        (S::Manageable, Event::Clean) => Some(S::Manageable),
        (S::Cleaning | S::CleanWait | S::CleanHold, _)
            if cleaning && old.target == Some(S::Manageable) =>
        {
            Some(S::Manageable)
        }
        _ => to.target(),
    }
}

/// A node just touched: its new provision record, and its body as it was read for the
/// touch. A heartbeat's driver step parses the node from these bytes instead of reading
/// it again: under a storm of touches a second sled read of a just-written page cost
/// more than the touch and the driver call together (measured with `bench api`).
pub struct Touched {
    pub provision: Provision,
    uuid: Uuid,
    value: sled::IVec,
}

/// A touch is read mostly for its new record.
impl std::ops::Deref for Touched {
    type Target = Provision;
    fn deref(&self) -> &Provision {
        &self.provision
    }
}

impl std::fmt::Debug for Touched {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Touched").field(&self.provision).finish()
    }
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

/// A fingerprint of an agent's report of its progress, stable across restarts (FNV-1a,
/// 64 bits) and never 0, which means "no report yet". The report is the concatenation of
/// `parts`, hashed as they come: no report is assembled to be hashed.
pub fn progress_fingerprint<'a>(parts: impl IntoIterator<Item = &'a [u8]>) -> u64 {
    let hash = parts
        .into_iter()
        .flatten()
        .fold(0xcbf2_9ce4_8422_2325_u64, |h, &b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
    hash.max(1)
}
