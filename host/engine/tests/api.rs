//! The operator API over real HTTP on loopback: discovery and microversions, nodes, ports,
//! drivers, provisioning, errors in Ironic's shape, bad input that changes nothing, auth.

use deployd_test_support as common;

use common::server::{Answer, Server, start};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

async fn count(s: &Server) -> usize {
    s.get("/v1/nodes").await.body["nodes"]
        .as_array()
        .unwrap()
        .len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovery_documents_and_version_headers_on_every_answer() {
    let s = start(|_| {}).await;
    let root = s.call(Method::GET, "/", None, None).await;
    assert_eq!(root.status, StatusCode::OK);
    assert_eq!(root.body["default_version"]["version"], "1.115");
    assert_eq!(root.body["default_version"]["min_version"], "1.1");
    let v1 = s.call(Method::GET, "/v1", None, None).await;
    assert_eq!(v1.body["id"], "v1");
    assert!(v1.body["nodes"].is_array());

    // No header: the minimum. Both header forms, and "latest".
    assert_eq!(root.headers["x-openstack-ironic-api-version"], "1.1");
    let legacy = s.call(Method::GET, "/v1/nodes", Some("1.31"), None).await;
    assert_eq!(legacy.headers["x-openstack-ironic-api-version"], "1.31");
    let modern = s
        .http
        .get(format!("{}/v1/nodes", s.base))
        .header("OpenStack-API-Version", "baremetal 1.62")
        .send()
        .await
        .unwrap();
    assert_eq!(modern.headers()["x-openstack-ironic-api-version"], "1.62");
    let latest = s.call(Method::GET, "/v1/nodes", Some("latest"), None).await;
    assert_eq!(latest.headers["x-openstack-ironic-api-version"], "1.115");

    // Out of range and malformed: 406 with the bounds, so the CLI can negotiate down.
    for bad in ["1.116", "2.0", "1.x", "banana"] {
        let a = s.call(Method::GET, "/v1/nodes", Some(bad), None).await;
        assert_eq!(a.status, StatusCode::NOT_ACCEPTABLE, "{bad}");
        assert_eq!(a.headers["x-openstack-ironic-api-maximum-version"], "1.115");
        assert_eq!(a.headers["x-openstack-ironic-api-minimum-version"], "1.1");
        assert!(!a.fault().is_empty());
    }
    // Errors carry the headers and a request id too.
    let missing = s.get("/v1/nodes/nope").await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
    assert_eq!(missing.fault(), "Node nope could not be found.");
    assert_eq!(
        missing.headers["x-openstack-ironic-api-maximum-version"],
        "1.115"
    );
    assert!(
        missing.headers["openstack-request-id"]
            .to_str()
            .unwrap()
            .starts_with("req-")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_are_created_shown_listed_filtered_and_paged() {
    let s = start(|_| {}).await;
    let created = s
        .send(Method::POST, "/v1/nodes", json!({"driver": "fake", "name": "rack1", "driver_info": {"ipmi_address": "10.0.0.1", "ipmi_password": "s3cret"}}))
        .await;
    assert_eq!(created.status, StatusCode::CREATED);
    let uuid = created.body["uuid"].as_str().unwrap().to_owned();
    assert!(
        created.headers["location"]
            .to_str()
            .unwrap()
            .ends_with(&format!("/v1/nodes/{uuid}"))
    );
    assert_eq!(created.body["provision_state"], "enroll");
    assert_eq!(
        created.body["driver_info"]["ipmi_password"], "******",
        "secrets are masked"
    );
    assert_eq!(created.body["driver_info"]["ipmi_address"], "10.0.0.1");
    // Before 1.11, new nodes are available.
    let old = s
        .call(
            Method::POST,
            "/v1/nodes",
            None,
            Some(br#"{"driver": "fake"}"#.to_vec()),
        )
        .await;
    // Ironic shows `available` as no state (null) before 1.2, when it was named.
    assert_eq!(old.body["provision_state"], Value::Null);
    let uuid_old = old.body["uuid"].as_str().unwrap();
    let shown = s
        .at(Method::GET, &format!("/v1/nodes/{uuid_old}"), "1.2", None)
        .await;
    assert_eq!(shown.body["provision_state"], "available");

    assert_eq!(s.get("/v1/nodes/rack1").await.body["uuid"], uuid.as_str());
    let fields = s
        .get(&format!("/v1/nodes/{uuid}?fields=uuid,provision_state"))
        .await
        .body;
    assert_eq!(fields, json!({"uuid": uuid, "provision_state": "enroll"}));

    let list = s.get("/v1/nodes").await.body;
    let first = list["nodes"][0].as_object().unwrap();
    let mut keys: Vec<&str> = first.keys().map(String::as_str).collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            "instance_uuid",
            "links",
            "maintenance",
            "name",
            "power_state",
            "provision_state",
            "uuid"
        ]
    );
    let enrolled = s.get("/v1/nodes?provision_state=enroll").await.body;
    assert_eq!(enrolled["nodes"].as_array().unwrap().len(), 1);
    assert_eq!(
        s.get("/v1/nodes?driver=nope").await.body["nodes"],
        json!([])
    );
    assert_eq!(
        s.get("/v1/nodes/detail").await.body["nodes"][0]["driver"],
        "fake"
    );

    for _ in 0..3 {
        s.node(json!({"driver": "fake"})).await;
    }
    let page = s.get("/v1/nodes?limit=2").await.body;
    assert_eq!(page["nodes"].as_array().unwrap().len(), 2);
    let next = page["next"].as_str().unwrap();
    assert!(
        next.contains("limit=2") && next.contains("marker="),
        "{next}"
    );
    let mut seen = 2;
    let mut next = Some(next.to_owned());
    while let Some(url) = next {
        let path = url.trim_start_matches(&s.base).to_owned();
        let page = s.get(&path).await.body;
        seen += page["nodes"].as_array().unwrap().len();
        next = page["next"].as_str().map(str::to_owned);
    }
    assert_eq!(seen, 5);
    assert!(
        s.get("/v1/nodes?limit=5").await.body.get("next").is_some(),
        "a full page links to the next"
    );
    assert!(s.get("/v1/nodes?limit=6").await.body.get("next").is_none());

    let dup = s
        .send(
            Method::POST,
            "/v1/nodes",
            json!({"driver": "fake", "name": "rack1"}),
        )
        .await;
    assert_eq!(dup.status, StatusCode::CONFLICT);
    let unknown = s
        .send(
            Method::POST,
            "/v1/nodes",
            json!({"driver": "no_such_driver"}),
        )
        .await;
    assert_eq!(unknown.status, StatusCode::BAD_REQUEST);
    assert!(unknown.fault().contains("no_such_driver"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_requests_are_refused_clearly_and_change_nothing() {
    let s = start(|_| {}).await;
    let uuid = s.node(json!({"driver": "fake", "name": "keep"})).await;
    let before = s.get(&format!("/v1/nodes/{uuid}")).await.body;
    let nodes = count(&s).await;
    let huge = format!(
        "{{\"driver\": \"fake\", \"extra\": {{\"x\": \"{}\"}}}}",
        "a".repeat(2 << 20)
    );
    let cases: Vec<(Method, String, Vec<u8>, StatusCode)> = vec![
        (
            Method::POST,
            "/v1/nodes".into(),
            b"{not json".to_vec(),
            StatusCode::BAD_REQUEST,
        ),
        (
            Method::POST,
            "/v1/nodes".into(),
            b"[]".to_vec(),
            StatusCode::BAD_REQUEST,
        ),
        (
            Method::POST,
            "/v1/nodes".into(),
            br#"{"driver": 7}"#.to_vec(),
            StatusCode::BAD_REQUEST,
        ),
        (
            Method::POST,
            "/v1/nodes".into(),
            br#"{"driver": "fake", "name": "has space"}"#.to_vec(),
            StatusCode::BAD_REQUEST,
        ),
        (
            Method::POST,
            "/v1/nodes".into(),
            br#"{"name": "no-driver"}"#.to_vec(),
            StatusCode::BAD_REQUEST,
        ),
        (
            Method::POST,
            "/v1/nodes".into(),
            br#"{"driver": "fake", "provision_state": "active"}"#.to_vec(),
            StatusCode::BAD_REQUEST,
        ),
        (
            Method::POST,
            "/v1/nodes".into(),
            huge.into_bytes(),
            StatusCode::PAYLOAD_TOO_LARGE,
        ),
        (
            Method::PATCH,
            format!("/v1/nodes/{uuid}"),
            br#"{"op": "add"}"#.to_vec(),
            StatusCode::BAD_REQUEST,
        ),
        (
            Method::PATCH,
            format!("/v1/nodes/{uuid}"),
            br#"[{"op": "add", "path": "/provision_state", "value": "active"}]"#.to_vec(),
            StatusCode::BAD_REQUEST,
        ),
        (
            Method::PATCH,
            format!("/v1/nodes/{uuid}"),
            br#"[{"op": "move", "path": "/name", "value": "x"}]"#.to_vec(),
            StatusCode::BAD_REQUEST,
        ),
        (
            Method::PATCH,
            format!("/v1/nodes/{uuid}"),
            br#"[{"op": "add", "path": "/maintenance", "value": "maybe"}]"#.to_vec(),
            StatusCode::BAD_REQUEST,
        ),
        (
            Method::PATCH,
            format!("/v1/nodes/{uuid}"),
            br#"[{"op": "remove", "path": "/driver_info/nope"}]"#.to_vec(),
            StatusCode::BAD_REQUEST,
        ),
        (
            Method::PATCH,
            format!("/v1/nodes/{uuid}"),
            br#"[{"op": "replace", "path": "/driver", "value": "nope"}]"#.to_vec(),
            StatusCode::BAD_REQUEST,
        ),
        (
            Method::PUT,
            format!("/v1/nodes/{uuid}/states/provision"),
            br#"{"target": "fly"}"#.to_vec(),
            StatusCode::BAD_REQUEST,
        ),
        (
            Method::PUT,
            format!("/v1/nodes/{uuid}/states/provision"),
            br#"{"target": "active"}"#.to_vec(),
            StatusCode::BAD_REQUEST,
        ),
        (
            Method::PUT,
            format!("/v1/nodes/{uuid}/states/provision"),
            br#"{"target": "manage", "extra": 1}"#.to_vec(),
            StatusCode::BAD_REQUEST,
        ),
        (
            Method::PUT,
            format!("/v1/nodes/{uuid}/states/power"),
            br#"{"target": "warp"}"#.to_vec(),
            StatusCode::BAD_REQUEST,
        ),
        (
            Method::PUT,
            "/v1/nodes/nope/states/provision".into(),
            br#"{"target": "manage"}"#.to_vec(),
            StatusCode::NOT_FOUND,
        ),
        (
            Method::POST,
            "/v1/ports".into(),
            format!(r#"{{"node_uuid": "{uuid}", "address": "zz:zz"}}"#).into_bytes(),
            StatusCode::BAD_REQUEST,
        ),
        (
            Method::POST,
            "/v1/ports".into(),
            br#"{"node_uuid": "not-a-uuid", "address": "52:54:00:00:00:01"}"#.to_vec(),
            StatusCode::BAD_REQUEST,
        ),
        (
            Method::GET,
            "/v1/nodes?limit=-1".into(),
            vec![],
            StatusCode::BAD_REQUEST,
        ),
        (
            Method::GET,
            "/v1/nodes?sort_key=name".into(),
            vec![],
            StatusCode::BAD_REQUEST,
        ),
        (
            Method::GET,
            "/v1/nodes?bogus=1".into(),
            vec![],
            StatusCode::BAD_REQUEST,
        ),
        (
            Method::DELETE,
            "/v1/ports/not-a-uuid".into(),
            vec![],
            StatusCode::NOT_FOUND,
        ),
    ];
    for (method, path, body, status) in cases {
        let body = (!body.is_empty()).then_some(body);
        let answer = s.call(method.clone(), &path, Some("1.67"), body).await;
        assert_eq!(answer.status, status, "{method} {path}: {:?}", answer.body);
        if status != StatusCode::PAYLOAD_TOO_LARGE {
            assert!(!answer.fault().is_empty(), "{method} {path} says why");
        } else {
            assert_eq!(
                answer.headers["connection"], "close",
                "the unread body's connection is not reused"
            );
        }
    }
    assert_eq!(count(&s).await, nodes, "no node was created");
    assert_eq!(
        s.get(&format!("/v1/nodes/{uuid}")).await.body,
        before,
        "the node is unchanged"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn patch_updates_allowed_fields_and_delete_follows_state_rules() {
    let s = start(|_| {}).await;
    let uuid = s.node(json!({"driver": "fake", "name": "p1"})).await;
    let ops = json!([
        {"op": "add", "path": "/driver_info/redfish_address", "value": "http://127.0.0.1:8000"},
        {"op": "replace", "path": "/name", "value": "p2"},
        {"op": "add", "path": "/extra/rack", "value": 4},
        {"op": "add", "path": "/maintenance", "value": true},
    ]);
    let patched = s
        .send(Method::PATCH, &format!("/v1/nodes/{uuid}"), ops)
        .await;
    assert_eq!(patched.status, StatusCode::OK, "{:?}", patched.body);
    assert_eq!(patched.body["name"], "p2");
    assert_eq!(patched.body["extra"]["rack"], 4);
    assert_eq!(patched.body["maintenance"], true);
    assert_eq!(s.get("/v1/nodes/p1").await.status, StatusCode::NOT_FOUND);
    let removed = s.send(Method::PATCH, &format!("/v1/nodes/{uuid}"), json!([{"op": "remove", "path": "/extra/rack"}, {"op": "remove", "path": "/maintenance"}])).await;
    assert_eq!(removed.body["extra"], json!({}));
    assert_eq!(removed.body["maintenance"], false);

    // Deploy with the fake driver; an active node cannot be deleted, nor patched mid-flow.
    s.walk(
        &uuid,
        &[
            ("manage", "manageable"),
            ("provide", "available"),
            ("active", "active"),
        ],
    )
    .await;
    let refused = s
        .call(
            Method::DELETE,
            &format!("/v1/nodes/{uuid}"),
            Some("1.67"),
            None,
        )
        .await;
    assert_eq!(refused.status, StatusCode::CONFLICT);
    assert!(
        refused
            .fault()
            .contains("cannot be deleted in provision state \"active\""),
        "{}",
        refused.fault()
    );
    assert_eq!(
        s.provision(&uuid, "deleted").await.status,
        StatusCode::ACCEPTED
    );
    s.wait_for(&uuid, "available").await;
    assert_eq!(
        s.delete(&format!("/v1/nodes/{uuid}")).await.status,
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        s.get(&format!("/v1/nodes/{uuid}")).await.status,
        StatusCode::NOT_FOUND
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn provisioning_runs_in_the_background_and_busy_nodes_answer_409() {
    // No wait for a busy node (Ironic's lock retry set to one attempt): refused at once.
    let s = start(|c| c.conductor.node_locked_retry_attempts = 1).await;
    // A driver that spins until its 1.5 s deadline keeps the node busy that long.
    let uuid = s.test_driver_node("?deadline_ms=1500", "loop").await;
    let illegal = s.provision(&uuid, "provide").await;
    assert_eq!(illegal.status, StatusCode::BAD_REQUEST);
    assert_eq!(
        illegal.fault(),
        format!(
            "The requested action \"provide\" can not be performed on node \"{uuid}\" while it is in state \"available\"."
        )
    );
    let accepted = s.provision(&uuid, "active").await;
    assert_eq!(accepted.status, StatusCode::ACCEPTED);
    assert!(
        accepted.headers["location"]
            .to_str()
            .unwrap()
            .ends_with(&format!("/v1/nodes/{uuid}/states"))
    );
    let busy = s.provision(&uuid, "deleted").await;
    assert_eq!(busy.status, StatusCode::CONFLICT, "{:?}", busy.body);
    assert_eq!(
        busy.fault(),
        format!(
            "Node {uuid} is locked by host deployd for deploy, please retry after the current operation is completed."
        ),
        "the refusal names what holds the node"
    );
    let patch = add_extra_x(&s, &uuid).await;
    assert_eq!(patch.status, StatusCode::CONFLICT);
    let delete = s.delete(&format!("/v1/nodes/{uuid}")).await;
    assert_eq!(
        delete.status,
        StatusCode::CONFLICT,
        "no delete under a running step"
    );
    let failed = s.wait_for(&uuid, "deploy failed").await;
    assert!(
        failed["last_error"]
            .as_str()
            .unwrap()
            .contains("ran past its deadline of 1.5s"),
        "{}",
        failed["last_error"]
    );
    let states = s.get(&format!("/v1/nodes/{uuid}/states")).await.body;
    assert_eq!(states["provision_state"], "deploy failed");
    assert_eq!(states["target_provision_state"], "active");
}

/// An operator's call on a node a step holds waits for the step, as Ironic's lock retry
/// does, instead of failing with 409: here a PATCH sent while a driver spins until its
/// 1.5 s deadline lands on the node the failed step left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operators_call_waits_for_the_step_that_holds_the_node() {
    let s = start(|c| c.conductor.node_locked_retry_attempts = 31).await;
    let uuid = s.test_driver_node("?deadline_ms=1500", "loop").await;
    assert_eq!(
        s.provision(&uuid, "active").await.status,
        StatusCode::ACCEPTED
    );
    let patch = add_extra_x(&s, &uuid).await;
    assert_eq!(patch.status, StatusCode::OK, "{:?}", patch.body);
    assert_eq!(patch.body["extra"]["x"], 1);
    assert_eq!(
        patch.body["provision_state"], "deploy failed",
        "applied after the step that held the node ended"
    );
}

async fn add_extra_x(s: &Server, uuid: &str) -> Answer {
    let add = json!([{"op": "add", "path": "/extra/x", "value": 1}]);
    s.send(Method::PATCH, &format!("/v1/nodes/{uuid}"), add)
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn power_validate_and_ports() {
    let s = start(|_| {}).await;
    let uuid = s.node(json!({"driver": "fake"})).await;
    let power = s
        .send(
            Method::PUT,
            &format!("/v1/nodes/{uuid}/states/power"),
            json!({"target": "power on"}),
        )
        .await;
    assert_eq!(power.status, StatusCode::ACCEPTED);
    for _ in 0..100 {
        if s.get(&format!("/v1/nodes/{uuid}")).await.body["power_state"] == "power on" {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(
        s.get(&format!("/v1/nodes/{uuid}")).await.body["power_state"],
        "power on"
    );
    let valid = s.get(&format!("/v1/nodes/{uuid}/validate")).await.body;
    assert_eq!(valid["power"]["result"], true);
    assert_eq!(valid["deploy"]["result"], true);
    let ipmi = s.node(json!({"driver": "agent_ipmitool"})).await;
    let invalid = s.get(&format!("/v1/nodes/{ipmi}/validate")).await.body;
    assert_eq!(invalid["power"]["result"], false);
    assert!(
        invalid["power"]["reason"]
            .as_str()
            .unwrap()
            .contains("ipmi_address")
    );
    assert!(
        invalid["deploy"]["reason"]
            .as_str()
            .unwrap()
            .contains("ipmi_address")
    );

    let port = s
        .send(
            Method::POST,
            "/v1/ports",
            json!({"node_uuid": uuid, "address": "52:54:00:AA:BB:01"}),
        )
        .await;
    assert_eq!(port.status, StatusCode::CREATED, "{:?}", port.body);
    assert_eq!(port.body["address"], "52:54:00:aa:bb:01");
    let port_uuid = port.body["uuid"].as_str().unwrap().to_owned();
    let dup = s
        .send(
            Method::POST,
            "/v1/ports",
            json!({"node_uuid": ipmi, "address": "52-54-00-aa-bb-01"}),
        )
        .await;
    assert_eq!(dup.status, StatusCode::CONFLICT);
    assert!(dup.fault().contains("already used by port"));
    let orphan = s
        .send(
            Method::POST,
            "/v1/ports",
            json!({"node_uuid": uuid::Uuid::new_v4(), "address": "52:54:00:aa:bb:02"}),
        )
        .await;
    // Ironic answers 400: the request names a node that does not exist.
    assert_eq!(orphan.status, StatusCode::BAD_REQUEST);
    assert_eq!(
        s.get("/v1/ports").await.body["ports"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    assert_eq!(
        s.get(&format!("/v1/nodes/{uuid}/ports")).await.body["ports"][0]["uuid"],
        port_uuid.as_str()
    );
    assert_eq!(
        s.get(&format!("/v1/ports/{port_uuid}")).await.body["node_uuid"],
        uuid.as_str()
    );
    assert_eq!(
        s.delete(&format!("/v1/ports/{port_uuid}")).await.status,
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        s.get(&format!("/v1/ports/{port_uuid}")).await.status,
        StatusCode::NOT_FOUND
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drivers_are_listed_loaded_and_unloaded_at_runtime() {
    let s = start(|c| c.plugins.dir = None).await;
    let names: Vec<Value> = s.get("/v1/drivers").await.body["drivers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["name"].clone())
        .collect();
    assert_eq!(
        names,
        [
            "fake-hardware",
            "ipmi",
            "redfish",
            "agent_ipmitool",
            "agent_redfish",
            "fake",
            "pxe_ipmitool",
            "pxe_redfish",
            "test_driver"
        ]
    );
    let fake = s.get("/v1/drivers/fake").await.body;
    assert_eq!(fake["deployd"]["family"], "fake");
    assert_eq!(fake["deployd"]["hash"].as_str().unwrap().len(), 64);

    let garbage = s
        .http
        .post(format!("{}/v1/deployd/drivers", s.base))
        .body("not wasm")
        .send()
        .await
        .unwrap();
    assert_eq!(garbage.status(), StatusCode::BAD_REQUEST);
    let other = std::fs::read(deployd_fixtures::WRONG_WORLD).unwrap();
    let refused = s
        .http
        .post(format!("{}/v1/deployd/drivers", s.base))
        .body(other)
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), StatusCode::BAD_REQUEST);
    assert!(
        refused
            .text()
            .await
            .unwrap()
            .contains("not a deployd driver")
    );

    let v2 = std::fs::read(deployd_fixtures::TEST_DRIVER_V2).unwrap();
    let loaded = s
        .http
        .post(format!("{}/v1/deployd/drivers", s.base))
        .body(v2)
        .send()
        .await
        .unwrap();
    assert_eq!(loaded.status(), StatusCode::CREATED);
    assert_eq!(
        s.get("/v1/drivers/test_driver").await.body["deployd"]["version"],
        "2.0.0"
    );
    assert!(
        s.dir.path().join("data/plugins/test_driver.wasm").exists(),
        "kept for the next start"
    );

    // In use by a node mid-flow: refused unless forced.
    let uuid = s
        .node(json!({"driver": "test_driver", "instance_info": {"mode": "wait"}}))
        .await;
    s.walk(&uuid, Server::TO_WAIT_CALL_BACK).await;
    let busy = s
        .call(
            Method::DELETE,
            "/v1/deployd/drivers/test_driver",
            Some("1.67"),
            None,
        )
        .await;
    assert_eq!(busy.status, StatusCode::CONFLICT);
    assert!(busy.fault().contains("in use by 1 node(s)"));
    let forced = s
        .call(
            Method::DELETE,
            "/v1/deployd/drivers/test_driver?force=true",
            Some("1.67"),
            None,
        )
        .await;
    assert_eq!(forced.status, StatusCode::NO_CONTENT);
    assert_eq!(
        s.get("/v1/drivers/test_driver").await.status,
        StatusCode::NOT_FOUND
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_basic_auth_guards_operators_but_not_agents_or_discovery() {
    let dir = tempfile::tempdir().unwrap();
    let htpasswd = dir.path().join("htpasswd");
    std::fs::write(
        &htpasswd,
        format!("admin:{}\n", bcrypt::hash("hunter2", 4).unwrap()),
    )
    .unwrap();
    let s = start(|c| {
        c.api.auth_strategy = deployd_engine::config::AuthStrategy::HttpBasic;
        c.api.http_basic_auth_user_file = Some(htpasswd.clone());
    })
    .await;
    let url = format!("{}/v1/nodes", s.base);
    assert_eq!(
        s.http.get(&url).send().await.unwrap().status(),
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        s.http
            .get(&url)
            .basic_auth("admin", Some("wrong"))
            .send()
            .await
            .unwrap()
            .status(),
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        s.http
            .get(&url)
            .basic_auth("admin", Some("hunter2"))
            .send()
            .await
            .unwrap()
            .status(),
        StatusCode::OK
    );
    assert_eq!(
        s.http.get(&s.base).send().await.unwrap().status(),
        StatusCode::OK,
        "discovery is public"
    );
    let lookup = s
        .call(
            Method::GET,
            "/v1/lookup?addresses=52:54:00:00:00:09",
            Some("1.67"),
            None,
        )
        .await;
    assert_eq!(
        lookup.status,
        StatusCode::NOT_FOUND,
        "lookup is token-gated, not password-gated"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn manual_cleaning_takes_known_steps_and_returns_to_manageable() {
    let s = start(|_| {}).await;
    let uuid = s.node(json!({"driver": "fake"})).await;
    s.walk(&uuid, &[("manage", "manageable")]).await;
    let path = format!("/v1/nodes/{uuid}/states/provision");
    let refused = [
        (
            json!({"target": "clean"}),
            "\"clean_steps\" or \"runbook\" is required",
        ),
        (
            json!({"target": "clean", "clean_steps": []}),
            "must not be empty",
        ),
        (
            json!({"target": "clean", "clean_steps": [{"interface": "bios", "step": "apply_configuration"}]}),
            "is not supported; deployd runs",
        ),
        // RAID steps need the agent RAID interface (this node's is no-raid).
        (
            json!({"target": "clean", "clean_steps": [{"interface": "raid", "step": "create_configuration"}]}),
            "node does not support this clean step: {'interface': 'raid', 'step': 'create_configuration'}",
        ),
    ];
    for (body, expected) in refused {
        let answer = s.send(Method::PUT, &path, body.clone()).await;
        assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{body}");
        assert!(
            answer.fault().contains(expected),
            "{body}: {}",
            answer.fault()
        );
        let node = s.get(&format!("/v1/nodes/{uuid}")).await.body;
        assert_eq!(node["provision_state"], "manageable", "nothing changed");
    }
    let old = s
        .call(
            Method::PUT,
            &path,
            Some("1.14"),
            Some(br#"{"target": "clean", "clean_steps": []}"#.to_vec()),
        )
        .await;
    assert_eq!(old.status, StatusCode::NOT_ACCEPTABLE);
    let steps = json!([{"interface": "deploy", "step": "erase_devices_metadata"}]);
    let accepted = s
        .send(
            Method::PUT,
            &path,
            json!({"target": "clean", "clean_steps": steps}),
        )
        .await;
    assert_eq!(accepted.status, StatusCode::ACCEPTED, "{:?}", accepted.body);
    let node = s.wait_for(&uuid, "manageable").await;
    assert_eq!(node["target_provision_state"], Value::Null);
    assert_eq!(node["last_error"], Value::Null);
    // Not from available: Ironic cleans by hand only from manageable.
    s.walk(&uuid, &[("provide", "available")]).await;
    let illegal = s
        .send(
            Method::PUT,
            &path,
            json!({"target": "clean", "clean_steps": steps}),
        )
        .await;
    assert_eq!(illegal.status, StatusCode::BAD_REQUEST);
}

/// Provide cleans by default (Ironic's `automated_clean = true`): the driver's tear-down
/// runs (the fake one powers the node off). A node's own `automated_clean` wins over the
/// engine's setting, both ways.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn automated_cleaning_follows_the_node_then_the_engine() {
    async fn provided_power(s: &Server, body: Value) -> Value {
        let uuid = s.node(body).await;
        let on = json!({"target": "power on"});
        let path = format!("/v1/nodes/{uuid}/states/power");
        assert_eq!(
            s.send(Method::PUT, &path, on).await.status,
            StatusCode::ACCEPTED
        );
        // Powered on, and the power action's claim released (it records the change in
        // the node's history after the node shows it).
        let id = uuid.parse().unwrap();
        for _ in 0..200 {
            let on = s.get(&format!("/v1/nodes/{uuid}")).await.body["power_state"] == "power on";
            if on && !s.engine.conductor.is_busy(id) {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        s.walk(&uuid, &[("manage", "manageable"), ("provide", "available")])
            .await;
        s.get(&format!("/v1/nodes/{uuid}")).await.body["power_state"].clone()
    }
    let s = start(|_| {}).await;
    let cleaned = provided_power(&s, json!({"driver": "fake"})).await;
    assert_eq!(cleaned, "power off", "cleaning ran the driver's tear-down");
    let kept = provided_power(&s, json!({"driver": "fake", "automated_clean": false})).await;
    assert_eq!(kept, "power on", "no cleaning: the node was not touched");
    let s = start(|c| c.conductor.automated_clean = false).await;
    let kept = provided_power(&s, json!({"driver": "fake"})).await;
    assert_eq!(kept, "power on");
    let cleaned = provided_power(&s, json!({"driver": "fake", "automated_clean": true})).await;
    assert_eq!(cleaned, "power off");
    // Removing the field unsets it (the engine decides again), as in Ironic.
    let uuid = s
        .node(json!({"driver": "fake", "automated_clean": "false"}))
        .await;
    let unset = json!([{"op": "remove", "path": "/automated_clean"}]);
    let patched = s
        .send(Method::PATCH, &format!("/v1/nodes/{uuid}"), unset)
        .await;
    assert_eq!(patched.body["automated_clean"], Value::Null);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_local_image_is_refused_at_deploy_and_changes_nothing() {
    let s = start(|_| {}).await;
    let missing = s
        .dir
        .path()
        .join("data")
        .join("images")
        .join("no-such-os.raw");
    let missing_node = s
        .node(json!({"driver": "fake", "instance_info": {"image_source": missing.display().to_string()}}))
        .await;
    s.walk(
        &missing_node,
        &[("manage", "manageable"), ("provide", "available")],
    )
    .await;
    let refused = s.provision(&missing_node, "active").await;
    assert_eq!(refused.status, StatusCode::BAD_REQUEST);
    assert!(
        refused.fault().contains("no-such-os.raw"),
        "{}",
        refused.fault()
    );
    let node = s.get(&format!("/v1/nodes/{missing_node}")).await.body;
    assert_eq!(node["provision_state"], "available", "nothing changed");
}

/// The hardening issue's findings (file reads, connections, sizes, uploads, races).
#[path = "api/ironic_model.rs"]
mod ironic_model;

#[path = "api/allocations.rs"]
mod allocations;

#[path = "api/hardening.rs"]
mod hardening;

#[path = "api/ironic39.rs"]
mod ironic39;

#[path = "api/ironic_flows.rs"]
mod ironic_flows;

#[path = "api/inspection.rs"]
mod inspection;

#[path = "api/rescue.rs"]
mod rescue;

#[path = "api/console.rs"]
mod console;

#[path = "api/ironic_latest.rs"]
mod ironic_latest;

#[path = "api/wire.rs"]
mod wire;

#[path = "api/metrics.rs"]
mod metrics;

#[path = "api/boot.rs"]
mod boot;

#[path = "api/ironic_suite.rs"]
mod ironic_suite;
