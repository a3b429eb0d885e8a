//! The conductor: runs provisioning flows by calling each node's driver.
//!
//! - **One owner per node.** A flow step holds the node's reservation (in memory, like
//!   Ironic's `reservation` column) for as long as it runs; an operator action on a busy
//!   node waits for it as Ironic's lock retry does, then is refused with
//!   [`ConductorError::Busy`] (HTTP 409), and a heartbeat that finds the node busy still
//!   touches it but skips the driver call. The steps themselves are in [`steps`].
//! - **Touch first.** A heartbeat of a waiting node touches its clock before anything else
//!   can fail or wait, so a live agent always keeps its node alive. While a step runs on a
//!   waiting node the engine touches it too: a node being worked on is not silent.
//! - **Pinned versions.** A deploy records the hash of the driver version it started with
//!   in `driver_internal_info.driver_hash`; every later step of that flow uses that
//!   version, even after an operator loaded a new one. The pin goes when the flow ends.
//! - **Failures are the node's, never the engine's.** A driver that returns `fail`, traps,
//!   loops or runs out of memory fails that node with the reason in `last_error`, and its
//!   clean-up runs; other nodes carry on.

pub mod allocations;
mod console;
pub mod inspection;
pub mod management;
mod records;
pub mod rescue;
pub mod servicing;
mod steps;
mod virtual_media;

pub use records::token_hash;
use steps::Step;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use uuid::Uuid;

use crate::agent_sessions::AgentSessions;
use crate::config_drive::ConfigDrive;
use crate::driver_host::capability::bmc::{self, PowerAction};
use crate::driver_host::sandbox::{Export, Reply};
use crate::driver_host::{LoadedDriver, PluginError, Registry};
use crate::hardware::Hardware;
use crate::images::{Images, STAGED_TOKEN};
use crate::node::{Node, NodeBody};
use crate::reservations::{Claim, Held, Refused, Reservations};
use crate::state_machine::{Event, ProvisionState};
use crate::store::{Store, StoreError};

pub use crate::node::{AGENT_CA_SHA256, AGENT_TOKEN_HASH, CLEAN_STEPS, DRIVER_HASH};

/// What an operator can ask of a node (the API's provision targets).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verb {
    Manage,
    Provide,
    Deploy,
    Rebuild,
    Undeploy,
    /// Manual cleaning (from manageable): wipe the disk, back to manageable.
    Clean,
    Abort,
}

#[derive(Debug, thiserror::Error)]
pub enum ConductorError {
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Another task holds the node: one of this engine's (`task` says what it does) or
    /// another engine's.
    #[error(
        "Node {node} is locked by host {host}{}, please retry after the current operation is completed.",
        task.map(|t| format!(" for {t}")).unwrap_or_default()
    )]
    Busy {
        node: Uuid,
        host: String,
        task: Option<&'static str>,
    },
    /// The operator protected the node; it keeps its instance until they unprotect it.
    #[error("Node {0} is protected and cannot be undeployed, rebuilt or deleted")]
    Protected(Uuid),
    #[error("driver {0:?} is not loaded")]
    NoDriver(String),
    /// The node's hardware (its BMC) refused or failed what was asked.
    #[error("{0}")]
    Hardware(String),
    /// The node's record cannot start this flow (e.g. its local image is unreadable).
    #[error("{0}")]
    Invalid(String),
    /// The node is of a conductor group (its name) this engine does not serve: an engine
    /// of that group runs its steps (see [`crate::conductor_groups`]).
    #[error("node {node} is of conductor group {group:?}, whose steps this engine does not run")]
    OtherGroup { node: Uuid, group: String },
}

impl From<Held> for ConductorError {
    fn from(h: Held) -> Self {
        ConductorError::Busy {
            node: h.node,
            host: h.host,
            task: h.task,
        }
    }
}

impl From<Refused> for ConductorError {
    fn from(refused: Refused) -> Self {
        match refused {
            Refused::Held(held) => held.into(),
            Refused::Store(e) => e.into(),
        }
    }
}

