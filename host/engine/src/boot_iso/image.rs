//! The ISO itself: the deploy kernel and ramdisk with their kernel parameters, bootable on
//! BIOS and UEFI machines alike.
//!
//! - UEFI: an El Torito EFI image (a FAT filesystem) holding a unified kernel image at
//!   `\EFI\BOOT\BOOTX64.EFI` (see [`deployd_ramdisk::uki`]): the parameters are inside it,
//!   no boot loader reads a configuration. With Secure Boot, the node's
//!   `driver_info.bootloader` (as Ironic's: an EFI system partition image, here the one
//!   `deployd ramdisk build --secure-boot` writes, with Debian's signed shim and GRUB) is
//!   that image instead, and GRUB reads its configuration from the ISO (see
//!   [`deployd_ramdisk::secure_boot`]): firmware with Secure Boot on refuses the unsigned
//!   unified image.
//! - BIOS: ISOLINUX (Debian's `isolinux`) loading the same kernel and ramdisk.
//!
//! Built with Debian's xorriso, dosfstools and mtools; nothing is mounted.

use std::path::{Path, PathBuf};
use std::process::Command;

/// ISOLINUX's El Torito boot image, and the library it loads, from Debian's `isolinux`
/// and `syslinux-common`.
const ISOLINUX_BIN: &str = "/usr/lib/ISOLINUX/isolinux.bin";
const LDLINUX_C32: &str = "/usr/lib/syslinux/modules/bios/ldlinux.c32";

/// Why an ISO could not be built.
#[derive(Debug, thiserror::Error)]
pub enum IsoError {
    #[error("{0} is missing: install Debian's {1}")]
    Missing(&'static str, &'static str),
    #[error("{0}")]
    Tool(String),
}

