//! Durable node state on sled.
//!
//! Trees:
//!
//! | tree         | key                    | value                                  |
//! |--------------|------------------------|----------------------------------------|
//! | `nodes`      | node uuid              | provision record ‖ [`NodeBody`] JSON   |
//! | `names`      | node name              | node uuid                              |
//! | `ports`      | port uuid              | [`Port`](crate::node::Port) as JSON                       |
//! | `macs`       | normalised MAC         | port uuid                              |
//! | `port_names` | port name              | port uuid (rebuilt at open; see `ports`)|
//! | `node_ports` | node uuid ‖ port uuid  | (empty)                                |
//! | `deadlines`  | deadline ‖ node uuid   | (empty)                                |
//! | `config_drives` | node uuid           | the deploy's config drive (`config_drives`) |
//!
//! A node is one value: its fixed-size provision record (state, target, clock, deadline;
//! see `record`), then its body as JSON. Every write to a node is one insert of that value,
//! made under the node's lock (`locks`), so it is atomic on disk and ordered with every
//! other write to the node without a sled transaction. The record is the truth about a
//! node's state, clock and deadline. The deadline index holds one entry per waiting node,
//! at or before its deadline (`Provision::indexed`): a heartbeat's touch moves only the
//! record, and the sweeper re-files an entry that comes due early. Transactions are used
//! only where several nodes' keys meet: the name and MAC indexes (create, rename, delete).
//!
//! Durability: operator-visible changes (create, update, delete, every state transition)
//! are flushed to disk before the call returns. A touch is not flushed by itself: sled
//! flushes its log every `flush_every_ms` (default 500 ms), so a crash can lose at most that
//! much of the touches, and a node can come back at most `flush_every_ms` older than it
//! was — it times out at worst that much early, never late, and never in a busy state.

mod config_drives;
mod documents;
mod expiry;
mod export;
pub mod health;
pub mod history;
mod locks;
pub mod manifest;
mod ports;
pub(crate) mod record;
mod recovery;
pub(super) mod reserve;
mod touches;
mod transitions;
pub mod verify;
mod watermark;

use std::path::Path;
use std::sync::Arc;

use sled::transaction::{ConflictableTransactionError, TransactionError, Transactional};
use uuid::Uuid;

use super::{StoreConfig, StoreError, enrolled, parse_body, parse_json};
use crate::clock::Clock;
use crate::metrics::Metrics;
use crate::node::{NewNode, Node, NodeBody, Provision};
use crate::state_machine::Timeouts;
use crate::store::expiry::SweeperWaker;

use crate::store::documents::Cascade;
pub(crate) use export::import;
pub use recovery::Recovery;
pub use touches::Touched;

/// An I/O error is the disk's refusal (a 503 that names it); anything else from sled is
/// the store's own fault.
impl From<sled::Error> for StoreError {
    fn from(e: sled::Error) -> Self {
        match e {
            sled::Error::Io(io) => StoreError::Unavailable(io.to_string()),
            e => StoreError::Db(e),
        }
    }
}

impl From<TransactionError<StoreError>> for StoreError {
    fn from(e: TransactionError<StoreError>) -> Self {
        match e {
            TransactionError::Abort(e) => e,
            TransactionError::Storage(e) => StoreError::from(e),
        }
    }
}

type TxResult<T> = Result<T, ConflictableTransactionError<StoreError>>;

fn abort<T>(e: StoreError) -> TxResult<T> {
    Err(ConflictableTransactionError::Abort(e))
}

/// The open database: sled and its trees. The store swaps it whole when it reopens after a
/// storage fault (see [`health`]); every operation works on the one it loaded.
pub struct Trees {
    db: sled::Db,
    nodes: sled::Tree,
    names: sled::Tree,
    ports: sled::Tree,
    macs: sled::Tree,
    port_names: sled::Tree,
    node_ports: sled::Tree,
    deadlines: sled::Tree,
    config_drives: sled::Tree,
    /// Chassis, port groups, allocations and the other stored-only resources.
    pub docs: documents::Documents,
    /// Each node's provision state changes, for `/v1/nodes/{node}/history`.
    pub history: history::History,
}

