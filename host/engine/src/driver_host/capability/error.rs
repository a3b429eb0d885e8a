//! Why a capability did not do what a driver asked, and the trap a failure of the host
//! ends a call with. Apart from the bindings, which name [`CapabilityError`] as the
//! world's trappable error type.

use crate::store::{ErrorClass, StoreError};

/// Why a capability did not do what the driver asked.
///
/// Every import of the 0.2 world returns it (wasmtime's trappable error type, see
/// [`super::bindings`]): [`convert_error`](super::bindings::deployd::driver::types::Host::convert_error)
/// hands each kind to the driver as the WIT `error` of the same name, and ends the call
/// with a trap for [`CapabilityError::Host`]: a failure of the host itself, which the
/// driver could do nothing about; the node fails with it as `last_error`. 0.1 drivers get
/// the same text as a plain string (`super::v0_1`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CapabilityError {
    /// The request is wrong (arguments, a reserved key, a target off the agent's host).
    #[error("{0}")]
    Invalid(String),
    /// The node is not ready for it (not waiting, no agent yet, a write running).
    #[error("{0}")]
    NotReady(String),
    /// The node's record lacks what the request needs (BMC address, credentials).
    #[error("{0}")]
    NotConfigured(String),
    /// The BMC, the agent or an image server failed, refused or was unreachable.
    #[error("{0}")]
    Remote(String),
    /// The host failed (its store): a trap, not an answer.
    #[error("{0}")]
    Host(String),
}

/// The store's answers about the node (not found, not waiting, moved on) mean it is not
/// ready; a refused field is the driver's; the store's own failures (it cannot write now,
/// corrupt or lost data) are the host's, never the driver's fault. By the store's one
/// classification ([`StoreError::class`]), which the API reads too.
impl From<StoreError> for CapabilityError {
    fn from(e: StoreError) -> Self {
        match e.class() {
            ErrorClass::NotFound | ErrorClass::Conflict | ErrorClass::WrongState => {
                CapabilityError::NotReady(e.to_string())
            }
            ErrorClass::Taken | ErrorClass::Invalid => CapabilityError::Invalid(e.to_string()),
            ErrorClass::Transient | ErrorClass::Broken => CapabilityError::Host(e.to_string()),
        }
    }
}

/// For the imports whose WIT result has no error case (`node.get`, `get-scratch`): any
/// failure is the host's, and traps.
pub fn infallible<T, E: Into<CapabilityError>>(result: Result<T, E>) -> wasmtime::Result<T> {
    result.map_err(|e| wasmtime::Error::new(HostFailure(e.into().to_string())))
}

/// The trap a failure of the host ends a call with; the sandbox turns it into the
/// plugin error `Host`, naming the driver.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct HostFailure(pub String);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state_machine::ProvisionState;

    /// A store that lost data, or whose manifest cannot be read, is the host's failure (it
    /// was once reported as the driver's invalid request).
    #[test]
    fn the_stores_own_failures_are_the_hosts_and_its_answers_the_nodes() {
        let host = [
            StoreError::Manifest("unreadable".into()),
            StoreError::Unavailable("no space left on device".into()),
            StoreError::Corrupt("node x".into()),
            StoreError::Unsupported {
                backend: "shared",
                operation: "read history",
            },
        ];
        for e in host {
            let text = e.to_string();
            assert_eq!(CapabilityError::from(e), CapabilityError::Host(text));
        }
        let node = uuid::Uuid::nil();
        let not_ready = StoreError::NotWaiting {
            node,
            state: ProvisionState::Deploying,
        };
        assert!(matches!(
            CapabilityError::from(not_ready),
            CapabilityError::NotReady(_)
        ));
        assert!(matches!(
            CapabilityError::from(StoreError::NameTaken("n1".into())),
            CapabilityError::Invalid(_)
        ));
    }
}
