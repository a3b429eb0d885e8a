//! Real machines: a QEMU virtual machine (software emulation, user-mode networking with
//! `restrict=on`) network-boots the ramdisk `deployd ramdisk build` made through the
//! engine's iPXE scripts, is deployed with a bootable image by the real agent inside it,
//! boots that image from its disk (its console shows the image's own line), and is
//! cleaned: the ramdisk boots again and erases the disk's metadata. And the seed in a VM:
//! a write longer than `deploy_callback_timeout` ends active; a VM killed mid-write
//! times out.

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

/// An engine serving guests at 10.0.2.100, a lab with one VM, and its node enrolled
/// (ipxe boot, the ramdisk, the image), available without cleaning.
struct VmLab {
    // Dropped in this order: the lab (its VM) before the engine.
    lab: Lab,
    engine: Engine,
    node: String,
    image: std::path::PathBuf,
    disk: std::path::PathBuf,
    console: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl VmLab {
    /// `deploy_timeout` seconds of silence fail a deploy; `append` goes on the ramdisk's
    /// kernel command line after the lab's own parameters.
    fn start(deploy_timeout: u64, append: &str) -> VmLab {
        let dir = tempfile::tempdir().unwrap();
        let boot = dir.path().join("boot");
        let (kernel, ramdisk) = vm::ramdisk(&boot);
        let image = vm::bootable_image(dir.path(), &kernel, MARKER, 64);
        let sha = sha256_of(&image);
        let port = emulators::free_tcp_port();
        let public = format!("http://10.0.2.100:{port}");
        let allowed = format!("--file-url-allowed-path={}", dir.path().display());
        let timeout = deploy_timeout.to_string();
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
                &timeout,
                "--clean-callback-timeout",
                "120",
                "--check-provision-state-interval",
                "1",
            ],
        );
        let lab = Lab::start_vm(&dir.path().join("lab"), &engine.url);
        let machine = lab.machines[0].clone();
        let params = format!(
            "{} {append}",
            machine["kernel_append_params"].as_str().unwrap()
        );
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
                    "kernel_append_params": params.trim(),
                },
                "instance_info": {
                    "image_source": image.display().to_string(),
                    "image_os_hash_algo": "sha256",
                    "image_os_hash_value": sha,
                },
            })),
        );
        assert_eq!(status, 201, "{node}");
        let node = node["uuid"].as_str().unwrap().to_owned();
        let (status, port_doc) = call(
            "POST",
            &format!("{}/v1/ports", engine.url),
            Some(json!({"node_uuid": node, "address": machine["mac"]})),
        );
        assert_eq!(status, 201, "{port_doc}");
        make_available_without_cleaning(&engine.url, &node);
        VmLab {
            disk: machine["disk"].as_str().unwrap().into(),
            console: machine["console"].as_str().unwrap().into(),
            lab,
            engine,
            node,
            image,
            _dir: dir,
        }
    }

    /// Deploys and waits for the deploy to end; the node as it ended.
    fn deploy(&self) -> Value {
        provision(&self.engine.url, &self.node, "active");
        self.wait_end(&["active", "deploy failed"])
    }

    fn wait_end(&self, ends: &[&str]) -> Value {
        wait_node(&self.engine.url, &self.node, 300, |n| {
            n["provision_state"]
                .as_str()
                .is_some_and(|s| ends.contains(&s))
        })
    }

    fn console_text(&self) -> String {
        std::fs::read_to_string(&self.console).unwrap_or_default()
    }
}

#[test]
fn a_vm_network_boots_the_ramdisk_is_deployed_boots_its_disk_and_is_cleaned() {
    let vm = VmLab::start(120, "");
    let active = vm.deploy();
    let booted = vm.console_text();
    assert_eq!(
        active["provision_state"], "active",
        "{active}\nconsole:\n{booted}"
    );
    assert!(
        booted.contains("deployd ramdisk: starting the agent"),
        "{booted}"
    );
    assert_eq!(
        head(&vm.disk, 64 << 20),
        std::fs::read(&vm.image).unwrap(),
        "the VM's disk holds the image"
    );
    vm::wait_console(&vm.console, MARKER, 180);

    // Undeploy with automated cleaning: the ramdisk boots again and erases the disk's
    // metadata (its first MiB here), then the node is available.
    provision(&vm.engine.url, &vm.node, "deleted");
    let cleaned = vm.wait_end(&["available", "clean failed"]);
    assert_eq!(cleaned["provision_state"], "available", "{cleaned}");
    assert!(
        head(&vm.disk, 1 << 20).iter().all(|&b| b == 0),
        "the boot sector and the filesystem's metadata are erased"
    );
    let boots = vm.lab.machine("machine-000")["agent_boots"].clone();
    assert_eq!(boots, json!(2), "two network boots: deploy and clean");
}

