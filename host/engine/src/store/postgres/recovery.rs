//! An engine starting on the shared store, beside whichever engines serve it: it recovers
//! the fleet by the rule every backend applies (`store::recovery`), except for what a live
//! engine holds.
//!
//! A busy node whose claim a live engine holds is that engine's step, going on: left
//! alone. A busy node no live engine claims was left by an engine that is gone without a
//! takeover (an engine of a deployd before the database's claims, a fleet restored or
//! copied in): failed in `restarted`'s words. A busy node a dead engine still claims is
//! its survivors' to take over (`leases`), naming it. Waiting nodes are re-derived for the
//! timeouts configured now, whoever claims them.

use uuid::Uuid;

use super::nodes::{Guard, lock, write};
use super::{Lease, SharedStore, db_error};
use crate::state_machine::Event;
use crate::store::recovery::{rederived, restarted};
use crate::store::{Recovery, StoreError};

/// Nodes read per query while recovering.
const PAGE: usize = 256;

impl SharedStore {
    /// Recovers the fleet for `me`, an engine that has just joined (see the module's doc).
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

    /// Fails a node still busy under its row's lock, in the words of `restarted`, unless a
    /// live engine claims it (its step goes on) or a dead one does (a survivor takes it
    /// over, naming that engine).
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
        if !state.is_busy() || locked.claim.owner.is_some() {
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
