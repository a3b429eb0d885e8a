//! deployd against what a real Ironic 39 answered (`ironic39-drivers.json` beside this
//! file, recorded with Ironic's default interface options): the hardware types' enabled
//! and default interfaces field by field, which interfaces a node PATCH takes or refuses
//! and in which words, and the RAID target's answers. Then the calls gophercloud's
//! acceptance suite makes that only these need: vendor passthru, servicing with Ironic's
//! built-in steps, virtual media on an ipmi node, an allocation with no node.

use deployd_test_support as common;

use common::server::{Server, start};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

const TYPES: &[&str] = &["ipmi", "redfish", "fake-hardware"];
const KINDS: &[&str] = &[
    "bios",
    "boot",
    "console",
    "deploy",
    "firmware",
    "inspect",
    "management",
    "network",
    "power",
    "raid",
    "rescue",
    "storage",
    "vendor",
];

fn reference() -> Value {
    serde_json::from_str(include_str!("ironic39-drivers.json")).unwrap()
}

/// deployd's own implementations, beside Ironic's: `fake` deploy and boot first on
/// `fake-hardware` (its fake component), `iscsi` last on real types (its pxe family),
/// `agent` inspection last everywhere.
fn with_deployds_own(hw: &str, kind: &str, ironic: &Value) -> Value {
    let mut list: Vec<Value> = ironic.as_array().unwrap().clone();
    match (hw, kind) {
        ("fake-hardware", "deploy" | "boot") => list.insert(0, json!("fake")),
        ("ipmi" | "redfish", "deploy") => list.push(json!("iscsi")),
        (_, "inspect") => list.push(json!("agent")),
        _ => {}
    }
    Value::Array(list)
}

