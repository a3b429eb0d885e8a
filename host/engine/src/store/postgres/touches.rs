//! Touches on the shared store, grouped (see `grouped`): a group is one `UPDATE … FROM
//! unnest(…)` on the database's clock. Every touch is acknowledged after its group's
//! commit (synchronous commit), never before.
//!
//! A touch writes `updated_at`, `deadline`, the progress columns and what the heartbeat
//! said of its agent (`agent`), none of them indexed: a heap-only update. The deadline is derived in the statement from the
//! timeouts the row carries for its state (`callback_ms`, `stall_ms`), the earlier wins.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock};

use deadpool_postgres::Pool;
use tokio::sync::oneshot;
use uuid::Uuid;

use super::claims::Refusal;
use super::grouped::{self, Grouped};
use super::rows::{self, PROVISION};
use super::{Lease, SharedStore, db_error, pool_error};
use crate::node::Provision;
use crate::state_machine::ProvisionState;
use crate::store::touches::progressed;
use crate::store::{AgentHeard, StoreError};

/// The most touches in one statement.
const MAX_GROUP: usize = 2_000;
/// Groups in flight at once, each on its own connection: one commits while the next
/// fills.
const WORKERS: usize = 2;

pub(super) struct Touch {
    uuid: Uuid,
    progress: Option<u64>,
    /// The agent's report, as JSON.
    heard: Option<String>,
    /// The lease to claim the node under, if the touch claims it.
    claim: Option<Lease>,
    reply: oneshot::Sender<Result<TouchedRow, StoreError>>,
}

/// A node as its touch left it.
#[derive(Clone)]
pub struct TouchedRow {
    pub provision: Provision,
    /// Whether the store heard of this boot of the agent for the first time (the report's
    /// `boot` was not the last one heard).
    pub new_boot: bool,
    /// The node's body, as JSON: the heartbeat's step reads it.
    pub body: Arc<str>,
    /// The node's conductor group: only its engines act on the heartbeat.
    pub conductor_group: String,
    /// The claim the touch asked for: taken, or why not (none if it asked for none).
    pub claimed: Option<Result<(), Refusal>>,
}

/// Starts the workers that write touches' groups.
pub(super) fn start(pool: Pool) -> Grouped<Touch> {
    Grouped::start(pool, WORKERS, MAX_GROUP, write)
}

impl SharedStore {
    /// Moves a waiting node's `provision_updated_at` and deadline to the database's now,
    /// with the agent's `progress` mark (see `Store::touch`); committed when it returns.
    pub async fn touch(&self, uuid: Uuid, progress: Option<u64>) -> Result<Provision, StoreError> {
        Ok(self
            .touch_heard(uuid, progress, None, None)
            .await?
            .provision)
    }

    /// [`SharedStore::touch`] that keeps what the heartbeat said of its agent (`heard`),
    /// stamped with the database's now; the node as it is now. With `claim`, the touch
    /// also claims the node for that lease where it applies (the node waits), as
    /// `SharedStore::claim` would: a heartbeat's step then costs no statement of its own
    /// to claim the node.
    pub async fn touch_heard(
        &self,
        uuid: Uuid,
        progress: Option<u64>,
        heard: Option<&AgentHeard>,
        claim: Option<Lease>,
    ) -> Result<TouchedRow, StoreError> {
        let heard = heard.and_then(|h| serde_json::to_string(h).ok());
        let touch = |reply| Touch {
            uuid,
            progress,
            heard,
            claim,
            reply,
        };
        self.touches.ask(touch).await?
    }
}

impl SharedStore {
    /// What each of `nodes` last heard from its agent in a touch (those that heard it).
    pub async fn agents_heard(
        &self,
        nodes: &[Uuid],
    ) -> Result<HashMap<Uuid, AgentHeard>, StoreError> {
        let client = self.client().await?;
        let rows = client
            .query(
                "SELECT uuid, agent::text FROM nodes WHERE uuid = ANY($1) AND agent IS NOT NULL",
                &[&nodes],
            )
            .await
            .map_err(db_error)?;
        Ok(rows
            .iter()
            .filter_map(|r| {
                let heard = serde_json::from_str(r.get::<_, &str>(1)).ok()?;
                Some((r.get(0), heard))
            })
            .collect())
    }

