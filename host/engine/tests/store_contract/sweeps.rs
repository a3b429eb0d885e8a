//! The contract on what moves a deadline besides a heartbeat, and on sweeping at a chosen
//! time, both backends.

use std::time::Duration;

use super::{CALLBACK, Fixture, Postgres, Sled, walked};
use deployd_engine::clock::Timestamp;
use deployd_engine::state_machine::{ProvisionState, Timeouts};
use deployd_engine::store::StoreError;
use deployd_test_support::store::{TO_WAIT_CALL_BACK, fake_node};

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
    let missing = store.report_progress(uuid::Uuid::new_v4(), 7).await;
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

on_both_backends!(
    progress_seen_by_a_driver_restarts_the_stall_clock_only,
    a_sweep_at_a_chosen_time_fails_what_is_due_by_then,
);
