//! A qcow2 image read as the raw disk it describes (Ironic's `force_raw_images`, without
//! the converted copy): agents are sent the raw bytes, so they need not know qcow2, and
//! the engine never holds a second copy of the image on its disk.
//!
//! The reading is qcow2-core's (read-only; no backing files, no encryption, deflate
//! compressed clusters read). Every read checks it got what the virtual disk holds: a
//! qcow2 whose clusters point past its end (truncated, or hostile) is an error, never
//! silently short.

use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

use bytes::{Bytes, BytesMut};
use deployd_wire::checksum::Hasher;
use qcow2::{Qcow2Error, Qcow2Reader};

/// Bytes read (and sent) at once: a whole number of any cluster size.
pub const CHUNK: usize = 1 << 20;

/// The raw disk a qcow2 image file holds.
pub struct RawView {
    reader: Qcow2Reader,
    size: u64,
}

/// What went wrong opening a qcow2, as an operator can act on it.
fn explain(e: Qcow2Error) -> String {
    match e {
        Qcow2Error::BackingFileNotSupported => "the qcow2 image has a backing file (it is an \
            overlay, not a whole disk): flatten it with `qemu-img convert` first"
            .into(),
        Qcow2Error::EncryptedNotSupported => {
            "the qcow2 image is encrypted, which deployd cannot deploy".into()
        }
        Qcow2Error::UnsupportedIncompatibleFeatures(bits) => format!(
            "the qcow2 image uses features deployd cannot read (incompatible feature bits \
             {bits:#x}: an external data file, extended L2 entries or zstd compression)"
        ),
        Qcow2Error::Io(e) => format!("the qcow2 image is truncated or corrupt: {e}"),
        other => format!("the qcow2 image cannot be read: {other}"),
    }
}

impl RawView {
    pub fn open(path: &Path) -> Result<RawView, String> {
        let reader = Qcow2Reader::open(path).map_err(explain)?;
        let size = reader.virtual_disk_size();
        Ok(RawView { reader, size })
    }

    /// The virtual disk's size: the raw image's length.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Fills `buf` from virtual offset `at`; `buf` must lie within the disk.
    pub fn read_at(&mut self, at: u64, buf: &mut [u8]) -> Result<(), String> {
        self.reader
            .seek(SeekFrom::Start(at))
            .map_err(|e| format!("the qcow2 image is corrupt: {e}"))?;
        let mut filled = 0;
        while filled < buf.len() {
            match self.reader.read(&mut buf[filled..]) {
                Ok(0) => {
                    return Err(format!(
                        "the qcow2 image is truncated: its data for offset {} is missing",
                        at + filled as u64
                    ));
                }
                Ok(n) => filled += n,
                Err(e) => return Err(format!("the qcow2 image is corrupt: {e}")),
            }
        }
        Ok(())
    }

    /// Calls `each` with the bytes of `[start, end)` in turn, [`CHUNK`] at a time.
    pub fn chunks<E: From<String>>(
        &mut self,
        start: u64,
        end: u64,
        mut each: impl FnMut(Bytes) -> Result<(), E>,
    ) -> Result<(), E> {
        let mut at = start;
        while at < end {
            let n = (end - at).min(CHUNK as u64) as usize;
            let mut buf = BytesMut::zeroed(n);
            self.read_at(at, &mut buf)?;
            each(buf.freeze())?;
            at += n as u64;
        }
        Ok(())
    }

