//! A heartbeat's touch and the sweeper landing on the same deadline, on real threads.
//!
//! Node *i* has the deadline `D + i µs`; in iteration *i* the manual clock reads exactly
//! that, one thread touches node *i* and two threads sweep, released together by a barrier.
//! Whatever the interleaving:
//! - a touch that succeeded means the node was not failed for that deadline;
//! - a touch that was refused means exactly one sweeper failed the node;
//! - no node is failed twice, and afterwards the index holds exactly one entry for every
//!   node still waiting, where its record says (at or before its deadline), and none for a
//!   failed one.

use deployd_test_support as common;

use std::collections::HashMap;
use std::sync::{Arc, Barrier, Mutex};
use std::time::Duration;

use common::store::*;
use deployd_engine::clock::Clock;
use deployd_engine::conductor::ConductorError;
use deployd_engine::node::Node;
use deployd_engine::state_machine::{Event, ProvisionState, Timeouts};
use deployd_engine::store::{Store, StoreError};
use serde_json::json;
use uuid::Uuid;

const ITERATIONS: usize = 4000;
const TIMEOUT: Duration = Duration::from_secs(10);

async fn fleet(store: &Store, clock: &Clock) -> Vec<Uuid> {
    let new = (0..ITERATIONS).map(|_| fake_node()).collect();
    let uuids: Vec<Uuid> = store
        .create_nodes(new)
        .await
        .unwrap()
        .into_iter()
        .map(|n| n.unwrap().uuid())
        .collect();
    for event in &TO_WAIT_CALL_BACK[..5] {
        assert!(
            store
                .apply_events(uuids.iter().map(|&u| (u, *event)))
                .await
                .unwrap()
                .iter()
                .all(Result::is_ok)
        );
    }
    // Node i enters wait call-back at T0 + i µs.
    let entered = store
        .apply_events(uuids.iter().enumerate().map(|(i, &u)| {
            if i > 0 {
                clock.advance(Duration::from_micros(1));
            }
            (u, Event::Wait)
        }))
        .await
        .unwrap();
    assert!(entered.iter().all(Result::is_ok));
    uuids
}

#[tokio::test]
async fn a_touch_and_two_sweeps_at_the_same_deadline_never_lose_a_live_node_or_fail_one_twice() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Clock::manual(T0);
    let (store, _) = open(&dir, Timeouts::uniform(TIMEOUT), &clock);
    let store = Arc::new(store);
    let uuids = Arc::new(fleet(&store, &clock).await);
    // Iteration 0 runs at node 0's deadline.
    clock.advance(TIMEOUT - Duration::from_micros(ITERATIONS as u64 - 1));
    assert_eq!(
        store.node(uuids[0]).await.unwrap().provision.deadline,
        Some(clock.now())
    );

    let barrier = Arc::new(Barrier::new(3));
    let touches = Arc::new(Mutex::new(Vec::new()));
    let failures = Arc::new(Mutex::new(Vec::new()));
    std::thread::scope(|s| {
        s.spawn(|| {
            for &uuid in uuids.iter() {
                barrier.wait();
                let result = at_once(store.touch_provisioning(uuid));
                touches.lock().unwrap().push((uuid, result));
                barrier.wait();
            }
        });
        for sweeper in 0..2 {
            let (barrier, store, clock, failures) = (&barrier, &store, &clock, &failures);
            s.spawn(move || {
                for _ in 0..ITERATIONS {
                    barrier.wait();
                    let failed = at_once(store.fail_expired(clock.now(), 16)).unwrap();
                    failures
                        .lock()
                        .unwrap()
                        .extend(failed.into_iter().map(|t| t.node));
                    barrier.wait();
                    // One thread moves the clock on to the next node's deadline; nobody
                    // passes the next barrier before it has.
                    if sweeper == 0 {
                        clock.advance(Duration::from_micros(1));
                    }
                }
            });
        }
    });

    let mut failed_count: HashMap<Uuid, usize> = HashMap::new();
    for uuid in failures.lock().unwrap().iter() {
        *failed_count.entry(*uuid).or_default() += 1;
    }
    let index: Vec<_> = store.deadline_index().await.unwrap();
    let (mut survived, mut timed_out) = (0, 0);
    let touches = std::mem::take(&mut *touches.lock().unwrap());
    for (uuid, touch) in touches.iter() {
        let node = store.node(*uuid).await.unwrap();
        let entries: Vec<_> = index
            .iter()
            .filter(|(_, u)| u == uuid)
            .map(|(d, _)| *d)
            .collect();
        match touch {
            Ok(p) => {
                survived += 1;
                assert_eq!(
                    failed_count.get(uuid),
                    None,
                    "node {uuid} was touched and still failed"
                );
                assert_eq!(node.state(), ProvisionState::WaitCallBack);
                let record = node.provision;
                assert_eq!(
                    (record.updated_at, record.deadline),
                    (p.updated_at, p.deadline)
                );
                let indexed = record.indexed.unwrap();
                assert_eq!(entries, vec![indexed], "node {uuid}: index {entries:?}");
                assert!(
                    indexed <= p.deadline.unwrap(),
                    "the entry is never after the deadline"
                );
            }
            Err(StoreError::NotWaiting {
                state: ProvisionState::DeployFailed,
                ..
            }) => {
                timed_out += 1;
                assert_eq!(failed_count.get(uuid), Some(&1), "node {uuid} failed once");
                assert_eq!(node.state(), ProvisionState::DeployFailed);
                assert!(
                    entries.is_empty(),
                    "a failed node keeps no deadline: {entries:?}"
                );
            }
            Err(e) => panic!("unexpected touch error: {e}"),
        }
    }
    assert_eq!(survived + timed_out, ITERATIONS);
    assert_eq!(
        failed_count.values().sum::<usize>(),
        timed_out,
        "no node failed twice or without its touch losing"
    );
    assert_eq!(index.len(), survived, "no stale entries left: {index:?}");
    println!("{survived} touches won, {timed_out} sweeps won");
}

