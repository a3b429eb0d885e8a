//! Inspection (`inspect` from `manageable`), as Ironic 39 does it with two interfaces:
//! - `redfish`, out of band (the `redfish` type's default): the BMC's resources are read;
//! - `agent`, in band: the node boots its ramdisk from the network and waits in
//!   `inspect wait` (bounded by `inspect_wait_timeout`) until the agent posts its
//!   inventory to `POST /v1/continue_inspection`; then it is powered off.
//!
//! Either way the inventory is stored (`GET /v1/nodes/{node}/inventory`), a port is created
//! for each MAC found that no port has, and `memory_mb`, `local_gb`, `cpu_arch` (and the
//! boot mode capability) fill the node's properties; then the stored inspection rules run
//! (`crate::inspection_rules`). Out of band, without the three essential properties the
//! inspection fails with Ironic's words and the properties stay as they were.

use std::sync::Arc;

use serde_json::{Value, json};
use uuid::Uuid;

use super::steps::Step;
use super::{Conductor, ConductorError};
use crate::driver_host::capability::bindings::deployd::driver::bmc::BootDevice;
use crate::driver_host::capability::bmc::{self, PowerAction};
use crate::state_machine::{Event, ProvisionState};
use crate::store::StoreError;
use crate::store::documents::Doc;

/// The document kind a node's inventory is kept as (its uuid is the node's).
pub const INVENTORY: &str = "node_inventory";

/// The document kind of the stored inspection rules (`/v1/inspection_rules`).
pub const RULES: &str = "InspectionRule";

/// Disks smaller than this are not the node's local disk (Ironic's 4 GiB).
const SMALLEST_DISK: u64 = 4 << 30;

impl Conductor {
    /// Starts inspecting a node whose inspect interface deployd performs (`redfish`).
    pub async fn inspect(self: &Arc<Self>, node: Uuid) -> Result<(), ConductorError> {
        let claim = self.claim_for_operator(node, "inspect").await?;
        let current = self.store.node(node).await?;
        let step = match current.body.interfaces.get("inspect").map(String::as_str) {
            Some("redfish") => Step::Inspect,
            Some("agent") => Step::InspectBoot,
            // fake-hardware's fake inspection reads nothing: the node is inspected at once.
            Some("fake") => Step::Inspected,
            _ => {
                return Err(ConductorError::Invalid(format!(
                    "Driver {} does not support inspect (disabled or not implemented).",
                    current.body.driver
                )));
            }
        };
        let state = current.state();
        state
            .next(Event::Inspect)
            .map_err(|source| StoreError::IllegalTransition { node, source })?;
        let now = json!(self.store.clock().now().to_datetime());
        self.store
            .update_node(node, |b| {
                b.attrs.insert("inspection_started_at".into(), now.clone());
                b.attrs.remove("inspection_finished_at");
                Ok(())
            })
            .await?;
        self.store
            .apply_event_from(node, state, Event::Inspect, None)
            .await?;
        self.spawn(claim, step);
        Ok(())
    }

    /// In-band inspection's first half: the node waits for its inventory, then boots its
    /// ramdisk from the network. It waits first, so an agent that boots fast and posts at
    /// once finds it waiting.
    pub(super) async fn boot_for_inspection(&self, node: Uuid) -> Result<(), ConductorError> {
        self.store.apply_event(node, Event::Wait, None).await?;
        let booted = async {
            let record = self.store.node(node).await.map_err(|e| e.to_string())?;
            let driver = self.driver_for(&record).await.map_err(|e| e.to_string())?;
            let power = driver.description.power.clone();
            let services = self.registry.services().clone();
            bmc::set_boot_device(&services, node, &power, BootDevice::Pxe, false)
                .await
                .map_err(|e| e.to_string())?;
            bmc::act(&services, node, &power, PowerAction::Reboot).await
        };
        if let Err(e) = booted.await {
            let error = format!("Failed to inspect hardware. Reason: {e}");
            self.store
                .apply_event_from(node, ProvisionState::InspectWait, Event::Fail, Some(error))
                .await?;
        }
        Ok(())
    }