/// A change to a node's record, seen under the node's lock with its provision state.
pub trait NodeChange<E>:
    Fn(&crate::node::Provision, &mut crate::node::NodeBody) -> Result<(), E>
{
}

impl<E, F> NodeChange<E> for F where
    F: Fn(&crate::node::Provision, &mut crate::node::NodeBody) -> Result<(), E>
{
}

/// What a refused edit can say: the store's error or the conductor's (a busy node).
pub trait EditError: From<StoreError> + From<ConductorError> {}

/// How many times a change that reads other records is computed again when its record
/// changed under it (see [`Conductor::edit_reading`]).
const RECOMPUTE: usize = 5;

impl<E: From<StoreError> + From<ConductorError>> EditError for E {}

/// What the conductor takes from the engine's configuration (`[conductor]`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// Whether provide and undeploy clean, for nodes without their own `automated_clean`.
    pub automated_clean: bool,
    /// How long an operator's call waits for a node another task holds (Ironic's lock
    /// retry: (attempts − 1) × interval).
    pub lock_wait: Duration,
    /// The optional interfaces the configuration enables (rescue, consoles).
    pub optional: crate::hardware::Optional,
    /// How rescue passwords are hashed.
    pub rescue_hash: crate::rescue_password::Algorithm,
    /// Where serial consoles listen.
    pub console: crate::console::Settings,
}

impl Default for Settings {
    /// Ironic's defaults: automated cleaning on; 3 lock attempts 1 s apart.
    fn default() -> Self {
        Settings {
            automated_clean: true,
            lock_wait: Duration::from_secs(2),
            optional: Default::default(),
            rescue_hash: Default::default(),
            console: Default::default(),
        }
    }
}

pub struct Conductor {
    store: Arc<Store>,
    registry: Arc<Registry>,
    agents: Arc<AgentSessions>,
    reservations: Arc<Reservations>,
    /// Where local images are staged for agents to download (none: no local images).
    images: Option<Images>,
    /// Makes a deploy's image ready (checksum, format, qcow2) before the machine boots.
    preparer: crate::deploy_image::Preparer,
    /// The [`steps::keep_alive`] task, started with the first step.
    keep_alive: std::sync::OnceLock<tokio::task::JoinHandle<()>>,
    /// Allocations still looking for a node (see [`allocations`]).
    allocating: allocations::Searches,
    /// The serial consoles this engine runs.
    consoles: crate::console::Consoles,
    settings: Settings,
}

impl Conductor {
    pub fn new(
        store: Arc<Store>,
        registry: Arc<Registry>,
        agents: Arc<AgentSessions>,
        images: Option<Images>,
        settings: Settings,
    ) -> Arc<Conductor> {
        let reservations = Arc::new(Reservations::backed_by(store.clone()));
        Arc::new(Conductor {
            consoles: crate::console::Consoles::new(settings.console.clone()),
            settings,
            store,
            registry,
            agents,
            reservations,
            preparer: crate::deploy_image::Preparer::new(images.clone()),
            images,
            keep_alive: std::sync::OnceLock::new(),
            allocating: allocations::Searches::default(),
        })
    }

    /// The node for a task of the engine's own (a heartbeat's step): now or never, since
    /// the agent heartbeats again soon.
    async fn claim(&self, node: Uuid, operation: &'static str) -> Result<Claim, ConductorError> {
        Ok(self.reservations.try_claim(node, operation).await?)
    }

    /// The node for an operator's call: it waits for a short task to end, as Ironic's lock
    /// retry does, and is refused (409, naming the task) only past that.
    async fn claim_for_operator(
        &self,
        node: Uuid,
        operation: &'static str,
    ) -> Result<Claim, ConductorError> {
        let wait = self.settings.lock_wait;
        Ok(self
            .reservations
            .claim_within(node, operation, wait)
            .await?)
    }

