//! Ironic's provision state machine (the pure table lives in `deployd-wire`, shared with
//! clients), and the engine's timeouts per waiting state: the callback timeout (the agent
//! went silent) and the stall timeout (the agent heartbeats, but its work does not move).

use std::time::Duration;

pub use deployd_wire::state_machine::*;

use crate::clock::Timestamp;

/// The states in which a node runs its ramdisk: its agent may look it up (Ironic's
/// `LOOKUP_ALLOWED_STATES`), and a network boot loads the deploy kernel and ramdisk.
pub fn runs_ramdisk(state: ProvisionState) -> bool {
    use ProvisionState as S;
    matches!(
        state,
        S::Deploying
            | S::WaitCallBack
            | S::Cleaning
            | S::CleanWait
            | S::Inspecting
            | S::InspectWait
            | S::Rescuing
            | S::RescueWait
            | S::ServiceWait
    )
}

/// Timeouts of the wait states. `Duration::ZERO` disables a check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timeouts {
    pub deploy_callback: Duration,
    pub clean_callback: Duration,
    pub service_callback: Duration,
    pub rescue_callback: Duration,
    /// `inspect wait` (Ironic's `inspect_wait_timeout`).
    pub inspect_wait: Duration,
    /// How long a deploy's progress may stand still while its agent heartbeats.
    pub deploy_stall: Duration,
    /// The same for cleaning.
    pub clean_stall: Duration,
}

/// Which check a waiting node's deadline is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expiry {
    /// No heartbeat (nor any other touch) for the callback timeout.
    Callback,
    /// Heartbeats, but no progress for the stall timeout.
    Stall,
}

impl Timeouts {
    /// Every callback check at the same timeout (tests, and Ironic's uniform 1800 s
    /// default); no stall checks.
    pub fn uniform(d: Duration) -> Self {
        Timeouts {
            deploy_callback: d,
            clean_callback: d,
            service_callback: d,
            rescue_callback: d,
            inspect_wait: d,
            deploy_stall: Duration::ZERO,
            clean_stall: Duration::ZERO,
        }
    }

    /// The configuration option of the stall timeout of a wait (deployd's own option).
    pub fn stall_option_name(kind: WaitKind) -> &'static str {
        match kind {
            WaitKind::Clean => "clean_stall_timeout",
            _ => "deploy_stall_timeout",
        }
    }

    /// The stall timeout that applies in `state`, or `None` when it has none or it is 0.
    pub fn stall_for_state(&self, state: ProvisionState) -> Option<Duration> {
        let d = match state.wait_kind()? {
            WaitKind::Deploy => self.deploy_stall,
            WaitKind::Clean => self.clean_stall,
            WaitKind::Service | WaitKind::Rescue | WaitKind::Inspect => return None,
        };
        (!d.is_zero()).then_some(d)
    }

    /// When a node in `state` fails, and by which check: its callback timeout runs from
    /// its last touch (`updated_at`), its stall timeout from its last progress
    /// (`progress_at`); the earlier one wins. Both only move forward, so a deadline never
    /// moves earlier, which the lazily filed deadline index relies on.
    pub fn deadline(
        &self,
        state: ProvisionState,
        updated_at: Timestamp,
        progress_at: Timestamp,
    ) -> Option<(Timestamp, Expiry)> {
        let callback = self
            .for_state(state)
            .map(|d| (updated_at.plus(d), Expiry::Callback));
        let stall = self
            .stall_for_state(state)
            .map(|d| (progress_at.plus(d), Expiry::Stall));
        match (callback, stall) {
            (Some(c), Some(s)) => Some(if s.0 < c.0 { s } else { c }),
            (c, s) => c.or(s),
        }
    }

    /// The timeout that applies in `state`, or `None` when the state has none or it is 0.
    pub fn for_state(&self, state: ProvisionState) -> Option<Duration> {
        let d = match state.wait_kind()? {
            WaitKind::Deploy => self.deploy_callback,
            WaitKind::Clean => self.clean_callback,
            WaitKind::Service => self.service_callback,
            WaitKind::Rescue => self.rescue_callback,
            WaitKind::Inspect => self.inspect_wait,
        };
        (!d.is_zero()).then_some(d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_zero_timeout_disables_the_check() {
        let t = Timeouts {
            deploy_callback: Duration::ZERO,
            ..Timeouts::uniform(Duration::from_secs(5))
        };
        assert_eq!(t.for_state(ProvisionState::WaitCallBack), None);
        assert_eq!(
            t.for_state(ProvisionState::CleanWait),
            Some(Duration::from_secs(5))
        );
        assert_eq!(t.for_state(ProvisionState::Deploying), None);
    }

    #[test]
    fn the_earlier_of_the_callback_and_the_stall_deadline_wins() {
        let t0 = Timestamp::from_micros(0);
        let at = |s: u64| t0.plus(Duration::from_secs(s));
        let t = Timeouts {
            deploy_stall: Duration::from_secs(100),
            ..Timeouts::uniform(Duration::from_secs(30))
        };
        let waiting = ProvisionState::WaitCallBack;
        // Touched at 80 s, progress last at 0 s: the stall check (100 s) comes before the
        // callback check (110 s).
        assert_eq!(
            t.deadline(waiting, at(80), at(0)),
            Some((at(100), Expiry::Stall))
        );
        assert_eq!(
            t.deadline(waiting, at(50), at(0)),
            Some((at(80), Expiry::Callback))
        );
        // Cleaning has no stall timeout here; service waits never have one.
        assert_eq!(t.stall_for_state(ProvisionState::CleanWait), None);
        assert_eq!(t.stall_for_state(ProvisionState::ServiceWait), None);
        let off = Timeouts {
            deploy_callback: Duration::ZERO,
            ..t
        };
        assert_eq!(
            off.deadline(waiting, at(80), at(0)),
            Some((at(100), Expiry::Stall))
        );
        assert_eq!(
            Timeouts::uniform(Duration::ZERO).deadline(waiting, at(1), at(1)),
            None
        );
    }
}
