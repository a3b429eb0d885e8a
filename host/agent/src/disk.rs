//! Streams an image from a url onto the target disk (a file or a block device), hashing it
//! on the way, never holding more than a few buffers in memory. An optional throttle slows
//! the write (for demos and tests of long deploys).
//!
//! The network runs on the async side; a thread of the disk's own hashes and writes, in
//! 4 MiB blocks handed over a channel of two. Downloading overlaps hashing and writing,
//! and a write is one system call per block rather than one blocking-pool hop per network
//! chunk (which cost a fifth of the throughput).
//!
//! Zeros are not written: a run of all-zero 64 KiB pieces (the holes of a sparse image,
//! the empty clusters of a qcow2) is punched out of the file or zeroed by the device
//! itself (`fallocate(PUNCH_HOLE)`, a discard or write-zeroes on a block device), which
//! reads back as zeros like a write would but costs no bandwidth. A target that cannot
//! do it gets the zeros written.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::BytesMut;
use futures_util::{Stream, StreamExt};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use deployd_wire::checksum::Hasher;

/// Bytes handed to the disk thread at once.
const BLOCK: usize = 4 << 20;

/// The piece tested for zeros: a qcow2's default cluster, and a multiple of any
/// device's logical block.
const PIECE: usize = 64 << 10;

/// What a finished write did.
#[derive(Debug, PartialEq, Eq)]
pub struct Written {
    /// The hex digest of every byte of the image, zeros included.
    pub digest: String,
    /// Bytes written to the disk.
    pub written: u64,
    /// Bytes of zeros punched (or zeroed by the device) instead of written.
    pub zeroed: u64,
}

/// Writes blocks at their offsets, zero pieces punched where the target allows.
struct Placer {
    file: std::fs::File,
    at: u64,
    written: u64,
    zeroed: u64,
    /// Cleared when the target refused a punch: write the zeros from then on.
    punch: bool,
}

impl Placer {
    fn place(&mut self, block: &[u8]) -> std::io::Result<()> {
        // Runs of pieces that are all zeros, or all not.
        let mut run: Option<(usize, bool)> = None;
        for (i, piece) in block.chunks(PIECE).enumerate() {
            let zero = is_zero(piece);
            match run {
                Some((_, z)) if z == zero => {}
                Some((start, z)) => {
                    self.put(&block[start..i * PIECE], z)?;
                    run = Some((i * PIECE, zero));
                }
                None => run = Some((0, zero)),
            }
        }
        match run {
            Some((start, zero)) => self.put(&block[start..], zero),
            None => Ok(()),
        }
    }

    fn put(&mut self, bytes: &[u8], zero: bool) -> std::io::Result<()> {
        if !(zero && self.punch && self.zero_out(bytes.len())) {
            use std::os::unix::fs::FileExt;
            self.file.write_all_at(bytes, self.at)?;
            self.written += bytes.len() as u64;
        }
        self.at += bytes.len() as u64;
        Ok(())
    }

    /// Zeroes `len` bytes at the current offset without writing them; whether it could.
    fn zero_out(&mut self, len: usize) -> bool {
        use rustix::fs::{FallocateFlags, fallocate};
        // A block device takes a punch at a multiple of its logical block only (at most
        // 4 KiB): whole blocks and pieces keep `at` a multiple of the piece.
        debug_assert_eq!(
            self.at % PIECE as u64,
            0,
            "an unaligned punch at {}",
            self.at
        );
        let flags = FallocateFlags::PUNCH_HOLE | FallocateFlags::KEEP_SIZE;
        match fallocate(&self.file, flags, self.at, len as u64) {
            Ok(()) => {
                self.zeroed += len as u64;
                true
            }
            Err(e) => {
                tracing::info!("{e} punching zeros: writing them instead");
                self.punch = false;
                false
            }
        }
    }
}

