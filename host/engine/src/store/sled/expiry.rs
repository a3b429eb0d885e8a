//! The sweeper's step on sled: index entries that came due, taken from the front.
//!
//! Under the node's lock the step fails the node only if the record's own deadline has
//! passed (the compare in compare-and-swap); if a touch moved the deadline on, it re-files
//! the entry there, so an entry moves at most once per timeout period, not once per
//! heartbeat. Its cost grows with the entries that came due, not with the fleet.

use uuid::Uuid;

use super::{SledStore, record};
use crate::clock::Timestamp;
use crate::node::Provision;
use crate::state_machine::Event;
use crate::store::StoreError;
use crate::store::expiry::{TimedOut, Verdict, judge};

impl SledStore {
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

    /// [`SledStore::fail_expired`], with what each node's agent last reported of its progress
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
