//! `deployd store backup` and `restore`: an export an operator can keep, and a way back from
//! it onto either backend — sled's backup restores onto PostgreSQL and PostgreSQL's onto
//! sled, which is also how a fleet moves from one to the other.
//!
//! A backup is JSON lines, the same whichever backend wrote it: a header, one line per
//! [`Record`] (a node with its provision record, a port, a config drive, a document with
//! the names of its unique fields, a history event with its time and sequence, so its uuid
//! survives), and a trailer with the record count and the sha256 of every line before it.
//! Only records: the indexes (names, MACs, a node's ports, the documents' unique values,
//! the deadlines) are rebuilt from them, so they always agree with what was restored. The
//! deadlines are re-derived when an engine starts on the restored store, for the timeouts
//! it runs with then, and a node left busy is failed (the rule of [`super::recovery`]).
//!
//! It is taken online, with the engine serving, a page of records at a time (each record
//! as it was at one instant). A port whose node did not make it into the backup, or an
//! event of such a node, is dropped at restore and counted.
//!
//! A restore writes nothing where it could be mistaken for a good store until the whole
//! backup checked out: sled's goes to a new directory moved into place at the end,
//! PostgreSQL's is one transaction into an empty database.

use std::io::{BufRead, Lines, Write};
use std::path::Path;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

pub use super::backup_records::{BackupSummary, Cursor, Kept, Page, Part, Record, Trailer};
use super::{Store, StoreConfig, StoreError};

/// The version of the format written here (1 was sled's trees, byte for byte).
const VERSION: u32 = 2;

#[derive(Serialize, Deserialize)]
struct Header {
    deployd_backup: u32,
    taken_at: String,
    /// The backend it was taken from (`sled`, `postgres`): for the operator's eyes.
    from: String,
}

/// Hashes what it writes, so the trailer can vouch for every line before it; and the
/// records' lines alone, which are the same for the same records whenever and wherever
/// they were read (what a copy compares).
struct Hashed<W> {
    out: W,
    hash: Sha256,
    records: Sha256,
}

impl<W: Write> Hashed<W> {
    fn line(&mut self, value: &impl Serialize) -> Result<Vec<u8>, StoreError> {
        let mut line = serde_json::to_vec(value).expect("a backup line serialises");
        line.push(b'\n');
        self.hash.update(&line);
        self.out
            .write_all(&line)
            .map_err(io("writing the backup"))?;
        Ok(line)
    }

    fn record(&mut self, record: &Record) -> Result<(), StoreError> {
        let line = self.line(record)?;
        self.records.update(&line);
        Ok(())
    }
}

fn io(what: &'static str) -> impl Fn(std::io::Error) -> StoreError {
    move |e| StoreError::Manifest(format!("{what}: {e}"))
}

/// Writes a backup of `store` to `out` while it serves, on a thread that may block (the
/// writing does: `out` may be a client on the network); the store is read on `runtime`.
pub fn write(
    store: &Store,
    runtime: &tokio::runtime::Handle,
    out: impl Write,
) -> Result<BackupSummary, StoreError> {
    let mut out = Hashed {
        out,
        hash: Sha256::new(),
        records: Sha256::new(),
    };
    out.line(&Header {
        deployd_backup: VERSION,
        taken_at: store.clock().now().to_datetime().to_rfc3339(),
        from: store.backend_name().to_owned(),
    })?;
    let mut summary = BackupSummary::default();
    let mut cursor = Some(Cursor {
        part: Part::Nodes,
        after: None,
    });
    while let Some(at) = cursor {
        let page = runtime.block_on(store.export(&at))?;
        for record in &page.records {
            out.record(record)?;
            summary.count(record);
        }
        cursor = match page.next {
            Some(after) => Some(Cursor {
                after: Some(after),
                ..at
            }),
            None => at.part.next().map(|part| Cursor { part, after: None }),
        };
    }
    summary.sha256 = hex::encode(out.records.clone().finalize());
    out.line(&Record::End(Trailer {
        records: summary.records,
        sha256: hex::encode(out.hash.clone().finalize()),
    }))?;
    out.out.flush().map_err(io("writing the backup"))?;
    Ok(summary)
}

