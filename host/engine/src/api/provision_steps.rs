//! The steps an operator asks a provision action to run: a manual cleaning's
//! `clean_steps` and a servicing's `service_steps` (or a runbook's), checked before the
//! node moves, and returned as the flow runs them (`args` always an object).

use serde_json::{Value, json};

use super::http::error::ApiError;
use crate::node::NodeBody;

/// The clean steps deployd's drivers run, through the agent both ironic-python-agent and
/// deployd's agent have: erasing the disk's metadata (partition tables and signatures),
/// and erasing the disk (deployd's agent: its metadata, or all of it with `{"full": true}`).
const CLEAN_STEPS: &[(&str, &str)] = &[
    ("deploy", "erase_devices_metadata"),
    ("deploy", "erase_devices"),
];

/// The agent RAID interface's clean steps (Ironic's `agent` RAID): run by an agent that
/// lists them (ironic-python-agent's software RAID does), with the node's
/// `target_raid_config` in the node document the agent is given. An agent that lists
/// none fails the cleaning with Ironic's words ("node does not support this clean step").
const RAID_STEPS: &[(&str, &str)] = &[
    ("raid", "create_configuration"),
    ("raid", "delete_configuration"),
];

/// Manual cleaning needs `clean_steps` (or a runbook's), a list of `{interface, step,
/// args}` this engine knows, run in the order given; every one of them needs the ramdisk.
/// The RAID steps need the node's `raid_interface` to be `agent`, and creating one a
/// `target_raid_config` to build. Returns them as the driver receives them (`args`
/// always an object).
pub fn clean(
    steps: Option<&Value>,
    disable_ramdisk: bool,
    node: &NodeBody,
) -> Result<Vec<Value>, ApiError> {
    let steps = steps.and_then(Value::as_array).ok_or_else(|| {
        ApiError::bad_request(
            "\"clean_steps\" or \"runbook\" is required when setting target provision state to clean",
        )
    })?;
    if steps.is_empty() {
        return Err(ApiError::bad_request("\"clean_steps\" must not be empty"));
    }
    for step in steps {
        let field = |k: &str| step.get(k).and_then(Value::as_str).unwrap_or("");
        let (interface, name) = (field("interface"), field("step"));
        if RAID_STEPS.contains(&(interface, name)) {
            check_raid_step(step, name, node)?;
        } else if !CLEAN_STEPS.contains(&(interface, name)) {
            return Err(ApiError::bad_request(format!(
                "Clean step {step} is not supported; deployd runs: {}",
                CLEAN_STEPS
                    .iter()
                    .map(|(i, s)| format!("{{\"interface\": \"{i}\", \"step\": \"{s}\"}}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
        if disable_ramdisk {
            return Err(ApiError::bad_request(format!(
                "Clean step {interface}.{name} runs in the ramdisk; it cannot run with disable_ramdisk."
            )));
        }
    }
    steps
        .iter()
        .map(|step| {
            let args = match step.get("args") {
                None | Some(Value::Null) => json!({}),
                Some(Value::Object(a)) => Value::Object(a.clone()),
                Some(other) => {
                    return Err(ApiError::bad_request(format!(
                        "A clean step's args must be an object, not {other}"
                    )));
                }
            };
            Ok(json!({"interface": step["interface"], "step": step["step"], "args": args}))
        })
        .collect()
}

/// Servicing needs `service_steps` (or a runbook's): Ironic's built-in steps, which
/// deployd runs without a ramdisk (see `conductor::servicing`). A `wait` needs its
/// `seconds` here, since no agent's heartbeat would end it.
pub fn service(steps: Option<&Value>) -> Result<Vec<Value>, ApiError> {
    use crate::conductor::servicing::BUILT_IN;
    let steps = match steps.and_then(Value::as_array) {
        Some(list) if !list.is_empty() => list,
        _ => {
            return Err(ApiError::bad_request(
                "\"service_steps\" (a non-empty list) is required when setting target provision state to service",
            ));
        }
    };
    steps
        .iter()
        .map(|step| {
            let interface = step.get("interface").and_then(Value::as_str);
            let name = step.get("step").and_then(Value::as_str);
            let (Some(interface), Some(name)) = (interface, name) else {
                return Err(ApiError::bad_request(format!(
                    "A service step needs \"interface\" and \"step\": {step}"
                )));
            };
            if !crate::hardware::KINDS.iter().any(|(k, _)| *k == interface) {
                return Err(ApiError::bad_request(format!(
                    "'{interface}' is not a valid interface of a service step"
                )));
            }
            if !BUILT_IN.contains(&name) {
                return Err(ApiError::bad_request(format!(
                    "node does not support this service step: {step}"
                )));
            }
            let args = match step.get("args") {
                None | Some(Value::Null) => json!({}),
                Some(Value::Object(a)) => Value::Object(a.clone()),
                Some(other) => {
                    return Err(ApiError::bad_request(format!(
                        "A service step's args must be an object, not {other}"
                    )));
                }
            };
            if name == "wait" && args.get("seconds").and_then(Value::as_u64).is_none() {
                return Err(ApiError::bad_request(
                    "deployd services without a ramdisk: a \"wait\" service step needs \"seconds\" (a whole number) in its args",
                ));
            }
            Ok(json!({"interface": interface, "step": name, "args": args}))
        })
        .collect()
}

/// A RAID clean step on a node whose RAID interface is `agent` (anything else does not
/// have the step, in Ironic's words); creating needs a target to create.
fn check_raid_step(step: &Value, name: &str, node: &NodeBody) -> Result<(), ApiError> {
    if node.interfaces.get("raid").map(String::as_str) != Some("agent") {
        return Err(ApiError::bad_request(format!(
            "node does not support this clean step: {}",
            crate::python_text::repr(step)
        )));
    }
    let target = node.attrs.get("target_raid_config");
    if name == "create_configuration"
        && target.is_none_or(|t| t.as_object().is_none_or(|t| t.is_empty()))
    {
        return Err(ApiError::bad_request(format!(
            "Node {} has no target RAID configuration (PUT /v1/nodes/{{node}}/states/raid first).",
            node.uuid
        )));
    }
    Ok(())
}
