//! Ironic's documents as clients decode them: a node, a port, and their collections.
//!
//! The engine renders these (gated by microversion, trimmed by `?fields=`), so a field a
//! client did not ask for, or that its version does not have, may be absent: every field
//! but the uuid has a default. What a client needs beyond the typed fields is kept in
//! `other`, as the engine sent it.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::state_machine::ProvisionState;

/// `GET /v1/nodes/{id}`, and each entry of a node list.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Node {
    pub uuid: String,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub driver: String,
    /// Absent only when `?fields=` left it out.
    #[serde(default)]
    pub provision_state: Option<ProvisionState>,
    /// The state a flow in progress is heading for; `None` when the node is settled.
    #[serde(default)]
    pub target_provision_state: Option<ProvisionState>,
    #[serde(default)]
    pub provision_updated_at: Option<String>,
    #[serde(default)]
    pub power_state: Option<String>,
    #[serde(default)]
    pub target_power_state: Option<String>,
    #[serde(default)]
    pub last_error: Option<String>,
    #[serde(default)]
    pub maintenance: bool,
    #[serde(default)]
    pub driver_info: Map<String, Value>,
    #[serde(default)]
    pub driver_internal_info: Map<String, Value>,
    #[serde(default)]
    pub instance_info: Map<String, Value>,
    #[serde(default)]
    pub properties: Map<String, Value>,
    #[serde(default)]
    pub extra: Map<String, Value>,
    /// Every other field the engine sent.
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

impl Node {
    /// The node's name, or its uuid when it has none.
    pub fn ident(&self) -> &str {
        self.name.as_deref().unwrap_or(&self.uuid)
    }

    /// Whether no flow is under way (no target state).
    pub fn is_settled(&self) -> bool {
        self.target_provision_state.is_none()
    }
}

/// `GET /v1/nodes` and `GET /v1/nodes/detail`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NodeCollection {
    pub nodes: Vec<Node>,
    /// The url of the next page, when the list was cut at `limit`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
}

/// `GET /v1/ports/{id}`, and each entry of a port list.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Port {
    pub uuid: String,
    #[serde(default)]
    pub address: String,
    #[serde(default)]
    pub node_uuid: Option<String>,
    #[serde(default)]
    pub pxe_enabled: Option<bool>,
    #[serde(default)]
    pub extra: Map<String, Value>,
    /// Every other field the engine sent.
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

/// `GET /v1/ports` and `GET /v1/nodes/{id}/ports`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PortCollection {
    pub ports: Vec<Port>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
}

/// One event of `GET /v1/nodes/{id}/history?detail=true` (1.78; `state` and
/// `duration_seconds` from 1.115): a provision state change, or a milestone within a
/// state (power, lookup, first heartbeat, an image transfer's start and end).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HistoryEvent {
    pub uuid: String,
    /// RFC 3339.
    pub created_at: String,
    /// `INFO`, or `ERROR` for the change that failed the node.
    pub severity: String,
    pub event: String,
    #[serde(default)]
    pub state: Option<String>,
    #[serde(default)]
    pub duration_seconds: Option<f64>,
}

/// `GET /v1/nodes/{id}/history`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct History {
    pub history: Vec<HistoryEvent>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_brief_node_decodes_and_keeps_what_it_does_not_type() {
        let node: Node = serde_json::from_value(serde_json::json!({
            "uuid": "1be26c0b-03f2-4d2e-ae87-c02d7f33c123",
            "provision_state": "wait call-back",
            "target_provision_state": "active",
            "links": [],
        }))
        .unwrap();
        assert_eq!(node.provision_state, Some(ProvisionState::WaitCallBack));
        assert!(!node.is_settled());
        assert_eq!(node.ident(), node.uuid);
        assert!(node.other.contains_key("links"));
    }

    #[test]
    fn a_state_outside_ironics_machine_is_an_error() {
        let node = serde_json::from_value::<Node>(serde_json::json!({
            "uuid": "x", "provision_state": "deploying-ish",
        }));
        assert!(node.is_err());
    }
}
