//! A tiny operating system to deploy onto a VM and see boot: a raw disk image that boots
//! on a PC (a FAT filesystem over the whole disk with SYSLINUX in its boot sector, a
//! kernel, and an initramfs whose init prints a line on the serial console and powers
//! off). Built with Debian's dosfstools, mtools and syslinux, without mounting anything.
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
    let busybox = std::fs::read(busybox)
        .with_context(|| format!("reading {} (Debian's busybox-static)", busybox.display()))?;
    let mut entries: Vec<Entry> = ["/bin", "/dev", "/proc"]
        .map(|d| Entry::Dir { path: d.into() })
        .into();
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
    let image = dir.join("os.img");
    std::fs::File::create(&image)
        .and_then(|f| f.set_len(mib << 20))
        .with_context(|| format!("creating {}", image.display()))?;
    run(Command::new("mkfs.vfat")
        .args(["-n", "DEPLOYED"])
        .arg(&image))?;
    let initrd = dir.join("os.initrd");
    std::fs::write(
        &initrd,
        marker_initramfs(Path::new("/bin/busybox"), marker)?,
    )?;
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
