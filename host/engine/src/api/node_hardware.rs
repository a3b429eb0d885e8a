//! What Ironic asks of a node's management interface beyond power: virtual media (1.89,
//! listed from 1.93), boot mode and secure boot (1.75, changed from 1.76), firmware
//! components (1.86) and the inspected inventory (1.81).
//!
//! deployd's `fake` management interface keeps what it is told in the node (in
//! `driver_internal_info`, as a fake BMC would remember it), so tools can be exercised
//! against `fake-hardware` nodes. The `redfish` interface attaches, detaches and lists
//! virtual media through the BMC's `VirtualMedia` (`conductor::virtual_media`): 204 at
//! once and the work in the background, as in Ironic. `ipmitool` has no virtual media:
//! as in Ironic, the attach or detach is taken and fails, recorded in `last_error` and as
//! an error event of the node's history; the list is a 400. Boot mode, secure boot and
//! firmware are the fake interface's only. Never a silent success.

use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{Extension, Path, Query};
use axum::http::{Method, StatusCode};
use axum::routing::{get, post, put};
use serde::Deserialize;
use serde_json::{Value, json};

use super::http::error::{ApiError, parse};
use super::http::gate::{other_method, since};
use super::http::version::Version;
use super::node_access::{edit, find};
use super::{App, State};
use crate::node::NodeBody;

pub fn routes() -> Router<Arc<App>> {
    Router::new()
        .route(
            "/v1/nodes/{ident}/vmedia",
            since(89, post(attach_vmedia).delete(detach_vmedia))
                .merge(since(93, get(vmedia)))
                .fallback(|Extension(v): Extension<Version>, method: Method| {
                    other_method(89, v, method)
                }),
        )
        .route(
            "/v1/nodes/{ident}/states/boot_mode",
            since(76, put(set_boot_mode)),
        )
        .route(
            "/v1/nodes/{ident}/states/secure_boot",
            since(76, put(set_secure_boot)),
        )
        .route("/v1/nodes/{ident}/firmware", since(86, get(firmware)))
        .route("/v1/nodes/{ident}/inventory", since(81, get(inventory)))
}

/// Where the fake management interface keeps the attached virtual media.
const VMEDIA: &str = "vmedia";

/// The devices Ironic attaches virtual media as.
const DEVICES: &[&str] = &["cdrom", "floppy", "disk"];
const SOURCES: &[&str] = &["http", "local", "swift"];

/// Only the fake management interface does these; the others answer why not.
fn fake_management(b: &NodeBody, what: &str) -> Result<(), ApiError> {
    match b.interfaces.get("management").map(String::as_str) {
        Some("fake") => Ok(()),
        other => Err(ApiError::bad_request(format!(
            "Node {}: the {} management interface of deployd does not support {what} (only fake-hardware's fake interface does).",
            b.uuid,
            other.unwrap_or("(none)")
        ))),
    }
}

/// Redfish management does virtual media through the BMC (`conductor::virtual_media`).
fn redfish_management(b: &NodeBody) -> bool {
    b.interfaces.get("management").map(String::as_str) == Some("redfish")
}

/// Ironic's words for a management call the node's interface does not have.
fn unsupported(b: &NodeBody, extension: &str) -> String {
    format!(
        "Driver {} does not support {extension} (disabled or not implemented).",
        b.driver
    )
}

/// An operation Ironic takes (204) and fails in its worker: the failure goes where
/// Ironic puts it, the node's `last_error` and an error event of its history.
async fn failed_later(app: &App, node: uuid::Uuid, error: String) -> Result<StatusCode, ApiError> {
    app.conductor.record_failure(node, error).await?;
    Ok(StatusCode::NO_CONTENT)
}

