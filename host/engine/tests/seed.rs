//! The bug deployd exists to get right: a healthy but long deploy must not be killed by the
//! callback timeout, a dead agent must still time out, and a timeout of 0 disables the
//! check. The sweeper runs as a real task on tokio's paused clock, so these run in
//! microseconds of real time and are exact.

use deployd_test_support as common;

use std::sync::Arc;

use common::store::*;
use deployd_engine::clock::Clock;
use deployd_engine::state_machine::{Expiry, ProvisionState, Timeouts};
use deployd_engine::store::progress_fingerprint;
use deployd_engine::sweeper::{Sweeper, SweeperConfig};
use tokio::time::sleep;

const SWEEP: SweeperConfig = SweeperConfig {
    check_interval: std::time::Duration::from_secs(1),
    batch: 1024,
};

#[tokio::test(start_paused = true)]
async fn a_node_touched_every_half_second_outlives_its_timeout_and_fails_once_touches_stop() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Clock::new();
    let (store, _) = open(&dir, Timeouts::uniform(secs(2.0)), &clock);
    let store = Arc::new(store);
    let hook = Recorder::new(&clock);
    let sweeper = Sweeper::spawn(store.clone(), SWEEP, hook.clone());
    let uuid = node_in_wait_call_back(&store).await;

    // 10 s of heartbeats, five times the timeout.
    for _ in 0..20 {
        sleep(secs(0.5)).await;
        store.touch_provisioning(uuid).await.unwrap();
    }
    assert_eq!(
        store.node(uuid).await.unwrap().state(),
        ProvisionState::WaitCallBack
    );
    assert!(
        hook.calls().is_empty(),
        "a heartbeating node was failed: {:?}",
        hook.calls()
    );
    let last_touch = clock.now();

    // The agent dies. Within timeout + one sweep the node is in deploy failed.
    sleep(secs(2.0 + 1.0)).await;
    let node = store.node(uuid).await.unwrap();
    assert_eq!(node.state(), ProvisionState::DeployFailed);
    assert_eq!(node.provision.target, Some(ProvisionState::Active));
    let failed_after = node.provision.updated_at.since(last_touch);
    assert!(
        failed_after >= secs(2.0) && failed_after <= secs(3.0),
        "failed {failed_after:?} after the last touch"
    );
    let error = node.body.last_error.unwrap();
    assert!(error.contains(&uuid.to_string()), "{error}");
    assert!(error.contains("deploy_callback_timeout is 2 s"), "{error}");
    assert!(error.contains("no callback for 2.0 s"), "{error}");

    let calls = hook.calls();
    assert_eq!(calls.len(), 1, "the clean-up hook runs once: {calls:?}");
    assert_eq!(
        (calls[0].1.node, calls[0].1.failed_to),
        (uuid, ProvisionState::DeployFailed)
    );

    // Nothing more happens to it, however long we wait.
    sleep(secs(600.0)).await;
    assert_eq!(hook.calls().len(), 1);
    assert!(
        store.touch_provisioning(uuid).await.is_err(),
        "a late heartbeat is refused"
    );
    sweeper.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_zero_timeout_never_fails_a_silent_node() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Clock::new();
    let timeouts = Timeouts {
        deploy_callback: secs(0.0),
        ..Timeouts::uniform(secs(2.0))
    };
    let (store, _) = open(&dir, timeouts, &clock);
    let store = Arc::new(store);
    let hook = Recorder::new(&clock);
    let sweeper = Sweeper::spawn(store.clone(), SWEEP, hook.clone());
    let uuid = node_in_wait_call_back(&store).await;
    assert_eq!(store.node(uuid).await.unwrap().provision.deadline, None);

    sleep(secs(24.0 * 3600.0)).await;
    assert_eq!(
        store.node(uuid).await.unwrap().state(),
        ProvisionState::WaitCallBack
    );
    assert!(hook.calls().is_empty());
    // Touching still moves the clock (the agent is alive; the operator just has no timeout).
    let before = store.node(uuid).await.unwrap().provision.updated_at;
    assert!(store.touch_provisioning(uuid).await.unwrap().updated_at > before);
    sweeper.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_new_earlier_deadline_wakes_a_sleeping_sweeper() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Clock::new();
    let (store, _) = open(&dir, Timeouts::uniform(secs(5.0)), &clock);
    let store = Arc::new(store);
    let hook = Recorder::new(&clock);
    // The safety-net interval is an hour: only the wake-up can make the sweeper act in time.
    let config = SweeperConfig {
        check_interval: secs(3600.0),
        ..SWEEP
    };
    let sweeper = Sweeper::spawn(store.clone(), config, hook.clone());
    sleep(secs(10.0)).await;
    let entered = clock.now();
    let uuid = node_in_wait_call_back(&store).await;

    sleep(secs(5.0)).await;
    // The pass runs on a blocking thread (which holds tokio's paused clock still): wait
    // for it on the wall clock.
    for _ in 0..1000 {
        if !hook.calls().is_empty() {
            break;
        }
        tokio::task::yield_now().await;
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    let calls = hook.calls();
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(calls[0].1.node, uuid);
    assert_eq!(
        calls[0].0.since(entered),
        secs(5.0),
        "failed exactly at its deadline"
    );
    sweeper.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_zero_check_interval_turns_the_sweeper_off() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Clock::new();
    let (store, _) = open(&dir, Timeouts::uniform(secs(1.0)), &clock);
    let store = Arc::new(store);
    let hook = Recorder::new(&clock);
    let config = SweeperConfig {
        check_interval: secs(0.0),
        ..SWEEP
    };
    let sweeper = Sweeper::spawn(store.clone(), config, hook.clone());
    let uuid = node_in_wait_call_back(&store).await;
    sleep(secs(60.0)).await;
    assert_eq!(
        store.node(uuid).await.unwrap().state(),
        ProvisionState::WaitCallBack
    );
    assert!(hook.calls().is_empty());
    sweeper.shutdown().await;
}

