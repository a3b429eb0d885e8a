//! What a node and a port are, as stored and as the API shows them.
//!
//! A node is stored in two parts. Its [`Provision`] record (state, target and clock) is
//! small and fixed-size, because heartbeats rewrite it thousands of times a second; the
//! [`NodeBody`] (everything else, JSON maps included) is rewritten only when an operator or
//! a driver changes it. [`Node`] is the two side by side, flattened into one JSON object.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use uuid::Uuid;

use crate::clock::Timestamp;
use crate::state_machine::ProvisionState;

pub type JsonMap = Map<String, Value>;

/// Everything about a node except its provisioning clock.
///
/// Stored as JSON without its empty fields (a bare node is about 100 bytes rather than
/// 420): every field reads back as its default when absent, so bodies written with them
/// read the same. The API's views are built field by field ([`crate::api`]), never from
/// this serialisation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NodeBody {
    pub uuid: Uuid,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub driver: String,
    #[serde(default, skip_serializing_if = "JsonMap::is_empty")]
    pub driver_info: JsonMap,
    #[serde(default, skip_serializing_if = "JsonMap::is_empty")]
    pub instance_info: JsonMap,
    #[serde(default, skip_serializing_if = "JsonMap::is_empty")]
    pub properties: JsonMap,
    /// Scratch space of the driver and of the agent protocol (agent url, token hash, …).
    #[serde(default, skip_serializing_if = "JsonMap::is_empty")]
    pub driver_internal_info: JsonMap,
    #[serde(default, skip_serializing_if = "JsonMap::is_empty")]
    pub extra: JsonMap,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power_state: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_power_state: Option<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub maintenance: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maintenance_reason: Option<String>,
    /// Who holds the node for a long operation (a conductor task), if anyone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reservation: Option<String>,
    /// Its Ironic interfaces by kind (`deploy` → `direct`): see [`crate::hardware`].
    #[serde(default, skip_serializing_if = "Interfaces::is_empty")]
    pub interfaces: Interfaces,
    /// The Ironic fields the engine stores but does not act on (`resource_class`,
    /// `owner`, `traits`, `instance_uuid`, …), by their API names.
    #[serde(default, skip_serializing_if = "JsonMap::is_empty")]
    pub attrs: JsonMap,
    #[serde(with = "rfc3339")]
    pub created_at: Timestamp,
    #[serde(
        default,
        with = "rfc3339::option",
        skip_serializing_if = "Option::is_none"
    )]
    pub updated_at: Option<Timestamp>,
}

/// Where a node is in its provisioning flow, and since when.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Provision {
    #[serde(rename = "provision_state")]
    pub state: ProvisionState,
    #[serde(rename = "target_provision_state")]
    pub target: Option<ProvisionState>,
    /// Moved by every state change and by every touch (a live agent's heartbeat).
    #[serde(rename = "provision_updated_at", with = "rfc3339")]
    pub updated_at: Timestamp,
    /// When the sweeper fails the node, if it is in a wait state with its timeout enabled.
    #[serde(skip)]
    pub deadline: Option<Timestamp>,
    /// Where the node's one entry in the deadline index is: at or before `deadline`. A
    /// touch moves `deadline` only; the sweeper re-files the entry when it comes due.
    #[serde(skip)]
    pub indexed: Option<Timestamp>,
    /// When the node's work last moved on (a state change, or an agent's progress), from
    /// which its stall timeout runs.
    #[serde(skip)]
    pub progress_at: Timestamp,
    /// A fingerprint of the progress last reported (0: none in this state yet); a report
    /// that differs is progress.
    #[serde(skip)]
    pub progress: u64,
}

/// A node as the engine and its API see it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Node {
    #[serde(flatten)]
    pub body: NodeBody,
    #[serde(flatten)]
    pub provision: Provision,
}

impl NodeBody {
    /// Whether the operator protected the node: it cannot then be torn down, rebuilt or
    /// deleted until they unprotect it (Ironic's `protected`, API 1.48).
    pub fn is_protected(&self) -> bool {
        self.attrs.get("protected") == Some(&serde_json::Value::Bool(true))
    }
}

impl Node {
    pub fn uuid(&self) -> Uuid {
        self.body.uuid
    }

