//! The heartbeat-driven timeout sweeper: fails nodes whose agent went silent.
//!
//! It sleeps until the earliest deadline in the store's index, and no longer than
//! `check_interval` (a safety net, like Ironic's `check_provision_state_interval`). A
//! writer that adds an earlier deadline wakes it. On waking it asks the store to fail what
//! has expired; the store re-checks each node under its lock, so a heartbeat that touched
//! a node first always wins. Each failed node is handed to a [`TimeoutHook`] (the driver's
//! clean-up), outside any lock.
//!
//! All waiting is on tokio's clock, so tests pause and advance time instead of sleeping.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::store::postgres::{Membership, SharedStore};
use crate::store::{Store, TimedOut};

/// What runs after the sweeper failed a node. It must not block: spawn long work.
pub trait TimeoutHook: Send + Sync + 'static {
    fn timed_out(&self, event: TimedOut);

    /// What the node's agent last said of its progress, quoted when a stall fails it.
    fn progress(&self, _node: uuid::Uuid) -> Option<String> {
        None
    }
}

/// How the sweeper runs.
#[derive(Clone, Copy, Debug)]
pub struct SweeperConfig {
    /// The longest the sweeper sleeps without looking (0 disables the sweeper entirely,
    /// as Ironic's `check_provision_state_interval = 0` does).
    pub check_interval: Duration,
    /// The most nodes failed per pass before the sweeper yields to other tasks.
    pub batch: usize,
}

impl Default for SweeperConfig {
    fn default() -> Self {
        SweeperConfig {
            check_interval: Duration::from_secs(60),
            batch: 1024,
        }
    }
}

/// A running sweeper. Dropping it stops the task.
pub struct Sweeper {
    stop: watch::Sender<bool>,
    task: Option<JoinHandle<()>>,
}

impl Sweeper {
    /// Starts the sweeper on the current tokio runtime. With a zero `check_interval` it
    /// does nothing and returns a handle to a finished task.
    pub fn spawn(store: Arc<Store>, config: SweeperConfig, hook: Arc<dyn TimeoutHook>) -> Sweeper {
        let (stop, stopped) = watch::channel(false);
        let task = (!config.check_interval.is_zero())
            .then(|| tokio::spawn(run(store, config, hook, stopped)));
        Sweeper { stop, task }
    }

    /// Starts this engine's sweeper of the shared store (PostgreSQL), beside every other
    /// engine's: each pass takes only the due nodes no other sweeper holds (see
    /// `store::postgres`), and a deadline any engine files wakes them all. An engine that
    /// is not sure of its lease sweeps nothing.
    pub fn spawn_shared(
        store: Arc<SharedStore>,
        membership: Arc<Membership>,
        config: SweeperConfig,
        hook: Arc<dyn TimeoutHook>,
    ) -> Sweeper {
        let (stop, stopped) = watch::channel(false);
        let task = (!config.check_interval.is_zero())
            .then(|| tokio::spawn(run_shared(store, membership, config, hook, stopped)));
        Sweeper { stop, task }
    }

    /// Stops the sweeper and waits for its current pass to end.
    pub async fn shutdown(mut self) {
        let _ = self.stop.send(true);
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for Sweeper {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

/// How often a sweeper paused by a degraded store looks again.
const DEGRADED_RECHECK: Duration = Duration::from_secs(1);

/// Hands a pass's failed nodes to the hook; whether the pass was full (more may be due).
fn hand_over(timed_out: Vec<TimedOut>, batch: usize, hook: &dyn TimeoutHook) -> bool {
    let full = timed_out.len() == batch;
    for event in timed_out {
        hook.timed_out(event);
    }
    full
}

async fn run(
    store: Arc<Store>,
    config: SweeperConfig,
    hook: Arc<dyn TimeoutHook>,
    mut stopped: watch::Receiver<bool>,
) {
    loop {
        // A store that cannot write cannot record a failure either, and it may be missing
        // heartbeats it could not record (see `store::health`): no node fails meanwhile.
        if store.health().is_degraded() {
            tokio::select! {
                _ = tokio::time::sleep(DEGRADED_RECHECK) => continue,
                _ = stopped.changed() => return,
            }
        }
        let now = store.clock().now();
        crate::metrics::Metrics::count(&store.metrics().sweeps, 1);
        // The pass is short (it stops at the first future deadline and fails at most
        // `batch` nodes); its flush waits for the disk off the async workers (see
        // `store::sled`'s `flush`).
        let describe = |node| hook.progress(node);
        let passed = match store.sweep(config.batch, &describe).await {
            Ok(timed_out) => {
                if hand_over(timed_out, config.batch, &*hook) {
                    tokio::task::yield_now().await;
                    continue;
                }
                true
            }
            Err(e) => {
                if !store.health().is_degraded() {
                    tracing::error!(error = %e, "sweeper pass failed; retrying after the check interval");
                }
                false
            }
        };
        // After a failed pass, wait the full interval rather than spin on a bad entry.
        let mut wake_at = now.plus(config.check_interval);
        if passed {
            match store.next_deadline().await {
                Ok(Some(next)) => wake_at = wake_at.min(next),
                Ok(None) => {}
                Err(e) => tracing::error!(error = %e, "sweeper could not read the deadline index"),
            }
        }
        // Publish, then re-read: a deadline added after the re-read wakes us via the waker.
        store.waker().sleep_until(wake_at);
        if let Ok(Some(next)) = store.next_deadline().await
            && next < wake_at
        {
            continue;
        }
        let sleep = wake_at.since(store.clock().now());
        tokio::select! {
            _ = tokio::time::sleep(sleep) => {}
            _ = store.waker().woken() => {}
            _ = stopped.changed() => return,
        }
        if *stopped.borrow() {
            return;
        }
    }
}

async fn run_shared(
    store: Arc<SharedStore>,
    membership: Arc<Membership>,
    config: SweeperConfig,
    hook: Arc<dyn TimeoutHook>,
    mut stopped: watch::Receiver<bool>,
) {
    // Listening starts before the first look at the index, so no deadline filed after
    // that look goes unheard.
    let mut listener = loop {
        match store.listen_deadlines().await {
            Ok(listener) => break listener,
            Err(e) => tracing::warn!(error = %e, "the sweeper cannot listen for deadlines yet"),
        }
        tokio::select! {
            _ = tokio::time::sleep(DEGRADED_RECHECK) => {}
            _ = stopped.changed() => return,
        }
    };
    loop {
        let mut wait = config.check_interval;
        if let Some(lease) = membership.current() {
            match store.fail_expired(config.batch as i64, Some(&lease)).await {
                Ok(timed_out) => {
                    if hand_over(timed_out, config.batch, &*hook) {
                        tokio::task::yield_now().await;
                        continue;
                    }
                    match store.next_due_in().await {
                        Ok(Some(due)) => wait = wait.min(due),
                        Ok(None) => {}
                        Err(e) => {
                            tracing::error!(error = %e, "sweeper could not read the due index")
                        }
                    }
                }
                Err(e) => {
                    tracing::error!(error = %e, "sweeper pass failed; retrying after the check interval")
                }
            }
        } else {
            wait = wait.min(DEGRADED_RECHECK);
        }
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            filed = listener.next() => {
                if filed.is_none() {
                    tracing::warn!("the sweeper's deadline listener closed; listening again");
                    match store.listen_deadlines().await {
                        Ok(l) => listener = l,
                        Err(_) => tokio::time::sleep(DEGRADED_RECHECK).await,
                    }
                }
            }
            _ = stopped.changed() => return,
        }
        if *stopped.borrow() {
            return;
        }
    }
}
