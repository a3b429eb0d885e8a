//! What the lab's systems report of their hardware, as out-of-band inspection reads it
//! (processors, memory in the system, NICs, disks), and their virtual media: one `Cd`
//! device that takes `InsertMedia` and `EjectMedia` and remembers the image (a simulated
//! machine, and a VM, do not boot from it).

use axum::Json;
use axum::Router;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use serde_json::{Value, json};

use crate::redfish::{Machines, Refused, find};

pub fn routes() -> Router<Machines> {
    Router::new()
        .route("/redfish/v1/Systems/{id}/Processors", get(processors))
        .route("/redfish/v1/Systems/{id}/Processors/CPU0", get(processor))
        .route("/redfish/v1/Systems/{id}/EthernetInterfaces", get(nics))
        .route(
            "/redfish/v1/Systems/{id}/EthernetInterfaces/{nic}",
            get(nic),
        )
        .route("/redfish/v1/Systems/{id}/SimpleStorage", get(storages))
        .route("/redfish/v1/Systems/{id}/SimpleStorage/0", get(storage))
        .route("/redfish/v1/Systems/{id}/VirtualMedia", get(media_list))
        .route("/redfish/v1/Systems/{id}/VirtualMedia/Cd", get(cd))
        .route(
            "/redfish/v1/Systems/{id}/VirtualMedia/Cd/Actions/VirtualMedia.InsertMedia",
            post(insert),
        )
        .route(
            "/redfish/v1/Systems/{id}/VirtualMedia/Cd/Actions/VirtualMedia.EjectMedia",
            post(eject),
        )
}

/// A collection of one member at `path`.
fn collection(path: String) -> Json<Value> {
    Json(json!({"Members@odata.count": 1, "Members": [{"@odata.id": path}]}))
}

async fn processors(
    State(m): State<Machines>,
    Path(id): Path<String>,
) -> Result<Json<Value>, Refused> {
    find(&m, &id)?;
    Ok(collection(format!(
        "/redfish/v1/Systems/{id}/Processors/CPU0"
    )))
}

/// The lab's machines are x86-64 (QEMU's `qemu-system-x86_64`, or this host for a process).
async fn processor(
    State(m): State<Machines>,
    Path(id): Path<String>,
) -> Result<Json<Value>, Refused> {
    find(&m, &id)?;
    Ok(Json(
        json!({"Id": "CPU0", "ProcessorType": "CPU", "InstructionSet": "x86-64", "TotalCores": 1}),
    ))
}

async fn nics(State(m): State<Machines>, Path(id): Path<String>) -> Result<Json<Value>, Refused> {
    let machine = find(&m, &id)?;
    Ok(collection(format!(
        "/redfish/v1/Systems/{id}/EthernetInterfaces/{}",
        machine.mac
    )))
}

async fn nic(
    State(m): State<Machines>,
    Path((id, nic)): Path<(String, String)>,
) -> Result<Json<Value>, Refused> {
    let machine = find(&m, &id)?;
    if !nic.eq_ignore_ascii_case(&machine.mac) {
        return Err(Refused(
            StatusCode::NOT_FOUND,
            format!("no NIC {nic} on {id}"),
        ));
    }
    Ok(Json(
        json!({"Id": nic, "MACAddress": machine.mac, "LinkStatus": "LinkUp"}),
    ))
}

async fn storages(
    State(m): State<Machines>,
    Path(id): Path<String>,
) -> Result<Json<Value>, Refused> {
    find(&m, &id)?;
    Ok(collection(format!(
        "/redfish/v1/Systems/{id}/SimpleStorage/0"
    )))
}

/// The machine's disks, each as large as its file is now.
async fn storage(
    State(m): State<Machines>,
    Path(id): Path<String>,
) -> Result<Json<Value>, Refused> {
    let machine = find(&m, &id)?;
    let devices: Vec<Value> = std::iter::once(&machine.disk)
        .chain(&machine.extra_disks)
        .enumerate()
        .map(|(i, disk)| {
            let size = std::fs::metadata(disk).map(|m| m.len()).unwrap_or(0);
            json!({"Name": format!("disk{i}"), "CapacityBytes": size})
        })
        .collect();
    Ok(Json(json!({"Id": "0", "Devices": devices})))
}

async fn media_list(
    State(m): State<Machines>,
    Path(id): Path<String>,
) -> Result<Json<Value>, Refused> {
    find(&m, &id)?;
    Ok(collection(format!(
        "/redfish/v1/Systems/{id}/VirtualMedia/Cd"
    )))
}

async fn cd(State(m): State<Machines>, Path(id): Path<String>) -> Result<Json<Value>, Refused> {
    let machine = find(&m, &id)?;
    let image = machine.media();
    let action = |name: &str| json!({"target": format!("/redfish/v1/Systems/{id}/VirtualMedia/Cd/Actions/VirtualMedia.{name}")});
    Ok(Json(json!({
        "@odata.id": format!("/redfish/v1/Systems/{id}/VirtualMedia/Cd"),
        "Id": "Cd",
        "MediaTypes": ["CD", "DVD"],
        "Image": image.clone().unwrap_or_default(),
        "Inserted": image.is_some(),
        "WriteProtected": true,
        "Actions": {
            "#VirtualMedia.InsertMedia": action("InsertMedia"),
            "#VirtualMedia.EjectMedia": action("EjectMedia"),
        },
    })))
}

/// `{"Image": url, "Inserted": true}`: an http(s) image, into an empty device (as BMCs
/// refuse an insert over inserted media).
async fn insert(
    State(m): State<Machines>,
    Path(id): Path<String>,
    Json(body): Json<Value>,
) -> Result<StatusCode, Refused> {
    let machine = find(&m, &id)?;
    let Some(image) = body["Image"]
        .as_str()
        .filter(|i| i.starts_with("http://") || i.starts_with("https://"))
    else {
        return Err(Refused(
            StatusCode::BAD_REQUEST,
            format!("Image must be an http(s) url, not {}", body["Image"]),
        ));
    };
    if machine.media().is_some() {
        return Err(Refused(
            StatusCode::CONFLICT,
            "the Cd device holds media: eject it first".into(),
        ));
    }
    machine.set_media(Some(image.to_owned()));
    Ok(StatusCode::NO_CONTENT)
}

async fn eject(State(m): State<Machines>, Path(id): Path<String>) -> Result<StatusCode, Refused> {
    find(&m, &id)?.set_media(None);
    Ok(StatusCode::NO_CONTENT)
}
