//! Machines as QEMU virtual machines (`deployd lab --vm`): a virtio disk (the machine's
//! disk file) and a virtio NIC whose iPXE ROM boots from the network, under software
//! emulation (TCG) unless told `--accel kvm`: `/dev/kvm` may be a nested hypervisor that
//! cannot run a guest kernel, so KVM is never assumed.
//!
//! A VM's NIC ([`Nic`]) is on one of two networks:
//! - QEMU's user mode with `restrict=on` (the default): the guest reaches nothing but
//!   what is forwarded. Its DHCP hands out the engine's boot script as an http url; the
//!   engine is at [`GUEST_ENGINE`] inside the guest, each connection there relayed to the
//!   engine on the host's loopback by `deployd lab-relay` (a `guestfwd` with a fixed
//!   target opens one connection for the VM's whole life); the agent's command API is
//!   forwarded from a loopback port of the host, which the agent advertises
//!   (`ipa-advertise-host`/`-port`, passed in the node's `kernel_append_params`).
//! - A tap device (`--tap`), as a real machine's NIC on a provisioning network: the
//!   operator's DHCP server (dnsmasq, configured by `deployd boot dnsmasq-config`) hands
//!   out the boot chain, and the engine reaches the agent at its own address.
//!
//! A VM's firmware ([`Firmware`]) is SeaBIOS, QEMU's own, or OVMF (UEFI, Debian's
//! `ovmf`), whose variables (its boot entries among them) persist in a copy per machine,
//! `<name>.efivars.fd`, as a real machine's NVRAM does. Under both, iPXE comes from the
//! NIC's option ROM (Debian's `ipxe-qemu` ROMs carry its BIOS and its UEFI build).
//!
//! Booted `UefiHttp`, a UEFI VM's OVMF has its PXE turned off (fw_cfg's
//! `opt/org.tianocore/IPv4PXESupport`), so its network boot option is UEFI HTTP boot:
//! the DHCP server's `HTTPClient` answer names the url of what it loads.
//!
//! With Secure Boot on, a UEFI VM runs OVMF's Secure Boot build (a q35 PC with SMM, so
//! the variables are out of the guest's reach) on a variable store with Microsoft's keys
//! enrolled (`OVMF_VARS_4M.ms.fd`), kept apart as `<name>.efivars-secure.fd`: OVMF then
//! starts only what Microsoft's UEFI CA signed, as a server as shipped does. Its option
//! ROMs are unsigned, so such a VM boots from disks and CDs, not through iPXE.
//!
//! The firmware, iPXE, the kernel and the deployed OS all write to the serial console,
//! kept per machine in `<name>.console.log` (appended across boots). The serial port is
//! also a Unix socket QEMU serves, `<name>.serial.sock`, which the lab's IPMI BMC bridges
//! to Serial-over-LAN (see [`crate::ipmi`]): what is typed there reaches the machine.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use crate::machine::Boot;

/// The engine's address as guests see it: what `--public-url` must name.
pub const GUEST_ENGINE: &str = "10.0.2.100";

/// Where the guest's agent listens, forwarded from a host port.
pub const AGENT_PORT: u16 = 9999;

/// OVMF's code (read-only) and the variable store each machine starts from, as Debian's
/// `ovmf` installs them (the 4 MiB builds).
pub const OVMF_CODE: &str = "/usr/share/OVMF/OVMF_CODE_4M.fd";
pub const OVMF_VARS: &str = "/usr/share/OVMF/OVMF_VARS_4M.fd";
/// OVMF's Secure Boot build, and a variable store with Microsoft's keys enrolled.
pub const OVMF_CODE_SECURE: &str = "/usr/share/OVMF/OVMF_CODE_4M.secboot.fd";
pub const OVMF_VARS_SECURE: &str = "/usr/share/OVMF/OVMF_VARS_4M.ms.fd";

/// A machine's variable store for a boot with or without Secure Boot, beside `vars`.
pub fn vars_file(vars: &Path, secure_boot: bool) -> PathBuf {
    match secure_boot {
        false => vars.to_owned(),
        true => vars.with_file_name(
            vars.file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .replace(".efivars.fd", ".efivars-secure.fd"),
        ),
    }
}

