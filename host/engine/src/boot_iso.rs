//! The bootable ISO a node's BMC mounts for the `redfish-virtual-media` boot interface
//! (Ironic's `prepare_deploy_iso`): the deploy kernel and ramdisk with the node's kernel
//! parameters, bootable on BIOS and UEFI machines alike, with no network boot involved.
//!
//! - UEFI: an El Torito EFI image (a FAT filesystem) holding a unified kernel image at
//!   `\EFI\BOOT\BOOTX64.EFI` (see [`deployd_ramdisk::uki`]): the parameters are inside it,
//!   no boot loader reads a configuration.
//! - BIOS: ISOLINUX (Debian's `isolinux`) loading the same kernel and ramdisk.
//!
//! Built with Debian's xorriso, dosfstools and mtools; nothing is mounted.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;
use sha2::{Digest, Sha256};
use uuid::Uuid;

use crate::images::Images;
use crate::node::Node;

/// Where a node's ISO token is kept (`driver_internal_info`) while its BMC may fetch the
/// ISO: the ISO's url holds it, and the url is refused once it is gone.
pub const TOKEN: &str = "deployd_boot_iso_token";

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

/// The engine's side of virtual media boot: each node's ISO, built once per token into
/// the engine's data directory, and the url its BMC fetches it at.
#[derive(Debug)]
pub struct IsoMaker {
    images: Images,
    dir: PathBuf,
    kernel_append_params: String,
    /// How BMCs reach the engine (`[deploy] external_http_url`, else the public url).
    external_url: String,
    /// One build at a time: a second asker for the same ISO waits and finds it built.
    building: tokio::sync::Mutex<()>,
}

impl IsoMaker {
    pub fn new(
        images: Images,
        dir: PathBuf,
        kernel_append_params: String,
        external_url: String,
    ) -> IsoMaker {
        IsoMaker {
            images,
            dir,
            kernel_append_params,
            external_url: external_url.trim_end_matches('/').to_owned(),
            building: tokio::sync::Mutex::new(()),
        }
    }

    /// The url the node's BMC fetches its ISO at.
    pub fn url(&self, node: Uuid, token: &str) -> String {
        format!("{}/boot/{node}/iso/{token}", self.external_url)
    }

    fn path(&self, node: Uuid, token: &str) -> PathBuf {
        let tag = hex::encode(&Sha256::digest(token.as_bytes())[..8]);
        self.dir.join(format!("{node}-{tag}.iso"))
    }

    /// The local file a node's `driver_info.<which>` names: an ISO is built from files
    /// the images' allow-list admits (a url is not downloaded for it).
    fn local(&self, node: &Node, which: &str) -> Result<PathBuf, String> {
        let given = node
            .body
            .driver_info
            .get(which)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .ok_or_else(|| format!("node {} has no driver_info.{which}", node.uuid()))?;
        match self
            .images
            .resolve_field(&format!("driver_info.{which}"), given)
        {
            Some(result) => result,
            None => Err(format!(
                "virtual media boot builds its ISO from local files: driver_info.{which} {given:?} is not a path"
            )),
        }
    }

    /// The node's ISO for `token`, built now if this engine has not built it yet.
    pub async fn prepare(&self, node: &Node, token: &str) -> Result<PathBuf, String> {
        let path = self.path(node.uuid(), token);
        let _one = self.building.lock().await;
        if path.exists() {
            return Ok(path);
        }
        let kernel = self.local(node, "deploy_kernel")?;
        let ramdisk = self.local(node, "deploy_ramdisk")?;
        let cmdline = format!(
            "{} boot_method=vmedia",
            crate::ramdisk_params::agent_params(
                &self.images.base_url,
                node,
                None,
                &self.kernel_append_params
            )
        );
        std::fs::create_dir_all(&self.dir)
            .map_err(|e| format!("creating {}: {e}", self.dir.display()))?;
        let partial = path.with_extension("partial");
        let built = partial.clone();
        tokio::task::spawn_blocking(move || build(&kernel, &ramdisk, &cmdline, &built))
            .await
            .map_err(|e| format!("building the boot ISO: {e}"))?
            .map_err(|e| format!("building the boot ISO: {e}"))?;
        std::fs::rename(&partial, &path).map_err(|e| format!("keeping {}: {e}", path.display()))?;
        Ok(path)
    }

    /// Removes the node's ISOs this engine built.
    pub fn forget(&self, node: Uuid) {
        let prefix = format!("{node}-");
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return;
        };
        for entry in entries.flatten() {
            if entry.file_name().to_string_lossy().starts_with(&prefix) {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }
}

/// Writes to `out` an ISO booting `kernel` with `ramdisk` and `cmdline`, on BIOS and on
/// UEFI machines.
pub fn build(kernel: &Path, ramdisk: &Path, cmdline: &str, out: &Path) -> Result<(), IsoError> {
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

    let initrd = std::fs::read(ramdisk)
        .map_err(|e| IsoError::Tool(format!("reading {}: {e}", ramdisk.display())))?;
    let uki = work.path().join("BOOTX64.EFI");
    deployd_ramdisk::uki::build(kernel, &initrd, cmdline, "deployd deploy ramdisk", &uki)
        .map_err(|e| IsoError::Tool(format!("{e:#}")))?;
    let efiboot = tree.join("efiboot.img");
    let uki_kib = std::fs::metadata(&uki)
        .map_err(|e| IsoError::Tool(e.to_string()))?
        .len()
        .div_ceil(1024);
    // The FAT's own structures and rounding: a tenth more, and a MiB.
    let kib = uki_kib + uki_kib / 10 + 1024;
    run(
        Command::new("mkfs.vfat")
            .args(["-n", "DEPLOYD_EFI", "-C"])
            .arg(&efiboot)
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
    )?;
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The ISO has both El Torito entries (read back by xorriso) and the parameters in
    /// ISOLINUX's configuration.
    #[test]
    fn the_iso_boots_bios_and_uefi_with_the_parameters() {
        let dir = tempfile::tempdir().unwrap();
        let kernel = dir.path().join("vmlinuz");
        let ramdisk = dir.path().join("initrd");
        std::fs::write(&kernel, vec![1u8; 200_000]).unwrap();
        std::fs::write(&ramdisk, vec![2u8; 100_000]).unwrap();
        let out = dir.path().join("boot.iso");
        build(
            &kernel,
            &ramdisk,
            "ipa-api-url=http://10.0.0.1:6385 nofb",
            &out,
        )
        .unwrap();
        let report = Command::new("xorriso")
            .args(["-indev"])
            .arg(&out)
            .args(["-report_el_torito", "plain"])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&report.stdout).to_string()
            + &String::from_utf8_lossy(&report.stderr);
        assert!(text.contains("BIOS") && text.contains("UEFI"), "{text}");
        let cfg = Command::new("xorriso")
            .args(["-osirrox", "on", "-indev"])
            .arg(&out)
            .args(["-extract", "/isolinux/isolinux.cfg"])
            .arg(dir.path().join("isolinux.cfg"))
            .output()
            .unwrap();
        assert!(cfg.status.success(), "{cfg:?}");
        let cfg = std::fs::read_to_string(dir.path().join("isolinux.cfg")).unwrap();
        assert!(
            cfg.contains("APPEND ipa-api-url=http://10.0.0.1:6385 nofb"),
            "{cfg}"
        );
    }
}
