//! `/v1/nodes`: enroll, list, show, update, delete, and act on nodes.

use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Extension, Path, Query};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, put};
use serde::Deserialize;
use serde_json::{Value, json};
use uuid::Uuid;

use super::http::error::{ApiError, parse};
use super::http::version::Version;
use super::listing::ShowQuery;
use super::node_access::find;
use super::node_doc;
use super::node_view::NodeView;
use super::portgroups::PORTGROUP;
use super::provision_steps;
use super::volume::{VOLUME_CONNECTOR, VOLUME_TARGET};
use super::{App, State, node_list};
use crate::conductor::{Verb, allocations};
use crate::driver_host::capability::bmc::PowerAction;
use crate::hardware::Hardware;
use crate::node::{Node, NodeBody};
use crate::state_machine::{Event, ProvisionState};
use crate::store::Cascade;
use deployd_wire::targets::{PowerTarget, ProvisionTarget};

pub fn routes() -> Router<Arc<App>> {
    Router::new()
        .route("/v1/nodes", get(node_list::list).post(create))
        .route("/v1/nodes/", get(node_list::list).post(create))
        .route("/v1/nodes/detail", get(node_list::detail))
        .route("/v1/nodes/{ident}", get(show).patch(update).delete(remove))
        .route("/v1/nodes/{ident}/states", get(states))
        // A config drive may be 64 MiB of base64: this body may be that and a little.
        .route(
            "/v1/nodes/{ident}/states/provision",
            put(provision).layer(axum::extract::DefaultBodyLimit::max(
                crate::config_drive::MAX_BYTES + (1 << 20),
            )),
        )
        .route("/v1/nodes/{ident}/states/power", put(power))
        .route("/v1/nodes/{ident}/validate", get(validate))
}

async fn create(
    app: State,
    Extension(version): Extension<Version>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let mut new = node_doc::new_node(&body, version, &app.conductor.hardware())?;
    // As Ironic: a node no engine could run the steps of is not enrolled.
    let group = node_doc::conductor_group(&new.attrs);
    if !app.peers.serve(&app, group, &new.driver).await? {
        return Err(ApiError::bad_request(
            crate::conductor_groups::no_valid_host(&new.driver, group),
        ));
    }
    let given: Vec<String> = new.attrs.keys().cloned().collect();
    settle(&app, new.uuid, &mut new.attrs, &new.instance_info, &given).await?;
    let node = app.conductor.enroll(new, !version.at_least(11)).await?;
    let conductors = app.peers.conductors(&app).await;
    let base = &app.base();
    let location = format!("{base}/v1/nodes/{}", node.uuid());
    Ok((
        StatusCode::CREATED,
        [(header::LOCATION, location)],
        NodeView {
            base,
            conductor: conductors.of(&node),
            node: &node,
            agent: None,
            version,
            only: None,
        },
    )
        .into_response())
}

async fn show(
    app: State,
    Extension(version): Extension<Version>,
    Path(ident): Path<String>,
    Query(q): Query<ShowQuery>,
) -> Result<Response, ApiError> {
    let node = find(&app, &ident).await?;
    let agent = app.conductor.agent_view(node.uuid()).await;
    let only = q
        .fields
        .as_deref()
        .map(|f| node_doc::NODE.fields(f, version))
        .transpose()?;
    let conductors = app.peers.conductors(&app).await;
    Ok(NodeView {
        base: &app.base(),
        conductor: conductors.of(&node),
        node: &node,
        agent: agent.as_ref(),
        version,
        only: only.as_deref(),
    }
    .into_response())
}

