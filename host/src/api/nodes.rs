//! `/v1/nodes`: enroll, list, show, update, delete, and act on nodes.

use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{Extension, Path, Query};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, put};
use serde::Deserialize;
use serde_json::{Value, json};

use super::error::{ApiError, parse};
use super::version::Version;
use super::{App, State, node_list, view};
use crate::conductor::Verb;
use crate::node::{NewNode, Node, NodeBody};
use crate::state_machine::ProvisionState;

pub fn routes() -> Router<Arc<App>> {
    Router::new()
        .route("/v1/nodes", get(node_list::list).post(create))
        .route("/v1/nodes/", get(node_list::list).post(create))
        .route("/v1/nodes/detail", get(node_list::detail))
        .route("/v1/nodes/{ident}", get(show).patch(update).delete(remove))
        .route("/v1/nodes/{ident}/states", get(states))
        .route("/v1/nodes/{ident}/states/provision", put(provision))
        .route("/v1/nodes/{ident}/states/power", put(power))
        .route("/v1/nodes/{ident}/validate", get(validate))
}

async fn create(
    app: State,
    Extension(version): Extension<Version>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let new: NewNode = parse(&body)?;
    if app.conductor.registry.get(&new.driver).is_none() {
        return Err(ApiError::bad_request(format!(
            "No valid host was found. Reason: No conductor service registered which supports driver {} for conductor group \"\".",
            new.driver
        )));
    }
    let store = &app.conductor.store;
    let mut node = store.create_node(new)?;
    // Before 1.11 new nodes start in "available", as Ironic's do.
    if !version.at_least(11) {
        node = store.set_initial_available(node.uuid())?;
    }
    let base = &app.public_url;
    let location = format!("{base}/v1/nodes/{}", node.uuid());
    Ok((
        StatusCode::CREATED,
        [(header::LOCATION, location)],
        Json(view::node(base, &node, None)),
    )
        .into_response())
}

