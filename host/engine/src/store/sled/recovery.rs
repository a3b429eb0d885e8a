//! What opening the store does before anyone else may use it (Ironic's `init_host`).
//!
//! - Nodes left in a busy state (deploying, cleaning, deleting, …) were being worked on
//!   by an engine that is gone; nobody can resume that work, so they are failed with a
//!   `last_error` saying so.
//! - Nodes in wait states keep waiting on their persisted clocks: an agent that is still
//!   alive heartbeats again and the deploy goes on. Their deadlines are re-derived from
//!   the timeouts configured *now* (a timeout changed to 0 takes them off the index).
//! - Index entries that match no record (a crash between a touch's writes) are dropped,
//!   and a wait-state record whose entry is missing gets it back.
//!
//! This is the one place that reads every node; it decodes only the records, not the
//! JSON bodies.

use uuid::Uuid;

use super::{SledStore, StoreError, record, uuid_from};
use crate::node::Provision;
use crate::state_machine::{Event, ProvisionState};

/// What recovery found and did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Recovery {
    pub nodes: usize,
    /// Busy nodes failed: (node, state it was in, state it is in now).
    pub failed: Vec<(Uuid, ProvisionState, ProvisionState)>,
    /// Nodes in wait states whose deadline is enabled.
    pub waiting: usize,
    /// Wait-state records whose deadline changed with the configuration.
    pub rescheduled: usize,
    /// Index entries that matched no record, removed.
    pub stale_entries: usize,
}

impl SledStore {
    pub(super) fn recover(&self) -> Result<Recovery, StoreError> {
        let t = self.t()?;
        let mut report = Recovery::default();
        let mut busy = Vec::new();
        for item in t.nodes.iter() {
            let (key, value) = item?;
            let uuid = uuid_from(&key)?;
            let (p, json) = record::split(uuid, &value)?;
            report.nodes += 1;
            if p.state.is_busy() {
                busy.push((uuid, p.state));
                continue;
            }
            let deadline = self
                .timeouts
                .deadline(p.state, p.updated_at, p.progress_at)
                .map(|(d, _)| d);
            if deadline.is_some() {
                report.waiting += 1;
            }
            // Keep the entry where it is if it is still at or before the deadline.
            let indexed = match (p.indexed, deadline) {
                (Some(i), Some(d)) if i <= d => Some(i),
                (_, d) => d,
            };
            let fresh = Provision {
                deadline,
                indexed,
                ..p
            };
            if fresh != p {
                let _owner = self.locks.lock(uuid);
                self.write_node(uuid, &p, &fresh, json)?;
                report.rescheduled += 1;
            } else if let Some(i) = indexed {
                t.deadlines.insert(record::deadline_key(i, uuid), &[])?;
            }
        }
        for item in t.deadlines.iter() {
            let (key, _) = item?;
            let (deadline, uuid) = record::parse_deadline_key(&key)?;
            let live = match t.nodes.get(uuid.as_bytes())? {
                Some(value) => record::split(uuid, &value)?.0.indexed == Some(deadline),
                None => false,
            };
            if !live {
                t.deadlines.remove(&key)?;
                report.stale_entries += 1;
            }
        }
        for (uuid, state) in busy {
            let failed = state.next(Event::Fail).expect("every busy state can fail");
            let message = format!(
                "deployd restarted while node {uuid} was in \"{state}\"; that operation cannot be resumed, so the node was moved to \"{failed}\""
            );
            self.transition(uuid, Some(state), Event::Fail, Some(message))?;
            report.failed.push((uuid, state, failed));
        }
        self.flush()?;
        Ok(report)
    }
}