/// A VM's firmware.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Firmware {
    /// SeaBIOS (QEMU's default): a legacy BIOS PC.
    #[default]
    Bios,
    /// OVMF: a UEFI PC, its variables kept per machine.
    Uefi,
}

impl Firmware {
    /// Makes `vars` the machine's variable store if it has none yet (a UEFI machine's
    /// first power-on), from OVMF's empty one, or with Secure Boot from the one with
    /// Microsoft's keys.
    pub fn prepare(self, vars: &Path, secure_boot: bool) -> std::io::Result<()> {
        let from = if secure_boot {
            OVMF_VARS_SECURE
        } else {
            OVMF_VARS
        };
        if self == Firmware::Uefi && !vars.exists() {
            std::fs::copy(from, vars).map_err(|e| {
                std::io::Error::new(
                    e.kind(),
                    format!("copying {from} (Debian's ovmf) to {}: {e}", vars.display()),
                )
            })?;
        }
        Ok(())
    }
}

/// What every VM of a lab shares.
#[derive(Clone, Debug)]
pub struct VmConfig {
    pub qemu: PathBuf,
    /// The engine on the host's loopback, which guests reach at [`GUEST_ENGINE`].
    pub engine: SocketAddr,
    /// This executable, whose `lab-relay` subcommand carries one guest connection.
    pub relay: PathBuf,
    pub memory_mb: u32,
    /// `tcg`, or `kvm` where the operator knows it runs guests.
    pub accel: String,
    /// Whether QEMU's DHCP names the engine's boot script (`bootfile`); without it a VM
    /// can boot its ramdisk only from virtual media.
    pub dhcp_boot_file: bool,
    /// Whether the NIC carries iPXE in its option ROM; without it the firmware's own PXE
    /// boots (and gets iPXE by TFTP: `deployd boot dnsmasq-config`).
    pub nic_rom: bool,
}

/// A machine's network link.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Nic {
    /// A simulated machine's agent runs on the host: no NIC.
    None,
    /// QEMU's user mode, the agent's command API forwarded from this host port.
    Forwarded(u16),
    /// A tap device on the operator's network.
    Tap(String),
}

impl Nic {
    /// The kernel parameters a ramdisk on this link needs besides Ironic's: the serial
    /// console, and where the engine reaches its agent when that is a forward.
    pub fn kernel_append_params(&self) -> Option<String> {
        match self {
            Nic::None => None,
            Nic::Forwarded(port) => Some(format!(
                "console=ttyS0 ipa-advertise-host=127.0.0.1 ipa-advertise-port={port}"
            )),
            Nic::Tap(_) => Some("console=ttyS0".into()),
        }
    }
}

/// One machine's part: its NIC, disks and console.
pub struct VmMachine<'a> {
    pub mac: &'a str,
    pub disk: &'a Path,
    /// The disks' serial numbers are this, then `-disk0`, `-disk1` (root device hints
    /// can name them).
    pub serial: &'a str,
    /// Its other disks, after `disk`.
    pub extra_disks: &'a [PathBuf],
    pub console: &'a Path,
    /// Its serial port's socket.
    pub serial_port: &'a Path,
    /// Its UEFI variable store (see [`Firmware::prepare`]); unused under BIOS.
    pub vars: &'a Path,
    pub nic: &'a Nic,
    /// What it boots from at this power-on: the network, its disk, or its CD.
    pub boot: Boot,
    /// The image in its virtual CD (an http url QEMU reads as a CD, as a BMC streams
    /// virtual media), if one is inserted.
    pub cd: Option<&'a str>,
    /// Its firmware at this power-on (its BMC's boot mode).
    pub firmware: Firmware,
    /// Whether its UEFI firmware enforces Secure Boot at this power-on.
    pub secure_boot: bool,
}

impl VmConfig {
    /// The url the guest's DHCP names as its boot file: the engine's entry script.
    pub fn boot_url(&self) -> String {
        format!("http://{GUEST_ENGINE}:{}/boot/ipxe", self.engine.port())
    }