impl Trees {
    /// Opens sled in `path` and its trees, and checks what it holds against its format
    /// and its manifest: nothing is written but the format mark.
    fn open(path: &Path, config: &StoreConfig) -> Result<Trees, StoreError> {
        // A damaged file can make sled panic while it reads it: that is a refusal to start
        // with the reason, never a crash loop without one.
        let db = std::panic::catch_unwind(|| open_db(path, config)).map_err(|panic| {
            let why = panic
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| panic.downcast_ref::<&str>().copied())
                .unwrap_or("no message");
            StoreError::Corrupt(format!(
                "sled could not read the store in {} ({why}); restore it from a backup (`deployd store restore`) or from a copy of the data directory taken with the engine stopped",
                path.display()
            ))
        })??;
        check_format(&db, path)?;
        let tree = |name: &str| db.open_tree(name);
        let trees = Trees {
            nodes: tree("nodes")?,
            names: tree("names")?,
            ports: tree("ports")?,
            macs: tree("macs")?,
            port_names: tree("port_names")?,
            node_ports: tree("node_ports")?,
            deadlines: tree("deadlines")?,
            config_drives: tree("config_drives")?,
            docs: documents::Documents::open(&db)?,
            history: history::History::open(&db, config.node_history)?,
            db,
        };
        manifest::verify(&trees.db, path, trees.nodes.len())?;
        ports::index_port_names(&trees)?;
        Ok(trees)
    }
}

/// The node store. Cheap to share behind an `Arc`; every method is safe to call from many
/// threads at once.
pub struct SledStore {
    /// The database; empty only while it is being reopened.
    open: arc_swap::ArcSwapOption<Trees>,
    /// Where it is (its manifest is beside it).
    path: std::path::PathBuf,
    config: StoreConfig,
    /// Whether the store can write, and what it owes once it can again.
    health: Arc<health::Health>,
    /// The free space its disk keeps.
    watermark: watermark::Watermark,
    locks: locks::NodeLocks,
    timeouts: Timeouts,
    clock: Clock,
    waker: Arc<SweeperWaker>,
    metrics: Arc<Metrics>,
}

/// What a step out of a storage fault did (see [`SledStore::leave_fault`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultStep {
    /// The store was not degraded.
    Writable,
    /// The disk has no room yet: nothing changed.
    Waiting,
    /// The database was opened again: reads work, writes are still refused.
    Reopened,
    /// The store writes again, and recorded this many heartbeats it had missed.
    Healed(usize),
}

/// The database an operation works on, loaded once for the whole operation.
pub struct Open(arc_swap::Guard<Option<Arc<Trees>>>);

impl std::ops::Deref for Open {
    type Target = Trees;
    fn deref(&self) -> &Trees {
        self.0
            .as_deref()
            .expect("an Open is made only of a loaded database")
    }
}

impl SledStore {
    /// Recovers the store just opened: nodes left in busy states are failed, deadlines
    /// are re-derived for the timeouts now configured; then its first checkpoint and its
    /// space reserve.
    pub fn recovered(self) -> Result<(SledStore, Recovery), StoreError> {
        let recovery = self.recover()?;
        self.checkpoint()?;
        if let Err(e) = reserve::make(&self.path) {
            tracing::warn!(
                "no space reserve beside the store ({e}): after a storage fault its reads wait for room on the disk like its writes"
            );
        }
        Ok((self, recovery))
    }

    /// Opens (or creates) the store in `path` as it is: checked, but nothing recovered and
    /// nothing written but the format mark; [`SledStore::recovered`] is what an engine
    /// opens, a copy reads it as it is.
    pub fn open_as_is(
        path: &Path,
        config: &StoreConfig,
        timeouts: Timeouts,
        clock: Clock,
        metrics: Arc<Metrics>,
        health: Arc<health::Health>,
        waker: Arc<SweeperWaker>,
    ) -> Result<SledStore, StoreError> {
        let trees = Trees::open(path, config)?;
        let dir = path.parent().unwrap_or(path);
        let tenth = crate::disk_space::floor(u64::MAX, dir);
        let floor = crate::disk_space::floor(config.min_free, dir);
        Ok(SledStore {
            open: arc_swap::ArcSwapOption::from_pointee(trees),
            path: path.to_owned(),
            config: config.clone(),
            watermark: watermark::Watermark::new(
                floor,
                config.resume_free.min(tenth.saturating_mul(2)),
            ),
            health,
            locks: locks::NodeLocks::new(),
            timeouts,
            clock,
            waker,
            metrics,
        })
    }

