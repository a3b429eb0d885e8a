//! An engine's membership of the shared store: registered, its lease renewed every
//! [`LeaseTimes::renew_every`](super::LeaseTimes), every engine whose lease expired
//! declared dead (one survivor wins each), and what dead engines still hold taken over.
//!
//! [`Membership::current`] is the lease only while this engine knows it holds: until one
//! renewal period before the lease could have expired, counted on tokio's clock from
//! when the last successful renewal was *sent* (the database stamped it later, so the
//! lease lasts at least that long). An engine that cannot renew, a paused process, or a
//! database it cannot reach, gets `None` and starts no BMC or agent action; its claimed
//! writes would be fenced anyway.
//!
//! The membership also knows which nodes this engine claimed in the database, each under
//! the epoch it claimed it with: the handle sends those nodes' writes fenced by that claim.
//! The conductor serialises a node's claim and release (its reservation is held from
//! before the claim until after the release), so one node has at most one entry.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use uuid::Uuid;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::leases::{EngineId, Renewed};
use super::{Lease, SharedStore};
use crate::store::StoreError;

struct Held {
    lease: Lease,
    renewed_at: Instant,
}

/// A registered engine's lease, kept by a task; dropping the membership stops renewing.
pub struct Membership {
    held: Arc<Mutex<Held>>,
    store: Arc<SharedStore>,
    task: JoinHandle<()>,
    me: EngineId,
    /// The nodes this engine holds the database's claim on, and under which lease.
    claims: Mutex<HashMap<Uuid, Lease>>,
    /// The busy nodes this engine failed taking a dead engine's over, for their driver's
    /// clean-up (taken once, by the conductor).
    failed: Mutex<Option<mpsc::UnboundedReceiver<Uuid>>>,
}

impl Membership {
    /// Registers this engine and starts keeping its lease.
    pub async fn join(
        store: Arc<SharedStore>,
        me: EngineId,
        drivers: &[String],
    ) -> Result<Membership, StoreError> {
        let renewed_at = Instant::now();
        let lease = store.register(&me, drivers).await?;
        let held = Arc::new(Mutex::new(Held { lease, renewed_at }));
        let (failing, failed) = mpsc::unbounded_channel();
        let group = me.conductor_group.clone();
        let task = tokio::spawn(keep(store.clone(), held.clone(), failing, group));
        Ok(Membership {
            held,
            store,
            task,
            me,
            claims: Mutex::default(),
            failed: Mutex::new(Some(failed)),
        })
    }

    /// The busy nodes this engine fails as it takes dead engines' nodes over, each as it
    /// is failed, for the clean-up their driver owes them (the dead engine ran none): the
    /// first caller gets them, later ones nothing.
    pub fn failures(&self) -> Option<mpsc::UnboundedReceiver<Uuid>> {
        self.failed.lock().unwrap_or_else(|p| p.into_inner()).take()
    }

    /// The name this engine registered under (its host and API port).
    pub fn hostname(&self) -> &str {
        &self.me.hostname
    }

    /// The conductor group whose nodes this engine runs the steps of.
    pub fn conductor_group(&self) -> &str {
        &self.me.conductor_group
    }

    /// The lease, while this engine is sure it holds it.
    pub fn current(&self) -> Option<Lease> {
        let held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        let times = self.store.lease_times();
        let sure_for = times.lease.saturating_sub(times.renew_every);
        (held.renewed_at.elapsed() < sure_for).then_some(held.lease)
    }
}

impl Membership {
    /// Claims `node` in the database for this engine: refused with the owner's name while
    /// another engine with a live lease holds it, and fenced while this engine is not
    /// sure of its own lease (it starts nothing then).
    pub async fn claim(&self, node: Uuid) -> Result<(), StoreError> {
        let lease = self.intend(node)?;
        let claimed = self.store.claim(node, &lease).await;
        if claimed.is_err() {
            self.claims_held().remove(&node);
        }
        claimed
    }

    /// The lease to claim `node` under in a statement of the caller's (a heartbeat's
    /// touch), noted before it is asked for: a caller dropped while the database takes it
    /// still lets go of it (`release`). Fenced while this engine is not sure of its lease.
    pub fn intend(&self, node: Uuid) -> Result<Lease, StoreError> {
        let lease = self.current().ok_or_else(|| {
            StoreError::Fenced(format!(
                "engine {} has not renewed its lease in time, so it takes no claim on node {node}",
                self.me.hostname
            ))
        })?;
        self.claims_held().insert(node, lease);
        Ok(lease)
    }

    /// Forgets the claim [`Membership::intend`] noted: the database refused it.
    pub fn refused(&self, node: Uuid) {
        self.claims_held().remove(&node);
    }