fn is_zero(bytes: &[u8]) -> bool {
    // OR-folded 64 bytes at a time: the compiler vectorises it; no branch per byte.
    let mut lines = bytes.chunks_exact(64);
    lines.all(|l| l.iter().fold(0u8, |a, &b| a | b) == 0)
        && lines.remainder().iter().all(|&b| b == 0)
}

/// An image being written to a disk from offset 0: the running hash, the bytes written
/// (shared, for heartbeats), the throttle, and the thread that writes. Chunks may come
/// from several downloads in turn (a resumed one continues where the last stopped).
pub struct DiskWriter {
    path: PathBuf,
    written: Arc<AtomicU64>,
    offset: u64,
    throttle: Option<u64>,
    started: Instant,
    pending: BytesMut,
    blocks: Option<mpsc::Sender<BytesMut>>,
    thread: JoinHandle<Result<(Hasher, Placer), String>>,
    /// Told when the first bytes are taken (see [`DiskWriter::announcing`]).
    began: Option<Arc<tokio::sync::Notify>>,
}

impl DiskWriter {
    pub async fn open(
        disk: &Path,
        algo: &str,
        written: &Arc<AtomicU64>,
        throttle: Option<u64>,
    ) -> Result<DiskWriter, String> {
        let mut hasher = Hasher::new(algo)?;
        let path = disk.to_path_buf();
        let file = {
            let path = path.clone();
            tokio::task::spawn_blocking(move || {
                std::fs::OpenOptions::new()
                    .write(true)
                    .create(true)
                    .truncate(false)
                    .open(&path)
            })
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| format!("cannot open the disk {}: {e}", disk.display()))?
        };
        let (blocks, mut receive) = mpsc::channel::<BytesMut>(2);
        let shown = path.display().to_string();
        let thread = tokio::task::spawn_blocking(move || {
            let mut placer = Placer {
                file,
                at: 0,
                written: 0,
                zeroed: 0,
                punch: true,
            };
            while let Some(block) = receive.blocking_recv() {
                hasher.update(&block);
                placer
                    .place(&block)
                    .map_err(|e| format!("writing to {shown}: {e}"))?;
            }
            // A file shorter than the image (its last bytes were zeros, punched past its
            // end) is lengthened to the image; a device has the size it has.
            let meta = placer
                .file
                .metadata()
                .map_err(|e| format!("{shown}: {e}"))?;
            if meta.is_file() && meta.len() < placer.at {
                placer
                    .file
                    .set_len(placer.at)
                    .map_err(|e| format!("sizing {shown}: {e}"))?;
            }
            placer
                .file
                .sync_all()
                .map_err(|e| format!("syncing {shown}: {e}"))?;
            Ok((hasher, placer))
        });
        written.store(0, Ordering::SeqCst);
        Ok(DiskWriter {
            path,
            written: written.clone(),
            offset: 0,
            throttle: throttle.filter(|&r| r > 0),
            started: Instant::now(),
            pending: BytesMut::with_capacity(BLOCK),
            blocks: Some(blocks),
            thread,
            began: None,
        })
    }

    /// Tells `began` when the first bytes are taken: the agent heartbeats then, so the
    /// engine's history says when the transfer started, not a heartbeat interval later.
    pub fn announcing(mut self, began: Arc<tokio::sync::Notify>) -> DiskWriter {
        self.began = Some(began);
        self
    }

    /// Bytes taken so far: where a resumed download starts.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    pub async fn write(&mut self, chunk: &[u8]) -> Result<(), String> {
        let first = self.offset == 0 && !chunk.is_empty();
        self.pending.extend_from_slice(chunk);
        // Whole blocks only, the rest kept for the next: every block but the last then
        // starts at a multiple of BLOCK, so every punch is aligned to the device's
        // logical block (a block device refuses an unaligned one; it used to be handed
        // over whole, with the chunk that crossed the boundary, and later punches failed).
        while self.pending.len() >= BLOCK {
            let block = self.pending.split_to(BLOCK);
            self.send(block).await?;
        }
        self.offset += chunk.len() as u64;
        self.written.store(self.offset, Ordering::Relaxed);
        // Told once the count shows the bytes: a heartbeat it wakes that read the count
        // before (it was told as the first chunk came, and the count still said 0) did
        // not see the transfer start, and the history dated it at the next heartbeat.
        if first && let Some(began) = &self.began {
            began.notify_one();
        }
        if let Some(rate) = self.throttle {
            let due = self.started + Duration::from_secs_f64(self.offset as f64 / rate as f64);
            tokio::time::sleep_until(due).await;
        }
        Ok(())
    }

    /// Hands what is pending to the disk thread (the image's last, partial block).
    async fn hand_over(&mut self) -> Result<(), String> {
        let block = std::mem::replace(&mut self.pending, BytesMut::with_capacity(BLOCK));
        self.send(block).await
    }

    async fn send(&mut self, block: BytesMut) -> Result<(), String> {
        let sent = match &self.blocks {
            Some(blocks) => blocks.send(block).await.is_ok(),
            None => false,
        };
        if sent {
            return Ok(());
        }
        // The thread stopped: its error says why.
        self.blocks = None;
        match (&mut self.thread).await {
            Ok(Err(e)) => Err(e),
            _ => Err(format!("the writer of {} stopped", self.path.display())),
        }
    }

    /// Writes every chunk of `body`.
    pub async fn write_all<E: std::fmt::Display>(
        &mut self,
        mut body: impl Stream<Item = Result<bytes::Bytes, E>> + Unpin,
    ) -> Result<(), String> {
        while let Some(chunk) = body.next().await {
            let chunk = chunk.map_err(|e| format!("reading the image: {e}"))?;
            self.write(&chunk).await?;
        }
        Ok(())
    }

    /// Writes what is left, syncs the device; says what was written and the digest.
    pub async fn finish(mut self) -> Result<Written, String> {
        if !self.pending.is_empty() {
            self.hand_over().await?;
        }
        self.blocks = None;
        match (&mut self.thread).await {
            Ok(Ok((hasher, placer))) => Ok(Written {
                digest: hasher.hex(),
                written: placer.written,
                zeroed: placer.zeroed,
            }),
            Ok(Err(e)) => Err(e),
            Err(e) => Err(format!("the writer of {} failed: {e}", self.path.display())),
        }
    }
}

