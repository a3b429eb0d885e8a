//! The contract on what moves a deadline besides a heartbeat, and on sweeping at a chosen
//! time, both backends.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use super::{CALLBACK, Fixture, Postgres, Sled, walked};
use deployd_engine::clock::Timestamp;
use deployd_engine::state_machine::{ProvisionState, Timeouts};
use deployd_engine::store::StoreError;
use deployd_test_support::store::{TO_WAIT_CALL_BACK, fake_node};
use uuid::Uuid;

/// Progress a driver sees in its agent's command list restarts the stall clock and moves
/// the deadline with it, but is not a heartbeat: `provision_updated_at` stays. The same
/// mark again, or a node that does not wait, records nothing.
async fn progress_seen_by_a_driver_restarts_the_stall_clock_only<F: Fixture>() {
    let stall = Duration::from_secs(600);
    let f = F::open(Timeouts {
        deploy_stall: stall,
        ..Timeouts::uniform(CALLBACK)
    })
    .await;
    let store = f.store();
    let node = walked(store, &TO_WAIT_CALL_BACK).await;
    let before = store.touch(node, Some(1)).await.unwrap().provision;
    f.age(&[node], stall - Duration::from_secs(1));
    let aged = store.node(node).await.unwrap().provision;
    assert!(store.report_progress(node, 2).await.unwrap());
    let after = store.node(node).await.unwrap().provision;
    assert_eq!(after.updated_at, aged.updated_at, "not a touch");
    assert_eq!(after.progress, 2);
    assert!(after.progress_at > aged.progress_at);
    assert_eq!(after.deadline, Some(after.progress_at.plus(stall)));
    assert_ne!(before.deadline, after.deadline);
    assert!(
        !store.report_progress(node, 2).await.unwrap(),
        "the same mark"
    );
    assert_eq!(store.node(node).await.unwrap().provision, after);
    // A sweep now finds nothing stalled: the deadline moved.
    f.age(&[node], Duration::from_secs(2));
    assert!(store.sweep(10, &|_| None).await.unwrap().is_empty());

    let idle = store.create_node(fake_node()).await.unwrap().uuid();
    assert!(!store.report_progress(idle, 7).await.unwrap());
    assert_eq!(store.node(idle).await.unwrap().provision.progress, 0);
    let missing = store.report_progress(Uuid::new_v4(), 7).await;
    assert!(
        matches!(missing, Err(StoreError::NodeNotFound(_))),
        "{missing:?}"
    );
}

/// A sweep at a chosen time fails what is due by then, and nothing due later.
async fn a_sweep_at_a_chosen_time_fails_what_is_due_by_then<F: Fixture>() {
    let f = F::open(Timeouts::uniform(CALLBACK)).await;
    let store = f.store();
    let node = walked(store, &TO_WAIT_CALL_BACK).await;
    let deadline = store.node(node).await.unwrap().provision.deadline.unwrap();
    let a_second_before = Timestamp::from_micros(deadline.as_micros() - 1_000_000);
    let before = store.fail_expired(a_second_before, 10).await.unwrap();
    assert!(before.is_empty(), "{before:?}");
    let failed = store.fail_expired(deadline, 10).await.unwrap();
    assert_eq!(failed.iter().map(|t| t.node).collect::<Vec<_>>(), [node]);
    assert_eq!(failed[0].failed_to, ProvisionState::DeployFailed);
    assert_eq!(
        store.node(node).await.unwrap().provision.state,
        ProvisionState::DeployFailed
    );
}

/// A sweeper asleep until later than a deadline just filed is woken by it (by this
/// engine's writers on sled, by the transition's `NOTIFY` on PostgreSQL), and is told
/// when it is due.
async fn a_sleeping_sweeper_is_woken_by_an_earlier_deadline<F: Fixture>() {
    let f = F::open(Timeouts::uniform(CALLBACK)).await;
    let store = f.shared();
    let mut filed = store.deadlines_filed().await.unwrap();
    assert_eq!(store.next_due().await.unwrap(), None);
    filed.sleeping(&store, CALLBACK * 2);
    let sleeper = tokio::spawn({
        let store = store.clone();
        async move { filed.next(&store).await }
    });
    let node = walked(&store, &TO_WAIT_CALL_BACK).await;
    tokio::time::timeout(Duration::from_secs(10), sleeper)
        .await
        .expect("the sweeper was woken")
        .unwrap();
    let (due, wait) = store.next_due().await.unwrap().unwrap();
    let p = store.node(node).await.unwrap().provision;
    assert_eq!(Some(due), p.indexed);
    assert!(
        wait <= CALLBACK && wait > CALLBACK - Duration::from_secs(60),
        "{wait:?}"
    );
}

