//! A node as `GET /v1/nodes/{ident}` and the node lists show it, serialised straight from
//! the stored node and a table of its fields.
//!
//! Building a `serde_json::Value` map of the whole node, masking it, then serialising and
//! dropping it was a fifth of a GET's CPU (perf, 1.115, 10k nodes). Here nothing of the
//! node is copied: each field is written from where the node keeps it, secrets masked as
//! they are written. The table is sorted by name, so the document reads as the `Value`
//! one did; a filter reads one field with [`NodeView::get`].

use std::sync::LazyLock;

use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};
use serde_json::{Map, Value};

use super::http::version::Version;
use super::node_doc;
use super::view;
use crate::agent_sessions::AgentSession;
use crate::hardware;
use crate::node::Node;
use crate::state_machine::ProvisionState;

/// Where a field's value comes from.
#[derive(Clone, Copy)]
enum Part {
    Uuid,
    Name,
    Driver,
    DriverInfo,
    DriverInternalInfo,
    InstanceInfo,
    Properties,
    Extra,
    LastError,
    PowerState,
    TargetPowerState,
    Maintenance,
    MaintenanceReason,
    Reservation,
    CreatedAt,
    UpdatedAt,
    ProvisionState,
    TargetProvisionState,
    ProvisionUpdatedAt,
    /// `boot_interface` is `interfaces["boot"]`.
    Interface(&'static str),
    /// A field kept in `body.attrs` by its name, and its value when the node has none.
    Attr(&'static str, &'static Value),
    /// A field the engine does not keep (no console, no steps shown, one conductor).
    Fixed(&'static Value),
    /// The engine showing the node.
    Conductor,
    /// Links to the node (`""`) or to one of its sub-resources.
    Links(&'static str),
}

struct Entry {
    name: &'static str,
    /// The microversion the field came with (`links`: always shown).
    since: u32,
    part: Part,
}

static FIXED: LazyLock<[(&str, Value); 3]> = LazyLock::new(|| {
    [
        ("clean_step", Value::Object(Map::new())),
        ("deploy_step", Value::Object(Map::new())),
        ("service_step", Value::Object(Map::new())),
    ]
});

/// Every field of a node document, sorted by name.
static TABLE: LazyLock<Vec<Entry>> = LazyLock::new(|| {
    use Part as P;
    let mut parts: Vec<(&'static str, Part)> = vec![
        ("uuid", P::Uuid),
        ("name", P::Name),
        ("driver", P::Driver),
        ("driver_info", P::DriverInfo),
        ("driver_internal_info", P::DriverInternalInfo),
        ("instance_info", P::InstanceInfo),
        ("properties", P::Properties),
        ("extra", P::Extra),
        ("last_error", P::LastError),
        ("power_state", P::PowerState),
        ("target_power_state", P::TargetPowerState),
        ("maintenance", P::Maintenance),
        ("maintenance_reason", P::MaintenanceReason),
        ("reservation", P::Reservation),
        ("created_at", P::CreatedAt),
        ("updated_at", P::UpdatedAt),
        ("provision_state", P::ProvisionState),
        ("target_provision_state", P::TargetProvisionState),
        ("provision_updated_at", P::ProvisionUpdatedAt),
        ("conductor", P::Conductor),
        ("links", P::Links("")),
        ("ports", P::Links("/ports")),
        ("states", P::Links("/states")),
        ("portgroups", P::Links("/portgroups")),
        ("volume", P::Links("/volume")),
    ];
    for (kind, _) in hardware::KINDS {
        let name = node_doc::NODE
            .fields
            .iter()
            .find(|f| f.name.strip_suffix("_interface") == Some(kind))
            .expect("every interface kind is a node field")
            .name;
        parts.push((name, P::Interface(kind)));
    }
    for (name, default) in node_doc::attrs() {
        parts.push((name, P::Attr(name, default)));
    }
    for (name, value) in FIXED.iter() {
        parts.push((name, P::Fixed(value)));
    }
    let mut table: Vec<Entry> = parts
        .into_iter()
        .map(|(name, part)| Entry {
            name,
            since: node_doc::NODE.field(name).map_or(1, |f| f.since),
            part,
        })
        .collect();
    table.sort_by_key(|e| e.name);
    table
});

/// A provision state as a version shows it: before 1.2, `available` did not exist yet
/// and Ironic shows it as null (its "no state").
pub fn shown_state(state: ProvisionState, version: Version) -> Option<ProvisionState> {
    (version.at_least(2) || state != ProvisionState::Available).then_some(state)
}

/// One node as the API shows it at `version`: every field the version has, or `only`
/// the named ones.
pub struct NodeView<'a> {
    pub base: &'a str,
    /// The engine the node's calls go to (see [`crate::conductor_groups::Conductors`]).
    pub conductor: Option<&'a str>,
    pub node: &'a Node,
    /// What the node's agent last said (kept in memory, not written per heartbeat).
    pub agent: Option<&'a AgentSession>,
    pub version: Version,
    pub only: Option<&'a [&'a str]>,
}

/// A node's document is 2–4 KB: written into a buffer that size from the start, not
/// one that starts at 128 bytes and is copied as it doubles (`axum::Json`'s).
const DOCUMENT_CAPACITY: usize = 4096;

impl axum::response::IntoResponse for NodeView<'_> {
    fn into_response(self) -> axum::response::Response {
        use bytes::BufMut;
        let mut buf = bytes::BytesMut::with_capacity(DOCUMENT_CAPACITY).writer();
        match serde_json::to_writer(&mut buf, &self) {
            Ok(()) => (
                [(
                    axum::http::header::CONTENT_TYPE,
                    axum::http::HeaderValue::from_static("application/json"),
                )],
                buf.into_inner().freeze(),
            )
                .into_response(),
            Err(e) => super::http::error::ApiError::new(
                axum::http::StatusCode::INTERNAL_SERVER_ERROR,
                format!("the node's document could not be written: {e}"),
            )
            .into_response(),
        }
    }
}

