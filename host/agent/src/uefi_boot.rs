//! A UEFI boot entry for the image just written, where its loader needs one (as
//! ironic-python-agent's `manage_uefi` does with efibootmgr): an image whose EFI system
//! partition has its loader only under a distribution's folder (`\EFI\debian\shimx64.efi`)
//! and not at the removable-media path (`\EFI\BOOT\BOOTX64.EFI`) boots only through a
//! `Boot####` variable naming it. The agent writes that variable and puts it first in
//! `BootOrder`, through efivarfs, with no efibootmgr in the ramdisk.
//!
//! Only where the ramdisk's init says where efivarfs is mounted (`--efivars`): an agent
//! run as a process on a host must never touch the host's firmware variables.

use std::path::{Path, PathBuf};

/// UEFI's global variable GUID, which `Boot####` and `BootOrder` live under.
const GLOBAL: &str = "8be4df61-93ca-11d2-aa0d-00e098032b8c";
/// `NON_VOLATILE | BOOTSERVICE_ACCESS | RUNTIME_ACCESS`.
const ATTRIBUTES: u32 = 0x7;
/// The GPT type of an EFI system partition.
const ESP: uuid::Uuid = uuid::uuid!("c12a7328-f81f-11d2-ba4b-00a0c93ec93b");
/// The description of the entries the agent writes (one is reused, not added to).
pub const DESCRIPTION: &str = "deployd image";

#[derive(Debug, thiserror::Error)]
pub enum BootEntryError {
    #[error("reading the image's partition table: {0}")]
    Table(String),
    #[error("reading the EFI system partition: {0}")]
    Esp(String),
    #[error("writing the firmware variable {0}: {1}")]
    Variable(String, std::io::Error),
}

/// Where the image's loader is.
#[derive(Debug, PartialEq, Eq)]
pub struct Loader {
    /// The partition's number in the table (1-based), first block, blocks, unique GUID.
    pub partition: u32,
    pub start: u64,
    pub blocks: u64,
    pub guid: uuid::Uuid,
    /// `\EFI\<folder>\<file>`.
    pub path: String,
}

/// The loader a boot entry must name on `disk`, if its EFI system partition has one only
/// under a distribution folder; `None` where it has the removable-media loader (the
/// firmware finds that itself), or no ESP at all (a BIOS image).
pub fn loader_needing_entry(disk: &Path) -> Result<Option<Loader>, BootEntryError> {
    let table = gpt::GptConfig::new()
        .writable(false)
        .open(disk)
        .map_err(|e| BootEntryError::Table(e.to_string()));
    let Ok(table) = table else {
        return Ok(None); // no GPT: an MBR image boots as it did
    };
    let block = u64::from(*table.logical_block_size());
    let Some((&number, part)) = table
        .partitions()
        .iter()
        .find(|(_, p)| p.part_type_guid.guid == ESP)
    else {
        return Ok(None);
    };
    let esp = Esp::open(disk, part.first_lba * block, (part.last_lba + 1) * block)?;
    if esp.has_file("EFI/BOOT/BOOTX64.EFI")? {
        return Ok(None);
    }
    let Some(path) = esp.distribution_loader()? else {
        return Ok(None);
    };
    Ok(Some(Loader {
        partition: number,
        start: part.first_lba,
        blocks: part.last_lba + 1 - part.first_lba,
        guid: part.part_guid,
        path,
    }))
}

/// The FAT filesystem of an EFI system partition, read in place.
struct Esp(fatfs::FileSystem<fscommon::StreamSlice<std::fs::File>>);

impl Esp {
    fn open(disk: &Path, start: u64, end: u64) -> Result<Esp, BootEntryError> {
        let fail = |e: std::io::Error| BootEntryError::Esp(e.to_string());
        let file = std::fs::File::open(disk).map_err(fail)?;
        let slice = fscommon::StreamSlice::new(file, start, end).map_err(fail)?;
        fatfs::FileSystem::new(slice, fatfs::FsOptions::new())
            .map(Esp)
            .map_err(fail)
    }

    fn has_file(&self, path: &str) -> Result<bool, BootEntryError> {
        Ok(self.0.root_dir().open_file(path).is_ok())
    }