    /// The database, for one operation; refused while it is being reopened.
    fn t(&self) -> Result<Open, StoreError> {
        let open = self.open.load();
        if open.is_none() {
            return Err(StoreError::Unavailable(
                "the store is being reopened after a storage fault".into(),
            ));
        }
        Ok(Open(open))
    }

    /// The database, for one operation that writes: refused while the store is degraded,
    /// before anything reaches sled (the database open then may be one opened again after
    /// the fault, which would take the write).
    fn w(&self) -> Result<Open, StoreError> {
        if let Some(refused) = self.health.refusal() {
            return Err(refused);
        }
        if let watermark::Room::Below(free) = self.watermark.check(&self.path) {
            let (floor, resume) = (self.watermark.floor, self.watermark.resume);
            let cause = format!(
                "the store's disk has {} MiB free, below the {} MiB it keeps free; writes resume above {} MiB",
                crate::disk_space::mib(free),
                crate::disk_space::mib(floor),
                crate::disk_space::mib(resume)
            );
            return Err(self.health.flooded(&cause, self.clock.now(), resume));
        }
        self.t()
    }

    /// The chassis, port groups, allocations and other stored-only resources.
    pub fn docs(&self) -> Result<Part<documents::Documents>, StoreError> {
        Ok(Part(self.t()?, |t| &t.docs))
    }

    /// [`SledStore::docs`], to write: refused while the store is degraded (see [`SledStore::w`]).
    pub fn docs_to_write(&self) -> Result<Part<documents::Documents>, StoreError> {
        Ok(Part(self.w()?, |t| &t.docs))
    }

    /// The nodes' history.
    pub fn history(&self) -> Result<Part<history::History>, StoreError> {
        Ok(Part(self.t()?, |t| &t.history))
    }

    /// Marks everything written so far as what this store must hold from now on (see
    /// [`manifest`]): the engine calls it every few seconds and at shutdown.
    pub fn checkpoint(&self) -> Result<(), StoreError> {
        let t = self.t()?;
        let at = self.clock.now().to_datetime().to_rfc3339();
        self.wrote(manifest::checkpoint_now(
            &t.db,
            &self.path,
            t.nodes.len(),
            at,
        ))
    }

    /// Marks the store degraded when `result` is the disk's refusal of a write.
    fn wrote<T>(&self, result: Result<T, StoreError>) -> Result<T, StoreError> {
        result.map_err(|e| self.refused(e))
    }

    /// [`SledStore::wrote`] for an error.
    fn refused(&self, e: StoreError) -> StoreError {
        match e {
            StoreError::Unavailable(cause) => self.health.failed(&cause, self.clock.now()),
            e => e,
        }
    }

    /// One step out of a storage fault; the engine's keeper calls it every second while
    /// the store is degraded (see [`health`]), off the async workers.
    ///
    /// First the faulty database is dropped and opened again from disk, on the room its
    /// [`reserve`] leaves once released: sled's error is sticky and refuses reads too.
    /// What the faulty one held in memory of the waiting nodes' clocks is noted first,
    /// since its last flushes failed. Writes stay refused by [`SledStore::w`]. Then, once
    /// the disk has room to make the reserve again, the heartbeats received meanwhile are
    /// written and a checkpoint proves that writes work before the store says so. While
    /// the database is being opened, operations are refused (503).
    pub fn leave_fault(&self) -> Result<FaultStep, StoreError> {
        let Some(degraded) = self.health.degraded() else {
            return Ok(FaultStep::Writable);
        };
        if !degraded.reopened && degraded.resume.is_none() {
            reserve::release(&self.path);
            if !reserve::has_room(&self.path, reserve::ROOM_TO_REOPEN) {
                return Err(StoreError::Unavailable(format!(
                    "its disk has less than {} MiB free even without its reserve",
                    reserve::ROOM_TO_REOPEN >> 20
                )));
            }
            self.open_again()?;
            self.health.set_reopened(true);
            return Ok(FaultStep::Reopened);
        }
        // Past the watermark, the disk must have its higher mark free again.
        let room = (reserve::RESERVE + reserve::ROOM_TO_REOPEN).max(degraded.resume.unwrap_or(0));
        if !reserve::has_room(&self.path, room) || reserve::make(&self.path).is_err() {
            return Ok(FaultStep::Waiting);
        }
        let missed = self.health.take_missed();
        let replayed = missed.len();
        if let Err(e) = self.record_missed(&missed).and_then(|()| self.checkpoint()) {
            for (node, m) in missed {
                self.health.missed(node, m.at, m.progress);
            }
            // The database open now may have failed too: the next step opens it again.
            self.health.set_reopened(false);
            return Err(e);
        }
        self.health.healed(self.clock.now(), replayed);
        Ok(FaultStep::Healed(replayed))
    }

