//! Writes stop before the store's disk fills: below a floor of free space the store
//! refuses writes (503, the cause named) and keeps serving reads, and takes writes again
//! by itself once the disk has more room than a higher mark, as Elasticsearch's flood
//! stage and etcd's quota do. sled then never meets a full disk through the engine's
//! own writes (on ext4 one wedged it: its flusher and every writer waited on each other
//! until a restart).
//!
//! The free space is read at most every [`EVERY`], when a write asks; a statvfs is a
//! microsecond, but 20,000 heartbeats a second would still pay it 20,000 times.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::disk_space::free;

use tokio::time::{Duration, Instant};

/// How long a reading of the free space is trusted.
const EVERY: Duration = Duration::from_millis(100);

/// The free space a store keeps, and where it reads it.
pub(super) struct Watermark {
    /// Below this many free bytes, writes are refused.
    pub floor: u64,
    /// Above this many, they are taken again.
    pub resume: u64,
    /// When the free space was last read, in microseconds from `epoch`.
    read_at: AtomicU64,
    epoch: Instant,
}

/// What the free space says of writes now.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Room {
    /// Enough, or read too recently to read again.
    Enough,
    /// Below the floor: this many bytes free.
    Below(u64),
}

impl Watermark {
    pub(super) fn new(floor: u64, resume: u64) -> Watermark {
        Watermark {
            floor,
            resume: resume.max(floor),
            read_at: AtomicU64::new(0),
            epoch: Instant::now(),
        }
    }

    /// Reads the free space of the filesystem holding `store`, unless it was read less
    /// than [`EVERY`] ago (by any thread: one reads, the others go on).
    pub(super) fn check(&self, store: &Path) -> Room {
        if self.floor == 0 {
            return Room::Enough;
        }
        let now = u64::try_from(self.epoch.elapsed().as_micros()).unwrap_or(u64::MAX) + 1;
        let last = self.read_at.load(Ordering::Relaxed);
        let due = last == 0 || now.saturating_sub(last) >= EVERY.as_micros() as u64;
        if !due
            || self
                .read_at
                .compare_exchange(last, now, Ordering::AcqRel, Ordering::Relaxed)
                .is_err()
        {
            return Room::Enough;
        }
        match free(store.parent().unwrap_or(store)) {
            Some(free) if free < self.floor => Room::Below(free),
            _ => Room::Enough,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::disk_space::free;

    #[tokio::test(start_paused = true)]
    async fn the_free_space_is_read_once_per_interval_and_compared_with_the_floor() {
        let dir = tempfile::tempdir().unwrap();
        let store = dir.path().join("store");
        let free_now = free(&store).unwrap();
        // A floor above what the disk has: refused at the first reading.
        let high = Watermark::new(free_now + (1 << 30), free_now + (2 << 30));
        assert!(matches!(high.check(&store), Room::Below(_)));
        // Read again only once the interval has passed.
        assert_eq!(high.check(&store), Room::Enough);
        tokio::time::advance(EVERY).await;
        assert!(matches!(high.check(&store), Room::Below(_)));
        // A floor of 0 turns the check off; a floor below the free space passes.
        assert_eq!(Watermark::new(0, 0).check(&store), Room::Enough);
        assert_eq!(Watermark::new(1, 2).check(&store), Room::Enough);
    }
}
