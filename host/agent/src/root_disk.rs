//! Which disk the image goes to when the agent is not told (`--disk`), as
//! ironic-python-agent picks it: the smallest disk that meets every one of the node's
//! root device hints (`properties.root_device`, given at lookup; read by
//! [`deployd_wire::root_device`], Ironic's grammar), or without hints the smallest disk of
//! at least 4 GiB, read from `/sys/block`. Loop, RAM, optical, device-mapper, RAID and
//! zram devices are not disks, and neither is a removable one.

use std::path::{Path, PathBuf};

use deployd_wire::root_device::{DiskFacts, Hints};
use serde_json::Value;

/// IPA's smallest root disk.
pub const MIN_SIZE: u64 = 4 << 30;

/// Where udev names disks by their bus path.
const BY_PATH: &str = "/dev/disk/by-path";

/// The block devices under `sys_block` (normally `/sys/block`) that are disks.
pub fn disks(sys_block: &Path) -> std::io::Result<Vec<DiskFacts>> {
    let read = |dir: &Path, file: &str| std::fs::read_to_string(dir.join(file)).unwrap_or_default();
    let by_path = by_path_names(Path::new(BY_PATH));
    let mut found = Vec::new();
    for entry in std::fs::read_dir(sys_block)? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let not_a_disk = ["loop", "ram", "sr", "dm-", "md", "zram", "nbd"];
        if not_a_disk.iter().any(|p| name.starts_with(p)) {
            continue;
        }
        let dir = entry.path();
        if read(&dir, "removable").trim() == "1" {
            continue;
        }
        // `size` counts 512-byte sectors whatever the device's own sector size.
        let Ok(sectors) = read(&dir, "size").trim().parse::<u64>() else {
            continue;
        };
        // Virtio disks keep their serial beside `size`, SCSI and NVMe ones under `device`.
        let first = |files: &[&str]| {
            files
                .iter()
                .map(|f| read(&dir, f).trim().to_owned())
                .find(|v| !v.is_empty())
                .unwrap_or_default()
        };
        // A SCSI disk's `device` links to its host:channel:target:lun.
        let hctl = std::fs::canonicalize(dir.join("device"))
            .ok()
            .and_then(|d| d.file_name().map(|n| n.to_string_lossy().into_owned()))
            .filter(|n| n.split(':').count() == 4)
            .unwrap_or_default();
        found.push(DiskFacts {
            size: sectors * 512,
            model: first(&["device/model"]),
            vendor: first(&["device/vendor"]),
            serial: first(&["serial", "device/serial"]),
            wwn: first(&["wwid", "device/wwid"]),
            rotational: read(&dir, "queue/rotational").trim() == "1",
            hctl,
            by_path: by_path
                .iter()
                .filter(|(_, target)| *target == name)
                .map(|(link, _)| link.clone())
                .collect(),
            name,
            ..DiskFacts::default()
        });
    }
    found.sort_by(|a, b| (a.size, &a.name).cmp(&(b.size, &b.name)));
    Ok(found)
}

/// `(link, device name)` for each `/dev/disk/by-path` entry.
fn by_path_names(dir: &Path) -> Vec<(String, String)> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| {
            let target = std::fs::canonicalize(e.path()).ok()?;
            let name = target.file_name()?.to_string_lossy().into_owned();
            Some((e.path().display().to_string(), name))
        })
        .collect()
}

/// The smallest disk of at least [`MIN_SIZE`], as `/dev/<name>`; the error lists the
/// disks seen.
pub fn choose(sys_block: &Path) -> Result<PathBuf, String> {
    choose_with(sys_block, None)
}

/// The smallest disk that matches `hints` (the node's `properties.root_device`), or
/// without hints the smallest of at least [`MIN_SIZE`].
pub fn choose_with(sys_block: &Path, hints: Option<&Value>) -> Result<PathBuf, String> {
    choose_disk(sys_block, hints).map(|d| Path::new("/dev").join(&d.name))
}

/// [`choose_with`], with what the disk is.
pub fn choose_disk(sys_block: &Path, hints: Option<&Value>) -> Result<DiskFacts, String> {
    let all = disks(sys_block).map_err(|e| format!("reading {}: {e}", sys_block.display()))?;
    let parsed = Hints::parse(hints)?;
    let found = match parsed.is_empty() {
        false => all.iter().find(|d| parsed.matches(d)),
        true => all.iter().find(|d| d.size >= MIN_SIZE),
    };
    let seen = || match all.is_empty() {
        true => "none".into(),
        false => all.iter().map(describe).collect::<Vec<_>>().join(", "),
    };
    match found {
        Some(d) => Ok(d.clone()),
        None if !parsed.is_empty() => Err(format!(
            "no disk matches the root device hints {}; disks seen: {}",
            hints.cloned().unwrap_or_default(),
            seen()
        )),
        None => Err(format!(
            "no disk of at least 4 GiB to deploy to; disks seen: {}",
            seen()
        )),
    }
}

