//! What Ironic's own API suite (ironic-tempest-plugin's `tests/api`, run whole by
//! `tests/client_suites.rs`) found deployd answering otherwise than Ironic, each as deployd
//! answers now: paths, sub-resources, microversion statuses, validation.

use deployd_test_support as common;

use common::server::start;
use reqwest::{Method, StatusCode};
use serde_json::json;

/// Every `bookmark` link is served (Ironic routes a path without its version to `/v1`),
/// and before 1.91 a `.json` suffix is stripped from the path; from 1.91 it is part of
/// the identifier.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bookmark_links_and_json_suffixes_resolve_as_ironic_routes_them() {
    let s = start(|_| {}).await;
    let node = s
        .node(json!({"driver": "fake-hardware", "name": "b1"}))
        .await;
    let shown = s.get(&format!("/v1/nodes/{node}")).await.body;
    let links = shown["links"].as_array().unwrap().clone();
    let bookmark = links.iter().find(|l| l["rel"] == "bookmark").unwrap()["href"]
        .as_str()
        .unwrap()
        .to_owned();
    let path = bookmark.strip_prefix(s.base.as_str()).unwrap();
    assert!(!path.starts_with("/v1"), "{bookmark}");
    for path in [
        path.to_owned(),
        format!("{path}/states"),
        "/nodes/detail".into(),
    ] {
        let a = s.get(&path).await;
        assert_eq!(a.status, StatusCode::OK, "{path}: {:?}", a.body);
    }
    assert_eq!(s.get(path).await.body["uuid"], node.as_str());

    let with_suffix = format!("/v1/nodes/{node}.json");
    let old = s.at(Method::GET, &with_suffix, "1.90", None).await;
    assert_eq!(old.status, StatusCode::OK, "{:?}", old.body);
    assert_eq!(old.body["uuid"], node.as_str());
    let patched = s
        .at(
            Method::PATCH,
            &with_suffix,
            "1.90",
            Some(json!([{"op": "add", "path": "/extra/k", "value": 1}])),
        )
        .await;
    assert_eq!(patched.status, StatusCode::OK, "{:?}", patched.body);
    let new = s.at(Method::GET, &with_suffix, "1.91", None).await;
    assert_eq!(new.status, StatusCode::NOT_FOUND, "{:?}", new.body);
    // Without a version header there is nothing to strip for (as in Ironic).
    let bare = s.call(Method::GET, &with_suffix, None, None).await;
    assert_eq!(bare.status, StatusCode::NOT_FOUND);
    // deployd's own roots stay where they are.
    assert_eq!(s.get("/metrics").await.status, StatusCode::OK);
}

