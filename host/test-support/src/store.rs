//! A store in a temporary directory, nodes walked through the state machine, and a
//! timeout hook that records what the sweeper failed.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use deployd_engine::clock::{Clock, Timestamp};
use deployd_engine::node::NewNode;
use deployd_engine::state_machine::{Event, ProvisionState, Timeouts};
use deployd_engine::store::{Recovery, Store, StoreConfig, TimedOut};
use deployd_engine::sweeper::TimeoutHook;
use uuid::Uuid;

pub const T0: Timestamp = Timestamp::from_micros(1_800_000_000_000_000);

pub fn open(dir: &tempfile::TempDir, timeouts: Timeouts, clock: &Clock) -> (Store, Recovery) {
    Store::open(
        &dir.path().join("store"),
        &StoreConfig::default(),
        timeouts,
        clock.clone(),
    )
    .unwrap()
}

pub fn fake_node() -> NewNode {
    NewNode {
        driver: "fake".into(),
        ..Default::default()
    }
}

pub use deployd_engine::state_machine::ENROLL_TO_WAIT_CALL_BACK as TO_WAIT_CALL_BACK;

/// `n` nodes enrolled in one batch; their uuids in the store's order (sorted).
pub async fn enrolled(store: &Store, n: usize) -> Vec<Uuid> {
    let mut all: Vec<Uuid> = store
        .create_nodes((0..n).map(|_| fake_node()).collect())
        .await
        .unwrap()
        .into_iter()
        .map(|node| node.unwrap().uuid())
        .collect();
    all.sort();
    all
}

pub async fn node_in_wait_call_back(store: &Store) -> Uuid {
    let uuid = store.create_node(fake_node()).await.unwrap().uuid();
    for e in TO_WAIT_CALL_BACK {
        store.apply_event(uuid, e, None).await.unwrap();
    }
    uuid
}

/// The shortest event path from `enroll` to every state, found by walking the table.
pub fn paths_to_every_state() -> HashMap<ProvisionState, Vec<Event>> {
    let mut paths = HashMap::from([(ProvisionState::Enroll, vec![])]);
    let mut queue = VecDeque::from([ProvisionState::Enroll]);
    while let Some(state) = queue.pop_front() {
        for &event in Event::ALL {
            if let Ok(next) = state.next(event)
                && !paths.contains_key(&next)
            {
                let mut path = paths[&state].clone();
                path.push(event);
                paths.insert(next, path);
                queue.push_back(next);
            }
        }
    }
    assert_eq!(
        paths.len(),
        ProvisionState::ALL.len(),
        "every state is reachable from enroll"
    );
    paths
}

/// A timeout hook that remembers what it was given and when.
#[derive(Default)]
pub struct Recorder {
    pub calls: Mutex<Vec<(Timestamp, TimedOut)>>,
    pub clock: Mutex<Option<Clock>>,
}

impl Recorder {
    pub fn new(clock: &Clock) -> Arc<Recorder> {
        Arc::new(Recorder {
            calls: Mutex::default(),
            clock: Mutex::new(Some(clock.clone())),
        })
    }

    pub fn calls(&self) -> Vec<(Timestamp, TimedOut)> {
        self.calls.lock().unwrap().clone()
    }
}

impl TimeoutHook for Recorder {
    fn timed_out(&self, event: TimedOut) {
        let now = self
            .clock
            .lock()
            .unwrap()
            .as_ref()
            .map(Clock::now)
            .unwrap_or_default();
        self.calls.lock().unwrap().push((now, event));
    }
}

pub fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s)
}
