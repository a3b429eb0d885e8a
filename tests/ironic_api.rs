//! Ironic's API rules that guard an operator's machines, over real HTTP on `deployd serve`.

use deployd_test_support::processes as support;

use serde_json::{Value, json};
use support::{Engine, call, make_available, provision, wait_node};

/// A PATCH of one top-level field of a node; (status, body).
fn set(url: &str, node: &str, field: &str, value: Value) -> (u16, Value) {
    let op = json!([{"op": "add", "path": format!("/{field}"), "value": value}]);
    call("PATCH", &format!("{url}/v1/nodes/{node}"), Some(op))
}

/// A provision target asked once; (status, body).
fn target(url: &str, node: &str, target: &str) -> (u16, Value) {
    let path = format!("{url}/v1/nodes/{node}/states/provision");
    call("PUT", &path, Some(json!({ "target": target })))
}

#[test]
fn a_protected_node_cannot_be_torn_down_rebuilt_or_deleted_until_unprotected() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::start(&dir.path().join("data"), &[]);
    let url = engine.url.as_str();
    let (status, node) = call(
        "POST",
        &format!("{url}/v1/nodes"),
        Some(json!({"driver": "fake", "name": "prod"})),
    );
    assert_eq!(status, 201, "{node}");
    make_available(url, "prod");

    // Only a node with an instance can be protected, and a reason needs the flag.
    let (status, body) = set(url, "prod", "protected", json!(true));
    assert_eq!(status, 409, "an available node cannot be protected: {body}");
    assert!(body.to_string().contains("'available'"), "{body}");
    provision(url, "prod", "active");
    wait_node(url, "prod", 30, |n| n["provision_state"] == "active");
    let (status, body) = set(url, "prod", "protected_reason", json!("db primary"));
    assert_eq!(status, 400, "a reason without the flag: {body}");

    let (status, body) = call(
        "PATCH",
        &format!("{url}/v1/nodes/prod"),
        Some(json!([
            {"op": "replace", "path": "/protected", "value": true},
            {"op": "add", "path": "/protected_reason", "value": "db primary"},
        ])),
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        (&body["protected"], &body["protected_reason"]),
        (&json!(true), &json!("db primary"))
    );

    // Every way to lose the instance is forbidden, and none changed the node.
    for verb in ["deleted", "undeploy", "rebuild", "active"] {
        let (status, body) = target(url, "prod", verb);
        assert_eq!(status, 403, "{verb} on a protected node: {body}");
        assert!(body.to_string().contains("is protected"), "{body}");
    }
    let (status, body) = set(url, "prod", "maintenance", json!(true));
    assert_eq!(status, 200, "{body}");
    let (status, body) = call("DELETE", &format!("{url}/v1/nodes/prod"), None);
    assert_eq!(status, 403, "DELETE, even in maintenance: {body}");
    let (_, node) = call("GET", &format!("{url}/v1/nodes/prod"), None);
    assert_eq!(node["provision_state"], "active", "{node}");
    assert_eq!(node["protected"], true);
    set(url, "prod", "maintenance", json!(false));

    // Unprotected, its reason goes with the flag and the node can be torn down.
    let (status, body) = set(url, "prod", "protected", json!(false));
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["protected_reason"], Value::Null, "{body}");
    let (status, body) = target(url, "prod", "deleted");
    assert_eq!(status, 202, "{body}");
    wait_node(url, "prod", 30, |n| n["provision_state"] == "available");
    let (status, body) = call("DELETE", &format!("{url}/v1/nodes/prod"), None);
    assert_eq!(status, 204, "{body}");
    engine.stop();
}
