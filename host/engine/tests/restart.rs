//! Restart: nodes in every provision state, the store dropped and reopened.
//! Every record is intact; wait states keep waiting on their persisted clocks; busy states
//! are failed with a `last_error` that says the engine restarted.

use deployd_test_support as common;

use std::collections::HashMap;
use std::time::Duration;

use common::store::*;
use deployd_engine::clock::Clock;
use deployd_engine::node::Node;
use deployd_engine::state_machine::{Event, ProvisionState, Timeouts};
use uuid::Uuid;

const TIMEOUT: Duration = Duration::from_secs(60);

#[tokio::test]
async fn nodes_in_every_state_survive_a_restart_and_busy_ones_are_failed() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Clock::manual(T0);
    let mut before: HashMap<Uuid, Node> = HashMap::new();
    {
        let (store, _) = open(&dir, Timeouts::uniform(TIMEOUT), &clock);
        for (state, path) in paths_to_every_state() {
            let mut new = fake_node();
            new.name = Some(format!("node-{}", state.as_str().replace(' ', "-")));
            new.driver_info.insert(
                "bmc".into(),
                serde_json::json!({"address": "127.0.0.1", "port": 623}),
            );
            let uuid = store.create_node(new).await.unwrap().uuid();
            store
                .create_port(
                    uuid,
                    &format!("52:54:00:00:00:{:02x}", before.len()),
                    Default::default(),
                )
                .await
                .unwrap();
            clock.advance(Duration::from_secs(1));
            for event in path {
                store.apply_event(uuid, event, None).await.unwrap();
            }
            let node = store.node(uuid).await.unwrap();
            assert_eq!(node.state(), state);
            before.insert(uuid, node);
        }
        // The store is dropped here, as a stopped engine's is.
    }
    clock.advance(Duration::from_secs(5));
    let restarted_at = clock.now();
    let (store, recovery) = open(&dir, Timeouts::uniform(TIMEOUT), &clock);

    assert_eq!(recovery.nodes, ProvisionState::ALL.len());
    assert_eq!(store.node_count().await.unwrap(), ProvisionState::ALL.len());
    let busy = ProvisionState::ALL.iter().filter(|s| s.is_busy()).count();
    assert_eq!(recovery.failed.len(), busy);
    assert_eq!(
        recovery.waiting, 5,
        "wait call-back, clean wait, service wait, rescue wait, inspect wait"
    );
    assert_eq!(recovery.stale_entries, 0);

    for (uuid, old) in &before {
        let now = store.node(*uuid).await.unwrap();
        assert_eq!(
            store
                .find_node(old.body.name.as_deref().unwrap())
                .await
                .unwrap()
                .uuid(),
            *uuid,
            "name index intact"
        );
        assert_eq!(
            store.ports_of(*uuid).await.unwrap().len(),
            1,
            "ports intact"
        );
        assert_eq!(now.body.driver_info, old.body.driver_info);
        let state = old.state();
        if state.is_busy() {
            let failed = state.next(Event::Fail).unwrap();
            assert_eq!(now.state(), failed, "{state}");
            assert_eq!(now.provision.updated_at, restarted_at);
            let error = now.body.last_error.as_deref().unwrap();
            assert!(
                error.contains("deployd restarted") && error.contains(&format!("\"{state}\"")),
                "{error}"
            );
            assert!(recovery.failed.contains(&(*uuid, state, failed)));
        } else {
            assert_eq!(now, *old, "{state} is untouched by a restart");
        }
    }

    // Wait states resume: their deadlines are in the index, and a touch still works where
    // heartbeats touch (not in inspect wait, bounded from its boot).
    let index = store.deadline_index().await.unwrap();
    assert_eq!(index.len(), 5);
    for (deadline, uuid) in index {
        let node = store.node(uuid).await.unwrap();
        assert!(node.state().wait_kind().is_some());
        assert_eq!(Some(deadline), node.provision.indexed);
        assert_eq!(node.provision.indexed, node.provision.deadline);
        match node.state().accepts_touch() {
            true => assert_eq!(
                store.touch_provisioning(uuid).await.unwrap().updated_at,
                restarted_at
            ),
            false => assert!(store.touch_provisioning(uuid).await.is_err()),
        }
    }
}

#[tokio::test]
async fn a_restart_with_a_changed_timeout_reschedules_waiting_nodes() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Clock::manual(T0);
    let uuid = {
        let (store, _) = open(&dir, Timeouts::uniform(TIMEOUT), &clock);
        node_in_wait_call_back(&store).await
    };
    // Restarted with the deploy timeout disabled: the node leaves the index.
    let disabled = Timeouts {
        deploy_callback: Duration::ZERO,
        ..Timeouts::uniform(TIMEOUT)
    };
    {
        let (store, recovery) = open(&dir, disabled, &clock);
        assert_eq!((recovery.rescheduled, recovery.waiting), (1, 0));
        assert!(store.deadline_index().await.unwrap().is_empty());
        clock.advance(Duration::from_secs(3600));
        assert!(
            store
                .fail_expired(clock.now(), 10)
                .await
                .unwrap()
                .is_empty()
        );
    }
    // Restarted with a short timeout: the persisted clock is an hour old, so the next
    // sweep fails it, with the silence measured from that clock.
    let (store, recovery) = open(&dir, Timeouts::uniform(Duration::from_secs(30)), &clock);
    assert_eq!(recovery.rescheduled, 1);
    let failed = store.fail_expired(clock.now(), 10).await.unwrap();
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0].node, uuid);
    assert_eq!(failed[0].silent_for, Duration::from_secs(3600));
}