    /// A node waiting for its agent's call-back (to `active`) since a fixed time: the
    /// state tests of what a ramdisk or a view sees start from.
    #[cfg(test)]
    pub(crate) fn waiting_for_tests(body: NodeBody) -> Node {
        let t = crate::clock::Timestamp::from_datetime("2026-02-03T04:05:06Z".parse().unwrap());
        let provision = Provision {
            state: ProvisionState::WaitCallBack,
            target: Some(ProvisionState::Active),
            updated_at: t,
            deadline: None,
            indexed: None,
            progress_at: t,
            progress: 0,
        };
        Node { body, provision }
    }

    pub fn state(&self) -> ProvisionState {
        self.provision.state
    }
}

/// The name this engine answers to as an Ironic conductor (a node's `conductor`, the
/// `hosts` of `/v1/conductors`, who wrote a history event).
pub const CONDUCTOR: &str = "deployd";

/// A node's Ironic interfaces, by kind (`deploy` → `direct`); [`crate::hardware`] resolves
/// and checks them.
pub type Interfaces = std::collections::BTreeMap<String, String>;

/// driver_internal_info key of the pinned driver version.
pub const DRIVER_HASH: &str = "driver_hash";
/// driver_internal_info key of the sha256 of the agent token issued for this boot.
pub const AGENT_TOKEN_HASH: &str = "agent_token_hash";
/// driver_internal_info key of the sha256 of the certificate (DER) this boot's agent
/// registered (`agent_verify_ca`): its pin, kept across an engine restart with the token's
/// hash, and wiped with it.
pub const AGENT_CA_SHA256: &str = "agent_verify_ca_sha256";
/// driver_internal_info key: the steps of a manual cleaning, for the driver.
pub const CLEAN_STEPS: &str = "clean_steps";

/// What an operator gives to enroll a node.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewNode {
    pub uuid: Option<Uuid>,
    pub name: Option<String>,
    pub driver: String,
    #[serde(default)]
    pub driver_info: JsonMap,
    #[serde(default)]
    pub instance_info: JsonMap,
    #[serde(default)]
    pub properties: JsonMap,
    #[serde(default)]
    pub extra: JsonMap,
    #[serde(default)]
    pub interfaces: Interfaces,
    #[serde(default)]
    pub attrs: JsonMap,
}

/// A network port of a node. The agent finds its node by the MACs of its ports.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Port {
    pub uuid: Uuid,
    /// The MAC address, normalised to lower case `aa:bb:cc:dd:ee:ff`.
    pub address: String,
    pub node_uuid: Uuid,
    #[serde(default)]
    pub extra: JsonMap,
    #[serde(default = "yes")]
    pub pxe_enabled: bool,
    /// The Ironic fields stored but not acted on (`portgroup_uuid`,
    /// `local_link_connection`, `physical_network`, `is_smartnic`), by API name.
    #[serde(default)]
    pub attrs: JsonMap,
    #[serde(with = "rfc3339")]
    pub created_at: Timestamp,
    #[serde(default, with = "rfc3339::option")]
    pub updated_at: Option<Timestamp>,
}

fn yes() -> bool {
    true
}

/// The strings of a list field in a JSON map (traits, VIFs); none if absent.
pub fn strings(map: &JsonMap, key: &str) -> Vec<String> {
    map.get(key)
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

/// Sets a list field in a JSON map; an empty list removes the field.
pub fn set_strings(map: &mut JsonMap, key: &str, list: Vec<String>) {
    if list.is_empty() {
        map.remove(key);
    } else {
        map.insert(key.into(), Value::from(list));
    }
}

/// Why a node name or a MAC address is not acceptable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidField {
    #[error(
        "invalid node name {0:?}: use 1 to 255 of the characters A-Z a-z 0-9 - . _ ~, and not the shape of a UUID"
    )]
    Name(String),
    #[error("invalid MAC address {0:?}: expected six hex pairs separated by ':' or '-'")]
    Mac(String),
    #[error(
        "{field} is {size} bytes as JSON; the limit is {MAX_FIELD_BYTES} bytes, what Ironic's TEXT columns hold"
    )]
    TooLarge { field: &'static str, size: usize },
    #[error(
        "{kind} field {field} is {size} bytes as JSON; the limit is {MAX_FIELD_BYTES} bytes, what Ironic's TEXT columns hold"
    )]
    DocumentFieldTooLarge {
        kind: &'static str,
        field: String,
        size: usize,
    },
    #[error(
        "{0} holds the NUL character (\\u0000) in a string or a key, which deployd does not keep: PostgreSQL's text cannot hold it, and a record is the same in every store"
    )]
    Nul(String),
}

