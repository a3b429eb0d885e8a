//! The ramdisk agent's side of the API over real HTTP: lookup by MAC issues a token once
//! per boot; heartbeats must carry it; wrong or missing tokens change nothing; and
//! heartbeats keep a slow deploy alive far past `deploy_callback_timeout`, while a silent
//! agent's node times out.

use deployd_test_support as common;

use std::time::Duration;

use common::server::{Server, start};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

const MAC: &str = "52:54:00:12:34:56";

/// A node of the test driver that waits for its agent and keeps waiting on heartbeats.
async fn waiting_node(s: &Server) -> String {
    let uuid = s.node(json!({"driver": "test_driver", "instance_info": {"mode": "wait", "heartbeat_mode": "wait"}})).await;
    let port = s
        .send(
            Method::POST,
            "/v1/ports",
            json!({"node_uuid": uuid, "address": MAC}),
        )
        .await;
    assert_eq!(port.status, StatusCode::CREATED);
    s.walk(&uuid, Server::TO_WAIT_CALL_BACK).await;
    uuid
}

/// A waiting node whose agent looked it up: (uuid, agent token).
async fn looked_up_node(s: &Server) -> (String, String) {
    let uuid = waiting_node(s).await;
    let token = s.get(&format!("/v1/lookup?addresses={MAC}")).await.body["config"]["agent_token"]
        .as_str()
        .unwrap()
        .to_owned();
    (uuid, token)
}

async fn heartbeat(s: &Server, node: &str, token: Option<&str>) -> (StatusCode, String) {
    let mut body = json!({"callback_url": "http://127.0.0.1:9999", "agent_version": "13.0.0"});
    if let Some(t) = token {
        body["agent_token"] = json!(t);
    }
    let a = s
        .send(Method::POST, &format!("/v1/heartbeat/{node}"), body)
        .await;
    let fault = if a.status.is_success() {
        String::new()
    } else {
        a.fault()
    };
    (a.status, fault)
}

/// A heartbeat the engine took: 202, or 409 when a step held the node at that moment
/// (the heartbeat is then only recorded).
fn assert_heard(a: &common::server::Answer) {
    assert!(
        a.status.is_success() || a.status == StatusCode::CONFLICT,
        "{:?}",
        a.body
    );
}