    /// `\EFI\<folder>\<loader>`: shim where there is one (it starts the folder's GRUB,
    /// under Secure Boot too), else GRUB, else the folder's one `.efi`.
    fn distribution_loader(&self) -> Result<Option<String>, BootEntryError> {
        let fail = |e: std::io::Error| BootEntryError::Esp(e.to_string());
        let Ok(efi) = self.0.root_dir().open_dir("EFI") else {
            return Ok(None);
        };
        let mut found: Vec<(u8, String)> = Vec::new();
        for folder in efi.iter() {
            let folder = folder.map_err(fail)?;
            let name = folder.file_name();
            if !folder.is_dir() || name == "." || name == ".." || name.eq_ignore_ascii_case("BOOT")
            {
                continue;
            }
            for file in folder.to_dir().iter() {
                let file = file.map_err(fail)?;
                let file_name = file.file_name();
                let lower = file_name.to_ascii_lowercase();
                let rank = match lower.as_str() {
                    "shimx64.efi" => 0,
                    "grubx64.efi" => 1,
                    other if other.ends_with(".efi") => 2,
                    _ => continue,
                };
                found.push((rank, format!("\\EFI\\{name}\\{file_name}")));
            }
        }
        found.sort();
        Ok(found.into_iter().next().map(|(_, path)| path))
    }
}

/// The device path of the loader: the disk's own path where sysfs tells it (a PCI
/// device such as virtio-blk, so firmware that orders its boot options by device, as
/// OVMF under QEMU's `bootindex`, files the entry with the disk), then the partition
/// (UEFI's `HD()` node) and the file; without the disk's path, the short form from the
/// partition on, which firmware expands by searching its disks.
pub fn device_path(loader: &Loader, pci: &[(u8, u8)], root: Option<u32>) -> Vec<u8> {
    let mut path = Vec::new();
    let mut node = |kind: u8, subtype: u8, data: &[u8]| {
        path.extend([kind, subtype]);
        path.extend(((data.len() + 4) as u16).to_le_bytes());
        path.extend(data);
    };
    if let Some(uid) = root {
        // ACPI PciRoot: _HID PNP0A03 (EISA-compressed), _UID.
        let mut data = 0x0a03_41d0u32.to_le_bytes().to_vec();
        data.extend(uid.to_le_bytes());
        node(0x02, 0x01, &data);
        for &(device, function) in pci {
            node(0x01, 0x01, &[function, device]);
        }
    }
    let mut hd = loader.partition.to_le_bytes().to_vec();
    hd.extend(loader.start.to_le_bytes());
    hd.extend(loader.blocks.to_le_bytes());
    hd.extend(loader.guid.to_bytes_le());
    hd.extend([0x02, 0x02]); // a GPT, a GUID signature
    node(0x04, 0x01, &hd);
    node(0x04, 0x04, &ucs2(&loader.path));
    node(0x7f, 0xff, &[]);
    path
}

/// UTF-16LE with its terminating zero, as UEFI writes text.
fn ucs2(text: &str) -> Vec<u8> {
    text.encode_utf16()
        .chain([0])
        .flat_map(u16::to_le_bytes)
        .collect()
}

/// `EFI_LOAD_OPTION`: active, the description, the device path.
pub fn load_option(description: &str, device_path: &[u8]) -> Vec<u8> {
    let mut option = 1u32.to_le_bytes().to_vec();
    option.extend((device_path.len() as u16).to_le_bytes());
    option.extend(ucs2(description));
    option.extend(device_path);
    option
}

/// The disk's PCI path from sysfs (`/sys/block/<name>` → `…/pci0000:00/0000:00:04.0/…`):
/// the root bus's number and each bridge's and the device's (device, function).
pub fn pci_path(disk: &Path) -> Option<(u32, Vec<(u8, u8)>)> {
    let name = std::fs::canonicalize(disk).ok()?;
    let block = Path::new("/sys/block").join(name.file_name()?);
    let real = std::fs::canonicalize(block).ok()?;
    let mut parts = real.iter().map(|p| p.to_string_lossy().into_owned());
    let root = parts.find_map(|p| {
        p.strip_prefix("pci")
            .and_then(|bus| u32::from_str_radix(bus.split(':').nth(1)?, 16).ok())
    })?;
    let devices: Vec<(u8, u8)> = parts
        .map_while(|p| {
            let (_, slot) = p.rsplit_once(':')?;
            let (device, function) = slot.split_once('.')?;
            Some((
                u8::from_str_radix(device, 16).ok()?,
                u8::from_str_radix(function, 16).ok()?,
            ))
        })
        .collect();
    (!devices.is_empty()).then_some((root, devices))
}

