//! The lab's BMC: a Redfish service with one `ComputerSystem` per machine, the subset
//! Ironic's (and deployd's) `redfish` power and boot interfaces use: read the system,
//! `ComputerSystem.Reset`, and PATCH of `Boot.BootSourceOverrideTarget`. Plus
//! `/lab/machines`, not Redfish, for tests and the demo to see and break machines.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};

use super::machine::{Boot, Machine, MachineView};

pub type Machines = Arc<BTreeMap<String, Arc<Machine>>>;

pub fn router(machines: Machines) -> Router {
    Router::new()
        .route("/redfish/v1", get(service_root))
        .route("/redfish/v1/", get(service_root))
        .route("/redfish/v1/Systems", get(systems))
        .route("/redfish/v1/Systems/{id}", get(system).patch(patch_system))
        .route(
            "/redfish/v1/Systems/{id}/Actions/ComputerSystem.Reset",
            post(reset),
        )
        .route("/lab/machines", get(list))
        .route("/lab/machines/{id}/kill-agent", post(kill_agent))
        .with_state(machines)
}

/// A Redfish error body (`error.message`), with its status.
fn error(status: StatusCode, message: String) -> Response {
    let body = json!({"error": {"code": "Base.1.0.GeneralError", "message": message}});
    (status, Json(body)).into_response()
}

fn find(machines: &Machines, id: &str) -> Result<Arc<Machine>, Box<Response>> {
    machines.get(id).cloned().ok_or_else(|| {
        Box::new(error(
            StatusCode::NOT_FOUND,
            format!("System {id} not found"),
        ))
    })
}

async fn service_root() -> Json<Value> {
    Json(json!({
        "@odata.id": "/redfish/v1/",
        "Id": "RootService",
        "Name": "deployd lab",
        "RedfishVersion": "1.6.0",
        "Systems": {"@odata.id": "/redfish/v1/Systems"},
    }))
}

async fn systems(State(m): State<Machines>) -> Json<Value> {
    let members: Vec<Value> = m
        .keys()
        .map(|id| json!({"@odata.id": format!("/redfish/v1/Systems/{id}")}))
        .collect();
    Json(json!({
        "@odata.id": "/redfish/v1/Systems",
        "Name": "Computer System Collection",
        "Members@odata.count": members.len(),
        "Members": members,
    }))
}

fn system_doc(v: &MachineView) -> Value {
    let target = match v.boot {
        Boot::Pxe => "Pxe",
        Boot::Hdd => "Hdd",
    };
    json!({
        "@odata.id": format!("/redfish/v1/Systems/{}", v.name),
        "Id": v.name,
        "Name": v.name,
        "PowerState": v.power,
        "Boot": {
            "BootSourceOverrideTarget": target,
            "BootSourceOverrideEnabled": v.boot_override.unwrap_or("Disabled"),
            "BootSourceOverrideTarget@Redfish.AllowableValues": ["Pxe", "Hdd"],
        },
        "Actions": {"#ComputerSystem.Reset": {
            "target": format!("/redfish/v1/Systems/{}/Actions/ComputerSystem.Reset", v.name),
            "ResetType@Redfish.AllowableValues": ["On", "ForceOff", "GracefulShutdown", "ForceRestart", "GracefulRestart", "PowerCycle"],
        }},
    })
}

async fn system(State(m): State<Machines>, Path(id): Path<String>) -> Response {
    match find(&m, &id) {
        Ok(machine) => Json(system_doc(&machine.view())).into_response(),
        Err(e) => *e,
    }
}

async fn patch_system(
    State(m): State<Machines>,
    Path(id): Path<String>,
    body: axum::body::Bytes,
) -> Response {
    let machine = match find(&m, &id) {
        Ok(machine) => machine,
        Err(e) => return *e,
    };
    let Ok(body) = serde_json::from_slice::<Value>(&body) else {
        return error(StatusCode::BAD_REQUEST, "the body is not JSON".into());
    };
    let field = |k: &str| body.pointer(&format!("/Boot/{k}")).and_then(Value::as_str);
    let boot = match field("BootSourceOverrideTarget") {
        Some("Pxe") => Boot::Pxe,
        Some("Hdd") => Boot::Hdd,
        other => {
            return error(
                StatusCode::BAD_REQUEST,
                format!("BootSourceOverrideTarget {other:?} is not one of Pxe, Hdd"),
            );
        }
    };
    let once = match field("BootSourceOverrideEnabled") {
        Some("Once") | None => true,
        Some("Continuous") => false,
        Some(other) => {
            return error(
                StatusCode::BAD_REQUEST,
                format!("BootSourceOverrideEnabled {other:?} is not one of Once, Continuous"),
            );
        }
    };
    machine.set_boot(boot, once);
    Json(system_doc(&machine.view())).into_response()
}

async fn reset(
    State(m): State<Machines>,
    Path(id): Path<String>,
    body: axum::body::Bytes,
) -> Response {
    let machine = match find(&m, &id) {
        Ok(machine) => machine,
        Err(e) => return *e,
    };
    let kind = serde_json::from_slice::<Value>(&body).ok().and_then(|b| {
        b.get("ResetType")
            .and_then(Value::as_str)
            .map(str::to_owned)
    });
    let done = match kind.as_deref() {
        Some("On") => machine.power_on(),
        Some("ForceOff" | "GracefulShutdown") => {
            machine.power_off();
            Ok(())
        }
        Some("ForceRestart" | "GracefulRestart" | "PowerCycle") => {
            machine.power_off();
            machine.power_on()
        }
        other => {
            return error(
                StatusCode::BAD_REQUEST,
                format!("ResetType {other:?} is not supported"),
            );
        }
    };
    match done {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(e) => error(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("the machine did not start: {e}"),
        ),
    }
}

async fn list(State(m): State<Machines>) -> Json<Vec<MachineView>> {
    Json(m.values().map(|machine| machine.view()).collect())
}

async fn kill_agent(State(m): State<Machines>, Path(id): Path<String>) -> Response {
    match find(&m, &id) {
        Ok(machine) if machine.kill_agent() => StatusCode::NO_CONTENT.into_response(),
        Ok(_) => error(StatusCode::CONFLICT, format!("{id} runs no agent")),
        Err(e) => *e,
    }
}
