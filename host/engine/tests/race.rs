//! Two writers on one node, computed off the store's lock and written by compare and
//! swap. (The heartbeat-vs-sweeper race is the store contract's, on both backends:
//! `store_contract::sweeps`.)

use deployd_test_support as common;

use std::sync::Arc;
use std::time::Duration;

use common::store::*;
use deployd_engine::conductor::ConductorError;
use deployd_engine::node::Node;
use serde_json::json;

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
