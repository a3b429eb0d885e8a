//! Hardware work Ironic does for any driver, as deployd does it, over real HTTP: servicing
//! with Ironic's built-in steps, vendor passthru, virtual media (an ipmi node, and a Redfish
//! BMC in sushy-tools), and allocation failures in Ironic's words.

use deployd_test_support as common;

use common::server::start;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use super::ironic39::{active_fake_node, state_of, wait_for};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servicing_runs_ironics_built_in_steps_and_holds_until_unhold() {
    let s = start(|_| {}).await;
    let node = active_fake_node(&s).await;
    let provision_path = format!("/v1/nodes/{node}/states/provision");
    let provision = |body: Value, version: &'static str| {
        s.at(Method::PUT, &provision_path, version, Some(body))
    };
    let reboot =
        json!({"target": "service", "service_steps": [{"interface": "deploy", "step": "reboot"}]});
    assert_eq!(
        provision(reboot.clone(), "1.86").await.status,
        StatusCode::NOT_ACCEPTABLE
    );
    assert_eq!(provision(reboot, "1.87").await.status, StatusCode::ACCEPTED);
    wait_for(&s, &node, "active").await;
    let history = s
        .at(
            Method::GET,
            &format!("/v1/nodes/{node}/history"),
            "1.87",
            None,
        )
        .await;
    let events: Vec<String> = history.body["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["event"].as_str().unwrap().to_owned())
        .collect();
    assert!(
        events.iter().any(|e| e.contains("\"servicing\"")),
        "{events:?}"
    );

    // hold, then power off after unhold.
    let held = json!({"target": "service", "service_steps": [
        {"interface": "deploy", "step": "hold"},
        {"interface": "power", "step": "power_off"}]});
    assert_eq!(provision(held, "1.87").await.status, StatusCode::ACCEPTED);
    wait_for(&s, &node, "service hold").await;
    let unhold = json!({"target": "unhold"});
    assert_eq!(
        provision(unhold.clone(), "1.87").await.status,
        StatusCode::ACCEPTED
    );
    wait_for(&s, &node, "active").await;
    assert_eq!(
        s.get(&format!("/v1/nodes/{node}")).await.body["power_state"],
        "power off"
    );
    // Refused, changing nothing: unhold with nothing held, a step deployd does not have, a
    // wait no heartbeat would end, no steps.
    assert_eq!(
        provision(unhold, "1.87").await.status,
        StatusCode::BAD_REQUEST
    );
    for steps in [
        json!([{"interface": "deploy", "step": "write_image"}]),
        json!([{"interface": "deploy", "step": "wait"}]),
        json!([{"interface": "nowhere", "step": "reboot"}]),
        json!([]),
    ] {
        let a = provision(json!({"target": "service", "service_steps": steps}), "1.87").await;
        assert_eq!(a.status, StatusCode::BAD_REQUEST, "{steps}");
        assert_eq!(state_of(&s, &node).await, "active");
    }
    // A short wait runs.
    let wait = json!({"target": "service", "service_steps": [
        {"interface": "deploy", "step": "wait", "args": {"seconds": 1}}]});
    assert_eq!(provision(wait, "1.87").await.status, StatusCode::ACCEPTED);
    wait_for(&s, &node, "active").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vendor_passthru_lists_no_methods_and_refuses_calls_in_ironics_words() {
    let s = start(|_| {}).await;
    let node = s.node(json!({"driver": "fake-hardware"})).await;
    for path in [
        format!("/v1/nodes/{node}/vendor_passthru/methods"),
        "/v1/drivers/ipmi/vendor_passthru/methods".to_owned(),
    ] {
        let a = s.get(&path).await;
        assert_eq!((a.status, a.body), (StatusCode::OK, json!({})), "{path}");
    }
    for base in [
        format!("/v1/nodes/{node}/vendor_passthru"),
        "/v1/drivers/fake-hardware/vendor_passthru".to_owned(),
    ] {
        for method in [Method::POST, Method::GET, Method::DELETE] {
            let a = s
                .call(
                    method.clone(),
                    &format!("{base}?method=missing_method"),
                    Some("1.38"),
                    Some(b"{\"noop\": true}".to_vec()),
                )
                .await;
            assert_eq!(a.status, StatusCode::BAD_REQUEST, "{method} {base}");
            assert_eq!(a.fault(), "No handler for method missing_method");
        }
        let a = s.send(Method::POST, &base, json!({})).await;
        assert_eq!(a.fault(), "Method not specified");
        // The method in the path, as python-ironicclient sends it.
        let a = s
            .send(Method::POST, &format!("{base}/missing_method"), json!({}))
            .await;
        assert_eq!(
            (a.status, a.fault()),
            (
                StatusCode::BAD_REQUEST,
                "No handler for method missing_method".to_owned()
            )
        );
    }
    let a = s.get("/v1/drivers/no-such/vendor_passthru/methods").await;
    assert_eq!(a.status, StatusCode::NOT_FOUND);
    let a = s.get("/v1/nodes/no-such/vendor_passthru/methods").await;
    assert_eq!(a.status, StatusCode::NOT_FOUND);
}

/// As Ironic: attaching virtual media to an ipmi node is accepted and fails in the
/// management interface, in `last_error` and the node's history; listing it is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn virtual_media_on_an_ipmi_node_fails_where_ironic_reports_it() {
    let s = start(|_| {}).await;
    let node = s
        .node(json!({"driver": "ipmi", "boot_interface": "ipxe", "raid_interface": "agent"}))
        .await;
    let path = format!("/v1/nodes/{node}/vmedia");
    let attach = json!({"device_type": "cdrom", "image_url": "http://127.0.0.1:17"});
    let a = s.at(Method::POST, &path, "1.93", Some(attach)).await;
    assert_eq!(a.status, StatusCode::NO_CONTENT);
    let error = format!(
        "Could not attach device cdrom to node {node}: Driver ipmi does not support attach_virtual_media (disabled or not implemented)."
    );
    assert_eq!(
        s.get(&format!("/v1/nodes/{node}")).await.body["last_error"],
        error
    );
    let history = s
        .at(
            Method::GET,
            &format!("/v1/nodes/{node}/history"),
            "1.93",
            None,
        )
        .await
        .body;
    let last = history["history"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(
        (last["event"].as_str(), last["severity"].as_str()),
        (Some(error.as_str()), Some("ERROR"))
    );
    for query in ["?device_types=cdrom", ""] {
        let a = s
            .call(
                Method::DELETE,
                &format!("{path}{query}"),
                Some("1.93"),
                None,
            )
            .await;
        assert_eq!(a.status, StatusCode::NO_CONTENT, "{query}");
    }
    assert!(
        s.get(&format!("/v1/nodes/{node}")).await.body["last_error"]
            .as_str()
            .unwrap()
            .starts_with(&format!(
                "Could not detach device(s) cdrom, floppy, disk from node {node}"
            ))
    );
    let a = s.at(Method::GET, &path, "1.93", None).await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST);
    assert_eq!(
        a.fault(),
        "Driver ipmi does not support get_virtual_media (disabled or not implemented)."
    );
    let a = s
        .call(
            Method::DELETE,
            &format!("{path}?device_types=tape"),
            Some("1.93"),
            None,
        )
        .await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST);
}