    /// The hex digest of the whole raw disk; reading all of it also proves it readable.
    pub fn digest(&mut self, algo: &str) -> Result<String, String> {
        let mut hasher = Hasher::new(algo)?;
        self.chunks(0, self.size, |chunk| {
            hasher.update(&chunk);
            Ok::<_, String>(())
        })?;
        Ok(hasher.hex())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A qcow2 (v3, 64 KiB clusters) of a `clusters`-cluster disk whose cluster `i` holds
    /// `data[i]` (None: unallocated, reads as zeros).
    pub(crate) fn qcow2(data: &[Option<u8>]) -> Vec<u8> {
        const CLUSTER: usize = 1 << 16;
        let size = (data.len() * CLUSTER) as u64;
        // Layout: 0 header, 1 L1, 2 L2, 3.. data clusters.
        let mut img = vec![0u8; 3 * CLUSTER];
        img[0..4].copy_from_slice(b"QFI\xfb");
        img[4..8].copy_from_slice(&3u32.to_be_bytes());
        img[20..24].copy_from_slice(&16u32.to_be_bytes()); // cluster_bits
        img[24..32].copy_from_slice(&size.to_be_bytes());
        img[36..40].copy_from_slice(&1u32.to_be_bytes()); // l1_size
        img[40..48].copy_from_slice(&(CLUSTER as u64).to_be_bytes()); // l1 offset
        img[96..100].copy_from_slice(&4u32.to_be_bytes()); // refcount_order
        img[100..104].copy_from_slice(&104u32.to_be_bytes()); // header_length
        let l2 = (2 * CLUSTER) as u64;
        img[CLUSTER..CLUSTER + 8].copy_from_slice(&(l2 | 1 << 63).to_be_bytes());
        for (i, byte) in data.iter().enumerate() {
            if let Some(b) = byte {
                let at = img.len() as u64;
                img.extend(std::iter::repeat_n(*b, CLUSTER));
                let entry = l2 as usize + i * 8;
                img[entry..entry + 8].copy_from_slice(&(at | 1 << 63).to_be_bytes());
            }
        }
        img
    }

    #[test]
    fn the_raw_disk_of_a_qcow2_is_read_with_its_holes_as_zeros() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("os.qcow2");
        std::fs::write(&path, qcow2(&[Some(7), None, Some(9)])).unwrap();
        let mut view = RawView::open(&path).unwrap();
        assert_eq!(view.size(), 3 << 16);
        let mut raw = Vec::new();
        view.chunks(0, view.size(), |c| {
            raw.extend_from_slice(&c);
            Ok::<_, String>(())
        })
        .unwrap();
        let mut expected = vec![7u8; 1 << 16];
        expected.extend(vec![0u8; 1 << 16]);
        expected.extend(vec![9u8; 1 << 16]);
        assert!(raw == expected);
        let mut part = [0u8; 4];
        view.read_at((2 << 16) - 2, &mut part).unwrap();
        assert_eq!(part, [0, 0, 9, 9]);
    }

    #[test]
    fn a_truncated_qcow2_is_an_error_not_a_short_disk() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cut.qcow2");
        let mut img = qcow2(&[Some(1), Some(2)]);
        img.truncate(img.len() - 1000);
        std::fs::write(&path, &img).unwrap();
        let e = RawView::open(&path).unwrap().digest("sha256").unwrap_err();
        assert!(e.contains("truncated"), "{e}");
        // Cut inside the L1 table: opening fails.
        std::fs::write(&path, &img[..(1 << 16) + 4]).unwrap();
        let e = RawView::open(&path).err().unwrap();
        assert!(e.contains("truncated or corrupt"), "{e}");
    }

    #[test]
    fn backing_files_and_encryption_are_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bad.qcow2");
        let mut img = qcow2(&[Some(1)]);
        img[8..16].copy_from_slice(&512u64.to_be_bytes());
        img[16..20].copy_from_slice(&4u32.to_be_bytes());
        img[512..516].copy_from_slice(b"base");
        std::fs::write(&path, &img).unwrap();
        let e = RawView::open(&path).err().unwrap();
        assert!(e.contains("backing file"), "{e}");
        let mut img = qcow2(&[Some(1)]);
        img[32..36].copy_from_slice(&2u32.to_be_bytes());
        std::fs::write(&path, &img).unwrap();
        assert!(RawView::open(&path).err().unwrap().contains("encrypted"));
    }
}
