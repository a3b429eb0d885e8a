//! Flow steps: what runs, in the background and holding the node's claim, after an
//! operator's action or an agent's heartbeat started it, and what the sweeper's timeout
//! runs. A step calls the node's driver and moves the node on by its outcome.

use std::sync::Arc;

use uuid::Uuid;

use super::{Conductor, ConductorError};
use crate::driver_host::PluginError;
use crate::driver_host::capability::bindings::{Family, Outcome};
use crate::driver_host::capability::bmc;
use crate::driver_host::sandbox::{Export, Reply};
use crate::node::Node;
use crate::reservations::Claim;
use crate::state_machine::{Event, ProvisionState};
use crate::store::TimedOut;
use crate::sweeper::TimeoutHook;

impl Conductor {
    /// Runs `step` in the background; the node's claim goes with it and is let go when
    /// the step ends, however it ends.
    pub(super) fn spawn(self: &Arc<Self>, claim: Claim, step: Step) {
        let me = self.clone();
        self.keep_alive
            .get_or_init(|| tokio::spawn(keep_alive(Arc::downgrade(self))));
        tokio::spawn(async move {
            let node = claim.node();
            if let Err(e) = me.run(node, step).await {
                tracing::error!(%node, "flow step failed in the engine: {e}");
            }
            drop(claim);
        });
    }

    /// Whether the node's BMC is configured for its driver's power backend.
    async fn verify(&self, node: Uuid) -> Result<(), String> {
        let record = self.store.node(node).await.map_err(|e| e.to_string())?;
        let driver = self.driver_for(&record).await.map_err(|e| e.to_string())?;
        let services = self.registry.services();
        bmc::check(services, node, &driver.description.power)
            .await
            .map_err(|e| format!("Failed to validate power and management for node {node}: {e}"))
    }

    async fn run(&self, node: Uuid, step: Step) -> Result<(), ConductorError> {
        match step {
            // As Ironic's verify: the power and management interfaces only. The deploy
            // interface (the image, its checksum) is the deploy's to validate, so the
            // install guide's order works: enroll, manage, provide, set the image, deploy.
            Step::Service => self.run_service(node).await?,
            Step::Inspect => self.run_inspection(node).await?,
            Step::InspectBoot => self.boot_for_inspection(node).await?,
            Step::Inspected => {
                let now = serde_json::json!(self.store.clock().now().to_datetime());
                self.store
                    .update_node(node, |b| {
                        b.attrs.insert("inspection_finished_at".into(), now.clone());
                        Ok(())
                    })
                    .await?;
                self.store.apply_event(node, Event::Done, None).await?;
            }
            Step::Verify => {
                match self.verify(node).await {
                    Ok(()) => self.store.apply_event(node, Event::Done, None).await?,
                    Err(e) => self.store.apply_event(node, Event::Fail, Some(e)).await?,
                };
            }
            // Provide without cleaning: the node goes straight on (Ironic with
            // `automated_clean = False`).
            Step::Clean => {
                self.store.apply_event(node, Event::Done, None).await?;
            }
            // Undeploy without cleaning: the driver's clean-up powers the instance off
            // and drops its step state; no ramdisk boots, the disk is left as it is.
            Step::Release => {
                self.agents.forget(node);
                let reason = "undeployed without cleaning (automated_clean is off)";
                if let Err(e) = self.call(node, Export::CleanUp(reason.into())).await {
                    tracing::warn!(%node, "driver clean-up failed: {e}");
                }
                self.store.apply_event(node, Event::Clean, None).await?;
                self.cleaned(node).await?;
            }
            Step::Deploy => {
                let valid = match self.prepare_image(node).await {
                    Err(e) => Err(format!("Failed to prepare the image of node {node}: {e}")),
                    Ok(()) => match self.call(node, Export::Validate).await {
                        Ok(Reply::Valid(Err(e))) => {
                            Err(format!("Failed to validate node {node}: {e}"))
                        }
                        Err(e) => Err(e.to_string()),
                        Ok(_) => Ok(()),
                    },
                };
                let outcome = match valid {
                    Ok(()) => self.outcome(node, Export::Deploy).await,
                    Err(e) => Outcome::Fail(e),
                };
                self.after_step(node, ProvisionState::Deploying, outcome)
                    .await?;
            }
            Step::Heartbeat(touched) => {
                // The node as the touch read it. It may have moved on since (a timeout):
                // the transitions below only apply from the state the driver saw.
                let record = self.store.touched_node(&touched).await?;
                let state = record.state();
                match state {
                    ProvisionState::WaitCallBack | ProvisionState::CleanWait => {
                        let outcome = self.outcome_on(record, Export::Heartbeat).await;
                        self.after_step(node, state, outcome).await?;
                    }
                    ProvisionState::RescueWait => self.finalize_rescue(record).await?,
                    _ => {}
                }
            }
            // Undeploy (from deleting) and manual clean (from cleaning): the driver powers
            // the instance off and may boot the ramdisk to wipe the disk (`wait`).
            Step::TearDown => {
                self.agents.forget(node);
                let outcome = self.outcome(node, Export::TearDown).await;
                let state = self.store.node(node).await?.state();
                match (state, outcome) {
                    (ProvisionState::Deleting, Outcome::Fail(e)) => {
                        self.store
                            .apply_event(node, Event::Fail, Some(format!("Tear down failed: {e}")))
                            .await?;
                        self.flow_ended(node).await?;
                    }
                    (ProvisionState::Deleting, outcome) => {
                        self.store.apply_event(node, Event::Clean, None).await?;
                        self.after_step(node, ProvisionState::Cleaning, outcome)
                            .await?;
                    }
                    (state, outcome) => self.after_step(node, state, outcome).await?,
                }
            }
            Step::CleanUp(reason) => self.clean_up(node, reason).await?,
            Step::Rescue => self.boot_rescue_ramdisk(node).await?,
            Step::Unrescue => self.boot_instance(node).await?,
        }
        Ok(())
    }