/// The records of a backup read from `from`, checked as they are read: the last item is
/// an error if the backup turns out altered or cut short, so an importer that stops at the
/// first error has written nothing it keeps.
pub struct Records<R> {
    lines: Lines<R>,
    hash: Sha256,
    read: u64,
    ended: bool,
}

fn bad(why: String) -> StoreError {
    StoreError::Corrupt(format!("the backup {why}"))
}

/// Opens a backup: its header is read and checked here.
pub fn read<R: BufRead>(from: R) -> Result<Records<R>, StoreError> {
    let mut lines = from.lines();
    let header = lines
        .next()
        .ok_or_else(|| bad("is empty".into()))?
        .map_err(io("reading the backup"))?;
    let mut hash = Sha256::new();
    hash.update(header.as_bytes());
    hash.update(b"\n");
    let header: Header =
        serde_json::from_str(&header).map_err(|e| bad(format!("has no deployd header ({e})")))?;
    if header.deployd_backup != VERSION {
        return Err(bad(format!(
            "is of version {}; this deployd reads version {VERSION} (restore a version 1 backup with the deployd that wrote it, then take a new one)",
            header.deployd_backup
        )));
    }
    Ok(Records {
        lines,
        hash,
        read: 0,
        ended: false,
    })
}

impl<R: BufRead> Records<R> {
    fn next_record(&mut self) -> Result<Option<Record>, StoreError> {
        let Some(line) = self.lines.next() else {
            return match self.ended {
                true => Ok(None),
                false => Err(bad("is truncated: it has no trailer".into())),
            };
        };
        let line = line.map_err(io("reading the backup"))?;
        if self.ended {
            return Err(bad("goes on after its trailer".into()));
        }
        let record: Record = serde_json::from_str(&line)
            .map_err(|e| bad(format!("has a line that is not a record ({e})")))?;
        if let Record::End(end) = &record {
            let sha256 = hex::encode(self.hash.clone().finalize());
            if end.records != self.read || end.sha256 != sha256 {
                return Err(bad(format!(
                    "does not match its trailer ({} records with sha256 {sha256}; the trailer says {} with {}): it was altered or damaged",
                    self.read, end.records, end.sha256
                )));
            }
            self.ended = true;
            return self.next_record();
        }
        self.hash.update(line.as_bytes());
        self.hash.update(b"\n");
        self.read += 1;
        Ok(Some(record))
    }
}

impl<R: BufRead> Iterator for Records<R> {
    type Item = Result<Record, StoreError>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_record().transpose()
    }
}

/// Restores the backup read from `from` as a new sled store at `path`, which must not
/// exist. Nothing is left at `path` unless the whole backup checked out.
pub fn restore_to_sled(
    path: &Path,
    config: &StoreConfig,
    from: impl BufRead,
) -> Result<BackupSummary, StoreError> {
    if path.exists() {
        return Err(StoreError::Manifest(format!(
            "{} already exists: restore into a new data directory",
            path.display()
        )));
    }
    let records = read(from)?;
    let staging = path.with_extension("restoring");
    let _ = std::fs::remove_dir_all(&staging);
    match super::sled::import(&staging, config, records) {
        Ok(summary) => {
            std::fs::rename(&staging, path).map_err(io("moving the restored store in place"))?;
            Ok(summary)
        }
        Err(e) => {
            let _ = std::fs::remove_dir_all(&staging);
            Err(e)
        }
    }
}

/// Restores the backup read from `from` into the shared store at `url` (PostgreSQL), which
/// must hold no nodes nor documents and have no engine serving it: in one transaction,
/// so a backup that does not check out leaves the database as it was.
pub async fn restore_to_shared(url: &str, from: impl BufRead) -> Result<BackupSummary, StoreError> {
    let records = read(from)?;
    let shared = super::postgres::SharedStore::connect(
        url,
        crate::state_machine::Timeouts::uniform(std::time::Duration::ZERO),
    )
    .await?;
    shared.import(records).await
}
