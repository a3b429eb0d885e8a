//! `deployd store copy`: a fleet moved from one store into a new one, sled to PostgreSQL
//! or back (or to another of the same kind), without re-enrolling anything.
//!
//! A copy is a backup of the source (see [`super::backup`]) restored into the target, then
//! checked: the target's records, read back in the same order, must hash to what the
//! backup's trailer vouched for, so every node, port, config drive, document and history
//! event arrived as it left. A sled source is read as it is (a busy node stays busy until
//! an engine starts on the copy); its engine must be stopped (sled's lock says so
//! otherwise). A PostgreSQL source may be served while it is copied: the copy holds each
//! record as it was at one instant, like any backup.

use std::io::{BufReader, Seek};
use std::path::PathBuf;
use std::sync::Arc;

use super::backup::{self, BackupSummary};
use super::postgres::SharedStore;
use super::{Store, StoreConfig, StoreError};
use crate::clock::Clock;
use crate::state_machine::Timeouts;

/// One side of a copy: a data directory (sled keeps its store in `store/` inside it) or
/// the URL of a PostgreSQL database.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Place {
    DataDir(PathBuf),
    Url(String),
}

impl Place {
    /// A `postgres://` or `postgresql://` URL names a database; anything else a directory.
    pub fn parse(s: &str) -> Place {
        match s.starts_with("postgres://") || s.starts_with("postgresql://") {
            true => Place::Url(s.to_owned()),
            false => Place::DataDir(PathBuf::from(s)),
        }
    }

    fn open(&self, runtime: &tokio::runtime::Runtime) -> Result<Store, StoreError> {
        match self {
            Place::DataDir(dir) => Store::open_as_is(&dir.join("store"), &StoreConfig::default()),
            Place::Url(url) => {
                let timeouts = Timeouts::uniform(std::time::Duration::ZERO);
                let shared = runtime.block_on(SharedStore::connect(url, timeouts))?;
                Ok(Store::shared(
                    Arc::new(shared),
                    None,
                    timeouts,
                    Clock::new(),
                ))
            }
        }
    }
}

/// What a copy moved, and the sha256 of its records on both sides.
#[derive(Debug)]
pub struct Copied {
    pub moved: BackupSummary,
    pub sha256: String,
}

/// Copies the store at `from` into a new store at `to` (a data directory that does not
/// exist yet, or an empty database no engine serves) and checks the copy. Blocks: call
/// it off any async runtime's workers; `runtime` runs the stores' reads and writes.
pub fn copy(
    from: &Place,
    to: &Place,
    runtime: &tokio::runtime::Runtime,
) -> Result<Copied, StoreError> {
    if from == to {
        return Err(StoreError::Manifest(
            "the copy's source and target are the same store".into(),
        ));
    }
    let io = |e: std::io::Error| StoreError::Manifest(format!("the copy's staging file: {e}"));
    let mut staged = tempfile::tempfile().map_err(io)?;
    let source = from.open(runtime)?;
    let taken = backup::write(&source, runtime.handle(), &mut staged)?;
    drop(source);
    staged.rewind().map_err(io)?;
    let restored = match to {
        Place::DataDir(dir) => {
            std::fs::create_dir_all(dir).map_err(io)?;
            let config = StoreConfig::default();
            backup::restore_to_sled(&dir.join("store"), &config, BufReader::new(staged))?
        }
        Place::Url(url) => {
            runtime.block_on(backup::restore_to_shared(url, BufReader::new(staged)))?
        }
    };
    let target = to.open(runtime)?;
    let read_back = backup::write(&target, runtime.handle(), std::io::sink())?;
    let counts = |s: &BackupSummary| (s.records, s.nodes, s.ports, s.documents, s.events);
    if restored.dropped > 0
        || counts(&read_back) != counts(&taken)
        || read_back.sha256 != taken.sha256
    {
        return Err(StoreError::Corrupt(format!(
            "the copy differs from its source: {} records with sha256 {} were taken, {} records with sha256 {} read back ({} dropped); the target was left as it is for a look",
            taken.records, taken.sha256, read_back.records, read_back.sha256, restored.dropped
        )));
    }
    Ok(Copied {
        sha256: taken.sha256.clone(),
        moved: taken,
    })
}
