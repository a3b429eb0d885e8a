//! The handle's claims: a node's claim in the store, beside the conductor's reservation.
//!
//! On sled the reservation is the whole claim (one engine has the store). On the shared
//! store a flow step also claims its node in the database (owner and epoch, see
//! `postgres::leases`), so another engine's step or operator call on it is refused with
//! this engine's name, and while this engine holds the claim every write it makes to the
//! node is fenced by it: written only while the claim is still its own under a live lease.

use super::*;
use crate::store::postgres::Lease;

impl Store {
    /// Whether a node's claim is also the store's (several engines may share it).
    pub fn claims_in_store(&self) -> bool {
        matches!(&self.backend, Backend::Shared(_, Some(_)))
    }

    /// Claims `node` in the store for this engine: on the shared store, refused with
    /// [`StoreError::NotOwner`] while another live engine holds it and with
    /// [`StoreError::Fenced`] while this engine is not sure of its lease; nothing to do
    /// on sled. The caller holds the node's reservation until [`Store::release_node`].
    pub async fn claim_node(&self, node: Uuid) -> Result<(), StoreError> {
        match &self.backend {
            Backend::Shared(_, Some(membership)) => Box::pin(membership.claim(node)).await,
            _ => Ok(()),
        }
    }

    /// Lets go of this engine's claim on `node` in the store (see [`Store::claim_node`]).
    pub async fn release_node(&self, node: Uuid) {
        if let Backend::Shared(_, Some(membership)) = &self.backend {
            Box::pin(membership.release(node)).await
        }
    }

    /// Whether this engine may act on `node`'s machine (its BMC, its agent) now: always on
    /// sled; on the shared store while it is sure of its lease, under the epoch it claimed
    /// the node with (see `postgres::Membership::may_act`).
    pub fn may_act(&self, node: Uuid) -> Result<(), StoreError> {
        match &self.backend {
            Backend::Shared(_, Some(membership)) => membership.may_act(node),
            _ => Ok(()),
        }
    }

    /// The busy nodes this engine fails as it takes a dead engine's nodes over, each as
    /// it is failed, for their driver's clean-up: on the shared store, for the first
    /// caller; none on sled (its one engine has no other to take over).
    pub fn takeover_failures(&self) -> Option<tokio::sync::mpsc::UnboundedReceiver<Uuid>> {
        match &self.backend {
            Backend::Shared(_, Some(membership)) => membership.failures(),
            _ => None,
        }
    }

    /// The epoch this engine acts under, while it is sure of its lease (none while it is
    /// not); 0 on sled, whose one engine holds no lease. What an engine started under an
    /// epoch is its own only while that epoch lives (`engines`).
    pub fn acting_epoch(&self) -> Option<i64> {
        match &self.backend {
            Backend::Shared(_, Some(membership)) => membership.current().map(|l| l.epoch),
            _ => Some(0),
        }
    }

    /// The lease this engine holds `node`'s claim under, which fences its writes to it.
    pub(super) fn claimed(&self, node: Uuid) -> Option<Lease> {
        match &self.backend {
            Backend::Shared(_, Some(membership)) => membership.claim_of(node),
            _ => None,
        }
    }
}