/// The seed in a VM: the agent writes for longer than `deploy_callback_timeout`
/// (throttled to 1 MiB/s, 64 s), and its heartbeats keep the deploy alive to the end. The
/// timeout also covers the ramdisk's boot (as in Ironic), so it must outlast that: 40 s.
/// Then the VM is killed (QEMU, by its pid) in the middle of a second write: only the
/// timeout notices.
#[test]
fn in_a_vm_a_write_longer_than_the_timeout_ends_active_and_a_killed_vm_times_out() {
    let vm = VmLab::start(40, "deployd-agent-throttle=1M");
    let started = tokio::time::Instant::now();
    let active = vm.deploy();
    assert_eq!(
        active["provision_state"],
        "active",
        "{active}\n{}",
        vm.console_text()
    );
    let took = started.elapsed().as_secs_f64();
    assert!(
        took > 64.0,
        "the deploy ({took:.0} s) outlasted the 40 s timeout: the write alone is 64 s"
    );

    // Undeployed without cleaning (no second ramdisk boot), then a deploy whose VM dies.
    let (status, _) = call(
        "PATCH",
        &format!("{}/v1/nodes/{}", vm.engine.url, vm.node),
        Some(json!([{"op": "add", "path": "/automated_clean", "value": false}])),
    );
    assert_eq!(status, 200);
    provision(&vm.engine.url, &vm.node, "deleted");
    vm.wait_end(&["available"]);
    provision(&vm.engine.url, &vm.node, "active");
    wait_node(&vm.engine.url, &vm.node, 300, |n| {
        n["driver_internal_info"]["agent_status_message"]
            .as_str()
            .and_then(|m| m.parse::<deployd_wire::agent::Progress>().ok())
            .is_some_and(|p| p.written > 4 << 20)
    });
    let qemu = vm.lab.machine("machine-000")["agent_pid"]
        .as_u64()
        .expect("QEMU runs");
    let killed = std::process::Command::new("kill")
        .args(["-KILL", &qemu.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let failed = vm.wait_end(&["deploy failed", "active"]);
    assert_eq!(failed["provision_state"], "deploy failed", "{failed}");
    let error = failed["last_error"].as_str().unwrap_or_default();
    assert!(
        error.contains("Timeout reached while waiting for callback"),
        "{error}"
    );
}

/// The dnsmasq configuration `deployd boot dnsmasq-config` prints is read by the real
/// dnsmasq (`--test` parses it whole) and hands iPXE clients the engine's entry script.
#[test]
fn the_dnsmasq_configuration_is_dnsmasqs_own() {
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(&*support::BIN)
        .args([
            "boot",
            "dnsmasq-config",
            "--public-url",
            "http://10.20.0.1:6385",
        ])
        .args(["--interface", "lo", "--range", "10.20.0.100,10.20.0.200"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("dhcp-boot=tag:ipxe,http://10.20.0.1:6385/boot/ipxe\n")
            && text.contains("dhcp-boot=tag:!ipxe,tag:!efi64,undionly.kpxe\n"),
        "{text}"
    );
    let conf = dir.path().join("dnsmasq.conf");
    std::fs::write(&conf, &text).unwrap();
    let check = std::process::Command::new("dnsmasq")
        .arg("--test")
        .arg(format!("--conf-file={}", conf.display()))
        .output()
        .expect("Debian's dnsmasq-base (.ci/run installs it)");
    let said = String::from_utf8_lossy(&check.stderr);
    assert!(
        check.status.success() && said.contains("syntax check OK"),
        "{said}"
    );
}