/// A node's change computed off the store's lock, reading as it goes
/// (`Conductor::edit_reading`, as a `PATCH` that names a parent node does), against a write
/// made meanwhile without the node's claim (as a lookup issues an agent token): neither is
/// ever lost. The change is written only if the node is still as it was read, else computed
/// again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_computed_off_the_lock_never_loses_a_write_made_meanwhile() {
    let lab = common::lab::lab(Duration::from_secs(60)).await;
    let node = lab.store.create_node(fake_node()).await.unwrap().uuid();
    let computed = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    const EDITS: usize = 300;
    for i in 0..EDITS {
        let (conductor, counted) = (lab.conductor.clone(), computed.clone());
        let edit = tokio::spawn(async move {
            conductor
                .edit_reading(node, |n: Node| {
                    counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    async move {
                        // The other write often lands here, between the read and the write.
                        tokio::task::yield_now().await;
                        let mut body = n.body;
                        body.extra.insert(format!("edit-{i}"), json!(i));
                        Ok::<_, ConductorError>(body)
                    }
                })
                .await
        });
        let store = lab.store.clone();
        let write = tokio::spawn(async move {
            store
                .update_node(node, |b| {
                    b.driver_internal_info
                        .insert(format!("write-{i}"), json!(i));
                    Ok(())
                })
                .await
        });
        edit.await.unwrap().unwrap();
        write.await.unwrap().unwrap();
        let body = lab.store.node(node).await.unwrap().body;
        assert!(
            body.extra.contains_key(&format!("edit-{i}")),
            "edit {i} lost"
        );
        assert!(
            body.driver_internal_info
                .contains_key(&format!("write-{i}")),
            "write {i} lost under edit {i}"
        );
    }
    let computed = computed.load(std::sync::atomic::Ordering::Relaxed);
    println!("{EDITS} edits computed {computed} times");
}

/// A sled store's call, made on a thread of the race's own: sled answers at once, without
/// waiting on a runtime (one that had to wait would fail the test here).
fn at_once<T>(call: impl std::future::Future<Output = T>) -> T {
    futures_util::FutureExt::now_or_never(call).expect("a sled store answers at once")
}
