//! The real ironic-python-agent (PyPI, pinned in `.ci/run`) against `deployd serve`:
//! deploy a whole-disk image through `agent_redfish` (sushy-tools) and `agent_ipmitool`
//! (pyghmi's fakebmc), with a write longer than `deploy_callback_timeout`, over auto-TLS
//! at API 1.68; then undeploy, cleaning through IPA's clean steps. IPA runs unprivileged
//! with the hardware manager and `PATH` stubs of `tests/ipa/` (see its README). The
//! qcow2 deploy carries a config drive, which IPA adds as a partition to a loop device.

mod loop_disk;

use deployd_test_support::{emulators, processes as support};

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tokio::time::Instant;

use serde_json::{Value, json};
use support::{Engine, call, make_available_without_cleaning, provision, sha256_of, wait_node};

/// Seconds a node may wait without a heartbeat; the image takes longer to write.
const TIMEOUT: u64 = 20;
const MIB: usize = 1 << 20;

fn ipa_venv() -> PathBuf {
    let venv = emulators::repo_root().join("target/ipa-venv");
    assert!(
        venv.join("bin/ironic-python-agent").exists(),
        "{} is missing: run .ci/run once",
        venv.display()
    );
    venv
}

fn repo(path: &str) -> PathBuf {
    emulators::repo_root().join(path)
}

/// A whole-disk image with a partition table of parted's `label` (`msdos`, `gpt`; IPA
/// checks for one after writing): `mib` MiB, random bytes after the first MiB. Returns
/// its sha256.
fn disk_image(path: &Path, mib: usize, label: &str) -> String {
    let mut data = vec![0u8; mib * MIB];
    rand::fill(&mut data[MIB..]);
    std::fs::write(path, &data).unwrap();
    let out = Command::new("parted")
        .arg("-s")
        .arg(path)
        .args(["mklabel", label, "mkpart", "primary", "ext4", "1MiB"])
        .arg(format!("{}MiB", mib - 1))
        .output()
        .expect("running parted (Debian's parted: .ci/run installs it)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    sha256_of(path)
}

/// Serves `file` over HTTP at `rate` bytes per second: a download that outlasts the
/// callback timeout. Returns its url.
fn slow_server(file: PathBuf, rate: usize) -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/image.raw", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let data = std::fs::read(&file).unwrap();
            std::thread::spawn(move || {
                let mut request = [0u8; 4096];
                let _ = std::io::Read::read(&mut stream, &mut request);
                let head = format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nContent-Type: application/octet-stream\r\nConnection: close\r\n\r\n",
                    data.len()
                );
                if stream.write_all(head.as_bytes()).is_err() {
                    return;
                }
                for chunk in data.chunks(rate / 10) {
                    if stream.write_all(chunk).is_err() {
                        return;
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
            });
        }
    });
    url
}

/// One boot of ironic-python-agent, killed when dropped.
struct Ipa(Child);