/// The sub-resources Ironic serves under a chassis and a node, each from its version.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chassis_and_a_node_list_what_belongs_to_them() {
    let s = start(|_| {}).await;
    let chassis = s.send(Method::POST, "/v1/chassis", json!({})).await.body["uuid"]
        .as_str()
        .unwrap()
        .to_owned();
    let node = s
        .node(json!({"driver": "fake-hardware", "chassis_uuid": chassis}))
        .await;
    let other = s.node(json!({"driver": "fake-hardware"})).await;
    let listed = s.get(&format!("/v1/chassis/{chassis}/nodes")).await;
    assert_eq!(listed.status, StatusCode::OK, "{:?}", listed.body);
    let uuids: Vec<&str> = listed.body["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["uuid"].as_str().unwrap())
        .collect();
    assert_eq!(uuids, [node.as_str()], "not {other}");
    let missing = uuid::Uuid::new_v4();
    let a = s.get(&format!("/v1/chassis/{missing}/nodes")).await;
    assert_eq!(a.status, StatusCode::NOT_FOUND);

    let group = json!({"node_uuid": node, "address": "52:54:00:aa:bb:cc"});
    let a = s
        .at(Method::POST, "/v1/portgroups", "1.24", Some(group))
        .await;
    assert_eq!(a.status, StatusCode::CREATED, "{:?}", a.body);
    for (version, path, status) in [
        (
            "1.24",
            format!("/v1/nodes/{node}/portgroups"),
            StatusCode::OK,
        ),
        (
            "1.24",
            format!("/v1/nodes/{node}/portgroups/detail"),
            StatusCode::OK,
        ),
        (
            "1.23",
            format!("/v1/nodes/{node}/portgroups"),
            StatusCode::NOT_FOUND,
        ),
        ("1.32", format!("/v1/nodes/{node}/volume"), StatusCode::OK),
        (
            "1.32",
            format!("/v1/nodes/{node}/volume/connectors"),
            StatusCode::OK,
        ),
        (
            "1.32",
            format!("/v1/nodes/{node}/volume/targets"),
            StatusCode::OK,
        ),
        (
            "1.31",
            format!("/v1/nodes/{node}/volume"),
            StatusCode::NOT_FOUND,
        ),
        ("1.32", "/v1/volume".to_owned(), StatusCode::OK),
        // A node's allocation: an unknown node is a 400 there (Ironic's answer), none a 404.
        (
            "1.52",
            format!("/v1/nodes/{missing}/allocation"),
            StatusCode::BAD_REQUEST,
        ),
        (
            "1.52",
            format!("/v1/nodes/{node}/allocation"),
            StatusCode::NOT_FOUND,
        ),
        (
            "1.51",
            format!("/v1/nodes/{node}/allocation"),
            StatusCode::NOT_FOUND,
        ),
    ] {
        let a = s.at(Method::GET, &path, version, None).await;
        assert_eq!(a.status, status, "{path} at {version}: {:?}", a.body);
    }
    let groups = s
        .at(
            Method::GET,
            &format!("/v1/nodes/{node}/portgroups"),
            "1.24",
            None,
        )
        .await;
    assert_eq!(groups.body["portgroups"].as_array().unwrap().len(), 1);
    let none = s
        .at(
            Method::GET,
            &format!("/v1/nodes/{other}/portgroups"),
            "1.24",
            None,
        )
        .await;
    assert_eq!(none.body["portgroups"], json!([]));
    let index = s
        .at(
            Method::GET,
            &format!("/v1/nodes/{node}/volume"),
            "1.32",
            None,
        )
        .await;
    let href = index.body["connectors"][0]["href"].as_str().unwrap();
    assert!(
        href.ends_with(&format!("/v1/nodes/{node}/volume/connectors")),
        "{href}"
    );

    // The heartbeat naming its node in the body reaches the same checks as the other.
    let beat =
        json!({"node_ident": node, "callback_url": "http://192.0.2.1:9999", "agent_token": "x"});
    let a = s
        .at(Method::POST, "/v1/heartbeat", "1.22", Some(beat))
        .await;
    assert_ne!(a.status, StatusCode::NOT_FOUND, "{:?}", a.body);
    assert!(a.status.is_client_error(), "{:?}", a.body);
}

/// A request older than what it asks for is answered as Ironic answers it there: 404 for
/// a resource its version does not know, but 406 or 405 where Ironic's controller refuses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_older_than_its_resource_gets_ironics_status() {
    let s = start(|_| {}).await;
    let node = s.node(json!({"driver": "fake-hardware"})).await;
    let traits = format!("/v1/nodes/{node}/traits");
    let put = json!({"traits": ["CUSTOM_A"]});
    for (method, path, body, version, status) in [
        (
            Method::GET,
            traits.clone(),
            None,
            "1.36",
            StatusCode::NOT_ACCEPTABLE,
        ),
        (
            Method::PUT,
            traits.clone(),
            Some(put.clone()),
            "1.36",
            StatusCode::METHOD_NOT_ALLOWED,
        ),
        (
            Method::PUT,
            format!("{traits}/CUSTOM_A"),
            None,
            "1.36",
            StatusCode::METHOD_NOT_ALLOWED,
        ),
        (
            Method::DELETE,
            traits.clone(),
            None,
            "1.36",
            StatusCode::NOT_FOUND,
        ),
        (
            Method::PUT,
            traits.clone(),
            Some(put),
            "1.37",
            StatusCode::NO_CONTENT,
        ),
        (
            Method::POST,
            "/v1/allocations".into(),
            Some(json!({"resource_class": "x"})),
            "1.51",
            StatusCode::METHOD_NOT_ALLOWED,
        ),
        (
            Method::GET,
            "/v1/allocations".into(),
            None,
            "1.51",
            StatusCode::NOT_FOUND,
        ),
        (
            Method::DELETE,
            "/v1/deploy_templates/t".into(),
            None,
            "1.54",
            StatusCode::METHOD_NOT_ALLOWED,
        ),
        (
            Method::DELETE,
            "/v1/portgroups/p".into(),
            None,
            "1.22",
            StatusCode::NOT_FOUND,
        ),
        (
            Method::PUT,
            format!("/v1/nodes/{node}/states/raid"),
            Some(json!({})),
            "1.11",
            StatusCode::NOT_ACCEPTABLE,
        ),
        (
            Method::GET,
            "/v1/drivers/fake-hardware/raid/logical_disk_properties".into(),
            None,
            "1.11",
            StatusCode::NOT_ACCEPTABLE,
        ),
        (
            Method::PUT,
            format!("/v1/nodes/{node}/vmedia"),
            Some(json!({})),
            "1.88",
            StatusCode::NOT_FOUND,
        ),
        (
            Method::PUT,
            format!("/v1/nodes/{node}/vmedia"),
            Some(json!({})),
            "1.89",
            StatusCode::METHOD_NOT_ALLOWED,
        ),
        // Resources named only by uuid: anything else is malformed, not missing.
        (
            Method::GET,
            "/v1/volume/connectors/not-a-uuid".into(),
            None,
            "1.32",
            StatusCode::BAD_REQUEST,
        ),
        (
            Method::GET,
            "/v1/chassis/not-a-uuid".into(),
            None,
            "1.32",
            StatusCode::BAD_REQUEST,
        ),
    ] {
        let a = s.at(method.clone(), &path, version, body).await;
        assert_eq!(
            a.status, status,
            "{method} {path} at {version}: {:?}",
            a.body
        );
    }
}