    /// The engine's url as guests reach it (the engine's `--public-url`).
    pub fn guest_api_url(&self) -> String {
        format!("http://{GUEST_ENGINE}:{}", self.engine.port())
    }

    /// QEMU's arguments for one boot of `m`.
    pub fn args(&self, m: &VmMachine, sercon: &Path) -> Vec<String> {
        // A comma inside a QEMU option value is written twice.
        let q = |s: &str| s.replace(',', ",,");
        let netdev = match m.nic {
            Nic::Forwarded(agent_port) => {
                let relay = format!(
                    "cmd:{} lab-relay {}",
                    q(&self.relay.display().to_string()),
                    self.engine
                );
                let bootfile = match self.dhcp_boot_file {
                    true => format!("bootfile={},", q(&self.boot_url())),
                    false => String::new(),
                };
                format!(
                    "user,id=net0,restrict=on,{bootfile}guestfwd=tcp:{GUEST_ENGINE}:{}-{relay},hostfwd=tcp:127.0.0.1:{agent_port}-:{AGENT_PORT}",
                    self.engine.port(),
                )
            }
            Nic::Tap(name) => format!("tap,id=net0,ifname={},script=no,downscript=no", q(name)),
            Nic::None => "none,id=net0".into(),
        };
        let mut args = [
            "-accel",
            &self.accel,
            "-m",
            &self.memory_mb.to_string(),
            "-smp",
            "1",
            "-display",
            "none",
            "-no-reboot",
            "-nodefaults",
            "-chardev",
            &format!(
                "socket,id=console,path={},server=on,wait=off,logfile={},logappend=on",
                q(&m.serial_port.display().to_string()),
                q(&m.console.display().to_string())
            ),
            "-serial",
            "chardev:console",
            // Without this the firmware's and iPXE's text never reaches the serial port.
            "-fw_cfg",
            &format!(
                "name=etc/sercon-port,file={}",
                q(&sercon.display().to_string())
            ),
            "-netdev",
            &netdev,
            "-device",
            "virtio-rng-pci",
        ]
        .map(String::from)
        .to_vec();
        // SeaBIOS takes `-boot order`; OVMF a `bootindex` per device (the one to boot
        // first at 1, then the disk, then the rest).
        let (nic_index, disk_index, cd_index) = match m.boot {
            Boot::Pxe | Boot::UefiHttp => (1, 2, 3),
            Boot::Hdd => (2, 1, 3),
            Boot::Cd => (3, 2, 1),
        };
        let index = |i: u8| match m.firmware {
            Firmware::Bios => String::new(),
            Firmware::Uefi => format!(",bootindex={i}"),
        };
        match m.firmware {
            Firmware::Bios => {
                let order = match m.boot {
                    Boot::Pxe | Boot::UefiHttp => "order=n",
                    Boot::Hdd => "order=c",
                    Boot::Cd => "order=d",
                };
                args.extend(["-boot".into(), order.into()]);
            }
            Firmware::Uefi => {
                let code = if m.secure_boot {
                    args.extend([
                        "-machine".into(),
                        "q35,smm=on".into(),
                        "-global".into(),
                        "driver=cfi.pflash01,property=secure,value=on".into(),
                    ]);
                    OVMF_CODE_SECURE
                } else {
                    OVMF_CODE
                };
                if m.boot == Boot::UefiHttp {
                    // OVMF's network boot options without PXE: its HTTP boot comes first.
                    for knob in ["IPv4PXESupport", "IPv6PXESupport"] {
                        args.extend([
                            "-fw_cfg".into(),
                            format!("name=opt/org.tianocore/{knob},string=no"),
                        ]);
                    }
                }
                args.extend([
                    "-drive".into(),
                    format!("if=pflash,format=raw,unit=0,readonly=on,file={code}"),
                    "-drive".into(),
                    format!(
                        "if=pflash,format=raw,unit=1,file={}",
                        q(&m.vars.display().to_string())
                    ),
                ]);
            }
        }
        let rom = if self.nic_rom { "" } else { ",romfile=" };
        args.extend([
            "-device".into(),
            format!(
                "virtio-net-pci,netdev=net0,mac={}{rom}{}",
                m.mac,
                index(nic_index)
            ),
        ]);
        if let Some(url) = m.cd {
            let driver = if url.starts_with("https://") {
                "https"
            } else {
                "http"
            };
            args.extend([
                "-drive".into(),
                format!(
                    "if=none,id=cd0,media=cdrom,readonly=on,file.driver={driver},file.url={}",
                    q(url)
                ),
                "-device".into(),
                format!("ide-cd,drive=cd0{}", index(cd_index)),
            ]);
        }
        let disks = std::iter::once(m.disk).chain(m.extra_disks.iter().map(PathBuf::as_path));
        for (i, disk) in disks.enumerate() {
            args.push("-drive".into());
            args.push(format!(
                "file={},format=raw,if=none,id=disk{i},cache=unsafe",
                q(&disk.display().to_string()),
            ));
            args.push("-device".into());
            args.push(format!(
                "virtio-blk-pci,drive=disk{i},serial={}-disk{i}{}",
                q(m.serial),
                if i == 0 {
                    index(disk_index)
                } else {
                    String::new()
                }
            ));
        }
        args
    }
}