impl Drop for Ipa {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The machine: its disk, MAC and working directory (all writable by IPA's uid).
struct Machine {
    dir: PathBuf,
    /// The disk's bytes: the disk itself, or the file under `block`.
    file: PathBuf,
    /// The disk as a block device, when IPA must partition it.
    block: Option<loop_disk::LoopDisk>,
    mac: &'static str,
    port: u16,
}

impl Machine {
    /// A machine whose disk of `mib` MiB (old data: 0xAB) is a file, or with `block` a
    /// loop device over one.
    fn new(dir: &Path, mac: &'static str, mib: usize, block: bool) -> Machine {
        let dir = dir.join("machine");
        std::fs::create_dir_all(dir.join("rescans")).unwrap();
        let file = dir.join("disk.img");
        std::fs::write(&file, vec![0xABu8; mib * MIB]).unwrap();
        open_to_all(&dir);
        open_to_all(&dir.join("rescans"));
        open_to_all(&file);
        Machine {
            block: block.then(|| loop_disk::LoopDisk::attach(&file, &dir.join("rescans"))),
            dir,
            file,
            mac,
            port: emulators::free_tcp_port(),
        }
    }

    /// The disk as IPA sees it.
    fn disk(&self) -> &Path {
        self.block.as_ref().map_or(&self.file, |b| &b.device)
    }

    /// Boots the ramdisk: a fresh IPA process (a new boot, so a new token and certificate).
    fn boot(&self, api: &str, n: u32) -> Ipa {
        self.boot_with(api, n, "")
    }

    /// Boots the ramdisk with more of IPA's options (`name = value` lines).
    fn boot_with(&self, api: &str, n: u32, options: &str) -> Ipa {
        let conf = self.dir.join(format!("ipa-{n}.conf"));
        let log = self.dir.join(format!("ipa-{n}.log"));
        std::fs::write(
            &conf,
            format!(
                "[DEFAULT]\napi_url = {api}\nlisten_host = 127.0.0.1\nlisten_port = {p}\nadvertise_host = 127.0.0.1\nadvertise_port = {p}\nhardware_initialization_delay = 0\ndisk_wait_attempts = 0\nlookup_timeout = 300\nlookup_interval = 1\nenable_mdns = False\nlog_file = {log}\ndebug = true\n{options}",
                p = self.port,
                log = log.display()
            ),
        )
        .unwrap();
        open_to_all(&conf);
        let venv = ipa_venv();
        let path = format!(
            "{}:{}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            repo("tests/ipa/stubs").display(),
            venv.join("bin").display()
        );
        let mut command = unprivileged();
        command
            .arg(venv.join("bin/ironic-python-agent"))
            .arg("--config-file")
            .arg(&conf)
            .env_clear()
            .env("PATH", path)
            .env("HOME", &self.dir)
            .env("DEPLOYD_IPA_DISK", self.disk())
            .env("DEPLOYD_IPA_RESCAN", self.dir.join("rescans"))
            .env("DEPLOYD_IPA_MAC", self.mac)
            .env("DEPLOYD_IPA_REFUSED", self.dir.join("refused.log"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(self.dir.join(format!("ipa-{n}.out"))).unwrap());
        Ipa(command.spawn().expect("starting ironic-python-agent"))
    }

    fn logs(&self) -> String {
        let mut all = String::new();
        for n in 1..=3 {
            all +=
                &std::fs::read_to_string(self.dir.join(format!("ipa-{n}.log"))).unwrap_or_default();
            all +=
                &std::fs::read_to_string(self.dir.join(format!("ipa-{n}.out"))).unwrap_or_default();
        }
        all
    }

    /// The agent's log without its DEBUG lines, for failure messages.
    fn summary(&self) -> String {
        self.logs()
            .lines()
            .filter(|l| !l.contains(" DEBUG "))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// As root, IPA runs as nobody with no capabilities; otherwise as the current user.
fn unprivileged() -> Command {
    if !rustix::process::geteuid().is_root() {
        return Command::new("env");
    }
    let mut c = Command::new("setpriv");
    c.args([
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        "--inh-caps=-all",
        "--bounding-set=-all",
        "--",
    ]);
    c
}

fn open_to_all(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let mode = if path.is_dir() { 0o777 } else { 0o666 };
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// How the operator's image is given.
#[derive(PartialEq)]
enum Given {
    /// Raw, served at 2 MiB/s: 24 s, longer than the callback timeout.
    SlowRaw,
    /// A qcow2 of a GPT disk (by the real `qemu-img`), without `image_disk_format`, and
    /// a config drive: the engine serves the qcow2 to IPA as the raw disk, which the disk
    /// must then hold, and the drive at a url, which IPA adds as the disk's last partition.
    Qcow2WithConfigDrive,
}

/// Enrolls a node and its port (the machine's MAC, which lookup finds it by): its uuid.
fn enroll(api: &str, node: Value, mac: &str) -> String {
    let (status, node) = call("POST", &format!("{api}/v1/nodes"), Some(node));
    assert_eq!(status, 201, "{node}");
    let uuid = node["uuid"].as_str().unwrap().to_owned();
    let port = json!({"node_uuid": uuid, "address": mac});
    let (status, _) = call("POST", &format!("{api}/v1/ports"), Some(port));
    assert_eq!(status, 201);
    uuid
}

/// Where ironic-python-agent's `finalize_rescue` writes the password's hash (its own
/// path), made writable for it (it runs as nobody).
const IPA_RESCUE_FILE: &str = "/etc/ipa-rescue-config/ipa-rescue-password";

/// Rescues the active node with the real IPA (a third boot): its `finalize_rescue` gets
/// the password's hash, which it writes where its ramdisk's rescue service reads it; then
/// unrescue boots the disk: active again.
fn rescue_and_unrescue(api: &str, uuid: &str, machine: &Machine) {
    let file = Path::new(IPA_RESCUE_FILE);
    let folder = file.parent().unwrap();
    std::fs::create_dir_all(folder).unwrap();
    open_to_all(folder);
    let _ = std::fs::remove_file(file);
    let (status, body) = call(
        "PUT",
        &format!("{api}/v1/nodes/{uuid}/states/provision"),
        Some(json!({"target": "rescue", "rescue_password": "s3cret rescue"})),
    );
    assert_eq!(status, 202, "{body}");
    let _ipa = machine.boot(api, 3);
    let node = wait_node(api, uuid, 120, |n| {
        !matches!(
            n["provision_state"].as_str(),
            Some("rescuing" | "rescue wait")
        )
    });
    assert_eq!(
        node["provision_state"],
        "rescue",
        "last_error {}\n{}",
        node["last_error"],
        machine.summary()
    );
    let hash = std::fs::read_to_string(file).unwrap();
    assert!(hash.starts_with("$5$"), "{hash}");
    assert!(deployd_engine::rescue_password::verify(
        "s3cret rescue",
        &hash
    ));
    assert!(
        machine.logs().contains("finalize_rescue"),
        "IPA ran finalize_rescue"
    );
    provision(api, uuid, "unrescue");
    let node = wait_node(api, uuid, 60, |n| n["provision_state"] != "unrescuing");
    assert_eq!(node["provision_state"], "active", "{}", node["last_error"]);
    let _ = std::fs::remove_file(file);
}

fn deploy_and_clean(driver: &str, driver_info: Value, mac: &'static str, given: Given) {
    let dir = tempfile::tempdir().unwrap();
    open_to_all(dir.path());
    let image = dir.path().join("image.raw");
    let drive = given == Given::Qcow2WithConfigDrive;
    let sha = disk_image(&image, 48, if drive { "gpt" } else { "msdos" });
    let (url, checksum) = match given {
        Given::SlowRaw => (slow_server(image.clone(), 2 * MIB), sha.clone()),
        Given::Qcow2WithConfigDrive => {
            let qcow2 = dir.path().join("image.qcow2");
            support::to_qcow2(&image, &qcow2);
            let checksum = sha256_of(&qcow2);
            (slow_server(qcow2, 64 * MIB), checksum)
        }
    };
    let timeout = TIMEOUT.to_string();
    let engine = Engine::start(
        &dir.path().join("data"),
        &[
            "--deploy-callback-timeout",
            &timeout,
            "--clean-callback-timeout",
            "60",
            "--ramdisk-heartbeat-timeout",
            "5",
            "--enabled-rescue-interfaces",
            "no-rescue,agent",
        ],
    );
    let mut info = driver_info;
    // IPA syncs slowly; leave the power-off step time within the driver's deadline.
    info["soft_power_off_timeout"] = json!(3);
    let node = json!({"driver": driver, "driver_info": info, "rescue_interface": "agent",
                      "instance_info": {"image_source": url, "image_checksum": checksum}});
    let uuid = enroll(&engine.url, node, mac);
    make_available_without_cleaning(&engine.url, &uuid);
    // IPA's config drive partition takes the disk's last 64 MiB.
    let machine = Machine::new(dir.path(), mac, if drive { 144 } else { 64 }, drive);

    let started = Instant::now();
    if drive {
        let (status, body) = call(
            "PUT",
            &format!("{}/v1/nodes/{uuid}/states/provision", engine.url),
            Some(json!({"target": "active", "configdrive": {
                "meta_data": {"hostname": "ipa-1", "public_keys": {"default": "ssh-ed25519 AAAAC3 ipa@deployd"}},
                "user_data": "#cloud-config\n"}})),
        );
        assert_eq!(status, 202, "{body}");
    } else {
        provision(&engine.url, &uuid, "active");
    }
    let ipa = machine.boot(&engine.url, 1);
    let node = wait_node(&engine.url, &uuid, 180, |n| {
        n["provision_state"] != "deploying" && n["provision_state"] != "wait call-back"
    });
    assert_eq!(
        node["provision_state"],
        "active",
        "last_error {}\n{}",
        node["last_error"],
        machine.summary()
    );
    if given == Given::SlowRaw {
        assert!(
            started.elapsed() > Duration::from_secs(TIMEOUT),
            "the write outlasted the timeout"
        );
        assert_eq!(
            sha256_of(&machine.file)[..],
            sha[..],
            "the disk holds the image"
        );
    } else {
        let prepared = &node["driver_internal_info"]["deploy_image"];
        assert_eq!(prepared["source_format"], "qcow2", "{prepared}");
        on_disk_with_config_drive(&machine, &image, dir.path());
    }
    // Auto-TLS at 1.68: IPA served HTTPS with its own certificate, which deployd pinned.
    let logs = machine.logs();
    assert!(
        logs.contains("announcing callback URL https://127.0.0.1"),
        "{logs}"
    );
    assert!(logs.contains("API version is 1.68"));
    drop(ipa);
    if given == Given::SlowRaw {
        rescue_and_unrescue(&engine.url, &uuid, &machine);
    }

    // Undeploy: the machine boots the ramdisk again; IPA cleans through its clean steps.
    provision(&engine.url, &uuid, "deleted");
    let _ipa = machine.boot(&engine.url, 2);
    let node = wait_node(&engine.url, &uuid, 180, |n| {
        n["provision_state"] == "available" || n["provision_state"] == "clean failed"
    });
    assert_eq!(
        node["provision_state"],
        "available",
        "last_error {}\n{}",
        node["last_error"],
        machine.summary()
    );
    let disk = std::fs::read(&machine.file).unwrap();
    assert!(
        disk[..MIB].iter().all(|&b| b == 0),
        "the first MiB is erased"
    );
    assert!(
        disk[disk.len() - MIB..].iter().all(|&b| b == 0),
        "the last MiB is erased"
    );
    let logs = machine.logs();
    assert!(
        logs.contains("Asynchronous command execute_clean_step completed"),
        "{logs}"
    );
    engine.stop();
}

/// The image's partition is on the disk as written, and IPA's config drive partition
/// after it, at the disk's end, where Debian's cloud-init reads the drive's meta data.
fn on_disk_with_config_drive(machine: &Machine, image: &Path, dir: &Path) {
    // What IPA wrote through the block device's cache, in the file.
    support::run(Command::new("sync").arg(machine.disk()));
    let (start, size) = crate::images::partition(&machine.file, 1);
    let range = start as usize..(start + size) as usize;
    let (written, disk) = (
        std::fs::read(image).unwrap(),
        std::fs::read(&machine.file).unwrap(),
    );
    assert!(
        disk[range.clone()] == written[range],
        "the image's partition is as written"
    );
    let (drive_start, drive_size) = crate::images::partition(&machine.file, 2);
    assert!(
        drive_start + drive_size > (143 << 20),
        "the drive is at the disk's end"
    );
    let read = crate::images::read_config_drive(dir, &machine.file);
    assert_eq!(read["metadata"]["hostname"], "ipa-1", "{read}");
    assert_eq!(
        read["metadata"]["public_keys"]["default"],
        "ssh-ed25519 AAAAC3 ipa@deployd"
    );
    let logs = machine.logs();
    assert!(
        logs.contains("successfully copied onto partition"),
        "IPA wrote the drive itself:\n{}",
        machine.summary()
    );
}

#[test]
fn ironic_python_agent_deploys_a_qcow2_with_a_config_drive_and_cleans_through_agent_redfish_over_auto_tls()
 {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (_sushy, base, system) = runtime.block_on(emulators::sushy());
    deploy_and_clean(
        "redfish",
        json!({"redfish_address": base, "redfish_system_id": system}),
        "52:54:00:1a:00:01",
        Given::Qcow2WithConfigDrive,
    );
}

#[test]
fn ironic_python_agent_deploys_and_cleans_through_agent_ipmitool_over_auto_tls() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (_bmc, port) = runtime.block_on(emulators::fakebmc());
    deploy_and_clean(
        "ipmi",
        json!({"ipmi_address": "127.0.0.1", "ipmi_port": port, "ipmi_username": "admin", "ipmi_password": "password"}),
        "52:54:00:1a:00:02",
        Given::SlowRaw,
    );
}

/// In-band inspection (`inspect_interface` `agent`): the node boots its ramdisk through its
/// BMC and waits; the real IPA, with its inspection collectors on, posts its inventory to
/// `POST /v1/continue_inspection`; the node gets its properties and inventory, is powered
/// off and is manageable again.
#[test]
fn ironic_python_agent_inspects_a_node_in_band_through_continue_inspection() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (_sushy, base, system) = runtime.block_on(emulators::sushy());
    let dir = tempfile::tempdir().unwrap();
    open_to_all(dir.path());
    let engine = Engine::start(&dir.path().join("data"), &["--inspect-wait-timeout", "120"]);
    let mac = "52:54:00:1a:00:03";
    let node = json!({"driver": "redfish", "inspect_interface": "agent",
                      "driver_info": {"redfish_address": base, "redfish_system_id": system}});
    let uuid = enroll(&engine.url, node, mac);
    provision(&engine.url, &uuid, "manage");
    wait_node(&engine.url, &uuid, 30, |n| {
        n["provision_state"] == "manageable"
    });
    provision(&engine.url, &uuid, "inspect");
    let node = wait_node(&engine.url, &uuid, 30, |n| {
        n["provision_state"] != "inspecting"
    });
    assert_eq!(
        node["provision_state"], "inspect wait",
        "{}",
        node["last_error"]
    );
    let machine = Machine::new(dir.path(), mac, 64, false);
    let _ipa = machine.boot_with(
        &engine.url,
        1,
        "inspection_collectors = default\ninspection_dhcp_wait_timeout = 0\n",
    );
    let node = wait_node(&engine.url, &uuid, 120, |n| {
        n["provision_state"] != "inspect wait"
    });
    assert_eq!(
        node["provision_state"],
        "manageable",
        "last_error {}\n{}",
        node["last_error"],
        machine.summary()
    );
    let p = &node["properties"];
    assert_eq!(
        (p["memory_mb"].as_u64(), p["cpu_arch"].as_str()),
        (Some(1024), Some("x86_64")),
        "{p}"
    );
    assert_eq!(p["local_gb"], 0, "a 64 MiB disk is no local disk");
    assert_eq!(p["capabilities"], "boot_mode:bios");
    assert_eq!(node["power_state"], "power off");
    let (status, inventory) = call(
        "GET",
        &format!("{}/v1/nodes/{uuid}/inventory", engine.url),
        None,
    );
    assert_eq!(status, 200);
    let inv = &inventory["inventory"];
    assert_eq!(inv["interfaces"][0]["mac_address"], mac);
    assert_eq!(inv["disks"][0]["size"], 64 * MIB, "{inv}");
    assert_eq!(inv["cpu"]["model_name"], "deployd test");
    // What IPA sent beside the inventory is kept as the plugin data, as Ironic keeps it.
    assert_eq!(
        inventory["plugin_data"]["boot_interface"], mac,
        "{}",
        inventory["plugin_data"]
    );
    assert!(
        machine.logs().contains("inspection finished successfully"),
        "{}",
        machine.summary()
    );
}
