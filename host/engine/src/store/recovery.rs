//! What an engine does with the nodes it finds when it starts alone on its store (Ironic's
//! `init_host`), the rule both backends apply:
//!
//! - a node in a busy state (deploying, cleaning, deleting, …) was being worked on by an
//!   engine that is gone; nobody can resume that work, so it is failed with a `last_error`
//!   saying so ([`restarted`]);
//! - a node in a wait state keeps waiting on its persisted clocks, its deadline re-derived
//!   from the timeouts configured now ([`rederived`]): an agent still alive heartbeats
//!   again and its deploy goes on; a timeout changed to 0 takes it off the sweeper's index.

use uuid::Uuid;

use crate::node::Provision;
use crate::state_machine::{ProvisionState, Timeouts};

/// `p` with its deadline derived from `timeouts`; its place in the sweeper's index kept
/// where it is while that is still at or before the deadline.
pub(crate) fn rederived(timeouts: &Timeouts, p: &Provision) -> Provision {
    let deadline = timeouts
        .deadline(p.state, p.updated_at, p.progress_at)
        .map(|(d, _)| d);
    let indexed = match (p.indexed, deadline) {
        (Some(i), Some(d)) if i <= d => Some(i),
        (_, d) => d,
    };
    Provision {
        deadline,
        indexed,
        ..*p
    }
}

/// The `last_error` of a busy node failed at a start.
pub(crate) fn restarted(uuid: Uuid, state: ProvisionState, failed: ProvisionState) -> String {
    format!(
        "deployd restarted while node {uuid} was in \"{state}\"; that operation cannot be resumed, so the node was moved to \"{failed}\""
    )
}
