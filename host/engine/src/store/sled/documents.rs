//! Resources the engine keeps but does not run flows on (chassis, port groups, allocations,
//! deploy templates, volume connectors and targets): JSON documents by kind and uuid, with
//! unique fields indexed.
//!
//! Trees: `docs` maps `kind \0 uuid` to the document; `doc_index` maps
//! `kind \0 field \0 value` to the uuid that holds the value. Each write is one sled
//! transaction over both, so an index never points at a missing document. Writes are
//! serialised by one mutex: these resources change at operator speed, and a read-check-
//! write (is the name free? then take it) must not interleave with another.

use std::sync::Mutex;

use serde_json::Value;
use sled::Transactional;
use uuid::Uuid;

use super::{StoreError, TxResult, abort};
use crate::store::documents::{Cascade, Doc, check_document_sizes, unique_values};

pub struct Documents {
    db: sled::Db,
    pub(super) docs: sled::Tree,
    pub(super) index: sled::Tree,
    writer: Mutex<()>,
}

pub(super) fn doc_key(kind: &str, uuid: Uuid) -> Vec<u8> {
    let mut k = Vec::with_capacity(kind.len() + 17);
    k.extend_from_slice(kind.as_bytes());
    k.push(0);
    k.extend_from_slice(uuid.as_bytes());
    k
}

pub(super) fn index_key(kind: &str, field: &str, value: &str) -> Vec<u8> {
    format!("{kind}\0{field}\0{value}").into_bytes()
}

/// A document found for a [`Cascade`].
pub(super) struct Attached {
    kind: &'static str,
    uuid: Uuid,
    unique: &'static [&'static str],
    doc: Doc,
}

/// Removes an attached document and its index entries inside the caller's transaction.
pub(super) fn remove_in(
    docs: &sled::transaction::TransactionalTree,
    index: &sled::transaction::TransactionalTree,
    doc: &Attached,
) -> TxResult<()> {
    for (field, value) in unique_values(&doc.doc, doc.unique) {
        index.remove(index_key(doc.kind, field, &value))?;
    }
    docs.remove(doc_key(doc.kind, doc.uuid))?;
    Ok(())
}

impl Documents {
    pub(super) fn open(db: &sled::Db) -> Result<Documents, StoreError> {
        Ok(Documents {
            db: db.clone(),
            docs: db.open_tree("docs")?,
            index: db.open_tree("doc_index")?,
            writer: Mutex::new(()),
        })
    }

    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, ()> {
        self.writer.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn get(&self, kind: &'static str, uuid: Uuid) -> Result<Doc, StoreError> {
        let json =
            self.docs
                .get(doc_key(kind, uuid))?
                .ok_or_else(|| StoreError::DocumentNotFound {
                    kind,
                    ident: uuid.to_string(),
                })?;
        serde_json::from_slice(&json)
            .map_err(|e| StoreError::Corrupt(format!("{kind} {uuid}: {e}")))
    }

    /// A document by uuid, or by the value of a unique field (a name).
    pub fn find(
        &self,
        kind: &'static str,
        field: &str,
        ident: &str,
    ) -> Result<(Uuid, Doc), StoreError> {
        let uuid = match Uuid::parse_str(ident) {
            Ok(u) => u,
            Err(_) => match self.index.get(index_key(kind, field, ident))? {
                Some(v) => Uuid::from_slice(&v).map_err(|e| StoreError::Corrupt(e.to_string()))?,
                None => {
                    return Err(StoreError::DocumentNotFound {
                        kind,
                        ident: ident.to_owned(),
                    });
                }
            },
        };
        let doc = self.get(kind, uuid).map_err(|e| match e {
            StoreError::DocumentNotFound { kind, .. } => StoreError::DocumentNotFound {
                kind,
                ident: ident.to_owned(),
            },
            e => e,
        })?;
        Ok((uuid, doc))
    }

    /// Every document of a kind, in uuid order.
    pub fn list(&self, kind: &'static str) -> Result<Vec<(Uuid, Doc)>, StoreError> {
        self.after(kind, None).collect()
    }

    /// The documents of a kind after `marker` (all, if none), in uuid order, read one at
    /// a time as the iterator is driven: a list never holds more than the one it shows.
    pub fn after(
        &self,
        kind: &'static str,
        marker: Option<Uuid>,
    ) -> impl Iterator<Item = Result<(Uuid, Doc), StoreError>> + Send + 'static {
        let mut prefix = kind.as_bytes().to_vec();
        prefix.push(0);
        let start = match marker {
            // The key right after the marker's: the marker itself is not listed.
            Some(m) => {
                let mut k = doc_key(kind, m);
                k.push(0);
                k
            }
            None => prefix.clone(),
        };
        let mut end = kind.as_bytes().to_vec();
        end.push(1);
        let skip = prefix.len();
        self.docs.range(start..end).map(move |item| {
            let (k, v) = item?;
            let uuid =
                Uuid::from_slice(&k[skip..]).map_err(|e| StoreError::Corrupt(e.to_string()))?;
            let doc = serde_json::from_slice(&v)
                .map_err(|e| StoreError::Corrupt(format!("{kind} {uuid}: {e}")))?;
            Ok((uuid, doc))
        })
    }

