//! How nodes and ports look on the wire: Ironic's field set, links, and secrets masked.

use serde_json::{Map, Value, json};

use super::http::version::Version;
use super::node_doc;
use crate::agent_sessions::AgentSession;
use crate::hardware;
use crate::node::Node;

pub use crate::node::CONDUCTOR;

/// Keys whose values are never shown (Ironic's `node_sanitize` masks these the same way).
fn secret(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    ["password", "secret", "token", "credential", "key"]
        .iter()
        .any(|s| key.contains(s))
}

pub fn mask(map: &Map<String, Value>) -> Value {
    Value::Object(
        map.iter()
            .map(|(k, v)| {
                (
                    k.clone(),
                    if secret(k) {
                        json!("******")
                    } else {
                        v.clone()
                    },
                )
            })
            .collect(),
    )
}

pub fn links(base: &str, kind: &str, id: &str) -> Value {
    json!([
        {"href": format!("{base}/v1/{kind}/{id}"), "rel": "self"},
        {"href": format!("{base}/{kind}/{id}"), "rel": "bookmark"},
    ])
}

/// The full node, as `GET /v1/nodes/{ident}` shows it. What its agent last said (kept in
/// memory, not written per heartbeat) shows in driver_internal_info, where Ironic keeps
/// `agent_url`, `agent_version` and `agent_last_heartbeat`; `agent_status_message` is
/// the agent's own progress line (bytes written).
pub fn node(base: &str, node: &Node, agent: Option<&AgentSession>, version: Version) -> Value {
    let mut v = serde_json::to_value(node).expect("a node serialises");
    let obj = v.as_object_mut().expect("a node is an object");
    let b = &node.body;
    obj.insert("driver_info".into(), mask(&b.driver_info));
    let mut internal = mask(&b.driver_internal_info);
    if let (Some(a), Value::Object(m)) = (agent, &mut internal) {
        let fields = [
            ("agent_url", a.url.as_ref().map(|u| u.as_str().to_owned())),
            ("agent_version", a.version.clone()),
            (
                "agent_last_heartbeat",
                a.last_heartbeat.map(|t| t.to_string()),
            ),
            ("agent_status_message", a.status_message.clone()),
        ];
        for (key, value) in fields {
            if let Some(value) = value {
                m.insert(key.into(), Value::String(value));
            }
        }
    }
    obj.insert("driver_internal_info".into(), internal);
    obj.insert("instance_info".into(), mask(&b.instance_info));
    obj.remove("interfaces");
    obj.remove("attrs");
    for (kind, _) in hardware::KINDS {
        obj.insert(hardware::field(kind), json!(b.interfaces.get(*kind)));
    }
    for (name, default) in node_doc::attrs() {
        let value = b.attrs.get(*name).unwrap_or(default).clone();
        obj.insert((*name).into(), value);
    }
    let uuid = b.uuid.to_string();
    for (key, value) in [
        ("console_enabled", json!(false)),
        ("clean_step", json!({})),
        ("deploy_step", json!({})),
        ("service_step", json!({})),
        ("conductor", json!(CONDUCTOR)),
        ("inspection_started_at", Value::Null),
        ("inspection_finished_at", Value::Null),
    ] {
        obj.insert(key.into(), value);
    }
    obj.insert("links".into(), links(base, "nodes", &uuid));
    obj.insert(
        "ports".into(),
        links(base, "nodes", &format!("{uuid}/ports")),
    );
    for sub in ["states", "portgroups", "volume"] {
        obj.insert(sub.into(), links(base, "nodes", &format!("{uuid}/{sub}")));
    }
    node_doc::NODE.show(obj, version);
    v
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
