//! A node's history as the API shows it (Ironic's node history, API 1.78), whichever
//! backend keeps it: the rules both apply, once. An event is a state change (its words
//! say where the node went and why) or a milestone within a state, recorded in the
//! state the node is in, with its note or the error of an operation that failed outside
//! any flow. An event's uuid is made of its time and sequence, so it leads back to it. A
//! node shows its last [`MAX_EVENTS`] (Ironic's `node_history_max_entries` default).

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::StoreError;
use crate::state_machine::ProvisionState;

/// Events shown per node; older ones are dropped.
pub const MAX_EVENTS: usize = 300;

/// The state machine event a milestone is recorded with.
pub(crate) const MILESTONE: &str = "milestone";

/// An image transfer's milestone, once per boot of the agent: its start (the first
/// report with bytes written) and its end.
#[derive(Clone, Debug, PartialEq)]
pub enum Transfer {
    Started {
        total: Option<u64>,
    },
    /// `seconds` after its start, as the engine that saw the start counted them (the
    /// shared store counts them on the database's clock, from whichever engine's start).
    Ended {
        written: u64,
        seconds: f64,
    },
}

/// The milestone's note.
impl std::fmt::Display for Transfer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Transfer::Started { total: Some(total) } => {
                write!(f, "Image transfer started ({total} bytes)")
            }
            Transfer::Started { total: None } => write!(f, "Image transfer started"),
            // Heartbeats come a second or more apart: a shorter span is no rate.
            Transfer::Ended { written, seconds } if seconds < 1.0 => write!(
                f,
                "Image transfer ended: {written} bytes, within a heartbeat of its start"
            ),
            Transfer::Ended { written, seconds } => {
                let rate = written as f64 / seconds / f64::from(1 << 20);
                write!(
                    f,
                    "Image transfer ended: {written} bytes in {seconds:.1} s ({rate:.1} MiB/s)"
                )
            }
        }
    }
}

/// One history event, as the API shows it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Event {
    pub uuid: Uuid,
    pub created_at: chrono::DateTime<chrono::Utc>,
    /// `INFO`, or `ERROR` when the change failed the node.
    pub severity: &'static str,
    pub event_type: &'static str,
    pub event: String,
    pub conductor: &'static str,
    pub user: Option<String>,
    /// The provision state the node entered (1.115).
    pub state: String,
    pub target_provision_state: Option<String>,
    /// How long the node was in the state it left (1.115).
    pub duration_seconds: f64,
}

/// An event as a backend reads it back.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Recorded {
    pub from: ProvisionState,
    pub to: ProvisionState,
    pub event: String,
    pub target: Option<ProvisionState>,
    pub error: Option<String>,
    pub seconds: f64,
    #[serde(default)]
    pub note: Option<String>,
}

/// The event `recorded` at `micros` (since the epoch) with `sequence`, in the API's
/// words.
pub(crate) fn shown(
    node: Uuid,
    micros: u64,
    sequence: u64,
    recorded: Recorded,
) -> Result<Event, StoreError> {
    let Recorded {
        from,
        to,
        event,
        target,
        error,
        seconds,
        note,
    } = recorded;
    let created_at = chrono::DateTime::from_timestamp_micros(micros as i64)
        .ok_or_else(|| StoreError::Corrupt(format!("history of node {node}: time {micros}")))?;
    Ok(Event {
        uuid: Uuid::from_u64_pair(micros, sequence),
        created_at,
        severity: if error.is_some() { "ERROR" } else { "INFO" },
        event_type: "provisioning",
        event: match (error, note) {
            (Some(error), _) => error,
            (None, Some(note)) => note,
            (None, None) => {
                format!("Provision state changed from \"{from}\" to \"{to}\" ({event})")
            }
        },
        conductor: crate::node::CONDUCTOR,
        user: None,
        state: to.to_string(),
        target_provision_state: target.map(|t| t.to_string()),
        duration_seconds: seconds,
    })
}

/// The answer for an event uuid that names none of the node's.
pub(crate) fn no_event(uuid: Uuid) -> StoreError {
    StoreError::DocumentNotFound {
        kind: "Node history event",
        ident: uuid.to_string(),
    }
}
