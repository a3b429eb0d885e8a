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