/// The file `-fw_cfg etc/sercon-port` reads: the serial port 0x3f8, little-endian.
pub fn sercon_file(dir: &Path) -> std::io::Result<PathBuf> {
    let path = dir.join("sercon-port");
    std::fs::write(&path, [0xf8, 0x03])?;
    Ok(path)
}

/// Why an accelerator was not chosen.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error("/dev/kvm is missing")]
    NoKvm,
    #[error("QEMU could not start: {0}")]
    Qemu(std::io::Error),
    #[error("the probe guest ended without booting: {0}")]
    Ended(String),
    #[error(
        "a guest kernel did not reach its init within {0:?} (a nested hypervisor without hardware virtualisation underneath behaves so)"
    )]
    TooSlow(std::time::Duration),
    #[error("building the probe's initramfs: {0:#}")]
    Initramfs(anyhow::Error),
}

/// The accelerator to run VMs with: `tcg` and `kvm` as asked; `auto` is KVM only when
/// [`probe`] sees a guest really boot under it, else TCG (and says why).
pub async fn choose_accel(
    qemu: &Path,
    asked: &str,
    kernel: Option<&Path>,
    dir: &Path,
) -> anyhow::Result<(String, Option<ProbeError>)> {
    match asked {
        "tcg" | "kvm" => Ok((asked.to_owned(), None)),
        "auto" => {
            let kernel = kernel.ok_or_else(|| {
                anyhow::anyhow!("--accel auto boots a kernel to probe KVM: give --probe-kernel")
            })?;
            let deadline = std::time::Duration::from_secs(10);
            match probe(qemu, "kvm", kernel, dir, deadline).await {
                Ok(()) => Ok(("kvm".into(), None)),
                Err(why) => Ok(("tcg".into(), Some(why))),
            }
        }
        other => anyhow::bail!("unknown accelerator {other:?}: tcg, kvm or auto"),
    }
}

