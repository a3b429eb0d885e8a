//! `deployd lab`: simulated machines for the engine to deploy, needing nothing outside
//! this binary.
//!
//! - [`machine`]: one machine: power, boot device, a disk file, and its agent, which
//!   runs while the machine is on and network-booted.
//! - [`redfish`]: the BMC all machines share, Redfish-compatible, so the bundled
//!   `agent_redfish` and `pxe_redfish` drivers control them as they would real ones;
//!   [`redfish_hardware`]: what its systems report of their hardware, and their virtual CD.
//! - [`ipmi`]: an IPMI BMC per machine too (`--ipmi-python`), on pyghmi, whose
//!   Serial-over-LAN reaches a VM's serial port.
//! - [`vm`]: machines as QEMU virtual machines that network-boot the engine's ramdisk and
//!   then boot their deployed disk (`--vm`).
//! - [`os_image`]: a tiny OS image that boots on a PC and prints a line, to deploy onto
//!   the VMs and see them boot it.
//! - [`postgres`]: a PostgreSQL cluster of its own, for the demo's engines to share.
//! - [`operator`]: enrolling them into an engine and walking them through its states
//!   over the HTTP API (the demo's and the fleet bench's operator).

pub mod ipmi;
pub mod machine;
pub mod operator;
pub mod os_image;
pub mod postgres;
pub mod redfish;
pub mod redfish_hardware;
pub mod redfish_secure_boot;
pub mod vm;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use serde::{Deserialize, Serialize};

pub use deployd_agent::TlsMode;
pub use machine::{AgentMode, Machine, MachineView};
pub use vm::VmConfig;

#[derive(clap::Args, Clone, Debug)]
pub struct LabArgs {
    /// How many machines.
    #[arg(long, default_value_t = 3)]
    pub machines: usize,
    /// Where the machines' disks and agent logs go.
    #[arg(long)]
    pub dir: PathBuf,
    /// The BMC's address (Redfish).
    #[arg(long, default_value = "127.0.0.1:8000")]
    pub listen: SocketAddr,
    /// The engine's API, for the agents.
    #[arg(long, default_value = "http://127.0.0.1:6385")]
    pub api_url: String,
    /// The agents' write rate limit (suffixes K, M, G).
    #[arg(long, value_parser = deployd_agent::runner::parse_rate)]
    pub throttle: Option<u64>,
    /// Seconds between the agents' heartbeats (default: from the engine's lookup).
    #[arg(long)]
    pub heartbeat_interval: Option<f64>,
    /// Run the agents as tasks of the lab process instead of `deployd agent` processes.
    #[arg(long)]
    pub agent_tasks: bool,
    /// When the agents serve their command API over HTTPS with a per-boot certificate
    /// that the engine pins (`deployd agent --tls`): `auto` from API 1.68, as IPA does.
    #[arg(long, value_enum, default_value_t = deployd_agent::TlsMode::Auto, num_args = 0..=1, default_missing_value = "on")]
    pub agent_tls: deployd_agent::TlsMode,
    /// An IPMI BMC per machine as well, run by this Python (one that imports PyPI's
    /// pyghmi, e.g. a venv's `bin/python`): power and boot through IPMI, and a VM's serial
    /// console through Serial-over-LAN (see `ipmi`).
    #[arg(long)]
    pub ipmi_python: Option<PathBuf>,
    #[command(flatten)]
    pub vm: VmArgs,
}

