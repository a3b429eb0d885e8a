//! Engines and their leases on the shared store.
//!
//! An engine is a row whose lease is renewed every few seconds to [`LeaseTimes::lease`]
//! ahead on the database's clock, so engines whose clocks disagree agree on who is alive. Its epoch grows each time
//! it rejoins: a claim is `(engine, epoch)`, so what an engine claimed before it was
//! declared dead stays dead with it. Declaring an expired engine dead is a
//! compare-and-swap in one `UPDATE` (the lease's expiry rechecked under the row's lock),
//! so when several survivors try at once exactly one wins, and only it takes the dead
//! engine's nodes over.

use std::time::Duration;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::nodes::{self, Guard};
use super::rows::stamp;
use super::{Lease, SharedStore, db_error};
use crate::clock::Timestamp;
use crate::state_machine::Event;
use crate::store::StoreError;

/// How long a lease lasts from its last renewal, and how often an engine renews it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaseTimes {
    pub lease: Duration,
    pub renew_every: Duration,
}

impl Default for LeaseTimes {
    fn default() -> Self {
        LeaseTimes {
            lease: Duration::from_secs(10),
            renew_every: Duration::from_secs(2),
        }
    }
}

/// An engine as `GET /v1/conductors` lists it.
#[derive(Clone, Debug, PartialEq)]
pub struct EngineInfo {
    pub id: i64,
    pub epoch: i64,
    pub hostname: String,
    pub conductor_group: String,
    /// Where its API answers other engines (see [`EngineId::url`]).
    pub url: String,
    pub drivers: Vec<String>,
    pub started_at: Timestamp,
    pub lease_until: Timestamp,
    /// Its lease lives and no engine has declared it dead.
    pub alive: bool,
}

/// What an engine registers as.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EngineId {
    /// Its name in the API (a node's `conductor`, `/v1/conductors`): host and API port.
    pub hostname: String,
    /// The nodes whose steps it runs: those of this `conductor_group` (Ironic's
    /// `[conductor]conductor_group`; "" is the default group).
    pub conductor_group: String,
    /// Where its API answers other engines, which send it the step calls for the nodes
    /// of its group that reach them ("" where no other engine may reach it).
    pub url: String,
}

impl EngineId {
    /// An engine of the default group that other engines cannot reach (tests).
    pub fn named(hostname: &str) -> EngineId {
        EngineId {
            hostname: hostname.to_owned(),
            ..EngineId::default()
        }
    }
}

/// An engine a survivor declared dead.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeadEngine {
    pub id: i64,
    pub epoch: i64,
    pub hostname: String,
    /// Its group's engines take its nodes over (they are the ones that may run the
    /// clean-ups the takeover owes).
    pub conductor_group: String,
}

/// What a survivor did with a dead engine's nodes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TakenOver {
    /// Waiting on agents or at rest: their claim let go; they carry on anywhere.
    pub released: Vec<Uuid>,
    /// In the middle of a step the dead engine was running: failed, naming it.
    pub failed: Vec<Uuid>,
}

/// Whether a renewal kept the lease or found the engine declared dead and rejoined.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Renewed {
    Held,
    /// Declared dead meanwhile: registered again under a new epoch; its old claims are gone.
    Rejoined,
}

impl SharedStore {
    /// Registers this engine with a lease of [`LeaseTimes::lease`].
    pub async fn register(&self, me: &EngineId, drivers: &[String]) -> Result<Lease, StoreError> {
        let client = self.client().await?;
        let row = client
            .query_one(
                "INSERT INTO engines (hostname, conductor_group, url, drivers, lease_until)
                 VALUES ($1, $2, $3, $4, now() + $5::float8 * interval '1 millisecond')
                 RETURNING id, epoch",
                &[
                    &me.hostname,
                    &me.conductor_group,
                    &me.url,
                    &drivers,
                    &millis(self.lease_times.lease),
                ],
            )
            .await
            .map_err(db_error)?;
        Ok(Lease {
            id: row.get(0),
            epoch: row.get(1),
        })
    }