/// Heartbeats and sweeps racing.
const RACES: usize = 4000;

/// A heartbeat and two sweeps at once on a node past its deadline, 4,000 times, each on a
/// task of its own: whatever the interleaving, an acknowledged touch means the node was not
/// failed, a refused one that it was failed exactly once, and no node is failed twice;
/// afterwards each waiting node has one entry in the sweeper's index, at or before its
/// deadline, and a failed one none.
async fn a_heartbeat_and_two_sweeps_never_both_win<F: Fixture>() {
    let f = F::open(Timeouts::uniform(CALLBACK)).await;
    let store = f.shared();
    let fleet = deployd_test_support::store::enrolled(&store, RACES).await;
    let (to_wait, enter) = TO_WAIT_CALL_BACK.split_at(TO_WAIT_CALL_BACK.len() - 1);
    for &event in to_wait {
        let walked = store
            .apply_events(fleet.iter().map(|&u| (u, event)))
            .await
            .unwrap();
        assert!(walked.iter().all(Result::is_ok));
    }
    // Node i enters wait call-back a microsecond after node i - 1 (on sled; at once on
    // the shared store, whose rows are made due one by one).
    let entered = store
        .apply_events(fleet.iter().map(|&u| {
            f.age(&[], Duration::from_micros(1));
            (u, enter[0])
        }))
        .await
        .unwrap();
    assert!(entered.iter().all(Result::is_ok));
    let (mut acked, mut refused, mut failed) = (HashSet::new(), HashSet::new(), Vec::new());
    for &node in &fleet {
        f.make_due(node).await;
        let start = Arc::new(tokio::sync::Barrier::new(3));
        let touch = tokio::spawn({
            let (store, start) = (store.clone(), start.clone());
            async move {
                start.wait().await;
                store.touch(node, None).await
            }
        });
        let sweeps: Vec<_> = (0..2)
            .map(|_| {
                let (store, start) = (store.clone(), start.clone());
                tokio::spawn(async move {
                    start.wait().await;
                    store.sweep(1, &|_| None).await
                })
            })
            .collect();
        for sweep in sweeps {
            failed.extend(sweep.await.unwrap().unwrap().into_iter().map(|t| t.node));
        }
        match touch.await.unwrap() {
            Ok(p) => {
                assert_eq!(p.state, ProvisionState::WaitCallBack);
                acked.insert(node);
            }
            Err(StoreError::NotWaiting { state, .. }) => {
                assert_eq!(state, ProvisionState::DeployFailed);
                refused.insert(node);
            }
            Err(e) => panic!("{node}: {e}"),
        }
    }
    // The entries the touches moved on are re-filed; nothing more is due.
    while !store.sweep(64, &|_| None).await.unwrap().is_empty() {}
    let failed_once: HashSet<Uuid> = failed.iter().copied().collect();
    assert_eq!(failed_once.len(), failed.len(), "a node was failed twice");
    assert!(
        acked.is_disjoint(&failed_once),
        "a node both acknowledged and failed"
    );
    assert_eq!(
        refused, failed_once,
        "a touch refused for a node not failed"
    );
    assert_eq!(acked.len() + refused.len(), RACES);
    println!("{} touches won, {} sweeps won", acked.len(), refused.len());
    let index = store.deadline_index().await.unwrap();
    for &node in &fleet {
        let p = store.node(node).await.unwrap().provision;
        let entries: Vec<_> = index.iter().filter(|(_, u)| *u == node).collect();
        if acked.contains(&node) {
            assert_eq!(p.state, ProvisionState::WaitCallBack);
            assert_eq!(entries.len(), 1, "{node}: {entries:?}");
            assert!(
                p.indexed.is_some() && p.indexed <= p.deadline,
                "{node}: {p:?}"
            );
        } else {
            assert_eq!(p.state, ProvisionState::DeployFailed);
            assert!(entries.is_empty(), "{node}: {entries:?}");
        }
    }
}

on_both_backends!(
    a_sleeping_sweeper_is_woken_by_an_earlier_deadline,
    a_heartbeat_and_two_sweeps_never_both_win,
    progress_seen_by_a_driver_restarts_the_stall_clock_only,
    a_sweep_at_a_chosen_time_fails_what_is_due_by_then,
);
