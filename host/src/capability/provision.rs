//! `deployd:driver/provision`: the node's provisioning clock and its agent's last word.

use super::{CapabilityError, HostState, outcome};
use crate::bindings::deployd::driver::provision::{Heartbeat, Host};

impl Host for HostState {
    async fn touch(&mut self) -> wasmtime::Result<Result<(), String>> {
        outcome(
            self.services
                .store
                .touch_provisioning(self.node)
                .map(drop)
                .map_err(CapabilityError::from),
        )
    }

    async fn last_heartbeat(&mut self) -> wasmtime::Result<Option<Heartbeat>> {
        let session = self.services.agents.get(self.node);
        Ok(session.and_then(|s| {
            Some(Heartbeat {
                agent_url: s.url?.as_str().to_owned(),
                agent_version: s.version.unwrap_or_default(),
                at: s.last_heartbeat?.to_string(),
            })
        }))
    }
}