/// The machines as QEMU virtual machines (`--vm`).
#[derive(clap::Args, Clone, Debug)]
pub struct VmArgs {
    /// Machines are QEMU virtual machines that really boot (see `deployd ramdisk build`):
    /// start the engine with `--public-url http://10.0.2.100:<its port>`, where guests
    /// reach it.
    #[arg(long = "vm")]
    pub enabled: bool,
    #[arg(long, default_value = "qemu-system-x86_64")]
    pub qemu: PathBuf,
    /// QEMU's accelerator: `tcg` (software, always works), `kvm`, or `auto`: KVM if a
    /// guest kernel (`--probe-kernel`) really boots under it within 10 s, else TCG.
    #[arg(long, default_value = "tcg")]
    pub accel: String,
    /// The kernel `--accel auto` boots to probe KVM (the ramdisk's `deploy_kernel` will do).
    #[arg(long)]
    pub probe_kernel: Option<PathBuf>,
    /// Each VM's memory.
    #[arg(long, default_value_t = 512)]
    pub vm_memory_mb: u32,
    /// Each machine's boot mode until its BMC is told another (`Boot.BootSourceOverrideMode`),
    /// and so a VM's firmware at power-on: `bios` (SeaBIOS) or `uefi` (OVMF, from Debian's
    /// `ovmf`).
    #[arg(long, value_enum, default_value_t = vm::Firmware::Bios)]
    pub firmware: vm::Firmware,
    /// Each machine's disk size in bytes (a sparse file); a VM's agent deploys to the
    /// smallest disk of at least 4 GiB, as ironic-python-agent does.
    #[arg(long, default_value_t = 0)]
    pub disk_size: u64,
    /// Another disk per VM of this many bytes, after the first; once per disk. Serials
    /// are `<name>-disk0` for the first, then `-disk1`, `-disk2`…, for root device hints.
    #[arg(long = "extra-disk-size", requires = "enabled")]
    pub extra_disk_sizes: Vec<u64>,
    /// A tap device per machine, in order, instead of QEMU's user mode: each VM's NIC
    /// joins the network there, whose DHCP server (see `deployd boot dnsmasq-config`)
    /// hands out the boot chain, and the engine reaches each agent at its own address.
    #[arg(long = "tap", requires = "enabled")]
    pub taps: Vec<String>,
    /// QEMU's DHCP names no boot file (the engine's script): the VMs' ramdisks boot only
    /// from virtual media, as on a network where no DHCP server gives boot options.
    #[arg(long, requires = "enabled")]
    pub no_dhcp_boot_file: bool,
    /// The VMs' NICs carry no iPXE option ROM: the firmware's own PXE boots, as on a
    /// machine whose NIC has none (the operator's DHCP then hands out iPXE by TFTP).
    #[arg(long, requires = "enabled")]
    pub no_nic_rom: bool,
}

impl Default for VmArgs {
    /// Simulated machines, as without `--vm`.
    fn default() -> Self {
        VmArgs {
            enabled: false,
            qemu: "qemu-system-x86_64".into(),
            accel: "tcg".into(),
            probe_kernel: None,
            vm_memory_mb: 512,
            firmware: vm::Firmware::Bios,
            disk_size: 0,
            extra_disk_sizes: Vec::new(),
            taps: Vec::new(),
            no_dhcp_boot_file: false,
            no_nic_rom: false,
        }
    }
}

impl VmConfig {
    /// The VMs' settings from the lab's flags, for an engine at `api_url`; `relay` is this
    /// executable (its `lab-relay`), `accel` the accelerator chosen.
    pub fn new(
        args: &VmArgs,
        api_url: &str,
        relay: PathBuf,
        accel: String,
    ) -> anyhow::Result<VmConfig> {
        Ok(VmConfig {
            qemu: args.qemu.clone(),
            engine: engine_addr(api_url)?,
            relay,
            memory_mb: args.vm_memory_mb,
            accel,
            dhcp_boot_file: !args.no_dhcp_boot_file,
            nic_rom: !args.no_nic_rom,
        })
    }
}

/// What a caller needs to enroll a machine: its name, MAC and BMC address.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Enrollment {
    pub name: String,
    pub mac: String,
    pub disk: PathBuf,
    pub redfish_address: String,
    pub redfish_system_id: String,
    /// For a VM: the kernel parameters its ramdisk needs (`driver_info.kernel_append_params`):
    /// the serial console, and where the engine reaches its agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel_append_params: Option<String>,
    /// A VM's serial console log.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub console: Option<PathBuf>,
    /// A VM's other disks (`--extra-disk-size`), in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extra_disks: Vec<PathBuf>,
    /// Its IPMI BMC (`--ipmi-python`): the driver_info of the `ipmi` hardware type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ipmi: Option<IpmiEnrollment>,
}

/// A machine's IPMI BMC, as an `ipmi` node's driver_info names it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct IpmiEnrollment {
    pub ipmi_address: String,
    pub ipmi_port: u16,
    pub ipmi_username: String,
    pub ipmi_password: String,
}

