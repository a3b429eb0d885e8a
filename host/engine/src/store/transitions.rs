//! The rule of a provision-state transition: an event applied through the state machine
//! stamps `provision_updated_at` and derives the new deadline. Every backend applies it.

use crate::clock::Timestamp;
use crate::node::{NodeBody, Provision};
use crate::state_machine::{Event, IllegalTransition, ProvisionState, Timeouts};

/// The record after `event` at `now`: the new state and target, the clock stamped, the
/// deadline derived from `timeouts` and filed in the index at once. The same rule for every
/// backend.
pub(crate) fn advanced(
    old: Provision,
    event: Event,
    now: Timestamp,
    timeouts: &Timeouts,
) -> Result<Provision, IllegalTransition> {
    let to = old.state.next(event)?;
    let deadline = timeouts.deadline(to, now, now).map(|(d, _)| d);
    Ok(Provision {
        state: to,
        target: target(old, event, to),
        updated_at: now,
        deadline,
        indexed: deadline,
        // A new state is progress; its agent's reports start afresh.
        progress_at: now,
        progress: 0,
    })
}

/// What a transition into `to` drops from the node's body, in the transition's own
/// write: a rescue's password hash lives only while the rescue runs (`rescuing`,
/// `rescue wait`), so the rescue's end, its failure or its timeout drops it and no reader
/// sees a hash on a node that is no longer being rescued. Whether the body changed.
pub(crate) fn settle_body(body: &mut NodeBody, to: ProvisionState) -> bool {
    let rescuing = matches!(to, ProvisionState::Rescuing | ProvisionState::RescueWait);
    !rescuing
        && body
            .instance_info
            .remove(crate::rescue_password::HASHED)
            .is_some()
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
