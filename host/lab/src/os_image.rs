//! A tiny operating system to deploy onto a VM and see boot: a raw disk image that boots
//! on a PC (a FAT filesystem over the whole disk with SYSLINUX in its boot sector, a
//! kernel, and an initramfs whose init prints a line on the serial console and powers
//! off), or on a UEFI machine (a GPT with an EFI system partition). Built with Debian's
//! dosfstools, mtools, syslinux and parted, without mounting anything.
//!
//! The same marker initramfs, booted straight from QEMU's `-kernel`, is the accelerator
//! probe ([`crate::vm::probe`]).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};
use deployd_ramdisk::initramfs::{Entry, build};

/// The Debian packages the image is built with, by the command each provides.
pub const TOOLS: [(&str, &str); 3] = [
    ("mkfs.vfat", "dosfstools"),
    ("mcopy", "mtools"),
    ("syslinux", "syslinux"),
];

fn run(command: &mut Command) -> anyhow::Result<()> {
    let out = command
        .output()
        .with_context(|| format!("running {command:?}"))?;
    if !out.status.success() {
        bail!(
            "{command:?}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// A gzip'd initramfs whose init prints `marker` on the console and powers off, around
/// `busybox` (a static one: Debian's busybox-static).
pub fn marker_initramfs(busybox: &Path, marker: &str) -> anyhow::Result<Vec<u8>> {
    let init = format!(
        "#!/bin/busybox sh\n/bin/busybox mount -t proc proc /proc\n\
         /bin/busybox echo '{marker}'\n/bin/busybox sleep 1\n/bin/busybox poweroff -f\n"
    );
    busybox_initramfs(busybox, init, &["/bin", "/dev", "/proc"], Vec::new())
}

/// A gzip'd initramfs whose init prints `marker` and then offers a login on the serial
/// console (`deployed login:`, busybox's getty), as an installed OS does: `root` without
/// a password.
pub fn login_initramfs(busybox: &Path, marker: &str) -> anyhow::Result<Vec<u8>> {
    let init = format!(
        "#!/bin/busybox sh
         B=/bin/busybox
         $B mount -t proc proc /proc
         $B mount -t devtmpfs devtmpfs /dev
         $B --install -s /bin
         $B echo '{marker}'
         $B hostname deployed
         $B echo 'root::0:0:root:/root:/bin/sh' > /etc/passwd
         while true; do $B getty -L 115200 ttyS0 vt100; done
"
    );
    busybox_initramfs(
        busybox,
        init,
        &["/bin", "/dev", "/etc", "/proc", "/root", "/tmp"],
        Vec::new(),
    )
}

/// A file of `mib` MiB of zeros (sparse): the disk an image is built on.
fn empty_disk(path: &Path, mib: u64) -> anyhow::Result<PathBuf> {
    std::fs::File::create(path)
        .and_then(|f| f.set_len(mib << 20))
        .with_context(|| format!("creating {}", path.display()))?;
    Ok(path.to_path_buf())
}

/// A gzip'd initramfs of `dirs`, a console, `busybox`, the `init` script and `more`.
fn busybox_initramfs(
    busybox: &Path,
    init: String,
    dirs: &[&str],
    more: Vec<Entry>,
) -> anyhow::Result<Vec<u8>> {
    let busybox = std::fs::read(busybox)
        .with_context(|| format!("reading {} (Debian's busybox-static)", busybox.display()))?;
    let mut entries: Vec<Entry> = dirs
        .iter()
        .map(|d| Entry::Dir { path: (*d).into() })
        .collect();
    entries.extend([
        Entry::CharDevice {
            path: "/dev/console".into(),
            major: 5,
            minor: 1,
        },
        Entry::File {
            path: "/bin/busybox".into(),
            bytes: busybox,
            executable: true,
        },
        Entry::File {
            path: "/init".into(),
            bytes: init.into_bytes(),
            executable: true,
        },
    ]);
    entries.extend(more);
    Ok(build(&entries)?)
}

/// Builds `dir/os.img`, `mib` MiB, booting `kernel` with the marker initramfs, with a
/// file of `payload` random bytes besides (so that a partial copy differs from it).
pub fn bootable(
    dir: &Path,
    kernel: &Path,
    marker: &str,
    mib: u64,
    payload: u64,
) -> anyhow::Result<PathBuf> {
    let initrd = marker_initramfs(Path::new("/bin/busybox"), marker)?;
    bootable_with(dir, kernel, &initrd, mib, payload)
}

/// [`bootable`] with its own initramfs (e.g. [`login_initramfs`]).
pub fn bootable_with(
    dir: &Path,
    kernel: &Path,
    initrd_bytes: &[u8],
    mib: u64,
    payload: u64,
) -> anyhow::Result<PathBuf> {
    let image = empty_disk(&dir.join("os.img"), mib)?;
    run(Command::new("mkfs.vfat")
        .args(["-n", "DEPLOYED"])
        .arg(&image))?;
    let initrd = dir.join("os.initrd");
    std::fs::write(&initrd, initrd_bytes)?;
    let cfg = dir.join("syslinux.cfg");
    std::fs::write(
        &cfg,
        "SERIAL 0 115200\nDEFAULT os\nLABEL os\n  KERNEL /vmlinuz\n  INITRD /initrd\n  APPEND console=ttyS0 panic=-1\n",
    )?;
    let filler = dir.join("payload");
    crate::write_random(&filler, payload)?;
    for (from, to) in [
        (kernel, "::/vmlinuz"),
        (&initrd, "::/initrd"),
        (&cfg, "::/syslinux.cfg"),
        (&filler, "::/payload"),
    ] {
        run(Command::new("mcopy")
            .arg("-i")
            .arg(&image)
            .arg(from)
            .arg(to))?;
    }
    run(Command::new("syslinux").arg("--install").arg(&image))?;
    let _ = std::fs::remove_file(&filler);
    Ok(image)
}

/// The drivers the config-drive OS loads to read its disk's `config-2` partition.
const CONFIG_DRIVE_MODULES: [&str; 3] = ["virtio_pci", "virtio_blk", "isofs"];

/// A gzip'd initramfs whose init prints `marker`, then finds the `config-2` filesystem
/// (a config drive) on the machine's disks, prints its `meta_data.json` on the console
/// as `config-2: <json>`, and powers off. `modules` is the kernel's
/// `lib/modules/<version>`: the virtio disk and ISO 9660 drivers are loaded from it.
pub fn config_drive_initramfs(
    busybox: &Path,
    modules: &Path,
    marker: &str,
) -> anyhow::Result<Vec<u8>> {
    use deployd_ramdisk::modules::{Tree, resolve};
    let tree = Tree::read(modules).with_context(|| format!("reading {}", modules.display()))?;
    let (order, missing) = resolve(&tree, &CONFIG_DRIVE_MODULES, |p| std::fs::read(p))?;
    if !missing.is_empty() {
        bail!("the kernel has no {}", missing.join(", "));
    }
    let init = format!(
        "#!/bin/busybox sh\n\
         B=/bin/busybox\n\
         $B mount -t proc proc /proc\n\
         $B mount -t sysfs sys /sys\n\
         $B mount -t devtmpfs dev /dev\n\
         for m in /lib/modules/*.ko; do $B insmod $m; done\n\
         $B echo '{marker}'\n\
         for try in 1 2 3 4 5 6 7 8 9 10; do\n\
           for dev in /dev/vd?? /dev/sd??; do\n\
             [ -b $dev ] || continue\n\
             # The ISO 9660 volume id (as blkid reads it): sector 16, offset 40.\n\
             label=$($B dd if=$dev bs=1 skip=32808 count=8 2>/dev/null)\n\
             if [ \"$label\" = config-2 ]; then\n\
               $B mount -t iso9660 -o ro $dev /mnt &&\n\
               $B echo \"config-2: $($B cat /mnt/openstack/latest/meta_data.json)\"\n\
               $B sleep 1; $B poweroff -f\n\
             fi\n\
           done\n\
           $B sleep 1\n\
         done\n\
         $B echo 'config-2: none found'\n\
         $B sleep 1\n$B poweroff -f\n"
    );
    let mut modules_files = Vec::new();
    for (i, (name, path)) in order.iter().enumerate() {
        modules_files.push(Entry::File {
            path: format!("/lib/modules/{i:02}-{name}.ko"),
            bytes: std::fs::read(path)?,
            executable: false,
        });
    }
    let dirs = [
        "/bin",
        "/dev",
        "/lib",
        "/lib/modules",
        "/mnt",
        "/proc",
        "/sys",
    ];
    busybox_initramfs(busybox, init, &dirs, modules_files)
}

/// Builds `dir/os-partitioned.img`, `mib` MiB, as whole-disk images are: an MBR (with
/// SYSLINUX's boot code) whose one partition is the FAT filesystem that boots `kernel`
/// with `initrd`. A config drive can be added to its table.
pub fn bootable_partitioned(
    dir: &Path,
    kernel: &Path,
    initrd: &[u8],
    mib: u64,
) -> anyhow::Result<PathBuf> {
    let image = empty_disk(&dir.join("os-partitioned.img"), mib)?;
    run(Command::new("parted")
        .arg("-s")
        .arg(&image)
        .args([
            "mklabel", "msdos", "mkpart", "primary", "fat32", "1MiB", "100%",
        ])
        .args(["set", "1", "boot", "on"]))?;
    // The filesystem starts at sector 2048 and fills the rest (sizes in KiB).
    run(Command::new("mkfs.vfat")
        .args(["-n", "DEPLOYED", "--offset", "2048"])
        .arg(&image)
        .arg(((mib - 1) * 1024).to_string()))?;
    let initrd_path = dir.join("os-partitioned.initrd");
    std::fs::write(&initrd_path, initrd)?;
    let cfg = dir.join("syslinux-partitioned.cfg");
    std::fs::write(
        &cfg,
        "SERIAL 0 115200\nDEFAULT os\nLABEL os\n  KERNEL /vmlinuz\n  INITRD /initrd\n  APPEND console=ttyS0 panic=-1\n",
    )?;
    let fs = format!("{}@@1M", image.display());
    for (from, to) in [
        (kernel, "::/vmlinuz"),
        (initrd_path.as_path(), "::/initrd"),
        (cfg.as_path(), "::/syslinux.cfg"),
    ] {
        run(Command::new("mcopy").args(["-i", &fs]).arg(from).arg(to))?;
    }
    run(Command::new("syslinux")
        .args(["--install", "--offset", "1048576"])
        .arg(&image))?;
    // SYSLINUX's MBR code: boots the active partition.
    let mbr = std::fs::read("/usr/lib/syslinux/mbr/mbr.bin")
        .context("reading /usr/lib/syslinux/mbr/mbr.bin (Debian's syslinux)")?;
    let mut file = std::fs::OpenOptions::new().write(true).open(&image)?;
    std::io::Write::write_all(&mut file, &mbr[..mbr.len().min(440)])?;
    Ok(image)
}

/// Builds `dir/os-uefi.img`, `mib` MiB, as UEFI whole-disk images are: a GPT whose one
/// partition is an EFI system partition holding a unified kernel image of `kernel` and
/// `initrd` (see [`deployd_ramdisk::uki`]) at the removable-media path
/// `\EFI\BOOT\BOOTX64.EFI`, which the firmware starts with no boot entry of its own; with
/// a file of `payload` random bytes besides.
///
/// [`EspLoader`] says where the loader is instead.
pub fn bootable_uefi(
    dir: &Path,
    kernel: &Path,
    initrd: &[u8],
    mib: u64,
    payload: u64,
    loader: EspLoader,
) -> anyhow::Result<PathBuf> {
    let image = empty_disk(&dir.join("os-uefi.img"), mib)?;
    // The partition leaves the last MiB to the backup GPT.
    run(Command::new("parted")
        .arg("-s")
        .arg(&image)
        .args(["mklabel", "gpt", "mkpart", "ESP", "fat32", "1MiB"])
        .arg(format!("{}MiB", mib - 1))
        .args(["set", "1", "esp", "on"]))?;
    // Without `--mbr=n` mkfs.vfat writes an MBR of its own over GPT's protective one.
    run(Command::new("mkfs.vfat")
        .args(["-n", "ESP", "--mbr=n", "--offset", "2048"])
        .arg(&image)
        .arg(((mib - 2) * 1024).to_string()))?;
    let fs = format!("{}@@1M", image.display());
    let cmdline = "console=ttyS0 panic=-1";
    let folder = match loader {
        EspLoader::Signed(loaders) => {
            signed_esp(dir, &fs, loaders, kernel, initrd, cmdline)?;
            None
        }
        EspLoader::Removable => Some(("::/EFI/BOOT", "BOOTX64.EFI")),
        EspLoader::Distribution => Some(("::/EFI/deployd", "deployd.efi")),
    };
    if let Some((folder, file)) = folder {
        let uki = dir.join("os-uefi.efi");
        deployd_ramdisk::uki::build(kernel, initrd, cmdline, "deployd test OS", &uki)?;
        run(Command::new("mmd").args(["-i", &fs, "::/EFI", folder]))?;
        run(Command::new("mcopy")
            .args(["-i", &fs])
            .arg(&uki)
            .arg(format!("{folder}/{file}")))?;
        let _ = std::fs::remove_file(&uki);
    }
    if payload > 0 {
        let filler = dir.join("payload-uefi");
        crate::write_random(&filler, payload)?;
        run(Command::new("mcopy")
            .args(["-i", &fs])
            .arg(&filler)
            .arg("::/payload"))?;
        let _ = std::fs::remove_file(&filler);
    }
    Ok(image)
}

/// Where a UEFI image's loader is on its EFI system partition.
pub enum EspLoader<'a> {
    /// A unified kernel image at the removable-media path, `\EFI\BOOT\BOOTX64.EFI`,
    /// which firmware starts with no boot entry.
    Removable,
    /// The same only at a distribution's path, `\EFI\deployd\deployd.efi`: the machine
    /// boots it only through a boot entry (which the agent adds after writing it).
    Distribution,
    /// Debian's signed shim and GRUB at the removable-media path, with the kernel, the
    /// initramfs and GRUB's configuration (see [`deployd_ramdisk::secure_boot`]): it
    /// boots with Secure Boot on, if the kernel is signed.
    Signed(&'a deployd_ramdisk::secure_boot::SignedLoaders),
}

/// The EFI system partition `fs` booting `kernel` through Debian's signed loaders.
fn signed_esp(
    dir: &Path,
    fs: &str,
    loaders: &deployd_ramdisk::secure_boot::SignedLoaders,
    kernel: &Path,
    initrd: &[u8],
    cmdline: &str,
) -> anyhow::Result<()> {
    use deployd_ramdisk::secure_boot::{GRUB_CONFIG, GRUB_MARK, grub_config};
    loaders.install(fs)?;
    let parts = dir.join("os-uefi.parts");
    std::fs::create_dir_all(&parts)?;
    let write = |name: &str, bytes: &[u8]| -> anyhow::Result<PathBuf> {
        let path = parts.join(name);
        std::fs::write(&path, bytes)?;
        Ok(path)
    };
    let config = grub_config("deployd test OS", "/vmlinuz", "/initrd", cmdline);
    let files = [
        (write("initrd", initrd)?, "::/initrd".to_owned()),
        (
            write("info", b"deployd test OS\n")?,
            format!("::/{GRUB_MARK}"),
        ),
        (
            write("grub.cfg", config.as_bytes())?,
            format!("::/{GRUB_CONFIG}"),
        ),
        (kernel.to_owned(), "::/vmlinuz".to_owned()),
    ];
    run(Command::new("mmd").args(["-i", fs, "::/.disk", "::/boot", "::/boot/grub"]))?;
    for (from, to) in files {
        run(Command::new("mcopy").args(["-i", fs]).arg(from).arg(to))?;
    }
    let _ = std::fs::remove_dir_all(&parts);
    Ok(())
}
