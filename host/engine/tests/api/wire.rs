//! The engine and its clients agree on the wire: every document the engine renders, at
//! the oldest, the default and the newest microversion, decodes into `deployd-wire`'s
//! types; every target the wire names is one the engine knows; and the typed client
//! drives a node with them.

use deployd_test_support as common;

use common::server::start;
use deployd_wire::documents::{Node, NodeCollection, PortCollection};
use deployd_wire::state_machine::ProvisionState;
use deployd_wire::targets::{PowerTarget, ProvisionTarget};
use reqwest::Method;
use serde_json::{Map, Value, json};

fn decode<T: serde::de::DeserializeOwned>(what: &str, body: &Value) -> T {
    serde_json::from_value(body.clone()).unwrap_or_else(|e| panic!("{what}: {e}: {body}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rendered_documents_decode_as_the_wire_types_at_every_version() {
    let s = start(|_| {}).await;
    let uuid = s
        .node(json!({"driver": "fake", "name": "n1", "extra": {"rack": 4}}))
        .await;
    let port = json!({"node_uuid": uuid, "address": "52:54:00:12:34:56"});
    assert!(
        s.send(Method::POST, "/v1/ports", port)
            .await
            .status
            .is_success()
    );
    for version in ["1.1", "1.68", "1.115"] {
        let one = s
            .at(Method::GET, &format!("/v1/nodes/{uuid}"), version, None)
            .await;
        let node: Node = decode(version, &one.body);
        assert_eq!(node.uuid, uuid);
        assert_eq!(node.provision_state, Some(ProvisionState::Enroll));
        assert!(node.is_settled());
        assert_eq!(node.extra["rack"], 4);
        // What the wire does not type is kept, as sent.
        assert!(node.other.contains_key("links"), "{version}");
        for list in ["/v1/nodes", "/v1/nodes/detail"] {
            let all: NodeCollection =
                decode(list, &s.at(Method::GET, list, version, None).await.body);
            assert_eq!(all.nodes.len(), 1, "{list} at {version}");
            assert_eq!(all.nodes[0].uuid, uuid);
        }
        let ports = s.at(Method::GET, "/v1/ports/detail", version, None).await;
        let ports: PortCollection = decode(version, &ports.body);
        assert_eq!(ports.ports[0].address, "52:54:00:12:34:56");
        assert_eq!(ports.ports[0].node_uuid.as_deref(), Some(uuid.as_str()));
    }
    // Fields left out by `?fields=` are absent, and still decode.
    let some = s.get(&format!("/v1/nodes/{uuid}?fields=uuid,name")).await;
    let node: Node = decode("fields", &some.body);
    assert_eq!(
        (node.name.as_deref(), node.provision_state),
        (Some("n1"), None)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_target_the_wire_names_is_known_to_the_engine() {
    let s = start(|_| {}).await;
    let uuid = s.node(json!({"driver": "fake"})).await;
    for target in ProvisionTarget::ALL {
        let body = json!({ "target": target });
        let path = format!("/v1/nodes/{uuid}/states/provision");
        let below = format!("1.{}", target.since().0 - 1);
        if target.since().0 > 1 {
            let a = s.at(Method::PUT, &path, &below, Some(body.clone())).await;
            assert_eq!(a.status, 406, "{target} at {below}: {:?}", a.body);
        }
        let a = s.at(Method::PUT, &path, "1.115", Some(body)).await;
        // Known: accepted, or refused for the node's state or for what deployd supports,
        // never as an unknown target.
        assert!(
            !a.body
                .to_string()
                .contains("is not a valid provision target"),
            "{target}: {:?}",
            a.body
        );
    }
    let a = s.provision(&uuid, "power cycle").await;
    assert!(
        a.fault().contains("is not a valid provision target"),
        "{}",
        a.fault()
    );
    // The targets above started flows (cleaning, say): power waits until they end.
    for _ in 0..200 {
        let node = s.get(&format!("/v1/nodes/{uuid}")).await.body;
        if node["target_provision_state"].is_null() && node["reservation"].is_null() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    // Each power change holds the node a moment: the client retries the 409, as
    // python-ironicclient does.
    let client = deployd_client::Client::new(&s.base)
        .with_retries(100, std::time::Duration::from_millis(50));
    for &target in PowerTarget::ALL {
        client
            .power(&uuid, target)
            .await
            .unwrap_or_else(|e| panic!("{target}: {e}"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_typed_client_walks_a_node_with_wire_targets() {
    let s = start(|_| {}).await;
    let uuid = s.node(json!({"driver": "fake", "name": "typed"})).await;
    let client = deployd_client::Client::new(&s.base);
    client
        .provision("typed", ProvisionTarget::Manage, Map::new())
        .await
        .unwrap();
    s.wait_for(&uuid, "manageable").await;
    let node = client.node("typed").await.unwrap();
    assert_eq!(node.provision_state, Some(ProvisionState::Manageable));
    assert_eq!(client.nodes().await.unwrap()[0].uuid, uuid);
    // A refusal is the engine's words, decoded from Ironic's envelope.
    let refused = client
        .provision("typed", ProvisionTarget::Active, Map::new())
        .await
        .unwrap_err();
    assert_eq!(refused.status(), Some(400), "{refused}");
    assert!(refused.to_string().contains("manageable"), "{refused}");
}