    /// Renews `lease`; an engine found declared dead rejoins with a new epoch (and
    /// `lease` is updated to it).
    pub async fn renew(&self, lease: &mut Lease) -> Result<Renewed, StoreError> {
        let client = self.lease_client().await?;
        let held = client
            .execute(
                "UPDATE engines SET lease_until = now() + $3::float8 * interval '1 millisecond'
                 WHERE id = $1 AND epoch = $2 AND dead_at IS NULL",
                &[&lease.id, &lease.epoch, &millis(self.lease_times.lease)],
            )
            .await
            .map_err(db_error)?;
        if held == 1 {
            return Ok(Renewed::Held);
        }
        let row = client
            .query_opt(
                "UPDATE engines SET epoch = epoch + 1, dead_at = NULL, dead_by = NULL,
                     lease_until = now() + $2::float8 * interval '1 millisecond'
                 WHERE id = $1 RETURNING epoch",
                &[&lease.id, &millis(self.lease_times.lease)],
            )
            .await
            .map_err(db_error)?
            .ok_or_else(|| StoreError::Fenced(format!("engine {} is not registered", lease.id)))?;
        lease.epoch = row.get(0);
        Ok(Renewed::Rejoined)
    }

    /// Ends `me`'s lease now, as an engine that stops cleanly does: it is dead at once, so
    /// a survivor takes over what it holds and an engine starting next need not wait for
    /// its lease to lapse.
    pub async fn leave(&self, me: &Lease) -> Result<(), StoreError> {
        let client = self.client().await?;
        client
            .execute(
                "UPDATE engines SET lease_until = now(), dead_at = now(), dead_by = id
                 WHERE id = $1 AND epoch = $2 AND dead_at IS NULL",
                &[&me.id, &me.epoch],
            )
            .await
            .map_err(db_error)?;
        Ok(())
    }

    /// Marks every engine whose lease expired dead, if `me`'s own lease lives; returns the
    /// engines this call declared dead (each to exactly one caller).
    pub async fn declare_dead(&self, me: &Lease) -> Result<Vec<DeadEngine>, StoreError> {
        let client = self.lease_client().await?;
        let rows = client
            .query(
                "UPDATE engines SET dead_at = now(), dead_by = $1
                 WHERE dead_at IS NULL AND lease_until < now() AND id <> $1
                   AND EXISTS (SELECT 1 FROM engines me WHERE me.id = $1 AND me.epoch = $2
                               AND me.dead_at IS NULL AND me.lease_until > now())
                 RETURNING id, epoch, hostname, conductor_group",
                &[&me.id, &me.epoch],
            )
            .await
            .map_err(db_error)?;
        Ok(rows.iter().map(dead_engine).collect())
    }