    /// Drops the database open now and opens it again from disk.
    fn open_again(&self) -> Result<(), StoreError> {
        if let Some(old) = self.open.swap(None) {
            self.note_clocks(&old);
            if let Err(old) = release(old) {
                self.open.store(Some(old));
                return Err(StoreError::Unavailable(
                    "an operation on the faulty store has not returned, so it cannot be reopened yet; restart deployd if this lasts".into(),
                ));
            }
        }
        // On failure the store stays closed (reads are refused too) until the next try.
        self.open
            .store(Some(Arc::new(Trees::open(&self.path, &self.config)?)));
        Ok(())
    }

    /// Where the store is on disk.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Flushes everything written so far to disk.
    ///
    /// On a worker of a multi-threaded tokio runtime the wait for the disk goes through
    /// `block_in_place`: the tasks queued on this worker move to another one instead of
    /// stalling behind an fsync, and concurrent flushes share sled's one write to disk
    /// (group commit), so durable writes from many requests cost about one fsync.
    ///
    /// Refused while the store is degraded: a write that passed [`SledStore::w`] before
    /// the fault went to the database then open, which the fault's reopen dropped
    /// unflushed; a flush of the one opened since would succeed and acknowledge a write
    /// that is not on disk (seen on ext4: acknowledged enrollments missing after a
    /// restart). So the writer hears the fault instead. (Only a writer stalled between
    /// its write and its flush for a whole fault, reopen and heal, over a second, could
    /// still miss it.)
    pub fn flush(&self) -> Result<(), StoreError> {
        if let Some(refused) = self.health.refusal() {
            return Err(refused);
        }
        let t = self.t()?;
        self.wrote(flush(&t.db))
    }

    /// Bytes sled uses on disk.
    pub fn size_on_disk(&self) -> Result<u64, StoreError> {
        let t = self.t()?;
        Ok(t.db.size_on_disk()?)
    }

    /// Enrolls a node (in `enroll`, as Ironic does from API 1.11 on).
    pub fn create_node(&self, new: NewNode) -> Result<Node, StoreError> {
        let node = self.insert_node(new)?;
        self.flush()?;
        Ok(node)
    }

    /// Enrolls many nodes with one flush at the end. Each node is all-or-nothing; the
    /// result says which ones were refused and why.
    pub fn create_nodes(
        &self,
        new: Vec<NewNode>,
    ) -> Result<Vec<Result<Node, StoreError>>, StoreError> {
        let results = new.into_iter().map(|n| self.insert_node(n)).collect();
        self.flush()?;
        Ok(results)
    }

    fn insert_node(&self, new: NewNode) -> Result<Node, StoreError> {
        let t = self.w()?;
        let (Node { body, provision }, json) = enrolled(new, self.clock.now())?;
        let uuid = body.uuid;
        let value = record::join(&provision, &json);
        let _owner = self.locks.lock(uuid);
        if body.name.is_none() {
            // One tree changes, and an insert-if-absent is atomic by itself. A sled
            // transaction would write its log buffer out twice (about 100 µs per node).
            t.nodes
                .compare_and_swap(uuid.as_bytes(), None as Option<&[u8]>, Some(value))?
                .map_err(|_| StoreError::UuidTaken(uuid))?;
            return Ok(Node { body, provision });
        }
        (&t.nodes, &t.names).transaction(|(nodes, names)| {
            if nodes.get(uuid.as_bytes())?.is_some() {
                return abort(StoreError::UuidTaken(uuid));
            }
            claim_name(names, body.name.as_deref(), uuid)?;
            nodes.insert(uuid.as_bytes(), value.as_slice())?;
            Ok(())
        })?;
        Ok(Node { body, provision })
    }