impl NodeView<'_> {
    fn shows(&self, e: &Entry) -> bool {
        self.version.at_least(e.since) && self.only.is_none_or(|only| only.contains(&e.name))
    }

    /// One field as the document shows it (`null` for a field this version lacks), for
    /// filters.
    pub fn get(&self, name: &str) -> Value {
        let Ok(i) = TABLE.binary_search_by_key(&name, |e| e.name) else {
            return Value::Null;
        };
        let e = &TABLE[i];
        if !self.version.at_least(e.since) {
            return Value::Null;
        }
        serde_json::to_value(Shown {
            view: self,
            part: e.part,
        })
        .unwrap_or(Value::Null)
    }
}

impl Serialize for NodeView<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(None)?;
        for e in TABLE.iter().filter(|e| self.shows(e)) {
            map.serialize_entry(
                e.name,
                &Shown {
                    view: self,
                    part: e.part,
                },
            )?;
        }
        map.end()
    }
}

struct Shown<'a> {
    view: &'a NodeView<'a>,
    part: Part,
}

impl Serialize for Shown<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let node = self.view.node;
        let (b, p) = (&node.body, &node.provision);
        match self.part {
            Part::Uuid => b.uuid.serialize(s),
            Part::Name => b.name.serialize(s),
            Part::Driver => b.driver.serialize(s),
            Part::DriverInfo => Masked(&b.driver_info, None).serialize(s),
            Part::DriverInternalInfo => {
                Masked(&b.driver_internal_info, self.view.agent).serialize(s)
            }
            Part::InstanceInfo => Masked(&b.instance_info, None).serialize(s),
            Part::Properties => b.properties.serialize(s),
            Part::Extra => b.extra.serialize(s),
            Part::LastError => b.last_error.serialize(s),
            Part::PowerState => b.power_state.serialize(s),
            Part::TargetPowerState => b.target_power_state.serialize(s),
            Part::Maintenance => b.maintenance.serialize(s),
            Part::MaintenanceReason => b.maintenance_reason.serialize(s),
            Part::Reservation => b.reservation.serialize(s),
            Part::CreatedAt => b.created_at.to_datetime().serialize(s),
            Part::UpdatedAt => b.updated_at.map(|t| t.to_datetime()).serialize(s),
            Part::ProvisionState => shown_state(p.state, self.view.version).serialize(s),
            Part::TargetProvisionState => p.target.serialize(s),
            Part::ProvisionUpdatedAt => p.updated_at.to_datetime().serialize(s),
            Part::Interface(kind) => b.interfaces.get(kind).serialize(s),
            Part::Attr(name, default) => b.attrs.get(name).unwrap_or(default).serialize(s),
            Part::Fixed(value) => value.serialize(s),
            Part::Conductor => self.view.conductor.serialize(s),
            Part::Links(sub) => Links {
                base: self.view.base,
                id: b.uuid,
                sub,
            }
            .serialize(s),
        }
    }
}