fn attached(b: &NodeBody) -> Vec<Value> {
    b.driver_internal_info
        .get(VMEDIA)
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

async fn vmedia(app: State, Path(ident): Path<String>) -> Result<Json<Value>, ApiError> {
    let node = find(&app, &ident).await?;
    if redfish_management(&node.body) {
        let listed = app.conductor.list_media(node.uuid()).await;
        let listed = listed.map_err(|e| {
            ApiError::bad_request(format!(
                "Could not get virtual media of node {}: {e}",
                node.uuid()
            ))
        })?;
        return Ok(Json(json!({"vmedia": listed})));
    }
    if fake_management(&node.body, "virtual media").is_err() {
        let why = unsupported(&node.body, "get_virtual_media");
        return Err(ApiError::bad_request(why));
    }
    Ok(Json(json!({"vmedia": attached(&node.body)})))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Attach {
    device_type: String,
    image_url: String,
    image_download_source: Option<String>,
}

async fn attach_vmedia(
    app: State,
    Path(ident): Path<String>,
    body: Bytes,
) -> Result<StatusCode, ApiError> {
    let request: Attach = parse(&body)?;
    if !DEVICES.contains(&request.device_type.as_str()) {
        return Err(ApiError::bad_request(format!(
            "'{}' is not one of {DEVICES:?}",
            request.device_type
        )));
    }
    let source = request.image_download_source.as_deref().unwrap_or("local");
    if !SOURCES.contains(&source) {
        return Err(ApiError::bad_request(format!(
            "'{source}' is not one of {SOURCES:?}"
        )));
    }
    let node = find(&app, &ident).await?;
    if redfish_management(&node.body) {
        // deployd hands the BMC the image's url as given: Ironic's `http`. Serving it from
        // the engine (`local`) or Swift is not done, so asking for them is refused.
        if let Some(asked @ ("local" | "swift")) = request.image_download_source.as_deref() {
            return Err(ApiError::bad_request(format!(
                "image_download_source '{asked}' is not supported by deployd: the BMC is given the image_url as it is ('http')"
            )));
        }
        let (device, image) = (request.device_type, request.image_url);
        app.conductor
            .attach_media(node.uuid(), device, image)
            .await?;
        return Ok(StatusCode::NO_CONTENT);
    }
    if fake_management(&node.body, "virtual media").is_err() {
        let device = &request.device_type;
        let why = unsupported(&node.body, "attach_virtual_media");
        let error = format!(
            "Could not attach device {device} to node {}: {why}",
            node.uuid()
        );
        return failed_later(&app, node.uuid(), error).await;
    }
    edit(&app, &ident, |b| {
        fake_management(b, "virtual media")?;
        let mut list = attached(b);
        list.retain(|m| m["device_type"] != json!(request.device_type));
        list.push(json!({
            "device_type": request.device_type,
            "image_url": request.image_url,
            "image_download_source": source,
            "inserted": true,
        }));
        b.driver_internal_info
            .insert(VMEDIA.into(), Value::Array(list));
        Ok(())
    })
    .await?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct Detach {
    /// Comma separated; all devices when absent.
    device_types: Option<String>,
}

/// `DELETE …/vmedia`, the devices in the query (`?device_types=cdrom,floppy`, as clients
/// send them) or in a JSON body.
async fn detach_vmedia(
    app: State,
    Path(ident): Path<String>,
    query: Result<Query<Detach>, axum::extract::rejection::QueryRejection>,
    body: Bytes,
) -> Result<StatusCode, ApiError> {
    let Query(query) = query.map_err(|e| super::http::error::query_refused(&e))?;
    let request: Detach = match body.is_empty() {
        true => Detach::default(),
        false => parse(&body)?,
    };
    let only: Option<Vec<String>> = query
        .device_types
        .or(request.device_types)
        .map(|t| t.split(',').map(|d| d.trim().to_owned()).collect());
    if let Some(bad) = only
        .iter()
        .flatten()
        .find(|d| !DEVICES.contains(&d.as_str()))
    {
        return Err(ApiError::bad_request(format!(
            "'{bad}' is not one of {DEVICES:?}"
        )));
    }
    let node = find(&app, &ident).await?;
    if redfish_management(&node.body) {
        app.conductor.detach_media(node.uuid(), only).await?;
        return Ok(StatusCode::NO_CONTENT);
    }
    if fake_management(&node.body, "virtual media").is_err() {
        let devices = only.map_or_else(|| DEVICES.join(", "), |o| o.join(", "));
        let why = unsupported(&node.body, "detach_virtual_media");
        let error = format!(
            "Could not detach device(s) {devices} from node {}: {why}",
            node.uuid()
        );
        return failed_later(&app, node.uuid(), error).await;
    }
    edit(&app, &ident, |b| {
        fake_management(b, "virtual media")?;
        let mut list = attached(b);
        list.retain(|m| {
            only.as_ref().is_some_and(|o| {
                !o.iter()
                    .any(|d| m["device_type"].as_str() == Some(d.as_str()))
            })
        });
        b.driver_internal_info
            .insert(VMEDIA.into(), Value::Array(list));
        Ok(())
    })
    .await?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Target {
    target: Value,
}

/// `PUT …/states/boot_mode` with `{"target": "uefi" | "bios"}`: 202, as in Ironic. A
/// Redfish node's BMC is told it (and the node shows what the BMC then reports);
/// fake-hardware records it.
async fn set_boot_mode(
    app: State,
    Path(ident): Path<String>,
    body: Bytes,
) -> Result<StatusCode, ApiError> {
    let Target { target } = parse(&body)?;
    let mode = target
        .as_str()
        .and_then(crate::boot_mode::BootMode::parse)
        .ok_or_else(|| {
            ApiError::bad_request(format!("Invalid boot mode {target}; expected uefi or bios"))
        })?;
    let node = find(&app, &ident).await?;
    if redfish_management(&node.body) {
        app.conductor.set_boot_mode(node.uuid(), mode).await?;
        return Ok(StatusCode::ACCEPTED);
    }
    edit(&app, &ident, |b| {
        if b.interfaces.get("management").map(String::as_str) == Some("ipmitool") {
            return Err(ApiError::bad_request(format!(
                "Node {}: IPMI sets a boot mode only with a boot device: set the node's boot_mode capability (or instance_info.deploy_boot_mode), which its BMC is told with every boot device.",
                b.uuid
            )));
        }
        fake_management(b, "changing the boot mode")?;
        b.attrs.insert("boot_mode".into(), json!(mode.as_str()));
        Ok(())
    })
    .await?;
    Ok(StatusCode::ACCEPTED)
}

/// `PUT …/states/secure_boot` with `{"target": true | false}` (UEFI only): a Redfish
/// node's BMC is told it (the node then shows what the BMC reports); fake-hardware
/// records it.
async fn set_secure_boot(
    app: State,
    Path(ident): Path<String>,
    body: Bytes,
) -> Result<StatusCode, ApiError> {
    let Target { target } = parse(&body)?;
    let on = super::schema::parse_bool(&target).ok_or_else(|| {
        ApiError::bad_request(format!(
            "Invalid secure boot state {target}; expected a boolean"
        ))
    })?;
    let node = find(&app, &ident).await?;
    let needs_uefi = |b: &crate::node::NodeBody, mode: Option<&Value>| match on
        && mode != Some(&json!("uefi"))
    {
        true => Err(ApiError::bad_request(format!(
            "Node {}: secure boot needs the uefi boot mode.",
            b.uuid
        ))),
        false => Ok(()),
    };
    if redfish_management(&node.body) {
        // A machine its BMC shows in the bios mode is refused here, in words, before the
        // BMC refuses it (a 400 of its own, which would surface as the engine's 500).
        let bios = node.body.attrs.get("boot_mode") == Some(&json!("bios"));
        if bios {
            needs_uefi(&node.body, Some(&json!("bios")))?;
        }
        app.conductor.set_secure_boot(node.uuid(), on).await?;
        return Ok(StatusCode::ACCEPTED);
    }
    edit(&app, &ident, |b| {
        fake_management(b, "changing secure boot")?;
        needs_uefi(b, b.attrs.get("boot_mode"))?;
        b.attrs.insert("secure_boot".into(), json!(on));
        Ok(())
    })
    .await?;
    Ok(StatusCode::ACCEPTED)
}

/// deployd's firmware interfaces (`no-firmware`, `fake`) have no components to report.
async fn firmware(app: State, Path(ident): Path<String>) -> Result<Json<Value>, ApiError> {
    find(&app, &ident).await?;
    Ok(Json(json!({"firmware": []})))
}

/// deployd does not inspect machines, so no node has an inventory.
async fn inventory(app: State, Path(ident): Path<String>) -> Result<Json<Value>, ApiError> {
    let node = find(&app, &ident).await?;
    let kind = crate::conductor::inspection::INVENTORY;
    match app.conductor.store().document(kind, node.uuid()).await {
        Ok(doc) => Ok(Json(json!({
            "inventory": doc.get("inventory"),
            "plugin_data": doc.get("plugin_data"),
        }))),
        Err(crate::store::StoreError::DocumentNotFound { .. }) => {
            Err(ApiError::not_found(format!(
                "Node inventory for node {} could not be found.",
                node.uuid()
            )))
        }
        Err(e) => Err(crate::conductor::ConductorError::from(e).into()),
    }
}
