//! `deployd demo --vm`: the demo's machines as QEMU virtual machines that really boot.
//!
//! Before the story: the deploy ramdisk (`deployd ramdisk build` around the static agent),
//! the image to deploy (a tiny OS that prints [`MARKER`] when it boots), and the
//! accelerator (KVM only if a guest really boots under it). Each VM network-boots the
//! ramdisk through the engine's iPXE scripts, its agent writes the image (throttled, past
//! a short `deploy_callback_timeout`), powers off, and the VM boots its disk: the
//! summary shows the line its console printed.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};
use deployd_lab::vm;

/// What the deployed OS prints once it has booted from the VM's disk.
pub const MARKER: &str = "deployd demo OS: booted from its own disk";

#[derive(clap::Args, Clone, Debug)]
pub struct VmDemoArgs {
    /// Run the machines as QEMU virtual machines that network-boot a real ramdisk and
    /// then boot the deployed OS (needs Debian's qemu-system-x86, ipxe-qemu,
    /// busybox-static, dosfstools, mtools and syslinux, and the static agent).
    #[arg(long = "vm")]
    pub enabled: bool,
    /// The static deployd-agent the ramdisk carries (default: the musl build beside
    /// this executable's target directory).
    #[arg(long)]
    pub agent: Option<PathBuf>,
    /// QEMU's accelerator: `auto` (KVM if a guest boots under it, else TCG), `tcg`, `kvm`.
    #[arg(long, default_value = "auto")]
    pub accel: String,
    /// Where the Debian kernel package is kept between runs (default
    /// `~/.cache/deployd/ramdisk`).
    #[arg(long)]
    pub ramdisk_cache: Option<PathBuf>,
    /// The machines' boot mode: `bios` (SeaBIOS; the image boots by SYSLINUX) or `uefi`
    /// (OVMF, from Debian's `ovmf`; the image is a GPT disk whose EFI system partition
    /// holds the OS). The engine tells each machine's BMC with every boot device.
    #[arg(long, value_enum, default_value_t = vm::Firmware::Bios)]
    pub firmware: vm::Firmware,
}

/// What the VMs boot and run with.
pub struct Prepared {
    pub firmware: vm::Firmware,
    pub kernel: PathBuf,
    pub ramdisk: PathBuf,
    pub image: PathBuf,
    pub sha256: String,
    pub accel: String,
}

/// The commands the VM demo runs, with the Debian package each comes from.
const TOOLS: [(&str, &str); 4] = [
    ("qemu-system-x86_64", "qemu-system-x86"),
    ("apt-get", "apt"),
    ("dpkg-deb", "dpkg"),
    ("busybox", "busybox-static"),
];

fn on_path(tool: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|d| d.join(tool).is_file()))
}

/// Refuses to start, naming every package to install, when a tool is missing.
fn check_tools(firmware: vm::Firmware) -> anyhow::Result<()> {
    let mut missing: Vec<&str> = TOOLS
        .iter()
        .chain(deployd_lab::os_image::TOOLS.iter())
        .filter(|(tool, _)| !on_path(tool))
        .map(|(_, package)| *package)
        .collect();
    if !Path::new("/usr/lib/ipxe/qemu/efi-virtio.rom").exists() {
        missing.push("ipxe-qemu");
    }
    if firmware == vm::Firmware::Uefi {
        if !Path::new(vm::OVMF_CODE).exists() {
            missing.push("ovmf");
        }
        if !Path::new(deployd_ramdisk::uki::STUB).exists() {
            missing.push("systemd-boot-efi");
        }
    }
    if !missing.is_empty() {
        bail!(
            "the VM demo needs Debian packages that are not installed: apt-get install {}",
            missing.join(" ")
        );
    }
    Ok(())
}

/// The static agent: as given, or where `cargo build --release --target
/// x86_64-unknown-linux-musl -p deployd-agent` puts it beside this executable.
fn agent(args: &VmDemoArgs) -> anyhow::Result<PathBuf> {
    let path = match &args.agent {
        Some(path) => path.clone(),
        None => {
            let exe = std::env::current_exe().context("finding this executable")?;
            let target = exe
                .parent()
                .and_then(Path::parent)
                .context("this executable has no target directory")?;
            target.join("x86_64-unknown-linux-musl/release/deployd-agent")
        }
    };
    if !path.is_file() {
        bail!(
            "no static agent at {}: rustup target add x86_64-unknown-linux-musl && \
             cargo build --release --target x86_64-unknown-linux-musl -p deployd-agent \
             (Debian's musl-tools), or give --agent",
            path.display()
        );
    }
    Ok(path)
}

