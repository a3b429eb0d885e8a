//! `deployd store backup`, `restore` and `verify`: an export an operator can keep, a way
//! back from it, and a check of a store at rest.
//!
//! A backup is JSON lines: a header, one line per entry of the trees that hold records
//! (nodes, ports, config drives, documents, history, the store's own marks), a trailer
//! with the entry count and the sha256 of every line before it. It is taken online, with
//! the engine serving: each record is exported as it was at one instant (every write of a
//! record is one sled operation), and the indexes (names, MACs, a node's ports, the
//! documents' unique fields, deadlines) are not exported but rebuilt from the records at
//! restore, so they always agree with what was restored. A port or a document index entry
//! whose record did not make it into the backup is dropped and counted.
//!
//! Restore writes a new store beside the target and moves it into place only once the
//! trailer checked out: a truncated or altered backup leaves nothing behind.

use std::collections::BTreeSet;
use std::io::{BufRead, Write};
use std::path::Path;

use base64::Engine as _;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use uuid::Uuid;

use super::{FORMAT, SledStore, StoreConfig, StoreError, Trees, open_db, record, uuid_from};
use crate::node::Port;

/// The trees a backup holds ("" is sled's default tree: the format and checkpoint marks).
const RECORDS: [&str; 6] = ["", "nodes", "ports", "config_drives", "docs", "history"];
/// The documents' unique-field index: exported for the fields it names, rebuilt.
const DOC_INDEX: &str = "doc_index";

#[derive(Serialize, Deserialize)]
struct Header {
    deployd_backup: u32,
    store_format: u32,
    taken_at: String,
}

#[derive(Serialize, Deserialize)]
struct Entry {
    tree: String,
    key: String,
    value: String,
}

#[derive(Serialize, Deserialize)]
struct Trailer {
    entries: u64,
    sha256: String,
}

#[derive(Serialize, Deserialize)]
#[serde(untagged)]
enum Line {
    End { end: Trailer },
    Entry(Entry),
}

/// What a backup or a restore handled.
#[derive(Debug, Default, Serialize)]
pub struct BackupSummary {
    pub entries: u64,
    pub nodes: u64,
    pub ports: u64,
    pub documents: u64,
    /// Ports whose node was not in the backup (restore only).
    pub dropped_ports: u64,
}

fn b64() -> base64::engine::GeneralPurpose {
    base64::engine::general_purpose::STANDARD
}

/// Hashes what it writes, so the trailer can vouch for every line before it.
struct Hashed<W> {
    out: W,
    hash: Sha256,
}

impl<W: Write> Hashed<W> {
    fn line(&mut self, value: &impl Serialize) -> Result<(), StoreError> {
        let mut line = serde_json::to_vec(value).expect("a backup line serialises");
        line.push(b'\n');
        self.hash.update(&line);
        self.out.write_all(&line).map_err(io("writing the backup"))
    }
}

fn io(what: &'static str) -> impl Fn(std::io::Error) -> StoreError {
    move |e| StoreError::Manifest(format!("{what}: {e}"))
}

impl SledStore {
    /// Writes a backup of this store to `out` while it serves (see the module's doc).
    pub fn backup(&self, out: impl Write) -> Result<BackupSummary, StoreError> {
        let t = self.t()?;
        export(&t, out, self.clock.now().to_datetime().to_rfc3339())
    }
}

fn export(t: &Trees, out: impl Write, taken_at: String) -> Result<BackupSummary, StoreError> {
    let mut out = Hashed {
        out,
        hash: Sha256::new(),
    };
    out.line(&Header {
        deployd_backup: 1,
        store_format: FORMAT,
        taken_at,
    })?;
    let mut summary = BackupSummary::default();
    for name in RECORDS.iter().chain([&DOC_INDEX]) {
        let tree: sled::Tree = match name.is_empty() {
            true => (*t.db).clone(),
            false => t.db.open_tree(name)?,
        };
        for item in tree.iter() {
            let (key, value) = item?;
            // Of the index, one entry per field is enough to name the field.
            let value = if *name == DOC_INDEX {
                &[][..]
            } else {
                &value[..]
            };
            out.line(&Entry {
                tree: name.to_string(),
                key: hex::encode(&key),
                value: b64().encode(value),
            })?;
            summary.entries += 1;
            match *name {
                "nodes" => summary.nodes += 1,
                "ports" => summary.ports += 1,
                "docs" => summary.documents += 1,
                _ => {}
            }
        }
    }
    let sha256 = hex::encode(out.hash.clone().finalize());
    out.line(&Line::End {
        end: Trailer {
            entries: summary.entries,
            sha256,
        },
    })?;
    out.out.flush().map_err(io("writing the backup"))?;
    Ok(summary)
}

