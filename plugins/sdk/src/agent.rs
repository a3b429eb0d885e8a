//! The node's ramdisk agent (Ironic's agent command API), as typed results.

use serde_json::Value;

use crate::Error;
use crate::bindings::deployd::driver::agent as host;

/// One command result as the agent reports it (the wire type the engine's agent and
/// ironic-python-agent both answer with).
pub use deployd_wire::agent::{CommandResult as Command, CommandStatus};

/// The agent's error text of a command.
pub trait ErrorText {
    /// Its `details` or `message`, as Ironic reads them.
    fn error_text(&self) -> String;
}

impl ErrorText for Command {
    fn error_text(&self) -> String {
        match &self.command_error {
            Some(Value::Object(e)) => e
                .get("details")
                .or_else(|| e.get("message"))
                .and_then(Value::as_str)
                .unwrap_or("unknown error")
                .to_owned(),
            Some(other) => other.to_string(),
            None => "unknown error".to_owned(),
        }
    }
}

/// Runs `name` (e.g. "standby.prepare_image") with `params`.
pub fn run(name: &str, params: &Value, wait: bool) -> Result<Command, Error> {
    let json = host::run(name, &params.to_string(), wait)?;
    serde_json::from_str(&json)
        .map_err(|e| Error::Remote(format!("agent sent a malformed command result: {e}")))
}

/// Every command the agent ran, oldest first.
pub fn list() -> Result<Vec<Command>, Error> {
    let json = host::commands()?;
    serde_json::from_str(&json)
        .map_err(|e| Error::Remote(format!("agent sent a malformed command list: {e}")))
}

/// The last command of this name the agent ran (`name` without the extension prefix, as
/// the agent reports it: "prepare_image").
pub fn last(name: &str) -> Result<Option<Command>, Error> {
    Ok(list()?.into_iter().rev().find(|c| c.command_name == name))
}