/// A map with its secrets masked (`******`, as Ironic's `node_sanitize`); for
/// driver_internal_info, what the agent last said is shown over what is stored (Ironic
/// keeps `agent_url`, `agent_version` and `agent_last_heartbeat` there;
/// `agent_status_message` is the agent's own progress line).
struct Masked<'a>(&'a Map<String, Value>, Option<&'a AgentSession>);

impl Serialize for Masked<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let agent = self.1;
        let url = agent.and_then(|a| a.url.as_ref()).map(|u| u.as_str());
        let version = agent.and_then(|a| a.version.as_deref());
        let beat = agent.and_then(|a| a.last_heartbeat);
        let status = agent.and_then(|a| a.status_message.as_deref());
        let shown_over = |k: &str| match k {
            "agent_url" => url.is_some(),
            "agent_version" => version.is_some(),
            "agent_last_heartbeat" => beat.is_some(),
            "agent_status_message" => status.is_some(),
            _ => false,
        };
        let mut map = s.serialize_map(None)?;
        for (k, v) in self.0.iter().filter(|(k, _)| !shown_over(k)) {
            if view::secret(k) {
                map.serialize_entry(k, view::MASK)?;
            } else {
                map.serialize_entry(k, v)?;
            }
        }
        if let Some(beat) = beat {
            map.serialize_entry("agent_last_heartbeat", &format_args!("{beat}"))?;
        }
        for (k, v) in [
            ("agent_status_message", status),
            ("agent_url", url),
            ("agent_version", version),
        ] {
            if let Some(v) = v {
                map.serialize_entry(k, v)?;
            }
        }
        map.end()
    }
}

/// `[{"href": …/v1/nodes/{id}{sub}, "rel": "self"}, {"href": …/nodes/{id}{sub}, …}]`.
struct Links<'a> {
    base: &'a str,
    id: uuid::Uuid,
    sub: &'a str,
}

