//! What every document on the wire shares: links, secrets masked, `?fields=`. A node's
//! own document is [`super::node_view`].

use serde_json::{Map, Value, json};

/// What a secret's value is shown as.
pub const MASK: &str = "******";

/// Keys whose values are never shown (Ironic's `node_sanitize` masks these the same way):
/// compared in any case, without a lowered copy (every key of every node shown is).
pub fn secret(key: &str) -> bool {
    ["password", "secret", "token", "credential", "key"]
        .iter()
        .any(|s| {
            key.as_bytes()
                .windows(s.len())
                .any(|w| w.eq_ignore_ascii_case(s.as_bytes()))
        })
}

pub fn mask(map: &Map<String, Value>) -> Value {
    Value::Object(
        map.iter()
            .map(|(k, v)| (k.clone(), if secret(k) { json!(MASK) } else { v.clone() }))
            .collect(),
    )
}

pub fn links(base: &str, kind: &str, id: &str) -> Value {
    json!([
        {"href": format!("{base}/v1/{kind}/{id}"), "rel": "self"},
        {"href": format!("{base}/{kind}/{id}"), "rel": "bookmark"},
    ])
}

/// Only the named fields of a node document.
pub fn fields(doc: Value, fields: &[&str]) -> Value {
    let Value::Object(obj) = doc else { return doc };
    Value::Object(
        obj.into_iter()
            .filter(|(k, _)| fields.contains(&k.as_str()))
            .collect(),
    )
}
