//! `deployd:driver/image`: the engine streams an image onto the disk a node's agent
//! exposes (the pxe family).
//!
//! A write is a background job per node: bytes go from the image url to the agent's disk
//! url without being held in memory, hashed on the way, and the node is touched at least
//! once a second while they flow — so a long write keeps the node alive by itself, and a
//! write whose node left its wait state (timed out, aborted) stops.
//!
//! The job runs in the engine that started it, and is recorded in the store (a document
//! of kind [`IMAGE_WRITE`]: the engine and the epoch it runs under, its bytes done, each
//! second) so that every engine sharing the store answers the driver alike: a heartbeat
//! that reaches another engine sees the write going on there, not none (and so does not
//! start it again: two engines writing one disk). A write whose engine died, or was
//! declared dead, or restarted, is no one's: the next heartbeat's driver starts it again
//! wherever it lands. An engine unsure of its lease stops writing (it may have been
//! declared dead, and a survivor may write instead).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use tokio::time::Instant;
use uuid::Uuid;

use super::bindings::deployd::driver::image::{Host, WriteProgress};
use super::{CapabilityError, HostState, Services};
use crate::store::documents::Doc;
use crate::store::{Store, StoreError};
use deployd_wire::checksum::Hasher;

const TOUCH_EVERY: Duration = Duration::from_secs(1);

/// The document kind a node's image write is recorded as (its uuid is the node's); it
/// goes with the node.
pub const IMAGE_WRITE: &str = "image_write";

#[derive(Clone)]
enum Job {
    Running(Arc<AtomicU64>),
    Done(u64),
    Failed(String),
}

/// The image writes the engine runs, by node.
pub struct ImageJobs {
    jobs: Mutex<HashMap<Uuid, Job>>,
    /// No overall timeout (an image takes what it takes); connecting must be quick.
    http: reqwest::Client,
}

impl Default for ImageJobs {
    fn default() -> Self {
        ImageJobs {
            jobs: Mutex::default(),
            http: reqwest::Client::builder()
                .connect_timeout(Duration::from_secs(10))
                .build()
                .expect("an HTTP client"),
        }
    }
}

impl ImageJobs {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Uuid, Job>> {
        self.jobs.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// This engine's write for `node`, else the one the store records (another engine's).
    pub async fn progress(&self, store: &Store, node: Uuid) -> WriteProgress {
        let here = match self.lock().get(&node) {
            None => None,
            Some(Job::Running(bytes)) => {
                Some(WriteProgress::Running(bytes.load(Ordering::Relaxed)))
            }
            Some(Job::Done(bytes)) => Some(WriteProgress::Done(*bytes)),
            Some(Job::Failed(e)) => Some(WriteProgress::Failed(e.clone())),
        };
        match here {
            Some(progress) => progress,
            None => recorded(store, node).await,
        }
    }

    fn finish(&self, node: Uuid, result: Result<u64, Stopped>) {
        let job = match result {
            Ok(bytes) => Job::Done(bytes),
            Err(Stopped::Failed(e)) => Job::Failed(e),
            Err(Stopped::Abandoned(_)) => {
                self.lock().remove(&node);
                return;
            }
        };
        self.lock().insert(node, job);
    }
}

/// Why a write ended before its last byte.
enum Stopped {
    Failed(String),
    /// This engine may no longer act on the node (unsure of its lease): the write is no
    /// one's, for the next heartbeat to start again wherever it lands.
    Abandoned(String),
}

impl From<String> for Stopped {
    fn from(e: String) -> Self {
        Stopped::Failed(e)
    }
}

/// What a write is, in the store's record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
enum State {
    Running,
    Done,
    Failed,
    /// Its engine stopped it, unsure of its lease.
    Abandoned,
}

/// The store's record of a node's image write.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Record {
    node_uuid: Uuid,
    /// The engine writing (its conductor name) and the epoch it started under.
    engine: String,
    epoch: i64,
    state: State,
    bytes: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

impl Record {
    fn new(store: &Store, node: Uuid, epoch: i64, state: State, bytes: u64) -> Record {
        Record {
            node_uuid: node,
            engine: store.conductor_name().to_owned(),
            epoch,
            state,
            bytes,
            error: None,
        }
    }

