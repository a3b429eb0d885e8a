//! Nodes' claims on the shared store, taken and let go in groups (see `grouped`).
//!
//! Every heartbeat that runs its node's driver claims the node and lets it go once the
//! step ended: two commits of their own each (a transaction reading the row, then an
//! update) held three engines under 100,000 agents to 703 heartbeats/s in all. Grouped,
//! many claims share one statement and one commit, and so do many releases.
//!
//! A claim is taken in the `UPDATE`'s own condition, rechecked under each row's lock: the
//! node is free, or already this engine's under this epoch, or held by an engine whose
//! lease lapsed or that was declared dead; and the claiming engine's own lease lives. Two
//! engines claiming one node at once: the second's update waits for the first's row lock,
//! then finds the node held by a live engine, and is refused with its name.

use std::collections::HashMap;
use std::sync::LazyLock;

use deadpool_postgres::Pool;
use tokio::sync::oneshot;
use uuid::Uuid;

use super::grouped::{self, Grouped};
use super::{Lease, SharedStore, db_error, pool_error};
use crate::store::StoreError;

/// The most claims (or releases) in one statement.
const MAX_GROUP: usize = 1_000;
/// Groups of each kind in flight at once, each on its own connection.
const WORKERS: usize = 2;

/// A claim or a release of one node by one engine's lease.
pub(super) struct Ask {
    node: Uuid,
    lease: Lease,
    reply: oneshot::Sender<Result<(), StoreError>>,
}

/// The claims' and the releases' queues.
pub(super) struct Claims {
    claims: Grouped<Ask>,
    releases: Grouped<Ask>,
}

impl Claims {
    pub(super) fn start(pool: Pool) -> Claims {
        Claims {
            claims: Grouped::start(pool.clone(), WORKERS, MAX_GROUP, claim_group),
            releases: Grouped::start(pool, WORKERS, MAX_GROUP, release_group),
        }
    }
}

impl SharedStore {
    /// Claims a node for `me`: refused with the holder's name while another engine with
    /// a live lease holds it, and fenced when `me`'s own lease has lapsed.
    pub async fn claim(&self, node: Uuid, me: &Lease) -> Result<(), StoreError> {
        let ask = |reply| Ask {
            node,
            lease: *me,
            reply,
        };
        self.claims.claims.ask(ask).await?
    }

    /// Lets go of `me`'s claim on a node (nothing if it holds none).
    pub async fn release(&self, node: Uuid, me: &Lease) -> Result<(), StoreError> {
        let ask = |reply| Ask {
            node,
            lease: *me,
            reply,
        };
        self.claims.releases.ask(ask).await?
    }
}

/// The columns of requests: nodes, engines, epochs.
fn columns(group: &[&Ask]) -> (Vec<Uuid>, Vec<i64>, Vec<i64>) {
    let nodes = group.iter().map(|a| a.node).collect();
    let engines = group.iter().map(|a| a.lease.id).collect();
    let epochs = group.iter().map(|a| a.lease.epoch).collect();
    (nodes, engines, epochs)
}

/// Whether the request `t` (`t.owner`, `t.epoch`: the claiming engine's lease) may claim
/// the locked node `n`: the claiming engine lives, and the node is free, already its own
/// under this epoch, or held by an engine that does not live (its lease lapsed, or it was
/// declared dead, or rejoined under another epoch); and the node is of the claiming
/// engine's conductor group (see [`crate::conductor_groups`]). Shared with the
/// heartbeats' touches.
pub(super) const CLAIMABLE: &str = "(EXISTS (SELECT 1 FROM engines me
         WHERE me.id = t.owner AND me.epoch = t.epoch AND me.dead_at IS NULL AND me.lease_until > now()
           AND me.conductor_group = coalesce(n.body->'attrs'->>'conductor_group', ''))
     AND (n.owner IS NULL OR (n.owner = t.owner AND n.owner_epoch = t.epoch)
          OR NOT EXISTS (SELECT 1 FROM engines e WHERE e.id = n.owner AND e.epoch = n.owner_epoch
                         AND e.dead_at IS NULL AND e.lease_until > now())))";

/// The name of the live engine holding node `n`, if one does.
pub(super) const HOLDER: &str = "(SELECT e.hostname FROM engines e
     WHERE e.id = n.owner AND e.epoch = n.owner_epoch AND e.dead_at IS NULL AND e.lease_until > now())";

/// Node `n`'s conductor group where the claiming engine `t.owner` is of another (none
/// when it is of the node's).
pub(super) const OTHER_GROUP: &str = "(SELECT coalesce(n.body->'attrs'->>'conductor_group', '')
     FROM engines me WHERE me.id = t.owner
       AND me.conductor_group <> coalesce(n.body->'attrs'->>'conductor_group', ''))";