pub struct Lab {
    pub addr: SocketAddr,
    /// Whether the machines are VMs.
    pub vm: bool,
    pub machines: redfish::Machines,
    /// Each machine's IPMI BMC, by name (`--ipmi-python`).
    ipmi: BTreeMap<String, ipmi::IpmiBmc>,
    server: tokio::task::JoinHandle<()>,
}

impl Lab {
    /// Creates the machines (powered off, disks empty) and starts the BMC.
    pub async fn start(args: &LabArgs, mode: AgentMode) -> anyhow::Result<Lab> {
        std::fs::create_dir_all(&args.dir)
            .with_context(|| format!("creating {}", args.dir.display()))?;
        let agent = deployd_agent::AgentArgs {
            throttle: args.throttle,
            heartbeat_interval: args.heartbeat_interval,
            tls: args.agent_tls,
            ..deployd_agent::AgentArgs::for_engine(args.api_url.clone())
        };
        let vm = matches!(mode, AgentMode::Vm(_));
        anyhow::ensure!(
            args.vm.taps.is_empty() || args.vm.taps.len() == args.machines,
            "{} tap devices for {} machines: give one --tap per machine",
            args.vm.taps.len(),
            args.machines
        );
        // A random middle byte keeps two labs on one engine from sharing MACs.
        let lab_id: u8 = rand::random();
        let mut machines = BTreeMap::new();
        for i in 0..args.machines {
            let name = format!("machine-{i:03}");
            let mac = format!("52:54:00:{lab_id:02x}:{:02x}:{:02x}", i >> 8, i & 0xff);
            let nic = match (vm, args.vm.taps.get(i)) {
                (false, _) => vm::Nic::None,
                (true, Some(tap)) => vm::Nic::Tap(tap.clone()),
                (true, None) => vm::Nic::Forwarded(machine::free_port()),
            };
            let machine = Machine::new(
                name.clone(),
                mac,
                &args.dir,
                agent.clone(),
                mode.clone(),
                nic,
                machine::Spec {
                    extra_disks: if vm {
                        args.vm.extra_disk_sizes.len()
                    } else {
                        0
                    },
                    memory_mb: args.vm.vm_memory_mb,
                    boot_mode: args.vm.firmware,
                },
            );
            let disk = std::fs::File::create(&machine.disk)
                .with_context(|| format!("creating {}", machine.disk.display()))?;
            disk.set_len(args.vm.disk_size)
                .with_context(|| format!("sizing {}", machine.disk.display()))?;
            for (extra, size) in machine.extra_disks.iter().zip(&args.vm.extra_disk_sizes) {
                std::fs::File::create(extra)
                    .and_then(|f| f.set_len(*size))
                    .with_context(|| format!("creating {}", extra.display()))?;
            }
            machines.insert(name, machine);
        }
        let machines = Arc::new(machines);
        let listener = tokio::net::TcpListener::bind(args.listen)
            .await
            .with_context(|| format!("the lab's BMC cannot listen on {}", args.listen))?;
        let addr = listener.local_addr()?;
        let router = redfish::router(machines.clone());
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, router).await;
        });
        let mut bmcs = BTreeMap::new();
        if let Some(python) = &args.ipmi_python {
            let script = ipmi::write_script(&args.dir)?;
            for m in machines.values() {
                let system = format!("http://{addr}/redfish/v1/Systems/{}", m.name);
                let bmc = ipmi::IpmiBmc::start(python, &script, &system, &m.serial_port).await?;
                bmcs.insert(m.name.clone(), bmc);
            }
        }
        Ok(Lab {
            vm,
            addr,
            machines,
            ipmi: bmcs,
            server,
        })
    }

    pub fn enrollments(&self) -> Vec<Enrollment> {
        self.machines
            .values()
            .map(|m| Enrollment {
                name: m.name.clone(),
                mac: m.mac.clone(),
                disk: m.disk.clone(),
                redfish_address: format!("http://{}", self.addr),
                redfish_system_id: format!("/redfish/v1/Systems/{}", m.name),
                kernel_append_params: m.nic.kernel_append_params(),
                console: self.vm.then(|| m.console.clone()),
                extra_disks: m.extra_disks.clone(),
                ipmi: self.ipmi.get(&m.name).map(|bmc| IpmiEnrollment {
                    ipmi_address: "127.0.0.1".into(),
                    ipmi_port: bmc.port,
                    ipmi_username: ipmi::USERNAME.into(),
                    ipmi_password: ipmi::PASSWORD.into(),
                }),
            })
            .collect()
    }

    /// Powers every machine off, stopping every agent.
    pub fn stop(&self) {
        for machine in self.machines.values() {
            machine.power_off();
        }
        self.server.abort();
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        self.stop();
    }
}