/// fake-hardware's fake interfaces do what Ironic's do: the console is enabled and
/// disabled (and read back), the boot device is set and read, inspection ends at once,
/// a RAID target is taken; a node without them refuses in Ironic's words.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fake_hardware_consoles_boot_devices_and_inspection_as_ironics_fakes() {
    let s = start(|_| {}).await;
    let node = s.node(json!({"driver": "fake-hardware"})).await;
    let shown = s.get(&format!("/v1/nodes/{node}")).await.body;
    for kind in ["bios", "console", "inspect", "raid", "vendor"] {
        assert_eq!(shown[format!("{kind}_interface")], "fake", "{kind}");
    }
    let console = format!("/v1/nodes/{node}/states/console");
    let a = s.get(&console).await;
    assert_eq!(
        a.body,
        json!({"console_enabled": false, "console_info": null})
    );
    let a = s
        .send(Method::PUT, &console, json!({"enabled": true}))
        .await;
    assert_eq!(a.status, StatusCode::ACCEPTED, "{:?}", a.body);
    assert_eq!(s.get(&console).await.body["console_enabled"], true);
    assert_eq!(
        s.get(&format!("/v1/nodes/{node}")).await.body["console_enabled"],
        true
    );
    let a = s.get(&format!("/v1/nodes/states/console/{node}")).await;
    assert_eq!(a.body["console_enabled"], true, "{:?}", a.body);

    let boot = format!("/v1/nodes/{node}/management/boot_device");
    assert_eq!(
        s.get(&format!("{boot}/supported")).await.body,
        json!({"supported_boot_devices": ["pxe"]})
    );
    let a = s
        .send(Method::PUT, &boot, json!({"boot_device": "disk"}))
        .await;
    assert_eq!(
        a.status,
        StatusCode::BAD_REQUEST,
        "the fake sets pxe only: {:?}",
        a.body
    );
    let a = s
        .send(
            Method::PUT,
            &boot,
            json!({"boot_device": "pxe", "persistent": true}),
        )
        .await;
    assert_eq!(a.status, StatusCode::NO_CONTENT, "{:?}", a.body);
    assert_eq!(
        s.get(&boot).await.body,
        json!({"boot_device": "pxe", "persistent": true})
    );

    s.walk(
        &node,
        &[("manage", "manageable"), ("inspect", "manageable")],
    )
    .await;
    let n = s.get(&format!("/v1/nodes/{node}")).await.body;
    assert!(n["inspection_finished_at"].is_string(), "{n}");

    // No console at all: Ironic's refusal, nothing recorded.
    let bare = s
        .node(json!({"driver": "fake-hardware", "console_interface": "no-console"}))
        .await;
    let path = format!("/v1/nodes/{bare}/states/console");
    let a = s.send(Method::PUT, &path, json!({"enabled": true})).await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST);
    assert!(
        a.fault().contains("does not support console"),
        "{}",
        a.fault()
    );

    // A new driver keeps the interfaces the patch does not name, and they must suit it
    // (ipmi has no fake console); with ?reset_interfaces=true its defaults replace them.
    let to_ipmi = json!([{"op": "replace", "path": "/driver", "value": "ipmi"}]);
    let path = format!("/v1/nodes/{node}");
    let a = s
        .at(Method::PATCH, &path, "1.45", Some(to_ipmi.clone()))
        .await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST, "{:?}", a.body);
    assert_eq!(s.get(&path).await.body["driver"], "fake-hardware");
    let reset = format!("{path}?reset_interfaces=true");
    let a = s
        .at(Method::PATCH, &reset, "1.44", Some(to_ipmi.clone()))
        .await;
    assert_eq!(a.status, StatusCode::NOT_ACCEPTABLE);
    let a = s.at(Method::PATCH, &reset, "1.45", Some(to_ipmi)).await;
    assert_eq!(a.status, StatusCode::OK, "{:?}", a.body);
    assert_eq!(a.body["console_interface"], "no-console");
}

