//! The bootable ISO a node's BMC mounts for the `redfish-virtual-media` boot interface
//! (Ironic's `prepare_deploy_iso`): the deploy kernel and ramdisk with the node's kernel
//! parameters, bootable on BIOS and UEFI machines alike, with no network boot involved.
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
//! The deploy kernel, ramdisk and bootloader are local files the images' allow-list
//! admits, or http(s) urls, downloaded for each build. Built with Debian's xorriso,
//! dosfstools and mtools; nothing is mounted.

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
    /// Downloads the parts given as urls.
    http: reqwest::Client,
}

/// Where one of an ISO's parts comes from: a local file, or a url downloaded for each
/// build (the ISO itself is kept for the node's token).
#[derive(Debug)]
enum Source {
    Local(PathBuf),
    Url(String),
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
            http: reqwest::Client::builder()
                .connect_timeout(std::time::Duration::from_secs(10))
                .build()
                .expect("an HTTP client"),
        }
    }

    /// The url the node's BMC fetches its ISO at.
    pub fn url(&self, node: Uuid, token: &str) -> String {
        format!("{}/boot/{node}/iso/{token}", self.external_url)
    }

    /// Where the ISO of these parts for this token is kept: named by both, so a node
    /// whose parts changed under the same token (a new bootloader, say) gets a new one.
    fn path(&self, node: Uuid, token: &str, parts: &impl std::fmt::Debug) -> PathBuf {
        let mut hash = Sha256::new();
        hash.update(token.as_bytes());
        hash.update(format!("{parts:?}").as_bytes());
        let tag = hex::encode(&hash.finalize()[..8]);
        self.dir.join(format!("{node}-{tag}.iso"))
    }

    /// Where the node's `driver_info.<which>` comes from, if it names one: a local file
    /// the images' allow-list admits, or an http(s) url.
    fn source(&self, node: &Node, which: &str) -> Result<Option<Source>, String> {
        let Some(given) = node
            .body
            .driver_info
            .get(which)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
        else {
            return Ok(None);
        };
        if given.starts_with("http://") || given.starts_with("https://") {
            return Ok(Some(Source::Url(given.to_owned())));
        }
        match self
            .images
            .resolve_field(&format!("driver_info.{which}"), given)
        {
            Some(result) => result.map(|p| Some(Source::Local(p))),
            None => Err(format!(
                "driver_info.{which} {given:?} is neither a local path nor an http(s) url"
            )),
        }
    }

    fn required(&self, node: &Node, which: &str) -> Result<Source, String> {
        self.source(node, which)?
            .ok_or_else(|| format!("node {} has no driver_info.{which}", node.uuid()))
    }

    /// A part as a local file: itself, or its url downloaded into `into`.
    async fn fetch(&self, source: Source, which: &str, into: &Path) -> Result<PathBuf, String> {
        use tokio::io::AsyncWriteExt;
        let url = match source {
            Source::Local(path) => return Ok(path),
            Source::Url(url) => url,
        };
        let failed = |e: String| format!("downloading driver_info.{which} {url}: {e}");
        let mut response = self
            .http
            .get(&url)
            .send()
            .await
            .and_then(reqwest::Response::error_for_status)
            .map_err(|e| failed(e.to_string()))?;
        let path = into.join(which);
        let mut file = tokio::fs::File::create(&path)
            .await
            .map_err(|e| failed(e.to_string()))?;
        while let Some(chunk) = response.chunk().await.map_err(|e| failed(e.to_string()))? {
            file.write_all(&chunk)
                .await
                .map_err(|e| failed(e.to_string()))?;
        }
        file.flush().await.map_err(|e| failed(e.to_string()))?;
        Ok(path)
    }

    /// The node's ISO for `token`, built now if this engine has not built it yet.
    pub async fn prepare(&self, node: &Node, token: &str) -> Result<PathBuf, String> {
        let kernel = self.required(node, "deploy_kernel")?;
        let ramdisk = self.required(node, "deploy_ramdisk")?;
        let bootloader = self.source(node, "bootloader")?;
        let cmdline = format!(
            "{} boot_method=vmedia{}",
            crate::ramdisk_params::agent_params(
                &self.images.base_url,
                node,
                None,
                &self.kernel_append_params
            ),
            // DHCP-less: the address the node's network_data gives.
            crate::ramdisk_params::static_network(node)
                .map(|p| format!(" {p}"))
                .unwrap_or_default()
        );
        let sources = (&kernel, &ramdisk, &bootloader, &cmdline);
        let path = self.path(node.uuid(), token, &sources);
        let _one = self.building.lock().await;
        if path.exists() {
            return Ok(path);
        }
        std::fs::create_dir_all(&self.dir)
            .map_err(|e| format!("creating {}: {e}", self.dir.display()))?;
        let downloads = tempfile::tempdir_in(&self.dir)
            .map_err(|e| format!("a directory for the ISO's parts: {e}"))?;
        let bootloader = match bootloader {
            Some(source) => Some(self.fetch(source, "bootloader", downloads.path()).await?),
            None => None,
        };
        let parts = Parts {
            kernel: self
                .fetch(kernel, "deploy_kernel", downloads.path())
                .await?,
            ramdisk: self
                .fetch(ramdisk, "deploy_ramdisk", downloads.path())
                .await?,
            bootloader,
            cmdline,
        };
        let partial = path.with_extension("partial");
        let built = partial.clone();
        tokio::task::spawn_blocking(move || build(&parts, &built))
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

    /// Parts given as urls are downloaded for the build; one that cannot be is named.
    #[tokio::test]
    async fn parts_given_as_urls_are_downloaded() {
        let dir = tempfile::tempdir().unwrap();
        let kernel = vec![7u8; 150_000];
        let served = kernel.clone();
        let app = axum::Router::new()
            .route(
                "/deploy.kernel",
                axum::routing::get(move || async move { served.clone() }),
            )
            .route(
                "/deploy.initrd",
                axum::routing::get(|| async { vec![8u8; 90_000] }),
            );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        let images = Images::new(dir.path().join("images"), base.clone(), &[]).unwrap();
        let isos = IsoMaker::new(images, dir.path().join("iso"), String::new(), base.clone());
        let node = |kernel: &str| {
            let body = serde_json::from_value(serde_json::json!({
                "uuid": "1be26c0b-03f2-4d2e-ae87-c02d7f33c123", "name": null,
                "driver": "redfish", "instance_info": {}, "properties": {}, "extra": {},
                "driver_info": {
                    "deploy_kernel": format!("{base}{kernel}"),
                    "deploy_ramdisk": format!("{base}/deploy.initrd"),
                },
                "driver_internal_info": {}, "last_error": null, "power_state": null,
                "target_power_state": null, "maintenance": false, "maintenance_reason": null,
                "reservation": null, "interfaces": {}, "attrs": {},
                "created_at": "2026-01-01T00:00:00Z", "updated_at": null
            }))
            .unwrap();
            Node::waiting_for_tests(body)
        };
        let iso = isos.prepare(&node("/deploy.kernel"), "t1").await.unwrap();
        let out = dir.path().join("vmlinuz");
        let got = Command::new("xorriso")
            .args(["-osirrox", "on", "-indev"])
            .arg(&iso)
            .args(["-extract", "/isolinux/vmlinuz"])
            .arg(&out)
            .output()
            .unwrap();
        assert!(got.status.success(), "{got:?}");
        assert_eq!(std::fs::read(out).unwrap(), kernel);
        let missing = isos.prepare(&node("/gone"), "t2").await.unwrap_err();
        assert!(
            missing.contains("downloading driver_info.deploy_kernel") && missing.contains("404"),
            "{missing}"
        );
        // What was downloaded went with the build.
        let left: Vec<_> = std::fs::read_dir(dir.path().join("iso"))
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        assert!(left.iter().all(|f| f.ends_with(".iso")), "{left:?}");
    }
}
