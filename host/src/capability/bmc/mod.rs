//! `deployd:driver/bmc`: the node's baseboard management controller.
//!
//! The backend is the one the driver described (`power`): `redfish` over HTTP, `ipmitool`
//! by running the real ipmitool binary, or `fake`, which only records the power state. The
//! address and credentials always come from the node's own driver_info, so a driver can
//! reach no other BMC. After every power change the node's `power_state` is updated, as
//! the API and the CLI show it.

mod ipmitool;
mod redfish;

use std::path::PathBuf;

use serde_json::Value;

use super::{HostState, host_failure};
use crate::node::JsonMap;
use crate::plugin::bindings::deployd::driver::bmc::{BootDevice, Host, PowerState};

/// Settings of the host's BMC backends.
#[derive(Clone, Debug)]
pub struct Backends {
    /// The ipmitool binary.
    pub ipmitool: PathBuf,
}

impl Default for Backends {
    fn default() -> Self {
        Backends {
            ipmitool: PathBuf::from("ipmitool"),
        }
    }
}

/// The BMC of one node, resolved from its driver_info.
enum Bmc {
    Fake,
    Redfish(redfish::Target),
    Ipmi(ipmitool::Target),
}

fn text(info: &JsonMap, key: &str) -> Option<String> {
    match info.get(key)? {
        Value::String(s) if !s.is_empty() => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

impl Bmc {
    fn resolve(power: &str, info: &JsonMap, backends: &Backends) -> Result<Bmc, String> {
        let need = |key: &str| {
            text(info, key)
                .ok_or_else(|| format!("driver_info.{key} is required for {power} power"))
        };
        match power {
            "fake" => Ok(Bmc::Fake),
            "redfish" => Ok(Bmc::Redfish(redfish::Target::new(
                &need("redfish_address")?,
                &need("redfish_system_id")?,
                text(info, "redfish_username"),
                text(info, "redfish_password"),
            )?)),
            "ipmitool" => Ok(Bmc::Ipmi(ipmitool::Target {
                binary: backends.ipmitool.clone(),
                address: need("ipmi_address")?,
                port: text(info, "ipmi_port").unwrap_or_else(|| "623".into()),
                username: text(info, "ipmi_username").unwrap_or_default(),
                password: text(info, "ipmi_password").unwrap_or_default(),
            })),
            other => Err(format!("unknown power backend {other:?}")),
        }
    }
}

impl HostState {
    fn bmc(&self) -> wasmtime::Result<Result<Bmc, String>> {
        let node = self.services.store.node(self.node).map_err(host_failure)?;
        Ok(Bmc::resolve(
            &self.power,
            &node.body.driver_info,
            &self.services.bmc,
        ))
    }

    fn record_power(&self, state: PowerState) -> wasmtime::Result<()> {
        let text = match state {
            PowerState::On => "power on",
            PowerState::Off => "power off",
        };
        self.services
            .store
            .update_node(self.node, |b| {
                b.power_state = Some(text.into());
                b.target_power_state = None;
                Ok(())
            })
            .map_err(host_failure)?;
        Ok(())
    }
}

/// BMCs apply power changes asynchronously (sushy's fake driver, real hardware): poll
/// until the machine reports `want`, as Ironic's `_wait_for_power_state` does.
async fn settle<F, Fut>(want: PowerState, read: F) -> Result<(), String>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<PowerState, String>>,
{
    let mut last = None;
    for _ in 0..POWER_WAIT_POLLS {
        match read().await {
            Ok(state) if state == want => return Ok(()),
            other => last = Some(other),
        }
        tokio::time::sleep(POWER_WAIT_INTERVAL).await;
    }
    Err(format!(
        "the BMC did not reach power {want:?} within {:?} (last answer: {last:?})",
        POWER_WAIT_INTERVAL * POWER_WAIT_POLLS
    ))
}

const POWER_WAIT_POLLS: u32 = 60;
const POWER_WAIT_INTERVAL: std::time::Duration = std::time::Duration::from_millis(250);

macro_rules! bmc_or_return {
    ($self:ident) => {
        match $self.bmc()? {
            Ok(bmc) => bmc,
            Err(e) => return Ok(Err(e)),
        }
    };
}

impl Host for HostState {
    async fn set_power(&mut self, state: PowerState) -> wasmtime::Result<Result<(), String>> {
        let http = &self.services.http;
        let done = match bmc_or_return!(self) {
            Bmc::Fake => Ok(()),
            Bmc::Redfish(t) => match t.set_power(http, state).await {
                Ok(()) => settle(state, || t.get_power(http)).await,
                Err(e) => Err(e),
            },
            Bmc::Ipmi(t) => match t.set_power(state).await {
                Ok(()) => settle(state, || t.get_power()).await,
                Err(e) => Err(e),
            },
        };
        if done.is_ok() {
            self.record_power(state)?;
        }
        Ok(done)
    }

    async fn reboot(&mut self) -> wasmtime::Result<Result<(), String>> {
        let done = match bmc_or_return!(self) {
            Bmc::Fake => Ok(()),
            Bmc::Redfish(t) => t.reboot(&self.services.http).await,
            Bmc::Ipmi(t) => t.reboot().await,
        };
        if done.is_ok() {
            self.record_power(PowerState::On)?;
        }
        Ok(done)
    }

    async fn get_power(&mut self) -> wasmtime::Result<Result<PowerState, String>> {
        Ok(match bmc_or_return!(self) {
            Bmc::Fake => {
                let node = self.services.store.node(self.node).map_err(host_failure)?;
                Ok(if node.body.power_state.as_deref() == Some("power on") {
                    PowerState::On
                } else {
                    PowerState::Off
                })
            }
            Bmc::Redfish(t) => t.get_power(&self.services.http).await,
            Bmc::Ipmi(t) => t.get_power().await,
        })
    }

    async fn set_boot_device(
        &mut self,
        device: BootDevice,
        persistent: bool,
    ) -> wasmtime::Result<Result<(), String>> {
        Ok(match bmc_or_return!(self) {
            Bmc::Fake => Ok(()),
            Bmc::Redfish(t) => {
                t.set_boot_device(&self.services.http, device, persistent)
                    .await
            }
            Bmc::Ipmi(t) => t.set_boot_device(device, persistent).await,
        })
    }
}