    /// Records progress seen elsewhere than in a heartbeat (see `Store::report_progress`)
    /// under the node's row lock, on the database's clock; returns whether it was
    /// progress. The deadline only moves later, so the node's place in the sweeper's index
    /// stays where it is (the sweep re-files it).
    pub async fn report_progress(&self, uuid: Uuid, mark: u64) -> Result<bool, StoreError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(db_error)?;
        let locked = super::nodes::lock(&tx, uuid).await?;
        let Some(new) = progressed(&self.timeouts, &locked.provision, locked.now, mark) else {
            return Ok(false);
        };
        tx.execute(
            "UPDATE nodes SET deadline = $2, progress_at = $3, progress = $4 WHERE uuid = $1",
            &[
                &uuid,
                &new.deadline.map(crate::clock::Timestamp::to_datetime),
                &new.progress_at.to_datetime(),
                &(new.progress as i64),
            ],
        )
        .await
        .map_err(db_error)?;
        tx.commit().await.map_err(db_error)?;
        Ok(true)
    }
}

/// Writes one group and answers each of its touches.
async fn write(pool: Pool, group: Vec<Touch>) {
    // One row per node: the last progress mark and report heard win, and every touch of
    // the node gets the row's answer.
    let mut marks: HashMap<Uuid, Mark> = HashMap::with_capacity(group.len());
    for t in &group {
        let mark = marks.entry(t.uuid).or_default();
        mark.progress = t.progress.or(mark.progress);
        mark.heard = t.heard.clone().or(mark.heard.take());
        mark.claim = t.claim.or(mark.claim);
    }
    let answers = match update(&pool, &marks).await {
        Ok(answers) => answers,
        Err(e) => {
            for t in group {
                let _ = t.reply.send(Err(grouped::for_each(&e)));
            }
            return;
        }
    };
    for t in group {
        let answer = match answers.get(&t.uuid) {
            Some(Answer::Touched(row)) => Ok(TouchedRow {
                claimed: t.claim.and(row.claimed.clone()),
                ..row.clone()
            }),
            Some(&Answer::NotWaiting(state)) => Err(StoreError::NotWaiting {
                node: t.uuid,
                state,
            }),
            Some(Answer::Corrupt(why)) => Err(StoreError::Corrupt(why.clone())),
            None => Err(StoreError::NodeNotFound(t.uuid.to_string())),
        };
        let _ = t.reply.send(answer);
    }
}

/// What a group writes of one node: its last progress mark and agent report.
#[derive(Default)]
struct Mark {
    progress: Option<u64>,
    heard: Option<String>,
    claim: Option<Lease>,
}

/// What a group's statement did to one node.
enum Answer {
    Touched(TouchedRow),
    NotWaiting(ProvisionState),
    Corrupt(String),
}

