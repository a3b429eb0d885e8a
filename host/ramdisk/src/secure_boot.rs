//! Booting under UEFI Secure Boot: through Debian's signed chain, as Debian's own media
//! boot. The firmware trusts Microsoft's UEFI CA, which signed Debian's shim (package
//! `shim-signed`); shim trusts Debian's key, which signed its GRUB (`grub-efi-amd64-signed`)
//! and its kernels (the `linux-image-*` packages); GRUB has shim check the kernel it
//! loads. The kernel then runs locked down and loads only modules signed at its build:
//! the ramdisk's drivers are copied from the package untouched, so theirs hold.
//!
//! A unified kernel image ([`crate::uki`]) is unsigned, so firmware with Secure Boot on
//! refuses it: with Secure Boot the ISO and the disk carry shim and GRUB instead, and
//! GRUB reads a configuration naming the kernel, the initramfs and the command line.
//!
//! Debian's signed GRUB looks for its configuration on the device holding
//! [`GRUB_MARK`], at [`GRUB_CONFIG`] (its built-in configuration does so for Debian's own
//! installer media); shim starts GRUB from its own folder, `\EFI\BOOT\`.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};

/// The file whose device Debian's signed GRUB takes as its root.
pub const GRUB_MARK: &str = ".disk/info";
/// Where it reads its configuration on that device.
pub const GRUB_CONFIG: &str = "boot/grub/grub.cfg";

/// Debian's signed first- and second-stage loaders, unpacked from their packages.
#[derive(Clone, Debug)]
pub struct SignedLoaders {
    /// shim, signed by Microsoft's UEFI CA: the firmware starts it.
    pub shim: PathBuf,
    /// GRUB, signed by Debian: shim starts it.
    pub grub: PathBuf,
}

impl SignedLoaders {
    /// Downloads and unpacks `shim-signed` and `grub-efi-amd64-signed` under `cache`
    /// (once; never installed on the host).
    pub fn from_packages(cache: &Path) -> anyhow::Result<SignedLoaders> {
        let shim = "usr/lib/shim/shimx64.efi.signed";
        let grub = "usr/lib/grub/x86_64-efi-signed/grubx64.efi.signed";
        Ok(SignedLoaders {
            shim: crate::kernel::unpacked("shim-signed", cache, shim)?.join(shim),
            grub: crate::kernel::unpacked("grub-efi-amd64-signed", cache, grub)?.join(grub),
        })
    }

    /// Copies both into the FAT filesystem `fs` (mtools' `-i` spelling, `image@@offset`)
    /// at the removable-media path: shim as `\EFI\BOOT\BOOTX64.EFI`, GRUB beside it.
    pub fn install(&self, fs: &str) -> anyhow::Result<()> {
        mtools(Command::new("mmd").args(["-i", fs, "::/EFI", "::/EFI/BOOT"]))?;
        for (from, to) in [
            (&self.shim, "::/EFI/BOOT/BOOTX64.EFI"),
            (&self.grub, "::/EFI/BOOT/grubx64.efi"),
        ] {
            mtools(Command::new("mcopy").args(["-i", fs]).arg(from).arg(to))?;
        }
        Ok(())
    }

    /// Writes `out`: an EFI system partition image holding the two (Ironic's
    /// `bootloader`: the El Torito EFI image of a Secure Boot ISO).
    pub fn write_esp(&self, out: &Path) -> anyhow::Result<()> {
        let bytes = std::fs::metadata(&self.shim)?.len() + std::fs::metadata(&self.grub)?.len();
        // The FAT's own structures and rounding: a tenth more, and a MiB.
        let kib = bytes.div_ceil(1024) * 11 / 10 + 1024;
        let _ = std::fs::remove_file(out);
        mtools(
            Command::new("mkfs.vfat")
                .args(["-n", "DEPLOYD_EFI", "-C"])
                .arg(out)
                .arg(kib.to_string()),
        )?;
        self.install(&out.display().to_string())
    }
}