/// `deployd lab`: prints the machines as JSON lines on stdout, then runs until Ctrl-C or
/// SIGTERM, and powers everything off.
pub async fn run(args: LabArgs) -> anyhow::Result<()> {
    let exe = std::env::current_exe().context("finding this executable")?;
    let mode = if args.vm.enabled {
        std::fs::create_dir_all(&args.dir)
            .with_context(|| format!("creating {}", args.dir.display()))?;
        let (accel, why) = vm::choose_accel(
            &args.vm.qemu,
            &args.vm.accel,
            args.vm.probe_kernel.as_deref(),
            &args.dir,
        )
        .await?;
        if let Some(why) = why {
            tracing::warn!("VMs run under TCG, not KVM: {why}");
        }
        let config = VmConfig::new(&args.vm, &args.api_url, exe, accel)?;
        if args.vm.taps.is_empty() {
            tracing::info!(
                public_url = %config.guest_api_url(),
                "VMs reach the engine here: start it with this --public-url"
            );
        }
        AgentMode::Vm(Arc::new(config))
    } else if args.agent_tasks {
        AgentMode::Task
    } else {
        AgentMode::Process(exe)
    };
    let lab = Lab::start(&args, mode).await?;
    for e in lab.enrollments() {
        println!("{}", serde_json::to_string(&e)?);
    }
    use std::io::Write;
    std::io::stdout().flush()?;
    tracing::info!(bmc = %lab.addr, machines = args.machines, "lab is running");
    deployd_agent::signal::shutdown().await;
    lab.stop();
    Ok(())
}

/// The engine's address on this host, from its url (`http://127.0.0.1:6385`).
fn engine_addr(api_url: &str) -> anyhow::Result<SocketAddr> {
    use std::net::ToSocketAddrs;
    let rest = api_url
        .strip_prefix("http://")
        .with_context(|| format!("VMs reach the engine over plain http: {api_url}"))?;
    let authority = rest.split('/').next().unwrap_or(rest);
    authority
        .to_socket_addrs()
        .with_context(|| format!("the engine's address in {api_url}"))?
        .next()
        .with_context(|| format!("{api_url} names no address"))
}

/// The sha256 of a machine's disk, for checking a deploy.
pub fn disk_sha256(disk: &Path) -> std::io::Result<String> {
    disk_head_sha256(disk, u64::MAX)
}

/// The sha256 of a disk's first `len` bytes: a deployed image on a larger disk.
pub fn disk_head_sha256(disk: &Path, len: u64) -> std::io::Result<String> {
    use sha2::Digest;
    use std::io::Read;
    let mut file = std::fs::File::open(disk)?.take(len);
    let mut hasher = sha2::Sha256::new();
    std::io::copy(&mut file, &mut hasher)?;
    Ok(hex::encode(hasher.finalize()))
}

/// Writes `bytes` of random data to `path` (an image for the lab's machines); returns its
/// sha256.
pub async fn random_image(path: &Path, bytes: u64) -> anyhow::Result<String> {
    let path = path.to_path_buf();
    Ok(tokio::task::spawn_blocking(move || write_random(&path, bytes)).await??)
}

/// Writes `bytes` random bytes to `path` and syncs it; their sha256.
pub fn write_random(path: &Path, bytes: u64) -> std::io::Result<String> {
    use rand::{RngCore, SeedableRng};
    use sha2::Digest;
    use std::io::Write;
    let mut rng = rand::rngs::StdRng::from_os_rng();
    let mut file = std::fs::File::create(path)?;
    let mut hasher = sha2::Sha256::new();
    let mut chunk = vec![0u8; 1 << 20];
    let mut left = bytes;
    while left > 0 {
        let n = left.min(chunk.len() as u64) as usize;
        rng.fill_bytes(&mut chunk[..n]);
        hasher.update(&chunk[..n]);
        file.write_all(&chunk[..n])?;
        left -= n as u64;
    }
    file.sync_all()?;
    Ok(hex::encode(hasher.finalize()))
}
