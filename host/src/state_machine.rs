//! Ironic's provision state machine (the pure table lives in `deployd-wire`, shared with
//! clients), and the engine's callback timeouts per waiting state.

use std::time::Duration;

pub use deployd_wire::state_machine::*;

/// Callback timeouts for the wait states. `Duration::ZERO` disables a check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timeouts {
    pub deploy_callback: Duration,
    pub clean_callback: Duration,
    pub service_callback: Duration,
    pub rescue_callback: Duration,
}

impl Timeouts {
    /// Every check at the same timeout (tests, and Ironic's uniform 1800 s default).
    pub fn uniform(d: Duration) -> Self {
        Timeouts {
            deploy_callback: d,
            clean_callback: d,
            service_callback: d,
            rescue_callback: d,
        }
    }

    /// The timeout that applies in `state`, or `None` when the state has none or it is 0.
    pub fn for_state(&self, state: ProvisionState) -> Option<Duration> {
        let d = match state.wait_kind()? {
            WaitKind::Deploy => self.deploy_callback,
            WaitKind::Clean => self.clean_callback,
            WaitKind::Service => self.service_callback,
            WaitKind::Rescue => self.rescue_callback,
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
}
