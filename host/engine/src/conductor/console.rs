//! A node's console (`PUT …/states/console`): fake-hardware's `fake` console records that
//! it is enabled; `ipmitool-socat` starts or stops a socat on the engine (see
//! [`crate::console`]). Either way `console_enabled` is kept in the node, so a restarted
//! engine starts the consoles that were enabled.

use serde_json::Value;
use uuid::Uuid;

use super::{Conductor, ConductorError};
use crate::console::ConsoleError;
use crate::driver_host::capability::bmc;
use crate::node::NodeBody;

/// Where a node's console being enabled is kept (as Ironic's field).
const ENABLED: &str = "console_enabled";

/// The console interfaces deployd has.
fn interface(body: &NodeBody) -> Option<&str> {
    body.interfaces
        .get("console")
        .map(String::as_str)
        .filter(|i| matches!(*i, "fake" | "ipmitool-socat"))
}

impl From<ConsoleError> for ConductorError {
    fn from(e: ConsoleError) -> Self {
        ConductorError::Hardware(e.to_string())
    }
}

impl Conductor {
    /// Enables or disables the node's console, under its claim. Enabled, an
    /// `ipmitool-socat` console listens before this returns, or nothing is left running
    /// and the node is unchanged.
    pub async fn set_console(&self, node: Uuid, enabled: bool) -> Result<(), ConductorError> {
        let _claim = self.claim_for_operator(node, "set the console").await?;
        let record = self.store.node(node).await?;
        let Some(kind) = interface(&record.body) else {
            return Err(ConductorError::Invalid(format!(
                "Driver {} does not support console (disabled or not implemented).",
                record.body.driver
            )));
        };
        if kind == "ipmitool-socat" {
            match enabled {
                true => self.start_console(node, &record.body).await?,
                false => self.consoles.stop(node).await,
            }
        }
        let written = self
            .store
            .update_node(node, |b| {
                match enabled {
                    true => b.attrs.insert(ENABLED.into(), Value::Bool(true)),
                    false => b.attrs.remove(ENABLED),
                };
                Ok(())
            })
            .await;
        if written.is_err() && enabled {
            self.consoles.stop(node).await;
        }
        written?;
        Ok(())
    }

    async fn start_console(&self, node: Uuid, body: &NodeBody) -> Result<(), ConductorError> {
        let services = self.registry.services();
        let target = bmc::ipmi_target(services, &body.driver_info).map_err(|e| {
            ConductorError::Invalid(format!("Failed to start the console of node {node}: {e}"))
        })?;
        self.consoles.start(node, &target).await?;
        Ok(())
    }

    /// The node's `console_info`: where to connect while its console is enabled (`{}` for
    /// the fake console, which has nothing to connect to), else null.
    pub fn console_info(&self, body: &NodeBody, node: Uuid) -> Option<Value> {
        if body.attrs.get(ENABLED) != Some(&Value::Bool(true)) {
            return None;
        }
        match interface(body)? {
            "ipmitool-socat" => self.consoles.info(node),
            _ => Some(Value::Object(Default::default())),
        }
    }

    /// Where the node's console listens, while it is enabled and runs on this engine (the
    /// `ipmitool-socat` console: the fake one has nowhere to connect).
    pub fn console_endpoint(&self, body: &NodeBody, node: Uuid) -> Option<std::net::SocketAddr> {
        if body.attrs.get(ENABLED) != Some(&Value::Bool(true)) {
            return None;
        }
        match interface(body)? {
            "ipmitool-socat" => self.consoles.endpoint(node),
            _ => None,
        }
    }

    /// At start: the consoles of this engine's nodes that were enabled run again. One that
    /// cannot start is logged and left disabled in the node, as Ironic's conductor does.
    pub async fn restore_consoles(&self) {
        let mut nodes = self.store.nodes_after(None);
        let mut wanted = Vec::new();
        while let Some(n) = nodes.next().await {
            let Ok(n) = n else { continue };
            let enabled = n.body.attrs.get(ENABLED) == Some(&Value::Bool(true));
            if enabled && interface(&n.body) == Some("ipmitool-socat") {
                wanted.push(n);
            }
        }
        for n in wanted {
            let node = n.uuid();
            // Another group's engines run its nodes' consoles.
            let group = n.body.attrs.get("conductor_group").and_then(Value::as_str);
            if group.unwrap_or("") != self.store.conductor_group() {
                continue;
            }
            if let Err(e) = self.start_console(node, &n.body).await {
                tracing::error!(%node, "the console that was enabled did not start again: {e}");
                let _ = self
                    .store
                    .update_node(node, |b| {
                        b.attrs.remove(ENABLED);
                        b.last_error = Some(e.to_string());
                        Ok(())
                    })
                    .await;
            }
        }
    }

    /// Stops every console this engine runs (it stops).
    pub async fn stop_consoles(&self) {
        self.consoles.stop_all().await;
    }

    /// Stops the node's console, if this engine runs one (its node is deleted).
    pub(super) async fn stop_console(&self, node: Uuid) {
        self.consoles.stop(node).await;
    }
}
