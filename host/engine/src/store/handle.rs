//! [`Store`]: the one handle the engine holds on its nodes, whichever backend keeps them.
//!
//! Every operation the engine performs is a method here, named for the provisioning domain
//! (enrol, transition, touch, sweep, ports, documents, history), and each answers the same
//! on every backend. A backend that cannot do an operation yet answers
//! [`StoreError::Unsupported`], which no user can reach: `deployd serve` opens sled only
//! until the shared store does all of it.
//!
//! What is not storage is not reached through a backend: the engine's clock, its counters
//! and the store's health are the handle's own, shared with the backend it opened.

use std::path::Path;
use std::sync::Arc;

use uuid::Uuid;

use super::documents::Doc;
use super::postgres::{DeadlineListener, KeptDriver, Membership, SharedStore};
use super::sled;
use super::sled::SledStore;
use super::{
    Cascade, DocumentPages, FaultStep, NodePages, Recovery, StoreConfig, StoreError, SweeperWaker,
    TimedOut, backup, health, history,
};
use crate::clock::{Clock, Timestamp};
use crate::config_drive::ConfigDrive;
use crate::metrics::Metrics;
use crate::node::{self, NewNode, Node, NodeBody, Port, Provision};
use crate::state_machine::{Event, ProvisionState, Timeouts};

/// The node store the engine holds. Cheap to share behind an `Arc`; every method is safe to
/// call from many threads at once.
pub struct Store {
    backend: Backend,
    clock: Clock,
    metrics: Arc<Metrics>,
    health: Arc<health::Health>,
    waker: Arc<SweeperWaker>,
    timeouts: Timeouts,
}

/// Where the nodes are. One per engine, so the sled arm's size costs nothing.
#[allow(clippy::large_enum_variant)]
enum Backend {
    /// The embedded default: sled, one engine.
    Sled(SledStore),
    /// PostgreSQL, shared by several engines; with this engine's membership (its lease)
    /// once it joined.
    Shared(Arc<SharedStore>, Option<Arc<Membership>>),
}

/// Runs `$on_sled` with the sled store bound to `$s`; on a backend that cannot do
/// `$operation` yet, answers [`StoreError::Unsupported`] (converted into the caller's error).
macro_rules! on_sled {
    ($self:ident, $operation:literal, |$s:ident| $on_sled:expr) => {
        match &$self.backend {
            Backend::Sled($s) => $on_sled,
            Backend::Shared(..) => Err(StoreError::Unsupported {
                backend: "shared",
                operation: $operation,
            }
            .into()),
        }
    };
}

impl Store {
    /// Opens (or creates) the sled store in `path` and recovers it: nodes left in busy
    /// states are failed, deadlines are re-derived for the timeouts now configured.
    pub fn open(
        path: &Path,
        config: &StoreConfig,
        timeouts: Timeouts,
        clock: Clock,
    ) -> Result<(Store, Recovery), StoreError> {
        match Store::open_sled(path, config, timeouts, clock.clone()) {
            // A disk that filled while the engine was stopped: the reserve is there for
            // this (see `sled::reserve`). The store goes without one until a start or a
            // storage fault finds room to make it again.
            Err(StoreError::Unavailable(cause)) if sled::reserve::release(path) => {
                tracing::warn!(
                    "the store could not be opened on its full disk ({cause}): its space reserve was released to open it"
                );
                Store::open_sled(path, config, timeouts, clock)
            }
            opened => opened,
        }
    }

    fn open_sled(
        path: &Path,
        config: &StoreConfig,
        timeouts: Timeouts,
        clock: Clock,
    ) -> Result<(Store, Recovery), StoreError> {
        let metrics = Arc::<Metrics>::default();
        let health = Arc::<health::Health>::default();
        let waker = Arc::<SweeperWaker>::default();
        let (sled, recovery) = SledStore::open(
            path,
            config,
            timeouts,
            clock.clone(),
            metrics.clone(),
            health.clone(),
            waker.clone(),
        )?;
        let store = Store {
            backend: Backend::Sled(sled),
            clock,
            metrics,
            health,
            waker,
            timeouts,
        };
        Ok((store, recovery))
    }

