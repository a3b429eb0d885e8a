//! Unified kernel images: one UEFI executable holding a kernel, its initramfs and its
//! command line, which firmware starts with no boot loader and no boot entry (as
//! `\EFI\BOOT\BOOTX64.EFI` on an EFI system partition or a CD's El Torito EFI image).
//!
//! Made as systemd's `ukify` makes them: systemd's EFI stub (Debian's `systemd-boot-efi`)
//! with the parts added as PE sections by binutils' `objcopy`; at start the stub hands
//! `.linux` the `.initrd` and `.cmdline` it carries.

use std::path::Path;
use std::process::Command;

use anyhow::{Context, bail};

/// systemd's EFI stub for x86-64, from Debian's `systemd-boot-efi`.
pub const STUB: &str = "/usr/lib/systemd/boot/efi/linuxx64.efi.stub";

/// Where the added sections start in the image's address space: past the stub's own
/// sections (tens of KiB), then the kernel; the initramfs after the kernel, aligned.
const CMDLINE_VMA: u64 = 0x30000;
const OSREL_VMA: u64 = 0x20000;
const LINUX_VMA: u64 = 0x200_0000;
const ALIGN: u64 = 0x10_0000;

/// Writes to `out` the unified kernel image of `kernel` (a bzImage with an EFI stub, as
/// Debian's), `initrd` and `cmdline`, named `name` in its `.osrel`.
pub fn build(
    kernel: &Path,
    initrd: &[u8],
    cmdline: &str,
    name: &str,
    out: &Path,
) -> anyhow::Result<()> {
    let kernel_len = std::fs::metadata(kernel)
        .with_context(|| format!("reading {}", kernel.display()))?
        .len();
    if !Path::new(STUB).exists() {
        bail!("{STUB} is missing: install Debian's systemd-boot-efi (systemd's EFI stub)");
    }
    let parts = tempfile::tempdir().context("a directory for the image's parts")?;
    let write = |file: &str, bytes: &[u8]| -> anyhow::Result<std::path::PathBuf> {
        let path = parts.path().join(file);
        std::fs::write(&path, bytes).with_context(|| format!("writing {}", path.display()))?;
        Ok(path)
    };
    let osrel = write("osrel", format!("ID=deployd\nNAME=\"{name}\"\n").as_bytes())?;
    let cmdline = write("cmdline", cmdline.as_bytes())?;
    let initrd = write("initrd", initrd)?;
    let initrd_vma = (LINUX_VMA + kernel_len).div_ceil(ALIGN) * ALIGN;
    let sections = [
        (".osrel", osrel.as_path(), OSREL_VMA),
        (".cmdline", cmdline.as_path(), CMDLINE_VMA),
        (".linux", kernel, LINUX_VMA),
        (".initrd", initrd.as_path(), initrd_vma),
    ];
    let mut objcopy = Command::new("objcopy");
    for (section, file, vma) in sections {
        objcopy
            .arg("--add-section")
            .arg(format!("{section}={}", file.display()))
            .arg("--change-section-vma")
            .arg(format!("{section}={vma:#x}"));
    }
    let run = objcopy
        .arg(STUB)
        .arg(out)
        .output()
        .context("running objcopy (Debian's binutils)")?;
    if !run.status.success() {
        bail!(
            "objcopy could not build {}: {}",
            out.display(),
            String::from_utf8_lossy(&run.stderr).trim()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The image is a PE executable whose section table names the four parts, each
    /// holding its bytes (read back with objcopy).
    #[test]
    fn the_image_carries_the_kernel_initramfs_and_command_line_as_sections() {
        if !Path::new(STUB).exists() {
            panic!("{STUB} is missing: .ci/run installs systemd-boot-efi");
        }
        let dir = tempfile::tempdir().unwrap();
        let kernel = dir.path().join("vmlinuz");
        std::fs::write(&kernel, vec![7u8; 300_000]).unwrap();
        let out = dir.path().join("uki.efi");
        build(
            &kernel,
            b"an initramfs",
            "console=ttyS0 panic=-1",
            "test",
            &out,
        )
        .unwrap();
        let image = std::fs::read(&out).unwrap();
        assert_eq!(&image[..2], b"MZ", "a PE image");
        for (section, want) in [
            (".cmdline", b"console=ttyS0 panic=-1".to_vec()),
            (".initrd", b"an initramfs".to_vec()),
            (".linux", vec![7u8; 300_000]),
        ] {
            let dumped = dir.path().join(section);
            let status = Command::new("objcopy")
                .arg("--dump-section")
                .arg(format!("{section}={}", dumped.display()))
                .arg(&out)
                .arg(dir.path().join("scratch"))
                .status()
                .unwrap();
            assert!(status.success(), "{section}");
            let got = std::fs::read(&dumped).unwrap();
            // PE sections are padded to the file alignment.
            assert_eq!(&got[..want.len()], &want[..], "{section}");
            assert!(got[want.len()..].iter().all(|b| *b == 0), "{section}");
        }
    }

    #[test]
    fn a_missing_kernel_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let err = build(
            &dir.path().join("no-such-kernel"),
            b"",
            "",
            "test",
            &dir.path().join("out.efi"),
        )
        .unwrap_err();
        assert!(format!("{err:#}").contains("no-such-kernel"), "{err:#}");
    }
}
