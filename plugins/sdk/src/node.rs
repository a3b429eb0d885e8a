//! The node this call is about.

use serde::Deserialize;
use serde_json::{Map, Value};

use crate::bindings::deployd::driver::node as host;

/// The parts of the node a driver reads.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct Node {
    pub uuid: String,
    pub name: Option<String>,
    pub driver: String,
    #[serde(default)]
    pub driver_info: Map<String, Value>,
    #[serde(default)]
    pub instance_info: Map<String, Value>,
    #[serde(default)]
    pub properties: Map<String, Value>,
    pub provision_state: String,
    /// The operator's steps of a manual cleaning, in order (empty: the driver's default).
    #[serde(default)]
    pub clean_steps: Vec<Value>,
    /// The deploy's image as the engine prepared it (absent outside a deploy, and from
    /// engines older than this field): what to send the agent.
    #[serde(default)]
    pub image: Option<Image>,
    /// The RAID the operator asked for, which an agent's `raid.create_configuration`
    /// builds (absent when none is set).
    #[serde(default)]
    pub target_raid_config: Option<Value>,
}

/// A deploy's image, made ready by the engine: its checksum resolved, its format read
/// from its content, a qcow2 served as the raw disk it holds.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct Image {
    /// Where the agent downloads the disk's bytes.
    pub url: String,
    /// What `url` serves (`raw`).
    pub disk_format: String,
    /// What the operator's file is (`raw` or `qcow2`).
    pub source_format: String,
    pub os_hash_algo: String,
    pub os_hash_value: String,
    /// Where the agent downloads the deploy's config drive, if it has one.
    #[serde(default)]
    pub configdrive: Option<String>,
}

impl Node {
    /// A string field of instance_info, if present and non-empty.
    pub fn instance(&self, key: &str) -> Option<&str> {
        self.instance_info
            .get(key)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
    }
}

/// Reads the node from the host.
pub fn get() -> Node {
    serde_json::from_str(&host::get()).expect("the host sends a well-formed node")
}