    /// Connects to the shared store at `url` (migrating an older schema), joins it as this
    /// engine (`name`, its lease kept from now on), waits until no other engine serves it
    /// and recovers the fleet: what `deployd serve --store-url` opens. See
    /// `postgres::recovery` for why alone.
    pub async fn open_shared(
        url: &str,
        name: &str,
        config: &StoreConfig,
        timeouts: Timeouts,
        clock: Clock,
    ) -> Result<(Store, Recovery), StoreError> {
        let shared = SharedStore::connect(url, timeouts).await?;
        let shared = Arc::new(match config.node_history {
            true => shared,
            false => shared.without_history(),
        });
        let membership = Membership::join(shared.clone(), name, "", &[]).await?;
        let lease = membership.current().ok_or_else(|| {
            StoreError::Fenced("this engine's lease lapsed as soon as it joined".into())
        })?;
        if let Err(refused) = shared.wait_alone(&lease).await {
            // Not serving: its lease must not keep the next engine waiting.
            let _ = membership.leave().await;
            return Err(refused);
        }
        let recovery = shared.recover(&lease).await?;
        let store = Store::shared(shared, Some(Arc::new(membership)), timeouts, clock);
        Ok((store, recovery))
    }

    /// A handle on the shared store (PostgreSQL), already connected and migrated; with
    /// `membership`, this engine's lease, which its sweeps need (without one, a sweep is
    /// a single caller's and claims nothing).
    pub fn shared(
        shared: Arc<SharedStore>,
        membership: Option<Arc<Membership>>,
        timeouts: Timeouts,
        clock: Clock,
    ) -> Store {
        Store {
            backend: Backend::Shared(shared, membership),
            clock,
            metrics: Arc::default(),
            health: Arc::default(),
            waker: Arc::default(),
            timeouts,
        }
    }

    /// The engine's clock.
    pub fn clock(&self) -> &Clock {
        &self.clock
    }

    /// This engine's counters (see [`crate::metrics`]).
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// Whether the store can write (see [`health`]).
    pub fn health(&self) -> &health::Health {
        &self.health
    }

    /// The timeouts the store files deadlines with.
    pub fn timeouts(&self) -> Timeouts {
        self.timeouts
    }

    /// Wakes the sweeper when a deadline earlier than the one it sleeps towards is filed.
    pub(crate) fn waker(&self) -> &SweeperWaker {
        &self.waker
    }

    /// Where the store is on disk (none for the shared store).
    pub fn path(&self) -> Option<&Path> {
        match &self.backend {
            Backend::Sled(s) => Some(s.path()),
            Backend::Shared(..) => None,
        }
    }

    /// Marks everything written so far as what the store must hold from now on (see
    /// [`super::manifest`]): the engine calls it every few seconds and at shutdown.
    pub fn checkpoint(&self) -> Result<(), StoreError> {
        match &self.backend {
            Backend::Sled(s) => s.checkpoint(),
            // PostgreSQL makes every commit durable itself.
            Backend::Shared(..) => Ok(()),
        }
    }

    /// Leaves the shared store as an engine that stops cleanly (its lease ended now, so
    /// the next engine need not wait for it to lapse); nothing to do on sled.
    pub async fn leave(&self) -> Result<(), StoreError> {
        match &self.backend {
            Backend::Shared(_, Some(membership)) => membership.leave().await,
            _ => Ok(()),
        }
    }

    /// One step out of a storage fault (see [`health`]). The shared store has none to
    /// leave: a lost connection fails the calls made meanwhile, and the next call opens a
    /// new one.
    pub fn leave_fault(&self) -> Result<FaultStep, StoreError> {
        match &self.backend {
            Backend::Sled(s) => s.leave_fault(),
            Backend::Shared(..) => Ok(FaultStep::Writable),
        }
    }