/// Refuses `record` (named `what`) if a string or key in it holds the NUL character,
/// unless `old` held one too (a record stored before this check can still be changed).
/// `encoded` is its JSON: only where that holds `\u0000` is the record looked into.
pub fn check_no_nul<T: serde::Serialize>(
    what: &str,
    record: &T,
    encoded: &[u8],
    old: Option<&T>,
) -> Result<(), InvalidField> {
    fn holds(value: &Value) -> bool {
        match value {
            Value::String(s) => s.contains('\0'),
            Value::Array(items) => items.iter().any(holds),
            Value::Object(map) => map.iter().any(|(k, v)| k.contains('\0') || holds(v)),
            _ => false,
        }
    }
    let nul = |r: &T| serde_json::to_value(r).is_ok_and(|v| holds(&v));
    if !encoded.windows(6).any(|w| w == b"\\u0000") || !nul(record) {
        return Ok(());
    }
    match old {
        Some(old) if nul(old) => Ok(()),
        _ => Err(InvalidField::Nul(what.to_owned())),
    }
}

/// The most bytes (as JSON) that one of a node's operator-given maps may hold. Every list
/// and show reads whole records, so an unbounded `extra` made a list of 150 nodes use
/// 300 MB; Ironic's database columns for these fields hold 64 KiB.
pub const MAX_FIELD_BYTES: usize = 64 << 10;

/// Checks the operator-given maps of a node against [`MAX_FIELD_BYTES`]. `encoded` is the
/// size of the whole body as JSON: under the limit, no field can be over it, so the
/// common case measures nothing. Fields equal to `old`'s are not checked, so a record
/// stored before the limit existed can still move through its flows.
pub fn check_sizes(
    body: &NodeBody,
    encoded: usize,
    old: Option<&NodeBody>,
) -> Result<(), InvalidField> {
    if encoded <= MAX_FIELD_BYTES {
        return Ok(());
    }
    fn fields(b: &NodeBody) -> [(&'static str, &JsonMap); 4] {
        [
            ("driver_info", &b.driver_info),
            ("instance_info", &b.instance_info),
            ("properties", &b.properties),
            ("extra", &b.extra),
        ]
    }
    let before = old.map(fields);
    for (i, (field, map)) in fields(body).into_iter().enumerate() {
        if before.is_some_and(|b| b[i].1 == map) {
            continue;
        }
        let size = serde_json::to_vec(map).map_or(usize::MAX, |v| v.len());
        if size > MAX_FIELD_BYTES {
            return Err(InvalidField::TooLarge { field, size });
        }
    }
    Ok(())
}

/// Checks a node name the way Ironic does (hostname characters plus `._~`). A name shaped
/// like a UUID is refused, since `GET /v1/nodes/{ident}` could not tell the two apart.
pub fn validate_name(name: &str) -> Result<(), InvalidField> {
    let ok_chars = name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"-._~".contains(&b));
    if name.is_empty() || name.len() > 255 || !ok_chars || Uuid::parse_str(name).is_ok() {
        return Err(InvalidField::Name(name.to_owned()));
    }
    Ok(())
}

/// Normalises a MAC address to lower case with colons.
pub fn normalize_mac(mac: &str) -> Result<String, InvalidField> {
    let parts: Vec<&str> = mac.split([':', '-']).collect();
    let valid = parts.len() == 6
        && parts
            .iter()
            .all(|p| p.len() == 2 && p.bytes().all(|b| b.is_ascii_hexdigit()));
    if !valid {
        return Err(InvalidField::Mac(mac.to_owned()));
    }
    Ok(parts.join(":").to_ascii_lowercase())
}

/// Serde glue: timestamps on the wire are RFC 3339 in UTC, as Ironic's are.
mod rfc3339 {
    use chrono::{DateTime, Utc};
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use crate::clock::Timestamp;