    /// A node by uuid.
    pub fn node(&self, uuid: Uuid) -> Result<Node, StoreError> {
        let value = self.value(uuid)?;
        parse_node(uuid, &value)
    }

    /// Only a node's provision record (state, clock, deadline): no JSON is parsed.
    pub fn provision(&self, uuid: Uuid) -> Result<Provision, StoreError> {
        let value = self.value(uuid)?;
        Ok(record::split(uuid, &value)?.0)
    }

    /// A node by uuid or by name, as `GET /v1/nodes/{ident}` resolves it.
    pub fn find_node(&self, ident: &str) -> Result<Node, StoreError> {
        let uuid = match Uuid::parse_str(ident) {
            Ok(uuid) => uuid,
            Err(_) => self
                .t()?
                .names
                .get(ident.as_bytes())?
                .map(|v| uuid_from(&v))
                .transpose()?
                .ok_or_else(|| StoreError::NodeNotFound(ident.to_owned()))?,
        };
        self.node(uuid).map_err(|e| match e {
            StoreError::NodeNotFound(_) => StoreError::NodeNotFound(ident.to_owned()),
            e => e,
        })
    }

    /// Up to `limit` nodes in uuid order, starting after `marker`.
    pub fn list_nodes(&self, marker: Option<Uuid>, limit: usize) -> Result<Vec<Node>, StoreError> {
        self.nodes_after(marker).take(limit).collect()
    }

