//! The sled store's side of a backup (see [`crate::store::backup`]): its records read a page
//! at a time in key order, and a backup's records written into a new store with every
//! index rebuilt from them.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::path::Path;

use base64::Engine as _;
use uuid::Uuid;

use super::documents::{doc_key, index_key};
use super::history::{Change, History};
use super::{
    SledStore, StoreConfig, StoreError, Trees, open_db, pair_key, parse_body, parse_json, record,
    uuid_from,
};
use crate::store::backup_records::{BackupSummary, Cursor, Kept, PAGE, Page, Part, Record};
use crate::store::documents::{Doc, unique_values};

/// Nodes whose events one page of the history holds.
const NODES_OF_HISTORY: usize = 32;

fn b64() -> base64::engine::GeneralPurpose {
    base64::engine::general_purpose::STANDARD
}

impl SledStore {
    /// The records of `at.part` after `at.after`, in key order.
    pub fn export(&self, at: &Cursor) -> Result<Page, StoreError> {
        let t = self.t()?;
        let after_uuid = at.after.as_ref().map(|(_, u)| *u);
        let from = |tree: &sled::Tree, key: Option<Vec<u8>>| match key {
            Some(k) => tree.range::<Vec<u8>, _>((Bound::Excluded(k), Bound::Unbounded)),
            None => tree.iter(),
        };
        let by_uuid = |tree| from(tree, after_uuid.map(|u| u.as_bytes().to_vec())).take(PAGE);
        let mut records = Vec::new();
        let mut last = None;
        match at.part {
            Part::Nodes => {
                for item in by_uuid(&t.nodes) {
                    let (key, value) = item?;
                    let uuid = uuid_from(&key)?;
                    let (p, json) = record::split(uuid, &value)?;
                    records.push(Record::Node {
                        provision: Kept::from(&p),
                        body: Box::new(parse_body(uuid, json)?),
                    });
                    last = Some(uuid);
                }
            }
            Part::Ports => {
                for item in by_uuid(&t.ports) {
                    let (key, value) = item?;
                    records.push(Record::Port(parse_json("port", &value)?));
                    last = Some(uuid_from(&key)?);
                }
            }
            Part::ConfigDrives => {
                for item in by_uuid(&t.config_drives) {
                    let (key, value) = item?;
                    let node = uuid_from(&key)?;
                    records.push(Record::ConfigDrive {
                        node,
                        bytes: b64().encode(&value),
                    });
                    last = Some(node);
                }
            }
            Part::Documents => return documents(&t, at),
            Part::History => {
                let mut nodes = 0;
                for item in by_uuid(&t.nodes).take(NODES_OF_HISTORY) {
                    let node = uuid_from(&item?.0)?;
                    // In sequence order, as PostgreSQL reads them (two events recorded
                    // at once may have been appended the other way round).
                    let mut entries = t.history.entries(node)?;
                    entries.sort_by_key(|e| e.sequence);
                    for e in entries {
                        records.push(Record::Event {
                            node,
                            micros: e.micros,
                            sequence: e.sequence,
                            recorded: e.change,
                        });
                    }
                    nodes += 1;
                    last = Some(node);
                }
                let next = last.filter(|_| nodes == NODES_OF_HISTORY);
                return Ok(Page {
                    records,
                    next: next.map(|u| (String::new(), u)),
                });
            }
        }
        let next = last.filter(|_| records.len() == PAGE);
        Ok(Page {
            records,
            next: next.map(|u| (String::new(), u)),
        })
    }
}

