//! Which disk the image goes to when the agent is not told (`--disk`): as
//! ironic-python-agent picks it without root device hints, the smallest disk of at least
//! 4 GiB, read from `/sys/block`. Loop, RAM, optical, device-mapper, RAID and zram devices
//! are not disks, and neither is a removable one.

use std::path::{Path, PathBuf};

/// IPA's smallest root disk.
pub const MIN_SIZE: u64 = 4 << 30;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Disk {
    pub name: String,
    pub size: u64,
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
        found.push(Disk {
            name,
            size: sectors * 512,
        });
    }
    found.sort_by(|a, b| (a.size, &a.name).cmp(&(b.size, &b.name)));
    Ok(found)
}

/// The smallest disk of at least [`MIN_SIZE`], as `/dev/<name>`; the error lists the
/// disks seen.
pub fn choose(sys_block: &Path) -> Result<PathBuf, String> {
    let all = disks(sys_block).map_err(|e| format!("reading {}: {e}", sys_block.display()))?;
    match all.iter().find(|d| d.size >= MIN_SIZE) {
        Some(d) => Ok(Path::new("/dev").join(&d.name)),
        None => Err(format!(
            "no disk of at least 4 GiB to deploy to; disks seen: {}",
            match all.is_empty() {
                true => "none".into(),
                false => all
                    .iter()
                    .map(|d| format!("{} ({} bytes)", d.name, d.size))
                    .collect::<Vec<_>>()
                    .join(", "),
            }
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
