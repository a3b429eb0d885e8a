//! What opening the store does before anyone else may use it: the rule of
//! `store::recovery` (busy nodes failed, waiting ones re-derived), and sled's own mend:
//!
//! - Index entries that match no record (a crash between a touch's writes) are dropped,
//!   and a wait-state record whose entry is missing gets it back.
//!
//! This is the one place that reads every node; it decodes only the records, not the
//! JSON bodies.

use uuid::Uuid;

use super::{SledStore, StoreError, record, uuid_from};
use crate::state_machine::{Event, ProvisionState};
use crate::store::recovery::{rederived, restarted};

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
            let fresh = rederived(&self.timeouts, &p);
            if fresh.deadline.is_some() {
                report.waiting += 1;
            }
            let indexed = fresh.indexed;
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
            let message = restarted(uuid, state, failed);
            self.transition(uuid, Some(state), Event::Fail, Some(message))?;
            report.failed.push((uuid, state, failed));
        }
        self.flush()?;
        Ok(report)
    }
}
