//! The bundled hardware drivers, each through its whole deploy against real peers on
//! loopback: the real BMC emulators (sushy-tools' Redfish, pyghmi's IPMI fakebmc driven by
//! the real ipmitool), deployd's agent command API writing to a disk file, and an image
//! server. Heartbeats come from the test, as an agent's would.

use deployd_test_support as common;

use std::sync::Arc;
use std::time::Duration;

use common::emulators::{self, Process};
use common::lab::{Lab, lab};
use deployd_agent::{CommandApi, DiskTarget};
use deployd_engine::conductor::{ConductorError, Verb};
use deployd_engine::driver_host::Limits;
use deployd_engine::state_machine::ProvisionState;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use uuid::Uuid;

const IMAGE_BYTES: usize = 6 << 20;

/// An image file served over HTTP, and its sha256.
struct Image {
    _dir: tempfile::TempDir,
    url: String,
    sha256: String,
}

async fn image() -> Image {
    let dir = tempfile::tempdir().unwrap();
    let mut bytes = vec![0u8; IMAGE_BYTES];
    for (i, b) in bytes.iter_mut().enumerate() {
        *b = (i.wrapping_mul(2654435761) >> 13) as u8;
    }
    std::fs::write(dir.path().join("disk.raw"), &bytes).unwrap();
    let addr = emulators::serve(deployd_engine::image_server::files(
        dir.path().to_path_buf(),
    ))
    .await;
    Image {
        url: format!("http://{addr}/images/disk.raw"),
        sha256: hex::encode(Sha256::digest(&bytes)),
        _dir: dir,
    }
}

/// deployd's agent command API on loopback, writing to a disk file at 3 MiB/s (so a write
/// spans several heartbeats).
async fn agent(dir: &tempfile::TempDir) -> (Arc<CommandApi>, String, String) {
    let port = emulators::free_tcp_port();
    let url = format!("http://127.0.0.1:{port}");
    let disk = DiskTarget::new(dir.path().join("node-disk.img"), Some(3 << 20));
    let api = CommandApi::new(disk, url.clone());
    let token = "x".repeat(43);
    api.set_token(token.clone());
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .unwrap();
    let router = deployd_agent::server::router(api.clone());
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    (api, url, token)
}