    /// Flushes everything written so far to disk.
    pub fn flush(&self) -> Result<(), StoreError> {
        match &self.backend {
            Backend::Sled(s) => s.flush(),
            Backend::Shared(..) => Ok(()),
        }
    }

    /// Bytes the store uses on disk (the database's, on the shared store).
    pub async fn size_on_disk(&self) -> Result<u64, StoreError> {
        match &self.backend {
            Backend::Sled(s) => s.size_on_disk(),
            Backend::Shared(s, _) => s.size_on_disk().await,
        }
    }

    /// Writes a backup of everything the store holds to `out`.
    pub fn backup(&self, out: impl std::io::Write) -> Result<backup::BackupSummary, StoreError> {
        on_sled!(self, "write a backup", |s| s.backup(out))
    }

    /// A document (a chassis, a port group, an allocation, …) by kind and uuid.
    pub async fn document(&self, kind: &'static str, uuid: Uuid) -> Result<Doc, StoreError> {
        match &self.backend {
            Backend::Sled(s) => s.docs()?.get(kind, uuid),
            Backend::Shared(s, _) => s.document(kind, uuid).await,
        }
    }

    /// A document by uuid, or by the value of its unique `field` (a name).
    pub async fn find_document(
        &self,
        kind: &'static str,
        field: &str,
        ident: &str,
    ) -> Result<(Uuid, Doc), StoreError> {
        match &self.backend {
            Backend::Sled(s) => s.docs()?.find(kind, field, ident),
            Backend::Shared(s, _) => s.find_document(kind, field, ident).await,
        }
    }

