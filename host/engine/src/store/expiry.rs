//! The sweeper's step: index entries that came due, taken from the front.
//!
//! Under the node's lock the step fails the node only if the record's own deadline has
//! passed (the compare in compare-and-swap); if a touch moved the deadline on, it re-files
//! the entry there, so an entry moves at most once per timeout period, not once per
//! heartbeat. Its cost grows with the entries that came due, not with the fleet.

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use tokio::sync::Notify;
use uuid::Uuid;

use super::{Store, StoreError, last_error, record};
use crate::clock::Timestamp;
use crate::node::Provision;
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

    pub(super) fn deadline_added(&self, d: Timestamp) {
        if d.as_micros() < self.sleeping_until.load(Ordering::SeqCst) {
            self.notify.notify_one();
        }
    }
}

impl Store {
    pub(crate) fn waker(&self) -> &SweeperWaker {
        &self.waker
    }

    /// The earliest deadline in the index (possibly stale; the sweep step checks).
    pub fn next_deadline(&self) -> Result<Option<Timestamp>, StoreError> {
        let t = self.t()?;
        match t.deadlines.iter().next() {
            Some(item) => Ok(Some(record::parse_deadline_key(&item?.0)?.0)),
            None => Ok(None),
        }
    }

    /// Every entry of the deadline index, in deadline order (for diagnostics and tests).
    pub fn deadline_index(&self) -> Result<Vec<(Timestamp, Uuid)>, StoreError> {
        let t = self.t()?;
        t.deadlines
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
        let t = self.w()?;
        let mut expired = Vec::new();
        for item in t.deadlines.iter().take(limit) {
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
        let t = self.w()?;
        let _owner = self.locks.lock(uuid);
        let value = t.nodes.get(uuid.as_bytes())?;
        let current = value
            .as_deref()
            .map(|v| record::split(uuid, v))
            .transpose()?;
        let Some((p, json)) = current.filter(|(p, _)| p.indexed == Some(entry)) else {
            // The node moved on or is gone since the entry was written: it is stale.
            t.deadlines.remove(record::deadline_key(entry, uuid))?;
            return Ok(None);
        };
        let failure = match judge(uuid, &p, now, &self.timeouts, describe) {
            Verdict::Fail(failure) => failure,
            // Touched since: file the entry at the deadline the record now has.
            Verdict::Refile(later) => {
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
        let node = self.transition_locked(
            uuid,
            p,
            json,
            Event::Fail,
            Some(failure.last_error.clone()),
            now,
        )?;
        self.metrics.timed_out(failure.expiry);
        Ok(Some(failure.timed_out(uuid, p.state, node.provision.state)))
    }
}

/// What the sweeper does with a node whose index entry came due.
pub(super) enum Verdict {
    /// A touch moved the deadline on (or off): file the entry there.
    Refile(Option<Timestamp>),
    /// The deadline passed in a wait state: fail the node, with these words.
    Fail(Failure),
}

/// Why a node is failed by the sweeper.
pub(super) struct Failure {
    pub expiry: Expiry,
    pub timeout: Duration,
    pub silent_for: Duration,
    pub last_error: String,
}

impl Failure {
    pub(super) fn timed_out(
        self,
        node: Uuid,
        waited_in: ProvisionState,
        failed_to: ProvisionState,
    ) -> TimedOut {
        TimedOut {
            node,
            waited_in,
            failed_to,
            expiry: self.expiry,
            timeout: self.timeout,
            silent_for: self.silent_for,
            last_error: self.last_error,
        }
    }
}

/// The sweeper's rule, the same for every backend: a node in a wait state whose own
/// deadline has passed at `now` fails, by the check that set that deadline; any other is
/// re-filed at the deadline its record has.
pub(super) fn judge(
    uuid: Uuid,
    p: &Provision,
    now: Timestamp,
    timeouts: &Timeouts,
    describe: &dyn Fn(Uuid) -> Option<String>,
) -> Verdict {
    let (deadline, kind) = match (p.deadline, p.state.wait_kind()) {
        (Some(d), Some(kind)) if d <= now => (d, kind),
        (later, _) => return Verdict::Refile(later),
    };
    let silent_for = now.since(p.updated_at);
    let expiry = timeouts
        .deadline(p.state, p.updated_at, p.progress_at)
        .map_or(Expiry::Callback, |(_, e)| e);
    let (timeout, last_error) = match expiry {
        Expiry::Callback => {
            let timeout = deadline.since(p.updated_at);
            let last_error = last_error::callback_timeout(uuid, p.state, kind, silent_for, timeout);
            (timeout, last_error)
        }
        Expiry::Stall => {
            let timeout = deadline.since(p.progress_at);
            let last_error = last_error::stall(
                uuid,
                p.state,
                kind,
                now.since(p.progress_at),
                timeout,
                describe(uuid),
            );
            (timeout, last_error)
        }
    };
    Verdict::Fail(Failure {
        expiry,
        timeout,
        silent_for,
        last_error,
    })
}
