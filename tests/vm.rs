//! Real machines: a QEMU virtual machine (software emulation, user-mode networking with
//! `restrict=on`) network-boots the ramdisk `deployd ramdisk build` made through the
//! engine's iPXE scripts, is deployed with a bootable image by the real agent inside it,
//! boots that image from its disk (its console shows the image's own line), and is
//! cleaned: the ramdisk boots again and erases the disk's metadata. The same through the
//! real dnsmasq on a tap in a network namespace. And the seed in VMs, by `deployd demo
//! --vm`: a write longer than `deploy_callback_timeout` ends active; a VM killed
//! mid-write times out.

use std::io::Read;
use std::path::Path;

use deployd_lab::os_image::EspLoader;
use deployd_test_support::{emulators, netns, processes as support, vm};
use serde_json::{Value, json};
use support::{Engine, Lab, call, provision, sha256_of, wait_node};

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

/// How a test VM's NIC is networked.
#[derive(PartialEq)]
enum Network {
    /// QEMU's user mode with `restrict=on`: the guest reaches the engine at 10.0.2.100.
    User,
    /// The same, but its DHCP names no boot file: the node boots its ramdisk from virtual
    /// media (`redfish-virtual-media`), the ISO the BMC fetches from the engine's
    /// loopback address (`--external-http-url`).
    UserVirtualMedia,
    /// A tap in a network namespace the test makes, where the real dnsmasq, configured
    /// by `deployd boot dnsmasq-config`, answers DHCP; the engine and the lab run there.
    Tap,
    /// The same with a NIC without iPXE in its ROM: the firmware's own PXE gets iPXE from
    /// dnsmasq by TFTP first.
    TapWithoutNicRom,
    /// The same, the node booting by UEFI HTTP boot (`http-ipxe`): its BMC boots it
    /// `UefiHttp`, and OVMF fetches iPXE from the engine over HTTP.
    TapHttpBoot,
    /// A tap with no DHCP server at all: the node boots from virtual media, its ramdisk
    /// configured statically from the node's `network_data` (DHCP-less).
    TapStaticVirtualMedia,
}

impl Network {
    fn on_tap(&self) -> bool {
        !matches!(self, Network::User | Network::UserVirtualMedia)
    }
}

/// The address a DHCP-less node's `network_data` gives its ramdisk, on the namespace's
/// provisioning network.
const STATIC_ADDRESS: &str = "10.251.0.60";

/// What is deployed.
#[derive(PartialEq)]
enum Os {
    /// The marker OS as a raw FAT disk.
    Raw,
    /// The marker OS on a partitioned disk, as a qcow2 (the real `qemu-img`'s), that
    /// also prints its config drive's meta data.
    Qcow2ReadingItsConfigDrive,
    /// The marker OS as a UEFI disk (a GPT, an EFI system partition), on a UEFI VM.
    UefiGpt,
    /// The same with its loader only under a distribution's folder: the VM boots it
    /// through the boot entry its agent adds.
    UefiGptWithoutFallback,
    /// The same booting through Debian's signed shim and GRUB, on a UEFI VM whose node
    /// asks for Secure Boot; its ramdisk built with `--secure-boot` (the bootloader kept
    /// aside for the test to give).
    SignedUefiGpt,
}

