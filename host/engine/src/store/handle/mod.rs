//! [`Store`]: the one handle the engine holds on its nodes, whichever backend keeps them.
//!
//! Every operation the engine performs is a method here, named for the provisioning domain,
//! and each answers the same on every backend: [`nodes`] (enrolment, reads, edits,
//! deletion, transitions, history), [`deadlines`] (touches, the deadline index, sweeps),
//! [`ports`] (and config drives), [`documents`] (and uploaded drivers), and the pages of
//! a [`backup`]. Where a backend does not do an operation (sled keeps no driver
//! components: its engine keeps them in the plugins directory), it answers
//! [`StoreError::Unsupported`].
//!
//! What is not storage is not reached through a backend: the engine's clock, its counters
//! and the store's health are the handle's own, shared with the backend it opened.

mod claims;
mod deadlines;
mod documents;
mod nodes;
mod ports;

use std::path::Path;
use std::sync::Arc;

use uuid::Uuid;

use super::documents::Doc;
use super::postgres::{
    DeadlineListener, EngineId, EngineInfo, KeptDriver, Membership, Notifications, Refusal,
    SharedStore,
};
use super::sled;
use super::sled::SledStore;
use super::{
    AgentHeard, Cascade, DocumentPages, FaultStep, NodePages, Recovery, StoreConfig, StoreError,
    SweeperWaker, TimedOut, backup_records, health, history,
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
    /// The conductor group whose nodes this engine runs the steps of.
    conductor_group: String,
}