    /// Takes over the nodes `dead` held claims on: a node waiting on its agent, or at
    /// rest, carries on (its claim let go); a node in the middle of a step fails with a
    /// `last_error` that names the dead engine.
    pub async fn take_over(&self, me: &Lease, dead: &DeadEngine) -> Result<TakenOver, StoreError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(db_error)?;
        let owned: Vec<Uuid> = tx
            .query(
                "SELECT uuid FROM nodes WHERE owner = $1 AND owner_epoch <= $2 ORDER BY uuid",
                &[&dead.id, &dead.epoch],
            )
            .await
            .map_err(db_error)?
            .iter()
            .map(|r| r.get(0))
            .collect();
        let mut done = TakenOver::default();
        for uuid in owned {
            let locked = nodes::lock(&tx, uuid).await?;
            // Another survivor may have taken it over while this one waited for the row.
            if !locked
                .claim
                .owner
                .is_some_and(|(id, epoch)| id == dead.id && epoch <= dead.epoch)
            {
                continue;
            }
            let state = locked.provision.state;
            if state.is_busy() && state.next(Event::Fail).is_ok() {
                let why = format!(
                    "engine {} (id {}) was working on this node in \"{state}\" and stopped: its lease on the shared store expired, and engine {} took its nodes over",
                    dead.hostname, dead.id, me.id
                );
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
                done.failed.push(uuid);
            } else {
                done.released.push(uuid);
            }
            tx.execute(
                "UPDATE nodes SET owner = NULL, owner_epoch = NULL WHERE uuid = $1",
                &[&uuid],
            )
            .await
            .map_err(db_error)?;
        }
        settle(&tx, dead.id, dead.epoch).await?;
        tx.commit().await.map_err(db_error)?;
        Ok(done)
    }

    /// Engines declared dead (or claims of an epoch an engine has left behind by
    /// rejoining) that still hold claims on nodes: the takeovers still to do, whoever
    /// declared them. Each engine with the highest such epoch.
    ///
    /// Every engine asks at every renewal, and the nodes' `owner` is not indexed (a claim
    /// is then a heap-only update, as a touch is): the nodes are read only for engines
    /// with a dead epoch not yet settled (`settled_epoch`), and an engine found to hold
    /// nothing under its dead epochs is settled at once. A dead epoch gets no new claim
    /// (a claim needs its engine's live lease), so a settled one stays so.
    pub async fn orphaned(&self) -> Result<Vec<DeadEngine>, StoreError> {
        let client = self.client().await?;
        let unsettled = client
            .query(
                "SELECT id, CASE WHEN dead_at IS NULL THEN epoch - 1 ELSE epoch END, hostname,
                        conductor_group
                 FROM engines
                 WHERE settled_epoch < CASE WHEN dead_at IS NULL THEN epoch - 1 ELSE epoch END
                 ORDER BY id",
                &[],
            )
            .await
            .map_err(db_error)?;
        if unsettled.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<i64> = unsettled.iter().map(|r| r.get(0)).collect();
        let upto: Vec<i64> = unsettled.iter().map(|r| r.get(1)).collect();
        let held: std::collections::HashMap<i64, i64> = client
            .query(
                "SELECT n.owner, max(n.owner_epoch)
                 FROM nodes n JOIN unnest($1::int8[], $2::int8[]) AS u(id, upto)
                      ON n.owner = u.id AND n.owner_epoch <= u.upto
                 GROUP BY n.owner",
                &[&ids, &upto],
            )
            .await
            .map_err(db_error)?
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect();
        let mut orphaned = Vec::new();
        for row in &unsettled {
            let (id, upto): (i64, i64) = (row.get(0), row.get(1));
            match held.get(&id) {
                Some(&epoch) => orphaned.push(DeadEngine {
                    id,
                    epoch,
                    hostname: row.get(2),
                    conductor_group: row.get(3),
                }),
                None => settle(&client, id, upto).await?,
            }
        }
        Ok(orphaned)
    }

    /// Records the drivers `me` runs (what `/v1/conductors` shows of it to other engines).
    pub async fn announce_drivers(&self, me: &Lease, drivers: &[String]) -> Result<(), StoreError> {
        let client = self.client().await?;
        client
            .execute(
                "UPDATE engines SET drivers = $3 WHERE id = $1 AND epoch = $2",
                &[&me.id, &me.epoch, &drivers],
            )
            .await
            .map_err(db_error)?;
        Ok(())
    }

    /// Every registered engine, alive or not, by id.
    pub async fn engines(&self) -> Result<Vec<EngineInfo>, StoreError> {
        let client = self.client().await?;
        let rows = client
            .query(
                "SELECT id, epoch, hostname, conductor_group, drivers, started_at, lease_until,
                        dead_at IS NULL AND lease_until > now(), url
                 FROM engines ORDER BY id",
                &[],
            )
            .await
            .map_err(db_error)?;
        Ok(rows
            .iter()
            .map(|r| EngineInfo {
                id: r.get(0),
                epoch: r.get(1),
                hostname: r.get(2),
                conductor_group: r.get(3),
                drivers: r.get(4),
                started_at: stamp(r.get::<_, DateTime<Utc>>(5)),
                lease_until: stamp(r.get::<_, DateTime<Utc>>(6)),
                alive: r.get(7),
                url: r.get(8),
            })
            .collect())
    }
}

/// An engine from a row of `id, epoch, hostname, conductor_group`.
fn dead_engine(r: &tokio_postgres::Row) -> DeadEngine {
    DeadEngine {
        id: r.get(0),
        epoch: r.get(1),
        hostname: r.get(2),
        conductor_group: r.get(3),
    }
}

fn millis(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Records that engine `id` holds no claim under any epoch up to `epoch`.
async fn settle(
    client: &impl deadpool_postgres::GenericClient,
    id: i64,
    epoch: i64,
) -> Result<(), StoreError> {
    client
        .execute(
            "UPDATE engines SET settled_epoch = GREATEST(settled_epoch, $2) WHERE id = $1",
            &[&id, &epoch],
        )
        .await
        .map_err(db_error)?;
    Ok(())
}