/// The firmware's variables, as efivarfs shows them.
pub struct Variables {
    pub dir: PathBuf,
}

impl Variables {
    fn file(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{name}-{GLOBAL}"))
    }

    /// A variable's data (without efivarfs's leading attributes).
    fn read(&self, name: &str) -> Option<Vec<u8>> {
        let bytes = std::fs::read(self.file(name)).ok()?;
        Some(bytes.get(4..)?.to_vec())
    }

    fn write(&self, name: &str, data: &[u8]) -> Result<(), BootEntryError> {
        let mut bytes = ATTRIBUTES.to_le_bytes().to_vec();
        bytes.extend(data);
        // efivarfs takes a variable in one write.
        std::fs::write(self.file(name), &bytes)
            .map_err(|e| BootEntryError::Variable(name.to_owned(), e))
    }

    /// The number of the entry the agent wrote before (its description), else the
    /// lowest one free.
    fn entry_number(&self) -> u16 {
        let mut taken = std::collections::BTreeSet::new();
        let suffix = format!("-{GLOBAL}");
        for entry in std::fs::read_dir(&self.dir).into_iter().flatten().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(hex) = name
                .strip_suffix(&suffix)
                .and_then(|n| n.strip_prefix("Boot"))
                .filter(|h| h.len() == 4)
            else {
                continue;
            };
            let Ok(number) = u16::from_str_radix(hex, 16) else {
                continue;
            };
            if self
                .read(&format!("Boot{hex}"))
                .as_deref()
                .and_then(description)
                == Some(DESCRIPTION.into())
            {
                return number;
            }
            taken.insert(number);
        }
        (0..=u16::MAX).find(|n| !taken.contains(n)).unwrap_or(0)
    }

    /// Writes the entry for `loader` and puts it first in `BootOrder`; its name.
    pub fn add_first(&self, device_path: &[u8]) -> Result<String, BootEntryError> {
        let number = self.entry_number();
        let name = format!("Boot{number:04X}");
        self.write(&name, &load_option(DESCRIPTION, device_path))?;
        let mut order = vec![number];
        if let Some(old) = self.read("BootOrder") {
            order.extend(
                old.chunks_exact(2)
                    .map(|c| u16::from_le_bytes([c[0], c[1]]))
                    .filter(|&n| n != number),
            );
        }
        let bytes: Vec<u8> = order.iter().flat_map(|n| n.to_le_bytes()).collect();
        self.write("BootOrder", &bytes)?;
        Ok(name)
    }
}

/// A load option's description.
fn description(option: &[u8]) -> Option<String> {
    let text: Vec<u16> = option
        .get(6..)?
        .chunks_exact(2)
        .map(|c| u16::from_le_bytes([c[0], c[1]]))
        .take_while(|&c| c != 0)
        .collect();
    String::from_utf16(&text).ok()
}

