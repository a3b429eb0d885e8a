//! The 0.1 line of the driver world (`wit/v0.1/driver.wit`), adapted to 0.2's
//! capabilities: each import calls its 0.2 twin and converts. What 0.1 cannot say is
//! dropped (an error's kind becomes its text; a heartbeat's status and progress are left
//! out), so a 0.1 driver sees exactly what it saw before 0.2 existed.

use super::bindings::deployd::driver as now;
use super::bindings::v0_1::deployd::driver as old;
use super::{CapabilityError, HostFailure, HostState};

/// A 0.2 answer as 0.1 gave it: the error's text, or a trap for a failure of the host.
fn text<T>(result: Result<T, CapabilityError>) -> wasmtime::Result<Result<T, String>> {
    match result {
        Ok(value) => Ok(Ok(value)),
        Err(CapabilityError::Host(message)) => Err(wasmtime::Error::new(HostFailure(message))),
        Err(refused) => Ok(Err(refused.to_string())),
    }
}

/// A 0.1 driver's description, as the engine keeps every driver's.
pub fn description(d: old::types::Description) -> now::types::Description {
    now::types::Description {
        name: d.name,
        version: d.version,
        family: match d.family {
            old::types::Family::Agent => now::types::Family::Agent,
            old::types::Family::Pxe => now::types::Family::Pxe,
            old::types::Family::Fake => now::types::Family::Fake,
        },
        power: d.power,
        summary: d.summary,
    }
}

/// A 0.1 driver's outcome, as the conductor acts on every driver's.
pub fn outcome(o: old::types::Outcome) -> now::types::Outcome {
    match o {
        old::types::Outcome::Wait => now::types::Outcome::Wait,
        old::types::Outcome::Done => now::types::Outcome::Done,
        old::types::Outcome::Fail(e) => now::types::Outcome::Fail(e),
    }
}

impl old::types::Host for HostState {}

impl old::node::Host for HostState {
    async fn get(&mut self) -> wasmtime::Result<String> {
        now::node::Host::get(self).await
    }

    async fn get_scratch(&mut self, key: String) -> wasmtime::Result<Option<String>> {
        now::node::Host::get_scratch(self, key).await
    }

    async fn set_scratch(
        &mut self,
        key: String,
        value: Option<String>,
    ) -> wasmtime::Result<Result<(), String>> {
        text(now::node::Host::set_scratch(self, key, value).await)
    }
}

impl old::provision::Host for HostState {
    async fn touch(&mut self) -> wasmtime::Result<Result<(), String>> {
        text(now::provision::Host::touch(self).await)
    }

    async fn last_heartbeat(&mut self) -> wasmtime::Result<Option<old::provision::Heartbeat>> {
        let heartbeat = now::provision::Host::last_heartbeat(self).await?;
        Ok(heartbeat.map(|h| old::provision::Heartbeat {
            agent_url: h.agent_url,
            agent_version: h.agent_version,
            at: h.at,
        }))
    }
}

impl old::agent::Host for HostState {
    async fn run(
        &mut self,
        name: String,
        params: String,
        wait: bool,
    ) -> wasmtime::Result<Result<String, String>> {
        text(now::agent::Host::run(self, name, params, wait).await)
    }

    async fn commands(&mut self) -> wasmtime::Result<Result<String, String>> {
        text(now::agent::Host::commands(self).await)
    }
}

fn power_state(state: old::bmc::PowerState) -> now::bmc::PowerState {
    match state {
        old::bmc::PowerState::On => now::bmc::PowerState::On,
        old::bmc::PowerState::Off => now::bmc::PowerState::Off,
    }
}

impl old::bmc::Host for HostState {
    async fn set_power(
        &mut self,
        state: old::bmc::PowerState,
    ) -> wasmtime::Result<Result<(), String>> {
        text(now::bmc::Host::set_power(self, power_state(state)).await)
    }

    async fn reboot(&mut self) -> wasmtime::Result<Result<(), String>> {
        text(now::bmc::Host::reboot(self).await)
    }

    async fn get_power(&mut self) -> wasmtime::Result<Result<old::bmc::PowerState, String>> {
        let state = text(now::bmc::Host::get_power(self).await)?;
        Ok(state.map(|s| match s {
            now::bmc::PowerState::On => old::bmc::PowerState::On,
            now::bmc::PowerState::Off => old::bmc::PowerState::Off,
        }))
    }

    async fn set_boot_device(
        &mut self,
        device: old::bmc::BootDevice,
        persistent: bool,
    ) -> wasmtime::Result<Result<(), String>> {
        let device = match device {
            old::bmc::BootDevice::Pxe => now::bmc::BootDevice::Pxe,
            old::bmc::BootDevice::Disk => now::bmc::BootDevice::Disk,
        };
        text(now::bmc::Host::set_boot_device(self, device, persistent).await)
    }
}

impl old::image::Host for HostState {
    async fn start_write(
        &mut self,
        url: String,
        hash_algo: String,
        hash_value: String,
        target: String,
    ) -> wasmtime::Result<Result<(), String>> {
        text(now::image::Host::start_write(self, url, hash_algo, hash_value, target).await)
    }

    async fn progress(&mut self) -> wasmtime::Result<old::image::WriteProgress> {
        use now::image::WriteProgress as Now;
        use old::image::WriteProgress as Old;
        Ok(match now::image::Host::progress(self).await? {
            Now::None => Old::None,
            Now::Running(bytes) => Old::Running(bytes),
            Now::Done(bytes) => Old::Done(bytes),
            Now::Failed(e) => Old::Failed(e),
        })
    }
}

impl old::log::Host for HostState {
    async fn log(&mut self, level: old::log::Level, message: String) -> wasmtime::Result<()> {
        let level = match level {
            old::log::Level::Debug => now::log::Level::Debug,
            old::log::Level::Info => now::log::Level::Info,
            old::log::Level::Warn => now::log::Level::Warn,
            old::log::Level::Error => now::log::Level::Error,
        };
        now::log::Host::log(self, level, message).await
    }
}
