//! Nodes in the shared store: enrolment, reads, and transitions made in one transaction
//! that locks the row, so they are ordered with every touch and sweep of the node.
//!
//! A node claimed by an engine whose lease lives is that engine's to change: another
//! engine's write is refused with the owner's name (Ironic's `NodeLocked`), and the owner's
//! own write is fenced on its lease in the `UPDATE` itself, so an engine declared dead
//! while it was paused changes nothing when it wakes.

use deadpool_postgres::Transaction;
use tokio_postgres::types::Json;
use uuid::Uuid;

use super::rows::{self, PROVISION, code, stamp};
use super::{Lease, SharedStore, db_error};
use crate::clock::Timestamp;
use crate::node::{NewNode, Node, NodeBody, Provision};
use crate::state_machine::{Event, ProvisionState};
use crate::store::transitions::{advanced, settle_body};
use crate::store::{StoreError, enrolled, parse_body};

/// A node's claim as its row holds it, read under the row's lock.
pub(super) struct Claim {
    pub owner: Option<(i64, i64)>,
    /// The owner's hostname, when its lease lives.
    pub live_owner: Option<String>,
}

/// A node read under its row's lock, with the database's time.
pub(super) struct Locked {
    pub provision: Provision,
    pub body: NodeBody,
    pub claim: Claim,
    pub now: Timestamp,
}

impl SharedStore {
    /// Enrolls a node, stamped with the database's clock.
    pub async fn create_node(&self, new: NewNode) -> Result<Node, StoreError> {
        let client = self.client().await?;
        let now = client
            .query_one("SELECT now()", &[])
            .await
            .map_err(db_error)?;
        let (node, _) = enrolled(new, stamp(now.get(0)))?;
        let p = node.provision;
        let inserted = client
            .execute(
                "INSERT INTO nodes (uuid, name, state, updated_at, progress_at, body)
                 VALUES ($1, $2, $3, $4, $4, $5)",
                &[
                    &node.body.uuid,
                    &node.body.name,
                    &code(p.state),
                    &p.updated_at.to_datetime(),
                    &Json(&node.body),
                ],
            )
            .await;
        match inserted {
            Ok(_) => Ok(node),
            Err(e) => Err(match e.as_db_error().and_then(|d| d.constraint()) {
                Some("nodes_pkey") => StoreError::UuidTaken(node.body.uuid),
                Some("nodes_name_key") => {
                    StoreError::NameTaken(node.body.name.clone().unwrap_or_default())
                }
                _ => db_error(e),
            }),
        }
    }

    /// A node by uuid.
    pub async fn node(&self, uuid: Uuid) -> Result<Node, StoreError> {
        let client = self.client().await?;
        let row = client
            .query_opt(
                &format!("SELECT {PROVISION}, body::text FROM nodes WHERE uuid = $1"),
                &[&uuid],
            )
            .await
            .map_err(db_error)?
            .ok_or_else(|| StoreError::NodeNotFound(uuid.to_string()))?;
        Ok(Node {
            provision: rows::provision(uuid, &row, 0)?,
            body: parse_body(uuid, row.get::<_, &str>(7).as_bytes())?,
        })
    }

    /// Applies `event` to a node, committed before it returns: only if it is still in
    /// `expected` (when given), and as `engine`'s claimed write when `engine` holds the
    /// node's claim. `last_error` replaces the node's.
    pub async fn apply_event(
        &self,
        uuid: Uuid,
        expected: Option<ProvisionState>,
        event: Event,
        last_error: Option<String>,
        engine: Option<&Lease>,
    ) -> Result<Node, StoreError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(db_error)?;
        let locked = lock(&tx, uuid).await?;
        if let Some(expected) = expected.filter(|&e| e != locked.provision.state) {
            return Err(StoreError::StateChanged {
                node: uuid,
                expected,
                actual: locked.provision.state,
            });
        }
        owned(uuid, &locked, engine)?;
        let node = self
            .transition(
                &tx,
                uuid,
                locked,
                event,
                last_error,
                Guard::from(engine),
                engine,
            )
            .await?;
        tx.commit().await.map_err(db_error)?;
        Ok(node)
    }

    /// The transition itself, in the caller's transaction, which has locked the row;
    /// `guard` is what its write must still find true, `by` the engine that makes it.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn transition(
        &self,
        tx: &Transaction<'_>,
        uuid: Uuid,
        locked: Locked,
        event: Event,
        last_error: Option<String>,
        guard: Guard<'_>,
        by: Option<&Lease>,
    ) -> Result<Node, StoreError> {
        let Locked {
            provision: old,
            mut body,
            now,
            ..
        } = locked;
        let new = advanced(old, event, now, &self.timeouts)
            .map_err(|source| StoreError::IllegalTransition { node: uuid, source })?;
        let settled = settle_body(&mut body, new.state);
        if body.last_error != last_error || settled {
            body.last_error = last_error;
            body.updated_at = Some(now);
        }
        write(tx, uuid, &new, &body, &self.timeouts, guard).await?;
        let error = body.last_error.as_deref().filter(|_| new.state.is_failed());
        if self.history {
            let recorded = tx.query_one(
            "INSERT INTO history (node, at, from_state, to_state, event, target, error, seconds, engine)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) RETURNING seq",
            &[
                &uuid,
                &now.to_datetime(),
                &code(old.state),
                &code(new.state),
                &event.as_str(),
                &new.target.map(code),
                &error,
                &now.since(old.updated_at).as_secs_f64(),
                &by.map(|l| l.id),
            ],
        )
            .await
            .map_err(db_error)?;
            super::history::pruned(tx, uuid, recorded.get(0)).await?;
        }
        if let Some(due) = new.indexed {
            // Delivered at commit: a sweeper asleep past this deadline wakes for it.
            tx.execute(
                "SELECT pg_notify('deployd_deadlines', $1)",
                &[&due.as_micros().to_string()],
            )
            .await
            .map_err(db_error)?;
        }
        Ok(Node {
            body,
            provision: new,
        })
    }
}