async fn updated_at(s: &Server, node: &str) -> Value {
    s.get(&format!("/v1/nodes/{node}")).await.body["provision_updated_at"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lookup_issues_a_token_once_and_hides_unknown_and_wrong_state_nodes_alike() {
    let s = start(|_| {}).await;
    let idle = s.node(json!({"driver": "fake"})).await;
    s.send(
        Method::POST,
        "/v1/ports",
        json!({"node_uuid": idle, "address": "52:54:00:00:00:99"}),
    )
    .await;
    let uuid = waiting_node(&s).await;

    let found = s
        .get(&format!(
            "/v1/lookup?addresses=aa:bb,{}",
            MAC.to_uppercase()
        ))
        .await;
    assert_eq!(found.status, StatusCode::OK, "{:?}", found.body);
    assert_eq!(found.body["node"]["uuid"], uuid.as_str());
    let token = found.body["config"]["agent_token"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        token.len() >= 32
            && token
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'),
        "{token}"
    );
    assert_eq!(found.body["config"]["agent_token_required"], true);
    assert_eq!(found.body["config"]["heartbeat_timeout"], 300);
    let stored = s.get(&format!("/v1/nodes/{uuid}")).await.body;
    assert_eq!(
        stored["driver_internal_info"]["agent_token_hash"], "******",
        "only a masked hash is visible"
    );

    let again = s.get(&format!("/v1/lookup?node_uuid={uuid}")).await;
    assert_eq!(
        again.body["config"]["agent_token"], "******",
        "one token per boot"
    );

    let unknown = s.get("/v1/lookup?addresses=52:54:00:ff:ff:ff").await;
    let wrong_state = s.get("/v1/lookup?addresses=52:54:00:00:00:99").await;
    assert_eq!(
        (unknown.status, wrong_state.status),
        (StatusCode::NOT_FOUND, StatusCode::NOT_FOUND)
    );
    assert_eq!(
        unknown.fault().replace("52:54:00:ff:ff:ff", "X"),
        wrong_state.fault().replace("52:54:00:00:00:99", "X")
    );
    assert_eq!(s.get("/v1/lookup").await.status, StatusCode::BAD_REQUEST);
    assert_eq!(
        s.get("/v1/lookup?addresses=nonsense").await.status,
        StatusCode::BAD_REQUEST
    );
    let old = s
        .call(
            Method::GET,
            &format!("/v1/lookup?addresses={MAC}"),
            Some("1.21"),
            None,
        )
        .await;
    assert_eq!(old.status, StatusCode::NOT_FOUND, "lookup needs 1.22");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeats_without_the_right_token_are_refused_and_touch_nothing() {
    let s = start(|_| {}).await;
    let (uuid, token) = looked_up_node(&s).await;
    let before = updated_at(&s, &uuid).await;
    tokio::time::sleep(Duration::from_millis(20)).await;

    assert_eq!(
        heartbeat(&s, &uuid, None).await,
        (
            StatusCode::BAD_REQUEST,
            "Agent token is required for heartbeat processing.".into()
        )
    );
    assert_eq!(
        heartbeat(&s, &uuid, Some("wrong-token-wrong-token-wrong-token")).await,
        (
            StatusCode::BAD_REQUEST,
            "Invalid or missing agent token received.".into()
        )
    );
    let bad_url = s
        .send(
            Method::POST,
            &format!("/v1/heartbeat/{uuid}"),
            json!({"callback_url": "ftp://x", "agent_token": token, "agent_version": "1"}),
        )
        .await;
    assert_eq!(bad_url.status, StatusCode::BAD_REQUEST);
    let unknown_field = s
        .send(
            Method::POST,
            &format!("/v1/heartbeat/{uuid}"),
            json!({"callback_url": "http://x", "agent_token": token, "agent_version": "1", "x": 1}),
        )
        .await;
    assert_eq!(unknown_field.status, StatusCode::BAD_REQUEST);
    // An unknown node answers exactly as a wrong token does: no existence oracle.
    let wrong_token = heartbeat(&s, &uuid, Some("wrong-token-wrong-token-wrong-token")).await;
    for unknown in ["no-such-node", "6d3c5f0e-9a8b-4c7d-8e6f-5a4b3c2d1e0f"] {
        assert_eq!(heartbeat(&s, unknown, Some(&token)).await, wrong_token);
    }
    assert_eq!(
        updated_at(&s, &uuid).await,
        before,
        "refused heartbeats did not touch the node"
    );

    let (status, _) = heartbeat(&s, &uuid, Some(&token)).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    assert_ne!(
        updated_at(&s, &uuid).await,
        before,
        "a good heartbeat touches the node"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeats_keep_a_slow_deploy_alive_past_its_timeout_and_silence_fails_it() {
    let s = start(|c| c.conductor.deploy_callback_timeout = 1).await;
    let (uuid, token) = looked_up_node(&s).await;
    // 4 s of heartbeats every 0.3 s: four times the 1 s timeout.
    for _ in 0..13 {
        let (status, fault) = heartbeat(&s, &uuid, Some(&token)).await;
        assert!(
            status == StatusCode::ACCEPTED || status == StatusCode::CONFLICT,
            "{status} {fault}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert_eq!(
        s.get(&format!("/v1/nodes/{uuid}")).await.body["provision_state"],
        "wait call-back"
    );
    // The agent dies: timeout (1 s) + one sweep (1 s) later, the node has failed.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let node = s.get(&format!("/v1/nodes/{uuid}")).await.body;
    assert_eq!(node["provision_state"], "deploy failed");
    let error = node["last_error"].as_str().unwrap();
    assert!(
        error.contains("deploy_callback_timeout is 1 s") && error.contains(&uuid),
        "{error}"
    );
    // A late heartbeat gets a clear answer, and the token is gone with the flow.
    let (status, fault) = heartbeat(&s, &uuid, Some(&token)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{fault}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeat_lookup_is_a_read_that_changes_nothing() {
    let s = start(|_| {}).await;
    let uuid = waiting_node(&s).await;
    let first = s.get(&format!("/v1/lookup?addresses={MAC}")).await;
    assert_eq!(first.status, StatusCode::OK);
    assert_eq!(
        first.body["config"]["agent_token"].as_str().unwrap().len(),
        43
    );
    let before = s.get(&format!("/v1/nodes/{uuid}")).await.body;
    for _ in 0..50 {
        let again = s.get(&format!("/v1/lookup?addresses={MAC}")).await;
        assert_eq!(again.status, StatusCode::OK);
        assert_eq!(again.body["config"]["agent_token"], "******");
    }
    let after = s.get(&format!("/v1/nodes/{uuid}")).await.body;
    assert_eq!(after["updated_at"], before["updated_at"], "no write");
    assert_eq!(
        after["provision_updated_at"],
        before["provision_updated_at"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_scheme_host_and_port_callback_url_is_accepted() {
    let s = start(|_| {}).await;
    let (uuid, token) = looked_up_node(&s).await;
    let before = updated_at(&s, &uuid).await;
    for url in [
        "http://127.0.0.1:9999/arbitrary/path?x=1#",
        "http://127.0.0.1:9999/v1/commands",
        "http://127.0.0.1:9999/?x=1",
        "http://127.0.0.1:9999/#frag",
        "http://user:secret@127.0.0.1:9999",
        "ftp://127.0.0.1:9999",
        "not a url",
    ] {
        let a = s
            .send(
                Method::POST,
                &format!("/v1/heartbeat/{uuid}"),
                json!({"callback_url": url, "agent_token": token, "agent_version": "13.0.0"}),
            )
            .await;
        assert_eq!(a.status, StatusCode::BAD_REQUEST, "{url}");
        assert!(
            a.fault().starts_with("Invalid callback_url"),
            "{}",
            a.fault()
        );
    }
    let node = s.get(&format!("/v1/nodes/{uuid}")).await.body;
    assert_eq!(node["provision_updated_at"], before, "nothing was touched");
    assert!(
        node["driver_internal_info"]["agent_url"].is_null(),
        "nor recorded"
    );

    for (given, kept) in [
        ("http://127.0.0.1:9999/", "http://127.0.0.1:9999"),
        ("http://127.0.0.1:9998", "http://127.0.0.1:9998"),
    ] {
        let a = s
            .send(
                Method::POST,
                &format!("/v1/heartbeat/{uuid}"),
                json!({"callback_url": given, "agent_token": token, "agent_version": "13.0.0"}),
            )
            .await;
        assert!(
            a.status.is_success() || a.status == StatusCode::CONFLICT,
            "{given}: {:?}",
            a.body
        );
        let node = s.get(&format!("/v1/nodes/{uuid}")).await.body;
        assert_eq!(node["driver_internal_info"]["agent_url"], kept);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_https_agent_must_register_its_certificate_and_keep_it_for_the_boot() {
    let s = start(|_| {}).await;
    let (uuid, token) = looked_up_node(&s).await;
    let before = updated_at(&s, &uuid).await;
    let cert = deployd_agent::tls::Identity::generate("127.0.0.1")
        .unwrap()
        .pem;
    let other = deployd_agent::tls::Identity::generate("127.0.0.1")
        .unwrap()
        .pem;
    let beat = |url: &str, ca: Option<&str>| {
        let mut body =
            json!({"callback_url": url, "agent_token": token, "agent_version": "13.0.0"});
        if let Some(ca) = ca {
            body["agent_verify_ca"] = json!(ca);
        }
        body
    };
    // The boot's own heartbeat: its https url and the certificate it registers.
    let pinned_beat = || beat("https://127.0.0.1:9999", Some(&cert));
    let path = format!("/v1/heartbeat/{uuid}");
    for (body, why) in [
        (
            beat("https://127.0.0.1:9999", None),
            "must send agent_verify_ca",
        ),
        (
            beat("http://127.0.0.1:9999", Some(&cert)),
            "with an http callback_url",
        ),
        (
            beat("https://127.0.0.1:9999", Some("garbage")),
            "expected exactly one",
        ),
    ] {
        let a = s.send(Method::POST, &path, body).await;
        assert_eq!(a.status, StatusCode::BAD_REQUEST);
        assert!(a.fault().contains(why), "{}", a.fault());
    }
    assert_eq!(
        updated_at(&s, &uuid).await,
        before,
        "a refused heartbeat touches nothing"
    );

    assert_heard(&s.send(Method::POST, &path, pinned_beat()).await);
    // Later heartbeats of the boot may omit it (it stays pinned), never change it.
    let again = s
        .send(Method::POST, &path, beat("https://127.0.0.1:9999", None))
        .await;
    assert_heard(&again);
    let changed = s
        .send(
            Method::POST,
            &path,
            beat("https://127.0.0.1:9999", Some(&other)),
        )
        .await;
    assert_eq!(changed.status, StatusCode::BAD_REQUEST);
    assert!(changed.fault().contains("changed within one boot"));
    // Nor may it fall back to plain http, where the token would go out in clear text.
    let plain = s
        .send(Method::POST, &path, beat("http://127.0.0.1:9999", None))
        .await;
    assert_eq!(plain.status, StatusCode::BAD_REQUEST);
    assert!(
        plain.fault().contains("http callback_url is refused"),
        "{}",
        plain.fault()
    );
    let session = s
        .engine
        .conductor
        .agents()
        .get(uuid.parse().unwrap())
        .unwrap();
    assert_eq!(
        session.ca.map(|ca| ca.der.clone()),
        Some(deployd_engine::agent_pinning::parse_pem(&cert).unwrap())
    );
    let node = s.get(&format!("/v1/nodes/{uuid}")).await.body;
    let pin = node["driver_internal_info"]["agent_verify_ca_sha256"].clone();
    assert_eq!(pin.as_str().map(str::len), Some(64), "{node}");

    // After a restart the pin is still the boot's: another certificate, plain http, or no
    // certificate at all is refused; the registered one is accepted again.
    let s = s.restart().await;
    let path = format!("/v1/heartbeat/{uuid}");
    for (body, why) in [
        (
            beat("https://127.0.0.1:9998", Some(&other)),
            "changed within one boot",
        ),
        (
            beat("http://127.0.0.1:9998", None),
            "http callback_url is refused",
        ),
        (
            beat("https://127.0.0.1:9999", None),
            "send agent_verify_ca again",
        ),
    ] {
        let a = s.send(Method::POST, &path, body).await;
        assert_eq!(a.status, StatusCode::BAD_REQUEST, "{why}");
        assert!(a.fault().contains(why), "{}", a.fault());
    }
    assert!(
        s.engine
            .conductor
            .agents()
            .get(uuid.parse().unwrap())
            .is_none_or(|session| session.url.is_none()),
        "no refused url was recorded, so no token went to it"
    );
    assert_heard(&s.send(Method::POST, &path, pinned_beat()).await);
    let node = s.get(&format!("/v1/nodes/{uuid}")).await.body;
    assert_eq!(node["driver_internal_info"]["agent_verify_ca_sha256"], pin);
}