    /// Makes the deploy's image ready for the drivers that write one (see
    /// [`crate::deploy_image`]) and records it as `driver_internal_info.deploy_image`,
    /// with the url its config drive is served at, if it has one.
    async fn prepare_image(&self, node: Uuid) -> Result<(), String> {
        use crate::config_drive::ConfigDrive;
        use crate::deploy_image::DEPLOY_IMAGE;
        use crate::images::{Images, STAGED_TOKEN};
        let record = self.store.node(node).await.map_err(|e| e.to_string())?;
        let driver = self.driver_for(&record).await.map_err(|e| e.to_string())?;
        let writes_image = !matches!(driver.description.family, Family::Fake)
            && record.body.instance_info.contains_key("image_source");
        let mut prepared = match writes_image {
            true => Some(self.preparer.prepare(&record).await?),
            false => None,
        };
        let drive = self
            .store
            .config_drive(node)
            .await
            .map_err(|e| e.to_string())?;
        if let (Some(p), Some(drive)) = (&mut prepared, drive) {
            p.image.configdrive = Some(match drive {
                ConfigDrive::Url(url) => url,
                // Served beside the staged image, under the same token.
                ConfigDrive::Image(_) => {
                    let images = self
                        .images
                        .as_ref()
                        .ok_or("serving a config drive needs the engine's image server")?;
                    let held = record.body.driver_internal_info.get(STAGED_TOKEN);
                    let token = match (held.and_then(serde_json::Value::as_str), &p.new_token) {
                        (_, Some(t)) => t.clone(),
                        (Some(t), None) => t.to_owned(),
                        (None, None) => {
                            let t = Images::new_token();
                            p.new_token = Some(t.clone());
                            t
                        }
                    };
                    format!("{}/configdrive", images.staged_url(node, &token))
                }
            });
        }
        self.store
            .update_node(node, |b| {
                let info = &mut b.driver_internal_info;
                match &prepared {
                    Some(p) => {
                        let image = serde_json::to_value(&p.image).expect("an image serialises");
                        info.insert(DEPLOY_IMAGE.into(), image);
                        if let Some(token) = &p.new_token {
                            info.insert(STAGED_TOKEN.into(), token.clone().into());
                        }
                    }
                    None => {
                        info.remove(DEPLOY_IMAGE);
                    }
                }
                Ok(())
            })
            .await
            .map_err(|e| e.to_string())?;
        Ok(())
    }

