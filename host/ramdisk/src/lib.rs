//! `deployd ramdisk build`: a deploy kernel and initramfs for network boot, around the
//! static (musl) `deployd-agent`.
//!
//! - [`kernel`]: the kernel, from a Debian package unpacked into a cache, or given.
//! - [`modules`]: the drivers machines and VMs need, with their dependencies in load order.
//! - [`initramfs`]: the gzip-compressed `newc` cpio archive.
//! - [`uki`]: a unified kernel image (kernel, initramfs and command line in one UEFI
//!   executable).
//! - [`secure_boot`]: Debian's signed shim and GRUB, for machines with Secure Boot on
//!   (`--secure-boot` checks the kernel is signed and writes `bootloader.img`).
//!
//! The init (`init.sh`, busybox's shell) loads the drivers, brings up by DHCP the
//! interface whose MAC is `BOOTIF`, and runs the agent with what the kernel command line
//! says, as Ironic's boot interfaces pass it: `ipa-api-url`, `ipa-advertise-host` and
//! `-port` when the engine reaches the agent through a forward, and
//! `deployd-agent-throttle` for slow-write tests. When the agent exits after
//! `standby.power_off`, it syncs and powers the machine off.

pub mod initramfs;
pub mod kernel;
pub mod modules;
pub mod secure_boot;
pub mod uki;

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

use initramfs::Entry;

const INIT: &str = include_str!("init.sh");
const UDHCPC_SCRIPT: &str = include_str!("udhcpc.script");

#[derive(clap::Args, Debug, Clone)]
pub struct BuildArgs {
    /// Where `deploy_kernel` and `deploy_ramdisk` are written.
    #[arg(long, default_value = "deployd-ramdisk")]
    pub out: PathBuf,
    /// The static deployd-agent to run (build it with
    /// `cargo build --release --target x86_64-unknown-linux-musl -p deployd-agent`).
    #[arg(long)]
    pub agent: PathBuf,
    /// The Debian kernel package to take the kernel and drivers from.
    #[arg(
        long,
        default_value = "linux-image-cloud-amd64",
        conflicts_with = "kernel"
    )]
    pub kernel_package: String,
    /// A kernel of the operator's instead (with `--modules`, its `lib/modules/<version>`).
    #[arg(long)]
    pub kernel: Option<PathBuf>,
    #[arg(long, requires = "kernel")]
    pub modules: Option<PathBuf>,
    /// A static busybox (Debian's `busybox-static`).
    #[arg(long, default_value = "/bin/busybox")]
    pub busybox: PathBuf,
    /// Where downloaded kernel packages are kept between builds (default `<out>/.cache`).
    #[arg(long)]
    pub cache: Option<PathBuf>,
    /// For machines with UEFI Secure Boot on: refuse an unsigned kernel, and write
    /// `bootloader.img`, an EFI system partition with Debian's signed shim and GRUB
    /// (`driver_info.bootloader` of a virtual media node).
    #[arg(long)]
    pub secure_boot: bool,
}

/// What a build made.
#[derive(Debug)]
pub struct Built {
    pub kernel: PathBuf,
    pub ramdisk: PathBuf,
    pub kernel_version: String,
    pub modules: Vec<String>,
    /// Wanted drivers the kernel has neither as a module nor built in.
    pub missing: Vec<String>,
    /// With `--secure-boot`: the EFI system partition with the signed loaders.
    pub bootloader: Option<PathBuf>,
}

fn static_binary(path: &Path, what: &str, hint: &str) -> anyhow::Result<Vec<u8>> {
    let bytes =
        std::fs::read(path).with_context(|| format!("reading {what} {}", path.display()))?;
    if !kernel::is_static_elf(&bytes) {
        bail!(
            "{what} {} is not a static x86-64 executable: {hint}",
            path.display()
        );
    }
    Ok(bytes)
}

pub fn build(args: &BuildArgs) -> anyhow::Result<Built> {
    let agent = static_binary(
        &args.agent,
        "the agent",
        "build it with `cargo build --release --target x86_64-unknown-linux-musl -p deployd-agent`",
    )?;
    let busybox = static_binary(&args.busybox, "busybox", "install Debian's busybox-static")?;
    let cache = args
        .cache
        .clone()
        .unwrap_or_else(|| args.out.join(".cache"));
    let kernel = match &args.kernel {
        Some(image) => kernel::given(image, args.modules.as_deref())?,
        None => kernel::from_package(&args.kernel_package, &cache)?,
    };
    if args.secure_boot {
        secure_boot::check_kernel(&kernel.image)?;
    }
    let (order, missing) = match &kernel.modules {
        Some(dir) => {
            let tree = modules::Tree::read(dir)
                .with_context(|| format!("reading the modules in {}", dir.display()))?;
            modules::resolve(&tree, modules::WANTED, |p| std::fs::read(p))?
        }
        None => (Vec::new(), Vec::new()),
    };

    let mut entries = [
        "/bin",
        "/dev",
        "/etc",
        "/lib",
        "/lib/modules",
        "/proc",
        "/sys",
        "/tmp",
    ]
    .map(|d| Entry::Dir { path: d.into() })
    .into_iter()
    .collect::<Vec<_>>();
    entries.push(Entry::CharDevice {
        path: "/dev/console".into(),
        major: 5,
        minor: 1,
    });
    let file = |path: &str, bytes: Vec<u8>, executable| Entry::File {
        path: path.into(),
        bytes,
        executable,
    };
    entries.push(file("/bin/busybox", busybox, true));
    entries.push(Entry::Symlink {
        path: "/bin/sh".into(),
        target: "busybox".into(),
    });
    entries.push(file("/bin/deployd-agent", agent, true));
    entries.push(file("/init", INIT.as_bytes().to_vec(), true));
    entries.push(file(
        "/etc/udhcpc.script",
        UDHCPC_SCRIPT.as_bytes().to_vec(),
        true,
    ));
    let mut order_file = String::new();
    for (name, path) in &order {
        let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        entries.push(file(&format!("/lib/modules/{name}.ko"), bytes, false));
        order_file += &format!("{name}\n");
    }
    entries.push(file("/etc/modules.order", order_file.into_bytes(), false));
    let archive = initramfs::build(&entries).context("writing the initramfs")?;

    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;
    let (kernel_out, ramdisk_out) = (
        args.out.join("deploy_kernel"),
        args.out.join("deploy_ramdisk"),
    );
    std::fs::copy(&kernel.image, &kernel_out)
        .with_context(|| format!("writing {}", kernel_out.display()))?;
    std::fs::write(&ramdisk_out, archive)
        .with_context(|| format!("writing {}", ramdisk_out.display()))?;
    let bootloader = match args.secure_boot {
        true => {
            let esp = args.out.join("bootloader.img");
            secure_boot::SignedLoaders::from_packages(&cache)?
                .write_esp(&esp)
                .with_context(|| format!("writing {}", esp.display()))?;
            Some(esp)
        }
        false => None,
    };
    Ok(Built {
        bootloader,
        kernel: kernel_out,
        ramdisk: ramdisk_out,
        kernel_version: kernel.version,
        modules: order.into_iter().map(|(n, _)| n).collect(),
        missing,
    })
}