fn cache(args: &VmDemoArgs) -> PathBuf {
    args.ramdisk_cache.clone().unwrap_or_else(|| {
        let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("."), PathBuf::from);
        home.join(".cache/deployd/ramdisk")
    })
}

/// The ramdisk, the image of `image_mb` MiB, and the accelerator, in `dir`.
pub async fn prepare(args: &VmDemoArgs, dir: &Path, image_mb: u64) -> anyhow::Result<Prepared> {
    check_tools(args.firmware)?;
    let build = deployd_ramdisk::BuildArgs {
        out: dir.join("boot"),
        agent: agent(args)?,
        kernel_package: "linux-image-cloud-amd64".into(),
        kernel: None,
        modules: None,
        busybox: "/bin/busybox".into(),
        cache: Some(cache(args)),
        secure_boot: false,
    };
    print!("building the deploy ramdisk (a Debian kernel, its drivers, the agent)… ");
    let built = tokio::task::spawn_blocking(move || deployd_ramdisk::build(&build)).await??;
    let size = std::fs::metadata(&built.ramdisk).map_or(0, |m| m.len());
    println!(
        "Linux {}, {:.1} MB initramfs",
        built.kernel_version,
        size as f64 / 1e6
    );
    let (kernel, out, firmware) = (built.kernel.clone(), dir.to_path_buf(), args.firmware);
    let image = tokio::task::spawn_blocking(move || {
        // Random bytes fill half the disk: a write cut short never equals the image.
        let payload = (image_mb / 2) << 20;
        match firmware {
            vm::Firmware::Bios => {
                deployd_lab::os_image::bootable(&out, &kernel, MARKER, image_mb, payload)
            }
            vm::Firmware::Uefi => {
                let initrd =
                    deployd_lab::os_image::marker_initramfs(Path::new("/bin/busybox"), MARKER)?;
                deployd_lab::os_image::bootable_uefi(
                    &out,
                    &kernel,
                    &initrd,
                    image_mb,
                    payload,
                    deployd_lab::os_image::EspLoader::Removable,
                )
            }
        }
    })
    .await??;
    let sha256 = deployd_lab::disk_sha256(&image)?;
    let how = match args.firmware {
        vm::Firmware::Bios => "SYSLINUX",
        vm::Firmware::Uefi => "a GPT, an EFI system partition, a unified kernel image",
    };
    println!(
        "image: {image_mb} MiB, a bootable disk ({how}, the same kernel, an init that prints a line, {} MiB of random bytes), sha256 {}",
        image_mb / 2,
        &sha256[..16]
    );
    let (accel, why) = vm::choose_accel(
        Path::new("qemu-system-x86_64"),
        &args.accel,
        Some(&built.kernel),
        dir,
    )
    .await?;
    match why {
        Some(why) => println!("accelerator: TCG (software emulation): KVM not used: {why}"),
        None => println!("accelerator: {}", accel.to_uppercase()),
    }
    Ok(Prepared {
        firmware: args.firmware,
        kernel: built.kernel,
        ramdisk: built.ramdisk,
        image,
        sha256,
        accel,
    })
}

/// The node fields of a VM: Redfish power, network boot by iPXE into the ramdisk, the
/// image's boot mode, and the agent writing the image (`direct`), throttled to `throttle`
/// bytes a second.
pub fn node_fields(
    vm: &Prepared,
    machine: &deployd_lab::Enrollment,
    throttle: u64,
) -> serde_json::Value {
    let append = format!(
        "{} deployd-agent-throttle={throttle}",
        machine.kernel_append_params.as_deref().unwrap_or_default()
    );
    serde_json::json!({
        "driver": "redfish",
        "deploy_interface": "direct",
        "boot_interface": "ipxe",
        "driver_info": {
            "deploy_kernel": vm.kernel.display().to_string(),
            "deploy_ramdisk": vm.ramdisk.display().to_string(),
            "kernel_append_params": append.trim(),
        },
        // The image's boot mode, which the BMC is told with every boot device (the lab's
        // machines start as BIOS PCs).
        "properties": {"capabilities": format!("boot_mode:{}", match vm.firmware {
            vm::Firmware::Bios => "bios",
            vm::Firmware::Uefi => "uefi",
        })},
    })
}

/// Waits up to `limit` for [`MARKER`] on a console log; the line that holds it.
pub async fn booted_line(console: &Path, limit: Duration) -> Option<String> {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let text = std::fs::read_to_string(console).unwrap_or_default();
        if let Some(line) = text.lines().find(|l| l.contains(MARKER)) {
            return Some(line.trim().to_owned());
        }
        if tokio::time::Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
