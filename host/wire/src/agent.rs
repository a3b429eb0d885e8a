//! The ramdisk agent protocol's documents: what an agent sends in a heartbeat, and what
//! its command API answers.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// `POST /v1/heartbeat/{node}`, as ironic-python-agent sends it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Heartbeat {
    pub callback_url: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent_token: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent_version: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent_verify_ca: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent_status: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent_status_message: Option<String>,
}

/// Where a command is (`command_status`), spelled as ironic-python-agent spells it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum CommandStatus {
    Running,
    Succeeded,
    Failed,
    /// IPA's state while it verifies an image; deployd's agent never reports it.
    Verifying,
}

impl CommandStatus {
    /// As it is written on the wire (`RUNNING`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            CommandStatus::Running => "RUNNING",
            CommandStatus::Succeeded => "SUCCEEDED",
            CommandStatus::Failed => "FAILED",
            CommandStatus::Verifying => "VERIFYING",
        }
    }
}

/// One command of the agent's command API (`/v1/commands`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CommandResult {
    pub id: String,
    pub command_name: String,
    pub command_status: CommandStatus,
    #[serde(default)]
    pub command_error: Option<Value>,
    #[serde(default)]
    pub command_result: Option<Value>,
}

impl CommandResult {
    pub fn is_running(&self) -> bool {
        matches!(
            self.command_status,
            CommandStatus::Running | CommandStatus::Verifying
        )
    }

    pub fn succeeded(&self) -> bool {
        self.command_status == CommandStatus::Succeeded
    }
}

/// `GET /v1/commands/`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CommandList {
    pub commands: Vec<CommandResult>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_results_read_as_ironic_python_agent_writes_them() {
        let ipa = r#"{"id": "c1", "command_name": "prepare_image", "command_status": "RUNNING",
            "command_error": null, "command_result": null, "command_params": {}}"#;
        let c: CommandResult = serde_json::from_str(ipa).unwrap();
        assert!(c.is_running() && !c.succeeded());
        let done = CommandResult {
            command_status: CommandStatus::Succeeded,
            ..c
        };
        let text = serde_json::to_string(&done).unwrap();
        assert!(text.contains("\"SUCCEEDED\""), "{text}");
        for status in [
            CommandStatus::Running,
            CommandStatus::Failed,
            CommandStatus::Verifying,
        ] {
            let json = serde_json::to_string(&status).unwrap();
            assert_eq!(json, format!("\"{}\"", status.as_str()));
        }
    }

    #[test]
    fn a_heartbeat_refuses_unknown_fields_and_omits_absent_ones() {
        let hb = Heartbeat {
            callback_url: "http://10.0.0.5:9999".into(),
            agent_token: Some("t".into()),
            ..Default::default()
        };
        let text = serde_json::to_string(&hb).unwrap();
        assert_eq!(
            text,
            r#"{"callback_url":"http://10.0.0.5:9999","agent_token":"t"}"#
        );
        let unknown = r#"{"callback_url": "http://x:1", "x": 1}"#;
        assert!(serde_json::from_str::<Heartbeat>(unknown).is_err());
    }
}
