//! What the virtual-machine tests need besides QEMU: the static agent `.ci/run` builds, a
//! deploy ramdisk made by `deployd ramdisk build`, a bootable OS image that prints a
//! marker on its console, and a wait on a console log.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::emulators::repo_root;
use crate::processes::BIN;

/// The static (musl) deployd-agent a ramdisk carries.
pub fn musl_agent() -> PathBuf {
    let agent = repo_root().join("target/x86_64-unknown-linux-musl/release/deployd-agent");
    assert!(
        agent.exists(),
        "{} is missing: run .ci/run once, or: cargo build --release --target x86_64-unknown-linux-musl -p deployd-agent",
        agent.display()
    );
    agent
}

/// `deployd ramdisk build` into `dir`: (deploy_kernel, deploy_ramdisk). The kernel package
/// is kept in `target/ramdisk-cache` between runs.
pub fn ramdisk(dir: &Path) -> (PathBuf, PathBuf) {
    build_ramdisk(dir, &[])
}

/// [`ramdisk`] with `--secure-boot`: also `bootloader.img`, Debian's signed shim and GRUB.
pub fn secure_boot_ramdisk(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    let (kernel, ramdisk) = build_ramdisk(dir, &["--secure-boot"]);
    (kernel, ramdisk, dir.join("bootloader.img"))
}

fn build_ramdisk(dir: &Path, more: &[&str]) -> (PathBuf, PathBuf) {
    let out = Command::new(&*BIN)
        .args(["ramdisk", "build", "--out"])
        .arg(dir)
        .arg("--agent")
        .arg(musl_agent())
        .arg("--cache")
        .arg(repo_root().join("target/ramdisk-cache"))
        .args(more)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "deployd ramdisk build failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (dir.join("deploy_kernel"), dir.join("deploy_ramdisk"))
}

/// [`deployd_lab::os_image::bootable`]: a raw disk image of `mib` MiB that boots
/// `kernel` on a PC and prints `marker` on the serial console.
pub fn bootable_image(dir: &Path, kernel: &Path, marker: &str, mib: u64) -> PathBuf {
    deployd_lab::os_image::bootable(dir, kernel, marker, mib, 0).unwrap()
}

/// [`deployd_lab::os_image::bootable_uefi`]: a GPT whole-disk image of `mib` MiB whose EFI
/// system partition boots `kernel` on a UEFI PC from `loader`, which prints `marker` on
/// the serial console.
pub fn uefi_image(
    dir: &Path,
    kernel: &Path,
    marker: &str,
    mib: u64,
    loader: deployd_lab::os_image::EspLoader,
) -> PathBuf {
    let initrd = deployd_lab::os_image::marker_initramfs(Path::new("/bin/busybox"), marker)
        .expect("Debian's busybox-static");
    deployd_lab::os_image::bootable_uefi(dir, kernel, &initrd, mib, 0, loader).unwrap()
}

/// [`uefi_image`] that boots with Secure Boot on: Debian's signed shim and GRUB (from
/// [`secure_boot_ramdisk`]'s cache) boot `kernel`, which must be signed.
pub fn signed_uefi_image(dir: &Path, kernel: &Path, marker: &str, mib: u64) -> PathBuf {
    let cache = repo_root().join("target/ramdisk-cache");
    let loaders = deployd_ramdisk::secure_boot::SignedLoaders::from_packages(&cache)
        .expect("Debian's shim-signed and grub-efi-amd64-signed");
    let signed = deployd_lab::os_image::EspLoader::Signed(&loaders);
    uefi_image(dir, kernel, marker, mib, signed)
}

/// A whole-disk image (an MBR, one FAT partition) of `mib` MiB that boots the kernel of
/// [`ramdisk`]'s cache on a PC, prints `marker`, then finds its config drive and prints
/// its `meta_data.json` as `config-2: <json>` (see
/// [`deployd_lab::os_image::config_drive_initramfs`]).
pub fn config_drive_image(dir: &Path, kernel: &Path, marker: &str, mib: u64) -> PathBuf {
    let cache = repo_root().join("target/ramdisk-cache");
    let package = deployd_ramdisk::kernel::from_package("linux-image-cloud-amd64", &cache)
        .expect("the kernel package ramdisk() unpacked");
    let modules = package.modules.expect("the Debian kernel has modules");
    let initrd =
        deployd_lab::os_image::config_drive_initramfs(Path::new("/bin/busybox"), &modules, marker)
            .unwrap();
    deployd_lab::os_image::bootable_partitioned(dir, kernel, &initrd, mib).unwrap()
}

/// Waits up to `secs` for `text` in a console log; returns the log.
pub fn wait_console(log: &Path, text: &str, secs: u64) -> String {
    wait_console_times(log, text, 1, secs)
}

/// Waits until `text` is on the console `times` times (e.g. once per boot).
pub fn wait_console_times(log: &Path, text: &str, times: usize, secs: u64) -> String {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    loop {
        let seen = std::fs::read_to_string(log).unwrap_or_default();
        if seen.matches(text).count() >= times {
            return seen;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{text:?} not {times} times on the console {} within {secs} s; it shows:\n{}",
            log.display(),
            seen.lines()
                .rev()
                .take(40)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect::<Vec<_>>()
                .join("\n")
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}