pub fn find(app: &App, ident: &str) -> Result<Node, ApiError> {
    Ok(app.conductor.store.find_node(ident)?)
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct ShowQuery {
    fields: Option<String>,
}

async fn show(
    app: State,
    Path(ident): Path<String>,
    Query(q): Query<ShowQuery>,
) -> Result<Json<Value>, ApiError> {
    let node = find(&app, &ident)?;
    let agent = app.conductor.agents.get(node.uuid());
    let doc = view::node(&app.public_url, &node, agent.as_ref());
    Ok(Json(match q.fields {
        Some(f) => view::fields(doc, &f.split(',').map(str::trim).collect::<Vec<_>>()),
        None => doc,
    }))
}

/// Top-level fields a PATCH may change.
const PATCHABLE: &[&str] = &[
    "name",
    "driver",
    "driver_info",
    "instance_info",
    "properties",
    "extra",
    "maintenance",
    "maintenance_reason",
];

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PatchOp {
    op: String,
    path: String,
    value: Option<Value>,
}

/// Applies RFC 6902 add/replace/remove operations to a node body, within [`PATCHABLE`].
fn apply_patch(body: &NodeBody, ops: &[PatchOp]) -> Result<NodeBody, ApiError> {
    let mut doc = serde_json::to_value(body).expect("a body serialises");
    for op in ops {
        let parts: Vec<String> = op
            .path
            .trim_start_matches('/')
            .split('/')
            .map(|p| p.replace("~1", "/").replace("~0", "~"))
            .collect();
        let top = parts[0].as_str();
        if !op.path.starts_with('/') || !PATCHABLE.contains(&top) {
            return Err(ApiError::bad_request(format!(
                "Cannot patch {}: only {} may be changed.",
                op.path,
                PATCHABLE.join(", ")
            )));
        }
        let (parent_path, leaf) = parts.split_at(parts.len() - 1);
        let mut parent = &mut doc;
        for p in parent_path {
            parent = parent.get_mut(p.as_str()).ok_or_else(|| {
                ApiError::bad_request(format!("Cannot patch {}: {p} does not exist.", op.path))
            })?;
        }
        let obj = parent.as_object_mut().ok_or_else(|| {
            ApiError::bad_request(format!("Cannot patch {}: not an object.", op.path))
        })?;
        let leaf = &leaf[0];
        match op.op.as_str() {
            "add" | "replace" => {
                let value = op
                    .value
                    .clone()
                    .ok_or_else(|| ApiError::bad_request(format!("'{}' needs a value.", op.op)))?;
                if op.op == "replace"
                    && !obj.contains_key(leaf)
                    && parent_path.is_empty()
                    && !matches!(top, "name" | "maintenance_reason")
                {
                    return Err(ApiError::bad_request(format!(
                        "Cannot replace {}: it does not exist.",
                        op.path
                    )));
                }
                obj.insert(leaf.clone(), value);
            }
            "remove" => {
                if parent_path.is_empty() {
                    // Removing a top-level field resets it.
                    let reset = match top {
                        "name" | "maintenance_reason" => Value::Null,
                        "maintenance" => json!(false),
                        "driver" => return Err(ApiError::bad_request("Cannot remove /driver.")),
                        _ => json!({}),
                    };
                    obj.insert(leaf.clone(), reset);
                } else if obj.remove(leaf).is_none() {
                    return Err(ApiError::bad_request(format!(
                        "Cannot remove {}: it does not exist.",
                        op.path
                    )));
                }
            }
            other => {
                return Err(ApiError::bad_request(format!(
                    "Unsupported patch operation \"{other}\": use add, replace or remove."
                )));
            }
        }
    }
    serde_json::from_value(doc).map_err(|e| ApiError::bad_request(format!("Invalid patch: {e}")))
}

/// States in which a node may be changed although a flow targets another state.
fn update_allowed(state: ProvisionState) -> bool {
    use ProvisionState as S;
    state.is_stable()
        || matches!(
            state,
            S::DeployFailed
                | S::InspectFailed
                | S::InspectWait
                | S::CleanFailed
                | S::Verifying
                | S::AdoptFailed
                | S::RescueFailed
                | S::UnrescueFailed
                | S::ServiceFailed
        )
}

async fn update(
    app: State,
    Path(ident): Path<String>,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    let ops: Vec<PatchOp> = parse(&body)?;
    let uuid = find(&app, &ident)?.uuid();
    let registry = &app.conductor.registry;
    let updated = app.conductor.edit(uuid, |provision, b| {
        if !update_allowed(provision.state) {
            return Err(ApiError::conflict(format!(
                "Node {uuid} can not be updated while a state transition is in progress (provision state \"{}\").",
                provision.state
            )));
        }
        let patched = apply_patch(b, &ops)?;
        if patched.driver != b.driver && registry.get(&patched.driver).is_none() {
            return Err(ApiError::bad_request(format!(
                "Driver {} is not loaded.",
                patched.driver
            )));
        }
        *b = patched;
        Ok(())
    })?;
    let agent = app.conductor.agents.get(updated.uuid());
    Ok(Json(view::node(&app.public_url, &updated, agent.as_ref())))
}

async fn remove(app: State, Path(ident): Path<String>) -> Result<StatusCode, ApiError> {
    let node = find(&app, &ident)?;
    app.conductor.delete(node.uuid())?;
    Ok(StatusCode::NO_CONTENT)
}

async fn states(app: State, Path(ident): Path<String>) -> Result<Json<Value>, ApiError> {
    let node = find(&app, &ident)?;
    let b = &node.body;
    let p = &node.provision;
    Ok(Json(json!({
        "console_enabled": false,
        "last_error": b.last_error,
        "power_state": b.power_state,
        "provision_state": p.state,
        "target_power_state": b.target_power_state,
        "target_provision_state": p.target,
        "provision_updated_at": p.updated_at.to_datetime(),
        "raid_config": {},
        "target_raid_config": {},
    })))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ProvisionRequest {
    target: String,
    configdrive: Option<Value>,
    clean_steps: Option<Value>,
    deploy_steps: Option<Value>,
    rescue_password: Option<String>,
    disable_ramdisk: Option<bool>,
}

/// The clean steps deployd's drivers run: erasing the disk's metadata (partition tables
/// and signatures), which their tear-down does by booting the ramdisk.
const CLEAN_STEPS: &[(&str, &str)] = &[("deploy", "erase_devices_metadata")];

/// Manual cleaning needs `clean_steps`, a list of `{interface, step}` this engine knows.
fn check_clean_steps(steps: Option<&Value>) -> Result<(), ApiError> {
    let steps = steps.and_then(Value::as_array).ok_or_else(|| {
        ApiError::bad_request(
            "\"clean_steps\" is required when setting target provision state to clean",
        )
    })?;
    if steps.is_empty() {
        return Err(ApiError::bad_request("\"clean_steps\" must not be empty"));
    }
    for step in steps {
        let field = |k: &str| step.get(k).and_then(Value::as_str).unwrap_or("");
        let (interface, name) = (field("interface"), field("step"));
        if !CLEAN_STEPS.contains(&(interface, name)) {
            return Err(ApiError::bad_request(format!(
                "Clean step {step} is not supported; deployd runs: {}",
                CLEAN_STEPS
                    .iter()
                    .map(|(i, s)| format!("{{\"interface\": \"{i}\", \"step\": \"{s}\"}}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
    }
    Ok(())
}

async fn provision(
    app: State,
    Extension(version): Extension<Version>,
    Path(ident): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let request: ProvisionRequest = parse(&body)?;
    let _ = (
        &request.configdrive,
        &request.deploy_steps,
        &request.rescue_password,
        &request.disable_ramdisk,
    );
    let node = find(&app, &ident)?;
    let verb = match request.target.as_str() {
        "manage" if version.at_least(4) => Verb::Manage,
        "provide" if version.at_least(4) => Verb::Provide,
        "active" => Verb::Deploy,
        "deploy" if version.at_least(73) => Verb::Deploy,
        "rebuild" => Verb::Rebuild,
        "deleted" => Verb::Undeploy,
        "undeploy" if version.at_least(73) => Verb::Undeploy,
        "abort" if version.at_least(13) => Verb::Abort,
        "clean" if version.at_least(15) => {
            check_clean_steps(request.clean_steps.as_ref())?;
            Verb::Clean
        }
        "manage" | "provide" | "abort" | "deploy" | "undeploy" | "clean" => {
            return Err(ApiError::not_acceptable(format!(
                "The provision target \"{}\" needs a newer API version than {version}.",
                request.target
            )));
        }
        "inspect" | "adopt" | "rescue" | "unrescue" | "service" | "unhold" => {
            return Err(ApiError::bad_request(format!(
                "deployd does not support the provision target \"{}\".",
                request.target
            )));
        }
        other => {
            return Err(ApiError::bad_request(format!(
                "\"{other}\" is not a valid provision target."
            )));
        }
    };
    app.conductor.provision(node.uuid(), verb).map_err(|e| match e {
        crate::conductor::ConductorError::Store(crate::store::StoreError::IllegalTransition { node: n, source }) => ApiError::bad_request(format!(
            "The requested action \"{}\" can not be performed on node \"{n}\" while it is in state \"{}\".",
            request.target, source.state
        )),
        other => other.into(),
    })?;
    let location = format!("{}/v1/nodes/{}/states", app.public_url, node.uuid());
    Ok((StatusCode::ACCEPTED, [(header::LOCATION, location)]).into_response())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PowerRequest {
    target: String,
    timeout: Option<u64>,
}

async fn power(app: State, Path(ident): Path<String>, body: Bytes) -> Result<Response, ApiError> {
    let request: PowerRequest = parse(&body)?;
    let _ = request.timeout;
    let node = find(&app, &ident)?;
    let action = match request.target.as_str() {
        "power on" => crate::capability::bmc::PowerAction::On,
        "power off" | "soft power off" => crate::capability::bmc::PowerAction::Off,
        "rebooting" | "soft rebooting" => crate::capability::bmc::PowerAction::Reboot,
        other => {
            return Err(ApiError::bad_request(format!(
                "\"{other}\" is not a valid power target."
            )));
        }
    };
    if matches!(
        node.state(),
        ProvisionState::Cleaning | ProvisionState::CleanWait
    ) {
        return Err(ApiError::bad_request(format!(
            "Node {} is in \"{}\"; power can not be changed now.",
            node.uuid(),
            node.state()
        )));
    }
    app.conductor.power(node.uuid(), action)?;
    let location = format!("{}/v1/nodes/{}/states", app.public_url, node.uuid());
    Ok((StatusCode::ACCEPTED, [(header::LOCATION, location)]).into_response())
}

async fn validate(app: State, Path(ident): Path<String>) -> Result<Json<Value>, ApiError> {
    let node = find(&app, &ident)?;
    let (power, deploy) = app.conductor.validate(&node).await;
    let result = |r: Result<(), String>| match r {
        Ok(()) => json!({"result": true, "reason": null}),
        Err(e) => json!({"result": false, "reason": e}),
    };
    let unsupported = json!({"result": null, "reason": "not supported by deployd"});
    Ok(Json(json!({
        "boot": {"result": true, "reason": null},
        "deploy": result(deploy),
        "power": result(power.clone()),
        "management": result(power),
        "network": {"result": true, "reason": null},
        "console": unsupported,
        "inspect": unsupported,
        "raid": unsupported,
        "rescue": unsupported,
        "storage": unsupported,
        "bios": unsupported,
    })))
}
