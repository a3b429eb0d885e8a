//! Real machines: a QEMU virtual machine (software emulation, user-mode networking with
//! `restrict=on`) network-boots the ramdisk `deployd ramdisk build` made through the
//! engine's iPXE scripts, is deployed with a bootable image by the real agent inside it,
//! boots that image from its disk (its console shows the image's own line), and is
//! cleaned: the ramdisk boots again and erases the disk's metadata.

use std::io::Read;
use std::path::Path;

use deployd_test_support::{emulators, processes as support, vm};
use serde_json::{Value, json};
use support::{
    Engine, Lab, call, make_available_without_cleaning, provision, sha256_of, wait_node,
};

/// What the deployed OS prints when it has booted from the VM's disk.
const MARKER: &str = "deployd test OS: booted from its own disk";

/// The first `len` bytes of `path`.
fn head(path: &Path, len: u64) -> Vec<u8> {
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .unwrap()
        .take(len)
        .read_to_end(&mut bytes)
        .unwrap();
    bytes
}

#[test]
fn a_vm_network_boots_the_ramdisk_is_deployed_boots_its_disk_and_is_cleaned() {
    let dir = tempfile::tempdir().unwrap();
    let boot = dir.path().join("boot");
    let (kernel, ramdisk) = vm::ramdisk(&boot);
    let image = vm::bootable_image(dir.path(), &kernel, MARKER, 64);
    let sha = sha256_of(&image);

    let port = emulators::free_tcp_port();
    let public = format!("http://10.0.2.100:{port}");
    let allowed = format!("--file-url-allowed-path={}", dir.path().display());
    let engine = Engine::start_on(
        port,
        &dir.path().join("data"),
        &[
            "--public-url",
            &public,
            &allowed,
            "--ramdisk-heartbeat-timeout",
            "4",
            "--deploy-callback-timeout",
            "120",
            "--clean-callback-timeout",
            "120",
            "--check-provision-state-interval",
            "1",
        ],
    );
    let lab = Lab::start_vm(&dir.path().join("lab"), &engine.url);
    let machine = &lab.machines[0];
    let console = Path::new(machine["console"].as_str().unwrap()).to_owned();

    let (status, node) = call(
        "POST",
        &format!("{}/v1/nodes", engine.url),
        Some(json!({
            "name": "vm-1",
            "driver": "redfish",
            "deploy_interface": "direct",
            "boot_interface": "ipxe",
            "driver_info": {
                "redfish_address": machine["redfish_address"],
                "redfish_system_id": machine["redfish_system_id"],
                "deploy_kernel": kernel.display().to_string(),
                "deploy_ramdisk": ramdisk.display().to_string(),
                "kernel_append_params": machine["kernel_append_params"],
            },
            "instance_info": {
                "image_source": image.display().to_string(),
                "image_os_hash_algo": "sha256",
                "image_os_hash_value": sha,
            },
        })),
    );
    assert_eq!(status, 201, "{node}");
    let uuid = node["uuid"].as_str().unwrap().to_owned();
    let (status, port_doc) = call(
        "POST",
        &format!("{}/v1/ports", engine.url),
        Some(json!({"node_uuid": uuid, "address": machine["mac"]})),
    );
    assert_eq!(status, 201, "{port_doc}");
    make_available_without_cleaning(&engine.url, &uuid);

    provision(&engine.url, &uuid, "active");
    let active = wait_node(&engine.url, &uuid, 300, |n| {
        matches!(
            n["provision_state"].as_str(),
            Some("active" | "deploy failed")
        )
    });
    let booted = std::fs::read_to_string(&console).unwrap_or_default();
    assert_eq!(
        active["provision_state"], "active",
        "{active}\nconsole:\n{booted}"
    );
    assert!(
        booted.contains("deployd ramdisk: starting the agent"),
        "{booted}"
    );

    let disk = Path::new(machine["disk"].as_str().unwrap());
    assert_eq!(
        head(disk, 64 << 20),
        std::fs::read(&image).unwrap(),
        "the VM's disk holds the image"
    );
    vm::wait_console(&console, MARKER, 180);

    // Undeploy with automated cleaning: the ramdisk boots again and erases the disk's
    // metadata (its first MiB here), then the node is available.
    provision(&engine.url, &uuid, "deleted");
    let cleaned = wait_node(&engine.url, &uuid, 300, |n| {
        matches!(
            n["provision_state"].as_str(),
            Some("available" | "clean failed")
        )
    });
    assert_eq!(cleaned["provision_state"], "available", "{cleaned}");
    assert!(
        head(disk, 1 << 20).iter().all(|&b| b == 0),
        "the boot sector and the filesystem's metadata are erased"
    );
    let boots: Value = lab.machine("machine-000")["agent_boots"].clone();
    assert_eq!(boots, json!(2), "two network boots: deploy and clean");
}
