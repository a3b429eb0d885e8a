//! What a backup holds (see [`super::backup`]): a store's records, one kind per
//! [`Record`], and the pages each backend reads them in, a [`Part`] of the store at a time
//! from a [`Cursor`]. Apart from the backup's format so that the backends, which read and
//! write these, need nothing of the backup itself.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::documents::Doc;
use super::history::Recorded;
use crate::clock::Timestamp;
use crate::node::{NodeBody, Port, Provision};
use crate::state_machine::ProvisionState;

/// Records a backend reads per page of a backup.
pub(crate) const PAGE: usize = 256;

/// One thing a store holds, as a backup keeps it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Record {
    Node {
        #[serde(flatten)]
        provision: Kept,
        /// Boxed: a node's body is most of a record's size.
        body: Box<NodeBody>,
    },
    Port(Port),
    ConfigDrive {
        node: Uuid,
        /// The drive as the store keeps it (`ConfigDrive::to_bytes`), in base64.
        bytes: String,
    },
    Document {
        kind: String,
        uuid: Uuid,
        /// Its unique fields (`name`, `type+connector_id`, …) that hold a value.
        unique: Vec<String>,
        body: Doc,
    },
    Event {
        node: Uuid,
        micros: u64,
        sequence: u64,
        #[serde(flatten)]
        recorded: Recorded,
    },
    /// The end of the backup (never a record of a store).
    End(Trailer),
}

/// The backup's last line: how many records came before it, and the sha256 of their lines.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Trailer {
    pub records: u64,
    pub sha256: String,
}

/// A node's provision record, without what a restore derives again (its deadline).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Kept {
    pub state: ProvisionState,
    pub target: Option<ProvisionState>,
    /// Microseconds since the epoch, exactly as stored.
    pub updated_at: i64,
    pub progress_at: i64,
    pub progress: u64,
}

impl From<&Provision> for Kept {
    fn from(p: &Provision) -> Kept {
        Kept {
            state: p.state,
            target: p.target,
            updated_at: p.updated_at.as_micros(),
            progress_at: p.progress_at.as_micros(),
            progress: p.progress,
        }
    }
}

impl Kept {
    /// The record as restored: no deadline until an engine derives it.
    pub fn provision(&self) -> Provision {
        Provision {
            state: self.state,
            target: self.target,
            updated_at: Timestamp::from_micros(self.updated_at),
            deadline: None,
            indexed: None,
            progress_at: Timestamp::from_micros(self.progress_at),
            progress: self.progress,
        }
    }
}

/// Where an export is: the part of the store, and the last key read in it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cursor {
    pub part: Part,
    /// The last node, port or document (kind, uuid) read; none at the part's start.
    pub after: Option<(String, Uuid)>,
}

/// The parts of a store, in the order a backup holds them (a port after its node).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    Nodes,
    Ports,
    ConfigDrives,
    Documents,
    /// Events, by node.
    History,
}

impl Part {
    /// The part after this one, if any.
    pub fn next(self) -> Option<Part> {
        match self {
            Part::Nodes => Some(Part::Ports),
            Part::Ports => Some(Part::ConfigDrives),
            Part::ConfigDrives => Some(Part::Documents),
            Part::Documents => Some(Part::History),
            Part::History => None,
        }
    }
}

/// A page of an export: its records, and the key to go on from (none: the part is done).
pub struct Page {
    pub records: Vec<Record>,
    pub next: Option<(String, Uuid)>,
}

/// What a backup or a restore handled.
#[derive(Debug, Default, PartialEq, Serialize)]
pub struct BackupSummary {
    pub records: u64,
    pub nodes: u64,
    pub ports: u64,
    pub documents: u64,
    pub events: u64,
    /// Ports and events whose node was not in the backup (restore only).
    pub dropped: u64,
    /// The sha256 of the records' lines alone (a backup only; its trailer's covers its
    /// header too).
    pub sha256: String,
}

impl BackupSummary {
    pub(crate) fn count(&mut self, record: &Record) {
        self.records += 1;
        match record {
            Record::Node { .. } => self.nodes += 1,
            Record::Port(_) => self.ports += 1,
            Record::Document { .. } => self.documents += 1,
            Record::Event { .. } => self.events += 1,
            Record::ConfigDrive { .. } | Record::End(_) => {}
        }
    }
}