/// An allocation that names a deployed node (1.58) records it at once, as Ironic's
/// backfill does; a node that does not fit is refused and keeps what it had.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_allocation_backfills_a_deployed_node_that_fits_it() {
    let s = start(|_| {}).await;
    let node = super::ironic39::active_fake_node(&s).await;
    let path = format!("/v1/nodes/{node}");
    let class = json!([{"op": "add", "path": "/resource_class", "value": "gold"}]);
    assert_eq!(
        s.send(Method::PATCH, &path, class).await.status,
        StatusCode::OK
    );
    let wrong = json!({"node": node, "resource_class": "silver"});
    let a = s
        .at(Method::POST, "/v1/allocations", "1.58", Some(wrong))
        .await;
    assert_eq!(a.body["state"], "error", "{:?}", a.body);
    assert!(
        a.body["last_error"]
            .as_str()
            .unwrap()
            .contains("does not match")
    );
    assert_eq!(
        s.get(&path).await.body["allocation_uuid"],
        serde_json::Value::Null
    );

    let backfill = |version: &'static str| {
        s.at(
            Method::POST,
            "/v1/allocations",
            version,
            Some(json!({"node": node})),
        )
    };
    let a = backfill("1.57").await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST, "'node' came with 1.58");
    let a = backfill("1.58").await;
    assert_eq!(a.status, StatusCode::CREATED, "{:?}", a.body);
    assert_eq!(
        (&a.body["state"], &a.body["resource_class"]),
        (&json!("active"), &json!("gold"))
    );
    assert_eq!(a.body["node_uuid"], node.as_str());
    assert!(
        a.body.get("node").is_none(),
        "the input is not shown: {:?}",
        a.body
    );
    let uuid = a.body["uuid"].clone();
    assert_eq!(s.get(&path).await.body["allocation_uuid"], uuid);
    let held = s
        .at(Method::GET, &format!("{path}/allocation"), "1.58", None)
        .await;
    assert_eq!(held.body["uuid"], uuid);

    // A second backfill of the same node is refused: the node keeps the first.
    let a = backfill("1.58").await;
    assert_eq!(a.body["state"], "error", "{:?}", a.body);
    assert_eq!(s.get(&path).await.body["allocation_uuid"], uuid);
    let a = s
        .at(Method::DELETE, &format!("{path}/allocation"), "1.58", None)
        .await;
    assert_eq!(a.status, StatusCode::NO_CONTENT, "{:?}", a.body);
    assert_eq!(
        s.get(&path).await.body["allocation_uuid"],
        serde_json::Value::Null
    );
}