    pub fn serialize<S: Serializer>(t: &Timestamp, s: S) -> Result<S::Ok, S::Error> {
        t.to_datetime().serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Timestamp, D::Error> {
        DateTime::<Utc>::deserialize(d).map(Timestamp::from_datetime)
    }

    pub mod option {
        use super::*;

        pub fn serialize<S: Serializer>(t: &Option<Timestamp>, s: S) -> Result<S::Ok, S::Error> {
            t.map(Timestamp::to_datetime).serialize(s)
        }

        pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Timestamp>, D::Error> {
            Ok(Option::<DateTime<Utc>>::deserialize(d)?.map(Timestamp::from_datetime))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_ironic_rules() {
        for good in ["node-1", "rack4.u12", "a_b~c", "x"] {
            assert_eq!(validate_name(good), Ok(()), "{good}");
        }
        let long = "n".repeat(256);
        for bad in [
            "",
            "has space",
            "slash/",
            "é",
            long.as_str(),
            "1be26c0b-03f2-4d2e-ae87-c02d7f33c123",
        ] {
            assert!(validate_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn macs_are_normalised_or_refused() {
        assert_eq!(
            normalize_mac("52-54-00-AB-cd-01").unwrap(),
            "52:54:00:ab:cd:01"
        );
        for bad in ["52:54:00:ab:cd", "52:54:00:ab:cd:0g", "5254.00ab.cd01", ""] {
            assert!(normalize_mac(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_node_serialises_as_one_flat_ironic_shaped_object() {
        let t = Timestamp::from_micros(1_700_000_000_000_000);
        let node = Node {
            body: NodeBody {
                uuid: Uuid::nil(),
                name: Some("n1".into()),
                driver: "fake".into(),
                driver_info: JsonMap::new(),
                instance_info: JsonMap::new(),
                properties: JsonMap::new(),
                driver_internal_info: JsonMap::new(),
                extra: JsonMap::new(),
                last_error: None,
                power_state: None,
                target_power_state: None,
                maintenance: false,
                maintenance_reason: None,
                reservation: None,
                interfaces: Default::default(),
                attrs: JsonMap::new(),
                created_at: t,
                updated_at: None,
            },
            provision: Provision {
                state: ProvisionState::WaitCallBack,
                target: Some(ProvisionState::Active),
                updated_at: t,
                deadline: Some(t),
                indexed: Some(t),
                progress_at: t,
                progress: 0,
            },
        };
        let json = serde_json::to_value(&node).unwrap();
        assert_eq!(json["provision_state"], "wait call-back");
        assert_eq!(json["target_provision_state"], "active");
        assert_eq!(json["provision_updated_at"], "2023-11-14T22:13:20Z");
        assert_eq!(json["name"], "n1");
        assert!(json.get("deadline").is_none());
    }

    #[test]
    fn a_body_is_stored_without_its_empty_fields_and_reads_back_as_before() {
        let full = r#"{"uuid":"5828e4c6-34ac-4838-a302-4d57c4482759","name":null,"driver":"fake","driver_info":{},"instance_info":{},"properties":{},"driver_internal_info":{},"extra":{},"last_error":null,"power_state":null,"target_power_state":null,"maintenance":false,"maintenance_reason":null,"reservation":null,"interfaces":{},"attrs":{},"created_at":"2027-01-15T08:00:00Z","updated_at":null}"#;
        let body: NodeBody = serde_json::from_str(full).unwrap();
        let stored = serde_json::to_string(&body).unwrap();
        assert_eq!(
            stored,
            r#"{"uuid":"5828e4c6-34ac-4838-a302-4d57c4482759","driver":"fake","created_at":"2027-01-15T08:00:00Z"}"#
        );
        assert_eq!(serde_json::from_str::<NodeBody>(&stored).unwrap(), body);
        let busy = NodeBody {
            name: Some("n".into()),
            maintenance: true,
            last_error: Some("e".into()),
            updated_at: Some(body.created_at),
            ..body
        };
        let stored = serde_json::to_string(&busy).unwrap();
        assert_eq!(serde_json::from_str::<NodeBody>(&stored).unwrap(), busy);
    }
}
