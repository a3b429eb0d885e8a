//! Why a capability did not do what a driver asked, and the trap a failure of the host
//! ends a call with. Apart from the bindings, which name [`CapabilityError`] as the
//! world's trappable error type.

use crate::store::StoreError;

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
/// ready; its own failures (sled, corrupt or locked data) are the host's.
impl From<StoreError> for CapabilityError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Db(_)
            | StoreError::Shared(_)
            | StoreError::Schema { .. }
            | StoreError::Fenced(_)
            | StoreError::Corrupt(_)
            | StoreError::Locked(_)
            | StoreError::Format { .. }
            | StoreError::Unavailable(_) => CapabilityError::Host(e.to_string()),
            StoreError::NodeNotFound(_)
            | StoreError::NotWaiting { .. }
            | StoreError::StateChanged { .. }
            | StoreError::NotOwner { .. }
            | StoreError::IllegalTransition { .. } => CapabilityError::NotReady(e.to_string()),
            other => CapabilityError::Invalid(other.to_string()),
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