/// What a node's fields mean beyond themselves:
/// - `parent_node` (1.83) names an existing node, other than this one, and is kept as
///   its uuid;
/// - `instance_name` (1.104) follows `instance_info.display_name` (as Nova sets it) while
///   it has no value of its own, unless the same request sets it.
async fn settle(
    app: &App,
    me: Option<Uuid>,
    attrs: &mut crate::node::JsonMap,
    instance_info: &crate::node::JsonMap,
    changed: &[String],
) -> Result<(), ApiError> {
    if let Some(parent) = attrs.get("parent_node").and_then(Value::as_str) {
        let found = app
            .conductor
            .store()
            .find_node(parent)
            .await
            .map_err(|_| ApiError::bad_request(format!("Node {parent} could not be found.")))?;
        if Some(found.uuid()) == me {
            return Err(ApiError::bad_request("A node cannot be its own parent."));
        }
        attrs.insert("parent_node".into(), json!(found.uuid()));
    }
    if changed.iter().any(|f| f == "chassis_uuid")
        && let Some(chassis) = attrs.get("chassis_uuid").and_then(Value::as_str)
    {
        // Ironic: a node may only name a chassis that exists (400 otherwise).
        let found = match Uuid::parse_str(chassis) {
            Ok(u) => match app
                .conductor
                .store()
                .document(super::chassis::CHASSIS.kind, u)
                .await
            {
                Ok(_) => true,
                Err(crate::store::StoreError::DocumentNotFound { .. }) => false,
                Err(e) => return Err(e.into()),
            },
            Err(_) => false,
        };
        if !found {
            return Err(ApiError::bad_request(format!(
                "Chassis {chassis} could not be found."
            )));
        }
    }
    let named = attrs.get("instance_name").is_some_and(|n| !n.is_null());
    let explicit = changed.iter().any(|f| f == "instance_name");
    if !named
        && !explicit
        && let Some(display) = instance_info.get("display_name").and_then(Value::as_str)
    {
        attrs.insert("instance_name".into(), json!(display));
    }
    if attrs.get("instance_name").and_then(Value::as_str) == Some("") {
        return Err(ApiError::bad_request("'' is too short: instance_name"));
    }
    Ok(())
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

/// What a `PATCH` of a node asks.
#[derive(Clone, Copy)]
struct Changes<'a> {
    ops: &'a Value,
    version: Version,
    patched: &'a [String],
    hardware: &'a Hardware<'a>,
    /// `?reset_interfaces=true` (1.45): a new driver's defaults replace the interfaces
    /// the patch does not name; without it they are kept and must suit the new driver.
    reset: bool,
}