/// Boots `kernel` (straight from QEMU's `-kernel`) with an initramfs that prints a line
/// and powers off, under `accel`; Ok when the line comes within `deadline`. `/dev/kvm`
/// answering is not enough: under a nested hypervisor with no hardware support below,
/// `KVM_CREATE_VM` succeeds and the guest never gets through its decompressor.
pub async fn probe(
    qemu: &Path,
    accel: &str,
    kernel: &Path,
    dir: &Path,
    deadline: std::time::Duration,
) -> Result<(), ProbeError> {
    const LINE: &str = "deployd accelerator probe: init runs";
    if accel == "kvm" && !Path::new("/dev/kvm").exists() {
        return Err(ProbeError::NoKvm);
    }
    let initrd = dir.join(format!("probe-{accel}.initrd"));
    let console = dir.join(format!("probe-{accel}.console.log"));
    crate::os_image::marker_initramfs(Path::new("/bin/busybox"), LINE)
        .and_then(|bytes| Ok(std::fs::write(&initrd, bytes)?))
        .map_err(ProbeError::Initramfs)?;
    let mut child = tokio::process::Command::new(qemu)
        .args([
            "-accel",
            accel,
            "-m",
            "256",
            "-display",
            "none",
            "-nodefaults",
        ])
        .args(["-no-reboot", "-serial"])
        .arg(format!("file:{}", console.display()))
        .arg("-kernel")
        .arg(kernel)
        .arg("-initrd")
        .arg(&initrd)
        .args(["-append", "console=ttyS0 panic=-1"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(ProbeError::Qemu)?;
    let started = tokio::time::Instant::now();
    let seen = || std::fs::read_to_string(&console).is_ok_and(|t| t.contains(LINE));
    loop {
        if seen() {
            let _ = child.start_kill();
            return Ok(());
        }
        if let Ok(Some(_)) = child.try_wait() {
            let mut said = String::new();
            if let Some(mut err) = child.stderr.take() {
                use tokio::io::AsyncReadExt;
                let _ = err.read_to_string(&mut said).await;
            }
            return match seen() {
                true => Ok(()),
                false => Err(ProbeError::Ended(said.trim().to_owned())),
            };
        }
        if started.elapsed() > deadline {
            let _ = child.start_kill();
            let _ = child.wait().await;
            return Err(ProbeError::TooSlow(deadline));
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// `deployd lab-relay ADDR`: one guest connection (QEMU's stdin and stdout) to `addr`.
pub fn relay(addr: SocketAddr) -> std::io::Result<()> {
    use std::io::{Read, Write};
    let stream = std::net::TcpStream::connect(addr)?;
    let mut upstream = stream.try_clone()?;
    let mut downstream = stream;
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut std::io::stdin().lock(), &mut upstream);
        let _ = upstream.shutdown(std::net::Shutdown::Write);
    });
    // Every chunk is flushed at once: stdout buffers by line, and a kept-alive HTTP
    // connection never ends to flush a response's tail.
    let mut out = std::io::stdout().lock();
    let mut chunk = vec![0u8; 64 << 10];
    loop {
        let n = downstream.read(&mut chunk)?;
        if n == 0 {
            break;
        }
        out.write_all(&chunk[..n])?;
        out.flush()?;
    }
    // The engine's side ended: the guest's ends with it (the process exits, QEMU closes
    // the guest connection). Waiting for the guest to close first kept a connection the
    // engine had closed open in the guest, and the agent's next request on it waited for
    // an answer that could not come.
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A lab's settings, with this executable at `relay`.
    fn config(relay: &str) -> VmConfig {
        VmConfig {
            qemu: "qemu-system-x86_64".into(),
            engine: "127.0.0.1:6385".parse().unwrap(),
            relay: relay.into(),
            memory_mb: 512,
            accel: "tcg".into(),
            dhcp_boot_file: true,
            nic_rom: true,
        }
    }

    /// Machine `m`, network-booting under `firmware`, its NIC forwarded.
    fn machine(firmware: Firmware) -> VmMachine<'static> {
        static FORWARDED: Nic = Nic::Forwarded(40001);
        VmMachine {
            mac: "52:54:00:00:00:01",
            disk: Path::new("/tmp/m.disk"),
            console: Path::new("/tmp/m.console.log"),
            serial_port: Path::new("/tmp/m.serial.sock"),
            vars: Path::new("/tmp/m.efivars.fd"),
            nic: &FORWARDED,
            serial: "m",
            extra_disks: &[],
            boot: Boot::Pxe,
            cd: None,
            firmware,
            secure_boot: false,
        }
    }

    #[test]
    fn a_vm_reaches_only_what_is_forwarded() {
        let config = config("/opt/deployd,1/deployd");
        let m = machine(Firmware::Bios);
        let args = config.args(&m, Path::new("/tmp/sercon"));
        let netdev = &args[args.iter().position(|a| a == "-netdev").unwrap() + 1];
        assert!(netdev.contains("restrict=on"), "{netdev}");
        assert!(
            netdev.contains("bootfile=http://10.0.2.100:6385/boot/ipxe"),
            "{netdev}"
        );
        assert!(
            netdev.contains(
                "guestfwd=tcp:10.0.2.100:6385-cmd:/opt/deployd,,1/deployd lab-relay 127.0.0.1:6385"
            ),
            "{netdev}"
        );
        assert!(
            netdev.contains("hostfwd=tcp:127.0.0.1:40001-:9999"),
            "{netdev}"
        );
        let boot = args.iter().position(|a| a == "-boot").unwrap();
        assert_eq!(args[boot + 1], "order=n");
        assert_eq!(
            args[args.len() - 4..],
            [
                "-drive",
                "file=/tmp/m.disk,format=raw,if=none,id=disk0,cache=unsafe",
                "-device",
                "virtio-blk-pci,drive=disk0,serial=m-disk0"
            ]
        );
        let disk_boot = VmMachine {
            boot: Boot::Hdd,
            ..m
        };
        let args = config.args(&disk_boot, Path::new("/s"));
        let boot = args.iter().position(|a| a == "-boot").unwrap();
        assert_eq!(args[boot + 1], "order=c");
        let tap = VmMachine {
            nic: &Nic::Tap("tap0".into()),
            extra_disks: &["/tmp/m.disk1".into(), "/tmp/m.disk2".into()],
            ..m
        };
        let args = config.args(&tap, Path::new("/s"));
        let netdev = &args[args.iter().position(|a| a == "-netdev").unwrap() + 1];
        assert_eq!(netdev, "tap,id=net0,ifname=tap0,script=no,downscript=no");
        assert_eq!(
            args.last().unwrap(),
            "virtio-blk-pci,drive=disk2,serial=m-disk2"
        );
        assert!(!args.iter().any(|a| a.contains("pflash")), "{args:?}");
    }

    /// A UEFI machine runs OVMF with its own variable store, and boots first from the
    /// device its BMC names by `bootindex` (OVMF reads no `-boot order`).
    #[test]
    fn a_uefi_vm_runs_ovmf_with_its_own_variables_and_boots_by_bootindex() {
        let config = config("/opt/deployd");
        let extra = [PathBuf::from("/tmp/m.disk1")];
        let m = VmMachine {
            extra_disks: &extra,
            ..machine(Firmware::Uefi)
        };
        let args = config.args(&m, Path::new("/s"));
        assert!(!args.iter().any(|a| a == "-boot"), "{args:?}");
        let has = |want: &str| args.iter().any(|a| a == want);
        assert!(has(&format!(
            "if=pflash,format=raw,unit=0,readonly=on,file={OVMF_CODE}"
        )));
        assert!(has("if=pflash,format=raw,unit=1,file=/tmp/m.efivars.fd"));
        assert!(has(
            "virtio-net-pci,netdev=net0,mac=52:54:00:00:00:01,bootindex=1"
        ));
        assert!(has("virtio-blk-pci,drive=disk0,serial=m-disk0,bootindex=2"));
        assert!(has("virtio-blk-pci,drive=disk1,serial=m-disk1"));
        let args = config.args(
            &VmMachine {
                boot: Boot::Hdd,
                ..m
            },
            Path::new("/s"),
        );
        let has = |want: &str| args.iter().any(|a| a == want);
        assert!(has(
            "virtio-net-pci,netdev=net0,mac=52:54:00:00:00:01,bootindex=2"
        ));
        assert!(has("virtio-blk-pci,drive=disk0,serial=m-disk0,bootindex=1"));
        assert!(!args.iter().any(|a| a.contains("cd0")), "no media, no CD");

        // Booted from its virtual CD: QEMU reads the BMC's image over HTTP, first.
        let args = config.args(
            &VmMachine {
                boot: Boot::Cd,
                cd: Some("http://127.0.0.1:6385/boot/n/iso/t"),
                ..m
            },
            Path::new("/s"),
        );
        let has = |want: &str| args.iter().any(|a| a == want);
        assert!(has(
            "if=none,id=cd0,media=cdrom,readonly=on,file.driver=http,file.url=http://127.0.0.1:6385/boot/n/iso/t"
        ));
        assert!(has("ide-cd,drive=cd0,bootindex=1"), "{args:?}");
        assert!(has("virtio-blk-pci,drive=disk0,serial=m-disk0,bootindex=2"));
        assert!(has(
            "virtio-net-pci,netdev=net0,mac=52:54:00:00:00:01,bootindex=3"
        ));

        let bare = VmConfig {
            dhcp_boot_file: false,
            nic_rom: false,
            ..config
        };
        let args = bare.args(&m, Path::new("/s"));
        let netdev = &args[args.iter().position(|a| a == "-netdev").unwrap() + 1];
        assert!(!netdev.contains("bootfile"), "{netdev}");
        let has = |want: &str| args.iter().any(|a| a == want);
        assert!(has(
            "virtio-net-pci,netdev=net0,mac=52:54:00:00:00:01,romfile=,bootindex=1"
        ));
    }

    #[test]
    fn a_uefi_machine_gets_its_variable_store_once() {
        let dir = tempfile::tempdir().unwrap();
        let vars = dir.path().join("m.efivars.fd");
        Firmware::Bios.prepare(&vars, false).unwrap();
        assert!(!vars.exists(), "a BIOS machine has none");
        Firmware::Uefi.prepare(&vars, false).unwrap();
        assert_eq!(
            std::fs::read(&vars).unwrap(),
            std::fs::read(OVMF_VARS).unwrap()
        );
        std::fs::write(&vars, b"what the firmware wrote").unwrap();
        Firmware::Uefi.prepare(&vars, false).unwrap();
        assert_eq!(
            std::fs::read(&vars).unwrap(),
            b"what the firmware wrote",
            "kept"
        );
        // With Secure Boot, a store of its own with Microsoft's keys.
        let secure = vars_file(&vars, true);
        assert_eq!(secure, dir.path().join("m.efivars-secure.fd"));
        assert_eq!(vars_file(&vars, false), vars);
        Firmware::Uefi.prepare(&secure, true).unwrap();
        assert_eq!(
            std::fs::read(&secure).unwrap(),
            std::fs::read(OVMF_VARS_SECURE).unwrap()
        );
    }

    /// With Secure Boot, OVMF's Secure Boot build on a q35 PC with SMM.
    #[test]
    fn a_secure_boot_vm_runs_ovmfs_secure_boot_build_with_smm() {
        let config = config("/opt/deployd");
        let m = VmMachine {
            secure_boot: true,
            vars: Path::new("/tmp/m.efivars-secure.fd"),
            ..machine(Firmware::Uefi)
        };
        let args = config.args(&m, Path::new("/s")).join(" ");
        for want in [
            "-machine q35,smm=on",
            "-global driver=cfi.pflash01,property=secure,value=on",
            &format!("if=pflash,format=raw,unit=0,readonly=on,file={OVMF_CODE_SECURE}"),
            "if=pflash,format=raw,unit=1,file=/tmp/m.efivars-secure.fd",
        ] {
            assert!(args.contains(want), "{want} in {args}");
        }
        let plain = config
            .args(&machine(Firmware::Uefi), Path::new("/s"))
            .join(" ");
        assert!(
            !plain.contains("smm") && !plain.contains("secboot"),
            "{plain}"
        );
    }

    /// Booted `UefiHttp`, OVMF's PXE is off (its HTTP boot goes first) and the NIC first.
    #[test]
    fn a_uefi_http_boot_turns_ovmfs_pxe_off() {
        let config = config("/opt/deployd");
        let m = VmMachine {
            boot: Boot::UefiHttp,
            ..machine(Firmware::Uefi)
        };
        let args = config.args(&m, Path::new("/s")).join(" ");
        for want in [
            "-fw_cfg name=opt/org.tianocore/IPv4PXESupport,string=no",
            "-fw_cfg name=opt/org.tianocore/IPv6PXESupport,string=no",
            "mac=52:54:00:00:00:01,bootindex=1",
        ] {
            assert!(args.contains(want), "{want} in {args}");
        }
        let pxe = config
            .args(&machine(Firmware::Uefi), Path::new("/s"))
            .join(" ");
        assert!(!pxe.contains("PXESupport"), "{pxe}");
    }
}
