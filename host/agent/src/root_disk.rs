//! Which disk the image goes to when the agent is not told (`--disk`), as
//! ironic-python-agent picks it: the disk that matches every one of the node's root
//! device hints (`properties.root_device`, given at lookup), or without hints the
//! smallest disk of at least 4 GiB, read from `/sys/block`. Loop, RAM, optical,
//! device-mapper, RAID and zram devices are not disks, and neither is a removable one.
//!
//! Hints, as Ironic's: `name` (`/dev/sda` or `sda`), `size` in GiB (a number, or an
//! operator and a number: `>= 100`, `<= 10`, `== 8`, `!= 8`, `> 1`, `< 2`), `model`,
//! `vendor`, `serial`, `wwn` (compared without case or surrounding blanks) and
//! `rotational` (a boolean). The smallest of the matching disks wins.

use std::path::{Path, PathBuf};

use serde_json::Value;

/// IPA's smallest root disk.
pub const MIN_SIZE: u64 = 4 << 30;

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Disk {
    pub name: String,
    pub size: u64,
    pub model: String,
    pub vendor: String,
    pub serial: String,
    pub wwn: String,
    pub rotational: bool,
}

/// The block devices under `sys_block` (normally `/sys/block`) that are disks.
pub fn disks(sys_block: &Path) -> std::io::Result<Vec<Disk>> {
    let read = |dir: &Path, file: &str| std::fs::read_to_string(dir.join(file)).unwrap_or_default();
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
        found.push(Disk {
            size: sectors * 512,
            model: first(&["device/model"]),
            vendor: first(&["device/vendor"]),
            serial: first(&["serial", "device/serial"]),
            wwn: first(&["wwid", "device/wwid"]),
            rotational: read(&dir, "queue/rotational").trim() == "1",
            name,
        });
    }
    found.sort_by(|a, b| (a.size, &a.name).cmp(&(b.size, &b.name)));
    Ok(found)
}

/// The smallest disk of at least [`MIN_SIZE`], as `/dev/<name>`; the error lists the
/// disks seen.
pub fn choose(sys_block: &Path) -> Result<PathBuf, String> {
    choose_with(sys_block, None)
}

/// The smallest disk that matches `hints` (the node's `properties.root_device`), or
/// without hints the smallest of at least [`MIN_SIZE`].
pub fn choose_with(sys_block: &Path, hints: Option<&Value>) -> Result<PathBuf, String> {
    let all = disks(sys_block).map_err(|e| format!("reading {}: {e}", sys_block.display()))?;
    let hints = match hints {
        None | Some(Value::Null) => None,
        Some(Value::Object(h)) if h.is_empty() => None,
        Some(Value::Object(h)) => Some(h),
        Some(other) => return Err(format!("root_device hints must be an object, not {other}")),
    };
    let found = match hints {
        Some(hints) => {
            let mut found = None;
            for disk in &all {
                if matches(disk, hints)? {
                    found = Some(disk);
                    break;
                }
            }
            found
        }
        None => all.iter().find(|d| d.size >= MIN_SIZE),
    };
    let seen = || match all.is_empty() {
        true => "none".into(),
        false => all
            .iter()
            .map(|d| format!("{} ({} bytes)", d.name, d.size))
            .collect::<Vec<_>>()
            .join(", "),
    };
    match (found, hints) {
        (Some(d), _) => Ok(Path::new("/dev").join(&d.name)),
        (None, Some(h)) => Err(format!(
            "no disk matches the root device hints {}; disks seen: {}",
            Value::Object(h.clone()),
            seen()
        )),
        (None, None) => Err(format!(
            "no disk of at least 4 GiB to deploy to; disks seen: {}",
            seen()
        )),
    }
}

/// Whether `disk` meets every hint; an unknown hint or a malformed value is an error.
fn matches(disk: &Disk, hints: &serde_json::Map<String, Value>) -> Result<bool, String> {
    let text = |v: &Value| match v {
        Value::String(s) => Ok(s.trim().to_lowercase()),
        Value::Number(n) => Ok(n.to_string()),
        other => Err(format!("a root device hint must be a string, not {other}")),
    };
    for (key, want) in hints {
        let ok = match key.as_str() {
            "name" => {
                let want = text(want)?;
                want.trim_start_matches("/dev/") == disk.name.to_lowercase()
            }
            "size" => size_matches(disk.size >> 30, want)?,
            "model" => text(want)? == disk.model.to_lowercase(),
            "vendor" => text(want)? == disk.vendor.to_lowercase(),
            "serial" => text(want)? == disk.serial.to_lowercase(),
            "wwn" => text(want)? == disk.wwn.to_lowercase(),
            "rotational" => match want {
                Value::Bool(b) => *b == disk.rotational,
                Value::String(s) => match s.trim().to_lowercase().as_str() {
                    "true" | "1" | "yes" => disk.rotational,
                    "false" | "0" | "no" => !disk.rotational,
                    _ => return Err(format!("rotational hint {s:?} is not a boolean")),
                },
                other => return Err(format!("rotational hint {other} is not a boolean")),
            },
            other => return Err(format!("unsupported root device hint {other:?}")),
        };
        if !ok {
            return Ok(false);
        }
    }
    Ok(true)
}

/// A size hint in GiB: `8`, `"8"`, or an operator and a number (`">= 100"`).
fn size_matches(gib: u64, want: &Value) -> Result<bool, String> {
    let expr = match want {
        Value::Number(n) => n.to_string(),
        Value::String(s) => s.trim().to_owned(),
        other => return Err(format!("size hint {other} is not a number of GiB")),
    };
    let (op, number) = ["<=", ">=", "==", "!=", "<", ">"]
        .iter()
        .find_map(|op| expr.strip_prefix(op).map(|rest| (*op, rest.trim())))
        .unwrap_or(("==", expr.as_str()));
    let n: u64 = number
        .parse()
        .map_err(|_| format!("size hint {expr:?} is not a number of GiB"))?;
    Ok(match op {
        "<=" => gib <= n,
        ">=" => gib >= n,
        "!=" => gib != n,
        "<" => gib < n,
        ">" => gib > n,
        _ => gib == n,
    })
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