/// The flip side of the seed fix: an agent that is alive but stuck heartbeats forever. With
/// a stall timeout, its node fails once its reports stop changing, and only then.
#[tokio::test(start_paused = true)]
async fn an_agent_that_heartbeats_without_progress_fails_at_the_stall_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Clock::new();
    let timeouts = Timeouts {
        deploy_stall: secs(5.0),
        ..Timeouts::uniform(secs(2.0))
    };
    let (store, _) = open(&dir, timeouts, &clock);
    let store = Arc::new(store);
    let hook = Recorder::new(&clock);
    let sweeper = Sweeper::spawn(store.clone(), SWEEP, hook.clone());
    let moving = node_in_wait_call_back(&store).await;
    let stuck = node_in_wait_call_back(&store).await;
    let report = |bytes: u64| {
        Some(progress_fingerprint([
            format!("{bytes} bytes written").as_bytes()
        ]))
    };

    // 30 s, six stall timeouts: one agent's bytes grow, the other's stop at 3 MiB after 2 s.
    let mut last_progress = clock.now();
    for i in 1..=60u64 {
        sleep(secs(0.5)).await;
        store.touch(moving, report(i << 20)).await.unwrap();
        if store.node(stuck).await.unwrap().state() == ProvisionState::WaitCallBack {
            if i <= 6 {
                last_progress = clock.now();
            }
            store.touch(stuck, report(i.min(6) << 19)).await.unwrap();
        }
    }
    assert_eq!(
        store.node(moving).await.unwrap().state(),
        ProvisionState::WaitCallBack
    );
    let node = store.node(stuck).await.unwrap();
    assert_eq!(node.state(), ProvisionState::DeployFailed);
    // Failed the stall timeout after its last progress (plus at most one sweep), though it
    // heartbeat all along.
    let stalled = node.provision.updated_at.since(last_progress);
    assert!(stalled >= secs(5.0) && stalled <= secs(6.0), "{stalled:?}");
    let error = node.body.last_error.unwrap();
    assert!(error.starts_with("Stalled:"), "{error}");
    assert!(error.contains("deploy_stall_timeout is 5 s"), "{error}");
    assert!(error.contains("no progress for 5."), "{error}");
    let calls = hook.calls();
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(calls[0].1.expiry, Expiry::Stall);

    // Heartbeats that report nothing are not progress: the stall timeout runs from the
    // state's start (the real IPA's progress comes from its command list instead).
    let silent = node_in_wait_call_back(&store).await;
    let entered = clock.now();
    while store.touch(silent, None).await.is_ok() {
        sleep(secs(0.5)).await;
    }
    let node = store.node(silent).await.unwrap();
    assert_eq!(node.state(), ProvisionState::DeployFailed);
    let stalled = node.provision.updated_at.since(entered);
    assert!(stalled >= secs(5.0) && stalled <= secs(6.0), "{stalled:?}");
    sweeper.shutdown().await;
}
