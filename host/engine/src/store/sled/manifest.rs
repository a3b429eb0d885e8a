//! The store's high-water mark, so lost data is refused at start instead of served.
//!
//! sled recovers a damaged file by keeping what precedes the first bad segment, and starts
//! a missing or emptied one as a new store: either way it opens "normally" with nodes gone.
//! So the engine keeps a mark on each side:
//! - in sled, a checkpoint number (`deployd.checkpoint`), raised and flushed every few
//!   seconds and at shutdown;
//! - beside it, in `<store>.manifest`, the last checkpoint flushed and the node count then,
//!   written to a new file, fsynced and renamed after that flush.
//!
//! At open the store must hold at least the manifest's checkpoint. A store that lost the
//! segment with it (a flipped byte, a zeroed page, a truncated, emptied or deleted file)
//! is refused, with both counts and what to do. Deletes cannot trip it: a checkpoint
//! counts writes, not nodes, and the manifest is written only after its checkpoint is on
//! disk, so a crash between the two leaves a store ahead of its manifest, which is fine.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::StoreError;

const CHECKPOINT_KEY: &[u8] = b"deployd.checkpoint";

#[derive(Debug, Serialize, Deserialize, PartialEq)]
struct Manifest {
    checkpoint: u64,
    nodes: usize,
    written_at: String,
}

/// What a store's check at open found wrong.
#[derive(Debug, thiserror::Error)]
#[error(
    "the store in {path} has lost data: it holds checkpoint {found} and {nodes} nodes, but its manifest ({manifest}) records checkpoint {expected} with {expected_nodes} nodes, written at {written_at}. deployd refuses to start on it rather than serve a store with nodes missing. Restore it from a backup (`deployd store restore`) or from a copy of the data directory taken with the engine stopped, or, to go on with what is left, delete {manifest}"
)]
pub struct Lost {
    path: PathBuf,
    manifest: PathBuf,
    found: u64,
    nodes: usize,
    expected: u64,
    expected_nodes: usize,
    written_at: String,
}

/// The manifest's path for the store in `path`.
pub fn path_of(store: &Path) -> PathBuf {
    store.with_extension("manifest")
}

/// The checkpoint sled holds (0: none yet).
fn checkpoint(db: &sled::Db) -> Result<u64, StoreError> {
    Ok(match db.get(CHECKPOINT_KEY)? {
        Some(v) => u64::from_be_bytes(
            v.as_ref()
                .try_into()
                .map_err(|_| StoreError::Corrupt(format!("checkpoint {v:02x?}")))?,
        ),
        None => 0,
    })
}

/// Refuses a store that holds less than its manifest recorded.
pub fn verify(db: &sled::Db, store: &Path, nodes: usize) -> Result<(), StoreError> {
    let manifest = path_of(store);
    let recorded: Manifest = match std::fs::read(&manifest) {
        Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| {
            StoreError::Manifest(format!(
                "{} cannot be read ({e}); delete it if the store is known good",
                manifest.display()
            ))
        })?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => {
            return Err(StoreError::Manifest(format!(
                "reading {}: {e}",
                manifest.display()
            )));
        }
    };
    let found = checkpoint(db)?;
    if found < recorded.checkpoint {
        return Err(StoreError::Lost(Box::new(Lost {
            path: store.to_owned(),
            manifest,
            found,
            nodes,
            expected: recorded.checkpoint,
            expected_nodes: recorded.nodes,
            written_at: recorded.written_at,
        })));
    }
    Ok(())
}

/// Raises the checkpoint in sled, flushes it, then records it in the manifest.
pub fn checkpoint_now(
    db: &sled::Db,
    store: &Path,
    nodes: usize,
    at: String,
) -> Result<(), StoreError> {
    let next = checkpoint(db)? + 1;
    db.insert(CHECKPOINT_KEY, &next.to_be_bytes())?;
    super::flush(db)?;
    let manifest = Manifest {
        checkpoint: next,
        nodes,
        written_at: at,
    };
    let path = path_of(store);
    let dir = path.parent().unwrap_or(Path::new("."));
    let written = (|| {
        let mut file = tempfile::NamedTempFile::new_in(dir)?;
        serde_json::to_writer(&mut file, &manifest)?;
        file.write_all(b"\n")?;
        file.as_file().sync_all()?;
        file.persist(&path).map_err(|e| e.error)?;
        std::fs::File::open(dir)?.sync_all()
    })();
    written.map_err(|e| StoreError::Manifest(format!("writing {}: {e}", path.display())))
}