    /// Whether this engine may act on `node`'s machine (its BMC, its agent) now: only
    /// while it is sure of its lease and, when it holds the node's claim, only under the
    /// epoch it claimed it with. An engine declared dead while it was paused rejoins under
    /// a new epoch, and the steps it was running when it stopped act no more.
    pub fn may_act(&self, node: Uuid) -> Result<(), StoreError> {
        let lease = self.current().ok_or_else(|| {
            StoreError::Fenced(format!(
                "engine {} has not renewed its lease in time, so it does not act on node {node}",
                self.me.hostname
            ))
        })?;
        match self.claim_of(node) {
            Some(claim) if claim != lease => Err(StoreError::Fenced(format!(
                "engine {} claimed node {node} under epoch {}, which ended when it was declared dead; it does not act on it",
                self.me.hostname, claim.epoch
            ))),
            _ => Ok(()),
        }
    }

    /// The lease this engine claimed `node` under, while it holds that claim.
    pub fn claim_of(&self, node: Uuid) -> Option<Lease> {
        self.claims_held().get(&node).copied()
    }

    /// Lets go of this engine's claim on `node` (nothing if it holds none). A database it
    /// cannot reach is tried again every second, for as long as the claim's epoch is this
    /// engine's: once it was declared dead, a survivor took the claim over.
    pub async fn release(&self, node: Uuid) {
        let Some(lease) = self.claims_held().remove(&node) else {
            return;
        };
        loop {
            match self.store.release(node, &lease).await {
                Ok(()) => return,
                Err(e) if self.epoch() == lease.epoch => {
                    tracing::warn!(%node, error = %e, "could not let go of a node's claim; trying again");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                Err(_) => return,
            }
        }
    }

    fn epoch(&self) -> i64 {
        self.held
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .lease
            .epoch
    }

    fn claims_held(&self) -> std::sync::MutexGuard<'_, HashMap<Uuid, Lease>> {
        self.claims.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records the drivers this engine runs now in its row, under its current epoch.
    pub async fn announce_drivers(&self, drivers: &[String]) -> Result<(), StoreError> {
        let lease = self.held.lock().unwrap_or_else(|p| p.into_inner()).lease;
        self.store.announce_drivers(&lease, drivers).await
    }

    /// Stops renewing and ends the lease now (see `SharedStore::leave`).
    pub async fn leave(&self) -> Result<(), StoreError> {
        self.task.abort();
        let lease = self.held.lock().unwrap_or_else(|p| p.into_inner()).lease;
        self.store.leave(&lease).await
    }
}

impl Drop for Membership {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn keep(
    store: Arc<SharedStore>,
    held: Arc<Mutex<Held>>,
    failing: mpsc::UnboundedSender<Uuid>,
    group: String,
) {
    let every = store.lease_times().renew_every;
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let sent = Instant::now();
        let mut lease = held.lock().unwrap_or_else(|p| p.into_inner()).lease;
        match store.renew(&mut lease).await {
            Ok(renewed) => {
                if renewed == Renewed::Rejoined {
                    tracing::warn!(
                        engine = lease.id,
                        epoch = lease.epoch,
                        "this engine was declared dead while it could not renew its lease; it rejoined under a new epoch, and its earlier claims are gone"
                    );
                }
                *held.lock().unwrap_or_else(|p| p.into_inner()) = Held {
                    lease,
                    renewed_at: sent,
                };
            }
            Err(e) => {
                tracing::warn!(error = %e, "could not renew this engine's lease");
                continue;
            }
        }
        if let Err(e) = store.declare_dead(&lease).await {
            tracing::warn!(error = %e, "could not look for dead engines");
            continue;
        }
        // Every survivor of a dead engine's conductor group takes over what it still holds
        // (they alone run the clean-ups its busy nodes are owed, as its group's steps): a
        // takeover that failed half-way, or whose survivor died too, is done by the next
        // pass. A group with no engine left keeps its nodes as they are until one joins,
        // as Ironic's nodes of a group without conductors.
        let dead = match store.orphaned().await {
            Ok(dead) => dead
                .into_iter()
                .filter(|d| d.conductor_group == group)
                .collect::<Vec<_>>(),
            Err(e) => {
                tracing::warn!(error = %e, "could not look for dead engines' nodes");
                continue;
            }
        };
        for engine in dead {
            match store.take_over(&lease, &engine).await {
                Ok(taken) if taken == Default::default() => {}
                Ok(taken) => {
                    for &node in &taken.failed {
                        let _ = failing.send(node);
                    }
                    tracing::warn!(
                    dead = %engine.hostname,
                    failed = taken.failed.len(),
                    released = taken.released.len(),
                    "an engine's lease expired: its nodes were taken over"
                    )
                }
                Err(e) => {
                    tracing::error!(dead = %engine.hostname, error = %e, "taking over a dead engine's nodes failed")
                }
            }
        }
    }
}
