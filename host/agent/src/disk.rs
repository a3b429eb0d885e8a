//! Streams an image from a url onto the target disk (a file or a block device), hashing it
//! on the way, never holding more than a few buffers in memory. An optional throttle slows
//! the write (for demos and tests of long deploys).
//!
//! The network runs on the async side; a thread of the disk's own hashes and writes, in
//! 4 MiB blocks handed over a channel of two. Downloading overlaps hashing and writing,
//! and a write is one system call per block rather than one blocking-pool hop per network
//! chunk (which cost a fifth of the throughput).

use std::io::Write;
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
    thread: JoinHandle<Result<Hasher, String>>,
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
            let mut file = file;
            while let Some(block) = receive.blocking_recv() {
                hasher.update(&block);
                file.write_all(&block)
                    .map_err(|e| format!("writing to {shown}: {e}"))?;
            }
            file.sync_all()
                .map_err(|e| format!("syncing {shown}: {e}"))?;
            Ok(hasher)
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
        })
    }

    /// Bytes taken so far: where a resumed download starts.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    pub async fn write(&mut self, chunk: &[u8]) -> Result<(), String> {
        self.pending.extend_from_slice(chunk);
        if self.pending.len() >= BLOCK {
            self.hand_over().await?;
        }
        self.offset += chunk.len() as u64;
        self.written.store(self.offset, Ordering::Relaxed);
        if let Some(rate) = self.throttle {
            let due = self.started + Duration::from_secs_f64(self.offset as f64 / rate as f64);
            tokio::time::sleep_until(due).await;
        }
        Ok(())
    }

    async fn hand_over(&mut self) -> Result<(), String> {
        let block = std::mem::replace(&mut self.pending, BytesMut::with_capacity(BLOCK));
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

    /// Writes what is left, syncs the device; returns the hex digest of everything.
    pub async fn finish(mut self) -> Result<String, String> {
        if !self.pending.is_empty() {
            self.hand_over().await?;
        }
        self.blocks = None;
        match (&mut self.thread).await {
            Ok(Ok(hasher)) => Ok(hasher.hex()),
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
