//! `GET /v1/drivers`: the loaded WebAssembly drivers, as Ironic lists hardware types.
//!
//! The extension `/v1/deployd/drivers` loads and unloads drivers at runtime:
//! - `POST /v1/deployd/drivers[?memory_mib=N&deadline_ms=N]` with the component as the
//!   body: streamed to disk (at most [`MAX_DRIVER`] bytes, else 413), validated, compiled
//!   (one compile at a time), made the active version of its name → 201 with the driver;
//!   kept in `plugins_dir` (in the shared store, when the engine runs on one) so a
//!   restart loads it again. Limits out of range are a 400.
//!   The same code with other limits is a new version: nodes mid-flow keep the limits
//!   they started with.
//! - `DELETE /v1/deployd/drivers/{name}[?force=true]`: refused with 409 while nodes are
//!   mid-flow on it, unless forced.

use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::body::Body;
use axum::extract::rejection::QueryRejection;
use axum::extract::{DefaultBodyLimit, Extension, Path, Query};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use serde::Deserialize;
use serde_json::{Value, json};

use super::http::error::ApiError;
use super::http::gate::{TooOld, gated};
use super::http::version::Version;
use super::{App, MAX_DRIVER, State, schema, view};
use crate::driver_host::{Limits, LoadError, LoadedDriver};
use crate::hardware;

/// Where drivers are uploaded.
pub const UPLOAD_PATH: &str = "/v1/deployd/drivers";

/// How long an upload may go without a byte: a slow upload that moves is never cut, a
/// stalled one is, with a message that says so (not the request timeout's).
pub const UPLOAD_IDLE: std::time::Duration = std::time::Duration::from_secs(30);

pub fn routes() -> Router<Arc<App>> {
    Router::new()
        .route("/v1/drivers", get(list))
        .route("/v1/drivers/", get(list))
        .route("/v1/drivers/{name}", get(show))
        .route("/v1/drivers/{name}/properties", get(properties))
        .route(
            "/v1/drivers/{name}/raid/logical_disk_properties",
            gated(12, TooOld::NotAcceptable, get(raid_properties)),
        )
        .route(
            UPLOAD_PATH,
            // The handler streams the body to disk and enforces MAX_DRIVER itself.
            post(load).layer(DefaultBodyLimit::disable()),
        )
        .route("/v1/deployd/drivers/{name}", delete(unload))
}

fn family(d: &LoadedDriver) -> &'static str {
    use crate::driver_host::capability::bindings::Family;
    match d.description.family {
        Family::Agent => "agent",
        Family::Pxe => "pxe",
        Family::Fake => "fake",
    }
}

/// What deployd adds about a component: its version, family, limits.
fn component(d: &LoadedDriver) -> Value {
    json!({
        "version": d.description.version,
        "wit": d.world(),
        "family": family(d),
        "power": d.description.power,
        "summary": d.description.summary,
        "hash": d.hash,
        "version_id": d.id,
        "size": d.size,
        "loaded_at": d.loaded_at.to_datetime(),
        "limits": d.limits,
    })
}

/// A loaded component as `POST /v1/deployd/drivers` answers.
fn doc(app: &App, d: &LoadedDriver) -> Value {
    let name = &d.description.name;
    json!({
        "name": name,
        "hosts": [app.conductor.store().conductor_name()],
        "type": "dynamic",
        "links": view::links(&app.base(), "drivers", name),
        "deployd": component(d),
    })
}