/// gophercloud skips its allocation test on Ironic's words for "nothing matches".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allocations_fail_in_ironics_words() {
    let s = start(|_| {}).await;
    let settled = |uuid: String| {
        let s = &s;
        async move {
            for _ in 0..200 {
                let a = s
                    .at(
                        Method::GET,
                        &format!("/v1/allocations/{uuid}"),
                        "1.52",
                        None,
                    )
                    .await;
                if a.body["state"] != "allocating" {
                    return a.body;
                }
                tokio::time::sleep(std::time::Duration::from_millis(25)).await;
            }
            panic!("allocation {uuid} never settled");
        }
    };
    let server = &s;
    let create = |body: Value| async move {
        let a = server
            .at(Method::POST, "/v1/allocations", "1.52", Some(body))
            .await;
        assert_eq!(a.status, StatusCode::CREATED, "{:?}", a.body);
        a.body["uuid"].as_str().unwrap().to_owned()
    };
    let none = create(json!({"resource_class": "baremetal"})).await;
    let doc = settled(none.clone()).await;
    assert_eq!(doc["state"], "error");
    assert_eq!(
        doc["last_error"],
        format!(
            "Failed to process allocation {none}: no available nodes match the resource class baremetal."
        )
    );
    // An available node of the class, without the trait asked for.
    let node = active_fake_node(&s).await;
    let provision = json!({"target": "deleted"});
    s.at(
        Method::PUT,
        &format!("/v1/nodes/{node}/states/provision"),
        "1.52",
        Some(provision),
    )
    .await;
    wait_for(&s, &node, "available").await;
    let rc = json!([{"op": "add", "path": "/resource_class", "value": "gold"}]);
    assert_eq!(
        s.send(Method::PATCH, &format!("/v1/nodes/{node}"), rc)
            .await
            .status,
        StatusCode::OK
    );
    let traits = create(json!({"resource_class": "gold", "traits": ["CUSTOM_GPU"]})).await;
    assert_eq!(
        settled(traits.clone()).await["last_error"],
        format!(
            "Failed to process allocation {traits}: no suitable nodes have the requested traits CUSTOM_GPU."
        )
    );
    let named = create(json!({"resource_class": "silver", "candidate_nodes": [node]})).await;
    assert_eq!(
        settled(named.clone()).await["last_error"],
        format!(
            "Failed to process allocation {named}: none of the requested nodes are available and match the resource class silver."
        )
    );
}

