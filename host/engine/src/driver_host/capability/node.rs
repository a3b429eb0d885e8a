//! `deployd:driver/node`: the node's record, and the driver's scratch space in it.
//!
//! Scratch keys live under `driver_internal_info.scratch`, apart from the keys the engine
//! owns (agent url, token hash, pinned driver version), which a driver cannot overwrite.

use serde_json::{Map, Value, json};

use super::bindings::deployd::driver::node::Host;
use super::{CapabilityError, HostState, infallible};

const SCRATCH: &str = "scratch";

/// What `node.get` shows a driver (the WIT's list of fields).
#[derive(serde::Serialize)]
struct NodeView<'a> {
    uuid: &'a uuid::Uuid,
    name: &'a Option<String>,
    driver: &'a str,
    driver_info: &'a Map<String, Value>,
    instance_info: &'a Map<String, Value>,
    properties: &'a Map<String, Value>,
    provision_state: crate::state_machine::ProvisionState,
    /// The operator's steps of a manual cleaning (absent: the driver's default).
    #[serde(skip_serializing_if = "Option::is_none")]
    clean_steps: Option<&'a Value>,
    /// The deploy's image as the engine prepared it (see [`crate::deploy_image`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    image: Option<&'a Value>,
    /// The RAID the operator asked for (`PUT …/states/raid`), which an agent's
    /// `raid.create_configuration` builds.
    #[serde(skip_serializing_if = "Option::is_none")]
    target_raid_config: Option<&'a Value>,
}
const MAX_KEY: usize = 128;
const MAX_VALUE: usize = 64 << 10;

impl Host for HostState {
    async fn get(&mut self) -> wasmtime::Result<String> {
        let node = infallible(self.record().await)?;
        let b = &node.body;
        // Serialised from borrows: no copy of the maps (this runs on every heartbeat).
        let view = NodeView {
            uuid: &b.uuid,
            name: &b.name,
            driver: &b.driver,
            driver_info: &b.driver_info,
            instance_info: &b.instance_info,
            properties: &b.properties,
            provision_state: node.provision.state,
            clean_steps: b.driver_internal_info.get(crate::node::CLEAN_STEPS),
            image: b
                .driver_internal_info
                .get(crate::deploy_image::DEPLOY_IMAGE),
            target_raid_config: b.attrs.get("target_raid_config"),
        };
        Ok(serde_json::to_string(&view).expect("a node serialises"))
    }

    async fn get_scratch(&mut self, key: String) -> wasmtime::Result<Option<String>> {
        let node = infallible(self.record().await)?;
        Ok(node
            .body
            .driver_internal_info
            .get(SCRATCH)
            .and_then(|s| s.get(&key))
            .map(Value::to_string))
    }

    async fn set_scratch(
        &mut self,
        key: String,
        value: Option<String>,
    ) -> Result<(), CapabilityError> {
        self.write_scratch(key, value).await
    }
}

impl HostState {
    /// Sets (or with `None` removes) one scratch key, after checking its size and JSON.
    async fn write_scratch(
        &mut self,
        key: String,
        value: Option<String>,
    ) -> Result<(), CapabilityError> {
        if key.is_empty() || key.len() > MAX_KEY {
            return Err(CapabilityError::Invalid(format!(
                "scratch keys are 1 to {MAX_KEY} bytes"
            )));
        }
        let value = match value {
            Some(text) if text.len() > MAX_VALUE => {
                return Err(CapabilityError::Invalid(format!(
                    "scratch values are at most {MAX_VALUE} bytes"
                )));
            }
            Some(text) => Some(serde_json::from_str::<Value>(&text).map_err(|e| {
                CapabilityError::Invalid(format!("scratch value is not JSON: {e}"))
            })?),
            None => None,
        };
        let updated = self
            .services
            .store
            .update_node(self.node, |body| {
                let scratch = body
                    .driver_internal_info
                    .entry(SCRATCH)
                    .or_insert_with(|| json!({}));
                if let Value::Object(map) = scratch {
                    match &value {
                        Some(v) => {
                            map.insert(key.clone(), v.clone());
                        }
                        None => {
                            map.remove(&key);
                        }
                    }
                }
                Ok(())
            })
            .await?;
        self.snapshot = Some(updated);
        Ok(())
    }
}