/// A hardware type as Ironic shows it; `detail` adds the 1.30 interface fields.
fn hardware_doc(app: &App, name: &str, detail: bool, version: Version) -> Value {
    let base = &app.base();
    let mut doc = json!({
        "name": name,
        "hosts": [app.conductor.store().conductor_name()],
        "type": "dynamic",
        "links": view::links(base, "drivers", name),
        "properties": view::links(base, "drivers", &format!("{name}/properties")),
    });
    let obj = doc.as_object_mut().expect("an object");
    if detail && version.at_least(30) {
        let hardware = app.conductor.hardware();
        for (kind, since) in hardware::KINDS {
            if !version.at_least(*since) {
                continue;
            }
            let enabled = hardware.enabled(name, kind);
            obj.insert(
                format!("default_{kind}_interface"),
                json!(hardware.default(name, kind)),
            );
            obj.insert(format!("enabled_{kind}_interfaces"), json!(enabled));
        }
    }
    if let Some(d) = app.conductor.registry().get(name) {
        obj.insert("deployd".into(), component(&d));
    }
    doc
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct ListQuery {
    #[serde(rename = "type")]
    kind: Option<String>,
    detail: Option<String>,
    fields: Option<String>,
}

/// `?fields=a,b` (1.77): only those fields of each driver; the names must be the
/// document's own.
fn only_fields(doc: Value, fields: Option<&str>, version: Version) -> Result<Value, ApiError> {
    let Some(fields) = fields else {
        return Ok(doc);
    };
    if !version.at_least(77) {
        return Err(ApiError::not_acceptable(
            "The fields parameter of drivers needs API version 1.77 or newer.",
        ));
    }
    let wanted: Vec<&str> = fields.split(',').map(str::trim).collect();
    if let Some(bad) = wanted.iter().find(|f| doc.get(**f).is_none()) {
        return Err(ApiError::bad_request(format!(
            "Field(s) \"{bad}\" are not valid"
        )));
    }
    Ok(super::view::fields(doc, &wanted))
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct ShowQuery {
    fields: Option<String>,
}

async fn list(
    app: State,
    Extension(version): Extension<Version>,
    query: Result<Query<ListQuery>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(q) = query.map_err(|e| super::http::error::query_refused(&e))?;
    let detail = match q.detail.as_deref() {
        None => false,
        Some(d) => schema::parse_bool(&json!(d))
            .ok_or_else(|| ApiError::bad_request(format!("Invalid value for detail: {d}")))?,
    };
    let names = match q.kind.as_deref() {
        None | Some("dynamic") => app.conductor.hardware().types(),
        Some("classic") => Vec::new(),
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "Invalid type: {other}; expected \"classic\" or \"dynamic\""
            )));
        }
    };
    let docs: Vec<Value> = names
        .iter()
        .map(|n| {
            let full = hardware_doc(&app, n, detail || q.fields.is_some(), version);
            only_fields(full, q.fields.as_deref(), version)
        })
        .collect::<Result<_, _>>()?;
    Ok(Json(json!({"drivers": docs})))
}

async fn show(
    app: State,
    Extension(version): Extension<Version>,
    Path(name): Path<String>,
    query: Result<Query<ShowQuery>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(q) = query.map_err(|e| super::http::error::query_refused(&e))?;
    if !app.conductor.hardware().exists(&name) {
        return Err(ApiError::not_found(format!(
            "Driver {name} could not be found."
        )));
    }
    let doc = hardware_doc(&app, &name, true, version);
    Ok(Json(only_fields(doc, q.fields.as_deref(), version)?))
}

async fn properties(app: State, Path(name): Path<String>) -> Result<Json<Value>, ApiError> {
    if !app.conductor.hardware().exists(&name) {
        return Err(ApiError::not_found(format!(
            "Driver {name} could not be found."
        )));
    }
    Ok(Json(json!({
        "deploy_kernel": "UUID (from Glance) or URL of the deployment kernel. Required.",
        "deploy_ramdisk": "UUID (from Glance) or URL of the ramdisk. Required.",
        "ipmi_address": "IP address or hostname of the node. Required for ipmi.",
        "ipmi_username": "username; default is NULL user. Optional.",
        "ipmi_password": "password. Optional.",
        "ipmi_port": "remote IPMI RMCP port. Optional.",
        "redfish_address": "The URL address to the Redfish controller. Required for redfish.",
        "redfish_system_id": "The canonical path to the ComputerSystem resource. Optional.",
        "redfish_username": "User account with admin/server-profile access privilege. Optional.",
        "redfish_password": "User account password. Optional.",
    })))
}

