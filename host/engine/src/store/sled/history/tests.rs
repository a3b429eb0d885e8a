//! History on a real store: chunks fill and roll over, old ones are dropped, and events
//! recorded at once on one node all land.

use std::time::Duration;

use super::super::tests::{at_once, new_node, open};
use super::*;

#[tokio::test]
async fn a_node_keeps_its_last_events_in_a_few_chunks() {
    let dir = tempfile::tempdir().unwrap();
    let (store, clock) = open(&dir, 60);
    let node = store.create_node(new_node(None)).await.unwrap().uuid();
    for i in 0..1000 {
        clock.advance(Duration::from_millis(1));
        store.milestone(node, format!("m{i}")).await.unwrap();
    }
    let history = store.sled().history().unwrap();
    let events = history.list(node).unwrap();
    assert_eq!(events.len(), MAX_EVENTS);
    assert_eq!(events[0].event, "m700");
    assert_eq!(events.last().unwrap().event, "m999");
    assert!(
        events.windows(2).all(|w| w[0].created_at < w[1].created_at),
        "oldest first"
    );
    // Old chunks were dropped: what is kept is the shown events and at most one
    // pruning interval more, in a few keys.
    let stored = history.count().unwrap();
    assert!((300..=300 + 32 + 20).contains(&stored), "{stored}");
    let keys = history.tree.scan_prefix(node.as_bytes()).count();
    assert!(
        stored as usize / keys >= 8,
        "{stored} events in {keys} keys"
    );
    // Each event is found by its uuid.
    let one = &events[150];
    assert_eq!(&history.get(node, one.uuid).unwrap(), one);
    let gone = Uuid::from_u64_pair(1, 1);
    assert!(matches!(
        history.get(node, gone),
        Err(StoreError::DocumentNotFound { .. })
    ));
    // And they go with the node.
    history.forget(node).unwrap();
    assert_eq!(history.list(node).unwrap(), vec![]);
}

#[tokio::test]
async fn events_recorded_at_once_on_one_node_all_land() {
    for round in 0..20 {
        let dir = tempfile::tempdir().unwrap();
        let (store, _) = open(&dir, 60);
        let node = store.create_node(new_node(None)).await.unwrap().uuid();
        std::thread::scope(|s| {
            for writer in 0..4 {
                let store = &store;
                s.spawn(move || {
                    for i in 0..30 {
                        at_once(store.milestone(node, format!("{writer}.{i}"))).unwrap();
                    }
                });
            }
        });
        let mut seen: Vec<String> = store
            .sled()
            .history()
            .unwrap()
            .list(node)
            .unwrap()
            .into_iter()
            .map(|e| e.event)
            .collect();
        seen.sort();
        let mut expected: Vec<String> = (0..4)
            .flat_map(|w| (0..30).map(move |i| format!("{w}.{i}")))
            .collect();
        expected.sort();
        assert_eq!(seen, expected, "round {round}");
    }
}

#[tokio::test]
async fn a_damaged_chunk_is_an_error_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = open(&dir, 60);
    let node = store.create_node(new_node(None)).await.unwrap().uuid();
    store.milestone(node, "kept".into()).await.unwrap();
    let history = store.sled().history().unwrap();
    history
        .tree
        .insert(chunk_key(node, 0), &b"\x00\x01short"[..])
        .unwrap();
    let err = history.list(node).unwrap_err();
    assert!(matches!(err, StoreError::Corrupt(_)), "{err}");
    assert!(history.count().is_err());
    // Recording goes on (pruning included: every 32nd event engine-wide), so a transition
    // that moved the node never reports a failure for its history.
    for i in 0..40 {
        store.milestone(node, format!("after {i}")).await.unwrap();
    }
    // `store verify` names it as a problem instead of stopping at it.
    store.flush().unwrap();
    drop((history, store));
    let path = dir.path().join("store");
    let verified = super::super::verify::verify(&path, &Default::default()).unwrap();
    assert_eq!(verified.problems, 1, "{:?}", verified.found);
    assert!(
        verified.found[0].contains("history of node"),
        "{:?}",
        verified.found
    );
}