    /// Moves a flow on after the driver answered in `state`: deploying or wait call-back
    /// (a deploy), cleaning or clean wait (an undeploy's or a manual cleaning).
    async fn after_step(
        &self,
        node: Uuid,
        state: ProvisionState,
        outcome: Outcome,
    ) -> Result<(), ConductorError> {
        use ProvisionState as S;
        match (state, outcome) {
            // The step failed because this engine may not act now (on the shared store,
            // unsure of its lease, or declared dead since it claimed the node): not the
            // node's failure. Left as it is, for this engine's next step once its lease is
            // sure again, or for the survivor that takes it over.
            (_, Outcome::Fail(reason)) if self.store.may_act(node).is_err() => {
                tracing::warn!(%node, "a step's failure was not recorded, since this engine may not act on the node now: {reason}");
            }
            (_, Outcome::Fail(reason)) => {
                self.store
                    .apply_event_from(node, state, Event::Fail, Some(reason.clone()))
                    .await?;
                self.clean_up(node, reason).await?;
            }
            (S::Deploying | S::Cleaning, Outcome::Wait) => {
                self.store
                    .apply_event_from(node, state, Event::Wait, None)
                    .await?;
            }
            (S::Deploying, Outcome::Done) => {
                self.store
                    .apply_event_from(node, state, Event::Done, None)
                    .await?;
                self.flow_ended(node).await?;
            }
            (S::WaitCallBack, Outcome::Done) => {
                self.store
                    .apply_event_from(node, state, Event::Resume, None)
                    .await?;
                self.store
                    .apply_event_from(node, S::Deploying, Event::Done, None)
                    .await?;
                self.flow_ended(node).await?;
            }
            (S::CleanWait, Outcome::Done) => {
                self.store
                    .apply_event_from(node, state, Event::Resume, None)
                    .await?;
                self.cleaned(node).await?;
            }
            (S::Cleaning, Outcome::Done) => self.cleaned(node).await?,
            (_, Outcome::Wait | Outcome::Done) => {}
        }
        Ok(())
    }

    /// Cleaning finished: on to available (undeploy) or back to manageable (manual).
    async fn cleaned(&self, node: Uuid) -> Result<(), ConductorError> {
        let target = self.store.node(node).await?.provision.target;
        let event = if target == Some(ProvisionState::Manageable) {
            Event::Manage
        } else {
            Event::Done
        };
        self.store
            .apply_event_from(node, ProvisionState::Cleaning, event, None)
            .await?;
        self.flow_ended(node).await
    }

    /// Runs the driver's clean-up after a failure or timeout, then ends the flow (a failed
    /// rescue's password hash went with the failure's own write).
    pub(super) async fn clean_up(&self, node: Uuid, reason: String) -> Result<(), ConductorError> {
        if let Err(e) = self.call(node, Export::CleanUp(reason)).await {
            tracing::warn!(%node, "driver clean-up failed: {e}");
        }
        self.flow_ended(node).await
    }

    /// Runs the driver's clean-up of a node failed outside any step of this engine (a
    /// timeout, a takeover), once its claim is had, in the background; `reason` is the
    /// failure's (none: the node's `last_error` as it reads then).
    pub fn spawn_clean_up(
        self: &Arc<Self>,
        node: Uuid,
        operation: &'static str,
        reason: Option<String>,
    ) {
        let me = self.clone();
        tokio::spawn(async move {
            let claim = match me.reservations.claim(node, operation).await {
                Ok(claim) => claim,
                Err(refused) => {
                    let e = ConductorError::from(refused);
                    tracing::error!(%node, "{operation} not run: {e}");
                    return;
                }
            };
            let reason = match reason {
                Some(reason) => Ok(reason),
                None => me
                    .store
                    .node(node)
                    .await
                    .map(|n| n.body.last_error.unwrap_or_else(|| "failed".to_owned())),
            };
            let done = match reason {
                Ok(reason) => me.clean_up(node, reason).await,
                Err(e) => Err(e.into()),
            };
            if let Err(e) = done {
                tracing::error!(%node, "{operation} failed: {e}");
            }
            drop(claim);
        });
    }

