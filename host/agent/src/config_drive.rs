//! A deploy's config drive, written as ironic-python-agent writes one: after the image,
//! on a new partition at the end of the disk, so cloud-init finds the `config-2`
//! filesystem at first boot.
//!
//! The drive comes as Ironic sends it (`configdrive` in `standby.prepare_image`): a url
//! to download, or inline; either way base64 of a gzipped ISO image (a url may also
//! serve the image as it is). The partition is added to the image's own table:
//! - GPT (gpt crate): the table's backup moves from the image's end to the disk's, then a
//!   `config-2` partition ends where the usable space does;
//! - MBR (mbrman): a primary entry of type 0x83 in a free slot, at the end of the disk
//!   (and within the 2 TiB an MBR can address).

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;

use base64::Engine;

/// Largest config drive read (Ironic's bound, as base64 text).
const MAX_BYTES: usize = 64 << 20;

/// The partition's size at least: ironic-python-agent's 64 MiB.
const PARTITION: u64 = 64 << 20;

/// Partitions start on MiB boundaries (2048 sectors of 512 bytes).
const ALIGN: u64 = 2048;

const SECTOR: u64 = 512;

/// Where the config drive went.
#[derive(Debug, PartialEq, Eq)]
pub struct Placed {
    /// The partition's number in the table (`/dev/sda<N>`).
    pub number: u32,
    pub start: u64,
    pub bytes: u64,
    pub table: &'static str,
}

/// The ISO image a `configdrive` parameter stands for: downloaded if it is a url, then
/// base64-decoded and gunzipped.
pub async fn fetch(http: &reqwest::Client, given: &str) -> Result<Vec<u8>, String> {
    let is_url = given.starts_with("http://") || given.starts_with("https://");
    let data = if is_url {
        let response = http
            .get(given)
            .send()
            .await
            .and_then(reqwest::Response::error_for_status)
            .map_err(|e| format!("downloading the config drive {given}: {e}"))?;
        let body = response
            .bytes()
            .await
            .map_err(|e| format!("downloading the config drive {given}: {e}"))?;
        body.to_vec()
    } else {
        given.as_bytes().to_vec()
    };
    if data.len() > MAX_BYTES {
        return Err(format!(
            "the config drive is {} bytes, more than {MAX_BYTES}",
            data.len()
        ));
    }
    let compact: Vec<u8> = data
        .iter()
        .copied()
        .filter(|b| !b.is_ascii_whitespace())
        .collect();
    let decoded = match base64::engine::general_purpose::STANDARD.decode(&compact) {
        Ok(bytes) => bytes,
        // A url may serve the image itself, as IPA accepts.
        Err(_) if is_url => data,
        Err(e) => return Err(format!("the config drive is not base64: {e}")),
    };
    if !decoded.starts_with(&[0x1f, 0x8b]) {
        return Ok(decoded);
    }
    let mut iso = Vec::new();
    flate2::read::GzDecoder::new(decoded.as_slice())
        .take(4 * MAX_BYTES as u64)
        .read_to_end(&mut iso)
        .map_err(|e| format!("the config drive does not gunzip: {e}"))?;
    Ok(iso)
}

/// Adds a partition at the end of `disk` for `iso` and writes it there.
pub fn write(disk: &Path, iso: &[u8]) -> Result<Placed, String> {
    let fail = |e: std::io::Error| format!("writing the config drive to {}: {e}", disk.display());
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(disk)
        .map_err(fail)?;
    let size = file.seek(SeekFrom::End(0)).map_err(fail)?;
    let mut head = [0u8; 1024];
    file.seek(SeekFrom::Start(0)).map_err(fail)?;
    file.read_exact(&mut head).map_err(fail)?;
    let bytes = (iso.len() as u64).div_ceil(ALIGN * SECTOR) * ALIGN * SECTOR;
    let bytes = bytes.max(PARTITION);
    let placed = if &head[512..520] == b"EFI PART" {
        drop(file);
        gpt_partition(disk, bytes)?
    } else if head[510..512] == [0x55, 0xaa] {
        mbr_partition(&mut file, size, bytes)?
    } else {
        return Err(
            "the image has no partition table (GPT or MBR) to add the config drive's partition to"
                .into(),
        );
    };
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .open(disk)
        .map_err(fail)?;
    file.seek(SeekFrom::Start(placed.start)).map_err(fail)?;
    file.write_all(iso).map_err(fail)?;
    // Whatever was past the ISO in the partition (an older drive) is zeroed.
    let rest = placed.bytes - iso.len() as u64;
    std::io::copy(&mut std::io::repeat(0).take(rest), &mut file).map_err(fail)?;
    file.sync_all().map_err(fail)?;
    Ok(placed)
}

/// The last `bytes` of the disk's usable space, as a new GPT partition `config-2`.
fn gpt_partition(disk: &Path, bytes: u64) -> Result<Placed, String> {
    let fail = |e: gpt::GptError| format!("the image's GPT: {e}");
    let mut table = gpt::GptConfig::new()
        .writable(true)
        .only_valid_headers(false)
        .logical_block_size(gpt::disk::LogicalBlockSize::Lb512)
        .open(disk)
        .map_err(fail)?;
    // Re-laying the headers out puts the backup at the disk's end (the image's was at
    // the image's), and the usable space grows to the disk's.
    let partitions = table.partitions().clone();
    table.update_partitions(partitions).map_err(fail)?;
    let last_usable = table.header().last_usable;
    let sectors = bytes / SECTOR;
    let room =
        |_| format!("no room for a {bytes} byte config drive on a disk of {last_usable} sectors");
    let first = (last_usable + 1)
        .checked_sub(sectors)
        .ok_or(())
        .map_err(room)?
        / ALIGN
        * ALIGN;
    let used_to = table
        .partitions()
        .values()
        .filter(|p| p.is_used())
        .map(|p| p.last_lba)
        .max()
        .unwrap_or(0);
    if first <= used_to {
        return Err(format!(
            "no room for a config drive: the image's partitions reach sector {used_to} of the disk's {last_usable}"
        ));
    }
    // To the end of the usable space: what aligning its start left is the drive's too.
    let sectors = last_usable + 1 - first;
    let number = table
        .find_next_partition_id()
        .ok_or("the image's GPT has no free partition entry for the config drive")?;
    table
        .add_partition_at(
            "config-2",
            number,
            first,
            sectors,
            gpt::partition_types::LINUX_FS,
            0,
        )
        .map_err(fail)?;
    let file = table.write().map_err(fail)?;
    file.sync_all()
        .map_err(|e| format!("syncing the GPT: {e}"))?;
    Ok(Placed {
        number,
        start: first * SECTOR,
        bytes: sectors * SECTOR,
        table: "gpt",
    })
}

