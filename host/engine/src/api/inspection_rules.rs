//! `/v1/inspection_rules` (1.96): Ironic's inspection rules, kept and validated.
//!
//! deployd does not inspect machines (its inspect interfaces are `no-inspect` and
//! `fake`), so no rule ever runs; the API stores them with Ironic's checks so that tools
//! managing rules work against it. A `sensitive` rule never shows its conditions or
//! actions again, and cannot be made non-sensitive.

use serde_json::{Value, json};

use super::App;
use super::http::error::ApiError;
use super::http::gate::TooOld;
use super::http::version::Version;
use super::resources::Resource;
use super::schema::{Field, Schema, Ty};
use crate::store::documents::Doc;

pub const INSPECTION_RULE: Resource = Resource {
    kind: crate::conductor::inspection::RULES,
    path: "inspection_rules",
    key: "inspection_rules",
    since: 96,
    patch_since: 96,
    schema: Schema {
        kind: crate::conductor::inspection::RULES,
        fields: &[
            Field::create("uuid", Ty::Uuid, 96),
            Field::rw("description", Ty::Text, 96),
            Field::rw("priority", Ty::Int, 96),
            Field::rw("phase", Ty::Text, 96),
            Field::rw("sensitive", Ty::Bool, 96),
            Field::rw("owner", Ty::Text, 96),
            Field::rw("public", Ty::Bool, 96),
            Field::rw("conditions", Ty::Any, 96),
            Field::rw("actions", Ty::Any, 96),
            Field::ro("created_at", Ty::Text, 96),
            Field::ro("updated_at", Ty::Text, 96),
        ],
    },
    unique: &[],
    short: &["uuid", "priority", "phase", "description", "links"],
    filters: &[("phase", 96)],
    sublinks: &[],
    check: |a, d, o, v| Box::pin(check(a, d, o, v)),
    on_create: None,
    on_delete: None,
    shown: Some(hide_sensitive),
    of_node: None,
    too_old_writes: TooOld::NotFound,
};

/// The operators a condition may use (each also negated: `!eq`).
const OPERATORS: &[&str] = &[
    "eq", "lt", "gt", "is-empty", "in-net", "matches", "contains", "one-of", "is-none", "is-true",
    "is-false",
];

const ACTIONS: &[&str] = &[
    "fail",
    "log",
    "set-attribute",
    "extend-attribute",
    "del-attribute",
    "set-capability",
    "unset-capability",
    "add-trait",
    "remove-trait",
    "set-plugin-data",
    "extend-plugin-data",
    "unset-plugin-data",
    "set-port-attribute",
    "extend-port-attribute",
    "del-port-attribute",
    "api-call",
];

const MULTIPLE: &[&str] = &["any", "all", "first", "last"];

/// The phases a rule may run in; Ironic has one.
const PHASES: &[&str] = &["main"];

/// Ironic's highest rule priority.
const MAX_PRIORITY: i64 = 9999;

fn hide_sensitive(doc: &mut Doc) {
    if doc.get("sensitive") == Some(&Value::Bool(true)) {
        doc.insert("conditions".into(), Value::Null);
        doc.insert("actions".into(), Value::Null);
    }
}

/// Checks a list of conditions or actions: objects with a known `op` and `args`.
fn check_ops(doc: &Doc, key: &str, ops: &[&str], at_least_one: bool) -> Result<(), ApiError> {
    let items = match doc.get(key) {
        Some(Value::Array(items)) => items.as_slice(),
        None | Some(Value::Null) if !at_least_one => &[],
        _ => {
            return Err(ApiError::bad_request(format!(
                "'{key}' must be a list of objects with 'op' and 'args'"
            )));
        }
    };
    if at_least_one && items.is_empty() {
        return Err(ApiError::bad_request(format!(
            "[] is too short: a rule needs at least one of '{key}'"
        )));
    }
    for item in items {
        let op = item.get("op").and_then(Value::as_str).unwrap_or_default();
        let bare = op.trim_start_matches('!').trim_start();
        let negated = bare.len() != op.len();
        let known = ops.contains(&bare) && (!negated || key == "conditions");
        if !known {
            return Err(ApiError::bad_request(format!(
                "'{op}' is not one of the {key} operators: {}",
                ops.join(", ")
            )));
        }
        if !item
            .get("args")
            .is_some_and(|a| a.is_array() || a.is_object())
        {
            return Err(ApiError::bad_request(format!(
                "'args' is a required property of every {key} item (a list or an object): {item}"
            )));
        }
        if let Some(m) = item.get("multiple")
            && (key != "conditions" || !m.as_str().is_some_and(|m| MULTIPLE.contains(&m)))
        {
            return Err(ApiError::bad_request(format!(
                "'multiple' must be one of {} (conditions only), not {m}",
                MULTIPLE.join(", ")
            )));
        }
    }
    Ok(())
}

async fn check(_: &App, doc: &mut Doc, old: Option<&Doc>, _: Version) -> Result<(), ApiError> {
    check_ops(doc, "actions", ACTIONS, true)?;
    check_ops(doc, "conditions", OPERATORS, false)?;
    let phase = doc.get("phase").and_then(Value::as_str).unwrap_or("main");
    if !PHASES.contains(&phase) {
        return Err(ApiError::bad_request(format!(
            "Invalid phase {phase:?}; expected one of {}",
            PHASES.join(", ")
        )));
    }
    let priority = doc.get("priority").and_then(Value::as_i64).unwrap_or(0);
    if !(0..=MAX_PRIORITY).contains(&priority) {
        return Err(ApiError::bad_request(format!(
            "Priority must be between 0 and {MAX_PRIORITY}, not {priority}"
        )));
    }
    let was_sensitive = old.and_then(|o| o.get("sensitive")) == Some(&Value::Bool(true));
    if was_sensitive && doc.get("sensitive") != Some(&Value::Bool(true)) {
        return Err(ApiError::bad_request(
            "Inspection rules cannot have the sensitive flag unset.",
        ));
    }
    let public = doc.get("public") == Some(&Value::Bool(true));
    if public && doc.get("owner").is_some_and(|o| !o.is_null()) {
        return Err(ApiError::bad_request(
            "There cannot be an owner for a public inspection rule",
        ));
    }
    for (key, default) in [
        ("phase", json!("main")),
        ("priority", json!(0)),
        ("sensitive", json!(false)),
        ("public", json!(false)),
        ("conditions", json!([])),
    ] {
        if doc.get(key).is_none_or(Value::is_null) {
            doc.insert(key.into(), default);
        }
    }
    Ok(())
}
