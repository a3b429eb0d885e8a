//! Which nodes a conductor task is working on, and what that task is: Ironic's
//! `reservation` column, in memory (neon's `IdLockMap` pattern), and on the shared store
//! in the database too.
//!
//! A [`Claim`] is the right to write a node's record and run its driver. Whoever holds it
//! is named in the refusal others get ("locked … for deploy"), and it is released when
//! the claim is dropped, whatever happened. A task that must run on a node (the clean-up
//! after a timeout) waits for the claim without polling: releases wake the waiters.
//!
//! On the shared store a claim is first this process's reservation, then the database's
//! (owner and epoch; see `Store::claim_node`), so engines exclude one another as tasks of
//! one engine do. The reservation is held from before the database's claim is asked for
//! until after it was let go: one engine's claims and releases of a node are thus in
//! order, and a step's release can never drop the claim the engine's next step took.
//! Another engine's release is not heard: a call that waits for one asks again every
//! [`ANOTHER_ENGINE`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;
use uuid::Uuid;

use crate::store::{Store, StoreError};

/// How often a claim another engine holds is asked for again while a call waits for it.
const ANOTHER_ENGINE: Duration = Duration::from_millis(200);

#[derive(Default)]
pub struct Reservations {
    held: Mutex<HashMap<Uuid, &'static str>>,
    released: Notify,
    /// The store whose claims back the reservations (none: this process's only).
    store: Option<Arc<Store>>,
}

/// A node's reservation; released on drop.
pub struct Claim {
    reservations: Arc<Reservations>,
    node: Uuid,
    /// Whether the store's claim was asked for (and so must be let go).
    in_store: bool,
}

/// The node is held: by a task of this engine (`task`), or by another engine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Held {
    pub node: Uuid,
    /// The engine that holds it (this one's name for its own tasks).
    pub host: String,
    /// What this engine's task holding it does; unknown for another engine's.
    pub task: Option<&'static str>,
}

/// Why a claim was not had.
#[derive(Debug)]
pub enum Refused {
    Held(Held),
    /// The store could not take the claim (a lapsed lease, an unreachable database).
    Store(StoreError),
}

impl From<Held> for Refused {
    fn from(held: Held) -> Self {
        Refused::Held(held)
    }
}

impl Reservations {
    /// Reservations backed by `store`'s claims (which are nothing more on sled).
    pub fn backed_by(store: Arc<Store>) -> Reservations {
        Reservations {
            store: Some(store),
            ..Reservations::default()
        }
    }

    /// Claims `node` for `operation` now, or says who holds it.
    pub async fn try_claim(
        self: &Arc<Self>,
        node: Uuid,
        operation: &'static str,
    ) -> Result<Claim, Refused> {
        let reserved = self.reserve(node, operation)?;
        self.in_store(reserved).await
    }

    /// Claims `node` for `operation` as soon as whoever holds it lets go; refused only
    /// when the store cannot take the claim.
    pub async fn claim(
        self: &Arc<Self>,
        node: Uuid,
        operation: &'static str,
    ) -> Result<Claim, Refused> {
        loop {
            let reserved = self.reserved(node, operation).await;
            match self.in_store(reserved).await {
                Err(Refused::Held(_)) => tokio::time::sleep(ANOTHER_ENGINE).await,
                claimed => return claimed,
            }
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
    ) -> Result<Claim, Refused> {
        let until = Instant::now() + wait;
        loop {
            let reserved =
                match tokio::time::timeout_at(until, self.reserved(node, operation)).await {
                    Ok(reserved) => reserved,
                    Err(_) => self.reserve(node, operation)?,
                };
            match self.in_store(reserved).await {
                Err(Refused::Held(_)) if Instant::now() < until => {
                    tokio::time::sleep_until(until.min(Instant::now() + ANOTHER_ENGINE)).await
                }
                claimed => return claimed,
            }
        }
    }

    /// What the task holding `node` is doing, if one of this engine's does.
    pub fn holder(&self, node: Uuid) -> Option<&'static str> {
        self.lock().get(&node).copied()
    }

    /// Every node held now.
    pub fn held(&self) -> Vec<Uuid> {
        self.lock().keys().copied().collect()
    }

    /// This process's reservation of `node` now, or who holds it here; the store's claim
    /// is the caller's to take, in a statement of its own (a heartbeat's touch: see
    /// `Store::touch_heard`), and to report with [`Claim::taken_in_store`].
    pub fn reserve(self: &Arc<Self>, node: Uuid, operation: &'static str) -> Result<Claim, Held> {
        let mut held = self.lock();
        if let Some(&by) = held.get(&node) {
            return Err(Held {
                node,
                host: self.host().to_owned(),
                task: Some(by),
            });
        }
        held.insert(node, operation);
        Ok(Claim {
            reservations: self.clone(),
            node,
            in_store: false,
        })
    }

