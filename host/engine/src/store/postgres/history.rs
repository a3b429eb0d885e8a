//! A node's history on the shared store: rows of `history`, one written by each
//! transition in its own transaction (`nodes`) and one by each milestone, read in the
//! API's words (`store::history`). A row's sequence is the table's, so an event's uuid
//! (its time and sequence) is unique across engines. A node keeps its last
//! [`MAX_EVENTS`] rows: older ones are deleted at every [`PRUNE_EVERY`]th row.

use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;
use uuid::Uuid;

use super::rows::state;
use super::{SharedStore, db_error};
use crate::store::StoreError;
use crate::store::history::{Event, MAX_EVENTS, MILESTONE, Recorded, Transfer, no_event, shown};

/// How often (in rows, fleet-wide) a node's old rows are deleted.
const PRUNE_EVERY: i64 = 32;

/// A row's columns, in the order [`event_of`] reads them.
pub(super) const COLUMNS: &str =
    "seq, at, from_state, to_state, event, target, error, seconds, note";

impl SharedStore {
    /// Records a milestone (`note`) or a failure outside any flow (`error`) in the state
    /// the node is in now.
    /// An image transfer's milestone, if no engine recorded it for this boot of the agent
    /// yet: the node's `agent` record keeps when the transfer started and whether it
    /// ended (a new boot's first touch drops both), each set by one compare-and-set.
    pub async fn transfer_milestone(
        &self,
        uuid: Uuid,
        transfer: &Transfer,
    ) -> Result<(), StoreError> {
        let client = self.client().await?;
        let recorded = match *transfer {
            Transfer::Started { .. } => {
                client
                    .query_opt(
                        "UPDATE nodes SET agent = coalesce(agent, '{}') || jsonb_build_object(
                         'transfer_started_micros', (extract(epoch FROM now()) * 1000000)::int8)
                     WHERE uuid = $1 AND NOT coalesce(agent ? 'transfer_started_micros', false)
                     RETURNING 0::float8",
                        &[&uuid],
                    )
                    .await
            }
            Transfer::Ended { .. } => {
                client
                    .query_opt(
                        "UPDATE nodes SET agent = agent || '{\"transfer_ended\": true}'
                     WHERE uuid = $1 AND agent ? 'transfer_started_micros'
                       AND NOT agent ? 'transfer_ended'
                     RETURNING ((extract(epoch FROM now()) * 1000000
                                - (agent->>'transfer_started_micros')::int8) / 1e6)::float8",
                        &[&uuid],
                    )
                    .await
            }
        };
        let Some(row) = recorded.map_err(db_error)? else {
            return Ok(());
        };
        let note = match *transfer {
            Transfer::Ended { written, .. } => Transfer::Ended {
                written,
                seconds: row.get(0),
            },
            ref started => started.clone(),
        }
        .to_string();
        self.in_place(uuid, None, Some(&note)).await
    }

    pub async fn in_place(
        &self,
        uuid: Uuid,
        error: Option<&str>,
        note: Option<&str>,
    ) -> Result<(), StoreError> {
        let client = self.client().await?;
        if !self.history {
            // Nothing is recorded; an unknown node is still refused.
            return match client
                .query_opt("SELECT 1 FROM nodes WHERE uuid = $1", &[&uuid])
                .await
                .map_err(db_error)?
            {
                Some(_) => Ok(()),
                None => Err(StoreError::NodeNotFound(uuid.to_string())),
            };
        }
        let row = client
            .query_opt(
                "INSERT INTO history (node, at, from_state, to_state, event, target, error, seconds, note)
                 SELECT uuid, now(), state, state, $2, target, $3, 0, $4 FROM nodes WHERE uuid = $1
                 RETURNING seq",
                &[&uuid, &MILESTONE, &error, &note],
            )
            .await
            .map_err(db_error)?
            .ok_or_else(|| StoreError::NodeNotFound(uuid.to_string()))?;
        pruned(&client, uuid, row.get(0)).await
    }

    /// A node's last [`MAX_EVENTS`] events, oldest first.
    pub async fn history_of(&self, node: Uuid) -> Result<Vec<Event>, StoreError> {
        let client = self.client().await?;
        let rows = client
            .query(
                &format!(
                    "SELECT {COLUMNS} FROM history WHERE node = $1 ORDER BY seq DESC LIMIT $2"
                ),
                &[&node, &(MAX_EVENTS as i64)],
            )
            .await
            .map_err(db_error)?;
        rows.iter().rev().map(|row| event_of(node, row)).collect()
    }

    /// One of a node's events, by its uuid.
    pub async fn history_event(&self, node: Uuid, uuid: Uuid) -> Result<Event, StoreError> {
        let (_, sequence) = uuid.as_u64_pair();
        let client = self.client().await?;
        let row = client
            .query_opt(
                &format!("SELECT {COLUMNS} FROM history WHERE node = $1 AND seq = $2"),
                &[&node, &(sequence as i64)],
            )
            .await
            .map_err(db_error)?;
        match row.map(|row| event_of(node, &row)).transpose()? {
            Some(event) if event.uuid == uuid => Ok(event),
            _ => Err(no_event(uuid)),
        }
    }
}

/// After the row `seq` of `node` was written: every [`PRUNE_EVERY`]th, deletes the node's
/// rows older than its last [`MAX_EVENTS`].
pub(super) async fn pruned(
    client: &impl GenericClient,
    node: Uuid,
    seq: i64,
) -> Result<(), StoreError> {
    if seq % PRUNE_EVERY != 0 {
        return Ok(());
    }
    client
        .execute(
            "DELETE FROM history WHERE node = $1 AND seq < (
                 SELECT seq FROM history WHERE node = $1 ORDER BY seq DESC OFFSET $2 LIMIT 1)",
            &[&node, &(MAX_EVENTS as i64 - 1)],
        )
        .await
        .map_err(db_error)?;
    Ok(())
}

/// An event from a row of [`COLUMNS`].
fn event_of(node: Uuid, row: &tokio_postgres::Row) -> Result<Event, StoreError> {
    let (micros, sequence, recorded) = recorded_of(node, row, 0)?;
    shown(node, micros, sequence, recorded)
}

/// An event's time, sequence and record from a row's [`COLUMNS`], from column `at` on.
pub(super) fn recorded_of(
    node: Uuid,
    row: &tokio_postgres::Row,
    at: usize,
) -> Result<(u64, u64, Recorded), StoreError> {
    let state = |code| state(node, code);
    let time: DateTime<Utc> = row.get(at + 1);
    let recorded = Recorded {
        from: state(row.get(at + 2))?,
        to: state(row.get(at + 3))?,
        event: row.get(at + 4),
        target: row.get::<_, Option<i16>>(at + 5).map(state).transpose()?,
        error: row.get(at + 6),
        seconds: row.get(at + 7),
        note: row.get(at + 8),
    };
    let micros = u64::try_from(time.timestamp_micros()).unwrap_or(0);
    Ok((micros, row.get::<_, i64>(at) as u64, recorded))
}