    /// The node that sent this inventory to `POST /v1/continue_inspection`, as Ironic
    /// finds it: a port with one of its MACs, else a node whose BMC address it reports;
    /// only a node in `inspect wait` (`None` for all else, which the API answers 404).
    pub async fn inspected_node(&self, inventory: &Value) -> Result<Option<Uuid>, StoreError> {
        let macs: Vec<&str> = inventory["interfaces"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|i| i["mac_address"].as_str())
            .collect();
        if let Some(uuid) = self.store.node_by_macs(macs.iter().copied()).await? {
            let node = self.store.node(uuid).await;
            let waiting = node.is_ok_and(|n| n.state() == ProvisionState::InspectWait);
            return Ok(Some(uuid).filter(|_| waiting));
        }
        let bmc: Vec<&str> = ["bmc_address", "bmc_v6address"]
            .iter()
            .filter_map(|k| inventory[*k].as_str())
            .filter(|a| !a.is_empty() && *a != "0.0.0.0" && *a != "::/0")
            .collect();
        if bmc.is_empty() {
            return Ok(None);
        }
        let mut nodes = self.store.nodes_after(None);
        while let Some(n) = nodes.next().await {
            let Ok(n) = n else { continue };
            if n.state() != ProvisionState::InspectWait {
                continue;
            }
            let info = &n.body.driver_info;
            let ipmi = info.get("ipmi_address").and_then(Value::as_str);
            let redfish = info
                .get("redfish_address")
                .and_then(Value::as_str)
                .and_then(|u| u.split("://").nth(1))
                .and_then(|rest| rest.split(['/', ':']).next());
            if [ipmi, redfish]
                .into_iter()
                .flatten()
                .any(|a| bmc.contains(&a))
            {
                return Ok(Some(n.uuid()));
            }
        }
        Ok(None)
    }

    /// In-band inspection's second half, in the background under the node's claim: the
    /// inventory is applied, the node powered off and made manageable.
    pub async fn continue_inspection(
        self: &Arc<Self>,
        node: Uuid,
        inventory: Value,
        plugin_data: Value,
    ) -> Result<(), ConductorError> {
        let claim = self.claim_for_operator(node, "inspect").await?;
        if self.store.node(node).await?.state() != ProvisionState::InspectWait {
            return Err(ConductorError::Invalid(format!(
                "Node {node} is not waiting for inspection data."
            )));
        }
        let me = self.clone();
        tokio::spawn(async move {
            let done = match me
                .apply_inventory(node, inventory, plugin_data, false)
                .await
            {
                Ok(()) => me.power_off_after_inspection(node).await,
                Err(e) => Err(e),
            };
            let result = match done {
                Ok(()) => me.store.apply_event(node, Event::Done, None),
                Err(e) => {
                    let error = format!("Failed to inspect hardware. Reason: {e}");
                    me.store.apply_event(node, Event::Fail, Some(error))
                }
            };
            if let Err(e) = result.await {
                tracing::error!(%node, "ending the inspection: {e}");
            }
            drop(claim);
        });
        Ok(())
    }

    async fn power_off_after_inspection(&self, node: Uuid) -> Result<(), String> {
        let record = self.store.node(node).await.map_err(|e| e.to_string())?;
        let driver = self.driver_for(&record).await.map_err(|e| e.to_string())?;
        let services = self.registry.services().clone();
        bmc::act(&services, node, &driver.description.power, PowerAction::Off).await
    }

    /// The inspection itself, holding the node's claim.
    pub(super) async fn run_inspection(&self, node: Uuid) -> Result<(), ConductorError> {
        let services = self.registry.services().clone();
        let outcome = match bmc::inspect(&services, node).await {
            Ok(inventory) => self.apply_inventory(node, inventory, json!({}), true).await,
            Err(e) => Err(e),
        };
        match outcome {
            Ok(()) => self.store.apply_event(node, Event::Done, None).await?,
            Err(e) => {
                let error = format!("Failed to inspect hardware. Reason: {e}");
                self.store
                    .apply_event(node, Event::Fail, Some(error))
                    .await?
            }
        };
        Ok(())
    }