/// A disk as an error lists it: name, size and what hints can match.
fn describe(d: &DiskFacts) -> String {
    let mut facts = vec![format!("{} bytes", d.size)];
    for (key, value) in [("serial", &d.serial), ("model", &d.model), ("wwn", &d.wwn)] {
        if !value.is_empty() {
            facts.push(format!("{key} {value}"));
        }
    }
    if d.rotational {
        facts.push("rotational".into());
    }
    format!("{} ({})", d.name, facts.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn device(root: &Path, name: &str, bytes: u64, removable: bool) {
        let dir = root.join(name);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("size"), format!("{}\n", bytes / 512)).unwrap();
        std::fs::write(dir.join("removable"), if removable { "1\n" } else { "0\n" }).unwrap();
    }

    #[test]
    fn the_smallest_disk_of_at_least_4_gib_is_chosen() {
        let sys = tempfile::tempdir().unwrap();
        device(sys.path(), "vda", 8 << 30, false);
        device(sys.path(), "vdb", 5 << 30, false);
        device(sys.path(), "vdc", 1 << 30, false);
        device(sys.path(), "sdz", 4 << 30, true);
        device(sys.path(), "loop0", 6 << 30, false);
        device(sys.path(), "sr0", 6 << 30, false);
        assert_eq!(choose(sys.path()).unwrap(), Path::new("/dev/vdb"));
    }

    #[test]
    fn no_disk_large_enough_names_the_disks_seen() {
        let sys = tempfile::tempdir().unwrap();
        device(sys.path(), "vda", 1 << 30, false);
        let err = choose(sys.path()).unwrap_err();
        assert!(err.contains("vda (1073741824 bytes)"), "{err}");
        let empty = tempfile::tempdir().unwrap();
        assert!(
            choose(empty.path())
                .unwrap_err()
                .contains("disks seen: none")
        );
    }

    fn described(root: &Path, name: &str, gib: u64, serial: &str, model: &str, rotational: bool) {
        device(root, name, gib << 30, false);
        let dir = root.join(name);
        std::fs::create_dir_all(dir.join("device")).unwrap();
        std::fs::create_dir_all(dir.join("queue")).unwrap();
        std::fs::write(dir.join("serial"), format!("{serial}\n")).unwrap();
        std::fs::write(dir.join("device/model"), format!("{model}   \n")).unwrap();
        std::fs::write(
            dir.join("queue/rotational"),
            if rotational { "1\n" } else { "0\n" },
        )
        .unwrap();
    }

    #[test]
    fn root_device_hints_choose_the_disk_that_meets_them_all() {
        let sys = tempfile::tempdir().unwrap();
        described(sys.path(), "sda", 100, "HDD-1", "Big Spinner", true);
        described(sys.path(), "sdb", 8, "SSD-1", "Fast One", false);
        described(sys.path(), "sdc", 200, "SSD-2", "Fast One", false);
        let pick = |hints: Value| choose_with(sys.path(), Some(&hints));
        let dev = |name: &str| Ok(Path::new("/dev").join(name));
        // No hints: the smallest of at least 4 GiB.
        assert_eq!(pick(json!({})), dev("sdb"));
        assert_eq!(pick(json!({"serial": "ssd-2"})), dev("sdc"));
        assert_eq!(pick(json!({"name": "/dev/sda"})), dev("sda"));
        assert_eq!(pick(json!({"name": "sda"})), dev("sda"));
        assert_eq!(pick(json!({"size": ">= 100"})), dev("sda"));
        assert_eq!(pick(json!({"size": 200})), dev("sdc"));
        assert_eq!(pick(json!({"size": "< 50"})), dev("sdb"));
        assert_eq!(
            pick(json!({"model": "Fast One", "size": "> 8"})),
            dev("sdc")
        );
        assert_eq!(pick(json!({"rotational": true})), dev("sda"));
        assert_eq!(
            pick(json!({"rotational": "false", "size": "!= 8"})),
            dev("sdc")
        );
        let none = pick(json!({"serial": "nope"})).unwrap_err();
        assert!(
            none.contains("no disk matches the root device hints") && none.contains("sda"),
            "{none}"
        );
        for bad in [
            json!({"colour": "red"}),
            json!({"size": "big"}),
            json!("sda"),
        ] {
            assert!(pick(bad.clone()).is_err(), "{bad}");
        }
    }
}