/// Where the nodes are. One per engine, so the sled arm's size costs nothing.
///
/// Every method's shared arm boxes the backend's future: an async method's future is as
/// large as its largest arm, and PostgreSQL's (a client, a statement, a transaction) made
/// a node's read 1.7 KB to set up on every call on sled, where a read takes a microsecond.
#[allow(clippy::large_enum_variant)]
enum Backend {
    /// The embedded default: sled, one engine.
    Sled(SledStore),
    /// PostgreSQL, shared by several engines; with this engine's membership (its lease)
    /// once it joined.
    Shared(Arc<SharedStore>, Option<Arc<Membership>>),
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
        match Store::open_sled(path, config, timeouts, clock.clone(), true) {
            // A disk that filled while the engine was stopped: the reserve is there for
            // this (see `sled::reserve`). The store goes without one until a start or a
            // storage fault finds room to make it again.
            Err(StoreError::Unavailable(cause)) if sled::reserve::release(path) => {
                tracing::warn!(
                    "the store could not be opened on its full disk ({cause}): its space reserve was released to open it"
                );
                Store::open_sled(path, config, timeouts, clock, true)
            }
            opened => opened,
        }
    }

    /// Opens the sled store in `path` as it is, for a copy to read: checked, but nothing
    /// recovered (a busy node stays as it was) and nothing written but the format mark.
    pub fn open_as_is(path: &Path, config: &StoreConfig) -> Result<Store, StoreError> {
        let timeouts = Timeouts::uniform(std::time::Duration::ZERO);
        Store::open_sled(path, config, timeouts, Clock::new(), false).map(|(store, _)| store)
    }

    fn open_sled(
        path: &Path,
        config: &StoreConfig,
        timeouts: Timeouts,
        clock: Clock,
        recover: bool,
    ) -> Result<(Store, Recovery), StoreError> {
        let metrics = Arc::<Metrics>::default();
        let health = Arc::<health::Health>::default();
        let waker = Arc::<SweeperWaker>::default();
        let sled = SledStore::open_as_is(
            path,
            config,
            timeouts,
            clock.clone(),
            metrics.clone(),
            health.clone(),
            waker.clone(),
        )?;
        let (sled, recovery) = match recover {
            true => sled.recovered()?,
            false => (sled, Recovery::default()),
        };
        let store = Store {
            backend: Backend::Sled(sled),
            clock,
            metrics,
            health,
            waker,
            timeouts,
            conductor_group: config.conductor_group.clone(),
        };
        Ok((store, recovery))
    }

    /// Connects to the shared store at `url` (migrating an older schema), joins it as this
    /// engine (`name`, reached by other engines at `peer_url`, in `config`'s conductor
    /// group; its lease kept from now on) beside whichever engines serve it, and recovers
    /// what no live engine holds (see `postgres::recovery`): what `deployd serve
    /// --store-url` opens.
    pub async fn open_shared(
        url: &str,
        name: &str,
        peer_url: &str,
        config: &StoreConfig,
        timeouts: Timeouts,
        clock: Clock,
    ) -> Result<(Store, Recovery), StoreError> {
        let shared = SharedStore::connect(url, timeouts).await?;
        let shared = Arc::new(match config.node_history {
            true => shared,
            false => shared.without_history(),
        });
        let me = EngineId {
            hostname: name.to_owned(),
            conductor_group: config.conductor_group.clone(),
            url: peer_url.to_owned(),
        };
        let membership = Membership::join(shared.clone(), me, &[]).await?;
        let lease = membership.current().ok_or_else(|| {
            StoreError::Fenced("this engine's lease lapsed as soon as it joined".into())
        })?;
        let recovery = match shared.recover(&lease).await {
            Ok(recovery) => recovery,
            Err(e) => {
                // Not serving: its lease must not keep its nodes waiting for a takeover.
                let _ = membership.leave().await;
                return Err(e);
            }
        };
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
        let conductor_group = membership
            .as_ref()
            .map_or("", |m| m.conductor_group())
            .to_owned();
        Store {
            backend: Backend::Shared(shared, membership),
            clock,
            metrics: Arc::default(),
            health: Arc::default(),
            waker: Arc::default(),
            timeouts,
            conductor_group,
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
            Backend::Shared(s, _) => Box::pin(s.size_on_disk()).await,
        }
    }

    /// A page of the records a backup holds (see [`backup`]), from `at` on.
    pub async fn export(
        &self,
        at: &backup_records::Cursor,
    ) -> Result<backup_records::Page, StoreError> {
        match &self.backend {
            Backend::Sled(s) => s.export(at),
            Backend::Shared(s, _) => Box::pin(s.export(at)).await,
        }
    }

    /// The name this engine goes by in the API (a node's `conductor`, `/v1/conductors`):
    /// on the shared store the host and port it registered as; `deployd` on sled, where
    /// it is the only engine.
    pub fn conductor_name(&self) -> &str {
        match &self.backend {
            Backend::Shared(_, Some(membership)) => membership.hostname(),
            _ => node::CONDUCTOR,
        }
    }

    /// The conductor group whose nodes this engine runs the steps of ("" is the default
    /// group): other groups' nodes are swept, taken over and acted on by their own
    /// group's engines.
    pub fn conductor_group(&self) -> &str {
        &self.conductor_group
    }

    /// The engines that served this store, the latest registration of each host first
    /// by id; none on sled (its engine is the only one).
    pub async fn engines(&self) -> Result<Vec<EngineInfo>, StoreError> {
        match &self.backend {
            Backend::Sled(_) => Ok(Vec::new()),
            Backend::Shared(s, _) => {
                let mut all = Box::pin(s.engines()).await?;
                // The latest registration of a host stands for it (a restart registers
                // again, under a new id).
                all.sort_by(|a, b| a.hostname.cmp(&b.hostname).then(b.id.cmp(&a.id)));
                all.dedup_by(|later, first| later.hostname == first.hostname);
                all.sort_by_key(|e| e.id);
                Ok(all)
            }
        }
    }

    /// Records the drivers this engine runs, where other engines read them (the shared
    /// store's row of this engine; nothing on sled).
    pub async fn announce_drivers(&self, drivers: &[String]) -> Result<(), StoreError> {
        match &self.backend {
            Backend::Shared(_, Some(membership)) => membership.announce_drivers(drivers).await,
            _ => Ok(()),
        }
    }

    /// The backend's name, as a backup's header names it.
    pub fn backend_name(&self) -> &'static str {
        match &self.backend {
            Backend::Sled(_) => "sled",
            Backend::Shared(..) => "postgres",
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
    /// Whether the agent's boot the touch heard of was new to the store (where the store
    /// keeps what agents said: see [`Store::records_agents`]).
    pub new_boot: Option<bool>,
    /// The node's claim the touch was asked to take: taken, or why not (refused by a live
    /// holder, or fenced); none where it was not asked, or the store's claims are the
    /// engine's reservations alone (sled).
    pub claim: Option<Result<(), StoreError>>,
    /// The node's conductor group, where engines of several groups may hear its agent
    /// (the shared store; none on sled, whose one engine acts on every heartbeat).
    pub conductor_group: Option<String>,
    uuid: Uuid,
    read: Read,
}

/// What a touch read of its node, for [`Store::touched_node`].
enum Read {
    Sled(sled::Touched),
    /// The body's JSON.
    Shared(std::sync::Arc<str>),
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