/// A group's claims, the rows locked in uuid order first (two groups sharing nodes wait
/// for each other in one order, never in a cycle): `$1` the nodes, `$2` the claiming
/// engines, `$3` their epochs. Each node's answer: claimed, or its live holder's name.
static CLAIM: LazyLock<String> = LazyLock::new(|| {
    format!(
        "WITH t AS (
             SELECT t.uuid, t.owner, t.epoch, {CLAIMABLE} AS claims
             FROM unnest($1::uuid[], $2::int8[], $3::int8[]) AS t(uuid, owner, epoch)
             JOIN nodes n ON n.uuid = t.uuid
             ORDER BY n.uuid
             FOR UPDATE OF n
         )
         UPDATE nodes n SET owner = CASE WHEN t.claims THEN t.owner ELSE n.owner END,
                            owner_epoch = CASE WHEN t.claims THEN t.epoch ELSE n.owner_epoch END
         FROM t
         WHERE n.uuid = t.uuid
         RETURNING n.uuid, t.claims, {HOLDER}, {OTHER_GROUP}"
    )
});

/// A group's releases: `$1` the nodes, `$2` the engines, `$3` their epochs; a node
/// another engine (or epoch) holds now is left as it is.
const RELEASE: &str = "WITH t AS (
         SELECT t.uuid, t.owner, t.epoch
         FROM unnest($1::uuid[], $2::int8[], $3::int8[]) AS t(uuid, owner, epoch)
         JOIN nodes n ON n.uuid = t.uuid
         ORDER BY n.uuid
         FOR UPDATE OF n
     )
     UPDATE nodes n SET owner = NULL, owner_epoch = NULL
     FROM t
     WHERE n.uuid = t.uuid AND n.owner = t.owner AND n.owner_epoch = t.epoch";

async fn claim_group(pool: Pool, group: Vec<Ask>) {
    let answers = match claim_all(&pool, &group).await {
        Ok(answers) => answers,
        Err(e) => {
            for ask in group {
                let _ = ask.reply.send(Err(grouped::for_each(&e)));
            }
            return;
        }
    };
    for ask in group {
        let answer = match answers.get(&ask.node) {
            Some(Ok(())) => Ok(()),
            Some(Err(why)) => Err(why.clone().error(&ask)),
            None => Err(StoreError::NodeNotFound(ask.node.to_string())),
        };
        let _ = ask.reply.send(answer);
    }
}

/// Why a node was not claimed.
#[derive(Clone, Debug)]
pub enum Refusal {
    /// A live engine holds it (its name).
    Held(String),
    /// The claiming engine's own lease lapsed.
    Lapsed,
    /// The node is of another conductor group (its name) than the claiming engine.
    OtherGroup(String),
}

impl Refusal {
    /// Not claimed, the node being of `other_group` than the claimer's or held by
    /// `holder` (neither: the claimer's lease lapsed).
    pub(super) fn of(holder: Option<String>, other_group: Option<String>) -> Refusal {
        match (other_group, holder) {
            (Some(group), _) => Refusal::OtherGroup(group),
            (None, Some(holder)) => Refusal::Held(holder),
            (None, None) => Refusal::Lapsed,
        }
    }

    /// The refusal as the store's error for a claim of `node` under `lease`.
    pub fn into_error(self, node: Uuid, lease: &Lease) -> StoreError {
        match self {
            Refusal::Held(owner) => StoreError::NotOwner { node, owner },
            Refusal::Lapsed => StoreError::Fenced(format!(
                "engine {} (epoch {}) cannot claim node {node}: its lease has lapsed",
                lease.id, lease.epoch
            )),
            Refusal::OtherGroup(group) => StoreError::Fenced(format!(
                "engine {} does not run the steps of node {node}: the node is of conductor group {group:?}",
                lease.id
            )),
        }
    }

    fn error(self, ask: &Ask) -> StoreError {
        self.into_error(ask.node, &ask.lease)
    }
}

/// Each node of the group found: claimed, or why not.
async fn claim_all(
    pool: &Pool,
    group: &[Ask],
) -> Result<HashMap<Uuid, Result<(), Refusal>>, StoreError> {
    let client = pool.get().await.map_err(pool_error)?;
    let (nodes, engines, epochs) = columns(&group.iter().collect::<Vec<_>>());
    let claim = client.prepare_cached(&CLAIM).await.map_err(db_error)?;
    let rows = client
        .query(&claim, &[&nodes, &engines, &epochs])
        .await
        .map_err(db_error)?;
    Ok(rows
        .iter()
        .map(|row| {
            let answer = match row.get::<_, bool>(1) {
                true => Ok(()),
                false => Err(Refusal::of(row.get(2), row.get(3))),
            };
            (row.get(0), answer)
        })
        .collect())
}

async fn release_group(pool: Pool, group: Vec<Ask>) {
    let released = async {
        let client = pool.get().await.map_err(pool_error)?;
        let (nodes, engines, epochs) = columns(&group.iter().collect::<Vec<_>>());
        let release = client.prepare_cached(RELEASE).await.map_err(db_error)?;
        client
            .execute(&release, &[&nodes, &engines, &epochs])
            .await
            .map_err(db_error)
    };
    let answer = released.await.map(drop);
    for ask in group {
        let _ = ask
            .reply
            .send(answer.as_ref().map_err(grouped::for_each).copied());
    }
}