    /// The documents of a kind after `marker` (all, if none), in uuid order.
    pub fn documents_after(&self, kind: &'static str, marker: Option<Uuid>) -> DocumentPages<'_> {
        match &self.backend {
            Backend::Sled(s) => match s.docs() {
                Ok(docs) => DocumentPages::sled(docs.after(kind, marker)),
                Err(e) => DocumentPages::sled(std::iter::once(Err(e))),
            },
            Backend::Shared(s, _) => DocumentPages::shared(s, kind, marker),
        }
    }

    /// Every document of a kind, in uuid order (kinds an operator keeps a few of).
    pub async fn documents(&self, kind: &'static str) -> Result<Vec<(Uuid, Doc)>, StoreError> {
        let mut pages = self.documents_after(kind, None);
        let mut all = Vec::new();
        while let Some(doc) = pages.next().await {
            all.push(doc?);
        }
        Ok(all)
    }

    /// Adds a document; its uuid and the values of its `unique` fields must be free.
    pub async fn insert_document(
        &self,
        kind: &'static str,
        uuid: Uuid,
        doc: &Doc,
        unique: &[&'static str],
    ) -> Result<(), StoreError> {
        match &self.backend {
            Backend::Sled(s) => s.docs_to_write()?.insert(kind, uuid, doc, unique),
            Backend::Shared(s, _) => s.insert_document(kind, uuid, doc, unique).await,
        }
    }

    /// Changes a document; `change` may refuse, and then nothing is written.
    pub async fn update_document<E: From<StoreError>>(
        &self,
        kind: &'static str,
        uuid: Uuid,
        unique: &[&'static str],
        change: impl FnOnce(&mut Doc) -> Result<(), E>,
    ) -> Result<Doc, E> {
        match &self.backend {
            Backend::Sled(s) => s.docs_to_write()?.update(kind, uuid, unique, change),
            Backend::Shared(s, _) => s.update_document(kind, uuid, unique, change).await,
        }
    }

    /// Deletes a document and frees its unique values.
    pub async fn delete_document(
        &self,
        kind: &'static str,
        uuid: Uuid,
        unique: &[&'static str],
    ) -> Result<(), StoreError> {
        match &self.backend {
            Backend::Sled(s) => s.docs_to_write()?.delete(kind, uuid, unique),
            Backend::Shared(s, _) => s.delete_document(kind, uuid).await,
        }
    }

    /// Whether the store keeps uploaded driver components itself (the shared store does;
    /// sled's engine keeps them in its plugins directory).
    pub fn keeps_drivers(&self) -> bool {
        matches!(self.backend, Backend::Shared(..))
    }

    /// Keeps `body`, sha256 `sha256`, as driver `name`'s uploaded component.
    pub async fn keep_driver(
        &self,
        name: &str,
        sha256: &str,
        body: &[u8],
    ) -> Result<(), StoreError> {
        match &self.backend {
            Backend::Sled(_) => Err(StoreError::Unsupported {
                backend: "sled",
                operation: "keep a driver (its engine keeps them in the plugins directory)",
            }),
            Backend::Shared(s, _) => s.keep_driver(name, sha256, body).await,
        }
    }

    /// Forgets driver `name`'s uploaded component (nothing where none is kept).
    pub async fn forget_driver(&self, name: &str) -> Result<(), StoreError> {
        match &self.backend {
            Backend::Sled(_) => Ok(()),
            Backend::Shared(s, _) => s.forget_driver(name).await,
        }
    }

    /// The uploaded driver components the store keeps (none on sled).
    pub async fn kept_drivers(&self) -> Result<Vec<KeptDriver>, StoreError> {
        match &self.backend {
            Backend::Sled(_) => Ok(Vec::new()),
            Backend::Shared(s, _) => s.kept_drivers().await,
        }
    }

    /// A node's last [`history::MAX_EVENTS`] history events, oldest first.
    pub async fn history_of(&self, node: Uuid) -> Result<Vec<history::Event>, StoreError> {
        match &self.backend {
            Backend::Sled(s) => s.history()?.list(node),
            Backend::Shared(s, _) => s.history_of(node).await,
        }
    }

    /// One of a node's history events, by its uuid.
    pub async fn history_event(
        &self,
        node: Uuid,
        event: Uuid,
    ) -> Result<history::Event, StoreError> {
        match &self.backend {
            Backend::Sled(s) => s.history()?.get(node, event),
            Backend::Shared(s, _) => s.history_event(node, event).await,
        }
    }

    /// Records an engine's note in a node's history, in the state the node is in.
    pub async fn milestone(&self, uuid: Uuid, note: String) -> Result<(), StoreError> {
        match &self.backend {
            Backend::Sled(s) => s.milestone(uuid, note),
            Backend::Shared(s, _) => s.in_place(uuid, None, Some(&note)).await,
        }
    }

    /// Records a failure in a node's history (an operation that failed outside any flow).
    pub async fn failure(&self, uuid: Uuid, error: String) -> Result<(), StoreError> {
        match &self.backend {
            Backend::Sled(s) => s.failure(uuid, error),
            Backend::Shared(s, _) => s.in_place(uuid, Some(&error), None).await,
        }
    }

    /// Enrolls a node (in `enroll`, as Ironic does from API 1.11 on), durable when it returns.
    pub async fn create_node(&self, new: NewNode) -> Result<Node, StoreError> {
        match &self.backend {
            Backend::Sled(s) => s.create_node(new),
            Backend::Shared(s, _) => s.create_node(new).await,
        }
    }

    /// Enrolls many nodes with one flush at the end; each is all-or-nothing.
    pub async fn create_nodes(
        &self,
        new: Vec<NewNode>,
    ) -> Result<Vec<Result<Node, StoreError>>, StoreError> {
        match &self.backend {
            Backend::Sled(s) => s.create_nodes(new),
            // Each row commits on its own (sled's one flush has no cost to save here).
            Backend::Shared(s, _) => {
                let mut created = Vec::with_capacity(new.len());
                for node in new {
                    created.push(s.create_node(node).await);
                }
                Ok(created)
            }
        }
    }

    /// A node by uuid.
    pub async fn node(&self, uuid: Uuid) -> Result<Node, StoreError> {
        match &self.backend {
            Backend::Sled(s) => s.node(uuid),
            Backend::Shared(s, _) => s.node(uuid).await,
        }
    }

    /// Only a node's provision record (state, clock, deadline).
    pub async fn provision(&self, uuid: Uuid) -> Result<Provision, StoreError> {
        match &self.backend {
            Backend::Sled(s) => s.provision(uuid),
            Backend::Shared(s, _) => s.provision(uuid).await,
        }
    }

    /// A node by uuid or by name, as `GET /v1/nodes/{ident}` resolves it.
    pub async fn find_node(&self, ident: &str) -> Result<Node, StoreError> {
        match &self.backend {
            Backend::Sled(s) => s.find_node(ident),
            Backend::Shared(s, _) => s.find_node(ident).await,
        }
    }

    /// Up to `limit` nodes in uuid order, starting after `marker`.
    pub async fn list_nodes(
        &self,
        marker: Option<Uuid>,
        limit: usize,
    ) -> Result<Vec<Node>, StoreError> {
        match &self.backend {
            Backend::Sled(s) => s.list_nodes(marker, limit),
            Backend::Shared(s, _) => s.list_nodes(marker, limit).await,
        }
    }

    /// Every node in uuid order after `marker`, a node at a time (see [`NodePages`]).
    pub fn nodes_after(&self, marker: Option<Uuid>) -> NodePages<'_> {
        match &self.backend {
            Backend::Sled(s) => NodePages::sled(s.nodes_after(marker)),
            Backend::Shared(s, _) => NodePages::shared(s, marker),
        }
    }

    /// How many nodes are enrolled.
    pub async fn node_count(&self) -> Result<usize, StoreError> {
        match &self.backend {
            Backend::Sled(s) => Ok(s.node_count()),
            Backend::Shared(s, _) => s.node_count().await,
        }
    }

    /// Changes a node's body (never its provision state: that is what events are for).
    pub async fn update_node(
        &self,
        uuid: Uuid,
        change: impl Fn(&mut NodeBody) -> Result<(), StoreError>,
    ) -> Result<Node, StoreError> {
        self.edit_node(uuid, |_, body| change(body)).await
    }

    /// [`Store::update_node`] where `change` also sees the node's provision state and may
    /// refuse with an error of the caller's.
    pub async fn edit_node<E: From<StoreError>>(
        &self,
        uuid: Uuid,
        change: impl Fn(&Provision, &mut NodeBody) -> Result<(), E>,
    ) -> Result<Node, E> {
        match &self.backend {
            Backend::Sled(s) => s.edit_node(uuid, change),
            Backend::Shared(s, _) => s.edit_node(uuid, change, None).await,
        }
    }

    /// Deletes a node and its ports, in the states where Ironic allows it.
    pub async fn delete_node(&self, uuid: Uuid) -> Result<(), StoreError> {
        self.delete_node_with(uuid, &Cascade::default()).await
    }

    /// Deletes a node, its ports and the documents that go with it, all or none.
    pub async fn delete_node_with(&self, uuid: Uuid, cascade: &Cascade) -> Result<(), StoreError> {
        match &self.backend {
            Backend::Sled(s) => s.delete_node_with(uuid, cascade),
            Backend::Shared(s, _) => s.delete_node(uuid, cascade, None).await,
        }
    }

    /// Puts a node just enrolled straight into `available` (clients older than API 1.11).
    pub async fn set_initial_available(&self, uuid: Uuid) -> Result<Node, StoreError> {
        match &self.backend {
            Backend::Sled(s) => s.set_initial_available(uuid),
            Backend::Shared(s, _) => s.set_initial_available(uuid).await,
        }
    }

    /// Applies `event` to a node, durable when it returns; `last_error` replaces the node's.
    pub async fn apply_event(
        &self,
        uuid: Uuid,
        event: Event,
        last_error: Option<String>,
    ) -> Result<Node, StoreError> {
        match &self.backend {
            Backend::Sled(s) => s.apply_event(uuid, event, last_error),
            Backend::Shared(s, _) => s.apply_event(uuid, None, event, last_error, None).await,
        }
    }

    /// [`Store::apply_event`], only if the node is still in `expected`.
    pub async fn apply_event_from(
        &self,
        uuid: Uuid,
        expected: ProvisionState,
        event: Event,
        last_error: Option<String>,
    ) -> Result<Node, StoreError> {
        match &self.backend {
            Backend::Sled(s) => s.apply_event_from(uuid, expected, event, last_error),
            Backend::Shared(s, _) => {
                let expected = Some(expected);
                s.apply_event(uuid, expected, event, last_error, None).await
            }
        }
    }

    /// Applies many events with one flush at the end; each is all-or-nothing.
    pub async fn apply_events(
        &self,
        events: impl IntoIterator<Item = (Uuid, Event)>,
    ) -> Result<Vec<Result<Node, StoreError>>, StoreError> {
        match &self.backend {
            Backend::Sled(s) => s.apply_events(events),
            Backend::Shared(s, _) => {
                let mut applied = Vec::new();
                for (uuid, event) in events {
                    applied.push(s.apply_event(uuid, None, event, None, None).await);
                }
                Ok(applied)
            }
        }
    }

    /// A live agent's heartbeat: moves a waiting node's clock and deadline to now (or,
    /// while the store cannot write, remembers it: see [`Touched::recorded`]).
    pub async fn touch_provisioning(&self, uuid: Uuid) -> Result<Touched, StoreError> {
        self.touch(uuid, None).await
    }

    /// A touch that also reports the agent's progress (see
    /// [`super::progress_fingerprint`]).
    pub async fn touch(&self, uuid: Uuid, progress: Option<u64>) -> Result<Touched, StoreError> {
        let (provision, recorded, read) = match &self.backend {
            Backend::Sled(s) => {
                let touched = s.touch(uuid, progress)?;
                (touched.provision, touched.recorded, Some(touched))
            }
            Backend::Shared(s, _) => (s.touch(uuid, progress).await?, true, None),
        };
        Ok(Touched {
            provision,
            recorded,
            uuid,
            read,
        })
    }

    /// The node just touched, with its new record: on sled parsed from the bytes the
    /// touch read (a second read of a page just written cost more than the touch and the
    /// driver call together under a storm of heartbeats, as `bench api` measured); else
    /// read again.
    pub async fn touched_node(&self, touched: &Touched) -> Result<Node, StoreError> {
        match &touched.read {
            Some(read) => read.node(),
            None => self.node(touched.uuid).await,
        }
    }

    /// Records progress seen elsewhere than in a heartbeat; returns whether it was progress.
    pub async fn report_progress(&self, uuid: Uuid, progress: u64) -> Result<bool, StoreError> {
        match &self.backend {
            Backend::Sled(s) => s.report_progress(uuid, progress),
            Backend::Shared(s, _) => s.report_progress(uuid, progress).await,
        }
    }

    /// The earliest deadline in the index (possibly stale; the sweep step checks).
    pub async fn next_deadline(&self) -> Result<Option<Timestamp>, StoreError> {
        match &self.backend {
            Backend::Sled(s) => s.next_deadline(),
            Backend::Shared(s, _) => s.next_deadline().await,
        }
    }

    /// The earliest deadline in the index (possibly stale), and how long until it on the
    /// store's own clock (zero if it is due now); `None` when no node waits with one.
    pub async fn next_due(&self) -> Result<Option<(Timestamp, std::time::Duration)>, StoreError> {
        match &self.backend {
            Backend::Sled(s) => Ok(s.next_deadline()?.map(|d| (d, d.since(self.clock.now())))),
            Backend::Shared(s, _) => s.next_due().await,
        }
    }

    /// What tells a sleeping sweeper that a deadline was filed: this engine's writers on
    /// sled; every engine's transitions, by a notification, on the shared store.
    pub async fn deadlines_filed(&self) -> Result<Filed, StoreError> {
        match &self.backend {
            Backend::Sled(_) => Ok(Filed::Here),
            Backend::Shared(s, _) => Ok(Filed::Notified(s.listen_deadlines().await?)),
        }
    }

    /// Every entry of the deadline index, in deadline order (diagnostics and tests).
    pub async fn deadline_index(&self) -> Result<Vec<(Timestamp, Uuid)>, StoreError> {
        match &self.backend {
            Backend::Sled(s) => s.deadline_index(),
            Backend::Shared(s, _) => s.deadline_index().await,
        }
    }

    /// The sweeper's step: fails up to `limit` waiting nodes whose deadline has passed on
    /// the store's own clock (the engine's for sled, the database's for the shared
    /// store), with what each node's agent last reported of its progress (`describe`)
    /// quoted in a stall's `last_error`; returns them.
    pub async fn sweep(
        &self,
        limit: usize,
        describe: &(dyn Fn(Uuid) -> Option<String> + Sync),
    ) -> Result<Vec<TimedOut>, StoreError> {
        match &self.backend {
            Backend::Sled(s) => s.fail_expired_describing(self.clock.now(), limit, describe),
            Backend::Shared(s, membership) => {
                let limit = i64::try_from(limit).unwrap_or(i64::MAX);
                match membership.as_deref().map(Membership::current) {
                    None => s.fail_expired(limit, None).await,
                    Some(Some(lease)) => s.fail_expired(limit, Some(&lease)).await,
                    Some(None) => Err(StoreError::Fenced(
                        "this engine is not sure of its lease, so it sweeps nothing".into(),
                    )),
                }
            }
        }
    }

    /// Fails up to `limit` nodes whose deadline is at or before `now`; returns them.
    pub async fn fail_expired(
        &self,
        now: Timestamp,
        limit: usize,
    ) -> Result<Vec<TimedOut>, StoreError> {
        match &self.backend {
            Backend::Sled(s) => s.fail_expired(now, limit),
            Backend::Shared(s, _) => {
                let limit = i64::try_from(limit).unwrap_or(i64::MAX);
                s.fail_expired_at(Some(now), limit, None).await
            }
        }
    }

    /// Creates a port on `node` with `mac`.
    pub async fn create_port(
        &self,
        node: Uuid,
        mac: &str,
        extra: node::JsonMap,
    ) -> Result<Port, StoreError> {
        match &self.backend {
            Backend::Sled(s) => s.create_port(node, mac, extra),
            Backend::Shared(s, _) => s.create_port(node, mac, extra).await,
        }
    }

    /// Stores a port as given (its uuid, MAC and name unique).
    pub async fn insert_port(&self, port: Port) -> Result<Port, StoreError> {
        match &self.backend {
            Backend::Sled(s) => s.insert_port(port),
            Backend::Shared(s, _) => s.insert_port(port).await,
        }
    }

    /// Every port.
    pub async fn list_ports(&self) -> Result<Vec<Port>, StoreError> {
        match &self.backend {
            Backend::Sled(s) => s.list_ports(),
            Backend::Shared(s, _) => s.list_ports().await,
        }
    }

    /// A port by uuid.
    pub async fn port(&self, uuid: Uuid) -> Result<Port, StoreError> {
        match &self.backend {
            Backend::Sled(s) => s.port(uuid),
            Backend::Shared(s, _) => s.port(uuid).await,
        }
    }

    /// The port with this name, if any.
    pub async fn port_named(&self, name: &str) -> Result<Option<Uuid>, StoreError> {
        match &self.backend {
            Backend::Sled(s) => s.port_named(name),
            Backend::Shared(s, _) => s.port_named(name).await,
        }
    }

    /// The port with this MAC address, if any.
    pub async fn port_with_mac(&self, mac: &str) -> Result<Option<Port>, StoreError> {
        match &self.backend {
            Backend::Sled(s) => s.port_with_mac(mac),
            Backend::Shared(s, _) => s.port_with_mac(mac).await,
        }
    }

    /// The node one of `macs` belongs to, if any (an agent's lookup).
    pub async fn node_by_macs<'a>(
        &self,
        macs: impl IntoIterator<Item = &'a str>,
    ) -> Result<Option<Uuid>, StoreError> {
        match &self.backend {
            Backend::Sled(s) => s.node_by_macs(macs),
            Backend::Shared(s, _) => s.node_by_macs(macs).await,
        }
    }

    /// A node's ports.
    pub async fn ports_of(&self, node: Uuid) -> Result<Vec<Port>, StoreError> {
        match &self.backend {
            Backend::Sled(s) => s.ports_of(node),
            Backend::Shared(s, _) => s.ports_of(node).await,
        }
    }

    /// Deletes a port.
    pub async fn delete_port(&self, uuid: Uuid) -> Result<(), StoreError> {
        match &self.backend {
            Backend::Sled(s) => s.delete_port(uuid),
            Backend::Shared(s, _) => s.delete_port(uuid).await,
        }
    }

    /// Changes a port; `change` may refuse, and then nothing is written.
    pub async fn update_port<E: From<StoreError>>(
        &self,
        uuid: Uuid,
        change: impl FnOnce(&mut Port) -> Result<(), E>,
    ) -> Result<Port, E> {
        match &self.backend {
            Backend::Sled(s) => s.update_port(uuid, change),
            Backend::Shared(s, _) => s.update_port(uuid, change).await,
        }
    }

    /// Keeps (or, with `None`, forgets) the config drive of a node's deploy.
    pub async fn set_config_drive(
        &self,
        node: Uuid,
        drive: Option<&ConfigDrive>,
    ) -> Result<(), StoreError> {
        match &self.backend {
            Backend::Sled(s) => s.set_config_drive(node, drive),
            Backend::Shared(s, _) => s.set_config_drive(node, drive).await,
        }
    }

    /// The config drive of a node's deploy, if it has one.
    pub async fn config_drive(&self, node: Uuid) -> Result<Option<ConfigDrive>, StoreError> {
        match &self.backend {
            Backend::Sled(s) => s.config_drive(node),
            Backend::Shared(s, _) => s.config_drive(node).await,
        }
    }
}

#[cfg(test)]
impl Store {
    /// The sled store behind the handle, for the sled store's own tests.
    pub(crate) fn sled(&self) -> &SledStore {
        match &self.backend {
            Backend::Sled(s) => s,
            Backend::Shared(..) => panic!("not a sled store"),
        }
    }
}

/// A node just touched: its new provision record (and, on sled, its body as the touch read
/// it; see [`Store::touched_node`]).
pub struct Touched {
    pub provision: Provision,
    /// False for a touch the store could not write and remembers until it can (a full
    /// disk on sled): the heartbeat is acknowledged, and nothing else of it is acted on.
    pub recorded: bool,
    uuid: Uuid,
    read: Option<sled::Touched>,
}

/// A touch is read mostly for its new record.
impl std::ops::Deref for Touched {
    type Target = Provision;
    fn deref(&self) -> &Provision {
        &self.provision
    }
}

impl std::fmt::Debug for Touched {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Touched").field(&self.provision).finish()
    }
}

/// How a sweeper hears of deadlines filed while it sleeps (see [`Store::deadlines_filed`]).
pub enum Filed {
    /// Writers of this engine compare their deadline with the one the sweeper published
    /// ([`SweeperWaker`]): it publishes, then reads the index again.
    Here,
    /// Every engine's transitions notify the listener at their commit.
    Notified(DeadlineListener),
}

impl Filed {
    /// Says the sweeper will sleep `for_at_most` from now.
    pub fn sleeping(&self, store: &Store, for_at_most: std::time::Duration) {
        if let Filed::Here = self {
            store
                .waker()
                .sleep_until(store.clock().now().plus(for_at_most));
        }
    }

    /// Waits for a deadline filed since [`Filed::sleeping`]. A listener whose connection
    /// ended listens again (after a pause when it cannot yet).
    pub async fn next(&mut self, store: &Store) {
        match self {
            Filed::Here => store.waker().woken().await,
            Filed::Notified(listener) => {
                if listener.next().await.is_some() {
                    return;
                }
                tracing::warn!("the sweeper's deadline listener closed; listening again");
                match store.deadlines_filed().await {
                    Ok(again) => *self = again,
                    Err(_) => tokio::time::sleep(std::time::Duration::from_secs(1)).await,
                }
            }
        }
    }
}