/// Restores the backup read from `from` as a new store at `path`, which must not exist.
/// Nothing is left at `path` unless the whole backup checked out.
pub fn restore(
    path: &Path,
    config: &StoreConfig,
    from: impl BufRead,
) -> Result<BackupSummary, StoreError> {
    let refuse = |why: String| StoreError::Manifest(why);
    if path.exists() {
        return Err(refuse(format!(
            "{} already exists: restore into a new data directory",
            path.display()
        )));
    }
    let staging = path.with_extension("restoring");
    let _ = std::fs::remove_dir_all(&staging);
    let restored = import(&staging, config, from);
    match restored {
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

fn import(
    staging: &Path,
    config: &StoreConfig,
    from: impl BufRead,
) -> Result<BackupSummary, StoreError> {
    let bad = |why: String| StoreError::Corrupt(format!("the backup {why}"));
    let db = open_db(staging, config)?;
    let mut hash = Sha256::new();
    let mut lines = from.lines();
    let header = lines
        .next()
        .ok_or_else(|| bad("is empty".into()))?
        .map_err(io("reading the backup"))?;
    hash.update(header.as_bytes());
    hash.update(b"\n");
    let header: Header =
        serde_json::from_str(&header).map_err(|e| bad(format!("has no deployd header ({e})")))?;
    if header.deployd_backup != 1 || header.store_format > FORMAT {
        return Err(bad(format!(
            "is of version {} for store format {}, which this deployd does not read",
            header.deployd_backup, header.store_format
        )));
    }
    let mut entries = 0u64;
    let mut fields = BTreeSet::new();
    let mut trailer = None;
    for line in lines {
        let line = line.map_err(io("reading the backup"))?;
        if trailer.is_some() {
            return Err(bad("goes on after its trailer".into()));
        }
        match serde_json::from_str::<Line>(&line)
            .map_err(|e| bad(format!("has a line that is not an entry ({e})")))?
        {
            Line::End { end } => trailer = Some(end),
            Line::Entry(e) => {
                hash.update(line.as_bytes());
                hash.update(b"\n");
                entries += 1;
                let key = hex::decode(&e.key).map_err(|_| bad(format!("key {:?}", e.key)))?;
                let value = b64()
                    .decode(&e.value)
                    .map_err(|_| bad(format!("value of key {:?}", e.key)))?;
                match e.tree.as_str() {
                    DOC_INDEX => {
                        fields.insert(index_field(&key));
                    }
                    "" => {
                        db.insert(key, value)?;
                    }
                    name if RECORDS.contains(&name) => {
                        db.open_tree(name)?.insert(key, value)?;
                    }
                    name => {
                        return Err(bad(format!("names a tree deployd does not have: {name:?}")));
                    }
                }
            }
        }
    }
    let trailer = trailer.ok_or_else(|| bad("is truncated: it has no trailer".into()))?;
    let sha256 = hex::encode(hash.finalize());
    if trailer.entries != entries || trailer.sha256 != sha256 {
        return Err(bad(format!(
            "does not match its trailer ({entries} entries with sha256 {sha256}; the trailer says {} with {}): it was altered or damaged",
            trailer.entries, trailer.sha256
        )));
    }
    let mut summary = rebuild_indexes(&db, &fields)?;
    summary.entries = entries;
    db.flush()?;
    drop(db);
    // Opening checks the format and rebuilds the port names; the engine derives the
    // deadlines (and fails what was busy) when it starts on it, as after any restart.
    drop(Trees::open(staging, config)?);
    Ok(summary)
}

/// `(kind, field)` of a `kind \0 field \0 value` index key.
fn index_field(key: &[u8]) -> (String, String) {
    let mut parts = key.splitn(3, |&b| b == 0);
    let mut part = || String::from_utf8_lossy(parts.next().unwrap_or_default()).into_owned();
    (part(), part())
}

/// The names, MAC and node-port indexes from the records, and the documents' index for
/// the `fields` the backup's index named.
fn rebuild_indexes(
    db: &sled::Db,
    fields: &BTreeSet<(String, String)>,
) -> Result<BackupSummary, StoreError> {
    let (nodes, names) = (db.open_tree("nodes")?, db.open_tree("names")?);
    let mut summary = BackupSummary::default();
    for item in nodes.iter() {
        let (key, value) = item?;
        let uuid = uuid_from(&key)?;
        let (_, json) = record::split(uuid, &value)?;
        let body: serde_json::Value = super::parse_json("node", json)?;
        if let Some(name) = body["name"].as_str() {
            names.insert(name.as_bytes(), uuid.as_bytes())?;
        }
        summary.nodes += 1;
    }
    let ports = db.open_tree("ports")?;
    let (macs, node_ports) = (db.open_tree("macs")?, db.open_tree("node_ports")?);
    for item in ports.iter() {
        let (key, json) = item?;
        let port: Port = super::parse_json("port", &json)?;
        if !nodes.contains_key(port.node_uuid.as_bytes())? {
            ports.remove(key)?;
            summary.dropped_ports += 1;
            continue;
        }
        macs.insert(port.address.as_bytes(), port.uuid.as_bytes())?;
        node_ports.insert(super::pair_key(port.node_uuid, port.uuid), &[])?;
        summary.ports += 1;
    }
    let (docs, index) = (db.open_tree("docs")?, db.open_tree(DOC_INDEX)?);
    for item in docs.iter() {
        let (key, json) = item?;
        summary.documents += 1;
        let Some(split) = key.iter().position(|&b| b == 0) else {
            continue;
        };
        let kind = String::from_utf8_lossy(&key[..split]);
        let uuid = Uuid::from_slice(&key[split + 1..])
            .map_err(|_| StoreError::Corrupt(format!("document key {key:02x?}")))?;
        let doc: crate::store::documents::Doc = super::parse_json("document", &json)?;
        let unique: Vec<&str> = fields
            .iter()
            .filter(|(k, _)| *k == kind)
            .map(|(_, f)| f.as_str())
            .collect();
        for (field, value) in crate::store::documents::unique_values(&doc, &unique) {
            index.insert(format!("{kind}\0{field}\0{value}"), uuid.as_bytes())?;
        }
    }
    Ok(summary)
}