/// The statement of a group, on the database's clock: `$1` the nodes, `$2` their progress
/// marks, `$3` the codes of the states a touch applies in, `$4` their agents' reports. The rows are locked in uuid
/// order first: two groups in flight that share nodes then wait for each other in one
/// order, never in a cycle (a deadlock, which PostgreSQL would break by failing one).
static TOUCH: LazyLock<String> = LazyLock::new(|| {
    let returned: Vec<String> = PROVISION.split(", ").map(|c| format!("n.{c}")).collect();
    format!(
        "WITH t AS (
             SELECT t.uuid, t.progress, t.heard, n.progress IS DISTINCT FROM t.progress
                    AND t.progress IS NOT NULL AS moved,
                    t.heard IS NOT NULL AND (n.agent->>'boot') IS DISTINCT FROM
                        (t.heard::jsonb->>'boot') AS new_boot,
                    t.owner, t.epoch,
                    t.owner IS NOT NULL AND {claimable} AS claims
             FROM unnest($1::uuid[], $2::int8[], $4::text[], $5::int8[], $6::int8[])
                  AS t(uuid, progress, heard, owner, epoch)
             JOIN nodes n ON n.uuid = t.uuid
             ORDER BY n.uuid
             FOR UPDATE OF n
         )
         UPDATE nodes n SET
             updated_at = now(),
             progress_at = CASE WHEN t.moved THEN now() ELSE n.progress_at END,
             progress = CASE WHEN t.moved THEN t.progress ELSE n.progress END,
             deadline = LEAST(
                 now() + n.callback_ms * interval '1 millisecond',
                 CASE WHEN t.moved THEN now() ELSE n.progress_at END
                     + n.stall_ms * interval '1 millisecond'),
             agent = CASE WHEN t.heard IS NULL THEN n.agent
                 WHEN t.new_boot THEN (coalesce(n.agent, '{{}}') - 'transfer_started_micros'
                     - 'transfer_ended') || t.heard::jsonb || jsonb_build_object(
                     'at_micros', (extract(epoch FROM now()) * 1000000)::int8)
                 ELSE coalesce(n.agent, '{{}}') || t.heard::jsonb || jsonb_build_object(
                     'at_micros', (extract(epoch FROM now()) * 1000000)::int8) END,
             owner = CASE WHEN t.claims THEN t.owner ELSE n.owner END,
             owner_epoch = CASE WHEN t.claims THEN t.epoch ELSE n.owner_epoch END
         FROM t
         WHERE n.uuid = t.uuid AND n.state = ANY($3::int2[])
         RETURNING n.uuid, t.new_boot, n.body::text, t.owner IS NOT NULL, t.claims, {holder},
                   coalesce(n.body->'attrs'->>'conductor_group', ''), {other_group}, {}",
        returned.join(", "),
        claimable = super::claims::CLAIMABLE,
        holder = super::claims::HOLDER,
        other_group = super::claims::OTHER_GROUP,
    )
});

/// The group's statement, then (only when some node was not touched) why not.
async fn update(
    pool: &Pool,
    marks: &HashMap<Uuid, Mark>,
) -> Result<HashMap<Uuid, Answer>, StoreError> {
    let client = pool.get().await.map_err(pool_error)?;
    let uuids: Vec<Uuid> = marks.keys().copied().collect();
    let progress: Vec<Option<i64>> = uuids
        .iter()
        .map(|u| marks[u].progress.map(|m| m as i64))
        .collect();
    let heard: Vec<Option<&str>> = uuids.iter().map(|u| marks[u].heard.as_deref()).collect();
    let owners: Vec<Option<i64>> = uuids.iter().map(|u| marks[u].claim.map(|l| l.id)).collect();
    let epochs: Vec<Option<i64>> = uuids
        .iter()
        .map(|u| marks[u].claim.map(|l| l.epoch))
        .collect();
    let statement = client.prepare_cached(&TOUCH).await.map_err(db_error)?;
    let rows = client
        .query(
            &statement,
            &[
                &uuids,
                &progress,
                &rows::touchable(),
                &heard,
                &owners,
                &epochs,
            ],
        )
        .await
        .map_err(db_error)?;
    let mut answers = HashMap::with_capacity(uuids.len());
    for row in &rows {
        let uuid: Uuid = row.get(0);
        let claimed = match (row.get::<_, bool>(3), row.get::<_, bool>(4)) {
            (false, _) => None,
            (true, true) => Some(Ok(())),
            (true, false) => Some(Err(Refusal::of(row.get(5), row.get(7)))),
        };
        let answer = match rows::provision(uuid, row, 8) {
            Ok(provision) => Answer::Touched(TouchedRow {
                provision,
                new_boot: row.get(1),
                body: Arc::from(row.get::<_, &str>(2)),
                conductor_group: row.get(6),
                claimed,
            }),
            Err(e) => Answer::Corrupt(e.to_string()),
        };
        answers.insert(uuid, answer);
    }
    if answers.len() < uuids.len() {
        let missing: Vec<Uuid> = uuids
            .into_iter()
            .filter(|u| !answers.contains_key(u))
            .collect();
        for row in client
            .query(
                "SELECT uuid, state FROM nodes WHERE uuid = ANY($1)",
                &[&missing],
            )
            .await
            .map_err(db_error)?
        {
            let uuid: Uuid = row.get(0);
            let answer = match rows::state(uuid, row.get(1)) {
                Ok(state) => Answer::NotWaiting(state),
                Err(e) => Answer::Corrupt(e.to_string()),
            };
            answers.insert(uuid, answer);
        }
    }
    Ok(answers)
}