/// Virtual media on a Redfish BMC (sushy-tools' emulator), as Ironic's `redfish`
/// management does it: the attach is taken at once and done in the background, the BMC
/// fetches the image and shows it inserted, a detach ejects it, and a failure (an image
/// the BMC cannot fetch) lands in `last_error` and the history.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn virtual_media_on_a_redfish_bmc_goes_through_its_virtual_media() {
    use common::emulators;
    let s = start(|_| {}).await;
    let (_sushy, base, system) = emulators::sushy().await;
    let iso = axum::Router::new().route(
        "/boot.iso",
        axum::routing::get(|| async { vec![0x42u8; 64 << 10] }),
    );
    let images = emulators::serve(iso).await;
    let image = format!("http://{images}/boot.iso");
    let node = s
        .node(json!({"driver": "redfish", "driver_info": {"redfish_address": base, "redfish_system_id": system}}))
        .await;
    let path = format!("/v1/nodes/{node}/vmedia");
    let cd = |listed: &Value| {
        listed["vmedia"]
            .as_array()
            .unwrap()
            .iter()
            .find(|d| d["media_types"].as_array().unwrap().contains(&json!("CD")))
            .cloned()
            .unwrap()
    };
    let until = |want: bool| {
        let (s, path) = (&s, &path);
        async move {
            for _ in 0..200 {
                let listed = s.at(Method::GET, path, "1.93", None).await;
                assert_eq!(listed.status, StatusCode::OK, "{:?}", listed.body);
                let device = cd(&listed.body);
                if (device["inserted"] == json!(true)) == want {
                    return device;
                }
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
            panic!("the cd never became inserted={want}");
        }
    };
    let attach = json!({"device_type": "cdrom", "image_url": image});
    let a = s.at(Method::POST, &path, "1.93", Some(attach)).await;
    assert_eq!(a.status, StatusCode::NO_CONTENT, "{:?}", a.body);
    assert_eq!(until(true).await["image"], image);
    // The BMC itself says so.
    let bmc: Value = reqwest::get(format!(
        "{base}/redfish/v1/Systems/{system}/VirtualMedia/Cd"
    ))
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    assert_eq!(
        (bmc["Image"].as_str(), bmc["Inserted"].as_bool()),
        (Some(image.as_str()), Some(true))
    );
    let a = s
        .call(
            Method::DELETE,
            &format!("{path}?device_types=cdrom"),
            Some("1.93"),
            None,
        )
        .await;
    assert_eq!(a.status, StatusCode::NO_CONTENT);
    until(false).await;
    assert_eq!(
        s.get(&format!("/v1/nodes/{node}")).await.body["last_error"],
        Value::Null
    );

    // An image the BMC cannot fetch: taken, then failed where Ironic reports it.
    let attach = json!({"device_type": "cdrom", "image_url": "http://127.0.0.1:17/none.iso"});
    assert_eq!(
        s.at(Method::POST, &path, "1.93", Some(attach)).await.status,
        StatusCode::NO_CONTENT
    );
    let prefix =
        format!("Could not attach device cdrom to node {node}: redfish insert media: BMC answered");
    for _ in 0..200 {
        let error = s.get(&format!("/v1/nodes/{node}")).await.body["last_error"].clone();
        if error.as_str().is_some_and(|e| e.starts_with(&prefix)) {
            until(false).await;
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("the failed attach was never reported");
}

/// A `redfish` node of a lab machine (its BMC the lab's): the lab, the machine, the node.
async fn redfish_lab_node(
    s: &common::server::Server,
    dir: &tempfile::TempDir,
) -> (
    deployd_lab::Lab,
    std::sync::Arc<deployd_lab::Machine>,
    String,
) {
    let (lab, info) = super::inspection::lab_machine(dir, "http://127.0.0.1:9", 1 << 20, 512).await;
    let machine = lab.machines["machine-000"].clone();
    let node = s
        .node(json!({"driver": "redfish", "driver_info": info}))
        .await;
    (lab, machine, node)
}

/// The same through the lab's BMC: the image lands in the machine's virtual CD, a detach
/// takes it out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn virtual_media_on_a_lab_machine_lands_in_its_cd() {
    let s = start(|_| {}).await;
    let dir = tempfile::tempdir().unwrap();
    let (_lab, machine, node) = redfish_lab_node(&s, &dir).await;
    let path = format!("/v1/nodes/{node}/vmedia");
    for source in ["local", "swift"] {
        let attach = json!({"device_type": "cdrom", "image_url": "http://images.example/a.iso",
                            "image_download_source": source});
        let a = s.at(Method::POST, &path, "1.93", Some(attach)).await;
        assert_eq!(a.status, StatusCode::BAD_REQUEST, "{source}");
        assert!(
            a.fault().contains("not supported by deployd"),
            "{}",
            a.fault()
        );
    }
    assert_eq!(machine.media(), None, "nothing attached");
    // The machine's CD once the background work is done.
    let cd_holds = |want: Option<&'static str>| {
        let machine = machine.clone();
        async move {
            for _ in 0..200 {
                if machine.media().as_deref() == want {
                    return;
                }
                tokio::time::sleep(std::time::Duration::from_millis(25)).await;
            }
            panic!("the CD holds {:?}, not {want:?}", machine.media());
        }
    };
    for image in [
        "http://images.example/boot.iso",
        "http://images.example/other.iso",
    ] {
        // The second over the first: ejected first, as Ironic does.
        let attach = json!({"device_type": "cdrom", "image_url": image});
        let a = s.at(Method::POST, &path, "1.93", Some(attach)).await;
        assert_eq!(a.status, StatusCode::NO_CONTENT);
        cd_holds(Some(image)).await;
        let listed = s.at(Method::GET, &path, "1.93", None).await.body;
        assert_eq!(listed["vmedia"][0]["inserted"], true);
    }
    let a = s.call(Method::DELETE, &path, Some("1.93"), None).await;
    assert_eq!(a.status, StatusCode::NO_CONTENT);
    cd_holds(None).await;
    assert_eq!(
        s.get(&format!("/v1/nodes/{node}")).await.body["last_error"],
        Value::Null
    );
}