impl Serialize for Links<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        struct Link<'a>(&'a Links<'a>, &'static str, &'static str);
        impl Serialize for Link<'_> {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                let Link(l, prefix, rel) = self;
                let mut map = s.serialize_map(Some(2))?;
                let href = format_args!("{}{prefix}/nodes/{}{}", l.base, l.id, l.sub);
                map.serialize_entry("href", &href)?;
                map.serialize_entry("rel", rel)?;
                map.end()
            }
        }
        let mut seq = s.serialize_seq(Some(2))?;
        seq.serialize_element(&Link(self, "/v1", "self"))?;
        seq.serialize_element(&Link(self, "", "bookmark"))?;
        seq.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::agent_sessions::CallbackUrl;
    use crate::node::NodeBody;
    use serde_json::json;

    fn node() -> Node {
        let body: NodeBody = serde_json::from_value(json!({
            "uuid": "1be26c0b-03f2-4d2e-ae87-c02d7f33c123", "name": "n1", "driver": "fake",
            "driver_info": {"ipmi_password": "x", "ipmi_address": "1.2.3.4", "Redfish_Token": 1},
            "driver_internal_info": {"agent_url": "old", "agent_token_hash": "h"},
            "instance_info": {}, "properties": {}, "extra": {"password": "an operator's"},
            "last_error": null, "power_state": null, "target_power_state": null,
            "maintenance": false, "maintenance_reason": null, "reservation": null,
            "interfaces": {"boot": "pxe"}, "attrs": {"owner": "me"},
            "created_at": "2026-01-01T00:00:00Z", "updated_at": null
        }))
        .unwrap();
        Node::waiting_for_tests(body)
    }

    fn show(node: &Node, agent: Option<&AgentSession>, v: u32, only: Option<&[&str]>) -> Value {
        let version = Version(v);
        let view = NodeView {
            base: "http://h:1",
            conductor: Some(crate::node::CONDUCTOR),
            node,
            agent,
            version,
            only,
        };
        let text = serde_json::to_string(&view).unwrap();
        serde_json::from_str(&text).unwrap()
    }

    #[test]
    fn secrets_are_masked_in_any_case_and_the_agents_words_shown_over_the_stored() {
        let node = node();
        let agent = AgentSession {
            url: Some(CallbackUrl::parse("https://10.0.0.1:9999").unwrap()),
            version: Some("13.0".into()),
            ..Default::default()
        };
        let doc = show(&node, Some(&agent), 115, None);
        assert_eq!(
            doc["driver_info"],
            json!({"ipmi_password": "******", "ipmi_address": "1.2.3.4", "Redfish_Token": "******"})
        );
        assert_eq!(
            doc["driver_internal_info"],
            json!({"agent_url": "https://10.0.0.1:9999", "agent_token_hash": "******", "agent_version": "13.0"})
        );
        assert_eq!(
            doc["extra"]["password"], "an operator's",
            "extra is the operator's own"
        );
        assert_eq!(doc["provision_state"], "wait call-back");
        assert_eq!(doc["provision_updated_at"], "2026-02-03T04:05:06Z");
        assert_eq!(
            (&doc["boot_interface"], &doc["deploy_interface"]),
            (&json!("pxe"), &Value::Null)
        );
        assert_eq!((&doc["owner"], &doc["traits"]), (&json!("me"), &json!([])));
        assert_eq!(
            doc["links"][1],
            json!({"href": "http://h:1/nodes/1be26c0b-03f2-4d2e-ae87-c02d7f33c123", "rel": "bookmark"})
        );
        assert_eq!(
            doc["ports"][0]["href"],
            "http://h:1/v1/nodes/1be26c0b-03f2-4d2e-ae87-c02d7f33c123/ports"
        );
        assert_eq!(doc.as_object().unwrap().len(), TABLE.len());
        let stored = show(&node, None, 115, None);
        assert_eq!(stored["driver_internal_info"]["agent_url"], "old");
    }

    #[test]
    fn a_version_shows_its_fields_and_fields_only_the_named() {
        let node = node();
        let old = show(&node, None, 1, None);
        assert!(
            old.get("owner").is_none() && old.get("name").is_none() && old.get("uuid").is_some()
        );
        let view = NodeView {
            base: "",
            conductor: Some(crate::node::CONDUCTOR),
            node: &node,
            agent: None,
            version: Version(1),
            only: None,
        };
        assert_eq!(
            (view.get("owner"), view.get("uuid")),
            (Value::Null, json!(node.uuid()))
        );
        let only = show(&node, None, 115, Some(&["uuid", "links"]));
        assert_eq!(
            only.as_object().unwrap().keys().collect::<Vec<_>>(),
            ["links", "uuid"]
        );
    }

    #[test]
    fn the_table_is_the_node_schema_plus_links() {
        let mut names: Vec<&str> = TABLE.iter().map(|e| e.name).collect();
        names.retain(|n| *n != "links");
        let mut schema: Vec<&str> = node_doc::NODE.fields.iter().map(|f| f.name).collect();
        schema.sort();
        assert_eq!(names, schema);
    }
}