/// After the image is on `disk`: its boot entry, where its loader needs one and the
/// machine boots UEFI (`efivars` is where efivarfs is). What was done, for the log.
pub fn after_write(disk: &Path, efivars: &Path) -> Result<Option<String>, BootEntryError> {
    let Some(loader) = loader_needing_entry(disk)? else {
        return Ok(None);
    };
    let (root, pci) = match pci_path(disk) {
        Some((root, pci)) => (Some(root), pci),
        None => (None, Vec::new()),
    };
    let path = device_path(&loader, &pci, root);
    let variables = Variables {
        dir: efivars.to_owned(),
    };
    let name = variables.add_first(&path)?;
    Ok(Some(format!("{name} \"{DESCRIPTION}\" → {}", loader.path)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    fn run(command: &mut Command) {
        let out = command.output().unwrap();
        assert!(out.status.success(), "{command:?}: {out:?}");
    }

    /// A 40 MiB GPT disk whose EFI system partition holds `files` (empty files).
    fn disk(dir: &Path, files: &[&str]) -> PathBuf {
        let disk = dir.join("disk.img");
        std::fs::File::create(&disk)
            .unwrap()
            .set_len(40 << 20)
            .unwrap();
        run(Command::new("parted").arg("-s").arg(&disk).args([
            "mklabel", "gpt", "mkpart", "ESP", "fat32", "1MiB", "39MiB", "set", "1", "esp", "on",
        ]));
        run(Command::new("mkfs.vfat")
            .args(["--mbr=n", "--offset", "2048"])
            .arg(&disk)
            .arg((38 * 1024).to_string()));
        let fs = format!("{}@@1M", disk.display());
        let empty = dir.join("empty");
        std::fs::write(&empty, b"").unwrap();
        for file in files {
            let mut folder = String::from("::");
            for part in file.split('/').take(file.split('/').count() - 1) {
                folder = format!("{folder}/{part}");
                let _ = Command::new("mmd").args(["-i", &fs, &folder]).output();
            }
            run(Command::new("mcopy")
                .args(["-i", &fs])
                .arg(&empty)
                .arg(format!("::/{file}")));
        }
        disk
    }

    #[test]
    fn only_a_loader_outside_the_removable_path_needs_an_entry() {
        let dir = tempfile::tempdir().unwrap();
        let distro = disk(
            dir.path(),
            &["EFI/debian/grubx64.efi", "EFI/debian/shimx64.efi"],
        );
        let loader = loader_needing_entry(&distro).unwrap().expect("a loader");
        assert_eq!(loader.path, "\\EFI\\debian\\shimx64.efi", "shim first");
        assert_eq!((loader.partition, loader.start), (1, 2048));
        assert_eq!(loader.blocks, 38 * 2048);
        let both = disk(
            dir.path(),
            &["EFI/BOOT/BOOTX64.EFI", "EFI/debian/grubx64.efi"],
        );
        assert_eq!(loader_needing_entry(&both).unwrap(), None);
        let plain = dir.path().join("plain.img");
        std::fs::write(&plain, vec![0u8; 1 << 20]).unwrap();
        assert_eq!(loader_needing_entry(&plain).unwrap(), None, "no GPT");
    }

    #[test]
    fn the_entry_is_written_once_and_first_in_the_boot_order() {
        let dir = tempfile::tempdir().unwrap();
        let vars = Variables {
            dir: dir.path().to_owned(),
        };
        vars.write("Boot0000", &load_option("UEFI Shell", &[0x7f, 0xff, 4, 0]))
            .unwrap();
        vars.write("BootOrder", &[0, 0]).unwrap();
        let loader = Loader {
            partition: 1,
            start: 2048,
            blocks: 4096,
            guid: uuid::Uuid::nil(),
            path: "\\EFI\\x\\y.efi".into(),
        };
        let path = device_path(&loader, &[(4, 0)], Some(0));
        // PciRoot (12 bytes), Pci (6), HD (42), the file (4 + 2 per character and the
        // zero), the end (4).
        assert_eq!(path.len(), 12 + 6 + 42 + 4 + 2 * 13 + 4);
        assert_eq!(&path[12..18], &[1, 1, 6, 0, 0, 4]);
        assert_eq!(&path[path.len() - 4..], &[0x7f, 0xff, 4, 0]);
        assert_eq!(vars.add_first(&path).unwrap(), "Boot0001");
        let order = std::fs::read(vars.file("BootOrder")).unwrap();
        assert_eq!(
            order,
            [7, 0, 0, 0, 1, 0, 0, 0],
            "attributes, then 0001, 0000"
        );
        // A second deploy reuses its entry.
        assert_eq!(vars.add_first(&path).unwrap(), "Boot0001");
        let order = std::fs::read(vars.file("BootOrder")).unwrap();
        assert_eq!(order, [7, 0, 0, 0, 1, 0, 0, 0]);
        assert_eq!(
            description(&vars.read("Boot0001").unwrap()).unwrap(),
            DESCRIPTION
        );
        let short = device_path(&loader, &[], None);
        assert_eq!(
            &short[..2],
            &[4, 1],
            "the short form starts at the partition"
        );
    }
}
