//! Inspection over real HTTP: out of band through a Redfish BMC (a lab machine's, and
//! sushy-tools' which reports too little), in band through `POST /v1/continue_inspection`
//! (deployd's agent on a lab machine, and the endpoint's refusals and timeout), the stored
//! inspection rules running on what was found.

use deployd_test_support as common;

use common::server::start;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use super::ironic39::{provision, state_of, wait_for};

/// A lab machine of `disk_size` bytes and `memory_mb`, whose agent (a task) talks to `api`.
pub(super) async fn lab_machine(
    dir: &tempfile::TempDir,
    api: &str,
    disk_size: u64,
    memory_mb: u32,
) -> (deployd_lab::Lab, Value) {
    let args = lab_args(dir, api, disk_size, memory_mb);
    let lab = deployd_lab::Lab::start(&args, deployd_lab::AgentMode::Task)
        .await
        .unwrap();
    let info = json!({"redfish_address": format!("http://{}", lab.addr), "redfish_system_id": "machine-000"});
    (lab, info)
}

/// The lab of [`lab_machine`].
pub(super) fn lab_args(
    dir: &tempfile::TempDir,
    api: &str,
    disk_size: u64,
    memory_mb: u32,
) -> deployd_lab::LabArgs {
    let vm = deployd_lab::VmArgs {
        disk_size, // sparse
        vm_memory_mb: memory_mb,
        ..Default::default()
    };
    deployd_lab::LabArgs {
        machines: 1,
        dir: dir.path().join("lab"),
        listen: "127.0.0.1:0".parse().unwrap(),
        api_url: api.into(),
        throttle: None,
        heartbeat_interval: Some(0.2),
        agent_tasks: true,
        agent_tls: deployd_lab::TlsMode::Auto,
        ipmi_python: None,
        vm,
    }
}

/// The node's stored inventory document (`inventory`, `plugin_data`).
async fn inventory_of(s: &common::server::Server, node: &str) -> Value {
    let path = format!("/v1/nodes/{node}/inventory");
    s.at(Method::GET, &path, "1.84", None).await.body
}

/// Manages and inspects the node (which ends manageable, with no error): the node as
/// 1.115 shows it.
async fn manage_and_inspect(s: &common::server::Server, node: &str) -> Value {
    for (target, state) in [("manage", "manageable"), ("inspect", "manageable")] {
        assert_eq!(
            provision(s, node, target).await.status,
            StatusCode::ACCEPTED
        );
        wait_for(s, node, state).await;
    }
    let path = format!("/v1/nodes/{node}");
    let body = s.at(Method::GET, &path, "1.115", None).await.body;
    assert_eq!(body["last_error"], Value::Null);
    body
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
    let body = manage_and_inspect(&s, &node).await;
    assert_eq!(body["power_state"], "power off");
    let (started, finished) = (
        &body["inspection_started_at"],
        &body["inspection_finished_at"],
    );
    assert!(
        started.is_string() && finished.as_str() >= started.as_str(),
        "{started} {finished}"
    );
    let p = &body["properties"];
    assert_eq!(p["local_gb"], 5, "the agent's 6 GiB disk");
    assert_eq!(p["cpu_arch"], std::env::consts::ARCH);
    assert!(p["memory_mb"].as_u64().unwrap() > 0, "{p}");
    let inv = inventory_of(&s, &node).await;
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
    let body = manage_and_inspect(&s, &node).await;
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
    // A node of a conductor group this engine does not serve: its inventory is refused
    // (404) and acts on nothing, as any step of it would be.
    let path = format!("/v1/nodes/{node}");
    let group = |name: &str| {
        let patch = json!([{"op": "replace", "path": "/conductor_group", "value": name}]);
        s.send(Method::PATCH, &path, patch)
    };
    assert_eq!(group("elsewhere").await.status, StatusCode::OK);
    let other = post(Some("1.84"), data.clone()).await;
    assert_eq!(other.status, StatusCode::NOT_FOUND, "{:?}", other.body);
    assert!(
        other.fault().contains("conductor group"),
        "{}",
        other.fault()
    );
    assert_eq!(state_of(&s, &node).await, "inspect wait", "changed nothing");
    assert_eq!(group("").await.status, StatusCode::OK);
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
    let inv = inventory_of(&s, &node).await;
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
