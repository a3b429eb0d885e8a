//! Which nodes a conductor task is working on, and what that task is: Ironic's
//! `reservation` column, in memory (neon's `IdLockMap` pattern).
//!
//! A [`Claim`] is the right to write a node's record and run its driver. Whoever holds it
//! is named in the refusal others get ("locked … for deploy"), and it is released when
//! the claim is dropped, whatever happened. A task that must run on a node (the clean-up
//! after a timeout) waits for the claim without polling: releases wake the waiters.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

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

    /// Claims `node` for `operation` if whoever holds it lets go within `wait`; else says
    /// who holds it. An operator's call waits so (Ironic's lock retry): a heartbeat's step
    /// or a power action holds a node for moments, and should not fail the call.
    pub async fn claim_within(
        self: &Arc<Self>,
        node: Uuid,
        operation: &'static str,
        wait: Duration,
    ) -> Result<Claim, Held> {
        match tokio::time::timeout(wait, self.claim(node, operation)).await {
            Ok(claim) => Ok(claim),
            Err(_) => self.try_claim(node, operation),
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

    /// A holder that lets go just inside the wait hands over; one that keeps it just past
    /// the wait is named in the refusal. Nothing polls: the clock is paused and jumps.
    #[tokio::test(start_paused = true)]
    async fn a_patient_claim_waits_its_budget_and_no_longer() {
        let r = Arc::new(Reservations::default());
        let node = Uuid::new_v4();
        let wait = Duration::from_secs(2);
        for (hold, handed_over) in [
            (wait - Duration::from_millis(1), true),
            (wait + Duration::from_millis(1), false),
        ] {
            let claim = r.try_claim(node, "heartbeat").unwrap();
            tokio::spawn(async move {
                tokio::time::sleep(hold).await;
                drop(claim);
            });
            let started = tokio::time::Instant::now();
            let got = r.claim_within(node, "update", wait).await;
            match handed_over {
                true => {
                    assert_eq!(got.as_ref().map(|c| c.node()).ok(), Some(node));
                    assert_eq!(started.elapsed(), hold, "taken the moment it was let go");
                    drop(got);
                }
                false => {
                    assert_eq!(
                        got.err(),
                        Some(Held {
                            node,
                            by: "heartbeat"
                        })
                    );
                    assert_eq!(started.elapsed(), wait);
                }
            }
            tokio::time::sleep(wait).await;
            assert_eq!(r.holder(node), None);
        }
        let free = r.claim_within(node, "update", Duration::ZERO).await;
        assert!(free.is_ok(), "a free node is claimed even with no wait");
    }
}
