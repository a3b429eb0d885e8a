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

/// The kinds whose `fake` interface `fake-hardware` enables first and defaults to beyond
/// Ironic's default options: deployd's fake component's deploy and boot, and Ironic's
/// fake interfaces a devstack enables.
const FAKES: &[&str] = &[
    "deploy", "boot", "bios", "console", "inspect", "raid", "vendor",
];

/// deployd's own implementations, beside Ironic's: `fake` first on `fake-hardware` (see
/// [`FAKES`]), `iscsi` last on real types (its pxe family), `agent` inspection last
/// everywhere, and UEFI HTTP boot (`http-ipxe`, which this Ironic did not enable) last on
/// `redfish`.
fn with_deployds_own(hw: &str, kind: &str, ironic: &Value) -> Value {
    let mut list: Vec<Value> = ironic.as_array().unwrap().clone();
    if hw == "fake-hardware" && FAKES.contains(&kind) {
        list.insert(0, json!("fake"));
    }
    match (hw, kind) {
        ("ipmi" | "redfish", "deploy") => list.push(json!("iscsi")),
        (_, "inspect") => list.push(json!("agent")),
        ("redfish", "boot") => list.push(json!("http-ipxe")),
        _ => {}
    }
    Value::Array(list)
}

fn own_default(hw: &str, kind: &str, ironic: &Value) -> Value {
    match (hw, kind) {
        ("fake-hardware", k) if FAKES.contains(&k) => json!("fake"),
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
                if (FAKES.contains(kind) && value == "fake")
                    || (*kind, value) == ("inspect", "agent")
                    || (*kind, value) == ("boot", "http-ipxe")
                {
                    // deployd's own (see `with_deployds_own`); IPMI cannot boot it.
                    if *hw == "ipmi" && value == "http-ipxe" {
                        assert_eq!(a.status, StatusCode::BAD_REQUEST, "{hw} {kind}={value}");
                    }
                    continue;
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
    // The RAID interfaces that take a target (fake-hardware's default: the fake one), and
    // the default no-raid ones that do not.
    for (driver, raid_interface, status) in [
        ("ipmi", Some("agent"), StatusCode::NO_CONTENT),
        ("ipmi", None, StatusCode::NOT_FOUND),
        ("redfish", None, StatusCode::NO_CONTENT),
        ("redfish", Some("agent"), StatusCode::NO_CONTENT),
        ("fake-hardware", Some("agent"), StatusCode::NO_CONTENT),
        ("fake-hardware", None, StatusCode::NO_CONTENT),
        ("fake-hardware", Some("no-raid"), StatusCode::NOT_FOUND),
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

pub(super) async fn state_of(s: &Server, node: &str) -> String {
    s.get(&format!("/v1/nodes/{node}")).await.body["provision_state"]
        .as_str()
        .unwrap()
        .to_owned()
}

pub(super) async fn wait_for(s: &Server, node: &str, state: &str) {
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
pub(super) async fn active_fake_node(s: &Server) -> String {
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

/// `PUT /v1/nodes/{node}/states/{what}` with `{"target": target}` at 1.76 (boot mode,
/// Secure Boot).
pub(super) async fn put_state(
    s: &Server,
    node: &str,
    what: &str,
    target: Value,
) -> common::server::Answer {
    let path = format!("/v1/nodes/{node}/states/{what}");
    s.at(Method::PUT, &path, "1.76", Some(json!({"target": target})))
        .await
}

pub(super) async fn provision(s: &Server, node: &str, target: &str) -> common::server::Answer {
    let path = format!("/v1/nodes/{node}/states/provision");
    s.at(Method::PUT, &path, "1.115", Some(json!({"target": target})))
        .await
}

/// gophercloud's baremetal acceptance suite, replayed call by call at its microversions
/// with the status codes it accepts (`OkCodes`): its ipmi node (`raid_interface` agent), its
/// fake node (fake boot and deploy), maintenance, fields, RAID, firmware, virtual media,
/// servicing, VIFs, vendor passthru, ports, port groups, conductors and allocations.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gophercloud_acceptance_flows_answer_as_its_suite_expects() {
    let s = start(|_| {}).await;
    let call = |method: Method, path: String, version: &'static str, body: Option<Value>| {
        let s = &s;
        async move { s.at(method, &path, version, body).await }
    };
    // A call the suite makes, answered with the status it accepts.
    let expect = |method: Method,
                  path: String,
                  version: &'static str,
                  body: Option<Value>,
                  status: StatusCode| {
        let s = &s;
        async move {
            let a = s.at(method.clone(), &path, version, body).await;
            assert_eq!(a.status, status, "{method} {path}: {:?}", a.body);
        }
    };
    let info = json!({"ipmi_port": "6230", "ipmi_username": "admin", "ipmi_address": "192.168.122.1",
        "ipmi_password": "admin", "deploy_kernel": "http://172.22.0.1/images/k", "deploy_ramdisk": "http://172.22.0.1/images/r"});
    // CreateNode
    let node = call(Method::POST, "/v1/nodes".into(), "1.38", Some(json!({"name": "ACPTTESTipmi",
        "driver": "ipmi", "boot_interface": "ipxe", "raid_interface": "agent", "driver_info": info}))).await;
    assert_eq!(node.status, StatusCode::CREATED, "{:?}", node.body);
    assert_eq!(
        (
            node.body["boot_interface"].as_str(),
            node.body["raid_interface"].as_str()
        ),
        (Some("ipxe"), Some("agent"))
    );
    let ipmi = node.body["uuid"].as_str().unwrap().to_owned();
    // TestNodesFields
    let listed = call(
        Method::GET,
        "/v1/nodes?fields=uuid,deploy_interface".into(),
        "1.38",
        None,
    )
    .await
    .body;
    let first = &listed["nodes"][0];
    assert!(
        first["deploy_interface"].is_string() && first.get("boot_interface").is_none(),
        "{first}"
    );
    // TestNodesUpdate, TestNodesMaintenance
    let op = json!([{"op": "replace", "path": "/maintenance", "value": "true"}]);
    let updated = call(Method::PATCH, format!("/v1/nodes/{ipmi}"), "1.38", Some(op)).await;
    assert_eq!(
        (updated.status, updated.body["maintenance"].clone()),
        (StatusCode::OK, json!(true))
    );
    let m = format!("/v1/nodes/{ipmi}/maintenance");
    expect(
        Method::PUT,
        m.clone(),
        "1.38",
        Some(json!({"reason": "I'm tired"})),
        StatusCode::ACCEPTED,
    )
    .await;
    assert_eq!(
        call(Method::GET, format!("/v1/nodes/{ipmi}"), "1.38", None)
            .await
            .body["maintenance_reason"],
        "I'm tired"
    );
    expect(
        Method::DELETE,
        m.clone(),
        "1.38",
        None,
        StatusCode::ACCEPTED,
    )
    .await;
    assert_eq!(
        call(Method::GET, format!("/v1/nodes/{ipmi}"), "1.38", None)
            .await
            .body["maintenance_reason"],
        Value::Null
    );
    // TestNodesRAIDConfig
    for config in [
        json!({"logical_disks": [{"size_gb": 100, "is_root_volume": true, "raid_level": "5", "controller": "software",
            "physical_disks": [{"size": "> 100"}, {"size": "> 100"}]}]}),
        json!({"logical_disks": [{"size_gb": 100, "is_root_volume": true, "raid_level": "5", "disk_type": "hdd",
            "number_of_physical_disks": 5}]}),
    ] {
        let a = call(
            Method::PUT,
            format!("/v1/nodes/{ipmi}/states/raid"),
            "1.50",
            Some(config),
        )
        .await;
        assert_eq!(a.status, StatusCode::NO_CONTENT, "{:?}", a.body);
    }
    // TestNodesFirmwareInterface
    assert_eq!(
        call(Method::GET, format!("/v1/nodes/{ipmi}"), "1.86", None)
            .await
            .body["firmware_interface"],
        "no-firmware"
    );
    assert_eq!(
        call(
            Method::GET,
            format!("/v1/nodes/{ipmi}/firmware"),
            "1.86",
            None
        )
        .await
        .body,
        json!({"firmware": []})
    );
    // TestNodesVirtualMedia
    let vmedia = format!("/v1/nodes/{ipmi}/vmedia");
    let attach = json!({"device_type": "cdrom", "image_url": "http://127.0.0.1:17"});
    expect(
        Method::POST,
        vmedia.clone(),
        "1.93",
        Some(attach),
        StatusCode::NO_CONTENT,
    )
    .await;
    expect(
        Method::DELETE,
        format!("{vmedia}?device_types=cdrom"),
        "1.93",
        None,
        StatusCode::NO_CONTENT,
    )
    .await;
    expect(Method::DELETE, vmedia, "1.93", None, StatusCode::NO_CONTENT).await;
    // TestNodesVirtualInterfaces
    let vifs = format!("/v1/nodes/{ipmi}/vifs");
    assert_eq!(
        call(Method::GET, vifs.clone(), "1.38", None).await.body,
        json!({"vifs": []})
    );
    let vif = "1974dcfa-836f-41b2-b541-686c100900e5";
    call(Method::POST, vifs.clone(), "1.38", Some(json!({"id": vif}))).await;
    call(Method::DELETE, format!("{vifs}/{vif}"), "1.38", None).await;
    assert_eq!(
        call(Method::GET, vifs, "1.38", None).await.body,
        json!({"vifs": []})
    );
    // DeleteNode: maintenance, then delete.
    expect(
        Method::PUT,
        m,
        "1.38",
        Some(json!({"reason": "forced deletion"})),
        StatusCode::ACCEPTED,
    )
    .await;
    expect(
        Method::DELETE,
        format!("/v1/nodes/{ipmi}"),
        "1.38",
        None,
        StatusCode::NO_CONTENT,
    )
    .await;

    // CreateFakeNode, DeployFakeNode, TestNodesServicingHold
    let fake = call(
        Method::POST,
        "/v1/nodes".into(),
        "1.87",
        Some(json!({"name": "ACPTTESTfake",
        "driver": "fake-hardware", "boot_interface": "fake", "deploy_interface": "fake"})),
    )
    .await;
    assert_eq!(fake.status, StatusCode::CREATED, "{:?}", fake.body);
    assert_eq!(fake.body["provision_state"], "enroll");
    let fake = fake.body["uuid"].as_str().unwrap().to_owned();
    let states = format!("/v1/nodes/{fake}/states/provision");
    for (target, state) in [
        ("manage", "manageable"),
        ("provide", "available"),
        ("active", "active"),
    ] {
        let a = call(
            Method::PUT,
            states.clone(),
            "1.87",
            Some(json!({"target": target})),
        )
        .await;
        assert_eq!(a.status, StatusCode::ACCEPTED, "{target}");
        wait_for(&s, &fake, state).await;
    }
    let service =
        json!({"target": "service", "service_steps": [{"interface": "deploy", "step": "reboot"}]});
    expect(
        Method::PUT,
        states,
        "1.87",
        Some(service),
        StatusCode::ACCEPTED,
    )
    .await;
    wait_for(&s, &fake, "active").await;
    // TestVendorPassthruMethods
    let methods = call(
        Method::GET,
        format!("/v1/nodes/{fake}/vendor_passthru/methods"),
        "1.38",
        None,
    )
    .await;
    assert_eq!(methods.status, StatusCode::OK);
    let missing = call(
        Method::POST,
        format!("/v1/nodes/{fake}/vendor_passthru?method=gophercloud_acceptance_missing_method"),
        "1.38",
        Some(json!({"noop": true})),
    )
    .await;
    assert!(!matches!(missing.status.as_u16(), 200 | 202 | 204));
    let drivers = call(Method::GET, "/v1/drivers".into(), "1.38", None)
        .await
        .body;
    let first = drivers["drivers"][0]["name"].as_str().unwrap().to_owned();
    expect(
        Method::GET,
        format!("/v1/drivers/{first}/vendor_passthru/methods"),
        "1.38",
        None,
        StatusCode::OK,
    )
    .await;
    let missing = call(
        Method::POST,
        format!("/v1/drivers/{first}/vendor_passthru?method=gophercloud_acceptance_missing_method"),
        "1.38",
        Some(json!({"noop": true})),
    )
    .await;
    assert!(!matches!(missing.status.as_u16(), 200 | 202 | 204));
    // TestPortsCreateDestroy, TestPortsUpdate, TestPortGroupsCreateDestroy
    let port = call(
        Method::POST,
        "/v1/ports".into(),
        "1.53",
        Some(json!({"node_uuid": fake, "address": "e6:72:1f:52:00:f4", "pxe_enabled": true})),
    )
    .await;
    assert_eq!(port.status, StatusCode::CREATED, "{:?}", port.body);
    let port = port.body["uuid"].as_str().unwrap().to_owned();
    let op = json!([{"op": "replace", "path": "/address", "value": "aa:bb:cc:dd:ee:ff"}]);
    assert_eq!(
        call(Method::PATCH, format!("/v1/ports/{port}"), "1.53", Some(op))
            .await
            .body["address"],
        "aa:bb:cc:dd:ee:ff"
    );
    expect(
        Method::DELETE,
        format!("/v1/ports/{port}"),
        "1.53",
        None,
        StatusCode::NO_CONTENT,
    )
    .await;
    let group = call(
        Method::POST,
        "/v1/portgroups".into(),
        "1.50",
        Some(json!({"name": "ACPTTESTpg", "node_uuid": fake})),
    )
    .await;
    assert_eq!(
        (group.status, group.body["node_uuid"].as_str()),
        (StatusCode::CREATED, Some(fake.as_str()))
    );
    let listed = call(
        Method::GET,
        format!("/v1/portgroups?node={fake}"),
        "1.50",
        None,
    )
    .await
    .body;
    assert_eq!(listed["portgroups"][0]["uuid"], group.body["uuid"]);
    // TestConductorsListAndGet
    let conductors = call(Method::GET, "/v1/conductors".into(), "1.49", None)
        .await
        .body;
    let host = conductors["conductors"][0]["hostname"]
        .as_str()
        .unwrap()
        .to_owned();
    expect(
        Method::GET,
        format!("/v1/conductors/{host}"),
        "1.49",
        None,
        StatusCode::OK,
    )
    .await;
    // TestAllocationsCreateDestroy, TestAllocationsGetDeleteByNode (skipped on Ironic's words)
    let a = call(
        Method::POST,
        "/v1/allocations".into(),
        "1.52",
        Some(json!({"name": "ACPTTESTa", "resource_class": "baremetal"})),
    )
    .await;
    assert_eq!(
        (a.status, a.body["resource_class"].as_str()),
        (StatusCode::CREATED, Some("baremetal"))
    );
    let uuid = a.body["uuid"].as_str().unwrap().to_owned();
    for _ in 0..200 {
        let got = call(Method::GET, format!("/v1/allocations/{uuid}"), "1.52", None)
            .await
            .body;
        if got["state"] == "error" {
            assert!(
                got["last_error"]
                    .as_str()
                    .unwrap()
                    .contains("no available nodes match the resource class")
            );
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    expect(
        Method::DELETE,
        format!("/v1/allocations/{uuid}"),
        "1.52",
        None,
        StatusCode::NO_CONTENT,
    )
    .await;
}