/// A node's volume is changed only powered off, ports of a group share a network, and a
/// port is named by uuid or name only: each refusal in Ironic's status, nothing changed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn volumes_and_port_groups_keep_ironics_rules() {
    let s = start(|_| {}).await;
    let node = s.node(json!({"driver": "fake-hardware"})).await;
    let power = format!("/v1/nodes/{node}/states/power");
    let connector = json!({"node_uuid": node, "type": "iqn", "connector_id": "iqn.2026-12.x"});
    let a = s
        .at(
            Method::POST,
            "/v1/volume/connectors",
            "1.32",
            Some(connector.clone()),
        )
        .await;
    assert_eq!(a.status, StatusCode::CREATED, "{:?}", a.body);
    let path = format!("/v1/volume/connectors/{}", a.body["uuid"].as_str().unwrap());
    let again = s
        .at(
            Method::POST,
            "/v1/volume/connectors",
            "1.32",
            Some(connector),
        )
        .await;
    assert_eq!(again.status, StatusCode::CONFLICT);
    assert!(
        again.fault().starts_with("A volume connector with"),
        "{}",
        again.fault()
    );

    assert_eq!(
        s.send(Method::PUT, &power, json!({"target": "power on"}))
            .await
            .status,
        StatusCode::ACCEPTED
    );
    for _ in 0..100 {
        if s.get(&format!("/v1/nodes/{node}")).await.body["power_state"] == "power on" {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let patch = json!([{"op": "replace", "path": "/connector_id", "value": "iqn.2026-12.y"}]);
    let a = s.at(Method::PATCH, &path, "1.32", Some(patch)).await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST);
    assert!(
        a.fault().contains("\"volume connector update\""),
        "{}",
        a.fault()
    );
    // In enroll (a state a node is deleted from) it may go although powered on.
    let a = s.at(Method::DELETE, &path, "1.32", None).await;
    assert_eq!(a.status, StatusCode::NO_CONTENT, "{:?}", a.body);

    let group = s
        .at(
            Method::POST,
            "/v1/portgroups",
            "1.34",
            Some(json!({"node_uuid": node})),
        )
        .await
        .body["uuid"]
        .clone();
    let mut last = None;
    // Joining a group on another network is refused; on the group's own it is taken.
    for (mac, network, status) in [
        ("52:54:00:00:01:01", "physnet1", StatusCode::CREATED),
        ("52:54:00:00:01:02", "physnet2", StatusCode::CONFLICT),
        ("52:54:00:00:01:02", "physnet1", StatusCode::CREATED),
    ] {
        let port = json!({"node_uuid": node, "address": mac, "portgroup_uuid": group, "physical_network": network});
        let a = s.at(Method::POST, "/v1/ports", "1.34", Some(port)).await;
        assert_eq!(a.status, status, "{mac} on {network}: {:?}", a.body);
        last = Some(a.body["uuid"].clone());
    }
    let a_uuid = last.unwrap();
    let twin = json!({"node_uuid": node, "address": "52:54:00:00:01:03", "uuid": a_uuid});
    let a = s.at(Method::POST, "/v1/ports", "1.34", Some(twin)).await;
    assert_eq!(
        a.status,
        StatusCode::CONFLICT,
        "a second port of one uuid: {:?}",
        a.body
    );
    for ident in ["52:54:00:00:01:01", "malformed:uuid"] {
        let a = s.get(&format!("/v1/ports/{ident}")).await;
        assert_eq!(a.status, StatusCode::BAD_REQUEST, "{ident}");
    }

    for (query, status) in [
        ("fault=somefake", StatusCode::BAD_REQUEST),
        ("fault=power%20failure", StatusCode::OK),
    ] {
        let a = s
            .at(Method::GET, &format!("/v1/nodes?{query}"), "1.42", None)
            .await;
        assert_eq!(a.status, status, "{query}");
    }
}

/// A body that says it is not JSON is refused with Ironic's 415 and creates nothing; a
/// driver upload (bytes) is not held to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_declared_as_other_than_json_is_refused() {
    let s = start(|_| {}).await;
    let body = json!({"driver": "fake-hardware", "name": "plain"}).to_string();
    let sent = s
        .http
        .post(format!("{}/v1/nodes", s.base))
        .header("Content-Type", "text/plain")
        .header("X-OpenStack-Ironic-API-Version", "1.115")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(sent.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);
    assert_eq!(s.get("/v1/nodes/plain").await.status, StatusCode::NOT_FOUND);
    // JSON however it is spelled is taken.
    let body = json!({"driver": "fake-hardware", "name": "spelled"}).to_string();
    let sent = s
        .http
        .post(format!("{}/v1/nodes", s.base))
        .header("Content-Type", "Application/JSON; charset=utf-8")
        .header("X-OpenStack-Ironic-API-Version", "1.115")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(sent.status(), StatusCode::CREATED);
    let charset = s
        .http
        .get(format!("{}/v1/nodes", s.base))
        .header("Content-Type", "text/plain")
        .send()
        .await
        .unwrap();
    assert_eq!(
        charset.status(),
        StatusCode::OK,
        "a read has no body to refuse"
    );
}

/// Without a configured `public_url`, links name the engine as the request did (its
/// `Host`), as Ironic builds them; a `Host` that is not a plain host and port is ignored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn links_follow_the_host_a_client_used_unless_public_url_is_set() {
    let s = start(|_| {}).await;
    s.node(json!({"driver": "fake-hardware", "name": "h1"}))
        .await;
    for (host, base) in [
        ("api.example:6385", "http://api.example:6385".to_owned()),
        ("evil.example/x?", s.base.clone()),
    ] {
        let answer = s
            .http
            .get(format!("{}/v1/nodes?limit=1", s.base))
            .header("host", host)
            .header("X-OpenStack-Ironic-API-Version", "1.67")
            .send()
            .await
            .unwrap();
        let body: serde_json::Value = answer.json().await.unwrap();
        let link = body["nodes"][0]["links"][0]["href"].as_str().unwrap();
        assert!(
            link.starts_with(&format!("{base}/v1/nodes/")),
            "{host}: {link}"
        );
        let next = body["next"].as_str().unwrap();
        assert!(
            next.starts_with(&format!("{base}/v1/nodes?")),
            "{host}: {next}"
        );
    }
}