fn own_default(hw: &str, kind: &str, ironic: &Value) -> Value {
    match (hw, kind) {
        ("fake-hardware", "deploy" | "boot") => json!("fake"),
        _ => ironic.clone(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hardware_types_enable_and_default_as_ironic_39() {
    let s = start(|_| {}).await;
    let r = reference();
    for hw in TYPES {
        let want = &r["drivers"][hw]["body"];
        let got = s
            .at(Method::GET, &format!("/v1/drivers/{hw}"), "1.115", None)
            .await
            .body;
        let create = s
            .at(
                Method::POST,
                "/v1/nodes",
                "1.115",
                Some(json!({"driver": hw})),
            )
            .await;
        assert_eq!(create.status, StatusCode::CREATED);
        for kind in KINDS {
            let enabled = format!("enabled_{kind}_interfaces");
            let default = format!("default_{kind}_interface");
            assert_eq!(
                got[&enabled],
                with_deployds_own(hw, kind, &want[&enabled]),
                "{hw} {enabled}"
            );
            assert_eq!(
                got[&default],
                own_default(hw, kind, &want[&default]),
                "{hw} {default}"
            );
            let field = format!("{kind}_interface");
            let ironic_node = &r["node_defaults"][hw]["interfaces"][&field];
            assert_eq!(
                create.body[&field],
                own_default(hw, kind, ironic_node),
                "{hw} node {field}"
            );
        }
    }
}

/// Every value Ironic's PATCH took is taken; every refusal is a 400 in Ironic's words (the
/// "Valid interfaces" list with deployd's own names added, the Python object's address
/// left out); a removed interface goes back to the type's default.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_patches_take_and_refuse_interfaces_as_ironic_39() {
    let s = start(|_| {}).await;
    let r = reference();
    for hw in TYPES {
        let node = s.node(json!({"driver": hw})).await;
        let path = format!("/v1/nodes/{node}");
        for kind in KINDS {
            let field = format!("/{kind}_interface");
            let case = &r["patch_accepts"][hw][kind];
            let set = |value: &str| {
                let op = json!([{"op": "replace", "path": field, "value": value}]);
                s.at(Method::PATCH, &path, "1.115", Some(op))
            };
            for value in case["accepted"].as_array().unwrap() {
                let value = value.as_str().unwrap();
                let a = set(value).await;
                assert_eq!(
                    a.status,
                    StatusCode::OK,
                    "{hw} {kind}={value}: {:?}",
                    a.body
                );
                assert_eq!(a.body[&field[1..]], value);
            }
            for refused in case["refused"].as_array().unwrap() {
                let value = refused["value"].as_str().unwrap();
                let a = set(value).await;
                if (matches!(*kind, "deploy" | "boot") && value == "fake")
                    || (*kind, value) == ("inspect", "agent")
                {
                    continue; // deployd's own: see `with_deployds_own`
                }
                assert_eq!(a.status, StatusCode::BAD_REQUEST, "{hw} {kind}={value}");
                let theirs = refused["faultstring"].as_str().unwrap();
                let ours = a.fault();
                match theirs.split_once(" object at 0x") {
                    // "… implementation '<…RedfishBIOS object at 0x7f…>' is not supported …"
                    Some(_) => {
                        let tail = theirs.rsplit_once("' ").unwrap().1;
                        assert!(ours.ends_with(tail), "{hw} {kind}={value}: {ours}");
                        assert!(ours.starts_with(&format!("{kind} interface implementation '")));
                    }
                    None => {
                        let (head, _) = theirs.split_once(" Valid interfaces are").unwrap();
                        assert!(ours.starts_with(head), "{hw} {kind}={value}: {ours}");
                    }
                }
            }
            let reset = json!([{"op": "remove", "path": field}]);
            let a = s.at(Method::PATCH, &path, "1.115", Some(reset)).await;
            assert_eq!(a.status, StatusCode::OK, "{hw} remove {kind}");
            let default = s
                .at(Method::GET, &format!("/v1/drivers/{hw}"), "1.115", None)
                .await
                .body[format!("default_{kind}_interface")]
            .clone();
            assert_eq!(a.body[&field[1..]], default, "{hw} {kind} reset");
        }
    }
    // The two refusals in full, as deployd words them.
    let ipmi = s.node(json!({"driver": "ipmi"})).await;
    let ipmi_path = format!("/v1/nodes/{ipmi}");
    let set = |field: &str, value: &str| {
        let op = json!([{"op": "replace", "path": field, "value": value}]);
        s.at(Method::PATCH, &ipmi_path, "1.115", Some(op))
    };
    assert_eq!(
        set("/rescue_interface", "agent").await.fault(),
        "Could not find the following interface in the 'ironic.hardware.interfaces.rescue' entrypoint: agent. Valid interfaces are ['no-rescue']."
    );
    assert_eq!(
        set("/boot_interface", "redfish-virtual-media")
            .await
            .fault(),
        "boot interface implementation 'redfish-virtual-media' is not supported by hardware type IPMIHardware."
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raid_targets_are_answered_as_ironic_39() {
    let s = start(|_| {}).await;
    let r = reference();
    let raid = &r["raid"];
    let valid = raid["ipmi_raid_agent_valid"]["request_body"].clone();
    let server = &s;
    let put = |node: &str, body: Option<Vec<u8>>| {
        let path = format!("/v1/nodes/{node}/states/raid");
        async move { server.call(Method::PUT, &path, Some("1.115"), body).await }
    };
    let bytes = |v: &Value| Some(v.to_string().into_bytes());
    // The RAID interfaces that take a target, and the default no-raid ones that do not.
    for (driver, raid_interface, status) in [
        ("ipmi", Some("agent"), StatusCode::NO_CONTENT),
        ("ipmi", None, StatusCode::NOT_FOUND),
        ("redfish", None, StatusCode::NO_CONTENT),
        ("redfish", Some("agent"), StatusCode::NO_CONTENT),
        ("fake-hardware", Some("agent"), StatusCode::NO_CONTENT),
        ("fake-hardware", None, StatusCode::NOT_FOUND),
    ] {
        let mut body = json!({"driver": driver});
        if let Some(r) = raid_interface {
            body["raid_interface"] = json!(r);
        }
        let node = s.node(body).await;
        let a = put(&node, bytes(&valid)).await;
        assert_eq!(a.status, status, "{driver} {raid_interface:?}");
        let target = &s.get(&format!("/v1/nodes/{node}")).await.body["target_raid_config"];
        if status == StatusCode::NOT_FOUND {
            assert_eq!(
                a.fault(),
                format!("Driver {driver} does not support raid (disabled or not implemented).")
            );
            assert_eq!(*target, json!({}));
        } else {
            assert_eq!(*target, valid);
        }
    }
    let node = s
        .node(json!({"driver": "ipmi", "raid_interface": "agent"}))
        .await;
    assert_eq!(
        put(&node, bytes(&valid)).await.status,
        StatusCode::NO_CONTENT
    );
    let states = s.get(&format!("/v1/nodes/{node}/states")).await.body;
    assert_eq!(states["target_raid_config"], valid);
    assert_eq!(states["raid_config"], json!({}));
    // Malformed targets: Ironic's words, and the target stays as it was.
    for (name, case) in raid["malformed_on_ipmi_raid_agent"].as_object().unwrap() {
        if name == "invalid_json" || name == "empty_object" {
            continue;
        }
        let a = put(&node, bytes(&case["request_body"])).await;
        assert_eq!(a.status, StatusCode::BAD_REQUEST, "{name}");
        assert_eq!(a.fault(), case["faultstring"].as_str().unwrap(), "{name}");
        let states = s.get(&format!("/v1/nodes/{node}/states")).await.body;
        assert_eq!(
            states["target_raid_config"], valid,
            "{name} changed nothing"
        );
    }
    let a = put(
        &node,
        Some(b"{\"logical_disks\": [ {\"size_gb\": 10,".to_vec()),
    )
    .await;
    assert_eq!(
        a.status,
        StatusCode::BAD_REQUEST,
        "not JSON: a client error here"
    );
    // {} clears it, and so does no body.
    assert_eq!(
        put(&node, bytes(&json!({}))).await.status,
        StatusCode::NO_CONTENT
    );
    let states = s.get(&format!("/v1/nodes/{node}/states")).await.body;
    assert_eq!(states["target_raid_config"], json!({}));
    assert_eq!(
        put(&node, bytes(&valid)).await.status,
        StatusCode::NO_CONTENT
    );
    assert_eq!(put(&node, None).await.status, StatusCode::NO_CONTENT);
    let states = s.get(&format!("/v1/nodes/{node}/states")).await.body;
    assert_eq!(states["target_raid_config"], json!({}));
    // A manual cleaning's RAID steps need the agent RAID interface, and creating needs a
    // target to create.
    let fake = s
        .node(json!({"driver": "fake-hardware", "raid_interface": "agent"}))
        .await;
    assert_eq!(
        provision(&s, &fake, "manage").await.status,
        StatusCode::ACCEPTED
    );
    wait_for(&s, &fake, "manageable").await;
    let clean = |step: &str| json!({"target": "clean", "clean_steps": [{"interface": "raid", "step": step}]});
    let path = format!("/v1/nodes/{fake}/states/provision");
    let a = s
        .at(
            Method::PUT,
            &path,
            "1.115",
            Some(clean("create_configuration")),
        )
        .await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST);
    assert!(
        a.fault().contains("has no target RAID configuration"),
        "{}",
        a.fault()
    );
    assert_eq!(
        put(&fake, bytes(&valid)).await.status,
        StatusCode::NO_CONTENT
    );
    let a = s
        .at(
            Method::PUT,
            &path,
            "1.115",
            Some(clean("create_configuration")),
        )
        .await;
    assert_eq!(a.status, StatusCode::ACCEPTED, "{:?}", a.body);
    wait_for(&s, &fake, "manageable").await;
    // The logical disk properties, for every type.
    for hw in TYPES {
        let a = s
            .get(&format!("/v1/drivers/{hw}/raid/logical_disk_properties"))
            .await;
        assert_eq!(a.status, StatusCode::OK);
        assert_eq!(
            a.body,
            raid["driver_logical_disk_properties"]["ipmi"]["body"]
        );
    }
}

async fn state_of(s: &Server, node: &str) -> String {
    s.get(&format!("/v1/nodes/{node}")).await.body["provision_state"]
        .as_str()
        .unwrap()
        .to_owned()
}

async fn wait_for(s: &Server, node: &str, state: &str) {
    for _ in 0..200 {
        if state_of(s, node).await == state {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    panic!("{node} never reached {state}: {}", state_of(s, node).await);
}

/// A fake node as gophercloud makes one (`boot_interface` and `deploy_interface` fake),
/// deployed.
async fn active_fake_node(s: &Server) -> String {
    let node = s
        .node(json!({"driver": "fake-hardware", "boot_interface": "fake", "deploy_interface": "fake"}))
        .await;
    for (target, state) in [
        ("manage", "manageable"),
        ("provide", "available"),
        ("active", "active"),
    ] {
        let a = s
            .at(
                Method::PUT,
                &format!("/v1/nodes/{node}/states/provision"),
                "1.87",
                Some(json!({"target": target})),
            )
            .await;
        assert_eq!(a.status, StatusCode::ACCEPTED, "{target}: {:?}", a.body);
        wait_for(s, &node, state).await;
    }
    node
}

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

/// An unknown query parameter is refused in Ironic's shape and words, on every resource.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_query_parameters_are_named_in_ironics_words() {
    let s = start(|_| {}).await;
    let node = s
        .node(json!({"driver": "fake-hardware", "name": "q1"}))
        .await;
    for path in [
        "/v1/nodes".to_owned(),
        "/v1/nodes/detail".to_owned(),
        format!("/v1/nodes/{node}"),
        format!("/v1/nodes/{node}/history"),
        "/v1/ports".to_owned(),
        "/v1/portgroups".to_owned(),
        "/v1/allocations".to_owned(),
        "/v1/chassis".to_owned(),
        "/v1/drivers".to_owned(),
        "/v1/drivers/ipmi".to_owned(),
        "/v1/conductors".to_owned(),
        "/v1/deploy_templates".to_owned(),
    ] {
        let a = s
            .at(Method::GET, &format!("{path}?bogus=1"), "1.115", None)
            .await;
        assert_eq!(a.status, StatusCode::BAD_REQUEST, "{path}");
        assert_eq!(a.headers["content-type"], "application/json", "{path}");
        assert_eq!(a.fault(), "Unknown argument: \"bogus\"", "{path}");
    }
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

async fn provision(s: &Server, node: &str, target: &str) -> common::server::Answer {
    let path = format!("/v1/nodes/{node}/states/provision");
    s.at(Method::PUT, &path, "1.115", Some(json!({"target": target})))
        .await
}

/// A lab machine of `disk_size` bytes and `memory_mb`, whose agent (a task) talks to `api`.
async fn lab_machine(
    dir: &tempfile::TempDir,
    api: &str,
    disk_size: u64,
    memory_mb: u32,
) -> (deployd_lab::Lab, Value) {
    let vm = deployd_lab::VmArgs {
        disk_size, // sparse
        vm_memory_mb: memory_mb,
        ..Default::default()
    };
    let args = deployd_lab::LabArgs {
        machines: 1,
        dir: dir.path().join("lab"),
        listen: "127.0.0.1:0".parse().unwrap(),
        api_url: api.into(),
        throttle: None,
        heartbeat_interval: Some(0.2),
        agent_tasks: true,
        agent_tls: deployd_lab::TlsMode::Auto,
        vm,
    };
    let lab = deployd_lab::Lab::start(&args, deployd_lab::AgentMode::Task)
        .await
        .unwrap();
    let info = json!({"redfish_address": format!("http://{}", lab.addr), "redfish_system_id": "machine-000"});
    (lab, info)
}

/// deployd's agent inspected in band on a lab machine: the engine boots it from the
/// network, the agent posts its inventory before lookup, the node is powered off with its
/// properties set.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deployds_agent_is_inspected_in_band_on_a_lab_machine() {
    let s = start(|_| {}).await;
    let dir = tempfile::tempdir().unwrap();
    let (lab, info) = lab_machine(&dir, &s.base, 6 << 30, 1024).await;
    let machine = lab.machines["machine-000"].clone();
    let node = s
        .node(json!({"driver": "redfish", "inspect_interface": "agent", "driver_info": info}))
        .await;
    let port = json!({"node_uuid": node, "address": machine.mac});
    assert_eq!(
        s.send(Method::POST, "/v1/ports", port).await.status,
        StatusCode::CREATED
    );
    assert_eq!(
        provision(&s, &node, "manage").await.status,
        StatusCode::ACCEPTED
    );
    wait_for(&s, &node, "manageable").await;
    assert_eq!(
        provision(&s, &node, "inspect").await.status,
        StatusCode::ACCEPTED
    );
    wait_for(&s, &node, "manageable").await;
    let body = s
        .at(Method::GET, &format!("/v1/nodes/{node}"), "1.115", None)
        .await
        .body;
    assert_eq!(body["last_error"], Value::Null);
    assert_eq!(body["power_state"], "power off");
    let p = &body["properties"];
    assert_eq!(p["local_gb"], 5, "the agent's 6 GiB disk");
    assert_eq!(p["cpu_arch"], std::env::consts::ARCH);
    assert!(p["memory_mb"].as_u64().unwrap() > 0, "{p}");
    let inv = s
        .at(
            Method::GET,
            &format!("/v1/nodes/{node}/inventory"),
            "1.84",
            None,
        )
        .await
        .body;
    assert_eq!(
        inv["inventory"]["interfaces"][0]["mac_address"],
        machine.mac.to_lowercase()
    );
    assert_eq!(machine.view().agent_boots, 1);
}

/// Redfish inspection (the `redfish` type's default inspect interface) of a lab machine:
/// its BMC's processors, memory, NIC and disk become the inventory, the properties and a
/// port.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redfish_inspection_fills_the_inventory_properties_and_ports() {
    let s = start(|_| {}).await;
    let dir = tempfile::tempdir().unwrap();
    let (lab, info) = lab_machine(&dir, "http://127.0.0.1:9", 20 << 30, 2048).await;
    let machine = lab.machines["machine-000"].clone();
    let node = s
        .node(json!({"driver": "redfish", "driver_info": info}))
        .await;
    let inventory = format!("/v1/nodes/{node}/inventory");
    assert_eq!(
        s.at(Method::GET, &inventory, "1.81", None).await.status,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        provision(&s, &node, "inspect").await.status,
        StatusCode::BAD_REQUEST,
        "from enroll"
    );
    assert_eq!(
        provision(&s, &node, "manage").await.status,
        StatusCode::ACCEPTED
    );
    wait_for(&s, &node, "manageable").await;
    assert_eq!(
        provision(&s, &node, "inspect").await.status,
        StatusCode::ACCEPTED
    );
    wait_for(&s, &node, "manageable").await;
    let body = s
        .at(Method::GET, &format!("/v1/nodes/{node}"), "1.115", None)
        .await
        .body;
    assert_eq!(body["last_error"], Value::Null);
    let p = &body["properties"];
    assert_eq!(
        (p["memory_mb"].as_u64(), p["local_gb"].as_u64()),
        (Some(2048), Some(19))
    );
    assert_eq!(p["cpu_arch"], "x86_64");
    let got = s.at(Method::GET, &inventory, "1.81", None).await;
    assert_eq!(got.status, StatusCode::OK);
    let inv = &got.body["inventory"];
    assert_eq!(
        inv["interfaces"][0]["mac_address"],
        machine.mac.to_lowercase()
    );
    assert_eq!(inv["disks"][0]["size"], 20u64 << 30);
    assert_eq!(inv["cpu"]["count"], 1);
    assert_eq!(got.body["plugin_data"], json!({}));
    let ports = s
        .get(&format!("/v1/nodes/{node}/ports?detail=True"))
        .await
        .body;
    assert_eq!(ports["ports"][0]["address"], machine.mac.to_lowercase());
    // Inspected again: the port is not made twice, the inventory is replaced.
    assert_eq!(
        provision(&s, &node, "inspect").await.status,
        StatusCode::ACCEPTED
    );
    wait_for(&s, &node, "manageable").await;
    let ports = s.get(&format!("/v1/nodes/{node}/ports")).await.body;
    assert_eq!(ports["ports"].as_array().unwrap().len(), 1);
    // Deleting the node takes its inventory with it.
    assert_eq!(
        s.send(Method::DELETE, &format!("/v1/nodes/{node}"), json!({}))
            .await
            .status,
        StatusCode::NO_CONTENT
    );
    drop(lab);
}

/// Against sushy-tools' fake driver, which reports no memory and no processors, inspection
/// fails as Ironic's does (the essential properties missing) after storing what it found;
/// a type whose inspect interface is no-inspect is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspection_without_essential_properties_fails_in_ironics_words() {
    let s = start(|_| {}).await;
    let (_sushy, base, system) = common::emulators::sushy().await;
    let info = json!({"redfish_address": base, "redfish_system_id": system});
    let node = s
        .node(json!({"driver": "redfish", "driver_info": info}))
        .await;
    assert_eq!(
        provision(&s, &node, "manage").await.status,
        StatusCode::ACCEPTED
    );
    wait_for(&s, &node, "manageable").await;
    let before = s.get(&format!("/v1/nodes/{node}")).await.body["properties"].clone();
    assert_eq!(
        provision(&s, &node, "inspect").await.status,
        StatusCode::ACCEPTED
    );
    wait_for(&s, &node, "inspect failed").await;
    let body = s.get(&format!("/v1/nodes/{node}")).await.body;
    assert_eq!(
        body["last_error"],
        format!(
            "Failed to inspect hardware. Reason: Failed to discover the following properties: memory_mb, cpu_arch on node {node}"
        )
    );
    assert_eq!(body["properties"], before, "properties unchanged");
    let inv = s
        .at(
            Method::GET,
            &format!("/v1/nodes/{node}/inventory"),
            "1.81",
            None,
        )
        .await;
    assert_eq!(inv.body["inventory"]["boot"]["current_boot_mode"], "uefi");
    assert_eq!(
        inv.body["inventory"]["interfaces"]
            .as_array()
            .unwrap()
            .len(),
        1
    );

    let ipmi = s.node(json!({"driver": "ipmi"})).await;
    let a = provision(&s, &ipmi, "inspect").await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST);
    assert_eq!(
        a.fault(),
        "Driver ipmi does not support inspect (disabled or not implemented)."
    );
}

/// In-band inspection's API: `inspect wait` after the boot, `POST /v1/continue_inspection`
/// refused unless a node waits for that inventory (and at 1.2–1.83), and a node whose
/// agent never posts fails on `inspect_wait_timeout`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_band_inspection_waits_takes_the_inventory_and_times_out() {
    let s = start(|c| {
        c.conductor.inspect_wait_timeout = 2;
        c.conductor.check_provision_state_interval = 1;
    })
    .await;
    let mac = "52:54:00:aa:00:01";
    let node = s
        .node(json!({"driver": "fake-hardware", "inspect_interface": "agent"}))
        .await;
    let port = json!({"node_uuid": node, "address": mac});
    assert_eq!(
        s.send(Method::POST, "/v1/ports", port).await.status,
        StatusCode::CREATED
    );
    let post = |version: Option<&'static str>, body: Value| {
        let s = &s;
        async move {
            s.call(
                Method::POST,
                "/v1/continue_inspection",
                version,
                Some(body.to_string().into_bytes()),
            )
            .await
        }
    };
    let data = json!({"inventory": {"interfaces": [{"mac_address": mac}], "cpu": {"count": 2, "architecture": "x86_64"},
        "memory": {"physical_mb": 4096}, "disks": [{"name": "/dev/vda", "size": 10u64 << 30}]},
        "boot_interface": mac});
    // A stored rule runs on what the inspection found.
    let rule = json!({"description": "x86 nodes are gold",
        "conditions": [{"op": "eq", "args": {"values": ["{inventory[cpu][architecture]}", "x86_64"]}}],
        "actions": [{"op": "add-trait", "args": {"name": "CUSTOM_X86"}},
                    {"op": "set-attribute", "args": {"path": "/resource_class", "value": "gold"}},
                    {"op": "set-plugin-data", "args": {"path": "rule.ran", "value": "yes"}}]});
    let created = s
        .at(Method::POST, "/v1/inspection_rules", "1.96", Some(rule))
        .await;
    assert_eq!(created.status, StatusCode::CREATED, "{:?}", created.body);
    // Not waiting yet: a 404 that says nothing more.
    assert_eq!(post(None, data.clone()).await.status, StatusCode::NOT_FOUND);
    assert_eq!(
        provision(&s, &node, "manage").await.status,
        StatusCode::ACCEPTED
    );
    wait_for(&s, &node, "manageable").await;
    assert_eq!(
        provision(&s, &node, "inspect").await.status,
        StatusCode::ACCEPTED
    );
    wait_for(&s, &node, "inspect wait").await;
    for (version, body, status) in [
        (Some("1.83"), data.clone(), StatusCode::NOT_FOUND),
        (None, json!({"inventory": {}}), StatusCode::BAD_REQUEST),
        (None, json!({"no": "inventory"}), StatusCode::BAD_REQUEST),
        (
            None,
            json!({"inventory": {"interfaces": [{"mac_address": "52:54:00:aa:00:99"}]}}),
            StatusCode::NOT_FOUND,
        ),
    ] {
        assert_eq!(
            post(version, body.clone()).await.status,
            status,
            "{version:?} {body}"
        );
        assert_eq!(state_of(&s, &node).await, "inspect wait", "changed nothing");
    }
    let a = post(Some("1.84"), data).await;
    assert_eq!(a.status, StatusCode::ACCEPTED);
    assert_eq!(a.body["uuid"], node);
    wait_for(&s, &node, "manageable").await;
    let body = s
        .at(Method::GET, &format!("/v1/nodes/{node}"), "1.115", None)
        .await
        .body;
    let p = &body["properties"];
    assert_eq!(
        (
            p["memory_mb"].as_u64(),
            p["local_gb"].as_u64(),
            p["cpu_arch"].as_str()
        ),
        (Some(4096), Some(9), Some("x86_64"))
    );
    let inv = s
        .at(
            Method::GET,
            &format!("/v1/nodes/{node}/inventory"),
            "1.84",
            None,
        )
        .await
        .body;
    assert_eq!(inv["plugin_data"]["boot_interface"], mac);
    assert_eq!(inv["plugin_data"]["rule"]["ran"], "yes");
    assert_eq!(body["resource_class"], "gold");
    assert_eq!(body["traits"], json!(["CUSTOM_X86"]));

    // Inspected again, and nobody posts: inspect failed after inspect_wait_timeout.
    assert_eq!(
        provision(&s, &node, "inspect").await.status,
        StatusCode::ACCEPTED
    );
    wait_for(&s, &node, "inspect wait").await;
    for _ in 0..200 {
        if state_of(&s, &node).await == "inspect failed" {
            let error = s.get(&format!("/v1/nodes/{node}")).await.body["last_error"].clone();
            assert!(
                error
                    .as_str()
                    .unwrap()
                    .contains("inspect_wait_timeout is 2 s"),
                "{error}"
            );
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("the inspection never timed out");
}