fn run(command: &mut Command, what: &str) -> Result<(), IsoError> {
    let out = command
        .output()
        .map_err(|e| IsoError::Tool(format!("{what}: {e}")))?;
    if !out.status.success() {
        return Err(IsoError::Tool(format!(
            "{what}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(())
}

/// What an ISO boots.
#[derive(Clone, Debug)]
pub struct Parts {
    pub kernel: PathBuf,
    pub ramdisk: PathBuf,
    pub cmdline: String,
    /// The EFI system partition image with a signed loader chain (Secure Boot); without
    /// one, UEFI machines start a unified kernel image.
    pub bootloader: Option<PathBuf>,
}

/// Writes to `out` an ISO booting the kernel with the ramdisk and the command line, on
/// BIOS and on UEFI machines.
pub fn build(parts: &Parts, out: &Path) -> Result<(), IsoError> {
    let Parts {
        kernel,
        ramdisk,
        cmdline,
        bootloader,
    } = parts;
    for (file, package) in [(ISOLINUX_BIN, "isolinux"), (LDLINUX_C32, "syslinux-common")] {
        if !Path::new(file).exists() {
            return Err(IsoError::Missing(file, package));
        }
    }
    let work = tempfile::tempdir_in(out.parent().unwrap_or(Path::new(".")))
        .map_err(|e| IsoError::Tool(format!("a directory to build the ISO in: {e}")))?;
    let tree = work.path().join("tree");
    let isolinux = tree.join("isolinux");
    std::fs::create_dir_all(&isolinux).map_err(|e| IsoError::Tool(e.to_string()))?;
    let copy = |from: &Path, to: PathBuf| {
        std::fs::copy(from, &to)
            .map(drop)
            .map_err(|e| IsoError::Tool(format!("copying {}: {e}", from.display())))
    };
    copy(Path::new(ISOLINUX_BIN), isolinux.join("isolinux.bin"))?;
    copy(Path::new(LDLINUX_C32), isolinux.join("ldlinux.c32"))?;
    copy(kernel, isolinux.join("vmlinuz"))?;
    copy(ramdisk, isolinux.join("initrd"))?;
    let config = format!(
        "DEFAULT deploy\nLABEL deploy\n  KERNEL /isolinux/vmlinuz\n  INITRD /isolinux/initrd\n  APPEND {cmdline}\n"
    );
    std::fs::write(isolinux.join("isolinux.cfg"), config)
        .map_err(|e| IsoError::Tool(e.to_string()))?;

    let efiboot = tree.join("efiboot.img");
    match bootloader {
        Some(esp) => signed_chain(esp, &tree, cmdline)?,
        None => unified_image(kernel, ramdisk, cmdline, work.path(), &efiboot)?,
    }
    run(
        Command::new("xorriso")
            .args(["-as", "mkisofs", "-quiet", "-o"])
            .arg(out)
            .args(["-V", "DEPLOYD", "-J", "-R"])
            .args(["-b", "isolinux/isolinux.bin", "-c", "isolinux/boot.cat"])
            .args(["-no-emul-boot", "-boot-load-size", "4", "-boot-info-table"])
            .args(["-eltorito-alt-boot", "-e", "efiboot.img", "-no-emul-boot"])
            .arg(&tree),
        "xorriso (Debian's xorriso)",
    )
}

/// The UEFI part under Secure Boot: the bootloader image as the El Torito EFI image, and
/// on the ISO the marker and configuration its GRUB looks for, booting ISOLINUX's kernel
/// and ramdisk.
fn signed_chain(esp: &Path, tree: &Path, cmdline: &str) -> Result<(), IsoError> {
    use deployd_ramdisk::secure_boot::{GRUB_CONFIG, GRUB_MARK, grub_config};
    let write = |path: &str, text: String| {
        let path = tree.join(path);
        std::fs::create_dir_all(path.parent().expect("a file in a folder"))
            .and_then(|()| std::fs::write(&path, text))
            .map_err(|e| IsoError::Tool(format!("writing {}: {e}", path.display())))
    };
    std::fs::copy(esp, tree.join("efiboot.img"))
        .map_err(|e| IsoError::Tool(format!("copying the bootloader {}: {e}", esp.display())))?;
    write(GRUB_MARK, "deployd deploy ramdisk\n".into())?;
    write(
        GRUB_CONFIG,
        grub_config("deployd", "/isolinux/vmlinuz", "/isolinux/initrd", cmdline),
    )
}

/// The UEFI part without Secure Boot: a FAT image holding a unified kernel image.
fn unified_image(
    kernel: &Path,
    ramdisk: &Path,
    cmdline: &str,
    work: &Path,
    efiboot: &Path,
) -> Result<(), IsoError> {
    let initrd = std::fs::read(ramdisk)
        .map_err(|e| IsoError::Tool(format!("reading {}: {e}", ramdisk.display())))?;
    let uki = work.join("BOOTX64.EFI");
    deployd_ramdisk::uki::build(kernel, &initrd, cmdline, "deployd deploy ramdisk", &uki)
        .map_err(|e| IsoError::Tool(format!("{e:#}")))?;
    let uki_kib = std::fs::metadata(&uki)
        .map_err(|e| IsoError::Tool(e.to_string()))?
        .len()
        .div_ceil(1024);
    // The FAT's own structures and rounding: a tenth more, and a MiB.
    let kib = uki_kib + uki_kib / 10 + 1024;
    run(
        Command::new("mkfs.vfat")
            .args(["-n", "DEPLOYD_EFI", "-C"])
            .arg(efiboot)
            .arg(kib.to_string()),
        "mkfs.vfat (Debian's dosfstools)",
    )?;
    let fs = efiboot.display().to_string();
    run(
        Command::new("mmd").args(["-i", &fs, "::/EFI", "::/EFI/BOOT"]),
        "mmd (Debian's mtools)",
    )?;
    run(
        Command::new("mcopy")
            .args(["-i", &fs])
            .arg(&uki)
            .arg("::/EFI/BOOT/BOOTX64.EFI"),
        "mcopy (Debian's mtools)",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(dir: &Path, bootloader: Option<PathBuf>) -> Parts {
        let kernel = dir.join("vmlinuz");
        let ramdisk = dir.join("initrd");
        std::fs::write(&kernel, vec![1u8; 200_000]).unwrap();
        std::fs::write(&ramdisk, vec![2u8; 100_000]).unwrap();
        Parts {
            kernel,
            ramdisk,
            cmdline: "ipa-api-url=http://10.0.0.1:6385 nofb".into(),
            bootloader,
        }
    }

    /// The El Torito entries xorriso reads back, and the text of `file` in the ISO.
    fn read_back(iso: &Path, file: &str) -> (String, String) {
        let report = Command::new("xorriso")
            .args(["-indev"])
            .arg(iso)
            .args(["-report_el_torito", "plain"])
            .output()
            .unwrap();
        let entries = String::from_utf8_lossy(&report.stdout).to_string()
            + &String::from_utf8_lossy(&report.stderr);
        let to = iso.with_extension("extracted");
        let out = Command::new("xorriso")
            .args(["-osirrox", "on", "-indev"])
            .arg(iso)
            .args(["-extract", file])
            .arg(&to)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        (entries, std::fs::read_to_string(&to).unwrap())
    }

    /// The ISO has both El Torito entries and the parameters in ISOLINUX's configuration.
    #[test]
    fn the_iso_boots_bios_and_uefi_with_the_parameters() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("boot.iso");
        build(&parts(dir.path(), None), &out).unwrap();
        let (entries, cfg) = read_back(&out, "/isolinux/isolinux.cfg");
        assert!(
            entries.contains("BIOS") && entries.contains("UEFI"),
            "{entries}"
        );
        assert!(
            cfg.contains("APPEND ipa-api-url=http://10.0.0.1:6385 nofb"),
            "{cfg}"
        );
    }

    /// With a bootloader, its image is the UEFI entry and GRUB's configuration on the
    /// ISO boots the same kernel with the same parameters.
    #[test]
    fn a_secure_boot_iso_carries_the_bootloader_and_grubs_configuration() {
        let dir = tempfile::tempdir().unwrap();
        let esp = dir.path().join("bootloader.img");
        let loaders = deployd_ramdisk::secure_boot::SignedLoaders {
            shim: dir.path().join("loader.efi"),
            grub: dir.path().join("loader.efi"),
        };
        std::fs::write(&loaders.shim, "not really shim").unwrap();
        loaders.write_esp(&esp).unwrap();
        let out = dir.path().join("boot.iso");
        build(&parts(dir.path(), Some(esp.clone())), &out).unwrap();
        let (entries, grub) = read_back(&out, "/boot/grub/grub.cfg");
        assert!(entries.contains("UEFI"), "{entries}");
        assert!(
            grub.contains("linux /isolinux/vmlinuz ipa-api-url=http://10.0.0.1:6385 nofb\n")
                && grub.contains("initrd /isolinux/initrd\n"),
            "{grub}"
        );
        let (_, mark) = read_back(&out, "/.disk/info");
        assert!(!mark.is_empty());
        // The EFI entry is the bootloader's image, byte for byte.
        let efi = dir.path().join("efiboot.img");
        let got = Command::new("xorriso")
            .args(["-osirrox", "on", "-indev"])
            .arg(&out)
            .args(["-extract", "/efiboot.img"])
            .arg(&efi)
            .output()
            .unwrap();
        assert!(got.status.success(), "{got:?}");
        assert_eq!(std::fs::read(efi).unwrap(), std::fs::read(esp).unwrap());
    }
}
