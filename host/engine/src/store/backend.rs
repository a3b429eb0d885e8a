//! The seam between the engine and where its nodes live: the node operations both stores
//! provide with one meaning, the embedded sled [`Store`] (one engine) and the shared
//! [`SharedStore`] on PostgreSQL (several). Code written against [`Backend`], and the
//! contract tests that run on both (`tests/store_contract.rs`), cannot tell them apart.
//!
//! The operations are the provisioning domain's, not a key-value store's: each backend
//! makes them atomic its own way (a node's lock and one sled insert; a row lock and a
//! transaction), and both run the same rules (`transitions::advanced`, `touches::touched`,
//! `expiry::judge`). Only the clock differs: the sled store's is the engine's, the shared
//! store's the database's.

use std::future::Future;

use uuid::Uuid;

use super::Store;
use super::postgres::SharedStore;
use super::{StoreError, TimedOut};
use crate::clock::Timestamp;
use crate::node::{NewNode, Node, Provision};
use crate::state_machine::{Event, ProvisionState};

/// A store of nodes: enrolment, reads, transitions, touches and the sweeper's step.
pub trait Backend: Send + Sync {
    /// Enrolls a node (in `enroll`), durable when it returns.
    fn create_node(&self, new: NewNode) -> impl Future<Output = Result<Node, StoreError>> + Send;

    /// A node by uuid.
    fn node(&self, uuid: Uuid) -> impl Future<Output = Result<Node, StoreError>> + Send;

    /// Applies `event`, only if the node is still in `expected` when that is given;
    /// `last_error` replaces the node's. Durable when it returns.
    fn apply_event(
        &self,
        uuid: Uuid,
        expected: Option<ProvisionState>,
        event: Event,
        last_error: Option<String>,
    ) -> impl Future<Output = Result<Node, StoreError>> + Send;

    /// A live agent's heartbeat: moves a waiting node's clock and deadline to now.
    fn touch(
        &self,
        uuid: Uuid,
        progress: Option<u64>,
    ) -> impl Future<Output = Result<Provision, StoreError>> + Send;

    /// Fails up to `limit` waiting nodes whose deadline has passed now.
    fn fail_expired(
        &self,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<TimedOut>, StoreError>> + Send;

    /// The earliest entry of the deadline index (possibly stale).
    fn next_deadline(&self) -> impl Future<Output = Result<Option<Timestamp>, StoreError>> + Send;
}

/// The handle's operations, as they are (sled's run at once when polled).
impl Backend for Store {
    fn create_node(&self, new: NewNode) -> impl Future<Output = Result<Node, StoreError>> + Send {
        Store::create_node(self, new)
    }

    fn node(&self, uuid: Uuid) -> impl Future<Output = Result<Node, StoreError>> + Send {
        Store::node(self, uuid)
    }

    async fn apply_event(
        &self,
        uuid: Uuid,
        expected: Option<ProvisionState>,
        event: Event,
        last_error: Option<String>,
    ) -> Result<Node, StoreError> {
        match expected {
            Some(expected) => {
                Store::apply_event_from(self, uuid, expected, event, last_error).await
            }
            None => Store::apply_event(self, uuid, event, last_error).await,
        }
    }

    async fn touch(&self, uuid: Uuid, progress: Option<u64>) -> Result<Provision, StoreError> {
        Store::touch(self, uuid, progress)
            .await
            .map(|t| t.provision)
    }

    async fn fail_expired(&self, limit: usize) -> Result<Vec<TimedOut>, StoreError> {
        Store::fail_expired(self, self.clock().now(), limit).await
    }

    fn next_deadline(&self) -> impl Future<Output = Result<Option<Timestamp>, StoreError>> + Send {
        Store::next_deadline(self)
    }
}

/// Unclaimed operations on the shared store: what a single caller (an operator's call, the
/// sweeper) does; a flow step's claimed writes use `SharedStore`'s own methods.
impl Backend for SharedStore {
    fn create_node(&self, new: NewNode) -> impl Future<Output = Result<Node, StoreError>> + Send {
        SharedStore::create_node(self, new)
    }

    fn node(&self, uuid: Uuid) -> impl Future<Output = Result<Node, StoreError>> + Send {
        SharedStore::node(self, uuid)
    }

    fn apply_event(
        &self,
        uuid: Uuid,
        expected: Option<ProvisionState>,
        event: Event,
        last_error: Option<String>,
    ) -> impl Future<Output = Result<Node, StoreError>> + Send {
        SharedStore::apply_event(self, uuid, expected, event, last_error, None)
    }

    fn touch(
        &self,
        uuid: Uuid,
        progress: Option<u64>,
    ) -> impl Future<Output = Result<Provision, StoreError>> + Send {
        SharedStore::touch(self, uuid, progress)
    }

    fn fail_expired(
        &self,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<TimedOut>, StoreError>> + Send {
        SharedStore::fail_expired(self, i64::try_from(limit).unwrap_or(i64::MAX), None)
    }

    fn next_deadline(&self) -> impl Future<Output = Result<Option<Timestamp>, StoreError>> + Send {
        SharedStore::next_deadline(self)
    }
}
