//! Allocations: a matching node taken once, and deletes racing the search.

use deployd_test_support as common;

use common::server::{Server, start};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

/// `count` available, powered-off `gold` nodes.
async fn gold_nodes(s: &Server, count: usize) -> Vec<String> {
    let mut nodes = Vec::new();
    for _ in 0..count {
        let n = s
            .node(json!({"driver": "fake-hardware", "resource_class": "gold"}))
            .await;
        s.walk(&n, &[("manage", "manageable"), ("provide", "available")])
            .await;
        let p = s
            .send(
                Method::PUT,
                &format!("/v1/nodes/{n}/states/power"),
                json!({"target": "power off"}),
            )
            .await;
        assert_eq!(p.status, StatusCode::ACCEPTED);
        nodes.push(n);
    }
    for n in &nodes {
        for _ in 0..200 {
            if s.get(&format!("/v1/nodes/{n}")).await.body["power_state"] == "power off" {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }
    nodes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allocations_take_a_matching_node_once() {
    let s = start(|_| {}).await;
    gold_nodes(&s, 3).await;
    // Four allocations for three nodes: three succeed on distinct nodes, one fails.
    let mut done = Vec::new();
    for i in 0..4 {
        let a = s
            .send(
                Method::POST,
                "/v1/allocations",
                json!({"resource_class": "gold", "name": format!("a{i}")}),
            )
            .await;
        assert_eq!(a.status, StatusCode::CREATED, "{:?}", a.body);
        assert_eq!(a.body["state"], "allocating");
        done.push(settled(&s, a.body["uuid"].as_str().unwrap()).await);
    }
    let taken: std::collections::BTreeSet<String> = done
        .iter()
        .filter(|a| a["state"] == "active")
        .map(|a| a["node_uuid"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(taken.len(), 3);
    let failed: Vec<&Value> = done.iter().filter(|a| a["state"] == "error").collect();
    assert_eq!(failed.len(), 1);
    assert!(failed[0]["last_error"].as_str().unwrap().contains("gold"));
    let first = &done.iter().find(|a| a["state"] == "active").unwrap();
    let node = first["node_uuid"].as_str().unwrap();
    assert_eq!(
        allocation_of(&s, node).await,
        (first["uuid"].clone(), first["uuid"].clone())
    );
    assert_eq!(
        s.get("/v1/allocations?state=error").await.body["allocations"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    // Deleting the allocation frees its node.
    assert_eq!(
        s.delete(&format!(
            "/v1/allocations/{}",
            first["uuid"].as_str().unwrap()
        ))
        .await
        .status,
        StatusCode::NO_CONTENT
    );
    assert_eq!(allocation_of(&s, node).await, (Value::Null, Value::Null));
    assert_eq!(
        s.at(Method::GET, "/v1/allocations", "1.51", None)
            .await
            .status,
        StatusCode::NOT_FOUND
    );
}

/// Ironic: a node whose `instance_uuid` is removed leaves its allocation, which is
/// deleted with it (its name free for another).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removing_a_node_s_instance_deletes_its_allocation() {
    let s = start(|_| {}).await;
    gold_nodes(&s, 1).await;
    let a = s
        .send(
            Method::POST,
            "/v1/allocations",
            json!({"resource_class": "gold", "name": "kept"}),
        )
        .await;
    let a = settled(&s, a.body["uuid"].as_str().unwrap()).await;
    assert_eq!(a["state"], "active", "{a}");
    let node = a["node_uuid"].as_str().unwrap();
    let patched = s
        .send(
            Method::PATCH,
            &format!("/v1/nodes/{node}"),
            json!([{"op": "remove", "path": "/instance_uuid"}]),
        )
        .await;
    assert_eq!(patched.status, StatusCode::OK, "{:?}", patched.body);
    assert_eq!(allocation_of(&s, node).await, (Value::Null, Value::Null));
    let gone = s
        .get(&format!("/v1/allocations/{}", a["uuid"].as_str().unwrap()))
        .await;
    assert_eq!(gone.status, StatusCode::NOT_FOUND, "{:?}", gone.body);
    let again = s
        .send(
            Method::POST,
            "/v1/allocations",
            json!({"resource_class": "gold", "name": "kept"}),
        )
        .await;
    assert_eq!(again.status, StatusCode::CREATED, "{:?}", again.body);
}

async fn settled(s: &Server, uuid: &str) -> Value {
    for _ in 0..200 {
        let a = s.get(&format!("/v1/allocations/{uuid}")).await.body;
        if a["state"] != "allocating" {
            return a;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    panic!("allocation {uuid} stayed allocating");
}

/// A node's (allocation_uuid, instance_uuid).
async fn allocation_of(s: &Server, node: &str) -> (Value, Value) {
    let n = s.get(&format!("/v1/nodes/{node}")).await.body;
    (n["allocation_uuid"].clone(), n["instance_uuid"].clone())
}

/// 1,000 allocations, each deleted at once while its search may be running, over four
/// nodes: whichever comes first, no node is left taken for an allocation that is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_an_allocation_during_its_search_never_leaves_its_node_taken() {
    let s = std::sync::Arc::new(start(|_| {}).await);
    let nodes = gold_nodes(&s, 4).await;
    let mut pairs = tokio::task::JoinSet::new();
    for worker in 0..8 {
        let s = s.clone();
        pairs.spawn(async move {
            for i in 0..125 {
                let a = s
                    .send(
                        Method::POST,
                        "/v1/allocations",
                        json!({"resource_class": "gold", "name": format!("w{worker}-{i}")}),
                    )
                    .await;
                assert_eq!(a.status, StatusCode::CREATED, "{:?}", a.body);
                let uuid = a.body["uuid"].as_str().unwrap().to_owned();
                // Now, or after the search has had a moment (either order must hold).
                if i % 3 == 0 {
                    tokio::task::yield_now().await;
                }
                let gone = s.delete(&format!("/v1/allocations/{uuid}")).await;
                assert_eq!(gone.status, StatusCode::NO_CONTENT, "{:?}", gone.body);
            }
        });
    }
    while let Some(done) = pairs.join_next().await {
        done.unwrap();
    }
    // Searches still running when their delete answered end without taking anything.
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let left = s.get("/v1/allocations").await.body["allocations"].clone();
    assert_eq!(left, json!([]), "every allocation was deleted");
    for n in &nodes {
        assert_eq!(
            allocation_of(&s, n).await,
            (Value::Null, Value::Null),
            "node {n} is free"
        );
    }
    // And the nodes are still allocatable.
    let a = allocate_gold(&s).await;
    assert_eq!(a["state"], "active", "{a}");
}

/// A new allocation of the `gold` class, once its search ended.
async fn allocate_gold(s: &Server) -> Value {
    let a = s
        .send(
            Method::POST,
            "/v1/allocations",
            json!({"resource_class": "gold"}),
        )
        .await;
    settled(s, a.body["uuid"].as_str().unwrap()).await
}

/// Deploy, undeploy, deploy again, as metalsmith does: the undeploy ends the instance
/// (its allocation deleted, `instance_uuid` cleared, as Ironic's tear-down does), so the
/// next allocation of the class finds the node again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_undeploy_ends_the_allocation_so_the_node_is_allocated_again() {
    let s = start(|_| {}).await;
    let node = gold_nodes(&s, 1).await.remove(0);
    let path = format!("/v1/nodes/{node}");
    for round in 0..2 {
        let allocation = allocate_gold(&s).await;
        assert_eq!(allocation["state"], "active", "round {round}: {allocation}");
        assert_eq!(allocation["node_uuid"], node.as_str());
        s.walk(&node, &[("active", "active"), ("deleted", "available")])
            .await;
        let n = s.get(&path).await.body;
        assert_eq!(n["instance_uuid"], Value::Null, "round {round}: {n}");
        assert_eq!(n["allocation_uuid"], Value::Null, "round {round}: {n}");
        let gone = s
            .get(&format!(
                "/v1/allocations/{}",
                allocation["uuid"].as_str().unwrap()
            ))
            .await;
        assert_eq!(gone.status, StatusCode::NOT_FOUND, "round {round}");
        let p = json!({"target": "power off"});
        s.send(Method::PUT, &format!("{path}/states/power"), p)
            .await;
        while s.get(&path).await.body["power_state"] != "power off" {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }
}

/// A node another task holds for a moment (a power action, a heartbeat's step) is waited
/// for within the engine's lock wait (2 s here), as Ironic retries the locked nodes of its
/// pass: held for 1 s, it is allocated; held for 3.5 s, the allocation fails in Ironic's
/// words for a node it could not reserve.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_held_for_a_moment_is_waited_for_and_one_held_past_the_lock_wait_is_not() {
    let s = start(|_| {}).await;
    let node = gold_nodes(&s, 1).await.remove(0);
    let uuid = uuid::Uuid::parse_str(&node).unwrap();
    let reservations = s.engine.conductor.reservations().clone();
    for (hold_ms, allocated) in [(1000, true), (3500, false)] {
        // Whatever still holds it (the power action that made it ready) lets go first.
        let claim = reservations.claim(uuid, "power").await;
        let held = tokio::spawn(async move {
            tokio::time::sleep(std::time::Duration::from_millis(hold_ms)).await;
            drop(claim);
        });
        let a = allocate_gold(&s).await;
        let id = a["uuid"].as_str().unwrap();
        if allocated {
            assert_eq!(
                (&a["state"], &a["node_uuid"]),
                (&json!("active"), &json!(node)),
                "{a}"
            );
            let gone = s.delete(&format!("/v1/allocations/{id}")).await;
            assert_eq!(gone.status, StatusCode::NO_CONTENT);
        } else {
            assert_eq!(a["state"], "error", "{a}");
            let error = a["last_error"].as_str().unwrap();
            assert!(
                error.ends_with("could not reserve any of 1 suitable nodes."),
                "{error}"
            );
            assert_eq!(allocation_of(&s, &node).await, (Value::Null, Value::Null));
        }
        held.await.unwrap();
    }
}
