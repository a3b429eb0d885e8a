//! Rescue (Ironic 1.38, its `agent` rescue interface): an active node whose OS no longer
//! boots gets its ramdisk back, with a login for the operator to repair the disk.
//!
//! `rescue` (with a `rescue_password`) powers the node off and boots its ramdisk
//! (`driver_info.rescue_kernel`/`rescue_ramdisk`, else the deploy ones; see
//! [`crate::ramdisk_params::ramdisk_fields`]), then waits in `rescue wait`, bounded by
//! `rescue_callback_timeout`. The agent's first heartbeat there is answered with
//! `rescue.finalize_rescue` and the password's hash (never the password: see
//! [`crate::rescue_password`]); the agent sets up a `rescue` login and stops its API, and
//! the node is in `rescue`. `unrescue` powers it off and boots its disk: `active`.
//!
//! The engine runs these steps itself, through the node's BMC and its agent, for any
//! driver: like Ironic's `agent` rescue interface, they are the same for every machine.

use std::sync::Arc;

use serde_json::json;
use uuid::Uuid;

use super::steps::Step;
use super::{Conductor, ConductorError};
use crate::driver_host::capability::agent_client;
use crate::driver_host::capability::bindings::deployd::driver::bmc::{BootDevice, PowerState};
use crate::driver_host::capability::bmc;
use crate::node::Node;
use crate::rescue_password::{self, HASHED};
use crate::state_machine::{Event, ProvisionState};
use crate::store::StoreError;

impl Conductor {
    /// Starts rescuing a node with `password` (non-empty, checked by the API).
    pub async fn rescue(
        self: &Arc<Self>,
        node: Uuid,
        password: &str,
    ) -> Result<(), ConductorError> {
        let claim = self.claim_for_operator(node, "rescue").await?;
        let current = self.store.node(node).await?;
        if current.body.interfaces.get("rescue").map(String::as_str) != Some("agent") {
            return Err(ConductorError::Invalid(format!(
                "Driver {} does not support rescue (disabled or not implemented).",
                current.body.driver
            )));
        }
        let state = current.state();
        state
            .next(Event::Rescue)
            .map_err(|source| StoreError::IllegalTransition { node, source })?;
        let hashed = rescue_password::hash(password, self.settings.rescue_hash);
        self.store
            .update_node(node, |b| {
                b.instance_info.insert(HASHED.into(), hashed.clone().into());
                Ok(())
            })
            .await?;
        self.store
            .apply_event_from(node, state, Event::Rescue, None)
            .await?;
        self.spawn(claim, Step::Rescue);
        Ok(())
    }

    /// Ends a rescue: the node boots its disk again.
    pub async fn unrescue(self: &Arc<Self>, node: Uuid) -> Result<(), ConductorError> {
        let claim = self.claim_for_operator(node, "unrescue").await?;
        let state = self.store.node(node).await?.state();
        self.store
            .apply_event_from(node, state, Event::Unrescue, None)
            .await?;
        self.spawn(claim, Step::Unrescue);
        Ok(())
    }

    /// `rescuing`: the machine boots its ramdisk, and the node waits for its agent. It
    /// waits first, so an agent that boots fast finds it waiting.
    pub(super) async fn boot_rescue_ramdisk(&self, node: Uuid) -> Result<(), ConductorError> {
        self.store.apply_event(node, Event::Wait, None).await?;
        if let Err(e) = self.boot_from(node, BootDevice::Pxe, false).await {
            let error = format!("Failed to rescue node {node}: {e}");
            self.rescue_failed(node, error).await?;
        }
        Ok(())
    }

    /// The agent called back in `rescue wait`: it is given the password's hash; once it
    /// has set up the login, the node is in `rescue` (its ramdisk keeps running).
    pub(super) async fn finalize_rescue(&self, record: Node) -> Result<(), ConductorError> {
        let node = record.uuid();
        let Some(hashed) = record.body.instance_info.get(HASHED).cloned() else {
            let error = format!("Node {node} waits for its rescue without a rescue password");
            return self.rescue_failed(node, error).await;
        };
        let services = self.registry.services().clone();
        let params = json!({"rescue_password": hashed, "hashed": true});
        let sent = agent_client::run_for_engine(&services, node, "rescue.finalize_rescue", params)
            .await
            .map_err(|e| e.to_string())
            .and_then(|result| match result["command_status"].as_str() {
                Some("SUCCEEDED") => Ok(()),
                _ => Err(format!(
                    "the agent's rescue.finalize_rescue did not succeed: {}",
                    result["command_error"]
                )),
            });
        if let Err(e) = sent {
            let error = format!("Failed to finalize rescue of node {node}: {e}");
            return self.rescue_failed(node, error).await;
        }
        self.store
            .apply_event_from(node, ProvisionState::RescueWait, Event::Resume, None)
            .await?;
        // `rescue`: the transition drops the password's hash (`settle_body`).
        self.store
            .apply_event_from(node, ProvisionState::Rescuing, Event::Done, None)
            .await?;
        // The agent stopped its API: nothing more is sent to it.
        self.flow_ended(node).await
    }

    /// `unrescuing`: the machine is powered off and boots its disk.
    pub(super) async fn boot_instance(&self, node: Uuid) -> Result<(), ConductorError> {
        match self.boot_from(node, BootDevice::Disk, true).await {
            Ok(()) => {
                self.store
                    .apply_event_from(node, ProvisionState::Unrescuing, Event::Done, None)
                    .await?;
            }
            Err(e) => {
                let error = format!("Failed to unrescue node {node}: {e}");
                self.store
                    .apply_event_from(node, ProvisionState::Unrescuing, Event::Fail, Some(error))
                    .await?;
            }
        }
        self.flow_ended(node).await
    }

    /// `rescue wait` failed: why goes to `last_error`, the driver cleans up.
    async fn rescue_failed(&self, node: Uuid, error: String) -> Result<(), ConductorError> {
        self.store
            .apply_event_from(
                node,
                ProvisionState::RescueWait,
                Event::Fail,
                Some(error.clone()),
            )
            .await?;
        self.clean_up(node, error).await
    }

    /// Powers the machine off, sets its boot device and powers it on, through its BMC.
    async fn boot_from(
        &self,
        node: Uuid,
        device: BootDevice,
        persistent: bool,
    ) -> Result<(), String> {
        let power = self.power_backend(node).await.map_err(|e| e.to_string())?;
        let services = self.registry.services().clone();
        let off = bmc::set_power(&services, node, &power, PowerState::Off).await;
        off.map_err(|e| e.to_string())?;
        let boot = bmc::set_boot_device(&services, node, &power, device, persistent).await;
        boot.map_err(|e| e.to_string())?;
        let on = bmc::set_power(&services, node, &power, PowerState::On).await;
        on.map_err(|e| e.to_string())
    }
}

/// Whether `value` is a password a rescue may take (Ironic: non-empty once stripped).
pub fn acceptable_password(value: Option<&str>) -> bool {
    value.is_some_and(|p| !p.trim().is_empty())
}