    pub(super) async fn flow_ended(&self, node: Uuid) -> Result<(), ConductorError> {
        self.agents.forget(node);
        self.release_boot_media(node).await;
        Ok(self.pin(node, None).await?)
    }

    /// Ejects the virtual media a failed or finished flow left in the node's BMC; a BMC
    /// that cannot be reached now is only logged (its ISO is no longer served).
    async fn release_boot_media(&self, node: Uuid) {
        // A node without a driver this engine runs booted nothing through it.
        let Ok(power) = self.power_backend(node).await else {
            return;
        };
        let services = self.registry.services().clone();
        if let Err(e) = bmc::release_boot_media(&services, node, &power).await {
            tracing::warn!(%node, "the virtual media was not ejected: {e}");
        }
    }

    /// Calls an export that returns an outcome; a driver failure is a `fail` outcome.
    async fn outcome(&self, node: Uuid, export: Export) -> Outcome {
        match self.store.node(node).await {
            Ok(record) => self.outcome_on(record, export).await,
            Err(e) => Outcome::Fail(e.to_string()),
        }
    }

    /// [`Conductor::outcome`] on the record the caller just read.
    async fn outcome_on(&self, record: Node, export: Export) -> Outcome {
        match self.call_on(record, export).await {
            Ok(Reply::Outcome(o)) => o,
            Ok(other) => Outcome::Fail(format!("driver answered with {other:?}")),
            Err(e) => Outcome::Fail(e.to_string()),
        }
    }

    async fn call(&self, node: Uuid, export: Export) -> Result<Reply, PluginError> {
        let record = self.store.node(node).await.map_err(|e| PluginError::Host {
            driver: "?".into(),
            message: e.to_string(),
        })?;
        self.call_on(record, export).await
    }

    async fn call_on(&self, record: Node, export: Export) -> Result<Reply, PluginError> {
        let driver = self.driver_for(&record).await?;
        self.registry.call_on(&driver, record, export).await
    }
}

/// Every half second, touches the waiting nodes a step is running on: such a node is not
/// silent, its engine is working on it (booting it through a slow BMC, say, after its
/// agent powered off). Ironic's sweeper skips reserved nodes for the same reason. A step
/// is bounded by its driver's deadline, so this cannot keep a node alive for ever. One
/// task for all nodes (not a timer per step: heartbeats are hot); it ends with the
/// conductor.
async fn keep_alive(conductor: std::sync::Weak<Conductor>) {
    loop {
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        let Some(conductor) = conductor.upgrade() else {
            return;
        };
        for node in conductor.reservations.held() {
            // Only nodes in wait states can be touched; the others say so, harmlessly.
            let _ = conductor.store.touch_provisioning(node).await;
        }
    }
}

pub(super) enum Step {
    Verify,
    Clean,
    Deploy,
    Heartbeat(Box<crate::store::Touched>),
    /// Undeploy with cleaning, or cleaning (provide, manual): the driver's tear-down.
    TearDown,
    /// Undeploy without cleaning.
    Release,
    CleanUp(String),
    /// Servicing: the node's service steps from the next one (see `servicing`).
    Service,
    /// Out-of-band inspection (see `inspection`).
    Inspect,
    /// In-band inspection: boot the ramdisk for it.
    InspectBoot,
    /// An inspection with nothing to read (fake-hardware's fake interface): done at once.
    Inspected,
    /// Rescue: boot the ramdisk (see `rescue`).
    Rescue,
    /// Unrescue: boot the disk.
    Unrescue,
}
/// The sweeper's hook: a timed-out node's driver cleans up (once nothing else runs on it).
impl TimeoutHook for Arc<Conductor> {
    fn progress(&self, node: Uuid) -> Option<String> {
        self.agents.get(node)?.status_message
    }

    fn timed_out(&self, event: TimedOut) {
        tracing::warn!(node = %event.node, "{}", event.last_error);
        self.spawn_clean_up(event.node, "timeout clean-up", Some(event.last_error));
    }
}