    /// Every node in uuid order after `marker`, read and parsed one at a time: a caller
    /// that looks at each and lets it go holds one node in memory, not the fleet.
    pub fn nodes_after(
        &self,
        marker: Option<Uuid>,
    ) -> impl Iterator<Item = Result<Node, StoreError>> + '_ {
        let start = match marker {
            Some(m) => std::ops::Bound::Excluded(m.as_bytes().to_vec()),
            None => std::ops::Bound::Unbounded,
        };
        // The tree is held (not the database), so a reopen is not kept waiting by a list.
        let (nodes, refused) = match self.t() {
            Ok(t) => (Some(t.nodes.clone()), None),
            Err(e) => (None, Some(Err(e))),
        };
        let nodes = nodes.into_iter().flat_map(move |nodes| {
            nodes
                .range::<Vec<u8>, _>((start.clone(), std::ops::Bound::Unbounded))
                .map(|item| {
                    let (key, value) = item?;
                    parse_node(uuid_from(&key)?, &value)
                })
        });
        refused.into_iter().chain(nodes)
    }

    /// How many nodes are enrolled.
    pub fn node_count(&self) -> usize {
        self.t().map_or(0, |t| t.nodes.len())
    }

    /// Changes a node's body (never its provision state: that is what events are for).
    /// `change` may refuse; then nothing is written.
    pub fn update_node(
        &self,
        uuid: Uuid,
        change: impl Fn(&mut NodeBody) -> Result<(), StoreError>,
    ) -> Result<Node, StoreError> {
        self.edit_node(uuid, |_, body| change(body))
    }

    /// [`SledStore::update_node`] where `change` also sees the node's provision state, both
    /// read under the node's lock, and may refuse with an error of the caller's.
    pub fn edit_node<E: From<StoreError>>(
        &self,
        uuid: Uuid,
        change: impl Fn(&Provision, &mut NodeBody) -> Result<(), E>,
    ) -> Result<Node, E> {
        let t = self.w()?;
        let _owner = self.locks.lock(uuid);
        let Node {
            body: old,
            provision,
        } = self.node(uuid)?;
        let (body, json) =
            crate::store::edits::edited(uuid, &provision, &old, change, self.clock.now())?;
        let value = record::join(&provision, &json);
        if old.name == body.name {
            // Only the node's own key changes (under its lock): no transaction needed.
            t.nodes
                .insert(uuid.as_bytes(), value)
                .map_err(StoreError::from)?;
        } else {
            (&t.nodes, &t.names)
                .transaction(|(nodes, names)| {
                    claim_name(names, body.name.as_deref(), uuid)?;
                    if let Some(name) = &old.name {
                        names.remove(name.as_bytes())?;
                    }
                    nodes.insert(uuid.as_bytes(), value.as_slice())?;
                    Ok(())
                })
                .map_err(StoreError::from)?;
        }
        // The disk wait happens outside the node's lock ("critical sections never wait").
        drop(_owner);
        self.flush()?;
        Ok(Node { body, provision })
    }

    /// Deletes a node and its ports, in the states where Ironic allows it.
    pub fn delete_node(&self, uuid: Uuid) -> Result<(), StoreError> {
        self.delete_node_with(uuid, &Cascade::default())
    }

    /// Deletes a node, its ports and the documents that go with it (`cascade`: Ironic's
    /// cascade of port groups, volume records and the node's allocation) in one sled
    /// transaction: a crash leaves all of them or none.
    pub fn delete_node_with(&self, uuid: Uuid, cascade: &Cascade) -> Result<(), StoreError> {
        let t = self.w()?;
        let _owner = self.locks.lock(uuid);
        let Node { body, provision } = self.node(uuid)?;
        crate::store::edits::deletable(uuid, &provision, &body)?;
        let port_uuids = self.port_uuids_of(uuid)?;
        let _docs = t.docs.lock();
        let attached = t.docs.attached(uuid, &body, cascade)?;
        let trees = (
            &t.nodes,
            &t.names,
            &t.deadlines,
            &t.ports,
            &t.macs,
            &t.port_names,
            &t.node_ports,
            &t.docs.docs,
            &t.docs.index,
        );
        trees.transaction(
            |(nodes, names, deadlines, ports, macs, port_names, node_ports, docs, index)| {
                for doc in &attached {
                    documents::remove_in(docs, index, doc)?;
                }
                nodes.remove(uuid.as_bytes())?;
                if let Some(name) = &body.name {
                    names.remove(name.as_bytes())?;
                }
                if let Some(d) = provision.deadline {
                    deadlines.remove(&record::deadline_key(d, uuid))?;
                }
                for port in &port_uuids {
                    if let Some(json) = ports.remove(port.as_bytes())? {
                        ports::unindex_port(macs, port_names, &json)?;
                    }
                    node_ports.remove(&pair_key(uuid, *port))?;
                }
                Ok(())
            },
        )?;
        t.history.forget(uuid)?;
        t.config_drives.remove(uuid.as_bytes())?;
        self.flush()
    }

    /// Puts a node just enrolled straight into `available`, as Ironic does for clients
    /// older than API 1.11 (before `enroll` existed).
    pub fn set_initial_available(&self, uuid: Uuid) -> Result<Node, StoreError> {
        let _owner = self.locks.lock(uuid);
        let value = self.value(uuid)?;
        let (old, json) = record::split(uuid, &value)?;
        let new = crate::store::edits::initially_available(uuid, old)?;
        self.write_node(uuid, &old, &new, json)?;
        self.flush()?;
        self.node(uuid)
    }

    fn value(&self, uuid: Uuid) -> Result<sled::IVec, StoreError> {
        self.value_in(&*self.t()?, uuid)
    }

    fn value_in(&self, t: &Trees, uuid: Uuid) -> Result<sled::IVec, StoreError> {
        t.nodes
            .get(uuid.as_bytes())?
            .ok_or_else(|| StoreError::NodeNotFound(uuid.to_string()))
    }
}

/// Waits (about 2 s at most) for the operations still on `old` to end, and closes it;
/// gives it back if one has not.
fn release(mut old: Arc<Trees>) -> Result<(), Arc<Trees>> {
    for _ in 0..LOCK_POLLS {
        match Arc::try_unwrap(old) {
            Ok(trees) => {
                drop(trees);
                return Ok(());
            }
            Err(still) => old = still,
        }
        std::thread::sleep(LOCK_POLL);
    }
    Err(old)
}

/// One part of the database, for one operation.
pub struct Part<T: 'static>(Open, fn(&Trees) -> &T);

impl<T> std::ops::Deref for Part<T> {
    type Target = T;
    fn deref(&self) -> &T {
        (self.1)(&self.0)
    }
}

