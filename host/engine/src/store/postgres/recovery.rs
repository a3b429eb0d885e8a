//! An engine starting alone on the shared store: it waits for a crashed predecessor's
//! lease to lapse, refuses to serve beside another live engine, and recovers the fleet by
//! the rule every backend applies (`store::recovery`): busy nodes failed, waiting ones
//! re-derived for the timeouts configured now.
//!
//! Alone, because the conductor's claims on a node are still this process's own (its
//! reservations): two engines serving one database could both run a step on one node.
//! The claims that let several engines share a fleet are the database's (`leases`), and
//! serving turns them on when the conductor takes them.

use std::time::Duration;

use tokio::time::Instant;
use uuid::Uuid;

use super::nodes::{Guard, lock, write};
use super::{Lease, SharedStore, db_error};
use crate::state_machine::Event;
use crate::store::recovery::{rederived, restarted};
use crate::store::{Recovery, StoreError};

/// Nodes read per query while recovering.
const PAGE: usize = 256;

impl SharedStore {
    /// Waits until no engine but `me` holds a live lease, for at most a lease and a
    /// renewal (what a crashed engine's lease takes to lapse); refuses if one still does.
    pub async fn wait_alone(&self, me: &Lease) -> Result<(), StoreError> {
        let times = self.lease_times();
        let until = Instant::now() + times.lease + times.renew_every;
        loop {
            let others: Vec<String> = self
                .engines()
                .await?
                .into_iter()
                .filter(|e| e.alive && e.id != me.id)
                .map(|e| format!("{} (id {})", e.hostname, e.id))
                .collect();
            if others.is_empty() {
                return Ok(());
            }
            if Instant::now() >= until {
                return Err(StoreError::NotAlone(others.join(", ")));
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// Recovers the fleet for `me`, alone on the store (see the module's doc).
    pub async fn recover(&self, me: &Lease) -> Result<Recovery, StoreError> {
        let mut report = Recovery::default();
        let mut marker = None;
        loop {
            let page = self.list_nodes(marker, PAGE).await?;
            for node in &page {
                report.nodes += 1;
                let p = &node.provision;
                if p.state.is_busy() {
                    let failed = self.fail_restarted(node.uuid(), me).await?;
                    report.failed.extend(failed);
                    continue;
                }
                let fresh = rederived(self.timeouts(), p);
                if fresh.deadline.is_some() {
                    report.waiting += 1;
                }
                if fresh != *p && self.rederive(node.uuid()).await? {
                    report.rescheduled += 1;
                }
            }
            match page.last() {
                Some(last) if page.len() == PAGE => marker = Some(last.uuid()),
                _ => return Ok(report),
            }
        }
    }

    /// Fails a node still busy under its row's lock, in the words of `restarted`.
    async fn fail_restarted(
        &self,
        uuid: Uuid,
        me: &Lease,
    ) -> Result<
        Option<(
            Uuid,
            crate::state_machine::ProvisionState,
            crate::state_machine::ProvisionState,
        )>,
        StoreError,
    > {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(db_error)?;
        let locked = lock(&tx, uuid).await?;
        let state = locked.provision.state;
        let Ok(failed) = state.next(Event::Fail) else {
            return Ok(None);
        };
        if !state.is_busy() {
            return Ok(None);
        }
        let why = restarted(uuid, state, failed);
        self.transition(
            &tx,
            uuid,
            locked,
            Event::Fail,
            Some(why),
            Guard::None,
            Some(me),
        )
        .await?;
        tx.commit().await.map_err(db_error)?;
        Ok(Some((uuid, state, failed)))
    }

    /// Writes a node's deadline as the timeouts configured now derive it, under its row's
    /// lock; returns whether it changed.
    async fn rederive(&self, uuid: Uuid) -> Result<bool, StoreError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(db_error)?;
        let locked = lock(&tx, uuid).await?;
        let fresh = rederived(self.timeouts(), &locked.provision);
        if fresh == locked.provision {
            return Ok(false);
        }
        write(
            &tx,
            uuid,
            &fresh,
            &locked.body,
            self.timeouts(),
            Guard::None,
        )
        .await?;
        tx.commit().await.map_err(db_error)?;
        Ok(true)
    }
}