/// Secure Boot asked of a Redfish machine its BMC shows in the bios mode: refused in words
/// (400), the BMC never told; in uefi it reaches the BMC.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secure_boot_on_a_bios_machine_is_refused_before_its_bmc_is_told() {
    let s = start(|_| {}).await;
    let dir = tempfile::tempdir().unwrap();
    let (_lab, machine, node) = redfish_lab_node(&s, &dir).await;
    let put =
        |what: &'static str, target: Value| super::ironic39::put_state(&s, &node, what, target);
    assert_eq!(
        put("boot_mode", json!("bios")).await.status,
        StatusCode::ACCEPTED
    );
    let refused = put("secure_boot", json!(true)).await;
    assert_eq!(refused.status, StatusCode::BAD_REQUEST);
    assert_eq!(
        refused.fault(),
        format!("Node {node}: secure boot needs the uefi boot mode.")
    );
    assert!(!machine.view().secure_boot, "the BMC was not told");
    assert_eq!(
        put("boot_mode", json!("uefi")).await.status,
        StatusCode::ACCEPTED
    );
    assert_eq!(
        put("secure_boot", json!(true)).await.status,
        StatusCode::ACCEPTED
    );
    assert!(machine.view().secure_boot);
}

/// Protecting a node and tearing it down, asked at the same moment, many times: one wins
/// and the other is refused, so a node is never left protected without its instance nor
/// torn down once protected (both hold the node's claim while they check and write).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protecting_a_node_and_tearing_it_down_at_once_never_both_succeed() {
    const ROUNDS: usize = 40;
    let s = start(|_| {}).await;
    let node = active_fake_node(&s).await;
    let (path, states) = (
        format!("/v1/nodes/{node}"),
        format!("/v1/nodes/{node}/states/provision"),
    );
    let (mut protected, mut torn_down) = (0, 0);
    for round in 0..ROUNDS {
        let protect = json!([{"op": "replace", "path": "/protected", "value": true}]);
        let (patch, teardown) = tokio::join!(
            s.send(Method::PATCH, &path, protect),
            s.send(Method::PUT, &states, json!({"target": "deleted"})),
        );
        let won = (patch.status, teardown.status);
        let n = match won {
            (StatusCode::OK, StatusCode::FORBIDDEN) => {
                protected += 1;
                let n = s.get(&path).await.body;
                let off = json!([{"op": "replace", "path": "/protected", "value": false}]);
                assert_eq!(
                    s.send(Method::PATCH, &path, off).await.status,
                    StatusCode::OK
                );
                n
            }
            (StatusCode::CONFLICT, StatusCode::ACCEPTED) => {
                torn_down += 1;
                let n = s.wait_for(&node, "available").await;
                s.walk(&node, &[("active", "active")]).await;
                n
            }
            other => panic!(
                "round {round}: {other:?} {:?} {:?}",
                patch.body, teardown.body
            ),
        };
        let kept = n["provision_state"] == "active";
        assert_eq!(n["protected"] == true, kept, "round {round}: {n}");
    }
    println!("{ROUNDS} rounds: protected first {protected}, torn down first {torn_down}");
}