fn mtools(command: &mut Command) -> anyhow::Result<()> {
    let out = command.output().with_context(|| {
        format!(
            "running {:?} (Debian's mtools and dosfstools)",
            command.get_program()
        )
    })?;
    if !out.status.success() {
        bail!(
            "{command:?}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// GRUB's configuration booting `kernel` with `initrd` and `cmdline` (paths on GRUB's
/// root device) at once.
pub fn grub_config(title: &str, kernel: &str, initrd: &str, cmdline: &str) -> String {
    format!(
        "set timeout=0\necho \"{title}: booting {kernel} (Secure Boot chain)\"\nlinux {kernel} {cmdline}\ninitrd {initrd}\nboot\n"
    )
}

/// Whether a PE executable (a kernel's EFI stub, a loader) carries an Authenticode
/// signature: its certificate table is not empty. Whether firmware trusts the signer is
/// the firmware's to say.
pub fn is_signed(pe: &[u8]) -> bool {
    const CERTIFICATE_TABLE: usize = 4;
    let u16_at = |o: usize| pe.get(o..o + 2).map(|b| u16::from_le_bytes([b[0], b[1]]));
    let u32_at = |o: usize| {
        pe.get(o..o + 4)
            .map(|b| u32::from_le_bytes(b.try_into().unwrap()))
    };
    let Some(header) = u32_at(0x3c).map(|o| o as usize) else {
        return false;
    };
    if pe.get(..2) != Some(b"MZ") || pe.get(header..header + 4) != Some(b"PE\0\0") {
        return false;
    }
    let optional = header + 24;
    let directories = match u16_at(optional) {
        Some(0x10b) => optional + 96,
        Some(0x20b) => optional + 112,
        _ => return false,
    };
    u32_at(directories + 8 * CERTIFICATE_TABLE + 4).is_some_and(|size| size > 0)
}

/// Refuses a kernel firmware with Secure Boot on would refuse.
pub fn check_kernel(kernel: &Path) -> anyhow::Result<()> {
    let bytes = std::fs::read(kernel).with_context(|| format!("reading {}", kernel.display()))?;
    if !is_signed(&bytes) {
        bail!(
            "the kernel {} is not signed: firmware with Secure Boot on refuses it (Debian's linux-image-* packages are signed)",
            kernel.display()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A PE32+ header with a certificate table of `size` bytes.
    fn pe(size: u32) -> Vec<u8> {
        let mut pe = vec![0u8; 0x200];
        pe[..2].copy_from_slice(b"MZ");
        pe[0x3c..0x40].copy_from_slice(&0x80u32.to_le_bytes());
        pe[0x80..0x84].copy_from_slice(b"PE\0\0");
        pe[0x98..0x9a].copy_from_slice(&0x20bu16.to_le_bytes());
        let entry = 0x98 + 112 + 8 * 4;
        pe[entry..entry + 4].copy_from_slice(&0x180u32.to_le_bytes());
        pe[entry + 4..entry + 8].copy_from_slice(&size.to_le_bytes());
        pe
    }

    #[test]
    fn a_signature_is_a_non_empty_certificate_table() {
        assert!(is_signed(&pe(1472)));
        assert!(!is_signed(&pe(0)));
        assert!(!is_signed(b"MZ"));
        assert!(!is_signed(b"\x7fELF not a PE at all"));
        let mut truncated = pe(1472);
        truncated.truncate(0x100);
        assert!(!is_signed(&truncated));
    }

    /// systemd's stub, the unified kernel images' base, is not signed by Debian: a UKI
    /// made from it is refused under Secure Boot, and the check says so.
    #[test]
    fn systemds_stub_is_unsigned() {
        let stub = std::fs::read(crate::uki::STUB).expect("Debian's systemd-boot-efi");
        assert!(!is_signed(&stub));
        let dir = tempfile::tempdir().unwrap();
        let unsigned = dir.path().join("vmlinuz");
        std::fs::write(&unsigned, &stub).unwrap();
        let refused = check_kernel(&unsigned).unwrap_err().to_string();
        assert!(refused.contains("is not signed"), "{refused}");
    }
}
