//! One owner per node: every write to a node's keys happens under that node's lock.
//!
//! A touch, a transition and the sweeper's "is it still expired? then fail it" are each a
//! read-check-write of the same provision record. Serialising them per node makes the
//! compare-and-swap the sweeper needs trivially true, and lets a write span several sled
//! trees without a transaction on the heartbeat path. Locks are striped (a fixed array
//! indexed by the uuid's random bits), so memory does not grow with the fleet. Critical
//! sections are a few sled operations and never wait on anything else: nothing that holds
//! a stripe takes a second one, so stripes cannot deadlock.

use std::sync::{Mutex, MutexGuard};

use uuid::Uuid;

const STRIPES: usize = 4096;

pub(super) struct NodeLocks(Box<[Mutex<()>]>);

impl NodeLocks {
    pub(super) fn new() -> Self {
        NodeLocks((0..STRIPES).map(|_| Mutex::new(())).collect())
    }

    pub(super) fn lock(&self, uuid: Uuid) -> MutexGuard<'_, ()> {
        let stripe = (uuid.as_u128() as u64 as usize) % STRIPES;
        // A panic under the lock leaves no half-applied state behind (sled writes are
        // atomic per operation), so a poisoned stripe is still safe to take.
        self.0[stripe]
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}
