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

use crate::store::{Store, StoreError, TimedOut};

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
    // Listening starts before the first look at the index, so no deadline filed after
    // that look goes unheard.
    let mut filed = loop {
        match store.deadlines_filed().await {
            Ok(filed) => break filed,
            Err(e) => tracing::warn!(error = %e, "the sweeper cannot listen for deadlines yet"),
        }
        tokio::select! {
            _ = tokio::time::sleep(DEGRADED_RECHECK) => {}
            _ = stopped.changed() => return,
        }
    };
    loop {
        // A store that cannot write cannot record a failure either, and it may be missing
        // heartbeats it could not record (see `store::health`): no node fails meanwhile.
        if store.health().is_degraded() {
            tokio::select! {
                _ = tokio::time::sleep(DEGRADED_RECHECK) => continue,
                _ = stopped.changed() => return,
            }
        }
        store.metrics().sweeps.inc();
        // The pass is short: it stops at the first future deadline and fails at most
        // `batch` nodes.
        let describe = |node| hook.progress(node);
        let mut wait = config.check_interval;
        // The deadline the sweeper sleeps towards; a re-read that finds an earlier one
        // (filed meanwhile) sweeps again instead of sleeping.
        let mut towards = None;
        match store.sweep(config.batch, &describe).await {
            Ok(timed_out) => {
                if hand_over(timed_out, config.batch, &*hook) {
                    tokio::task::yield_now().await;
                    continue;
                }
                match store.next_due().await {
                    Ok(Some((deadline, due))) => {
                        wait = wait.min(due);
                        towards = Some(Some(deadline));
                    }
                    Ok(None) => towards = Some(None),
                    Err(e) => {
                        tracing::error!(error = %e, "sweeper could not read the deadline index")
                    }
                }
            }
            // An engine not sure of its lease sweeps nothing, and looks again soon.
            Err(StoreError::Fenced(_)) => wait = wait.min(DEGRADED_RECHECK),
            // After a failed pass, wait the full interval rather than spin on a bad entry.
            Err(e) => {
                if !store.health().is_degraded() {
                    tracing::error!(error = %e, "sweeper pass failed; retrying after the check interval");
                }
            }
        }
        // Publish, then read again: a deadline filed after this read wakes the sweeper.
        filed.sleeping(&store, wait);
        if let Some(before) = towards
            && let Ok(Some((now_first, _))) = store.next_due().await
            && before.is_none_or(|before| now_first < before)
        {
            continue;
        }
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = filed.next(&store) => {}
            _ = stopped.changed() => return,
        }
        if *stopped.borrow() {
            return;
        }
    }
}
