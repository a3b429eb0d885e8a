//! `deployd:driver/image`: the engine streams an image onto the disk a node's agent
//! exposes (the pxe family).
//!
//! A write is a background job per node: bytes go from the image url to the agent's disk
//! url without being held in memory, hashed on the way, and the node is touched at least
//! once a second while they flow — so a long write keeps the node alive by itself, and a
//! write whose node left its wait state (timed out, aborted) stops.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use tokio::time::Instant;
use uuid::Uuid;

use super::bindings::deployd::driver::image::{Host, WriteProgress};
use super::{CapabilityError, HostState, Services};
use deployd_wire::checksum::Hasher;

const TOUCH_EVERY: Duration = Duration::from_secs(1);

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

    pub fn progress(&self, node: Uuid) -> WriteProgress {
        match self.lock().get(&node) {
            None => WriteProgress::None,
            Some(Job::Running(bytes)) => WriteProgress::Running(bytes.load(Ordering::Relaxed)),
            Some(Job::Done(bytes)) => WriteProgress::Done(*bytes),
            Some(Job::Failed(e)) => WriteProgress::Failed(e.clone()),
        }
    }

    fn finish(&self, node: Uuid, result: Result<u64, String>) {
        let job = match result {
            Ok(bytes) => Job::Done(bytes),
            Err(e) => Job::Failed(e),
        };
        self.lock().insert(node, job);
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

async fn write(
    services: Arc<Services>,
    node: Uuid,
    url: String,
    algo: String,
    expected: String,
    target: reqwest::Url,
    written: Arc<AtomicU64>,
) -> Result<u64, String> {
    let agent = services.agent_client(node, target.as_str(), &services.images.http)?;
    let http = &services.images.http;
    let hasher = Arc::new(Mutex::new(Hasher::new(&algo)?));
    let source = http
        .get(&url)
        .send()
        .await
        .map_err(|e| format!("cannot fetch the image {url}: {e}"))?;
    if !source.status().is_success() {
        return Err(format!("fetching the image {url}: {}", source.status()));
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
            let chunk = chunk.map_err(|e| format!("reading the image: {e}"))?;
            h.lock().unwrap_or_else(|p| p.into_inner()).update(&chunk);
            w.fetch_add(chunk.len() as u64, Ordering::Relaxed);
            store.metrics().image_bytes.inc_by(chunk.len() as u64);
            if due {
                match store.touch_provisioning(node).await {
                    // A store that cannot write remembers the touch for when it can
                    // (`store::health`): the write goes on.
                    Ok(_) | Err(crate::store::StoreError::Unavailable(_)) => {}
                    Err(e) => return Err(format!("stopped writing: {e}")),
                }
            }
            Ok::<_, String>(chunk)
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
    let put = put.body(reqwest::Body::wrap_stream(body)).send().await;
    let put = put.map_err(|e| {
        format!(
            "writing to the agent's disk at {shown}: {}",
            e.without_url()
        )
    })?;
    if !put.status().is_success() {
        return Err(format!(
            "the agent's disk at {shown} answered {}",
            put.status()
        ));
    }
    let hasher = Arc::try_unwrap(hasher).map_err(|_| "the image stream is still in use")?;
    let actual = hasher.into_inner().unwrap_or_else(|p| p.into_inner()).hex();
    if !actual.eq_ignore_ascii_case(&expected) {
        return Err(format!(
            "image checksum mismatch: expected {algo} {expected}, wrote {actual}; the disk is not usable"
        ));
    }
    Ok(written.load(Ordering::Relaxed))
}

impl ImageJobs {
    /// Starts writing the image at `url` onto the node's agent's disk at `target`, in the
    /// background; [`ImageJobs::progress`] follows it. One write per node at a time.
    pub fn start(
        services: &Arc<Services>,
        node: Uuid,
        url: String,
        hash_algo: String,
        hash_value: String,
        target: &str,
    ) -> Result<(), CapabilityError> {
        let target = check_target(services, node, target)?;
        Hasher::new(&hash_algo).map_err(CapabilityError::Invalid)?;
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
        let services = services.clone();
        tokio::spawn(async move {
            let result = write(
                services.clone(),
                node,
                url,
                hash_algo,
                hash_value,
                target,
                written,
            )
            .await;
            if let Err(e) = &result {
                tracing::warn!(%node, "image write failed: {e}");
            }
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
        ImageJobs::start(services, node, url, hash_algo, hash_value, &target)
    }

    async fn progress(&mut self) -> wasmtime::Result<WriteProgress> {
        Ok(self.services.images.progress(self.node))
    }
}