    /// What inspection found, applied: ports for new MACs, the properties, the stored
    /// inspection rules; the inventory (and the plugin data as the rules left it) stored
    /// whatever they decide. `essential`: the out-of-band check of the three properties.
    async fn apply_inventory(
        &self,
        node: Uuid,
        inventory: Value,
        mut plugin_data: Value,
        essential: bool,
    ) -> Result<(), String> {
        self.add_ports(node, &inventory).await;
        let properties = properties_of(&inventory);
        let mut body = self.store.node(node).await.map_err(|e| e.to_string())?.body;
        for (key, value) in &properties {
            let boot_mode_set = key == "capabilities"
                && body
                    .properties
                    .get("capabilities")
                    .and_then(Value::as_str)
                    .is_some_and(|c| c.contains("boot_mode:"));
            if !boot_mode_set {
                body.properties.insert(key.clone(), value.clone());
            }
        }
        let rules: Vec<Doc> = self
            .store
            .documents(RULES)
            .await
            .map_err(|e| e.to_string())?
            .into_iter()
            .map(|(_, rule)| rule)
            .collect();
        let mut cx = crate::inspection_rules::Context {
            inventory: &inventory,
            plugin_data: &mut plugin_data,
        };
        let ruled = crate::inspection_rules::apply(&rules, &mut body, &mut cx);
        self.store_inventory(node, inventory.clone(), plugin_data)
            .await?;
        ruled?;
        let missing: Vec<&str> = ["memory_mb", "local_gb", "cpu_arch"]
            .into_iter()
            .filter(|p| !properties.contains_key(*p))
            .collect();
        if essential && !missing.is_empty() {
            return Err(format!(
                "Failed to discover the following properties: {} on node {node}",
                missing.join(", ")
            ));
        }
        body.attrs.insert(
            "inspection_finished_at".into(),
            json!(self.store.clock().now().to_datetime()),
        );
        self.store
            .update_node(node, |b| {
                *b = body.clone();
                Ok(())
            })
            .await
            .map_err(|e| e.to_string())?;
        Ok(())
    }

    async fn store_inventory(
        &self,
        node: Uuid,
        inventory: Value,
        plugin_data: Value,
    ) -> Result<(), String> {
        let mut doc = Doc::new();
        doc.insert("node_uuid".into(), json!(node));
        doc.insert("inventory".into(), inventory);
        doc.insert("plugin_data".into(), plugin_data);
        self.store
            .put_document(INVENTORY, node, &doc)
            .await
            .map_err(|e| e.to_string())
    }

    /// A port for each MAC found that no port has (Ironic's `ports` hook); a MAC another
    /// node's port has is left to it.
    async fn add_ports(&self, node: Uuid, inventory: &Value) {
        for iface in inventory["interfaces"].as_array().into_iter().flatten() {
            let Some(mac) = iface["mac_address"].as_str() else {
                continue;
            };
            match self.store.port_with_mac(mac).await {
                Ok(Some(port)) if port.node_uuid != node => {
                    tracing::warn!(%node, mac, other = %port.node_uuid, "inspected MAC belongs to another node's port");
                }
                Ok(Some(_)) => {}
                Ok(None) => {
                    if let Err(e) = self.store.create_port(node, mac, Default::default()).await {
                        tracing::warn!(%node, mac, "cannot create the inspected port: {e}");
                    }
                }
                Err(e) => tracing::warn!(%node, mac, "cannot look the inspected MAC up: {e}"),
            }
        }
    }
}

/// What inspection sets in a node's properties.
fn properties_of(inventory: &Value) -> serde_json::Map<String, Value> {
    let mut p = serde_json::Map::new();
    if let Some(mb) = inventory["memory"]["physical_mb"].as_u64() {
        p.insert("memory_mb".into(), json!(mb));
    }
    let smallest = inventory["disks"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|d| d["size"].as_u64())
        .filter(|s| *s >= SMALLEST_DISK)
        .min();
    // Ironic's local_gb: the disk's GiB less one (0 for a node with no disk).
    p.insert(
        "local_gb".into(),
        json!(smallest.map_or(0, |s| (s >> 30) - 1)),
    );
    if let Some(arch) = inventory["cpu"]["architecture"]
        .as_str()
        .filter(|a| !a.is_empty())
    {
        p.insert("cpu_arch".into(), json!(arch));
    }
    if let Some(mode) = inventory["boot"]["current_boot_mode"].as_str() {
        p.insert("capabilities".into(), json!(format!("boot_mode:{mode}")));
    }
    p
}
