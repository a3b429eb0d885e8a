//! A node's boot device (`/v1/nodes/{node}/management/boot_device`, and `…/supported`)
//! and console (`/v1/nodes/{node}/states/console`), as Ironic serves them.
//!
//! The boot device is set through the node's BMC (`ipmitool`, `redfish`), or only
//! recorded by fake-hardware's `fake` management, as Ironic's fake does. deployd's BMC
//! backends do not read a boot device back, so a read answers the one last set through
//! deployd (null before any), and the fake interface's `pxe`, as Ironic's fake answers.
//! Only fake-hardware's `fake` console exists: it records that it is enabled.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::Path;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{Value, json};

use super::http::error::{ApiError, parse};
use super::node_access::find;
use super::{App, State};
use crate::conductor::management::BOOT_DEVICE;
use crate::driver_host::capability::bindings::deployd::driver::bmc::BootDevice;
use crate::node::NodeBody;

pub fn routes() -> Router<Arc<App>> {
    Router::new()
        .route(
            "/v1/nodes/{ident}/management/boot_device",
            get(boot_device).put(set_boot_device),
        )
        .route(
            "/v1/nodes/{ident}/management/boot_device/supported",
            get(supported),
        )
        .route(
            "/v1/nodes/{ident}/states/console",
            get(console).put(set_console),
        )
        // Ironic's object dispatch also serves this path (tempest's client reads it).
        .route("/v1/nodes/states/console/{ident}", get(console))
}

/// The boot devices a node's management interface can set, or Ironic's refusal.
fn devices(b: &NodeBody) -> Result<&'static [&'static str], ApiError> {
    match b.interfaces.get("management").map(String::as_str) {
        Some("fake") => Ok(&["pxe"]),
        Some("ipmitool" | "redfish") => Ok(&["pxe", "disk"]),
        _ => Err(ApiError::bad_request(format!(
            "Driver {} does not support management (disabled or not implemented).",
            b.driver
        ))),
    }
}

async fn supported(app: State, Path(ident): Path<String>) -> Result<Json<Value>, ApiError> {
    let node = find(&app, &ident).await?;
    Ok(Json(
        json!({"supported_boot_devices": devices(&node.body)?}),
    ))
}

async fn boot_device(app: State, Path(ident): Path<String>) -> Result<Json<Value>, ApiError> {
    let node = find(&app, &ident).await?;
    let b = &node.body;
    let fake = devices(b)? == ["pxe"];
    Ok(Json(match b.driver_internal_info.get(BOOT_DEVICE) {
        Some(set) => set.clone(),
        None if fake => json!({"boot_device": "pxe", "persistent": false}),
        None => json!({"boot_device": null, "persistent": null}),
    }))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BootDeviceRequest {
    boot_device: String,
    #[serde(default)]
    persistent: bool,
}

async fn set_boot_device(
    app: State,
    Path(ident): Path<String>,
    body: Bytes,
) -> Result<StatusCode, ApiError> {
    let request: BootDeviceRequest = parse(&body)?;
    let node = find(&app, &ident).await?;
    let device = match request.boot_device.as_str() {
        "pxe" => BootDevice::Pxe,
        "disk" => BootDevice::Disk,
        _ => return Err(invalid_device(&request.boot_device)),
    };
    if !devices(&node.body)?.contains(&request.boot_device.as_str()) {
        return Err(invalid_device(&request.boot_device));
    }
    app.conductor
        .set_boot_device(node.uuid(), device, request.persistent)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

fn invalid_device(device: &str) -> ApiError {
    ApiError::bad_request(format!("Invalid boot device {device} specified."))
}

/// fake-hardware's fake console and `ipmitool-socat`; anything else is Ironic's refusal.
fn has_console(b: &NodeBody) -> Result<(), ApiError> {
    match b.interfaces.get("console").map(String::as_str) {
        Some("fake" | "ipmitool-socat") => Ok(()),
        _ => Err(ApiError::bad_request(format!(
            "Driver {} does not support console (disabled or not implemented).",
            b.driver
        ))),
    }
}

async fn console(app: State, Path(ident): Path<String>) -> Result<Json<Value>, ApiError> {
    let node = find(&app, &ident).await?;
    has_console(&node.body)?;
    let enabled = node.body.attrs.get("console_enabled") == Some(&Value::Bool(true));
    let info = app.conductor.console_info(&node.body, node.uuid());
    Ok(Json(
        json!({"console_enabled": enabled, "console_info": info}),
    ))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ConsoleRequest {
    enabled: Value,
}

async fn set_console(
    app: State,
    Path(ident): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let request: ConsoleRequest = parse(&body)?;
    let enabled = super::schema::parse_bool(&request.enabled).ok_or_else(|| {
        ApiError::bad_request(format!("Invalid value for enabled: {}", request.enabled))
    })?;
    let node = find(&app, &ident).await?;
    has_console(&node.body)?;
    app.conductor.set_console(node.uuid(), enabled).await?;
    let location = format!("{}/v1/nodes/{}/states/console", app.base(), node.uuid());
    Ok((StatusCode::ACCEPTED, [(header::LOCATION, location)]).into_response())
}
