//! Which nodes a conductor task is working on, and what that task is: Ironic's
//! `reservation` column, in memory (neon's `IdLockMap` pattern).
//!
//! A [`Claim`] is the right to write a node's record and run its driver. Whoever holds it
//! is named in the refusal others get ("locked … for deploy"), and it is released when
//! the claim is dropped, whatever happened. A task that must run on a node (the clean-up
//! after a timeout) waits for the claim without polling: releases wake the waiters.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;
use uuid::Uuid;

#[derive(Default)]
pub struct Reservations {
    held: Mutex<HashMap<Uuid, &'static str>>,
    released: Notify,
}

/// A node's reservation; released on drop.
pub struct Claim {
    reservations: Arc<Reservations>,
    node: Uuid,
}

/// The node is held by another task, doing `by`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Held {
    pub node: Uuid,
    pub by: &'static str,
}

impl Reservations {
    /// Claims `node` for `operation`, or says who holds it.
    pub fn try_claim(self: &Arc<Self>, node: Uuid, operation: &'static str) -> Result<Claim, Held> {
        let mut held = self.lock();
        if let Some(&by) = held.get(&node) {
            return Err(Held { node, by });
        }
        held.insert(node, operation);
        Ok(Claim {
            reservations: self.clone(),
            node,
        })
    }

    /// Claims `node` for `operation` as soon as whoever holds it lets go.
    pub async fn claim(self: &Arc<Self>, node: Uuid, operation: &'static str) -> Claim {
        loop {
            // Registered before the check, so a release between the two is not missed.
            let released = self.released.notified();
            tokio::pin!(released);
            released.as_mut().enable();
            if let Ok(claim) = self.try_claim(node, operation) {
                return claim;
            }
            released.await;
        }
    }

    /// What the task holding `node` is doing, if one does.
    pub fn holder(&self, node: Uuid) -> Option<&'static str> {
        self.lock().get(&node).copied()
    }

    /// Every node held now.
    pub fn held(&self) -> Vec<Uuid> {
        self.lock().keys().copied().collect()
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<Uuid, &'static str>> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Claim {
    pub fn node(&self) -> Uuid {
        self.node
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        self.reservations.lock().remove(&self.node);
        self.reservations.released.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_held_node_names_its_holder_until_released() {
        let r = Arc::new(Reservations::default());
        let node = Uuid::new_v4();
        let claim = r.try_claim(node, "deploy").unwrap();
        assert_eq!(r.holder(node), Some("deploy"));
        assert_eq!(
            r.try_claim(node, "update").err(),
            Some(Held { node, by: "deploy" })
        );
        assert!(
            r.try_claim(Uuid::new_v4(), "update").is_ok(),
            "others are free"
        );
        drop(claim);
        assert_eq!(r.holder(node), None);
        assert!(r.try_claim(node, "update").is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiter_gets_the_claim_when_it_is_released_without_polling() {
        let r = Arc::new(Reservations::default());
        let node = Uuid::new_v4();
        let claim = r.try_claim(node, "heartbeat").unwrap();
        let waiter = {
            let r = r.clone();
            tokio::spawn(async move { r.claim(node, "timeout clean-up").await })
        };
        tokio::time::sleep(Duration::from_secs(3600)).await;
        assert!(!waiter.is_finished(), "still held: the waiter waits");
        drop(claim);
        let got = waiter.await.unwrap();
        assert_eq!(r.holder(got.node()), Some("timeout clean-up"));
    }
}
