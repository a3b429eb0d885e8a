//! Servicing an active node (Ironic 1.87): the steps Ironic's conductor runs itself for
//! any driver, with no ramdisk booted: `power_on`, `power_off`, `reboot` (through the
//! node's BMC), `wait` with `seconds`, and `hold` (the node waits in `service hold` until
//! `unhold`, 1.85, then the remaining steps run). The steps and the position in them are
//! kept in `driver_internal_info`, so a held node carries on after a restart's unhold.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use uuid::Uuid;

use super::steps::Step;
use super::{Conductor, ConductorError};
use crate::driver_host::capability::bmc::{self, PowerAction};
use crate::state_machine::{Event, ProvisionState};
use crate::store::StoreError;

/// The service steps, and the index of the next one to run.
const STEPS: &str = "service_steps";
const NEXT: &str = "service_step_index";

/// Ironic's `max_conductor_wait_step_seconds` default: a longer `wait` is cut to it.
pub const MAX_WAIT_SECONDS: u64 = 30;

/// The steps the conductor runs itself (Ironic's reserved step names).
pub const BUILT_IN: &[&str] = &["power_on", "power_off", "reboot", "hold", "wait"];

impl Conductor {
    /// Starts servicing an active node with `steps` (checked by the API).
    pub async fn service(
        self: &Arc<Self>,
        node: Uuid,
        steps: Vec<Value>,
    ) -> Result<(), ConductorError> {
        let claim = self.claim_for_operator(node, "service").await?;
        let current = self.store.node(node).await?;
        let state = current.state();
        state
            .next(Event::Service)
            .map_err(|source| StoreError::IllegalTransition { node, source })?;
        self.store
            .update_node(node, |b| {
                b.driver_internal_info.insert(STEPS.into(), json!(steps));
                b.driver_internal_info.insert(NEXT.into(), json!(0));
                Ok(())
            })
            .await?;
        self.store
            .apply_event_from(node, state, Event::Service, None)
            .await?;
        self.spawn(claim, Step::Service);
        Ok(())
    }

    /// `unhold` from `service hold`: through `service wait`, the remaining steps run.
    pub async fn unhold(self: &Arc<Self>, node: Uuid) -> Result<(), ConductorError> {
        let claim = self.claim_for_operator(node, "unhold").await?;
        let state = self.store.node(node).await?.state();
        self.store
            .apply_event_from(node, state, Event::Unhold, None)
            .await?;
        self.store.apply_event(node, Event::Resume, None).await?;
        self.spawn(claim, Step::Service);
        Ok(())
    }

    /// Runs the node's service steps from the next one, until they end, fail or hold.
    pub(super) async fn run_service(&self, node: Uuid) -> Result<(), ConductorError> {
        loop {
            let record = self.store.node(node).await?;
            let info = &record.body.driver_internal_info;
            let steps = info
                .get(STEPS)
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            let next = info.get(NEXT).and_then(Value::as_u64).unwrap_or(0) as usize;
            let Some(step) = steps.get(next).cloned() else {
                self.store
                    .update_node(node, |b| {
                        b.driver_internal_info.remove(STEPS);
                        b.driver_internal_info.remove(NEXT);
                        Ok(())
                    })
                    .await?;
                self.store.apply_event(node, Event::Done, None).await?;
                return Ok(());
            };
            self.store
                .update_node(node, |b| {
                    b.driver_internal_info.insert(NEXT.into(), json!(next + 1));
                    Ok(())
                })
                .await?;
            let name = step["step"].as_str().unwrap_or_default();
            let action = match name {
                "power_on" => Some(PowerAction::On),
                "power_off" => Some(PowerAction::Off),
                "reboot" => Some(PowerAction::Reboot),
                _ => None,
            };
            if let Some(action) = action {
                if let Err(e) = self.power_step(node, action).await {
                    let error = format!(
                        "Node {node} failed service step {}.{name}: {e}",
                        step["interface"].as_str().unwrap_or_default()
                    );
                    self.store
                        .apply_event(node, Event::Fail, Some(error))
                        .await?;
                    return Ok(());
                }
            } else if name == "hold" {
                self.store.apply_event(node, Event::Hold, None).await?;
                return Ok(());
            } else if name == "wait" {
                let seconds = step["args"]["seconds"]
                    .as_u64()
                    .unwrap_or(0)
                    .min(MAX_WAIT_SECONDS);
                self.store.apply_event(node, Event::Wait, None).await?;
                tokio::time::sleep(Duration::from_secs(seconds)).await;
                if self.store.node(node).await?.state() != ProvisionState::ServiceWait {
                    return Ok(()); // aborted (service failed) or deleted meanwhile
                }
                self.store.apply_event(node, Event::Resume, None).await?;
            }
        }
    }

    async fn power_step(&self, node: Uuid, action: PowerAction) -> Result<(), String> {
        let record = self.store.node(node).await.map_err(|e| e.to_string())?;
        let driver = self.driver_for(&record).await.map_err(|e| e.to_string())?;
        let services = self.registry.services().clone();
        bmc::act(&services, node, &driver.description.power, action).await
    }
}