    fn doc(&self) -> Doc {
        match serde_json::to_value(self) {
            Ok(serde_json::Value::Object(doc)) => doc,
            _ => unreachable!("a record serialises to an object"),
        }
    }

    /// Records a write started: whatever was recorded before is over.
    async fn put(&self, store: &Store) -> Result<(), StoreError> {
        store
            .put_document(IMAGE_WRITE, self.node_uuid, &self.doc())
            .await
    }

    /// Records how the write goes on, while the record is still of this write (the same
    /// engine and epoch): a write a survivor started since is not overwritten.
    async fn update(&self, store: &Store) -> Result<(), StoreError> {
        let doc = self.doc();
        let changed = store
            .update_document(IMAGE_WRITE, self.node_uuid, &[], |d: &mut Doc| {
                if d.get("engine") != doc.get("engine") || d.get("epoch") != doc.get("epoch") {
                    return Err(StoreError::Changed(format!(
                        "the image write of node {}",
                        self.node_uuid
                    )));
                }
                d.clone_from(&doc);
                Ok(())
            })
            .await;
        match changed {
            Err(StoreError::Changed(_) | StoreError::DocumentNotFound { .. }) => Ok(()),
            other => other.map(drop),
        }
    }

    /// [`Record::update`] of a write's end, tried until the store takes it (for a while):
    /// until then other engines see the write running.
    async fn update_end(&self, store: &Store) {
        for _ in 0..END_TRIES {
            match self.update(store).await {
                Ok(()) => return,
                Err(e) => {
                    tracing::warn!(node = %self.node_uuid, "could not record the image write's end; trying again: {e}");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        }
    }
}

/// How many times a write's end is offered to the store, a second apart.
const END_TRIES: u32 = 60;

/// The write the store records for `node`, as the driver sees it: another live engine's
/// running write goes on; one whose engine is gone (or is this one, which no longer runs
/// it) is none, to be started again.
async fn recorded(store: &Store, node: Uuid) -> WriteProgress {
    let record = match store.document(IMAGE_WRITE, node).await {
        Ok(doc) => serde_json::from_value::<Record>(serde_json::Value::Object(doc)),
        Err(StoreError::DocumentNotFound { .. }) => return WriteProgress::None,
        Err(e) => {
            // Not known now: the driver waits for the next heartbeat rather than start
            // a second write over one that may be running.
            tracing::warn!(%node, "cannot read the node's image write: {e}");
            return WriteProgress::Running(0);
        }
    };
    let record = match record {
        Ok(record) => record,
        Err(e) => {
            tracing::warn!(%node, "the node's image write record is unreadable: {e}");
            return WriteProgress::None;
        }
    };
    match record.state {
        State::Done => WriteProgress::Done(record.bytes),
        State::Failed => WriteProgress::Failed(record.error.unwrap_or_default()),
        State::Abandoned => WriteProgress::None,
        State::Running if record.engine == store.conductor_name() => WriteProgress::None,
        State::Running => match store.engines().await {
            Ok(engines) => {
                let alive = engines
                    .iter()
                    .any(|e| e.alive && e.hostname == record.engine && e.epoch == record.epoch);
                match alive {
                    true => WriteProgress::Running(record.bytes),
                    false => WriteProgress::None,
                }
            }
            Err(e) => {
                tracing::warn!(%node, "cannot tell whether the engine writing the node's image lives: {e}");
                WriteProgress::Running(record.bytes)
            }
        },
    }
}

/// `target` must be on the host the node's agent reported: a driver may write only to its
/// own node's disk.
fn check_target(
    services: &Services,
    node: Uuid,
    target: &str,
) -> Result<reqwest::Url, CapabilityError> {
    let invalid = CapabilityError::Invalid;
    let target = reqwest::Url::parse(target)
        .map_err(|e| invalid(format!("invalid target url {target:?}: {e}")))?;
    let agent = services
        .agents
        .read(node, |s| s.url.clone())
        .flatten()
        .ok_or_else(|| {
            CapabilityError::NotReady("the node's agent has not called back yet".into())
        })?;
    let agent = reqwest::Url::parse(agent.as_str())
        .map_err(|e| CapabilityError::Remote(format!("the agent sent an invalid url: {e}")))?;
    if target.host_str() != agent.host_str() || !matches!(target.scheme(), "http" | "https") {
        return Err(invalid(format!(
            "target {target} is not on the node's agent host {}",
            agent.host_str().unwrap_or("?")
        )));
    }
    Ok(target)
}

#[allow(clippy::too_many_arguments)]
async fn write(
    services: Arc<Services>,
    node: Uuid,
    epoch: i64,
    url: String,
    algo: String,
    expected: String,
    target: reqwest::Url,
    written: Arc<AtomicU64>,
) -> Result<u64, Stopped> {
    let agent = services.agent_client(node, target.as_str(), &services.images.http)?;
    let http = &services.images.http;
    let hasher = Arc::new(Mutex::new(Hasher::new(&algo)?));
    let source = http
        .get(&url)
        .send()
        .await
        .map_err(|e| format!("cannot fetch the image {url}: {e}"))?;
    if !source.status().is_success() {
        return Err(format!("fetching the image {url}: {}", source.status()).into());
    }
    let length = source.content_length();
    let mut last_touch = Instant::now();
    let (h, w, store) = (hasher.clone(), written.clone(), services.store.clone());
    let body = source.bytes_stream().then(move |chunk| {
        let due = last_touch.elapsed() >= TOUCH_EVERY;
        if due {
            last_touch = Instant::now();
        }
        let (h, w, store) = (h.clone(), w.clone(), store.clone());
        async move {
            let chunk = chunk.map_err(|e| Stopped::Failed(format!("reading the image: {e}")))?;
            h.lock().unwrap_or_else(|p| p.into_inner()).update(&chunk);
            let bytes = w.fetch_add(chunk.len() as u64, Ordering::Relaxed) + chunk.len() as u64;
            store.metrics().image_bytes.inc_by(chunk.len() as u64);
            if due {
                if store.acting_epoch() != Some(epoch) {
                    return Err(Stopped::Abandoned(format!(
                        "engine {} is no longer sure it acts under epoch {epoch}",
                        store.conductor_name()
                    )));
                }
                match store.touch_provisioning(node).await {
                    // A store that cannot write remembers the touch for when it can
                    // (`store::health`): the write goes on.
                    Ok(_) | Err(StoreError::Unavailable(_)) => {}
                    Err(e) => return Err(Stopped::Failed(format!("stopped writing: {e}"))),
                }
                let record = Record::new(&store, node, epoch, State::Running, bytes);
                if let Err(e) = record.update(&store).await {
                    tracing::warn!(%node, "could not record the image write's progress: {e}");
                }
            }
            Ok::<_, Stopped>(chunk)
        }
    });
    // The target's query holds the agent's token: never in a message.
    let mut shown = target.clone();
    shown.set_query(None);
    let mut put = agent.put(target.clone());
    if let Some(length) = length {
        // Lets the agent report progress as a fraction.
        put = put.header(reqwest::header::CONTENT_LENGTH, length);
    }
    // The stream's own reason to stop (abandoned, or the node gone) is kept aside: the
    // request's error only says the body failed.
    let stopped = Arc::new(Mutex::new(None));
    let kept = stopped.clone();
    let body = body.map(move |chunk| {
        chunk.map_err(|e| {
            let shown = match &e {
                Stopped::Failed(e) | Stopped::Abandoned(e) => e.clone(),
            };
            *kept.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
            shown
        })
    });
    let put = put.body(reqwest::Body::wrap_stream(body)).send().await;
    if let Some(stopped) = stopped.lock().unwrap_or_else(|p| p.into_inner()).take() {
        return Err(stopped);
    }
    let put = put.map_err(|e| {
        format!(
            "writing to the agent's disk at {shown}: {}",
            e.without_url()
        )
    })?;
    if !put.status().is_success() {
        return Err(format!("the agent's disk at {shown} answered {}", put.status()).into());
    }
    let hasher =
        Arc::try_unwrap(hasher).map_err(|_| "the image stream is still in use".to_owned())?;
    let actual = hasher.into_inner().unwrap_or_else(|p| p.into_inner()).hex();
    if !actual.eq_ignore_ascii_case(&expected) {
        return Err(Stopped::Failed(format!(
            "image checksum mismatch: expected {algo} {expected}, wrote {actual}; the disk is not usable"
        )));
    }
    Ok(written.load(Ordering::Relaxed))
}

impl ImageJobs {
    /// Starts writing the image at `url` onto the node's agent's disk at `target`, in the
    /// background; [`ImageJobs::progress`] follows it. One write per node at a time.
    pub async fn start(
        services: &Arc<Services>,
        node: Uuid,
        url: String,
        hash_algo: String,
        hash_value: String,
        target: &str,
    ) -> Result<(), CapabilityError> {
        let target = check_target(services, node, target)?;
        Hasher::new(&hash_algo).map_err(CapabilityError::Invalid)?;
        let store = &services.store;
        let epoch = store.acting_epoch().ok_or_else(|| {
            CapabilityError::NotReady(format!(
                "engine {} is not sure of its lease, so it starts no image write",
                store.conductor_name()
            ))
        })?;
        let written = Arc::new(AtomicU64::new(0));
        {
            let mut jobs = services.images.lock();
            if let Some(Job::Running(_)) = jobs.get(&node) {
                return Err(CapabilityError::NotReady(
                    "an image write is already running for this node".into(),
                ));
            }
            jobs.insert(node, Job::Running(written.clone()));
        }
        // Recorded before a byte flows: a heartbeat through another engine finds it.
        let recorded = Record::new(store, node, epoch, State::Running, 0)
            .put(store)
            .await;
        if let Err(e) = recorded {
            services.images.lock().remove(&node);
            return Err(CapabilityError::NotReady(format!(
                "the image write could not be recorded, so it was not started: {e}"
            )));
        }
        let (services, so_far) = (services.clone(), written.clone());
        tokio::spawn(async move {
            let result = write(
                services.clone(),
                node,
                epoch,
                url,
                hash_algo,
                hash_value,
                target,
                written,
            )
            .await;
            let mut record = Record::new(&services.store, node, epoch, State::Done, 0);
            match &result {
                Ok(bytes) => record.bytes = *bytes,
                Err(Stopped::Failed(e)) => {
                    tracing::warn!(%node, "image write failed: {e}");
                    (record.state, record.error) = (State::Failed, Some(e.clone()));
                }
                Err(Stopped::Abandoned(e)) => {
                    tracing::warn!(%node, "image write abandoned: {e}");
                    record.state = State::Abandoned;
                }
            }
            if result.is_err() {
                record.bytes = so_far.load(Ordering::Relaxed);
            }
            record.update_end(&services.store).await;
            services.images.finish(node, result);
        });
        Ok(())
    }
}

/// The driver's view: writes onto its own node's disk only.
impl Host for HostState {
    async fn start_write(
        &mut self,
        url: String,
        hash_algo: String,
        hash_value: String,
        target: String,
    ) -> Result<(), CapabilityError> {
        let (services, node) = (&self.services, self.node);
        ImageJobs::start(services, node, url, hash_algo, hash_value, &target).await
    }

    async fn progress(&mut self) -> wasmtime::Result<WriteProgress> {
        let services = &self.services;
        Ok(services.images.progress(&services.store, self.node).await)
    }
}