    /// Ironic's hardware types and interfaces, with those this engine's configuration
    /// enables.
    pub fn hardware(&self) -> Hardware<'_> {
        Hardware::new(&self.registry).enabling(&self.settings.optional)
    }

    /// The store, for reads: every write goes through the conductor's own methods.
    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    /// Which nodes the engine's tasks hold now, and for what.
    pub fn reservations(&self) -> &Arc<Reservations> {
        &self.reservations
    }

    pub fn registry(&self) -> &Arc<Registry> {
        &self.registry
    }

    /// What the engine knows of each node's running agent.
    pub fn agents(&self) -> &Arc<AgentSessions> {
        &self.agents
    }

    /// What the node's agent last said in a heartbeat, as the API shows it: where engines
    /// share the nodes, what the store kept (whichever engine heard it); else what this
    /// engine heard.
    pub async fn agent_view(&self, node: Uuid) -> Option<crate::agent_sessions::AgentSession> {
        if !self.store.records_agents() {
            // What a node's document shows, not the session's token and certificate.
            return self
                .agents
                .read(node, |s| crate::agent_sessions::AgentSession {
                    url: s.url.clone(),
                    version: s.version.clone(),
                    last_heartbeat: s.last_heartbeat,
                    status_message: s.status_message.clone(),
                    ..Default::default()
                });
        }
        let heard = self.store.agents_heard(&[node]).await.ok()?.remove(&node)?;
        Some(crate::agent_sessions::AgentSession {
            url: heard
                .url
                .and_then(|u| crate::agent_sessions::CallbackUrl::parse(&u).ok()),
            version: heard.version,
            last_heartbeat: heard.at_micros.map(crate::clock::Timestamp::from_micros),
            status_message: heard.status_message,
            ..Default::default()
        })
    }

    /// Whether a flow step (or an operator's change) is running on the node.
    pub fn is_busy(&self, node: Uuid) -> bool {
        self.reservations.holder(node).is_some()
    }

    /// Starts an operator action. The first transition happens before this returns (so an
    /// illegal one is refused synchronously); the driver work runs in the background.
    pub async fn provision(self: &Arc<Self>, node: Uuid, verb: Verb) -> Result<(), ConductorError> {
        self.provision_with(node, verb, None).await
    }

    /// [`Conductor::provision`] with the deploy's config drive (deploy and rebuild only):
    /// kept for the deploy, replacing the last one. A deploy without one drops the last
    /// one; a rebuild without one keeps it, as Ironic does.
    pub async fn provision_with(
        self: &Arc<Self>,
        node: Uuid,
        verb: Verb,
        config_drive: Option<ConfigDrive>,
    ) -> Result<(), ConductorError> {
        let claim = self.claim_for_operator(node, verb.operation()).await?;
        let current = self.store.node(node).await?;
        let state = current.state();
        // Under the claim, so a PATCH that protects the node is either seen here or
        // waits until the flow has started.
        let tears_down = matches!(verb, Verb::Undeploy | Verb::Rebuild)
            || (verb == Verb::Deploy && state == ProvisionState::Active);
        if tears_down && current.body.is_protected() {
            return Err(ConductorError::Protected(node));
        }
        match verb {
            // From enroll, manage verifies; from available (or a failed state) the node
            // is manageable at once, with nothing left to verify.
            Verb::Manage => {
                self.store
                    .apply_event_from(node, state, Event::Manage, None)
                    .await?;
                if matches!(state.next(Event::Manage), Ok(ProvisionState::Verifying)) {
                    self.spawn(claim, Step::Verify);
                }
            }
            Verb::Provide if self.cleans(&current.body) => {
                self.start_cleaning(claim, &current, Event::Provide, Vec::new())
                    .await?
            }
            Verb::Provide => {
                self.store
                    .apply_event_from(node, state, Event::Provide, None)
                    .await?;
                self.spawn(claim, Step::Clean);
            }
            Verb::Deploy | Verb::Rebuild => {
                let event = if verb == Verb::Deploy && state != ProvisionState::Active {
                    Event::Deploy
                } else {
                    Event::Rebuild
                };
                state
                    .next(event)
                    .map_err(|source| StoreError::IllegalTransition { node, source })?;
                match (&config_drive, event) {
                    (Some(drive), _) => {
                        self.check_config_drive_writer(&current).await?;
                        self.store.set_config_drive(node, Some(drive)).await?;
                    }
                    (None, Event::Rebuild) => {}
                    (None, _) => self.store.set_config_drive(node, None).await?,
                }
                self.start_flow(claim, &current, event, Step::Deploy)
                    .await?;
            }
            // Cleaning boots the ramdisk again, so it is a flow of its own too.
            Verb::Undeploy if self.cleans(&current.body) => {
                self.start_cleaning(claim, &current, Event::Delete, Vec::new())
                    .await?;
                self.store.set_config_drive(node, None).await?;
                self.end_instance(node).await?;
            }
            Verb::Undeploy => {
                self.start_flow(claim, &current, Event::Delete, Step::Release)
                    .await?;
                self.store.set_config_drive(node, None).await?;
                self.end_instance(node).await?;
            }
            Verb::Clean => {
                self.start_cleaning(claim, &current, Event::Clean, Vec::new())
                    .await?
            }
            Verb::Abort => {
                let what = match state {
                    ProvisionState::RescueWait => "Rescue",
                    _ => "Deploy",
                };
                let message = format!("{what} aborted by the operator in \"{state}\"");
                self.store
                    .apply_event_from(node, state, Event::Abort, Some(message.clone()))
                    .await?;
                self.spawn(claim, Step::CleanUp(message));
            }
        }
        Ok(())
    }

    /// Manual cleaning (from manageable) with the operator's steps, kept where Ironic keeps
    /// them (`driver_internal_info.clean_steps`) for the driver to run in order, until
    /// the flow ends. No steps: the driver's default (erasing the disk's metadata).
    pub async fn clean(
        self: &Arc<Self>,
        node: Uuid,
        steps: Vec<Value>,
    ) -> Result<(), ConductorError> {
        let claim = self
            .claim_for_operator(node, Verb::Clean.operation())
            .await?;
        let current = self.store.node(node).await?;
        self.start_cleaning(claim, &current, Event::Clean, steps)
            .await
    }

    /// Starts a cleaning (`event` from the node's state: provide, undeploy, clean) that
    /// runs `steps`, or the driver's default with none. An illegal transition is refused
    /// before the steps are written.
    async fn start_cleaning(
        self: &Arc<Self>,
        claim: Claim,
        current: &Node,
        event: Event,
        steps: Vec<Value>,
    ) -> Result<(), ConductorError> {
        let node = current.uuid();
        current
            .state()
            .next(event)
            .map_err(|source| StoreError::IllegalTransition { node, source })?;
        self.set_clean_steps(node, steps).await?;
        self.start_flow(claim, current, event, Step::TearDown).await
    }

    /// Sets (or, with none, removes) the steps a cleaning runs.
    async fn set_clean_steps(&self, node: Uuid, steps: Vec<Value>) -> Result<(), StoreError> {
        let present = self
            .store
            .node(node)
            .await?
            .body
            .driver_internal_info
            .contains_key(CLEAN_STEPS);
        if steps.is_empty() && !present {
            return Ok(());
        }
        self.store
            .update_node(node, |b| {
                match steps.is_empty() {
                    true => b.driver_internal_info.remove(CLEAN_STEPS),
                    false => b
                        .driver_internal_info
                        .insert(CLEAN_STEPS.into(), Value::Array(steps.clone())),
                };
                Ok(())
            })
            .await?;
        Ok(())
    }

    /// Whether provide and undeploy clean this node: its own `automated_clean`, else the
    /// engine's (Ironic's rule).
    pub fn cleans(&self, node: &crate::node::NodeBody) -> bool {
        node.attrs
            .get("automated_clean")
            .and_then(Value::as_bool)
            .unwrap_or(self.settings.automated_clean)
    }

    /// Starts a flow that runs the driver over several steps (deploy, rebuild, undeploy,
    /// clean): the transition must be legal, a local image is staged, the driver version
    /// is pinned and the last boot's agent token wiped, then the first step runs.
    async fn start_flow(
        self: &Arc<Self>,
        claim: Claim,
        current: &Node,
        event: Event,
        step: Step,
    ) -> Result<(), ConductorError> {
        let (node, state) = (current.uuid(), current.state());
        let driver = self
            .component(&current.body)
            .ok_or_else(|| no_component(&current.body))?;
        state
            .next(event)
            .map_err(|source| StoreError::IllegalTransition { node, source })?;
        if matches!(step, Step::Deploy) {
            self.stage_image(current).await?;
        }
        self.pin(node, Some(&driver.id)).await?;
        self.store
            .apply_event_from(node, state, event, None)
            .await?;
        self.spawn(claim, step);
        Ok(())
    }

    /// A heartbeat from the node's agent, whose token the caller verified. Touches the node
    /// first, then (in `wait call-back` or `clean wait`) lets the driver act unless a step is already running (then `Busy`, and
    /// the agent retries soon, as IPA does on 409).
    pub async fn heartbeat(
        self: &Arc<Self>,
        node: Uuid,
        token: &str,
        url: &crate::agent_sessions::CallbackUrl,
        version: &str,
        ca: Option<Arc<crate::agent_sessions::AgentCa>>,
        report: crate::agent_sessions::AgentReport,
    ) -> Result<(), ConductorError> {
        // Claimed with the touch (this engine's reservation first, then, on the shared
        // store, the database's claim in the touch's own statement): the node the touch
        // reads is then the one the step sees, since no other step can write it
        // meanwhile. Claimed after, a step that ended in between would hand this one a
        // node from before its writes (a pxe deploy started its image write twice that
        // way).
        let mut reserved: Result<Claim, ConductorError> = self
            .reservations
            .reserve(node, "heartbeat")
            .map_err(Into::into);
        let claiming = reserved.is_ok() && self.store.claims_in_store();
        if let (true, Ok(claim)) = (claiming, reserved.as_mut()) {
            claim.asking_store();
        }
        // Where engines share the nodes, what the agent said goes with the touch, for a
        // read through any engine; on sled this engine's memory is where it is read.
        let heard = self
            .store
            .records_agents()
            .then(|| crate::store::AgentHeard {
                url: Some(url.as_str().to_owned()),
                version: Some(version.to_owned()),
                status_message: report.message.clone(),
                at_micros: None,
                boot: Some(token_hash(token)[..16].to_owned()),
            });
        let touched = self
            .store
            .touch_heard(node, report.fingerprint(), heard.as_ref(), claiming);
        let touched = match touched.await {
            // The store cannot write, and remembers the touch until it can: acknowledged,
            // and nothing else of it is acted on (no write would be taken). The agent's
            // next heartbeat after that brings its news again.
            Ok(p) if !p.recorded => return Ok(()),
            Ok(mut p) => {
                let claimed = p.claim.take();
                reserved = match (reserved, claimed) {
                    (Ok(claim), Some(claimed)) => claim.taken_in_store(claimed).map_err(Into::into),
                    (reserved, _) => reserved,
                };
                // A node of another conductor group: its engines act on the heartbeat
                // (the caller sends it to one); the touch took no claim for this engine.
                if let Some(group) = p.conductor_group.take()
                    && group != self.store.conductor_group()
                {
                    return Err(ConductorError::OtherGroup { node, group });
                }
                Some(p)
            }
            // Heartbeats in other states are only recorded (Ironic's record-only states).
            Err(StoreError::NotWaiting { .. }) => None,
            Err(e) => return Err(e.into()),
        };
        let now = self.store.clock().now();
        // Recorded, report included, before the driver's step is spawned: the step sees
        // this heartbeat's report.
        let heard = self
            .agents
            .heartbeat(node, token, url, version, ca, report, now);
        // Where the store keeps what agents said, it tells whether this boot was heard
        // before, by any engine: each engine's memory would note one first per engine.
        let first = match touched.as_ref().and_then(|t| t.new_boot) {
            Some(new_boot) => new_boot,
            None => heard.first,
        };
        if first {
            let note = format!("First heartbeat from agent {version} at {}", url.as_str());
            self.store.milestone(node, note).await?;
        }
        if let Some(transfer) = heard.transfer {
            self.store.transfer_milestone(node, &transfer).await?;
        }
        if let Some(digest) = heard.pinned {
            // Beside the token's hash, so a restart keeps the pin (and a flow's end wipes both).
            self.store
                .update_node(node, |b| {
                    b.driver_internal_info
                        .insert(AGENT_CA_SHA256.into(), digest.as_str().into());
                    Ok(())
                })
                .await?;
        }
        let Some(touched) = touched else {
            return Ok(());
        };
        if !matches!(
            touched.provision.state,
            ProvisionState::WaitCallBack | ProvisionState::CleanWait | ProvisionState::RescueWait
        ) {
            return Ok(());
        }
        self.spawn(reserved?, Step::Heartbeat(Box::new(touched)));
        Ok(())
    }

    /// Only drivers whose agent writes the image write a config drive (after it, on a
    /// partition at the end of the disk); any other is refused rather than deployed
    /// without the instance's hostname, keys and network.
    async fn check_config_drive_writer(&self, node: &Node) -> Result<(), ConductorError> {
        use crate::driver_host::capability::bindings::Family;
        let driver = self
            .driver_for(node)
            .await
            .map_err(|e| ConductorError::Invalid(e.to_string()))?;
        match driver.description.family {
            Family::Agent => Ok(()),
            _ => Err(ConductorError::Invalid(format!(
                "Node {} cannot be deployed with a config drive: its driver {} does not write one (the agent_* drivers do), so the deploy is refused rather than run without it.",
                node.uuid(),
                driver.description.name
            ))),
        }
    }

    /// Makes a local `image_source` downloadable for this deploy (see [`crate::images`]),
    /// on the record as it is under the node's lock.
    async fn stage_image(&self, node: &Node) -> Result<(), ConductorError> {
        let Some(images) = self.images.as_ref() else {
            return Ok(());
        };
        let uuid = node.uuid();
        if !images.needs_staging(uuid, &node.body.instance_info) {
            return Ok(());
        }
        self.store
            .edit_node(uuid, |_, b| {
                images
                    .stage(uuid, &mut b.instance_info, &mut b.driver_internal_info)
                    .map_err(ConductorError::Invalid)
            })
            .await?;
        Ok(())
    }

    /// An operator's change to a node's record (`PATCH`). It holds the node's claim, so
    /// no flow step starts or writes meanwhile, and `change` sees the record as it is
    /// under the node's lock, so nothing written since an earlier read is undone.
    pub async fn edit<E: EditError>(
        &self,
        node: Uuid,
        change: impl NodeChange<E>,
    ) -> Result<Node, E> {
        let claim = self.claim_for_operator(node, "update").await;
        self.edit_claimed(claim?, change).await
    }

    /// [`Conductor::edit`] that does not wait: a busy node is refused at once (the
    /// allocator waits for it outside its search lock, then tries again).
    pub async fn edit_if_free<E: EditError>(
        &self,
        node: Uuid,
        change: impl NodeChange<E>,
    ) -> Result<Node, E> {
        self.edit_claimed(self.claim(node, "update").await?, change)
            .await
    }

    async fn edit_claimed<E: EditError>(
        &self,
        claim: Claim,
        change: impl NodeChange<E>,
    ) -> Result<Node, E> {
        self.store.edit_node(claim.node(), change).await
    }

    /// [`Conductor::edit`] for a change that reads other records (a parent node, a chassis)
    /// as it is computed: `compute` makes the new body from a copy of the node, off the
    /// store's lock, and it is written only if the node is still as it was read (compare
    /// and swap); a node that changed meanwhile (a token issued, a timeout) is read and
    /// the body computed again.
    pub async fn edit_reading<E: EditError, F: Future<Output = Result<NodeBody, E>>>(
        &self,
        node: Uuid,
        compute: impl Fn(Node) -> F,
    ) -> Result<Node, E> {
        let _claim = self.claim_for_operator(node, "update").await?;
        for _ in 0..RECOMPUTE {
            let read = self.store.node(node).await?;
            let body = compute(read.clone()).await?;
            let written = self
                .store
                .edit_node(node, |p, current| {
                    if p.state != read.provision.state || *current != read.body {
                        return Err(StoreError::Changed(format!("node {node}")));
                    }
                    *current = body.clone();
                    Ok(())
                })
                .await;
            match written {
                Err(StoreError::Changed(_)) => continue,
                written => return Ok(written?),
            }
        }
        Err(StoreError::Changed(format!("node {node}")).into())
    }

    /// The driver version a node's flow uses: the pinned one if any (fetched from the
    /// shared store when another engine started the flow on a version this one has not
    /// loaded), else the active one.
    pub async fn driver_for(&self, node: &Node) -> Result<Arc<LoadedDriver>, PluginError> {
        match node
            .body
            .driver_internal_info
            .get(DRIVER_HASH)
            .and_then(Value::as_str)
        {
            Some(hash) => crate::driver_host::kept::pinned(&self.store, &self.registry, hash)
                .await
                .ok_or_else(|| {
                    PluginError::NotLoaded(format!(
                        "{} (version {hash}, which this node started with)",
                        node.body.driver
                    ))
                }),
            None => self
                .component(&node.body)
                .ok_or_else(|| PluginError::NotLoaded(node.body.driver.clone())),
        }
    }

    /// The active version of the component that runs a node's flows, chosen by its
    /// hardware type and interfaces (see [`crate::hardware`]).
    pub fn component(&self, body: &crate::node::NodeBody) -> Option<Arc<LoadedDriver>> {
        let name = self.hardware().component(&body.driver, &body.interfaces)?;
        self.registry.get(&name)
    }

    /// Starts (`Some(hash)`: the driver version to pin) or ends (`None`) a node's flow.
    /// Either way the agent token of the previous boot is wiped, as Ironic's
    /// `wipe_token_and_url` does: the next boot of the ramdisk looks up afresh.
    /// A flow's end also ends its image staging: the staged url stops being served.
    async fn pin(&self, node: Uuid, hash: Option<&str>) -> Result<(), StoreError> {
        let current = self.store.node(node).await?;
        let info = &current.body.driver_internal_info;
        let pinned = info.get(DRIVER_HASH).and_then(Value::as_str);
        let staged = hash.is_none() && info.contains_key(STAGED_TOKEN);
        let steps = hash.is_none() && info.contains_key(CLEAN_STEPS);
        if pinned == hash && !info.contains_key(AGENT_TOKEN_HASH) && !staged && !steps {
            return Ok(());
        }
        self.store
            .update_node(node, |b| {
                match hash {
                    Some(h) => b.driver_internal_info.insert(DRIVER_HASH.into(), h.into()),
                    None => b.driver_internal_info.remove(DRIVER_HASH),
                };
                b.driver_internal_info.remove(AGENT_TOKEN_HASH);
                b.driver_internal_info.remove(AGENT_CA_SHA256);
                if hash.is_none() {
                    b.driver_internal_info.remove(CLEAN_STEPS);
                }
                if let (None, Some(images)) = (hash, self.images.as_ref()) {
                    images.unstage(node, &mut b.instance_info, &mut b.driver_internal_info);
                }
                Ok(())
            })
            .await?;
        Ok(())
    }

    /// Carries out an operator's power action through the node's driver's BMC backend.
    pub async fn power(
        self: &Arc<Self>,
        node: Uuid,
        action: PowerAction,
    ) -> Result<(), ConductorError> {
        let record = self.store.node(node).await?;
        let driver = self
            .driver_for(&record)
            .await
            .map_err(|_| ConductorError::NoDriver(record.body.driver.clone()))?;
        let claim = self.claim_for_operator(node, "power").await?;
        let target = match action {
            PowerAction::Off => "power off",
            PowerAction::On | PowerAction::Reboot => "power on",
        };
        self.store
            .update_node(node, |b| {
                b.target_power_state = Some(target.into());
                Ok(())
            })
            .await?;
        let me = self.clone();
        tokio::spawn(async move {
            let services = me.registry.services().clone();
            if let Err(e) = bmc::act(&services, node, &driver.description.power, action).await {
                let _ = me
                    .store
                    .update_node(node, |b| {
                        b.target_power_state = None;
                        b.last_error =
                            Some(format!("Failed to change power state to \"{target}\": {e}"));
                        Ok(())
                    })
                    .await;
            }
            drop(claim);
        });
        Ok(())
    }

    /// Validates a node for its driver: (power/management, deploy).
    pub async fn validate(&self, node: &Node) -> (Result<(), String>, Result<(), String>) {
        let driver = match self.driver_for(node).await {
            Ok(d) => d,
            Err(e) => return (Err(e.to_string()), Err(e.to_string())),
        };
        let services = self.registry.services().clone();
        let power = bmc::check(&services, node.uuid(), &driver.description.power).await;
        let deploy = match self
            .registry
            .call(&driver, node.uuid(), Export::Validate)
            .await
        {
            Ok(Reply::Valid(r)) => r,
            Ok(other) => Err(format!("driver answered validate with {other:?}")),
            Err(e) => Err(e.to_string()),
        };
        (power, deploy)
    }

    /// How many nodes are mid-flow on a driver (pinned to one of its versions).
    pub async fn nodes_pinned_to(&self, name: &str) -> Result<usize, StoreError> {
        let mut count = 0;
        let mut marker = None;
        loop {
            let page = self.store.list_nodes(marker, 1000).await?;
            let Some(last) = page.last() else {
                return Ok(count);
            };
            marker = Some(last.uuid());
            count += page
                .iter()
                .filter(|n| {
                    let hash = n
                        .body
                        .driver_internal_info
                        .get(DRIVER_HASH)
                        .and_then(Value::as_str);
                    hash.and_then(|h| self.registry.version(h))
                        .is_some_and(|d| d.description.name == name)
                })
                .count();
        }
    }
}

impl Verb {
    /// What a reservation taken for this verb says it is doing.
    fn operation(self) -> &'static str {
        match self {
            Verb::Manage => "manage",
            Verb::Provide => "provide",
            Verb::Deploy => "deploy",
            Verb::Rebuild => "rebuild",
            Verb::Undeploy => "undeploy",
            Verb::Clean => "clean",
            Verb::Abort => "abort",
        }
    }
}

/// Why no component runs a node's flows: its type is not loaded, its deploy interface is
/// one deployd does not perform, or no component of its family drives its power.
fn no_component(body: &crate::node::NodeBody) -> ConductorError {
    let iface = |k: &str| body.interfaces.get(k).map_or("", String::as_str);
    let (deploy, power) = (iface("deploy"), iface("power"));
    match deploy {
        "ramdisk" | "bootc" => ConductorError::Invalid(format!(
            "The {deploy} deploy interface is not supported by deployd; use direct, autodetect, iscsi or fake."
        )),
        "" => ConductorError::NoDriver(body.driver.clone()),
        _ => ConductorError::Invalid(format!(
            "No loaded component runs deploy interface {deploy} with power interface {power} (hardware type {}).",
            body.driver
        )),
    }
}
