//! A node's row and its provision record: the hot columns, read and written in one order.

use chrono::{DateTime, Utc};
use tokio_postgres::Row;
use uuid::Uuid;

use crate::clock::Timestamp;
use crate::node::Provision;
use crate::state_machine::{ProvisionState, Timeouts};
use crate::store::{StoreError, record};

/// The hot columns of a node's record, in the order [`provision`] reads them.
pub(super) const PROVISION: &str =
    "state, target, updated_at, deadline, due, progress_at, progress";

/// The record in `row`'s columns from `at` on (in [`PROVISION`]'s order).
pub(super) fn provision(uuid: Uuid, row: &Row, at: usize) -> Result<Provision, StoreError> {
    let state = |code| state(uuid, code);
    Ok(Provision {
        state: state(row.get(at))?,
        target: row.get::<_, Option<i16>>(at + 1).map(state).transpose()?,
        updated_at: stamp(row.get(at + 2)),
        deadline: row.get::<_, Option<DateTime<Utc>>>(at + 3).map(stamp),
        indexed: row.get::<_, Option<DateTime<Utc>>>(at + 4).map(stamp),
        progress_at: stamp(row.get(at + 5)),
        // The fingerprint's 64 bits, in a signed column.
        progress: row.get::<_, i64>(at + 6) as u64,
    })
}

/// The state a stored code stands for.
pub(super) fn state(uuid: Uuid, code: i16) -> Result<ProvisionState, StoreError> {
    u8::try_from(code)
        .ok()
        .and_then(record::state_from_code)
        .ok_or_else(|| StoreError::Corrupt(format!("node {uuid}: state code {code}")))
}

pub(super) fn stamp(t: DateTime<Utc>) -> Timestamp {
    Timestamp::from_datetime(t)
}

pub(super) fn code(state: ProvisionState) -> i16 {
    i16::from(record::state_code(state))
}

/// The codes of the states a heartbeat may touch.
pub(super) fn touchable() -> Vec<i16> {
    record::STATE_CODES
        .iter()
        .filter(|(s, _)| s.accepts_touch())
        .map(|&(_, c)| i16::from(c))
        .collect()
}

/// The timeouts a node in `state` runs on, in milliseconds, kept in its row so that a
/// touch derives its deadline in the statement, on the database's clock.
pub(super) fn timeouts_ms(
    timeouts: &Timeouts,
    state: ProvisionState,
) -> (Option<i64>, Option<i64>) {
    let ms = |d: std::time::Duration| i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
    (
        timeouts.for_state(state).map(ms),
        timeouts.stall_for_state(state).map(ms),
    )
}