/// The last `bytes` of the disk (below 2 TiB), as a new primary MBR partition.
fn mbr_partition(file: &mut std::fs::File, size: u64, bytes: u64) -> Result<Placed, String> {
    let fail = |e: mbrman::Error| format!("the image's MBR: {e}");
    file.seek(SeekFrom::Start(0))
        .map_err(|e| format!("reading the MBR: {e}"))?;
    let mut header = mbrman::MBRHeader::read_from(file).map_err(fail)?;
    let end = (size / SECTOR).min(u32::MAX as u64);
    let sectors = bytes / SECTOR;
    let first = end.checked_sub(sectors).ok_or_else(|| {
        format!("no room for a {bytes} byte config drive on a disk of {end} sectors")
    })? / ALIGN
        * ALIGN;
    let used_to = header
        .iter()
        .filter(|(_, p)| p.is_used())
        .map(|(_, p)| p.starting_lba as u64 + p.sectors as u64)
        .max()
        .unwrap_or(1);
    if first < used_to {
        return Err(format!(
            "no room for a config drive: the image's partitions reach sector {used_to} of the disk's {end}"
        ));
    }
    let sectors = end - first;
    let free = header
        .iter()
        .find(|(_, p)| p.is_unused())
        .map(|(i, _)| i)
        .ok_or("the image's MBR has four partitions: no slot for the config drive's")?;
    header[free] = mbrman::MBRPartitionEntry {
        boot: mbrman::BOOT_INACTIVE,
        first_chs: mbrman::CHS::empty(),
        sys: 0x83,
        last_chs: mbrman::CHS::empty(),
        starting_lba: first as u32,
        sectors: sectors as u32,
    };
    file.seek(SeekFrom::Start(0))
        .map_err(|e| format!("writing the MBR: {e}"))?;
    header.write_into(file).map_err(fail)?;
    Ok(Placed {
        number: free as u32,
        start: first * SECTOR,
        bytes: sectors * SECTOR,
        table: "mbr",
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    /// A disk of `mib` MiB whose first 8 MiB are an image with a `label` table and one
    /// partition, made by the real parted.
    fn disk(dir: &Path, label: &str, mib: u64) -> std::path::PathBuf {
        let image = dir.join(format!("{label}.img"));
        std::fs::write(&image, vec![0u8; 8 << 20]).unwrap();
        let out = Command::new("parted")
            .arg("-s")
            .arg(&image)
            .args([
                "mklabel", label, "mkpart", "primary", "ext4", "1MiB", "7MiB",
            ])
            .output()
            .expect("parted (Debian's: .ci/run installs it)");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        // The image written to a larger disk, as a deploy leaves it.
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(&image)
            .unwrap();
        f.set_len(mib << 20).unwrap();
        image
    }

    fn parted_print(disk: &Path) -> String {
        let out = Command::new("parted")
            .args(["-s", "-m"])
            .arg(disk)
            .args(["unit", "B", "print"])
            .output()
            .unwrap();
        let complaints = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && complaints.trim().is_empty(),
            "{complaints}"
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    #[test]
    fn the_drive_goes_to_a_new_partition_at_the_end_of_gpt_and_mbr_disks() {
        let dir = tempfile::tempdir().unwrap();
        let iso = vec![0x42u8; 100 << 10];
        for label in ["gpt", "msdos"] {
            let path = disk(dir.path(), label, 200);
            let placed = write(&path, &iso).unwrap();
            assert_eq!(placed.number, 2, "{label}");
            assert!(placed.bytes >= PARTITION && placed.start.is_multiple_of(1 << 20));
            let end = placed.start + placed.bytes;
            assert!(
                end <= 200 << 20 && end > (200 << 20) - (64 << 10),
                "{label}: {placed:?}"
            );
            let table = parted_print(&path);
            let line = table
                .lines()
                .find(|l| l.starts_with("2:"))
                .unwrap_or_else(|| panic!("{label}: no partition 2 in {table}"));
            assert!(line.starts_with(&format!("2:{}B:", placed.start)), "{line}");
            let written = std::fs::read(&path).unwrap();
            let at = placed.start as usize;
            assert!(written[at..at + iso.len()] == iso[..]);
            // parted had nothing to complain of: the GPT's backup is at the disk's end.
        }
    }

    #[test]
    fn a_disk_without_a_table_or_room_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let bare = dir.path().join("bare");
        std::fs::write(&bare, vec![0u8; 4 << 20]).unwrap();
        let e = write(&bare, b"iso").unwrap_err();
        assert!(e.contains("no partition table"), "{e}");
        // An image as large as the disk: its partition leaves no room.
        let full = disk(dir.path(), "msdos", 8);
        let e = write(&full, b"iso").unwrap_err();
        assert!(e.contains("no room"), "{e}");
    }
}
