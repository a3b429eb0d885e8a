//! The lab's systems' `SecureBoot` resource (Redfish's `SecureBoot` schema, the part
//! sushy reads and sets): `SecureBootEnable` applies at the machine's next power-on, as on
//! a real BMC, and `SecureBootCurrentBoot` tells what its last boot enforced. Secure Boot
//! is UEFI's: enabling it on a machine set to boot in Legacy mode is refused.

use axum::Json;
use axum::Router;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::get;
use serde_json::{Value, json};

use crate::machine::MachineView;
use crate::redfish::{Machines, Refused, find};
use crate::vm::Firmware;

pub fn routes() -> Router<Machines> {
    Router::new().route(
        "/redfish/v1/Systems/{id}/SecureBoot",
        get(secure_boot).patch(set_secure_boot),
    )
}

fn doc(v: &MachineView) -> Value {
    json!({
        "@odata.id": format!("/redfish/v1/Systems/{}/SecureBoot", v.name),
        "@odata.type": "#SecureBoot.v1_1_0.SecureBoot",
        "Id": "SecureBoot",
        "Name": "UEFI Secure Boot",
        "SecureBootEnable": v.secure_boot,
        "SecureBootCurrentBoot": if v.booted_secure { "Enabled" } else { "Disabled" },
        "SecureBootMode": "DeployedMode",
    })
}

async fn secure_boot(
    State(m): State<Machines>,
    Path(id): Path<String>,
) -> Result<Json<Value>, Refused> {
    Ok(Json(doc(&find(&m, &id)?.view())))
}

async fn set_secure_boot(
    State(m): State<Machines>,
    Path(id): Path<String>,
    body: axum::body::Bytes,
) -> Result<Json<Value>, Refused> {
    let machine = find(&m, &id)?;
    let refused = |why: String| Refused(StatusCode::BAD_REQUEST, why);
    let body = serde_json::from_slice::<Value>(&body)
        .map_err(|_| refused("the body is not JSON".into()))?;
    let on = body
        .get("SecureBootEnable")
        .and_then(Value::as_bool)
        .ok_or_else(|| refused("the body sets no boolean SecureBootEnable".into()))?;
    if on && machine.view().boot_mode == Firmware::Bios {
        return Err(refused(
            "Secure Boot needs the UEFI boot mode: set Boot.BootSourceOverrideMode to UEFI first"
                .into(),
        ));
    }
    machine.set_secure_boot(on);
    Ok(Json(doc(&machine.view())))
}
