//! Where the engine keeps its nodes: one handle, [`Store`], over one backend.
//!
//! - [`sled`]: the embedded default, one engine, a sled database in the data directory;
//! - [`postgres`]: the shared store, several engines on one PostgreSQL database.
//!
//! The engine holds a [`Store`] and nothing else of the store: no module outside this one
//! names a backend's type. The rules both backends apply (a transition's record, a touch,
//! the sweeper's verdict and its `last_error` words, an enrolled node, a port) live here,
//! once, above the backends ([`transitions`], [`touches`], [`expiry`], [`enrolled`],
//! [`ports`], [`edits`], [`documents`], the words of [`history`]).

pub mod backup;
mod backup_records;
pub mod copy;
pub mod documents;
mod edits;
mod expiry;
mod handle;
pub mod history;
mod last_error;
mod pages;
mod ports;
pub mod postgres;
mod recovery;
pub mod sled;
mod touches;
mod transitions;

use uuid::Uuid;

use crate::clock::Timestamp;
use crate::node::{self, InvalidField, NewNode, Node, NodeBody, Provision};
use crate::state_machine::{IllegalTransition, ProvisionState};

pub use self::sled::{FaultStep, Part, Recovery};
pub use self::sled::{health, manifest, verify};
pub use documents::Cascade;
pub use expiry::{SweeperWaker, TimedOut};
pub use handle::{Filed, Store, Touched};
pub use pages::{DocumentPages, NodePages, Pages};
pub use postgres::{EngineInfo, KeptDriver, Notifications};

pub use touches::{AgentHeard, progress_fingerprint};

/// How a node's provision state is written (a byte), for every backend.
pub(crate) use self::sled::record;

/// Why a store operation did not happen. Each variant changed nothing.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("node {0} could not be found")]
    NodeNotFound(String),
    #[error("port {0} could not be found")]
    PortNotFound(String),
    #[error("a node named {0:?} already exists")]
    NameTaken(String),
    #[error("a node with uuid {0} already exists")]
    UuidTaken(Uuid),
    #[error("MAC address {mac} is already used by port {port}")]
    MacTaken { mac: String, port: Uuid },
    #[error("A port with name {name} already exists (port {port}).")]
    PortNameTaken { name: String, port: Uuid },
    #[error(transparent)]
    Invalid(#[from] InvalidField),
    #[error("node {node}: {source}")]
    IllegalTransition {
        node: Uuid,
        source: IllegalTransition,
    },
    #[error(
        "node {node} is in provision state \"{state}\"; only a node waiting for a callback (wait call-back, clean wait, service wait, rescue wait) can be touched"
    )]
    NotWaiting { node: Uuid, state: ProvisionState },
    #[error(
        "node {node} cannot be deleted in provision state \"{state}\"; delete it from enroll, manageable, available or adopt failed, or set maintenance first"
    )]
    DeleteRefused { node: Uuid, state: ProvisionState },
    #[error("node {node} is no longer in provision state \"{expected}\" (it is in \"{actual}\")")]
    StateChanged {
        node: Uuid,
        expected: ProvisionState,
        actual: ProvisionState,
    },
    /// A record changed between the read a change was computed from and its write, more
    /// times than a change is computed again.
    #[error("{0} kept changing while this change was made; try again")]
    Changed(String),
    #[error("stored data is corrupt: {0}")]
    Corrupt(String),
    #[error(
        "the store in {0} is in use by another process (another deployd on the same data dir?)"
    )]
    Locked(std::path::PathBuf),
    #[error(
        "the store in {path} has format {found}; this deployd reads formats {} to {} only (written by another version of deployd?)",
        self::sled::FORMAT_OLDEST,
        self::sled::FORMAT
    )]
    Format {
        path: std::path::PathBuf,
        found: u32,
    },
    #[error("{kind} {ident} could not be found")]
    DocumentNotFound { kind: &'static str, ident: String },
    #[error("a {kind} with {field} {value} already exists")]
    DocumentTaken {
        kind: &'static str,
        field: &'static str,
        value: String,
    },
    #[error("storage error: {0}")]
    Db(::sled::Error),
    /// The store cannot write now: a full disk (see [`health`]), or a shared store that does
    /// not answer or says it will pass. A 503, with the cause.
    #[error(
        "the store cannot write now ({0}); nothing was changed. The engine writes again by itself once it can: once its disk has room, or its database answers again"
    )]
    Unavailable(String),
    #[error(transparent)]
    Lost(Box<manifest::Lost>),
    #[error("the store's manifest: {0}")]
    Manifest(String),
    /// The shared store (PostgreSQL) answered with an error.
    #[error("the shared store: {0}")]
    Shared(String),
    /// The backend this engine runs on cannot do this yet (see the README's shared store).
    #[error("the {backend} store cannot {operation} yet")]
    Unsupported {
        backend: &'static str,
        operation: &'static str,
    },
    #[error(
        "the shared store's schema is version {found}; this deployd knows versions up to {} only (migrated by a newer deployd?)",
        postgres::SCHEMA_VERSION
    )]
    Schema { found: i32 },
    /// Another engine holds the node's claim, and its lease lives.
    #[error("node {node} is locked by engine {owner}; try again once it is done")]
    NotOwner { node: Uuid, owner: String },
    /// This engine's lease lapsed (or it was declared dead): it acts on no node until it
    /// has renewed.
    #[error("this engine's lease on the shared store has lapsed: {0}")]
    Fenced(String),
}