/// The checksum an `image_info` asks for: `os_hash_algo`/`os_hash_value`, or a sha256 or
/// sha512 `checksum` (told apart by length, as IPA does).
pub fn expected_hash(info: &serde_json::Value) -> Result<(String, String), String> {
    let field = |k: &str| {
        info.get(k)
            .and_then(|v| v.as_str())
            .filter(|s| !s.is_empty())
    };
    match (
        field("os_hash_algo"),
        field("os_hash_value"),
        field("checksum"),
    ) {
        (Some(a), Some(v), _) => Ok((a.to_owned(), v.to_ascii_lowercase())),
        (_, _, Some(sum)) if sum.len() == 64 => Ok(("sha256".into(), sum.to_ascii_lowercase())),
        (_, _, Some(sum)) if sum.len() == 128 => Ok(("sha512".into(), sum.to_ascii_lowercase())),
        _ => Err(
            "image_info needs os_hash_algo and os_hash_value, or a sha256/sha512 checksum".into(),
        ),
    }
}

/// How much of each end of the disk [`erase_metadata`] zeroes: partition tables (MBR,
/// GPT and its backup) and filesystem signatures live there.
pub const METADATA_BYTES: u64 = 1 << 20;

/// Zeroes the first and last MiB of the disk, as IPA's `erase_devices_metadata` wipes
/// partition tables and signatures; returns the bytes zeroed.
pub fn erase_metadata(disk: &Path) -> Result<u64, String> {
    zero(disk, |size| {
        let head = size.min(METADATA_BYTES);
        let tail_start = size.saturating_sub(METADATA_BYTES).max(head);
        vec![(0, head), (tail_start, size - tail_start)]
    })
}