/// An engine, a lab with one VM, and its node enrolled (ipxe boot, the ramdisk, the
/// image), available without cleaning.
struct VmLab {
    // Dropped in this order: the lab (its VM) before the engine, the namespace last.
    lab: Lab,
    engine: Engine,
    _provisioning: Option<(Option<netns::Dnsmasq>, netns::Netns)>,
    node: String,
    image: std::path::PathBuf,
    /// `bootloader.img` of a `--secure-boot` ramdisk.
    bootloader: Option<std::path::PathBuf>,
    disk: std::path::PathBuf,
    console: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl VmLab {
    /// `deploy_timeout` seconds of silence fail a deploy.
    fn start(deploy_timeout: u64, network: Network, os: Os) -> VmLab {
        let dir = tempfile::tempdir().unwrap();
        let boot = dir.path().join("boot");
        let (kernel, ramdisk, bootloader) = match os {
            Os::SignedUefiGpt => {
                let (kernel, ramdisk, bootloader) = vm::secure_boot_ramdisk(&boot);
                (kernel, ramdisk, Some(bootloader))
            }
            _ => {
                let (kernel, ramdisk) = vm::ramdisk(&boot);
                (kernel, ramdisk, None)
            }
        };
        // `image`: the raw disk the VM must hold; `source`: what the operator gives.
        let (image, source) = match os {
            Os::Raw => {
                let image = vm::bootable_image(dir.path(), &kernel, MARKER, 64);
                (image.clone(), image)
            }
            Os::Qcow2ReadingItsConfigDrive => {
                let image = vm::config_drive_image(dir.path(), &kernel, MARKER, 64);
                let qcow2 = dir.path().join("os.qcow2");
                support::to_qcow2(&image, &qcow2);
                (image, qcow2)
            }
            Os::UefiGpt | Os::UefiGptWithoutFallback => {
                let loader = match os {
                    Os::UefiGpt => EspLoader::Removable,
                    _ => EspLoader::Distribution,
                };
                let image = vm::uefi_image(dir.path(), &kernel, MARKER, 64, loader);
                (image.clone(), image)
            }
            Os::SignedUefiGpt => {
                let image = vm::signed_uefi_image(dir.path(), &kernel, MARKER, 64);
                (image.clone(), image)
            }
        };
        // Every lab machine starts as a BIOS PC: a UEFI node's machine becomes a UEFI one
        // only by its BMC being told the node's boot mode.
        let firmware = "bios";
        let sha = sha256_of(&source);
        let port = emulators::free_tcp_port();
        let guest_engine = match network.on_tap() {
            false => "10.0.2.100",
            true => netns::PROVISIONING,
        };
        let public = format!("http://{guest_engine}:{port}");
        let allowed = format!("--file-url-allowed-path={}", dir.path().display());
        let timeout = deploy_timeout.to_string();
        let external = format!("--external-http-url=http://127.0.0.1:{port}");
        let flags = [
            &external,
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
        ];
        let data = dir.path().join("data");
        let (engine, lab, provisioning) = match network {
            Network::User | Network::UserVirtualMedia => {
                let engine = Engine::start_on(port, &data, &flags);
                let mut more = vec!["--firmware", firmware];
                if network == Network::UserVirtualMedia {
                    more.push("--no-dhcp-boot-file");
                }
                let lab = Lab::start_vm(&dir.path().join("lab"), &engine.url, &more);
                (engine, lab, None)
            }
            Network::Tap
            | Network::TapWithoutNicRom
            | Network::TapHttpBoot
            | Network::TapStaticVirtualMedia => {
                let ns = netns::Netns::create();
                let dnsmasq = (network != Network::TapStaticVirtualMedia)
                    .then(|| ns.dnsmasq(&dnsmasq_config(dir.path(), &public, &ns.tap), dir.path()));
                let engine = Engine::start_in(&ns, port, &data, &flags);
                let more: &[&str] = match network {
                    Network::TapWithoutNicRom | Network::TapHttpBoot => &["--no-nic-rom"],
                    _ => &[],
                };
                let lab = Lab::start_vm_in(&ns, &dir.path().join("lab"), &public, more);
                (engine, lab, Some((dnsmasq, ns)))
            }
        };
        let machine = lab.machines[0].clone();
        // A BIOS image's node says so; a UEFI one takes the engine's default (uefi), which
        // its BMC is told with every boot device.
        let mut properties = match os {
            Os::UefiGpt | Os::UefiGptWithoutFallback => json!({}),
            Os::SignedUefiGpt => json!({"capabilities": "secure_boot:true"}),
            Os::Raw | Os::Qcow2ReadingItsConfigDrive => json!({"capabilities": "boot_mode:bios"}),
        };
        // On the tap, the VM's first disk is not the one the agent would pick.
        if network.on_tap() {
            properties["root_device"] = json!({"serial": "machine-000-disk0"});
        }
        // DHCP-less: the ramdisk's address, on the link of the VM's MAC.
        let network_data = match network {
            Network::TapStaticVirtualMedia => json!({
                "links": [{"id": "port0", "type": "phy", "ethernet_mac_address": machine["mac"]}],
                "networks": [{
                    "id": "provisioning", "type": "ipv4", "link": "port0",
                    "ip_address": STATIC_ADDRESS, "netmask": "255.255.255.0",
                    "routes": [{"network": "0.0.0.0", "netmask": "0.0.0.0", "gateway": netns::PROVISIONING}],
                }],
                "services": [],
            }),
            _ => json!({}),
        };
        let node = json!({
            "name": "vm-1",
            "driver": "redfish",
            "deploy_interface": "direct",
            "network_data": network_data,
            "boot_interface": match network {
                Network::UserVirtualMedia | Network::TapStaticVirtualMedia => {
                    "redfish-virtual-media"
                }
                Network::TapHttpBoot => "http-ipxe",
                Network::User | Network::Tap | Network::TapWithoutNicRom => "ipxe",
            },
            "driver_info": {
                "redfish_address": machine["redfish_address"],
                "redfish_system_id": machine["redfish_system_id"],
                "deploy_kernel": kernel.display().to_string(),
                "deploy_ramdisk": ramdisk.display().to_string(),
                "kernel_append_params": machine["kernel_append_params"],
            },
            "properties": properties,
            "instance_info": {
                "image_source": source.display().to_string(),
                "image_os_hash_algo": "sha256",
                "image_os_hash_value": sha,
            },
        });
        let node = support::enroll_available(&engine.url, node, &machine["mac"]);
        VmLab {
            disk: machine["disk"].as_str().unwrap().into(),
            console: machine["console"].as_str().unwrap().into(),
            lab,
            engine,
            _provisioning: provisioning,
            node,
            image,
            bootloader,
            _dir: dir,
        }
    }

    /// Deploys and waits for the deploy to end; the node as it ended.
    fn deploy(&self) -> Value {
        provision(&self.engine.url, &self.node, "active");
        self.wait_end(&["active", "deploy failed"])
    }

    /// [`VmLab::deploy`] with a config drive, in the dict form (API 1.56).
    fn deploy_with_config_drive(&self, drive: Value) -> Value {
        let (status, body) = call(
            "PUT",
            &format!(
                "{}/v1/nodes/{}/states/provision",
                self.engine.url, self.node
            ),
            Some(json!({"target": "active", "configdrive": drive})),
        );
        assert_eq!(status, 202, "{body}");
        self.wait_end(&["active", "deploy failed"])
    }

    /// [`VmLab::deploy`], which must end active (else the console and dnsmasq's log are
    /// shown); the node, the console and dnsmasq's log (empty without one).
    fn deploy_to_active(&self) -> (Value, String, String) {
        let active = self.deploy();
        let console = self.console_text();
        let log = match &self._provisioning {
            Some((Some(dnsmasq), _)) => dnsmasq.log_text(),
            _ => String::new(),
        };
        assert_eq!(
            active["provision_state"], "active",
            "{active}\nconsole:\n{console}\ndnsmasq:\n{log}"
        );
        (active, console, log)
    }

    /// Whether the VM's disk begins with the image.
    fn holds_image(&self) -> bool {
        head(&self.disk, 64 << 20) == std::fs::read(&self.image).unwrap()
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

/// The node's clock as each heartbeat moved it, while it waits for its agent: a thread
/// polling the node until dropped.
struct Clocks {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<Vec<String>>>,
}

impl Clocks {
    fn watch(url: &str, node: &str) -> Clocks {
        use std::sync::atomic::Ordering;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (url, node, done) = (url.to_owned(), node.to_owned(), stop.clone());
        let thread = std::thread::spawn(move || {
            let mut seen: Vec<String> = Vec::new();
            while !done.load(Ordering::Relaxed) {
                let (_, n) = call("GET", &format!("{url}/v1/nodes/{node}"), None);
                if n["provision_state"] == "wait call-back"
                    && let Some(at) = n["provision_updated_at"].as_str()
                    && seen.last().map(String::as_str) != Some(at)
                {
                    seen.push(at.to_owned());
                }
                std::thread::sleep(std::time::Duration::from_millis(200));
            }
            seen
        });
        Clocks {
            stop,
            thread: Some(thread),
        }
    }

    /// The longest time between two heartbeats' touches (the wait for the first one, the
    /// ramdisk's boot, left out).
    fn longest_gap(mut self) -> f64 {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let seen = self.thread.take().unwrap().join().unwrap();
        let times: Vec<chrono::DateTime<chrono::FixedOffset>> = seen
            .iter()
            .map(|t| chrono::DateTime::parse_from_rfc3339(t).unwrap())
            .collect();
        assert!(times.len() > 3, "too few heartbeats seen: {seen:?}");
        times[1..]
            .windows(2)
            .map(|w| (w[1] - w[0]).as_seconds_f64())
            .fold(0.0, f64::max)
    }
}

/// The bytes the agent says it wrote (`image written bytes_written=…` on its console).
fn bytes_written(console: &str) -> u64 {
    let line = console
        .lines()
        .find(|l| l.contains("image written"))
        .unwrap_or_else(|| panic!("no image written on the console:\n{console}"));
    // The agent's log is coloured: its escape sequences go first.
    let mut plain = String::new();
    let mut in_escape = false;
    for c in line.chars() {
        match (in_escape, c) {
            (false, '\x1b') => in_escape = true,
            (false, c) => plain.push(c),
            (true, 'm') => in_escape = false,
            (true, _) => {}
        }
    }
    let after = plain.split("bytes_written=").nth(1).unwrap_or_default();
    let digits: String = after.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().unwrap_or_else(|_| panic!("{plain}"))
}

/// Bytes of `image` in 64 KiB pieces that are not all zeros: what an agent that skips
/// zeros must write.
fn data_bytes(image: &[u8]) -> u64 {
    let piece = 64 << 10;
    image
        .chunks(piece)
        .filter(|c| c.iter().any(|&b| b != 0))
        .map(|c| c.len() as u64)
        .sum()
}

#[test]
fn a_vm_network_boots_the_ramdisk_is_deployed_a_qcow2_and_config_drive_boots_them_and_is_cleaned() {
    let vm = VmLab::start(120, Network::User, Os::Qcow2ReadingItsConfigDrive);
    let key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIDeploydTestKey test@deployd";
    let clocks = Clocks::watch(&vm.engine.url, &vm.node);
    let active = vm.deploy_with_config_drive(json!({
        "meta_data": {"hostname": "vm-web-1", "public_keys": {"default": key}},
        "network_data": {"links": [], "networks": [], "services": []},
    }));
    let booted = vm.console_text();
    assert_eq!(
        active["provision_state"], "active",
        "{active}\nconsole:\n{booted}"
    );
    // Heartbeats came all along (every 1.2 to 2.4 s: a timeout of 4 s), none stalled.
    let gap = clocks.longest_gap();
    assert!(
        gap <= 4.0 + 5.0,
        "a heartbeat came {gap:.1} s after the one before"
    );
    // The agent wrote the image's data, not its zeros, to the virtio disk.
    let data = data_bytes(&std::fs::read(&vm.image).unwrap());
    let written = bytes_written(&booted);
    assert!(
        written as f64 <= data as f64 * 1.05,
        "{written} bytes written for {data} bytes of data"
    );
    eprintln!(
        "sparse deploy: {written} bytes written for {data} bytes of data in a 64 MiB image; heartbeats at most {gap:.1} s apart"
    );
    assert!(
        booted.contains("deployd ramdisk: starting the agent"),
        "{booted}"
    );
    // The VM's disk holds the raw image the qcow2 describes, but for the partition
    // entry the config drive added to its MBR (the second of four, bytes 462..478).
    let (mut on_disk, mut image) = (head(&vm.disk, 64 << 20), std::fs::read(&vm.image).unwrap());
    on_disk[462..478].fill(0);
    image[462..478].fill(0);
    assert!(on_disk == image, "the VM's disk holds the image");
    // The deployed OS booted from the disk, found the config drive and read it.
    vm::wait_console(&vm.console, MARKER, 180);
    let seen = vm::wait_console(&vm.console, "config-2: {", 60);
    let line = seen.lines().find(|l| l.contains("config-2: {")).unwrap();
    assert!(
        line.contains("\"hostname\":\"vm-web-1\"") && line.contains(key),
        "{line}"
    );

    // Undeploy with automated cleaning: the ramdisk boots again and erases the disk's
    // metadata (its first MiB here), then the node is available.
    provision(&vm.engine.url, &vm.node, "deleted");
    let cleaned = vm.wait_end(&["available", "clean failed"]);
    assert_eq!(cleaned["provision_state"], "available", "{cleaned}");
    assert!(
        head(&vm.disk, 1 << 20).iter().all(|&b| b == 0),
        "the boot sector and the filesystem's metadata are erased"
    );
    let machine = vm.lab.machine("machine-000");
    assert_eq!(
        machine["agent_boots"],
        json!(2),
        "two network boots: deploy and clean"
    );
    assert_eq!(
        machine["boot_mode"], "bios",
        "the node's boot_mode capability"
    );
    assert_eq!(active["boot_mode"], "bios");
}

/// A UEFI machine (OVMF, its variables its own): it network-boots the ramdisk through the
/// UEFI iPXE of its NIC's ROM, is deployed with a GPT image whose EFI system partition
/// holds the OS (a unified kernel image at the removable-media path), and boots it from
/// its disk. Told by its BMC to boot from the network once more, the engine's script for
/// an active node hands it back to its firmware (UEFI has no BIOS drive to `sanboot`),
/// which boots the disk again.
#[test]
fn a_uefi_vm_network_boots_the_ramdisk_is_deployed_a_gpt_image_and_boots_it() {
    let vm = VmLab::start(120, Network::User, Os::UefiGpt);
    let (active, _, _) = vm.deploy_to_active();
    assert!(vm.holds_image(), "the VM's disk holds the image");
    let booted = vm::wait_console(&vm.console, MARKER, 180);
    assert!(
        booted.contains("deployd ramdisk: starting the agent"),
        "{booted}"
    );
    // The lab started it as a BIOS PC; the engine told its BMC the node's mode (Ironic's
    // default, uefi) with the boot device, and it booted OVMF from then on.
    assert!(
        booted.contains("BdsDxe"),
        "OVMF's boot manager ran: {booted}"
    );
    assert_eq!(vm.lab.machine("machine-000")["boot_mode"], "uefi");
    assert_eq!(active["boot_mode"], "uefi", "the node shows its BMC's mode");
    wait_power(&vm, "Off");

    let system = format!(
        "{}{}",
        vm.lab.machines[0]["redfish_address"].as_str().unwrap(),
        vm.lab.machines[0]["redfish_system_id"].as_str().unwrap()
    );
    let boot =
        json!({"Boot": {"BootSourceOverrideTarget": "Pxe", "BootSourceOverrideEnabled": "Once"}});
    let (status, body) = call("PATCH", &system, Some(boot));
    assert!(status < 300, "{status} {body}");
    let reset = format!("{system}/Actions/ComputerSystem.Reset");
    let (status, body) = call("POST", &reset, Some(json!({"ResetType": "On"})));
    assert!(status < 300, "{status} {body}");
    let again = vm::wait_console_times(&vm.console, MARKER, 2, 180);
    let after = &again[again.find(MARKER).unwrap()..];
    assert!(
        after.contains(&format!(
            "node {} is active; booting its local disk",
            vm.node
        )),
        "the second boot went through the engine's script: {after}"
    );
}

/// Virtual media boot, with no boot options from DHCP: the engine builds the node's ISO
/// (its ramdisk, BIOS and UEFI El Torito entries), its BMC inserts it and boots the UEFI
/// VM from its CD (QEMU reads the ISO from the engine over HTTP, as a BMC streams it);
/// the ramdisk's agent reaches the engine by its kernel parameters, the deploy ends
/// active with the image on the disk, the CD is ejected and the ISO's url is refused from
/// then on; the VM boots its disk.
#[test]
fn a_uefi_vm_boots_its_ramdisk_from_virtual_media_is_deployed_and_boots_its_disk() {
    let vm = VmLab::start(120, Network::UserVirtualMedia, Os::UefiGpt);
    let (active, console, _) = vm.deploy_to_active();
    assert!(
        !console.contains("iPXE"),
        "nothing booted from the network: {console}"
    );
    assert!(
        console.contains("deployd ramdisk: starting the agent"),
        "{console}"
    );
    assert!(vm.holds_image(), "the VM's disk holds the image");
    assert_eq!(vm.lab.machine("machine-000")["agent_boots"], json!(1));
    // The CD was ejected and the token dropped: the ISO's url is refused.
    let system = format!(
        "{}{}",
        vm.lab.machines[0]["redfish_address"].as_str().unwrap(),
        vm.lab.machines[0]["redfish_system_id"].as_str().unwrap()
    );
    let (_, cd) = call("GET", &format!("{system}/VirtualMedia/Cd"), None);
    assert_eq!(cd["Inserted"], false, "{cd}");
    assert!(
        active["driver_internal_info"]
            .get("deployd_boot_iso_token")
            .is_none(),
        "{active}"
    );
    vm::wait_console(&vm.console, MARKER, 180);
}

/// Secure Boot over virtual media: the node asks for it (`secure_boot:true`), so its BMC
/// enables it with the boot device and the UEFI VM powers on into OVMF's Secure Boot
/// build with Microsoft's keys. The ISO's unified kernel image is unsigned: the firmware
/// refuses it, and the deploy times out. Given the bootloader `deployd ramdisk build
/// --secure-boot` wrote, the ISO boots Debian's signed shim, GRUB and kernel (locked down,
/// loading its signed drivers), the deploy ends active, and the signed disk boots with
/// Secure Boot on.
#[test]
fn a_secure_boot_vm_refuses_an_unsigned_ramdisk_and_boots_the_signed_one_and_its_disk() {
    let vm = VmLab::start(45, Network::UserVirtualMedia, Os::SignedUefiGpt);
    provision(&vm.engine.url, &vm.node, "active");
    let refused = vm::wait_console(&vm.console, "Access Denied", 180);
    assert!(
        !refused.contains("deployd ramdisk: up"),
        "the unsigned ramdisk never ran: {refused}"
    );
    let failed = vm.wait_end(&["active", "deploy failed"]);
    assert_eq!(failed["provision_state"], "deploy failed", "{failed}");
    assert_eq!(
        failed["secure_boot"], true,
        "the node shows its BMC's setting"
    );
    let machine = vm.lab.machine("machine-000");
    assert_eq!(
        (&machine["boot_mode"], &machine["secure_boot"]),
        (&json!("uefi"), &json!(true))
    );
    let system = format!(
        "{}{}",
        vm.lab.machines[0]["redfish_address"].as_str().unwrap(),
        vm.lab.machines[0]["redfish_system_id"].as_str().unwrap()
    );
    let (_, secure) = call("GET", &format!("{system}/SecureBoot"), None);
    assert_eq!(secure["SecureBootEnable"], true, "{secure}");
    assert_eq!(secure["SecureBootCurrentBoot"], "Enabled", "{secure}");
    // The failed flow's clean-up dropped the ISO's token and ejected the CD.
    let failed = wait_node(&vm.engine.url, &vm.node, 30, |n| {
        n["driver_internal_info"]
            .get("deployd_boot_iso_token")
            .is_none()
    });
    assert_eq!(failed["provision_state"], "deploy failed");
    let (_, cd) = call("GET", &format!("{system}/VirtualMedia/Cd"), None);
    assert_eq!(cd["Inserted"], false, "{cd}");

    let bootloader = vm.bootloader.as_ref().unwrap().display().to_string();
    let (status, body) = call(
        "PATCH",
        &format!("{}/v1/nodes/{}", vm.engine.url, vm.node),
        Some(json!([{"op": "add", "path": "/driver_info/bootloader", "value": bootloader}])),
    );
    assert_eq!(status, 200, "{body}");
    let active = vm.deploy();
    let console = vm.console_text();
    let signed = &console[console.rfind("Access Denied").unwrap()..];
    assert_eq!(
        active["provision_state"], "active",
        "{active}\nconsole:\n{signed}"
    );
    for line in [
        "(Secure Boot chain)",
        "EFI stub: UEFI Secure Boot is enabled",
        "Kernel is locked down from EFI Secure Boot",
        "deployd ramdisk: starting the agent",
    ] {
        assert!(signed.contains(line), "{line:?} on the console:\n{signed}");
    }
    assert!(vm.holds_image(), "the VM's disk holds the image");
    // The deployed disk boots through its own signed chain, Secure Boot still on.
    let booted = vm::wait_console(&vm.console, MARKER, 180);
    let os = &booted[booted.rfind("deployd ramdisk: starting the agent").unwrap()..];
    assert!(
        os.contains("deployd test OS: booting /vmlinuz (Secure Boot chain)")
            && os.contains("Kernel is locked down from EFI Secure Boot"),
        "{os}"
    );
}

/// Waits until the lab says the VM's power is `state`.
fn wait_power(vm: &VmLab, state: &str) {
    for _ in 0..120 {
        if vm.lab.machine("machine-000")["power"] == state {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
    panic!(
        "the VM's power is not {state}: {}",
        vm.lab.machine("machine-000")
    );
}

/// The seed in a VM, as `deployd demo --vm --firmware uefi` tells it: two UEFI VMs
/// (switched to OVMF by their BMC) network-boot (after KVM is probed), their agents write for longer than `deploy_callback_timeout` (48 MiB
/// at 1.5 MiB/s, 32 s, past 25 s; the timeout also covers the ramdisk's boot, as in
/// Ironic), and heartbeats keep the deploy alive to the end; the other VM is killed
/// (QEMU) mid-write and only the timeout notices. The deployed VM boots its disk.
#[test]
fn deployd_demo_vm_deploys_past_the_timeout_times_out_a_killed_vm_and_boots_the_disk() {
    let cache = emulators::repo_root().join("target/ramdisk-cache");
    let agent = vm::musl_agent();
    let out = std::process::Command::new(&*support::BIN)
        .args([
            "demo",
            "--vm",
            "--firmware",
            "uefi",
            "--machines",
            "2",
            "--image-mb",
            "48",
        ])
        .args(["--throttle", "1536K", "--timeout", "25", "--ramdisk-cache"])
        .arg(&cache)
        .arg("--agent")
        .arg(&agent)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The summary's own checks: the killed VM's node failed by the timeout and its disk
    // is not the image; the other is active with the image on its disk.
    assert!(stdout.contains("the demo ended as expected"), "{stdout}");
    assert!(
        stdout.contains("cut the power of (killed QEMU) machine-001 mid-write"),
        "{stdout}"
    );
    let ratio: f64 = stdout
        .split_once("× deploy_callback_timeout")
        .and_then(|(before, _)| before.rsplit(", ").next())
        .and_then(|r| r.parse().ok())
        .unwrap_or_else(|| panic!("no ratio in {stdout}"));
    assert!(ratio > 1.0, "the deploy outlasted the timeout: {stdout}");
    assert!(
        stdout.contains("machine-000  console: deployd demo OS: booted from its own disk"),
        "{stdout}"
    );
    assert!(
        stdout.contains("a GPT, an EFI system partition, a unified kernel image"),
        "the UEFI image: {stdout}"
    );
}

/// What `deployd boot dnsmasq-config` prints for a provisioning network on `interface`,
/// written to `dir/dnsmasq.conf`.
fn dnsmasq_config(dir: &Path, public_url: &str, interface: &str) -> std::path::PathBuf {
    let out = std::process::Command::new(&*support::BIN)
        .args(["boot", "dnsmasq-config", "--public-url", public_url])
        .args(["--interface", interface, "--range", netns::DHCP_RANGE])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let conf = dir.join("dnsmasq.conf");
    std::fs::write(&conf, out.stdout).unwrap();
    conf
}

/// The dnsmasq configuration `deployd boot dnsmasq-config` prints is read by the real
/// dnsmasq (`--test` parses it whole) and hands iPXE clients the engine's entry script,
/// other firmware iPXE by TFTP.
#[test]
fn the_dnsmasq_configuration_is_dnsmasqs_own() {
    let dir = tempfile::tempdir().unwrap();
    let conf = dnsmasq_config(dir.path(), "http://10.20.0.1:6385", "lo");
    let text = std::fs::read_to_string(&conf).unwrap();
    assert!(
        text.contains("dhcp-boot=tag:ipxe,http://10.20.0.1:6385/boot/ipxe\n")
            && text.contains("dhcp-boot=tag:!ipxe,tag:!efi64,tag:!efihttp,undionly.kpxe\n")
            && text
                .contains("dhcp-boot=tag:!ipxe,tag:efihttp,http://10.20.0.1:6385/boot/ipxe.efi\n")
            && text.contains("dhcp-option-force=tag:efihttp,60,HTTPClient\n"),
        "{text}"
    );
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

/// The boot chain the real way: a VM whose NIC is a tap in a network namespace gets its
/// address and the engine's script from the real dnsmasq there (configured by `deployd
/// boot dnsmasq-config`), network-boots the ramdisk, whose agent advertises the address
/// DHCP gave it; of its three disks, it is deployed to the one its root device hints name,
/// and boots it.
#[test]
fn a_vm_on_a_tap_boots_through_dnsmasq_is_deployed_and_boots_its_disk() {
    let vm = VmLab::start(120, Network::Tap, Os::Raw);
    // First with hints no disk meets: the agent refuses, and says which disks it saw.
    let hints =
        |hints: Value| json!([{"op": "add", "path": "/properties/root_device", "value": hints}]);
    let path = format!("{}/v1/nodes/{}", vm.engine.url, vm.node);
    let (status, body) = call(
        "PATCH",
        &path,
        Some(hints(json!({"serial": "no-such-disk"}))),
    );
    assert_eq!(status, 200, "{body}");
    let failed = vm.deploy();
    let error = failed["last_error"].as_str().unwrap_or_default().to_owned();
    assert_eq!(failed["provision_state"], "deploy failed", "{failed}");
    assert!(
        error.contains("no disk matches the root device hints")
            && error.contains("serial machine-000-disk0")
            && error.contains("vdb (")
            && error.contains("serial machine-000-disk2"),
        "{error}"
    );
    // Every serial has "disk" in it; only the first disk has 8 GiB.
    let named = json!({"serial": "<in> disk", "size": ">= 8"});
    let (status, body) = call("PATCH", &path, Some(hints(named)));
    assert_eq!(status, 200, "{body}");
    let active = vm.deploy();
    let dnsmasq = vm._provisioning.as_ref().unwrap().0.as_ref().unwrap();
    assert_eq!(
        active["provision_state"],
        "active",
        "{active}\nconsole:\n{}\ndnsmasq:\n{}",
        vm.console_text(),
        dnsmasq.log_text()
    );
    // Two leases to the VM's MAC: iPXE's, then the ramdisk's (whose agent advertised the
    // address it got: the engine called its command API there to deploy).
    let log = dnsmasq.log_text();
    let acks = log
        .lines()
        .filter(|l| l.contains("DHCPACK(prov0) 10.251.0."))
        .count();
    assert!(acks >= 2, "dnsmasq answered iPXE and the ramdisk: {log}");
    // The root device hints chose the first disk, which the VM boots, not the smaller
    // second one, which the agent picks without hints, nor the third.
    let others = vm.lab.machines[0]["extra_disks"].as_array().unwrap();
    assert_eq!(others.len(), 2);
    assert!(
        head(&vm.disk, 64 << 20) == std::fs::read(&vm.image).unwrap()
            && others.iter().all(|d| {
                head(Path::new(d.as_str().unwrap()), 1 << 20)
                    .iter()
                    .all(|&b| b == 0)
            }),
        "the image is on the first disk, nothing on the others; console:\n{}",
        vm.console_text()
    );
    assert_eq!(
        active["driver_internal_info"]["scratch"]["root_device"]["name"], "/dev/vda",
        "the chosen disk is on the node's record"
    );
    vm::wait_console(&vm.console, MARKER, 180);
}

/// UEFI firmware with no iPXE of its own, as many servers' NICs: OVMF's PXE asks the real
/// dnsmasq (`deployd boot dnsmasq-config`), which hands it Debian's `snponly.efi` by TFTP
/// (client architecture 7); that iPXE gets the engine's script over HTTP, the ramdisk is
/// deployed to the disk the hints name, and the disk boots.
#[test]
fn a_uefi_vm_without_ipxe_gets_it_by_tftp_from_dnsmasq_and_boots_its_disk() {
    let vm = VmLab::start(120, Network::TapWithoutNicRom, Os::UefiGpt);
    let (_, _, log) = vm.deploy_to_active();
    assert!(log.contains("snponly.efi"), "iPXE went out by TFTP: {log}");
    vm::wait_console(&vm.console, MARKER, 180);
}

/// UEFI HTTP boot (`boot_interface: http-ipxe`): the node's BMC boots the UEFI VM
/// `UefiHttp`, its firmware (OVMF, its PXE off) asks the real dnsmasq as an HTTP client
/// (client architecture 16), is answered `HTTPClient` with the engine's `/boot/ipxe.efi`,
/// and loads that iPXE over HTTP: no TFTP. iPXE gets the engine's script, the ramdisk is
/// deployed, and the disk boots.
#[test]
fn a_uefi_vm_boots_by_uefi_http_boot_through_dnsmasq_and_boots_its_disk() {
    let vm = VmLab::start(120, Network::TapHttpBoot, Os::UefiGpt);
    let (_, console, log) = vm.deploy_to_active();
    assert!(
        log.contains("/boot/ipxe.efi") && !log.contains("snponly.efi"),
        "iPXE's url went out, nothing by TFTP: {log}"
    );
    assert!(
        console.contains("HTTP Boot"),
        "OVMF booted by HTTP: {console}"
    );
    assert_eq!(vm.lab.machine("machine-000")["boot"], "Hdd");
    vm::wait_console(&vm.console, MARKER, 180);
}

/// DHCP-less virtual media (Ironic's, API 1.66): on a network with no DHCP server at all,
/// the node's `network_data` becomes its ramdisk's static address (the ISO's `ip=` and
/// `BOOTIF`), the agent reaches the engine from it, the deploy ends active and the disk
/// boots.
#[test]
fn a_uefi_vm_without_dhcp_boots_virtual_media_with_its_static_address_and_is_deployed() {
    let vm = VmLab::start(120, Network::TapStaticVirtualMedia, Os::UefiGpt);
    let (_, console, _) = vm.deploy_to_active();
    assert!(
        console.contains(&format!(
            "deployd ramdisk: static address {STATIC_ADDRESS}/255.255.255.0"
        )),
        "{console}"
    );
    assert!(!console.contains("deployd ramdisk: DHCP"), "{console}");
    assert!(vm.holds_image(), "the VM's disk holds the image");
    vm::wait_console(&vm.console, MARKER, 180);
}

/// An image whose loader is only under its distribution's folder (`\EFI\deployd\`, no
/// removable-media fallback), as many distributions ship theirs: the agent adds its UEFI
/// boot entry after writing it (to the VM's firmware variables, through efivarfs), and
/// the VM boots its disk through that entry, which persists in its variable store.
#[test]
fn a_uefi_image_without_a_fallback_loader_boots_through_the_entry_its_agent_adds() {
    let vm = VmLab::start(120, Network::User, Os::UefiGptWithoutFallback);
    let (_, console, _) = vm.deploy_to_active();
    assert!(
        console.contains("UEFI boot entry added")
            && console.contains("\"deployd image\" → \\EFI\\deployd\\deployd.efi"),
        "{console}"
    );
    assert!(vm.holds_image(), "the VM's disk holds the image");
    let booted = vm::wait_console(&vm.console, MARKER, 180);
    let after = &booted[booted.rfind("UEFI boot entry added").unwrap()..];
    assert!(
        after
            .lines()
            .any(|l| l.contains("BdsDxe: starting Boot") && l.contains("\"deployd image\"")),
        "OVMF started the entry: {after}"
    );
}
