//! The `clean` extension, as ironic-python-agent's: the engine lists the agent's clean
//! steps (`clean.get_clean_steps`), then runs one (`clean.execute_clean_step`) with the
//! step document and the hardware manager versions it was given; a version that does not
//! match this agent's is refused, as IPA refuses it.

use std::path::Path;

use serde_json::{Value, json};

use super::commands::AgentError;
use super::disk;

/// This agent's hardware manager: its name and version, as `hardware_manager_version`.
const MANAGER: &str = "DeploydHardwareManager";
const VERSION: &str = "1.0";

/// The steps this agent offers (IPA's names, interfaces and default priorities).
/// `erase_devices` erases the metadata only unless its args say `{"full": true}`: zeroing
/// a whole disk is an operator's explicit choice, never a default.
pub fn steps() -> Value {
    let step = |name: &str, priority: u32| {
        json!({"step": name, "priority": priority, "interface": "deploy",
               "reboot_requested": false, "abortable": true, "argsinfo": null})
    };
    json!({
        "clean_steps": {MANAGER: [step("erase_devices_metadata", 99), step("erase_devices", 10)]},
        "hardware_manager_version": {MANAGER: VERSION},
    })
}

/// What running a step takes.
pub enum Run {
    /// Finished already, with its result.
    Done(Value),
    /// A whole-disk erase, to run in the background.
    Full(Value),
}

pub fn execute(disk: &Path, params: &Value) -> Result<Run, AgentError> {
    let step = params
        .get("step")
        .filter(|s| s.is_object())
        .ok_or_else(|| AgentError::InvalidParams("'step' (an object) is required".into()))?;
    let given = params.get("clean_version").filter(|v| !v.is_null());
    if let Some(given) = given.filter(|g| g.get(MANAGER).and_then(Value::as_str) != Some(VERSION)) {
        return Err(AgentError::InvalidParams(format!(
            "clean version mismatch: the engine has {given}, this agent is {{\"{MANAGER}\": \"{VERSION}\"}}"
        )));
    }
    let name = step.get("step").and_then(Value::as_str).unwrap_or_default();
    let full = step.pointer("/args/full").and_then(Value::as_bool) == Some(true);
    match (step.get("interface").and_then(Value::as_str), name) {
        (Some("deploy"), "erase_devices") if full => Ok(Run::Full(step.clone())),
        (Some("deploy"), "erase_devices_metadata" | "erase_devices") => {
            let n = disk::erase_metadata(disk).map_err(AgentError::InvalidParams)?;
            Ok(Run::Done(json!({
                "clean_result": format!("erased {n} bytes of metadata"),
                "clean_step": step,
            })))
        }
        _ => Err(AgentError::InvalidParams(format!(
            "unknown clean step {step}; this agent offers deploy.erase_devices_metadata and deploy.erase_devices"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn disk() -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("disk");
        std::fs::write(&path, vec![0xAB; 4 << 20]).unwrap();
        (dir, path)
    }

    #[test]
    fn listed_steps_run_with_their_version_and_others_are_refused() {
        let (_dir, path) = disk();
        let listed = steps();
        let step = listed["clean_steps"][MANAGER][0].clone();
        let version = listed["hardware_manager_version"].clone();
        let run = execute(&path, &json!({"step": step, "clean_version": version})).unwrap();
        assert!(matches!(run, Run::Done(r) if r["clean_step"]["step"] == "erase_devices_metadata"));
        let bytes = std::fs::read(&path).unwrap();
        assert!(
            bytes[..1 << 20].iter().all(|&b| b == 0) && bytes[(3 << 20)..].iter().all(|&b| b == 0)
        );
        assert!(
            bytes[(1 << 20)..(3 << 20)].iter().all(|&b| b == 0xAB),
            "the middle is kept"
        );

        let old = json!({"step": step, "clean_version": {MANAGER: "0.9"}});
        assert!(execute(&path, &old).is_err());
        assert!(
            execute(
                &path,
                &json!({"step": {"interface": "deploy", "step": "burn"}})
            )
            .is_err()
        );
        let full = json!({"step": {"interface": "deploy", "step": "erase_devices", "args": {"full": true}}});
        assert!(matches!(execute(&path, &full).unwrap(), Run::Full(_)));
    }
}