/// Zeroes the whole disk (`erase_devices` with `full: true`); returns the bytes zeroed.
pub fn erase_all(disk: &Path) -> Result<u64, String> {
    zero(disk, |size| vec![(0, size)])
}

/// Zeroes the `(start, length)` ranges `ranges(size)` picks, a MiB at a time, then syncs.
fn zero(disk: &Path, ranges: impl FnOnce(u64) -> Vec<(u64, u64)>) -> Result<u64, String> {
    use std::io::{Seek, SeekFrom, Write};
    let fail = |e: std::io::Error| format!("erasing {}: {e}", disk.display());
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .open(disk)
        .map_err(fail)?;
    let size = file.seek(SeekFrom::End(0)).map_err(fail)?;
    let zeros = vec![0u8; 1 << 20];
    let mut total = 0;
    for (start, length) in ranges(size) {
        file.seek(SeekFrom::Start(start)).map_err(fail)?;
        let mut left = length;
        while left > 0 {
            let n = left.min(zeros.len() as u64);
            file.write_all(&zeros[..n as usize]).map_err(fail)?;
            left -= n;
        }
        total += length;
    }
    file.sync_all().map_err(fail)?;
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    fn placer(path: &Path, punch: bool) -> Placer {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .unwrap();
        Placer {
            file,
            at: 0,
            written: 0,
            zeroed: 0,
            punch,
        }
    }

    #[test]
    fn runs_of_zeros_are_punched_and_read_back_as_zeros_over_old_data() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("disk");
        // The disk held data before: the zeros of the image must replace it.
        std::fs::write(&path, vec![0xAAu8; 4 << 20]).unwrap();
        let mut block = vec![0u8; 4 << 20];
        block[..PIECE].fill(1);
        block[PIECE + 5] = 2; // one byte makes the second piece data
        block[(4 << 20) - 1] = 3;
        let mut p = placer(&path, true);
        p.place(&block).unwrap();
        assert_eq!(p.at, 4 << 20);
        assert_eq!(p.written, 3 * PIECE as u64, "data pieces only");
        assert_eq!(p.zeroed, (4 << 20) - 3 * PIECE as u64);
        assert!(std::fs::read(&path).unwrap() == block);
        let allocated = std::fs::metadata(&path).unwrap().blocks() * 512;
        assert!(allocated <= 3 * PIECE as u64 + 4096, "{allocated}");
        // Without punching (a target that refused it), the zeros are written.
        let mut p = placer(&dir.path().join("plain"), false);
        p.place(&block).unwrap();
        assert_eq!((p.written, p.zeroed), (4 << 20, 0));
        assert!(std::fs::read(dir.path().join("plain")).unwrap() == block);
    }

    /// Chunks of any size (a network's) become whole blocks: the zeros after the first
    /// block are punched at aligned offsets (an unaligned punch fails the debug
    /// assertion in `zero_out`) and the image reads back whole.
    #[tokio::test]
    async fn chunks_of_any_size_are_placed_in_whole_blocks() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("disk");
        let mut image = vec![0u8; 3 * BLOCK + 12345];
        image[..BLOCK + 7].fill(9);
        image[2 * BLOCK + 3 * PIECE] = 1;
        let written = Arc::new(AtomicU64::new(0));
        let mut w = DiskWriter::open(&path, "sha256", &written, None)
            .await
            .unwrap();
        for chunk in image.chunks(100_003) {
            w.write(chunk).await.unwrap();
        }
        let done = w.finish().await.unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), image);
        assert_eq!(done.written + done.zeroed, image.len() as u64);
        assert!(
            done.zeroed >= 2 * BLOCK as u64 - 2 * PIECE as u64,
            "{done:?}"
        );
        assert_eq!(written.load(Ordering::Relaxed), image.len() as u64);
    }
}