/// The RAID logical disk properties: the descriptions in Ironic's RAID schema, which Ironic
/// answers for every type, whatever its default RAID interface.
async fn raid_properties(app: State, Path(name): Path<String>) -> Result<Json<Value>, ApiError> {
    if !app.conductor.hardware().exists(&name) {
        return Err(ApiError::not_found(format!(
            "Driver {name} could not be found."
        )));
    }
    Ok(Json(crate::raid::logical_disk_properties()))
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct LoadQuery {
    memory_mib: Option<u64>,
    deadline_ms: Option<u64>,
}

/// A refused upload may not have been read to its end, so its connection cannot carry
/// another request: the answer says `Connection: close`, or the client would send its
/// next request down a connection the server is closing.
async fn load(
    app: State,
    query: Result<Query<LoadQuery>, axum::extract::rejection::QueryRejection>,
    body: Body,
) -> Response {
    match receive_and_load(app, query, body).await {
        Ok(loaded) => loaded.into_response(),
        Err(e) => {
            let mut response = e.into_response();
            response
                .headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
            response
        }
    }
}

async fn receive_and_load(
    app: State,
    query: Result<Query<LoadQuery>, axum::extract::rejection::QueryRejection>,
    body: Body,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let Query(q) = query.map_err(|e| super::http::error::query_refused(&e))?;
    let limits = Limits::checked(q.memory_mib, q.deadline_ms).map_err(ApiError::bad_request)?;
    let dir = app.plugins_dir.clone().unwrap_or_else(std::env::temp_dir);
    let upload = receive(body, &dir).await?;
    // Mapped, not read: the component's pages are the file's, so they leave the engine's
    // memory with the mapping instead of staying in the allocator after the load.
    // SAFETY: the file is this upload's own temporary file in the plugins directory;
    // nothing else writes it while it is mapped (until `save` renames it).
    #[allow(unsafe_code)]
    let bytes = unsafe { memmap2::Mmap::map(upload.as_file()) }
        .map_err(|e| server_error(format!("mapping the upload: {e}")))?;
    let loaded = app.conductor.registry().load(&bytes, limits).await;
    let driver = loaded.map_err(|e| match e {
        LoadError::Io(_) => server_error(e.to_string()),
        e => ApiError::bad_request(e.to_string()),
    })?;
    // The shared store keeps uploads for every engine on it; else the plugins directory.
    if app.conductor.store().keeps_drivers() {
        app.conductor
            .keep_driver(&driver, &bytes)
            .await
            .map_err(|e| server_error(format!("driver loaded but not kept: {e}")))?;
        return Ok((StatusCode::CREATED, Json(doc(&app, &driver))));
    }
    drop(bytes);
    if app.plugins_dir.is_some() {
        let kept = dir.join(format!("{}.wasm", driver.description.name));
        crate::driver_host::component_file::save(upload, &kept, &driver.hash)
            .map_err(|e| server_error(format!("driver loaded but not saved: {e}")))?;
    }
    Ok((StatusCode::CREATED, Json(doc(&app, &driver))))
}

fn server_error(message: String) -> ApiError {
    ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, message)
}

/// Streams an upload into a temporary file in `dir`, refusing it past [`MAX_DRIVER`]
/// bytes or when no byte came for [`UPLOAD_IDLE`]: an upload never sits in memory whole
/// while it arrives, and is bounded by its progress, not its length.
async fn receive(body: Body, dir: &std::path::Path) -> Result<tempfile::NamedTempFile, ApiError> {
    use futures_util::StreamExt;
    use tokio::io::AsyncWriteExt;
    std::fs::create_dir_all(dir)
        .map_err(|e| server_error(format!("creating {}: {e}", dir.display())))?;
    let upload = tempfile::Builder::new()
        .prefix(".upload-")
        .suffix(".part")
        .tempfile_in(dir)
        .map_err(|e| server_error(format!("creating an upload file in {}: {e}", dir.display())))?;
    let file = upload
        .reopen()
        .map_err(|e| server_error(format!("opening the upload file: {e}")))?;
    let mut file = tokio::fs::File::from_std(file);
    let mut stream = body.into_data_stream();
    let mut received = 0usize;
    loop {
        let next = tokio::time::timeout(UPLOAD_IDLE, stream.next()).await;
        let chunk = match next {
            Ok(Some(chunk)) => chunk,
            Ok(None) => break,
            Err(_) => {
                return Err(ApiError::new(
                    StatusCode::REQUEST_TIMEOUT,
                    format!(
                        "The upload stalled: no bytes for {} s after {received} bytes.",
                        UPLOAD_IDLE.as_secs()
                    ),
                ));
            }
        };
        let chunk = chunk.map_err(|e| ApiError::bad_request(format!("reading the upload: {e}")))?;
        received += chunk.len();
        if received > MAX_DRIVER {
            return Err(ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("A driver component may be at most {MAX_DRIVER} bytes."),
            ));
        }
        file.write_all(&chunk)
            .await
            .map_err(|e| server_error(format!("writing the upload: {e}")))?;
    }
    file.flush()
        .await
        .map_err(|e| server_error(format!("writing the upload: {e}")))?;
    Ok(upload)
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct UnloadQuery {
    force: Option<bool>,
}

async fn unload(
    app: State,
    Path(name): Path<String>,
    Query(q): Query<UnloadQuery>,
) -> Result<StatusCode, ApiError> {
    if app.conductor.registry().get(&name).is_none() {
        return Err(ApiError::not_found(format!(
            "The driver {name} is not loaded."
        )));
    }
    let in_use = app.conductor.nodes_pinned_to(&name).await?;
    app.conductor
        .registry()
        .unload(&name, in_use, q.force.unwrap_or(false))
        .map_err(|e| match e {
            LoadError::InUse { .. } => ApiError::conflict(e.to_string()),
            other => ApiError::bad_request(other.to_string()),
        })?;
    if let Some(dir) = &app.plugins_dir {
        let _ = std::fs::remove_file(dir.join(format!("{name}.wasm")));
    }
    app.conductor
        .forget_driver(&name)
        .await
        .map_err(|e| server_error(format!("driver unloaded, but still kept: {e}")))?;
    Ok(StatusCode::NO_CONTENT)
}