/// Heartbeats as the node's agent until the node leaves `waiting`; returns how many.
async fn heartbeat_until_not(
    lab: &Lab,
    uuid: Uuid,
    waiting: ProvisionState,
    agent: &str,
    token: &str,
) -> usize {
    let mut heartbeats = 0;
    while lab.store.node(uuid).await.unwrap().state() == waiting {
        assert!(
            heartbeats < 600,
            "still {waiting} after {heartbeats} heartbeats"
        );
        let agent = deployd_engine::agent_sessions::CallbackUrl::parse(agent).unwrap();
        match lab
            .conductor
            .heartbeat(uuid, token, &agent, "13.0.0", None, Default::default())
            .await
        {
            Ok(()) | Err(ConductorError::Busy { .. }) => heartbeats += 1,
            Err(e) => panic!("heartbeat refused: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    heartbeats
}

/// Deploys a node of `driver` with this BMC driver_info, heartbeating as its agent until
/// it is active; returns the node, the agent and its url.
async fn deploy(
    lab: &Lab,
    driver: &str,
    path: &str,
    bmc: Value,
) -> (Uuid, Arc<CommandApi>, String) {
    lab.load(path, Limits::default()).await;
    // The in-process agent cannot power its machine off: give it a second, then force.
    let mut bmc = bmc;
    bmc["soft_power_off_timeout"] = json!(1);
    let image = image().await;
    let instance = json!({
        "image_source": image.url,
        "image_os_hash_algo": "sha256",
        "image_os_hash_value": image.sha256,
    });
    let uuid = lab.node_with(driver, bmc, instance).await;
    let (api, agent_url, token) = agent(&lab.dir).await;
    lab.deploy(uuid, ProvisionState::WaitCallBack).await;

    let heartbeats =
        heartbeat_until_not(lab, uuid, ProvisionState::WaitCallBack, &agent_url, &token).await;
    lab.settle(uuid, ProvisionState::Active).await;
    assert!(
        heartbeats >= 3,
        "the write spanned several heartbeats ({heartbeats})"
    );
    let written = std::fs::read(api.disk.path()).unwrap();
    assert_eq!(written.len(), IMAGE_BYTES);
    assert_eq!(
        hex::encode(Sha256::digest(&written)),
        image.sha256,
        "{driver}: the disk holds the image"
    );
    let node = lab.settle(uuid, ProvisionState::Active).await;
    assert_eq!(node.body.power_state.as_deref(), Some("power on"));
    (uuid, api, agent_url)
}

/// [`deploy`] with `agent_ipmitool` on pyghmi's fakebmc at `port`.
async fn deploy_on_fakebmc(lab: &Lab, port: u16) -> (Uuid, Arc<CommandApi>, String) {
    let info = json!({"ipmi_address": "127.0.0.1", "ipmi_port": port, "ipmi_username": "admin", "ipmi_password": "password"});
    deploy(
        lab,
        "agent_ipmitool",
        deployd_fixtures::AGENT_IPMITOOL,
        info,
    )
    .await
}

/// The Redfish system at `url`, as its BMC shows it now.
async fn system_doc(url: &str) -> Value {
    reqwest::get(url).await.unwrap().json().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_redfish_deploys_through_sushy_tools() {
    let lab = lab(Duration::from_secs(60)).await;
    let (_sushy, base, system): (Process, String, String) = emulators::sushy().await;
    let info = json!({"redfish_address": base, "redfish_system_id": system});
    let system_url = format!("{base}/redfish/v1/Systems/{system}");
    // Watch the BMC: when did the machine go from On to Off? The forced off lasts only until
    // the driver powers the machine on into its instance, so the watch samples every 2 ms
    // (at 20 ms a loaded machine missed it, and an earlier off was taken for it).
    let offs = Arc::new(std::sync::Mutex::new(Vec::new()));
    let watch = {
        let (url, offs) = (format!("{base}/redfish/v1/Systems/{system}"), offs.clone());
        tokio::spawn(async move {
            let mut was_on = false;
            loop {
                let system: Value = reqwest::get(&url).await.unwrap().json().await.unwrap();
                let on = system["PowerState"] == "On";
                if was_on && !on {
                    offs.lock().unwrap().push(tokio::time::Instant::now());
                }
                was_on = on;
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        })
    };
    // The machine starts in legacy BIOS mode: the node's mode (Ironic's default, uefi)
    // must reach the BMC with its boot device.
    let legacy = json!({"Boot": {"BootSourceOverrideMode": "Legacy"}});
    let patched = reqwest::Client::new()
        .patch(&system_url)
        .json(&legacy)
        .send()
        .await
        .unwrap();
    assert!(patched.status().is_success(), "{patched:?}");
    let (uuid, api, _) = deploy(&lab, "agent_redfish", deployd_fixtures::AGENT_REDFISH, info).await;
    let commands: Vec<String> = api.list().into_iter().map(|c| c.command_name).collect();
    assert_eq!(commands, ["prepare_image", "sync", "power_off"]);
    watch.abort();
    let synced = api.finished_at("sync").expect("the agent synced");
    let offs = offs.lock().unwrap().clone();
    assert!(
        offs.iter().any(|&off| off > synced),
        "the disk was flushed before the machine was forced off (offs seen {:?} after the sync)",
        offs.iter()
            .map(|&off| off.checked_duration_since(synced))
            .collect::<Vec<_>>()
    );
    let system: Value = reqwest::get(format!("{base}/redfish/v1/Systems/{system}"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(system["PowerState"], "On");
    assert_eq!(system["Boot"]["BootSourceOverrideTarget"], "Hdd");
    assert_eq!(system["Boot"]["BootSourceOverrideEnabled"], "Continuous");
    // Ironic's default boot mode, set with the boot device; the node shows it.
    assert_eq!(system["Boot"]["BootSourceOverrideMode"], "UEFI");
    let node = lab.store.node(uuid).await.unwrap();
    assert_eq!(node.body.attrs["boot_mode"], "uefi");

    // The operator's boot mode (PUT …/states/boot_mode) goes to the BMC, and the node
    // shows what the BMC reports; the next boot device keeps the node's own mode (none
    // asked: the default) and sets it back.
    lab.conductor
        .set_boot_mode(uuid, deployd_engine::boot_mode::BootMode::Bios)
        .await
        .unwrap();
    let mode = system_doc(&system_url).await["Boot"]["BootSourceOverrideMode"].clone();
    assert_eq!(mode, "Legacy");
    assert_eq!(
        lab.store.node(uuid).await.unwrap().body.attrs["boot_mode"],
        "bios"
    );

    // Secure Boot: a node whose capabilities ask for it has its BMC set so with the boot
    // device, after the boot mode (uefi again); the node shows what sushy reports.
    let secure_url = format!("{system_url}/SecureBoot");
    assert_eq!(system_doc(&secure_url).await["SecureBootEnable"], false);
    let capabilities = |text: &'static str| {
        move |_: &_, b: &mut deployd_engine::node::NodeBody| {
            b.properties.insert("capabilities".into(), json!(text));
            Ok::<(), deployd_engine::store::StoreError>(())
        }
    };
    lab.store
        .edit_node(uuid, capabilities("secure_boot:true"))
        .await
        .unwrap();
    use deployd_engine::driver_host::capability::bindings::deployd::driver::bmc::BootDevice;
    lab.conductor
        .set_boot_device(uuid, BootDevice::Pxe, false)
        .await
        .unwrap();
    assert_eq!(system_doc(&secure_url).await["SecureBootEnable"], true);
    let mode = system_doc(&system_url).await["Boot"]["BootSourceOverrideMode"].clone();
    assert_eq!(mode, "UEFI");
    let attrs = lab.store.node(uuid).await.unwrap().body.attrs;
    assert_eq!(
        (&attrs["boot_mode"], &attrs["secure_boot"]),
        (&json!("uefi"), &json!(true))
    );
    // The operator's PUT …/states/secure_boot reaches the BMC.
    lab.conductor.set_secure_boot(uuid, false).await.unwrap();
    assert_eq!(system_doc(&secure_url).await["SecureBootEnable"], false);
    let attrs = lab.store.node(uuid).await.unwrap().body.attrs;
    assert_eq!(attrs["secure_boot"], false);
    // Secure Boot asked in the BIOS mode is refused before the BMC is told anything.
    lab.store
        .edit_node(uuid, capabilities("boot_mode:bios,secure_boot:true"))
        .await
        .unwrap();
    let refused = lab
        .conductor
        .set_boot_device(uuid, BootDevice::Pxe, false)
        .await
        .unwrap_err()
        .to_string();
    assert!(refused.contains("Secure Boot needs uefi"), "{refused}");
    assert_eq!(system_doc(&secure_url).await["SecureBootEnable"], false);
    let mode = system_doc(&system_url).await["Boot"]["BootSourceOverrideMode"].clone();
    assert_eq!(mode, "UEFI");
    lab.store.edit_node(uuid, capabilities("")).await.unwrap();

    // Undeploy with automated_clean off: powered off, no ramdisk, the disk left as it is.
    lab.store
        .edit_node(uuid, |_, b| {
            b.attrs.insert("automated_clean".into(), json!(false));
            Ok::<(), deployd_engine::store::StoreError>(())
        })
        .await
        .unwrap();
    let image = std::fs::read(api.disk.path()).unwrap();
    lab.conductor.provision(uuid, Verb::Undeploy).await.unwrap();
    lab.settle(uuid, ProvisionState::Available).await;
    assert_eq!(system_doc(&system_url).await["PowerState"], "Off");
    assert_eq!(api.list().len(), 3, "no agent command: no ramdisk booted");
    assert!(
        std::fs::read(api.disk.path()).unwrap() == image,
        "the disk is not wiped"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_ipmitool_deploys_through_pyghmi_fakebmc() {
    let lab = lab(Duration::from_secs(60)).await;
    let (_bmc, port) = emulators::fakebmc().await;
    let (uuid, api, agent_url) = deploy_on_fakebmc(&lab, port).await;
    let status = emulators::ipmitool(port, &["chassis", "power", "status"]).unwrap();
    assert!(status.contains("is on"), "{status}");
    // Undeploy boots the ramdisk through the BMC; its agent erases the disk; then off.
    lab.conductor.provision(uuid, Verb::Undeploy).await.unwrap();
    lab.settle(uuid, ProvisionState::CleanWait).await;
    let token = "x".repeat(43);
    heartbeat_until_not(&lab, uuid, ProvisionState::CleanWait, &agent_url, &token).await;
    lab.settle(uuid, ProvisionState::Available).await;
    let status = emulators::ipmitool(port, &["chassis", "power", "status"]).unwrap();
    assert!(status.contains("is off"), "{status}");
    let commands: Vec<String> = api.list().into_iter().map(|c| c.command_name).collect();
    // Cleaning speaks only the clean-step protocol both agents have.
    assert_eq!(
        commands[3..],
        ["get_clean_steps", "execute_clean_step", "sync", "power_off"]
    );
    let disk = std::fs::read(api.disk.path()).unwrap();
    assert!(
        disk[..1 << 20].iter().all(|&b| b == 0),
        "the disk's first MiB is wiped"
    );

    // Manual cleaning with the operator's steps, in their order: the metadata, then the
    // whole disk (deployd's agent's erase_devices with {"full": true}).
    std::fs::write(api.disk.path(), vec![0xab; IMAGE_BYTES]).unwrap();
    lab.conductor.provision(uuid, Verb::Manage).await.unwrap();
    lab.settle(uuid, ProvisionState::Manageable).await;
    let steps = vec![
        json!({"interface": "deploy", "step": "erase_devices_metadata", "args": {}}),
        json!({"interface": "deploy", "step": "erase_devices", "args": {"full": true}}),
    ];
    lab.conductor.clean(uuid, steps).await.unwrap();
    lab.settle(uuid, ProvisionState::CleanWait).await;
    heartbeat_until_not(&lab, uuid, ProvisionState::CleanWait, &agent_url, &token).await;
    let node = lab.settle(uuid, ProvisionState::Manageable).await;
    assert_eq!(node.body.last_error, None);
    assert!(
        !node.body.driver_internal_info.contains_key("clean_steps"),
        "the steps leave with the flow"
    );
    let steps: Vec<String> = api
        .list()
        .into_iter()
        .skip(7)
        .filter(|c| c.command_name == "execute_clean_step")
        .map(|c| c.command_result.unwrap()["clean_step"]["step"].to_string())
        .collect();
    assert_eq!(steps, ["\"erase_devices_metadata\"", "\"erase_devices\""]);
    let disk = std::fs::read(api.disk.path()).unwrap();
    assert!(disk.iter().all(|&b| b == 0), "the whole disk is zeroed");

    // A RAID step deployd's agent does not list: the cleaning fails in Ironic's words.
    let steps = vec![json!({"interface": "raid", "step": "create_configuration", "args": {}})];
    lab.conductor.clean(uuid, steps).await.unwrap();
    lab.settle(uuid, ProvisionState::CleanWait).await;
    heartbeat_until_not(&lab, uuid, ProvisionState::CleanWait, &agent_url, &token).await;
    let node = lab.settle(uuid, ProvisionState::CleanFailed).await;
    let error = node.body.last_error.unwrap_or_default();
    assert!(
        error.contains(&format!("Cannot clean node {uuid}: node does not support this clean step: {{'interface': 'raid', 'step': 'create_configuration'}}")),
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pxe_ipmitool_has_the_engine_write_the_image_over_the_agents_disk() {
    let lab = lab(Duration::from_secs(60)).await;
    let (_bmc, port) = emulators::fakebmc().await;
    let info = json!({"ipmi_address": "127.0.0.1", "ipmi_port": port, "ipmi_username": "admin", "ipmi_password": "password"});
    let (_, api, _) = deploy(&lab, "pxe_ipmitool", deployd_fixtures::PXE_IPMITOOL, info).await;
    let commands: Vec<String> = api.list().into_iter().map(|c| c.command_name).collect();
    assert_eq!(
        commands,
        ["expose_disk", "sync", "power_off"],
        "the agent never downloaded anything itself"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bmc_with_wrong_credentials_fails_the_deploy_with_the_bmcs_words() {
    let lab = lab(Duration::from_secs(60)).await;
    lab.load(deployd_fixtures::AGENT_IPMITOOL, Limits::default())
        .await;
    let (_bmc, port) = emulators::fakebmc().await;
    let info = json!({"ipmi_address": "127.0.0.1", "ipmi_port": port, "ipmi_username": "admin", "ipmi_password": "wrong"});
    // A real image: the engine reads its head before it switches any power.
    let image = image().await;
    let instance = json!({"image_source": image.url, "image_checksum": image.sha256});
    let uuid = lab.node_with("agent_ipmitool", info, instance).await;
    let node = lab.deploy(uuid, ProvisionState::DeployFailed).await;
    let error = node.body.last_error.unwrap();
    assert!(
        error.contains("could not boot the node into its ramdisk") && error.contains("ipmitool"),
        "{error}"
    );
}

/// Rescue of an active node (`agent_ipmitool` on pyghmi's fakebmc, deployd's agent
/// command API): refused while its rescue interface is `no-rescue`; with `agent`, the
/// ramdisk boots, the agent's heartbeat in `rescue wait` gets `rescue.finalize_rescue` with
/// the password's hash (which it writes where its ramdisk reads it), the node is in
/// `rescue` without the hash; `unrescue` boots the disk: active, powered on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_active_node_is_rescued_with_its_password_hashed_and_unrescued() {
    use deployd_engine::rescue_password::{HASHED, verify};
    let lab = lab(Duration::from_secs(60)).await;
    let (_bmc, port) = emulators::fakebmc().await;
    let (uuid, api, agent_url) = deploy_on_fakebmc(&lab, port).await;
    let refused = lab.conductor.rescue(uuid, "pw").await.unwrap_err();
    assert!(
        refused
            .to_string()
            .contains("does not support rescue (disabled or not implemented)"),
        "{refused}"
    );
    lab.store
        .edit_node(uuid, |_, b| {
            b.interfaces.insert("rescue".into(), "agent".into());
            Ok::<(), deployd_engine::store::StoreError>(())
        })
        .await
        .unwrap();
    let file = lab.dir.path().join("rescue-password");
    api.rescue_to(file.clone());

    lab.conductor.rescue(uuid, "s3cret pass").await.unwrap();
    let waiting = lab.settle(uuid, ProvisionState::RescueWait).await;
    let hashed = waiting.body.instance_info[HASHED]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(hashed.starts_with("$5$") && verify("s3cret pass", &hashed));
    let status = emulators::ipmitool(port, &["chassis", "power", "status"]).unwrap();
    assert!(status.contains("is on"), "the ramdisk boots: {status}");
    let token = "x".repeat(43);
    heartbeat_until_not(&lab, uuid, ProvisionState::RescueWait, &agent_url, &token).await;
    let node = lab.settle(uuid, ProvisionState::Rescue).await;
    assert_eq!(node.body.last_error, None);
    assert!(
        !node.body.instance_info.contains_key(HASHED),
        "the hash leaves with the flow"
    );
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        hashed,
        "the agent has the hash"
    );
    assert!(
        *api.rescued.borrow(),
        "the agent stops for its ramdisk's login"
    );
    let last = api.list().pop().unwrap();
    assert_eq!(last.command_name, "finalize_rescue");

    lab.conductor.unrescue(uuid).await.unwrap();
    let node = lab.settle(uuid, ProvisionState::Active).await;
    assert_eq!(node.body.power_state.as_deref(), Some("power on"));
    let status = emulators::ipmitool(port, &["chassis", "power", "status"]).unwrap();
    assert!(status.contains("is on"), "{status}");
}