/// A page of documents, each with the unique fields of its kind that hold a value in it.
fn documents(t: &Trees, at: &Cursor) -> Result<Page, StoreError> {
    let (docs, index) = (&t.docs.docs, &t.docs.index);
    let items = match &at.after {
        Some((kind, uuid)) => {
            docs.range::<Vec<u8>, _>((Bound::Excluded(doc_key(kind, *uuid)), Bound::Unbounded))
        }
        None => docs.iter(),
    };
    let mut fields: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut records = Vec::new();
    let mut last = None;
    for item in items.take(PAGE) {
        let (key, value) = item?;
        let split = key.iter().position(|&b| b == 0);
        let (kind, uuid) = match split.map(|at| key.split_at(at)) {
            Some((kind, uuid)) => (String::from_utf8_lossy(kind).into_owned(), &uuid[1..]),
            None => return Err(StoreError::Corrupt(format!("document key {key:02x?}"))),
        };
        let uuid = uuid_from(uuid)?;
        let body: Doc = parse_json("document", &value)?;
        if !fields.contains_key(&kind) {
            let mut of_kind = Vec::new();
            for k in index.scan_prefix(format!("{kind}\0")).keys() {
                let k = k?;
                let field = k.split(|&b| b == 0).nth(1).unwrap_or_default();
                let field = String::from_utf8_lossy(field).into_owned();
                if !of_kind.contains(&field) {
                    of_kind.push(field);
                }
            }
            fields.insert(kind.clone(), of_kind);
        }
        let specs: Vec<&str> = fields[&kind].iter().map(String::as_str).collect();
        let unique = unique_values(&body, &specs)
            .into_iter()
            .map(|(field, _)| field.to_owned())
            .collect();
        records.push(Record::Document {
            kind: kind.clone(),
            uuid,
            unique,
            body,
        });
        last = Some((kind, uuid));
    }
    let next = last.filter(|_| records.len() == PAGE);
    Ok(Page { records, next })
}

/// Writes the backup's `records` into a new store at `staging`, rebuilding its indexes;
/// the first error stops it (the caller removes `staging`).
pub(crate) fn import(
    staging: &Path,
    config: &StoreConfig,
    records: impl Iterator<Item = Result<Record, StoreError>>,
) -> Result<BackupSummary, StoreError> {
    let db = open_db(staging, config)?;
    let tree = |name: &str| db.open_tree(name);
    let (nodes, names) = (tree("nodes")?, tree("names")?);
    let (ports, macs, node_ports) = (tree("ports")?, tree("macs")?, tree("node_ports")?);
    let config_drives = tree("config_drives")?;
    let (docs, index) = (tree("docs")?, tree("doc_index")?);
    let history = History::open(&db, true)?;
    let mut summary = BackupSummary::default();
    for record in records {
        let record = record?;
        let of_node = |node: Uuid| nodes.contains_key(node.as_bytes());
        match &record {
            Record::Node { provision, body } => {
                let json = serde_json::to_vec(body).expect("a node body serialises");
                nodes.insert(
                    body.uuid.as_bytes(),
                    record::join(&provision.provision(), &json),
                )?;
                if let Some(name) = &body.name {
                    names.insert(name.as_bytes(), body.uuid.as_bytes())?;
                }
            }
            Record::Port(port) if of_node(port.node_uuid)? => {
                let json = serde_json::to_vec(port).expect("a port serialises");
                ports.insert(port.uuid.as_bytes(), json)?;
                macs.insert(port.address.as_bytes(), port.uuid.as_bytes())?;
                node_ports.insert(pair_key(port.node_uuid, port.uuid), &[])?;
            }
            Record::ConfigDrive { node, bytes } if of_node(*node)? => {
                let bytes = b64().decode(bytes).map_err(|_| {
                    StoreError::Corrupt(format!("the backup's config drive of node {node}"))
                })?;
                config_drives.insert(node.as_bytes(), bytes)?;
            }
            Record::Document {
                kind,
                uuid,
                unique,
                body,
            } => {
                let json = serde_json::to_vec(body).expect("a document serialises");
                docs.insert(doc_key(kind, *uuid), json)?;
                let specs: Vec<&str> = unique.iter().map(String::as_str).collect();
                for (field, value) in unique_values(body, &specs) {
                    index.insert(index_key(kind, field, &value), uuid.as_bytes())?;
                }
            }
            Record::Event {
                node,
                micros,
                sequence,
                recorded,
            } if of_node(*node)? => {
                let change = Change {
                    from: recorded.from,
                    to: recorded.to,
                    event: &recorded.event,
                    target: recorded.target,
                    error: recorded.error.as_deref(),
                    seconds: recorded.seconds,
                    note: recorded.note.as_deref(),
                };
                history.append(*node, *micros, *sequence, &change)?;
            }
            Record::Port(_) | Record::ConfigDrive { .. } | Record::Event { .. } => {
                summary.dropped += 1;
                continue;
            }
            Record::End(_) => continue,
        }
        summary.count(&record);
    }
    super::flush(&db)?;
    drop((
        history,
        nodes,
        names,
        ports,
        macs,
        node_ports,
        config_drives,
        docs,
        index,
    ));
    drop(db);
    // Opening checks the format and indexes the port names; the engine derives the
    // deadlines (and fails what was busy) when it starts on it, as after any restart.
    drop(Trees::open(staging, config)?);
    Ok(summary)
}
