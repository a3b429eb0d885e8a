//! Conductor groups, as Ironic has them: each engine serves one group (`[conductor]
//! conductor_group`, "" by default) and runs the steps of that group's nodes only (their
//! provision and power actions, their agents' heartbeats, their timeouts, their takeover
//! when an engine dies). Any engine still takes any call: one for a node of another group
//! is sent on to a live engine of that group (see `api::forward`), as Ironic's API sends
//! it to a conductor of the group over RPC; with none, the call fails as Ironic's does.

use std::sync::Arc;

use uuid::Uuid;

use crate::node::Node;
use crate::store::{EngineInfo, Store};

/// The longest group name Ironic takes.
const MAX_LEN: usize = 255;

/// A conductor group's name as the engine keeps it: Ironic's rule (up to 255 of ASCII
/// letters, digits, `_`, `-` and `.`), lowercased, since groups are case-insensitive.
pub fn normalise(name: &str) -> Result<String, String> {
    let valid = name.len() <= MAX_LEN
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
    match valid {
        true => Ok(name.to_ascii_lowercase()),
        false => Err(format!(
            "Invalid conductor group {name:?}: a conductor group is up to {MAX_LEN} letters, digits, '_', '-' or '.'."
        )),
    }
}

/// Ironic's `NoValidHost` for a node of `group` with `driver` that no live engine serves.
pub fn no_valid_host(driver: &str, group: &str) -> String {
    format!(
        "No valid host was found. Reason: No conductor service registered which supports driver {driver} for conductor group \"{group}\"."
    )
}

/// The live engines of `group` that run `driver` (any driver: none named), the one to send
/// `node`'s calls to first:
/// rendezvous hashing, so every engine sends one node's calls to the same engine of its
/// group while that engine lives, and a node moves only when its engine leaves.
pub fn engines_for<'a>(
    engines: &'a [EngineInfo],
    group: &str,
    driver: Option<&str>,
    node: Uuid,
) -> Vec<&'a EngineInfo> {
    let mut fit: Vec<&EngineInfo> = engines
        .iter()
        .filter(|e| e.alive && e.conductor_group == group && !e.url.is_empty())
        .filter(|e| driver.is_none_or(|driver| e.drivers.iter().any(|d| d == driver)))
        .collect();
    fit.sort_by_key(|e| std::cmp::Reverse(weight(node, &e.hostname)));
    fit
}

/// Which engine a node's `conductor` names, as Ironic names the conductor its calls go to:
/// this engine for its own group's nodes; for another group's, the engine its calls are
/// sent to; none while no engine of the node's group lives.
pub struct Conductors {
    /// This engine's store, which names it and its group.
    store: Arc<Store>,
    /// The other engines on it (none on sled).
    engines: Arc<Vec<EngineInfo>>,
}

impl Conductors {
    pub fn new(store: Arc<Store>, engines: Arc<Vec<EngineInfo>>) -> Conductors {
        Conductors { store, engines }
    }

    pub fn of(&self, node: &Node) -> Option<&str> {
        let group = node
            .body
            .attrs
            .get("conductor_group")
            .and_then(serde_json::Value::as_str)
            .unwrap_or("");
        if group == self.store.conductor_group() {
            return Some(self.store.conductor_name());
        }
        let driver = Some(node.body.driver.as_str());
        let fit = engines_for(&self.engines, group, driver, node.uuid());
        fit.first().map(|e| e.hostname.as_str())
    }
}

/// The same on every engine and every build (a sha256, not std's hasher, which is free to
/// change between Rust releases while engines of two releases serve one store).
fn weight(node: Uuid, engine: &str) -> u64 {
    use sha2::Digest;
    let digest = sha2::Sha256::new()
        .chain_update(node.as_bytes())
        .chain_update(engine.as_bytes())
        .finalize();
    u64::from_be_bytes(digest[..8].try_into().expect("a sha256 has 8 bytes"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::Timestamp;

    fn engine(name: &str, group: &str, alive: bool) -> EngineInfo {
        EngineInfo {
            id: 0,
            epoch: 1,
            hostname: name.into(),
            conductor_group: group.into(),
            url: format!("http://{name}"),
            drivers: vec!["ipmi".into()],
            started_at: Timestamp::from_micros(0),
            lease_until: Timestamp::from_micros(0),
            alive,
        }
    }

    #[test]
    fn names_follow_ironics_rule_and_are_lowercased() {
        assert_eq!(normalise("Rack-2.b_c").unwrap(), "rack-2.b_c");
        assert_eq!(normalise("").unwrap(), "");
        assert!(normalise("rack 2").is_err());
        assert!(normalise("räck").is_err());
        assert!(normalise(&"a".repeat(255)).is_ok());
        assert!(normalise(&"a".repeat(256)).is_err());
    }

    #[test]
    fn a_node_goes_to_a_live_engine_of_its_group_with_its_driver_and_stays_there() {
        let engines = [
            engine("a:1", "", true),
            engine("b:1", "rack2", true),
            engine("c:1", "rack2", true),
            engine("d:1", "rack2", false),
        ];
        let mut chosen = std::collections::HashSet::new();
        for _ in 0..64 {
            let node = Uuid::new_v4();
            let fit = engines_for(&engines, "rack2", Some("ipmi"), node);
            let names: Vec<&str> = fit.iter().map(|e| e.hostname.as_str()).collect();
            assert_eq!(names.len(), 2, "{names:?}");
            assert!(!names.contains(&"a:1") && !names.contains(&"d:1"));
            assert_eq!(
                engines_for(&engines, "rack2", Some("ipmi"), node)[0].hostname,
                names[0],
                "the same node goes to the same engine"
            );
            chosen.insert(names[0].to_owned());
        }
        assert_eq!(chosen.len(), 2, "nodes spread over the group's engines");
        assert!(engines_for(&engines, "rack2", Some("redfish"), Uuid::new_v4()).is_empty());
        assert!(engines_for(&engines, "rack3", None, Uuid::new_v4()).is_empty());
    }
}
