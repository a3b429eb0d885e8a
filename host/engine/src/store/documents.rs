//! Resources the engine keeps but runs no flows on (chassis, port groups, allocations,
//! deploy templates, runbooks, inspection rules, volume connectors and targets, inventories):
//! JSON documents by kind and uuid, some fields unique within their kind. The rules every
//! backend applies to them live here: which values a document's unique fields hold, how
//! large a field may be, what goes with a deleted node.

use serde_json::{Map, Value};

use super::StoreError;

pub type Doc = Map<String, Value>;

/// The indexed values of a document: for `"type+connector_id"`, the two values joined.
pub(crate) fn unique_values<'a>(doc: &Doc, unique: &[&'a str]) -> Vec<(&'a str, String)> {
    unique
        .iter()
        .filter_map(|spec| {
            let parts: Option<Vec<String>> = spec
                .split('+')
                .map(|f| match doc.get(f) {
                    Some(Value::String(s)) => Some(s.clone()),
                    Some(Value::Null) | None => None,
                    Some(other) => Some(other.to_string()),
                })
                .collect();
            parts.map(|p| (*spec, p.join("\0")))
        })
        .collect()
}

/// What goes with a node when it is deleted.
#[derive(Clone, Debug, Default)]
pub struct Cascade {
    /// Kinds (with their unique fields) whose documents naming the node in `node_uuid` go.
    pub of_node: Vec<(&'static str, &'static [&'static str])>,
    /// Documents the node's body names by uuid in an attribute (attribute, kind, unique
    /// fields): its allocation (`allocation_uuid`). Read under the node's lock.
    pub named_by: Vec<(&'static str, &'static str, &'static [&'static str])>,
}

/// Each field of a document is held to what a node's maps are ([`MAX_FIELD_BYTES`]): every
/// list reads whole documents, and 150 chassis with a 900 KiB `extra` each took a list to
/// 1.47 GB. `encoded` is the document's size: under the limit nothing is measured. A field
/// unchanged from `old` is not checked, so a document stored before the limit can still
/// be changed elsewhere or deleted. A string or key holding the NUL character is refused
/// (see [`crate::node::check_no_nul`]).
pub(super) fn check_document_sizes(
    kind: &'static str,
    doc: &Doc,
    encoded: &[u8],
    old: Option<&Doc>,
) -> Result<(), StoreError> {
    use crate::node::{InvalidField, MAX_FIELD_BYTES};
    crate::node::check_no_nul(&format!("the {kind}"), doc, encoded, old)?;
    if encoded.len() <= MAX_FIELD_BYTES {
        return Ok(());
    }
    for (field, value) in doc {
        if old.and_then(|o| o.get(field)) == Some(value) {
            continue;
        }
        let size = serde_json::to_vec(value).map_or(usize::MAX, |v| v.len());
        if size > MAX_FIELD_BYTES {
            return Err(InvalidField::DocumentFieldTooLarge {
                kind,
                field: field.clone(),
                size,
            }
            .into());
        }
    }
    Ok(())
}