/// The body `node` gets from a `PATCH`, or why it is refused.
async fn patched_body(app: &App, node: Node, c: Changes<'_>) -> Result<NodeBody, ApiError> {
    let (uuid, provision, mut b) = (node.uuid(), node.provision, node.body);
    if !update_allowed(provision.state) {
        return Err(ApiError::conflict(format!(
            "Node {uuid} can not be updated while a state transition is in progress (provision state \"{}\").",
            provision.state
        )));
    }
    let mut doc = node_doc::editable(&b);
    node_doc::NODE.patch(&mut doc, c.ops, c.version)?;
    let was_retired = b.attrs.get("retired") == Some(&Value::Bool(true));
    let was_protected = b.is_protected();
    node_doc::write_back(&mut b, doc, c.patched, c.hardware, c.reset)?;
    settle(app, Some(uuid), &mut b.attrs, &b.instance_info, c.patched).await?;
    // Removing the instance ends its allocation, as in Ironic.
    if b.attrs.get("instance_uuid").is_none_or(Value::is_null) {
        b.attrs.remove("allocation_uuid");
    }
    // Only a node with an instance can be protected: what protection keeps is the instance.
    let can_protect = matches!(
        provision.state,
        ProvisionState::Active | ProvisionState::Rescue
    );
    if b.is_protected() && !was_protected && !can_protect {
        return Err(ApiError::conflict(format!(
            "Node {uuid} can only be made protected in provision states 'active' or 'rescue', the current state is '{}'",
            provision.state
        )));
    }
    let retired = b.attrs.get("retired") == Some(&Value::Bool(true));
    if retired && !was_retired && provision.state == ProvisionState::Available {
        return Err(ApiError::conflict(format!(
            "The requested action \"retire\" can not be performed on node \"{uuid}\" while it is in state \"available\"."
        )));
    }
    Ok(b)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PatchQuery {
    reset_interfaces: Option<String>,
}

/// `?reset_interfaces=`: from 1.45, and only with a new driver (Ironic's two refusals).
fn reset_asked(
    query: Result<Query<PatchQuery>, QueryRejection>,
    version: Version,
    patched: &[String],
) -> Result<bool, ApiError> {
    let Query(q) = query.map_err(|e| super::http::error::query_refused(&e))?;
    let Some(given) = q.reset_interfaces else {
        return Ok(false);
    };
    if !version.at_least(45) {
        return Err(ApiError::not_acceptable(
            "The reset_interfaces parameter needs API version 1.45 or newer.",
        ));
    }
    let reset = super::schema::parse_bool(&json!(given))
        .ok_or_else(|| ApiError::bad_request(format!("Invalid reset_interfaces: {given}")))?;
    if reset && !patched.iter().any(|f| f == "driver") {
        return Err(ApiError::bad_request(
            "The reset_interfaces parameter can be provided only when changing the node's driver.",
        ));
    }
    Ok(reset)
}

async fn update(
    app: State,
    Extension(version): Extension<Version>,
    Path(ident): Path<String>,
    query: Result<Query<PatchQuery>, QueryRejection>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let ops: Value = parse(&body)?;
    let patched = node_doc::patched_fields(&ops);
    let reset = reset_asked(query, version, &patched)?;
    let before = find(&app, &ident).await?;
    let uuid = before.uuid();
    let hardware = app.conductor.hardware();
    let updated = app
        .conductor
        .edit_reading(uuid, |node| {
            let changes = Changes {
                ops: &ops,
                version,
                patched: &patched,
                hardware: &hardware,
                reset,
            };
            patched_body(&app, node, changes)
        })
        .await?;
    let allocation = |n: &Node| {
        n.body
            .attrs
            .get("allocation_uuid")
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    let ended = match (allocation(&before), allocation(&updated)) {
        (Some(a), None) => Uuid::parse_str(&a).ok(),
        _ => None,
    };
    if let Some(a) = ended {
        let deleted = app
            .conductor
            .delete_document(allocations::KIND, a, allocations::UNIQUE)
            .await;
        match deleted {
            Ok(()) | Err(crate::store::StoreError::DocumentNotFound { .. }) => {}
            Err(e) => {
                tracing::warn!(node = %updated.uuid(), allocation = %a, "the allocation the node left stays: {e}")
            }
        }
    }
    let agent = app.conductor.agent_view(updated.uuid()).await;
    let conductors = app.peers.conductors(&app).await;
    Ok(NodeView {
        base: &app.base(),
        conductor: conductors.of(&updated),
        node: &updated,
        agent: agent.as_ref(),
        version,
        only: None,
    }
    .into_response())
}

async fn remove(app: State, Path(ident): Path<String>) -> Result<StatusCode, ApiError> {
    let node = find(&app, &ident).await?;
    // What belonged to the node goes with it (as Ironic's cascade does).
    let cascade = Cascade {
        of_node: OF_NODE.to_vec(),
        named_by: vec![("allocation_uuid", allocations::KIND, allocations::UNIQUE)],
    };
    app.conductor.delete(node.uuid(), &cascade).await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn states(
    app: State,
    Extension(version): Extension<Version>,
    Path(ident): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let node = find(&app, &ident).await?;
    let b = &node.body;
    let p = &node.provision;
    let mut doc = json!({
        "console_enabled": b.attrs.get("console_enabled").cloned().unwrap_or(json!(false)),
        "last_error": b.last_error,
        "power_state": b.power_state,
        "provision_state": super::node_view::shown_state(p.state, version),
        "target_power_state": b.target_power_state,
        "target_provision_state": p.target,
        "provision_updated_at": p.updated_at.to_datetime(),
    });
    // RAID came with 1.12, in the node and in its states alike.
    if version.at_least(12) {
        for key in ["raid_config", "target_raid_config"] {
            doc[key] = b.attrs.get(key).cloned().unwrap_or(json!({}));
        }
    }
    if version.at_least(75) {
        for key in ["boot_mode", "secure_boot"] {
            doc[key] = b.attrs.get(key).cloned().unwrap_or(Value::Null);
        }
    }
    Ok(Json(doc))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ProvisionRequest {
    target: String,
    configdrive: Option<Value>,
    clean_steps: Option<Value>,
    deploy_steps: Option<Value>,
    service_steps: Option<Value>,
    runbook: Option<String>,
    rescue_password: Option<String>,
    disable_ramdisk: Option<bool>,
}

impl ProvisionRequest {
    /// The optional parameters, each with the microversion it came with and the targets
    /// that take it (Ironic answers 406 below the version, 400 on another target).
    fn check_parameters(&self, version: Version) -> Result<(), ApiError> {
        let target = self.target.as_str();
        let given: [(&str, bool, u32, &[&str]); 7] = [
            (
                "configdrive",
                self.configdrive.is_some(),
                1,
                &["active", "deploy", "rebuild"],
            ),
            (
                "rescue_password",
                self.rescue_password.is_some(),
                38,
                &["rescue"],
            ),
            (
                "deploy_steps",
                self.deploy_steps.is_some(),
                69,
                &["active", "deploy", "rebuild"],
            ),
            (
                "disable_ramdisk",
                self.disable_ramdisk.is_some(),
                70,
                &["clean", "service"],
            ),
            (
                "service_steps",
                self.service_steps.is_some(),
                87,
                &["service"],
            ),
            ("runbook", self.runbook.is_some(), 92, &["clean", "service"]),
            ("clean_steps", self.clean_steps.is_some(), 15, &["clean"]),
        ];
        for (name, present, since, targets) in given {
            if !present {
                continue;
            }
            if !version.at_least(since) {
                return Err(ApiError::not_acceptable(format!(
                    "\"{name}\" needs API version 1.{since} or newer."
                )));
            }
            if !targets.contains(&target) {
                return Err(ApiError::bad_request(format!(
                    "\"{name}\" is only valid when setting target provision state to {}",
                    targets.join(" or ")
                )));
            }
        }
        if target == "service" && self.disable_ramdisk.is_some() && !version.at_least(108) {
            return Err(ApiError::not_acceptable(
                "\"disable_ramdisk\" for servicing needs API version 1.108 or newer.",
            ));
        }
        if target == "rebuild" && self.configdrive.is_some() && !version.at_least(35) {
            return Err(ApiError::not_acceptable(
                "A config drive for \"rebuild\" needs API version 1.35 or newer.",
            ));
        }
        if self.configdrive.as_ref().is_some_and(Value::is_object) && !version.at_least(56) {
            return Err(ApiError::not_acceptable(
                "A config drive given as a dict needs API version 1.56 or newer.",
            ));
        }
        if self.runbook.is_some() && (self.clean_steps.is_some() || self.service_steps.is_some()) {
            return Err(ApiError::bad_request(
                "\"runbook\" and explicit steps are mutually exclusive.",
            ));
        }
        if let Some(steps) = &self.deploy_steps {
            let empty = steps.as_array().is_some_and(Vec::is_empty);
            if !empty {
                return Err(ApiError::bad_request(format!(
                    "deployd's drivers run a fixed deploy and take no extra deploy steps; got {steps}"
                )));
            }
        }
        Ok(())
    }
}

async fn provision(
    app: State,
    Extension(version): Extension<Version>,
    Path(ident): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let request: ProvisionRequest = parse(&body)?;
    request.check_parameters(version)?;
    let node = find(&app, &ident).await?;
    let config_drive = match request.configdrive.clone() {
        // Building an ISO is CPU work: off the runtime's workers.
        Some(given) => {
            let uuid = node.uuid();
            let built = tokio::task::spawn_blocking(move || {
                crate::config_drive::ConfigDrive::from_request(&given, uuid)
            });
            let built = built
                .await
                .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
            Some(built.map_err(|e| ApiError::bad_request(format!("Invalid configdrive: {e}")))?)
        }
        None => None,
    };
    let illegal = || {
        ApiError::bad_request(format!(
            "The requested action \"{}\" can not be performed on node \"{}\" while it is in state \"{}\".",
            request.target,
            node.uuid(),
            node.state()
        ))
    };
    let target: ProvisionTarget = request.target.parse().map_err(|_| {
        ApiError::bad_request(format!(
            "\"{}\" is not a valid provision target.",
            request.target
        ))
    })?;
    if version < target.since() {
        return Err(ApiError::not_acceptable(format!(
            "The provision target \"{target}\" needs a newer API version than {version}."
        )));
    }
    let mut clean_steps = None;
    use ProvisionTarget as T;
    let verb = match target {
        T::Manage => Verb::Manage,
        T::Provide => Verb::Provide,
        T::Active | T::Deploy => Verb::Deploy,
        T::Rebuild => Verb::Rebuild,
        T::Deleted | T::Undeploy => Verb::Undeploy,
        // Aborting a deploy in "wait call-back" came with 1.110.
        T::Abort if node.state() == ProvisionState::WaitCallBack && !version.at_least(110) => {
            return Err(illegal());
        }
        T::Abort => Verb::Abort,
        T::Clean => {
            let from_runbook = match &request.runbook {
                Some(r) => Some(super::runbooks::steps_for(&app, r, &node.body).await?),
                None => None,
            };
            let steps = from_runbook.as_ref().or(request.clean_steps.as_ref());
            let disable_ramdisk = request.disable_ramdisk.unwrap_or(false);
            let steps = provision_steps::clean(steps, disable_ramdisk, &node.body)?;
            clean_steps = Some(steps);
            Verb::Clean
        }
        T::Unhold if node.state() == ProvisionState::ServiceHold => {
            app.conductor.unhold(node.uuid()).await?;
            return Ok(accepted(&app, node.uuid()));
        }
        // Deploys and cleanings never hold in deployd: only a service step does.
        T::Unhold => return Err(illegal()),
        T::Service => {
            let from_runbook = match &request.runbook {
                Some(r) => Some(super::runbooks::steps_for(&app, r, &node.body).await?),
                None => None,
            };
            let steps = from_runbook.as_ref().or(request.service_steps.as_ref());
            let steps = provision_steps::service(steps)?;
            app.conductor
                .service(node.uuid(), steps)
                .await
                .map_err(|e| refused(e, &request.target))?;
            return Ok(accepted(&app, node.uuid()));
        }
        T::Inspect => {
            app.conductor
                .inspect(node.uuid())
                .await
                .map_err(|e| refused(e, &request.target))?;
            return Ok(accepted(&app, node.uuid()));
        }
        T::Rescue | T::Unrescue => {
            let event = match target {
                T::Rescue => Event::Rescue,
                _ => Event::Unrescue,
            };
            if node.state().next(event).is_err() {
                return Err(illegal());
            }
            if node.body.maintenance {
                return Err(ApiError::bad_request(format!(
                    "The requested action \"{}\" can not be performed on node \"{}\" while it is in maintenance mode.",
                    request.target,
                    node.uuid()
                )));
            }
            let started = match target {
                T::Rescue => {
                    let password = request.rescue_password.as_deref();
                    if !crate::conductor::rescue::acceptable_password(password) {
                        return Err(ApiError::bad_request(
                            "A non-empty \"rescue_password\" is required when setting target provision state to rescue",
                        ));
                    }
                    let password = password.unwrap_or_default();
                    app.conductor.rescue(node.uuid(), password).await
                }
                _ => app.conductor.unrescue(node.uuid()).await,
            };
            started.map_err(|e| refused(e, &request.target))?;
            return Ok(accepted(&app, node.uuid()));
        }
        T::Adopt => {
            return Err(ApiError::bad_request(format!(
                "deployd does not support the provision target \"{target}\"."
            )));
        }
    };
    let started = match clean_steps {
        Some(steps) => app.conductor.clean(node.uuid(), steps).await,
        None => {
            app.conductor
                .provision_with(node.uuid(), verb, config_drive)
                .await
        }
    };
    started.map_err(|e| refused(e, &request.target))?;
    Ok(accepted(&app, node.uuid()))
}

/// 202, pointing at the node's states.
fn accepted(app: &App, node: Uuid) -> Response {
    let location = format!("{}/v1/nodes/{node}/states", app.base());
    (StatusCode::ACCEPTED, [(header::LOCATION, location)]).into_response()
}

/// A provision action the conductor refused; an illegal transition in Ironic's words.
fn refused(e: crate::conductor::ConductorError, target: &str) -> ApiError {
    match e {
        crate::conductor::ConductorError::Store(crate::store::StoreError::IllegalTransition {
            node: n,
            source,
        }) => ApiError::bad_request(format!(
            "The requested action \"{target}\" can not be performed on node \"{n}\" while it is in state \"{}\".",
            source.state
        )),
        other => other.into(),
    }
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
    let node = find(&app, &ident).await?;
    let target: PowerTarget = request.target.parse().map_err(|_| {
        ApiError::bad_request(format!(
            "\"{}\" is not a valid power target.",
            request.target
        ))
    })?;
    let action = match target {
        PowerTarget::On => PowerAction::On,
        PowerTarget::Off | PowerTarget::SoftOff => PowerAction::Off,
        PowerTarget::Reboot | PowerTarget::SoftReboot => PowerAction::Reboot,
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
    app.conductor.power(node.uuid(), action).await?;
    let location = format!("{}/v1/nodes/{}/states", app.base(), node.uuid());
    Ok((StatusCode::ACCEPTED, [(header::LOCATION, location)]).into_response())
}

async fn validate(app: State, Path(ident): Path<String>) -> Result<Json<Value>, ApiError> {
    let node = find(&app, &ident).await?;
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
        "rescue": match node.body.interfaces.get("rescue").map(String::as_str) {
            Some("agent") => json!({"result": true, "reason": null}),
            _ => unsupported.clone(),
        },
        "storage": unsupported,
        "bios": unsupported,
    })))
}

/// What goes with a node when it is deleted: (kind, unique fields).
pub const OF_NODE: &[(&str, &[&str])] = &[
    (crate::conductor::inspection::INVENTORY, &[]),
    (crate::driver_host::capability::image::IMAGE_WRITE, &[]),
    (PORTGROUP.kind, PORTGROUP.unique),
    (VOLUME_CONNECTOR.kind, VOLUME_CONNECTOR.unique),
    (VOLUME_TARGET.kind, VOLUME_TARGET.unique),
];