/// What kind of failure a [`StoreError`] is, whichever backend answered: the one
/// classification the API (its status code) and the driver host (the WIT error a driver
/// gets) both read, so a new variant is classified once, here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorClass {
    /// What was named does not exist.
    NotFound,
    /// A unique name, uuid or MAC is taken by another record.
    Taken,
    /// The node stands in the way as it is now: it moved on since the caller read it,
    /// another engine holds it, or it cannot be deleted in its state.
    Conflict,
    /// The event is not one the node's state takes (an illegal transition, a touch of a
    /// node that is not waiting).
    WrongState,
    /// A field of the request is invalid.
    Invalid,
    /// The store cannot write now (a full disk, a lapsed lease, an operation the backend
    /// does not have yet); nothing changed, and the same call may work later.
    Transient,
    /// The store itself failed: corrupt or lost data, a database error, a store in use by
    /// another process.
    Broken,
}

impl StoreError {
    /// This error's class (see [`ErrorClass`]).
    pub fn class(&self) -> ErrorClass {
        use StoreError as E;
        match self {
            E::NodeNotFound(_) | E::PortNotFound(_) | E::DocumentNotFound { .. } => {
                ErrorClass::NotFound
            }
            E::NameTaken(_)
            | E::UuidTaken(_)
            | E::MacTaken { .. }
            | E::PortNameTaken { .. }
            | E::DocumentTaken { .. } => ErrorClass::Taken,
            E::StateChanged { .. }
            | E::Changed(_)
            | E::NotOwner { .. }
            | E::DeleteRefused { .. } => ErrorClass::Conflict,
            E::IllegalTransition { .. } | E::NotWaiting { .. } => ErrorClass::WrongState,
            E::Invalid(_) => ErrorClass::Invalid,
            E::Unavailable(_) | E::Fenced(_) | E::Unsupported { .. } => ErrorClass::Transient,
            E::Corrupt(_)
            | E::Locked(_)
            | E::Format { .. }
            | E::Db(_)
            | E::Lost(_)
            | E::Manifest(_)
            | E::Shared(_)
            | E::Schema { .. } => ErrorClass::Broken,
        }
    }
}

/// How the store talks to sled.
#[derive(Clone, Debug)]
pub struct StoreConfig {
    /// How often sled flushes its log in the background; bounds what a crash can lose of
    /// touches (transitions are flushed before they are acknowledged).
    pub flush_every_ms: u64,
    /// sled's page cache, in bytes.
    pub cache_capacity: u64,
    /// Whether state changes are recorded in the nodes' history (Ironic's
    /// `[conductor]node_history`): one small write per transition.
    pub node_history: bool,
    /// Free bytes the store's filesystem keeps: below them writes are refused (0: off);
    /// at most a tenth of the filesystem (see the sled store's `watermark`).
    pub min_free: u64,
    /// Free bytes above which writes are taken again.
    pub resume_free: u64,
    /// The conductor group whose nodes this engine runs the steps of (and sweeps, and
    /// takes over from a dead engine of the group); "" is the default group.
    pub conductor_group: String,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            flush_every_ms: 500,
            cache_capacity: 256 * 1024 * 1024,
            node_history: true,
            min_free: 64 << 20,
            resume_free: 128 << 20,
            conductor_group: String::new(),
        }
    }
}

/// A node as enrolling `new` at `now` makes it, and its body's JSON: the name checked, the
/// record in `enroll`. The same rule for every backend.
pub(crate) fn enrolled(new: NewNode, now: Timestamp) -> Result<(Node, Vec<u8>), StoreError> {
    if let Some(name) = &new.name {
        node::validate_name(name)?;
    }
    let body = NodeBody {
        uuid: new.uuid.unwrap_or_else(Uuid::new_v4),
        name: new.name,
        driver: new.driver,
        driver_info: new.driver_info,
        instance_info: new.instance_info,
        properties: new.properties,
        driver_internal_info: Default::default(),
        extra: new.extra,
        last_error: None,
        power_state: None,
        target_power_state: None,
        maintenance: false,
        maintenance_reason: None,
        reservation: None,
        interfaces: new.interfaces,
        attrs: new.attrs,
        created_at: now,
        updated_at: None,
    };
    let provision = Provision {
        state: ProvisionState::Enroll,
        target: None,
        updated_at: now,
        deadline: None,
        indexed: None,
        progress_at: now,
        progress: 0,
    };
    let json = serde_json::to_vec(&body).expect("a node body serialises");
    node::check_sizes(&body, json.len(), None)?;
    node::check_no_nul("the node", &body, &json, None)?;
    Ok((Node { body, provision }, json))
}

/// A node's body from its JSON; a body that does not parse is the store's corruption.
pub(crate) fn parse_body(uuid: Uuid, json: &[u8]) -> Result<NodeBody, StoreError> {
    serde_json::from_slice(json).map_err(|e| StoreError::Corrupt(format!("node {uuid}: {e}")))
}

/// A record from its JSON; one that does not parse is the store's corruption.
pub(crate) fn parse_json<T: serde::de::DeserializeOwned>(
    what: &str,
    json: &[u8],
) -> Result<T, StoreError> {
    serde_json::from_slice(json).map_err(|e| StoreError::Corrupt(format!("{what}: {e}")))
}
