//! The store's space reserve: a file of [`RESERVE`] bytes beside the database, made at
//! open, so a full disk still leaves the store room to be opened again.
//!
//! sled's first failed write is sticky, and it refuses more than writes: a read that walks
//! a tree node due for a split or a merge does that split, which writes, and fails with the
//! same error. So at a storage fault the keeper releases the reserve and opens the database
//! again from disk (see [`super::SledStore::leave_fault`]): reads work again, and writes stay
//! refused by the store itself, not by sled, until the disk has room to make the reserve
//! again. A store whose disk was too full to make it at open goes without: it waits for
//! room before it reopens, as if it had used it already.

use std::io::Write;
use std::path::{Path, PathBuf};

/// The reserve's size: room for sled to open and to write what reads split, many times over
/// (its segments are 512 KiB).
pub const RESERVE: u64 = 8 << 20;
/// The free space a store waits for before it is opened again: a few of sled's segments.
pub const ROOM_TO_REOPEN: u64 = 4 << 20;

/// Where the reserve of the store at `store` is.
pub fn path(store: &Path) -> PathBuf {
    store.with_extension("reserve")
}

/// Makes the reserve unless it is there. Its blocks are allocated (`fallocate`, or written
/// where the filesystem cannot: a sparse file would reserve nothing) and synced, under a
/// temporary name renamed into place, so a reserve that exists is whole. A disk without
/// room for it leaves nothing behind.
pub fn make(store: &Path) -> std::io::Result<()> {
    let target = path(store);
    if std::fs::metadata(&target).is_ok_and(|m| m.len() == RESERVE) {
        return Ok(());
    }
    let partial = store.with_extension("reserve.partial");
    let made = (|| {
        let mut file = std::fs::File::create(&partial)?;
        match rustix::fs::fallocate(&file, rustix::fs::FallocateFlags::empty(), 0, RESERVE) {
            Ok(()) => {}
            Err(rustix::io::Errno::OPNOTSUPP) => {
                let chunk = vec![0u8; 1 << 20];
                for _ in 0..RESERVE / chunk.len() as u64 {
                    file.write_all(&chunk)?;
                }
            }
            Err(e) => return Err(e.into()),
        }
        file.sync_all()?;
        std::fs::rename(&partial, &target)
    })();
    if made.is_err() {
        let _ = std::fs::remove_file(&partial);
    }
    made
}

/// Frees the reserve's space; whether there was a reserve to free.
pub fn release(store: &Path) -> bool {
    std::fs::remove_file(path(store)).is_ok()
}

/// Whether the filesystem holding the store at `store` has `bytes` free.
pub fn has_room(store: &Path, bytes: u64) -> bool {
    let dir = store.parent().unwrap_or(store);
    crate::disk_space::free(dir).is_some_and(|free| free >= bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reserve_is_made_whole_once_and_released() {
        let dir = tempfile::tempdir().unwrap();
        let store = dir.path().join("store");
        make(&store).unwrap();
        assert_eq!(std::fs::metadata(path(&store)).unwrap().len(), RESERVE);
        make(&store).unwrap();
        assert!(release(&store));
        assert!(!release(&store), "nothing left to free");
        assert!(!store.with_extension("reserve.partial").exists());
        assert!(has_room(&store, 1) && !has_room(&store, u64::MAX));
    }
}
