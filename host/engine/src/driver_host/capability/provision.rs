//! `deployd:driver/provision`: the node's provisioning clock and its agent's last word.

use deployd_wire::agent::{CommandStatus, Progress as AgentProgress};

use super::bindings::deployd::driver::provision::{Heartbeat, Host, Progress, Step, StepStatus};
use super::{CapabilityError, HostState};
use crate::agent_sessions::AgentSession;

impl Host for HostState {
    async fn touch(&mut self) -> Result<(), CapabilityError> {
        self.services.store.touch_provisioning(self.node).await?;
        Ok(())
    }

    async fn last_heartbeat(&mut self) -> wasmtime::Result<Option<Heartbeat>> {
        Ok(self.services.agents.read(self.node, heartbeat).flatten())
    }
}

/// The WIT record of an agent's last heartbeat, if one arrived.
fn heartbeat(s: &AgentSession) -> Option<Heartbeat> {
    Some(Heartbeat {
        agent_url: s.url.as_ref()?.as_str().to_owned(),
        agent_version: s.version.clone().unwrap_or_default(),
        at: s.last_heartbeat?.to_string(),
        status: s.status.clone(),
        status_message: s.status_message.clone(),
        progress: s.progress.as_ref().map(progress),
    })
}

fn progress(p: &AgentProgress) -> Progress {
    Progress {
        step: p.command.as_ref().map(|(name, status)| Step {
            name: name.clone(),
            status: match status {
                CommandStatus::Running => StepStatus::Running,
                CommandStatus::Succeeded => StepStatus::Succeeded,
                CommandStatus::Failed => StepStatus::Failed,
                CommandStatus::Verifying => StepStatus::Verifying,
            },
        }),
        bytes_done: p.written,
        bytes_total: p.total,
    }
}