/// Refuses a write to a node another engine holds under a lease that lives.
pub(super) fn owned(uuid: Uuid, locked: &Locked, engine: Option<&Lease>) -> Result<(), StoreError> {
    let mine = engine.map(|l| (l.id, l.epoch));
    match (&locked.claim.live_owner, engine) {
        (Some(owner), _) if locked.claim.owner != mine => Err(StoreError::NotOwner {
            node: uuid,
            owner: owner.clone(),
        }),
        // A claimed write whose claim is gone, or whose lease lapsed: fenced.
        (None, Some(lease)) => Err(fenced(uuid, lease)),
        _ => Ok(()),
    }
}

fn fenced(uuid: Uuid, lease: &Lease) -> StoreError {
    StoreError::Fenced(format!(
        "the write to node {uuid} was refused: engine {} (epoch {}) no longer holds its claim under a live lease",
        lease.id, lease.epoch
    ))
}

/// Reads a node and locks its row until the transaction ends.
pub(super) async fn lock(tx: &Transaction<'_>, uuid: Uuid) -> Result<Locked, StoreError> {
    let row = tx
        .query_opt(
            &format!(
                "SELECT {PROVISION}, n.body::text, now(), n.owner, n.owner_epoch, e.hostname,
                        e.dead_at IS NULL AND e.lease_until > now()
                 FROM nodes n LEFT JOIN engines e ON e.id = n.owner AND e.epoch = n.owner_epoch
                 WHERE n.uuid = $1 FOR UPDATE OF n"
            ),
            &[&uuid],
        )
        .await
        .map_err(db_error)?
        .ok_or_else(|| StoreError::NodeNotFound(uuid.to_string()))?;
    let owner = row
        .get::<_, Option<i64>>(9)
        .zip(row.get::<_, Option<i64>>(10));
    let live = row.get::<_, Option<bool>>(12).unwrap_or(false);
    Ok(Locked {
        provision: rows::provision(uuid, &row, 0)?,
        body: parse_body(uuid, row.get::<_, &str>(7).as_bytes())?,
        now: stamp(row.get(8)),
        claim: Claim {
            owner,
            live_owner: live.then(|| row.get::<_, Option<String>>(11)).flatten(),
        },
    })
}

/// What a node's write must still find true in the row when it lands.
#[derive(Clone, Copy)]
pub(super) enum Guard<'a> {
    /// Nothing more than the row lock the transaction holds.
    None,
    /// The engine's claim, under its lease that lives (a fenced write).
    Claimed(&'a Lease),
    /// The node's deadline has passed (the sweeper's failure).
    Expired,
}

impl<'a> From<Option<&'a Lease>> for Guard<'a> {
    fn from(engine: Option<&'a Lease>) -> Guard<'a> {
        engine.map_or(Guard::None, Guard::Claimed)
    }
}

/// Writes a node's new record and body, if `guard` holds (on the database's clock). The
/// node's claim stays as it is: its holder lets go of it when its step ends (a sweeper
/// that fails a node another engine's step holds leaves that step its claim).
pub(super) async fn write(
    tx: &Transaction<'_>,
    uuid: Uuid,
    new: &Provision,
    body: &NodeBody,
    timeouts: &crate::state_machine::Timeouts,
    guard: Guard<'_>,
) -> Result<(), StoreError> {
    let (callback_ms, stall_ms) = rows::timeouts_ms(timeouts, new.state);
    let (check, engine) = match guard {
        Guard::None => ("", None),
        // `$4`, the failure's time, is the sweep's: the transaction's `now()`, or the time
        // a sweep at a chosen time was asked for.
        Guard::Expired => (" AND deadline <= $4", None),
        Guard::Claimed(lease) => (
            " AND owner = $12 AND owner_epoch = $13 AND EXISTS (
                  SELECT 1 FROM engines e WHERE e.id = $12 AND e.epoch = $13
                  AND e.dead_at IS NULL AND e.lease_until > now())",
            Some(lease),
        ),
    };
    // The engine's parameters are always sent, so every guard has one statement shape.
    let unused = if engine.is_none() {
        " AND $12::int8 IS NULL AND $13::int8 IS NULL"
    } else {
        ""
    };
    let sql = format!(
        "UPDATE nodes SET state = $2, target = $3, updated_at = $4, deadline = $5, due = $6,
             progress_at = $7, progress = $8, callback_ms = $9, stall_ms = $10, body = $11
         WHERE uuid = $1{check}{unused}"
    );
    let written = tx
        .execute(
            &sql,
            &[
                &uuid,
                &code(new.state),
                &new.target.map(code),
                &new.updated_at.to_datetime(),
                &new.deadline.map(Timestamp::to_datetime),
                &new.indexed.map(Timestamp::to_datetime),
                &new.progress_at.to_datetime(),
                &(new.progress as i64),
                &callback_ms,
                &stall_ms,
                &Json(body),
                &engine.map(|l| l.id),
                &engine.map(|l| l.epoch),
            ],
        )
        .await
        .map_err(db_error)?;
    match (written, guard) {
        (0, Guard::Claimed(lease)) => Err(fenced(uuid, lease)),
        (0, _) => Err(StoreError::Shared(format!(
            "node {uuid}: the write found its row changed under the transaction's lock"
        ))),
        _ => Ok(()),
    }
}
