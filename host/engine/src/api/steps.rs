//! The steps a deploy template or a runbook carries, checked as Ironic checks them.

use serde_json::{Value, json};

use super::http::error::ApiError;
use super::resources::missing;
use crate::store::documents::Doc;

const STEP_INTERFACES: &[&str] = &[
    "bios",
    "deploy",
    "firmware",
    "management",
    "network",
    "power",
    "raid",
    "storage",
];

/// A document's `steps`: at least one, each `{interface, step, args, <rank>}` with a
/// known interface and a non-negative rank (a deploy template's `priority`, a runbook's
/// `order`; Ironic takes a string of digits too). `args` defaults to `{}`.
pub fn check_steps(doc: &mut Doc, rank: &str) -> Result<(), ApiError> {
    let steps = doc
        .get_mut("steps")
        .and_then(Value::as_array_mut)
        .ok_or_else(|| missing("steps"))?;
    if steps.is_empty() {
        return Err(ApiError::bad_request(
            "[] is too short: at least one step is needed.",
        ));
    }
    for step in steps.iter_mut() {
        let shown = step.to_string();
        let obj = step.as_object_mut().ok_or_else(|| {
            ApiError::bad_request(format!("Invalid step {shown}: expected an object"))
        })?;
        let interface = obj
            .get("interface")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if !STEP_INTERFACES.contains(&interface) {
            return Err(ApiError::bad_request(format!(
                "Invalid step interface {interface:?}; expected one of {}",
                STEP_INTERFACES.join(", ")
            )));
        }
        if obj
            .get("step")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
        {
            return Err(missing("step"));
        }
        let value = match obj.get(rank) {
            Some(Value::Number(n)) => n.as_u64(),
            Some(Value::String(s)) if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) => {
                s.parse().ok()
            }
            _ => None,
        };
        let Some(value) = value else {
            return Err(ApiError::bad_request(format!(
                "A step's {rank} must be a non-negative integer: {shown}"
            )));
        };
        obj.insert(rank.into(), json!(value));
        match obj.get("args") {
            None | Some(Value::Null) => {
                obj.insert("args".into(), json!({}));
            }
            Some(Value::Object(_)) => {}
            Some(other) => {
                return Err(ApiError::bad_request(format!(
                    "A step's args must be an object, not {other}"
                )));
            }
        }
    }
    Ok(())
}