    pub fn insert(
        &self,
        kind: &'static str,
        uuid: Uuid,
        doc: &Doc,
        unique: &[&'static str],
    ) -> Result<(), StoreError> {
        let _w = self.lock();
        self.write(kind, uuid, None, Some(doc), unique)
    }

    /// Changes a document under the writer lock; `change` may refuse with the caller's error.
    pub fn update<E: From<StoreError>>(
        &self,
        kind: &'static str,
        uuid: Uuid,
        unique: &[&'static str],
        change: impl FnOnce(&mut Doc) -> Result<(), E>,
    ) -> Result<Doc, E> {
        let _w = self.lock();
        let old = self.get(kind, uuid)?;
        let mut new = old.clone();
        change(&mut new)?;
        self.write(kind, uuid, Some(&old), Some(&new), unique)?;
        Ok(new)
    }

    pub fn delete(
        &self,
        kind: &'static str,
        uuid: Uuid,
        unique: &[&'static str],
    ) -> Result<(), StoreError> {
        let _w = self.lock();
        let old = self.get(kind, uuid)?;
        self.write(kind, uuid, Some(&old), None, unique)
    }

    /// The documents `cascade` names for `node`, as they are now; the caller holds the
    /// writer lock until they are removed.
    pub(super) fn attached(
        &self,
        node: Uuid,
        body: &crate::node::NodeBody,
        cascade: &Cascade,
    ) -> Result<Vec<Attached>, StoreError> {
        let wanted = Value::String(node.to_string());
        let mut out = Vec::new();
        for &(kind, unique) in &cascade.of_node {
            for (uuid, doc) in self.list(kind)? {
                if doc.get("node_uuid") == Some(&wanted) {
                    out.push(Attached {
                        kind,
                        uuid,
                        unique,
                        doc,
                    });
                }
            }
        }
        for &(attr, kind, unique) in &cascade.named_by {
            let named = body.attrs.get(attr).and_then(Value::as_str);
            let Some(uuid) = named.and_then(|u| Uuid::parse_str(u).ok()) else {
                continue;
            };
            match self.get(kind, uuid) {
                Ok(doc) => out.push(Attached {
                    kind,
                    uuid,
                    unique,
                    doc,
                }),
                Err(StoreError::DocumentNotFound { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }

    fn write(
        &self,
        kind: &'static str,
        uuid: Uuid,
        old: Option<&Doc>,
        new: Option<&Doc>,
        unique: &[&'static str],
    ) -> Result<(), StoreError> {
        let before = old.map(|d| unique_values(d, unique)).unwrap_or_default();
        let after = new.map(|d| unique_values(d, unique)).unwrap_or_default();
        let json = new.map(|d| serde_json::to_vec(d).expect("a document serialises"));
        if let (Some(doc), Some(j)) = (new, &json) {
            check_document_sizes(kind, doc, j, old)?;
        }
        let key = doc_key(kind, uuid);
        (&self.docs, &self.index).transaction(|(docs, index)| -> TxResult<()> {
            if old.is_none() && docs.get(&key)?.is_some() {
                return abort(StoreError::DocumentTaken {
                    kind,
                    field: "uuid",
                    value: uuid.to_string(),
                });
            }
            for (field, value) in &before {
                if !after.contains(&(field, value.clone())) {
                    index.remove(index_key(kind, field, value))?;
                }
            }
            for (field, value) in &after {
                let k = index_key(kind, field, value);
                match index.get(&k)? {
                    Some(holder) if holder.as_ref() != uuid.as_bytes() => {
                        return abort(StoreError::DocumentTaken {
                            kind,
                            field,
                            value: value.replace('\0', " "),
                        });
                    }
                    _ => {
                        index.insert(k, uuid.as_bytes().as_slice())?;
                    }
                }
            }
            match &json {
                Some(j) => docs.insert(key.as_slice(), j.as_slice())?,
                None => docs.remove(key.as_slice())?,
            };
            Ok(())
        })?;
        super::flush(&self.db)
    }
}
