//! The lab's BMC: a Redfish service with one `ComputerSystem` per machine, the subset
//! Ironic's (and deployd's) `redfish` power and boot interfaces use: read the system,
//! `ComputerSystem.Reset`, and PATCH of `Boot.BootSourceOverrideTarget` and
//! `BootSourceOverrideMode` (UEFI or Legacy: a VM's firmware at its next power-on); what the systems
//! report of their hardware and virtual media is in [`crate::redfish_hardware`], their
//! Secure Boot in [`crate::redfish_secure_boot`]. Plus
//! `/lab/machines`, not Redfish, for tests and the demo to see and break machines, and
//! `/lab/requests`: every Redfish request the BMC answered, when and from whom (its
//! `User-Agent`: deployd's engines name themselves in theirs), so a test can tell which
//! engine acted on a machine.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use axum::Json;
use axum::Router;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};

use super::machine::{Boot, Machine, MachineView};
use crate::vm::Firmware;

pub type Machines = Arc<BTreeMap<String, Arc<Machine>>>;

/// The most requests `/lab/requests` keeps (the oldest go first).
const KEPT_REQUESTS: usize = 100_000;

/// The Redfish requests the BMC answered, oldest first.
#[derive(Clone, Default)]
struct Requests(Arc<Mutex<std::collections::VecDeque<Value>>>);

impl Requests {
    fn record(&self, request: &axum::extract::Request) {
        let at = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let agent = request
            .headers()
            .get(axum::http::header::USER_AGENT)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        let mut kept = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if kept.len() == KEPT_REQUESTS {
            kept.pop_front();
        }
        kept.push_back(json!({
            "at_ms": at,
            "user_agent": agent,
            "method": request.method().as_str(),
            "path": request.uri().path(),
        }));
    }

    fn list(&self) -> Vec<Value> {
        let kept = self.0.lock().unwrap_or_else(|p| p.into_inner());
        kept.iter().cloned().collect()
    }
}

pub fn router(machines: Machines) -> Router {
    let requests = Requests::default();
    let recorder = requests.clone();
    let record = move |request: axum::extract::Request, next: axum::middleware::Next| {
        let recorder = recorder.clone();
        async move {
            if request.uri().path().starts_with("/redfish/") {
                recorder.record(&request);
            }
            next.run(request).await
        }
    };
    let listed = Router::new().route(
        "/lab/requests",
        get(move || {
            let requests = requests.clone();
            async move { Json(requests.list()) }
        }),
    );
    Router::new()
        .route("/redfish/v1", get(service_root))
        .route("/redfish/v1/", get(service_root))
        .route("/redfish/v1/Systems", get(systems))
        .route("/redfish/v1/Systems/{id}", get(system).patch(patch_system))
        .route(
            "/redfish/v1/Systems/{id}/Actions/ComputerSystem.Reset",
            post(reset),
        )
        .merge(crate::redfish_hardware::routes())
        .merge(crate::redfish_secure_boot::routes())
        .route("/lab/machines", get(list))
        .route("/lab/machines/{id}/kill-agent", post(kill_agent))
        .with_state(machines)
        .layer(axum::middleware::from_fn(record))
        .merge(listed)
}

/// A refusal, answered as a Redfish error body (`error.message`) with its status.
pub(crate) struct Refused(pub(crate) StatusCode, pub(crate) String);

impl IntoResponse for Refused {
    fn into_response(self) -> Response {
        let body = json!({"error": {"code": "Base.1.0.GeneralError", "message": self.1}});
        (self.0, Json(body)).into_response()
    }
}

fn bad_request(message: String) -> Refused {
    Refused(StatusCode::BAD_REQUEST, message)
}

pub(crate) fn find(machines: &Machines, id: &str) -> Result<Arc<Machine>, Refused> {
    machines
        .get(id)
        .cloned()
        .ok_or_else(|| Refused(StatusCode::NOT_FOUND, format!("System {id} not found")))
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
        Boot::Cd => "Cd",
        Boot::UefiHttp => "UefiHttp",
    };
    json!({
        "@odata.id": format!("/redfish/v1/Systems/{}", v.name),
        "Id": v.name,
        "Name": v.name,
        "PowerState": v.power,
        "Boot": {
            "BootSourceOverrideTarget": target,
            "BootSourceOverrideEnabled": v.boot_override.unwrap_or("Disabled"),
            "BootSourceOverrideTarget@Redfish.AllowableValues": ["Pxe", "Hdd", "Cd", "UefiHttp"],
            "BootSourceOverrideMode": match v.boot_mode {
                Firmware::Uefi => "UEFI",
                Firmware::Bios => "Legacy",
            },
            "BootSourceOverrideMode@Redfish.AllowableValues": ["UEFI", "Legacy"],
        },
        "Actions": {"#ComputerSystem.Reset": {
            "target": format!("/redfish/v1/Systems/{}/Actions/ComputerSystem.Reset", v.name),
            "ResetType@Redfish.AllowableValues": ["On", "ForceOff", "GracefulShutdown", "ForceRestart", "GracefulRestart", "PowerCycle"],
        }},
    })
}