    /// This process's reservation of `node`, as soon as this engine's holder lets go.
    async fn reserved(self: &Arc<Self>, node: Uuid, operation: &'static str) -> Claim {
        loop {
            // Registered before the check, so a release between the two is not missed.
            let released = self.released.notified();
            tokio::pin!(released);
            released.as_mut().enable();
            if let Ok(claim) = self.reserve(node, operation) {
                return claim;
            }
            released.await;
        }
    }

    /// `reserved` made the store's claim too. Dropped on the way (its caller gone), the
    /// claim lets go of whatever it got.
    async fn in_store(&self, mut reserved: Claim) -> Result<Claim, Refused> {
        let Some(store) = self.store.as_ref().filter(|s| s.claims_in_store()) else {
            return Ok(reserved);
        };
        reserved.asking_store();
        let claimed = store.claim_node(reserved.node).await;
        reserved.taken_in_store(claimed)
    }

    /// The name this engine's own tasks hold nodes under.
    fn host(&self) -> &str {
        self.store
            .as_ref()
            .map_or(crate::node::CONDUCTOR, |s| s.conductor_name())
    }

    fn let_go(&self, node: Uuid) {
        self.lock().remove(&node);
        self.released.notify_waiters();
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<Uuid, &'static str>> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Claim {
    pub fn node(&self) -> Uuid {
        self.node
    }

    /// Notes that the store's claim is being asked for with this reservation (before it
    /// is): dropped on the way, it lets go of whatever the store took.
    pub fn asking_store(&mut self) {
        self.in_store = true;
    }

    /// This reservation with the store's claim, as the store answered when asked for it:
    /// refused, the store holds nothing of it to let go (and the reservation goes).
    pub fn taken_in_store(mut self, claimed: Result<(), StoreError>) -> Result<Claim, Refused> {
        if claimed.is_ok() {
            self.in_store = true;
            return Ok(self);
        }
        self.in_store = false;
        match claimed {
            Ok(()) => unreachable!("taken above"),
            Err(StoreError::NotOwner { node, owner }) => Err(Refused::Held(Held {
                node,
                host: owner,
                task: None,
            })),
            Err(e) => Err(Refused::Store(e)),
        }
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        // Most claims (every one on sled) were never the store's: let go at once, with no
        // runtime looked up and no handle cloned on the heartbeat's path.
        if !self.in_store {
            return self.reservations.let_go(self.node);
        }
        match (
            &self.reservations.store,
            tokio::runtime::Handle::try_current(),
        ) {
            // The reservation goes once the store's claim was let go (see the module's doc).
            (Some(store), Ok(runtime)) => {
                let (store, reservations, node) =
                    (store.clone(), self.reservations.clone(), self.node);
                runtime.spawn(async move {
                    store.release_node(node).await;
                    reservations.let_go(node);
                });
            }
            _ => self.reservations.let_go(self.node),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Who holds `node` for `task`, as this engine's own refusal names it.
    fn held_for(node: Uuid, task: &'static str) -> Option<Held> {
        Some(Held {
            node,
            host: "deployd".into(),
            task: Some(task),
        })
    }

    fn refused_by(got: Result<Claim, Refused>) -> Option<Held> {
        match got {
            Err(Refused::Held(held)) => Some(held),
            _ => None,
        }
    }

    #[tokio::test]
    async fn a_held_node_names_its_holder_until_released() {
        let r = Arc::new(Reservations::default());
        let node = Uuid::new_v4();
        let claim = r.try_claim(node, "deploy").await.unwrap();
        assert_eq!(r.holder(node), Some("deploy"));
        assert_eq!(
            refused_by(r.try_claim(node, "update").await),
            held_for(node, "deploy")
        );
        assert!(
            r.try_claim(Uuid::new_v4(), "update").await.is_ok(),
            "others are free"
        );
        drop(claim);
        assert_eq!(r.holder(node), None);
        assert!(r.try_claim(node, "update").await.is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiter_gets_the_claim_when_it_is_released_without_polling() {
        let r = Arc::new(Reservations::default());
        let node = Uuid::new_v4();
        let claim = r.try_claim(node, "heartbeat").await.unwrap();
        let waiter = {
            let r = r.clone();
            tokio::spawn(async move { r.claim(node, "timeout clean-up").await.unwrap() })
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
            let claim = r.try_claim(node, "heartbeat").await.unwrap();
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
                    assert_eq!(refused_by(got), held_for(node, "heartbeat"));
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