/// [`SledStore::flush`], for the parts of the store that hold the database.
fn flush(db: &sled::Db) -> Result<(), StoreError> {
    use tokio::runtime::{Handle, RuntimeFlavor};
    let on_worker =
        Handle::try_current().is_ok_and(|h| h.runtime_flavor() == RuntimeFlavor::MultiThread);
    if on_worker {
        tokio::task::block_in_place(|| db.flush())?;
    } else {
        db.flush()?;
    }
    Ok(())
}

/// Takes `name` for `uuid` in the name index, inside a transaction; refuses a taken name.
fn claim_name(
    names: &sled::transaction::TransactionalTree,
    name: Option<&str>,
    uuid: Uuid,
) -> TxResult<()> {
    if let Some(name) = name
        && names.insert(name.as_bytes(), uuid.as_bytes())?.is_some()
    {
        return abort(StoreError::NameTaken(name.to_owned()));
    }
    Ok(())
}

/// How long `open` waits for the store's file lock (about 2 s): a restarted engine whose predecessor
/// is still exiting (or a test reopening in-process, where sled releases the lock from a
/// background thread just after the drop) gets it; a second engine on the same data dir
/// gets a clear error.
const LOCK_POLL: std::time::Duration = std::time::Duration::from_millis(10);
const LOCK_POLLS: u32 = 200;

/// The layout of the store's trees and values (see [`record`]). It is kept in sled's
/// default tree, so a store written by a deployd with another layout is refused with a
/// clear error instead of being misread. Format 3 added the progress fields of the
/// provision record, format 4 the history in chunks of binary events (see [`history`]);
/// an older store is read as it is (its records are rewritten as they change, old events
/// are read in their JSON) and marked 4, so an older deployd will not misread it
/// afterwards.
pub const FORMAT: u32 = 4;
/// The oldest format this deployd still reads.
pub(crate) const FORMAT_OLDEST: u32 = 2;
const FORMAT_KEY: &[u8] = b"deployd.format";

fn check_format(db: &sled::Db, path: &Path) -> Result<(), StoreError> {
    match db.get(FORMAT_KEY)? {
        // A new store, or one written before the format was recorded (the same layout).
        None => {
            db.insert(FORMAT_KEY, &FORMAT.to_be_bytes())?;
            Ok(())
        }
        Some(v) => {
            let found = <[u8; 4]>::try_from(v.as_ref())
                .map(u32::from_be_bytes)
                .map_err(|_| StoreError::Corrupt(format!("store format {v:02x?}")))?;
            if found == FORMAT {
                Ok(())
            } else if (FORMAT_OLDEST..FORMAT).contains(&found) {
                db.insert(FORMAT_KEY, &FORMAT.to_be_bytes())?;
                Ok(())
            } else {
                Err(StoreError::Format {
                    path: path.to_path_buf(),
                    found,
                })
            }
        }
    }
}

fn open_db(path: &Path, config: &StoreConfig) -> Result<sled::Db, StoreError> {
    for _ in 0..LOCK_POLLS {
        let opened = sled::Config::new()
            .path(path)
            .flush_every_ms(Some(config.flush_every_ms.max(1)))
            .cache_capacity(config.cache_capacity)
            .mode(sled::Mode::HighThroughput)
            .open();
        match opened {
            Err(sled::Error::Io(e)) if e.to_string().contains("could not acquire lock") => {
                std::thread::sleep(LOCK_POLL)
            }
            other => return Ok(other?),
        }
    }
    Err(StoreError::Locked(path.to_path_buf()))
}

fn pair_key(a: Uuid, b: Uuid) -> [u8; 32] {
    let mut key = [0u8; 32];
    key[..16].copy_from_slice(a.as_bytes());
    key[16..].copy_from_slice(b.as_bytes());
    key
}

fn uuid_from(bytes: &[u8]) -> Result<Uuid, StoreError> {
    Uuid::from_slice(bytes).map_err(|_| StoreError::Corrupt(format!("uuid {bytes:02x?}")))
}

fn parse_node(uuid: Uuid, value: &[u8]) -> Result<Node, StoreError> {
    let (provision, json) = record::split(uuid, value)?;
    Ok(Node {
        body: parse_body(uuid, json)?,
        provision,
    })
}

#[cfg(test)]
mod tests;