async fn system(State(m): State<Machines>, Path(id): Path<String>) -> Result<Json<Value>, Refused> {
    let machine = find(&m, &id)?;
    let mut doc = system_doc(&machine.view());
    let at = |what: &str| json!({"@odata.id": format!("/redfish/v1/Systems/{id}/{what}")});
    doc["ProcessorSummary"] = json!({"Count": 1});
    doc["MemorySummary"] = json!({"TotalSystemMemoryGiB": machine.memory_mb as f64 / 1024.0});
    doc["Manufacturer"] = json!("deployd lab");
    doc["Model"] = json!(if machine.nic == crate::vm::Nic::None {
        "process"
    } else {
        "QEMU"
    });
    doc["SerialNumber"] = json!(machine.name);
    for what in [
        "Processors",
        "EthernetInterfaces",
        "SimpleStorage",
        "VirtualMedia",
        "SecureBoot",
    ] {
        doc[what] = at(what);
    }
    Ok(Json(doc))
}

async fn patch_system(
    State(m): State<Machines>,
    Path(id): Path<String>,
    body: axum::body::Bytes,
) -> Result<Json<Value>, Refused> {
    let machine = find(&m, &id)?;
    let body = serde_json::from_slice::<Value>(&body)
        .map_err(|_| bad_request("the body is not JSON".into()))?;
    let field = |k: &str| body.pointer(&format!("/Boot/{k}")).and_then(Value::as_str);
    // Each field is optional, as on a real BMC (sushy sends the ones it sets); everything
    // is checked before anything changes.
    let boot = match field("BootSourceOverrideTarget") {
        Some("Pxe") => Some(Boot::Pxe),
        Some("Hdd") => Some(Boot::Hdd),
        Some("Cd") => Some(Boot::Cd),
        Some("UefiHttp") => Some(Boot::UefiHttp),
        None => None,
        Some(other) => {
            return Err(bad_request(format!(
                "BootSourceOverrideTarget {other:?} is not one of Pxe, Hdd, Cd, UefiHttp"
            )));
        }
    };
    let once = match field("BootSourceOverrideEnabled") {
        Some("Once") => Some(true),
        Some("Continuous") => Some(false),
        None => None,
        Some(other) => {
            return Err(bad_request(format!(
                "BootSourceOverrideEnabled {other:?} is not one of Once, Continuous"
            )));
        }
    };
    let mode = match field("BootSourceOverrideMode") {
        Some("UEFI") => Some(Firmware::Uefi),
        Some("Legacy") => Some(Firmware::Bios),
        None => None,
        Some(other) => {
            return Err(bad_request(format!(
                "BootSourceOverrideMode {other:?} is not one of UEFI, Legacy"
            )));
        }
    };
    if boot.is_none() && once.is_none() && mode.is_none() {
        return Err(bad_request(
            "the body sets none of Boot.BootSourceOverrideTarget, BootSourceOverrideEnabled, BootSourceOverrideMode".into(),
        ));
    }
    if let Some(mode) = mode {
        machine.set_boot_mode(mode);
    }
    if boot.is_some() || once.is_some() {
        let view = machine.view();
        // A target alone is set for once, as before (Ironic always sends both).
        machine.set_boot(boot.unwrap_or(view.boot), once.unwrap_or(true));
    }
    Ok(Json(system_doc(&machine.view())))
}

async fn reset(
    State(m): State<Machines>,
    Path(id): Path<String>,
    body: axum::body::Bytes,
) -> Result<StatusCode, Refused> {
    let machine = find(&m, &id)?;
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
        other => return Err(bad_request(format!("ResetType {other:?} is not supported"))),
    };
    done.map(|()| StatusCode::NO_CONTENT).map_err(|e| {
        Refused(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("the machine did not start: {e}"),
        )
    })
}

async fn list(State(m): State<Machines>) -> Json<Vec<MachineView>> {
    Json(m.values().map(|machine| machine.view()).collect())
}

async fn kill_agent(
    State(m): State<Machines>,
    Path(id): Path<String>,
) -> Result<StatusCode, Refused> {
    if find(&m, &id)?.kill_agent() {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(Refused(StatusCode::CONFLICT, format!("{id} runs no agent")))
    }
}
