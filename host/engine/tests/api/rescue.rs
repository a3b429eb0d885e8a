//! Rescue over the API (Ironic 1.38) on fake-hardware, whose ramdisk never calls back:
//! the `agent` rescue interface only where the configuration enables it, Ironic's refusals
//! (the state, maintenance, a missing or blank password, the version), the password kept
//! only as a hash and shown masked, `rescue wait` failed by `rescue_callback_timeout` with
//! the hash dropped, and `unrescue` from `rescue failed` back to `active`. The rescue
//! itself, through a BMC and deployd's agent, is `drivers::an_active_node_is_rescued…`.

use deployd_test_support as common;

use common::server::start;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

fn rescue(password: Value) -> Value {
    json!({"target": "rescue", "rescue_password": password})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rescue_is_enabled_by_configuration_refused_in_ironics_words_and_times_out() {
    // Ironic 39's defaults: no rescue interface but no-rescue.
    let s = start(|_| {}).await;
    let body = json!({"driver": "fake-hardware", "rescue_interface": "agent"});
    let a = s.send(Method::POST, "/v1/nodes", body).await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST);
    assert!(
        a.fault().contains("Valid interfaces are ['no-rescue']"),
        "{}",
        a.fault()
    );
    drop(s);

    let s = start(|c| {
        c.interfaces.enabled_rescue_interfaces = vec!["no-rescue".into(), "agent".into()];
        c.conductor.rescue_callback_timeout = 1;
    })
    .await;
    let drivers = s
        .at(Method::GET, "/v1/drivers/ipmi", "1.38", None)
        .await
        .body;
    assert_eq!(
        drivers["enabled_rescue_interfaces"],
        json!(["no-rescue", "agent"])
    );
    assert_eq!(drivers["default_rescue_interface"], "no-rescue");
    let node = s
        .node(json!({"driver": "fake-hardware", "deploy_interface": "fake", "rescue_interface": "agent"}))
        .await;
    let plain = s
        .node(json!({"driver": "fake-hardware", "deploy_interface": "fake"}))
        .await;
    let path = |n: &str| format!("/v1/nodes/{n}/states/provision");
    // Not from available.
    s.walk(&node, &[("manage", "manageable"), ("provide", "available")])
        .await;
    let a = s.send(Method::PUT, &path(&node), rescue(json!("pw"))).await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST);
    assert_eq!(
        a.fault(),
        format!(
            "The requested action \"rescue\" can not be performed on node \"{node}\" while it is in state \"available\"."
        )
    );
    s.walk(&node, &[("active", "active")]).await;
    s.walk(
        &plain,
        &[
            ("manage", "manageable"),
            ("provide", "available"),
            ("active", "active"),
        ],
    )
    .await;
    // No password, a blank one, or one before 1.38.
    for password in [Value::Null, json!(""), json!("   ")] {
        let body = match password {
            Value::Null => json!({"target": "rescue"}),
            p => rescue(p),
        };
        let a = s.send(Method::PUT, &path(&node), body).await;
        assert_eq!(a.status, StatusCode::BAD_REQUEST);
        assert_eq!(
            a.fault(),
            "A non-empty \"rescue_password\" is required when setting target provision state to rescue"
        );
    }
    let old = s
        .at(Method::PUT, &path(&node), "1.37", Some(rescue(json!("pw"))))
        .await;
    assert_eq!(old.status, StatusCode::NOT_ACCEPTABLE);
    // The node's rescue interface is no-rescue.
    let a = s
        .send(Method::PUT, &path(&plain), rescue(json!("pw")))
        .await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST);
    assert_eq!(
        a.fault(),
        "Driver fake-hardware does not support rescue (disabled or not implemented)."
    );
    // In maintenance.
    let on = format!("/v1/nodes/{node}/maintenance");
    assert_eq!(
        s.send(Method::PUT, &on, json!({})).await.status,
        StatusCode::ACCEPTED
    );
    let a = s.send(Method::PUT, &path(&node), rescue(json!("pw"))).await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST);
    assert!(
        a.fault().contains("while it is in maintenance mode"),
        "{}",
        a.fault()
    );
    assert_eq!(s.delete(&on).await.status, StatusCode::ACCEPTED);
    let n = s.get(&format!("/v1/nodes/{node}")).await.body;
    assert_eq!(n["provision_state"], "active", "nothing changed");
    assert_eq!(n["instance_info"].get("hashed_rescue_password"), None);

    // Rescued: the hash is kept masked; no agent calls back, the timeout fails it.
    let a = s
        .send(Method::PUT, &path(&node), rescue(json!("s3cret")))
        .await;
    assert_eq!(a.status, StatusCode::ACCEPTED, "{:?}", a.body);
    let n = s.get(&format!("/v1/nodes/{node}")).await.body;
    assert!(
        ["rescuing", "rescue wait"].contains(&n["provision_state"].as_str().unwrap()),
        "{n}"
    );
    assert_eq!(n["target_provision_state"], "rescue");
    assert_eq!(n["instance_info"]["hashed_rescue_password"], "******");
    assert!(!n.to_string().contains("s3cret"));
    let n = s.wait_for(&node, "rescue failed").await;
    let error = n["last_error"].as_str().unwrap();
    assert!(
        error.contains("rescue wait") && error.contains("rescue_callback_timeout"),
        "{error}"
    );
    // The hash went with the failure's own write: the node that shows it failed has none.
    assert_eq!(
        n["instance_info"].get("hashed_rescue_password"),
        None,
        "dropped"
    );
    // Unrescue from rescue failed boots the disk.
    let a = s
        .send(Method::PUT, &path(&node), json!({"target": "unrescue"}))
        .await;
    assert_eq!(a.status, StatusCode::ACCEPTED);
    let n = s.wait_for(&node, "active").await;
    assert_eq!(n["power_state"], "power on");
    // Unrescue from active is no transition.
    let a = s
        .send(Method::PUT, &path(&node), json!({"target": "unrescue"}))
        .await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST);
}
