//! What the virtual-machine tests need besides QEMU: the static agent `.ci/run` builds, a
//! deploy ramdisk made by `deployd ramdisk build`, a bootable OS image that prints a
//! marker on its console, and a wait on a console log.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use deployd_ramdisk::initramfs::{Entry, build};

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
    let out = Command::new(&*BIN)
        .args(["ramdisk", "build", "--out"])
        .arg(dir)
        .arg("--agent")
        .arg(musl_agent())
        .arg("--cache")
        .arg(repo_root().join("target/ramdisk-cache"))
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

fn run(command: &mut Command) {
    let out = command
        .output()
        .unwrap_or_else(|e| panic!("{command:?}: {e}"));
    assert!(
        out.status.success(),
        "{command:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A raw disk image of `mib` MiB that boots on a PC: a FAT filesystem over the whole disk
/// with SYSLINUX in its boot sector, `kernel`, and an initramfs whose init prints `marker`
/// on the serial console and powers off. Built with Debian's dosfstools, mtools and
/// syslinux, without mounting anything.
pub fn bootable_image(dir: &Path, kernel: &Path, marker: &str, mib: u64) -> PathBuf {
    let image = dir.join("os.img");
    std::fs::File::create(&image)
        .unwrap()
        .set_len(mib << 20)
        .unwrap();
    run(Command::new("mkfs.vfat")
        .args(["-n", "DEPLOYED"])
        .arg(&image));
    let init = format!(
        "#!/bin/busybox sh\n/bin/busybox mount -t proc proc /proc\n\
         /bin/busybox echo '{marker}'\n/bin/busybox sleep 1\n/bin/busybox poweroff -f\n"
    );
    let initrd = build(&[
        Entry::Dir {
            path: "/bin".into(),
        },
        Entry::Dir {
            path: "/dev".into(),
        },
        Entry::Dir {
            path: "/proc".into(),
        },
        Entry::CharDevice {
            path: "/dev/console".into(),
            major: 5,
            minor: 1,
        },
        Entry::File {
            path: "/bin/busybox".into(),
            bytes: std::fs::read("/bin/busybox").expect("Debian's busybox-static"),
            executable: true,
        },
        Entry::File {
            path: "/init".into(),
            bytes: init.into_bytes(),
            executable: true,
        },
    ])
    .unwrap();
    std::fs::write(dir.join("initrd"), initrd).unwrap();
    std::fs::write(
        dir.join("syslinux.cfg"),
        "SERIAL 0 115200\nDEFAULT os\nLABEL os\n  KERNEL /vmlinuz\n  INITRD /initrd\n  APPEND console=ttyS0 panic=-1\n",
    )
    .unwrap();
    for (from, to) in [
        (kernel, "::/vmlinuz"),
        (&dir.join("initrd"), "::/initrd"),
        (&dir.join("syslinux.cfg"), "::/syslinux.cfg"),
    ] {
        run(Command::new("mcopy")
            .arg("-i")
            .arg(&image)
            .arg(from)
            .arg(to));
    }
    run(Command::new("syslinux").arg("--install").arg(&image));
    image
}

/// Waits up to `secs` for `text` in a console log; returns the log.
pub fn wait_console(log: &Path, text: &str, secs: u64) -> String {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    loop {
        let seen = std::fs::read_to_string(log).unwrap_or_default();
        if seen.contains(text) {
            return seen;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{text:?} not on the console {} within {secs} s; it shows:\n{}",
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
