//! The sweeper's step on the shared store, which every engine runs.
//!
//! One transaction takes the due rows (`due <= now()`) with `FOR UPDATE SKIP LOCKED`: two
//! engines sweeping at once take disjoint sets, and a row another transaction holds (a
//! touch, a transition) is left for the next sweep, never waited on. Under the row lock
//! the verdict is the sled store's own (`expiry::judge`): a touch that committed first has
//! moved the deadline, and the entry is re-filed there; a touch that comes after waits for
//! the row and then finds it failed, so it is refused. The failing `UPDATE` rechecks the
//! deadline itself. No node is both acknowledged and failed.

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::nodes::{Claim, Guard, Locked};
use super::rows::{self, PROVISION, stamp};
use super::{Lease, SharedStore, db_error};
use crate::clock::Timestamp;
use crate::state_machine::Event;
use crate::store::expiry::{Verdict, judge};
use crate::store::{StoreError, TimedOut, parse_body};

impl SharedStore {
    /// Every node's place in the sweeper's index (`due`), in that order (diagnostics and
    /// tests).
    pub async fn deadline_index(&self) -> Result<Vec<(Timestamp, Uuid)>, StoreError> {
        let client = self.client().await?;
        let rows = client
            .query(
                "SELECT due, uuid FROM nodes WHERE due IS NOT NULL ORDER BY due, uuid",
                &[],
            )
            .await
            .map_err(db_error)?;
        Ok(rows.iter().map(|r| (stamp(r.get(0)), r.get(1))).collect())
    }

    /// Fails up to `limit` waiting nodes whose deadline has passed on the database's
    /// clock, and re-files the due entries that touches moved on. `engine` is recorded as
    /// the sweeper in each failure's history, and sweeps only the nodes of its conductor
    /// group (the clean-up a timeout starts is one of the group's steps).
    pub async fn fail_expired(
        &self,
        limit: i64,
        engine: Option<&Lease>,
    ) -> Result<Vec<TimedOut>, StoreError> {
        self.fail_expired_at(None, limit, engine).await
    }

    /// [`SharedStore::fail_expired`] as if the database's clock read `at` (tests and
    /// benchmarks that sweep at a chosen time, as on sled).
    pub async fn fail_expired_at(
        &self,
        at: Option<Timestamp>,
        limit: i64,
        engine: Option<&Lease>,
    ) -> Result<Vec<TimedOut>, StoreError> {
        let at = at.map(Timestamp::to_datetime);
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(db_error)?;
        let due = tx
            .query(
                &format!(
                    "SELECT {PROVISION}, body::text, coalesce($2, now()), uuid FROM nodes
                     WHERE due IS NOT NULL AND due <= coalesce($2, now())
                       AND ($3::int8 IS NULL OR coalesce(body->'attrs'->>'conductor_group', '')
                            = (SELECT conductor_group FROM engines WHERE id = $3))
                     ORDER BY due LIMIT $1 FOR UPDATE SKIP LOCKED"
                ),
                &[&limit, &at, &engine.map(|l| l.id)],
            )
            .await
            .map_err(db_error)?;
        let mut refile: Vec<(Uuid, Option<DateTime<Utc>>)> = Vec::new();
        let mut failing = Vec::new();
        for row in &due {
            let uuid: Uuid = row.get(9);
            let p = rows::provision(uuid, row, 0)?;
            let now = stamp(row.get(8));
            let failure = match judge(uuid, &p, now, &self.timeouts, &|_| None) {
                Verdict::Refile(later) => {
                    refile.push((uuid, later.map(Timestamp::to_datetime)));
                    continue;
                }
                Verdict::Fail(failure) => failure,
            };
            let locked = Locked {
                provision: p,
                body: parse_body(uuid, row.get::<_, &str>(7).as_bytes())?,
                // The sweeper fails a node whoever holds its claim (a step that holds it
                // meets the new state in its own writes, and lets go when it ends).
                claim: Claim {
                    owner: None,
                    live_owner: None,
                },
                now,
            };
            failing.push((uuid, locked, failure));
        }
        // The failures' statements go out together on the one connection (pipelined),
        // not one round trip after another.
        let tx_ref = &tx;
        let failed = futures_util::future::try_join_all(failing.into_iter().map(
            |(uuid, locked, failure)| async move {
                let waited_in = locked.provision.state;
                let last_error = Some(failure.last_error.clone());
                let node = self
                    .transition(
                        tx_ref,
                        uuid,
                        locked,
                        Event::Fail,
                        last_error,
                        Guard::Expired,
                        engine,
                    )
                    .await?;
                Ok::<_, StoreError>(failure.timed_out(uuid, waited_in, node.provision.state))
            },
        ))
        .await?;
        if !refile.is_empty() {
            let (uuids, dues): (Vec<Uuid>, Vec<Option<DateTime<Utc>>>) = refile.into_iter().unzip();
            tx.execute(
                "UPDATE nodes n SET due = t.due
                 FROM unnest($1::uuid[], $2::timestamptz[]) AS t(uuid, due)
                 WHERE n.uuid = t.uuid",
                &[&uuids, &dues],
            )
            .await
            .map_err(db_error)?;
        }
        tx.commit().await.map_err(db_error)?;
        Ok(failed)
    }

    /// The earliest entry in the due index (possibly stale; the sweep step checks).
    pub async fn next_deadline(&self) -> Result<Option<Timestamp>, StoreError> {
        let client = self.client().await?;
        let row = client
            .query_one("SELECT min(due) FROM nodes WHERE due IS NOT NULL", &[])
            .await
            .map_err(db_error)?;
        Ok(row.get::<_, Option<DateTime<Utc>>>(0).map(stamp))
    }
}
