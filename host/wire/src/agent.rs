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

/// What deployd's agent says of its work in a heartbeat's `agent_status_message`: the
/// command running (or last run) with its status, and the image bytes written of the
/// total. Written and read here, so the agent and the engine agree on the words, which
/// stay readable: `prepare_image: running, 1048576 of 8388608 bytes written`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Progress {
    pub command: Option<(String, CommandStatus)>,
    pub written: u64,
    /// The image's length, when the agent knows it.
    pub total: Option<u64>,
}

impl Progress {
    /// Whether the image write has every byte (its length known).
    pub fn is_complete(&self) -> bool {
        self.total.is_some_and(|t| t > 0 && self.written >= t)
    }
}

impl std::fmt::Display for Progress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let of_total = match self.total {
            Some(total) => format!("{} of {total} bytes written", self.written),
            None => format!("{} bytes written", self.written),
        };
        match &self.command {
            None if self.written > 0 => write!(f, "disk: {of_total}"),
            None => f.write_str("ready"),
            Some((name, status)) => write!(
                f,
                "{name}: {}, {of_total}",
                status.as_str().to_ascii_lowercase()
            ),
        }
    }
}

impl std::str::FromStr for Progress {
    type Err = String;

    fn from_str(text: &str) -> Result<Progress, String> {
        let bad = || format!("not a progress report: {text:?}");
        if text == "ready" {
            return Ok(Progress::default());
        }
        let (head, bytes) = text.rsplit_once(", ").unwrap_or(("", text));
        let (command, bytes) = match text.strip_prefix("disk: ") {
            Some(bytes) => (None, bytes),
            None => {
                let (name, status) = head.split_once(": ").ok_or_else(bad)?;
                let status = serde_json::from_value(Value::String(status.to_ascii_uppercase()))
                    .map_err(|_| bad())?;
                (Some((name.to_owned(), status)), bytes)
            }
        };
        let bytes = bytes.strip_suffix(" bytes written").ok_or_else(bad)?;
        let (written, total) = match bytes.split_once(" of ") {
            Some((w, t)) => (w, Some(t.parse().map_err(|_| bad())?)),
            None => (bytes, None),
        };
        Ok(Progress {
            command,
            written: written.parse().map_err(|_| bad())?,
            total,
        })
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
    fn progress_reports_read_back_as_written() {
        let reports = [
            Progress::default(),
            Progress {
                command: None,
                written: 5,
                total: None,
            },
            Progress {
                command: Some(("prepare_image".into(), CommandStatus::Running)),
                written: 1 << 20,
                total: Some(8 << 20),
            },
            Progress {
                command: Some(("erase_devices_metadata".into(), CommandStatus::Succeeded)),
                written: 0,
                total: None,
            },
        ];
        for p in reports {
            assert_eq!(p.to_string().parse::<Progress>(), Ok(p.clone()), "{p}");
        }
        assert_eq!(
            Progress {
                command: Some(("prepare_image".into(), CommandStatus::Running)),
                written: 1048576,
                total: Some(8388608),
            }
            .to_string(),
            "prepare_image: running, 1048576 of 8388608 bytes written"
        );
        assert!("booting".parse::<Progress>().is_err());
        assert!("x: sleeping, 1 bytes written".parse::<Progress>().is_err());
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
