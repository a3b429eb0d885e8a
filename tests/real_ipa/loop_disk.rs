//! A block device for ironic-python-agent to partition: a loop device over a file, and the
//! test's side of `tests/ipa/stubs/rescan`. IPA adds a config drive with `sgdisk` and then
//! needs the kernel to see the new partition (`partprobe`, `partx`), which takes root; IPA
//! here runs without it. So the stub asks the test, which rereads the table as root and
//! opens the partitions to IPA's uid, as the kernel and udev would for a root IPA.

use deployd_test_support::processes as support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// A loop device over a file, with partition scanning; detached when dropped. Needs root
/// (CI runs as root, as IPA's `setpriv` drop already assumes).
pub struct LoopDisk {
    pub device: PathBuf,
    rescans: Option<std::thread::JoinHandle<()>>,
    stop: Arc<AtomicBool>,
}

impl LoopDisk {
    /// Attaches `file`, opens the device to every uid (IPA's is 65534) and serves the
    /// stub's requests found in `requests` for this device only.
    pub fn attach(file: &Path, requests: &Path) -> LoopDisk {
        let out = support::run(
            Command::new("losetup")
                .args(["--find", "--show", "--partscan"])
                .arg(file),
        );
        let device = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        open_partitions(&device);
        let stop = Arc::new(AtomicBool::new(false));
        let rescans = {
            let (device, requests, stop) = (device.clone(), requests.to_owned(), stop.clone());
            std::thread::spawn(move || serve(&device, &requests, &stop))
        };
        LoopDisk {
            device,
            rescans: Some(rescans),
            stop,
        }
    }
}

impl Drop for LoopDisk {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.rescans.take() {
            let _ = thread.join();
        }
        let _ = Command::new("losetup").arg("-d").arg(&self.device).status();
    }
}

/// Answers each `<pid>.request` naming `device` with a reread and `<pid>.done`; a request
/// for any other device is left unanswered (the stub then fails after its wait).
fn serve(device: &Path, requests: &Path, stop: &AtomicBool) {
    while !stop.load(Ordering::Relaxed) {
        for entry in std::fs::read_dir(requests).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.extension().is_none_or(|e| e != "request") {
                continue;
            }
            let named = std::fs::read_to_string(&path).unwrap_or_default();
            if Path::new(named.trim()) != device {
                continue;
            }
            // `partx -u` adds, resizes and deletes the kernel's partitions to match the table.
            let _ = Command::new("partx").arg("-u").arg(device).status();
            open_partitions(device);
            let _ = std::fs::remove_file(&path);
            let _ = std::fs::write(path.with_extension("done"), b"");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `device` and its partitions (`/dev/loopNpM`), readable and writable by every uid.
fn open_partitions(device: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let name = device.file_name().unwrap().to_string_lossy().into_owned();
    let all = std::fs::read_dir("/dev").unwrap().flatten().filter(|e| {
        let n = e.file_name();
        let n = n.to_string_lossy();
        n == name
            || n.strip_prefix(&format!("{name}p"))
                .is_some_and(|m| m.parse::<u32>().is_ok())
    });
    for entry in all {
        let _ = std::fs::set_permissions(entry.path(), std::fs::Permissions::from_mode(0o666));
    }
}
