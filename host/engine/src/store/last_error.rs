//! The words the store writes into a node's `last_error` when the sweeper fails it. Clients
//! and operators read them, so they name the node, the state, the option and its value.

use std::time::Duration;

use uuid::Uuid;

use crate::state_machine::{ProvisionState, Timeouts, WaitKind};

/// No callback (heartbeat) for longer than the wait state's callback timeout.
pub(super) fn callback_timeout(
    uuid: Uuid,
    state: ProvisionState,
    kind: WaitKind,
    silent_for: Duration,
    timeout: Duration,
) -> String {
    format!(
        "Timeout reached while waiting for callback for node {uuid}: no callback for {:.1} s in \"{state}\" ({} is {} s)",
        silent_for.as_secs_f64(),
        kind.option_name(),
        timeout.as_secs_f64(),
    )
}

/// Callbacks, but no progress for longer than the stall timeout; `last` is what the agent
/// last reported of its progress, where it said.
pub(super) fn stall(
    uuid: Uuid,
    state: ProvisionState,
    kind: WaitKind,
    still_for: Duration,
    timeout: Duration,
    last: Option<String>,
) -> String {
    let last = last.map_or(String::new(), |d| format!("; last progress: {d}"));
    format!(
        "Stalled: node {uuid}'s agent kept calling back, but its work made no progress for {:.1} s in \"{state}\" ({} is {} s){last}",
        still_for.as_secs_f64(),
        Timeouts::stall_option_name(kind),
        timeout.as_secs_f64(),
    )
}
