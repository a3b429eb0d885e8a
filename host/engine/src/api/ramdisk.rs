//! The ramdisk agent's endpoints: `GET /v1/lookup` and `POST /v1/heartbeat/{node}`.
//!
//! Lookup finds the node by MAC (or uuid) only in the states where an agent is expected,
//! and answers an identical 404 otherwise, so a probe cannot tell unknown from wrong
//! state. It issues the agent token once per boot: 43 URL-safe characters, of which only
//! a sha256 is stored; later lookups get `"******"`. A heartbeat must carry that token;
//! it is checked against the engine's memory first (no store read on the hot path) and
//! against the stored hash after a restart. Then the conductor touches the node and lets
//! its driver act.

use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{Extension, Path, Query};
use axum::http::StatusCode;
use axum::routing::{get, post};
use serde::Deserialize;
use serde_json::{Value, json};
use uuid::Uuid;

use super::http::error::{ApiError, parse};
use super::http::gate::since;
use super::http::version::Version;
use super::{App, State, view};
use crate::agent_sessions::AgentReport;
use crate::conductor::{AGENT_CA_SHA256, AGENT_TOKEN_HASH, token_hash};
use crate::state_machine::runs_ramdisk;
use crate::store::StoreError;
use deployd_wire::agent::Heartbeat;

pub fn routes() -> Router<Arc<App>> {
    Router::new()
        .route("/v1/lookup", since(22, get(lookup)))
        .route("/v1/lookup/", since(22, get(lookup)))
        .route("/v1/heartbeat/{ident}", since(22, post(heartbeat)))
        .route("/v1/heartbeat", since(22, post(heartbeat_naming_its_node)))
}

/// `POST /v1/heartbeat` with the node in the body (`node_ident`), as Ironic also takes it.
async fn heartbeat_naming_its_node(
    app: State,
    version: Extension<Version>,
    body: Bytes,
) -> Result<StatusCode, ApiError> {
    let mut doc: serde_json::Map<String, Value> = parse(&body)?;
    let ident = match doc.remove("node_ident") {
        Some(Value::String(ident)) => ident,
        _ => {
            return Err(ApiError::bad_request(
                "Mandatory field missing: 'node_ident'",
            ));
        }
    };
    let rest = serde_json::to_vec(&doc).map_err(|e| ApiError::bad_request(e.to_string()))?;
    heartbeat(app, version, Path(ident), Bytes::from(rest)).await
}

#[derive(Deserialize, Default)]
struct LookupQuery {
    addresses: Option<String>,
    node_uuid: Option<String>,
}

async fn lookup(
    app: State,
    Extension(version): Extension<Version>,
    Query(q): Query<LookupQuery>,
) -> Result<Json<Value>, ApiError> {
    let store = &app.conductor.store();
    let macs: Vec<&str> = q
        .addresses
        .as_deref()
        .unwrap_or("")
        .split(',')
        .map(str::trim)
        .filter(|m| !m.is_empty())
        .collect();
    let uuid = q.node_uuid.as_deref().and_then(|u| Uuid::parse_str(u).ok());
    if uuid.is_none() && !macs.iter().any(|m| crate::node::normalize_mac(m).is_ok()) {
        return Err(ApiError::bad_request(
            "One of addresses or node_uuid query parameters must be provided and valid.",
        ));
    }
    let what = q.node_uuid.clone().unwrap_or_else(|| macs.join(","));
    let not_found = || ApiError::not_found(format!("Node with {what} could not be found."));
    let found = match uuid {
        Some(u) => Some(u),
        None => store.node_by_macs(macs.iter().copied()).await?,
    };
    let node = match found {
        Some(u) => store.node(u).await.ok(),
        None => None,
    };
    let node = match node {
        Some(n) if runs_ramdisk(n.state()) => n,
        _ => return Err(not_found()),
    };
    let token = if version.at_least(62) {
        Some(app.conductor.issue_agent_token(&node).await?)
    } else {
        None
    };
    let base = &app.base();
    Ok(Json(json!({
        "node": {
            "uuid": node.uuid(),
            "properties": node.body.properties,
            "instance_info": view::mask(&node.body.instance_info),
            "driver_internal_info": view::mask(&node.body.driver_internal_info),
            "links": view::links(base, "nodes", &node.uuid().to_string()),
        },
        "config": {
            "heartbeat_timeout": app.ramdisk_heartbeat_timeout,
            "agent_token": token,
            "agent_token_required": true,
            "agent_md5_checksum_enable": false,
            "disable_deep_image_inspection": false,
            "permitted_image_formats": ["raw", "qcow2", "iso"],
        },
    })))
}

/// What an external installer may say of itself in a heartbeat (1.72).
const AGENT_STATUSES: &[&str] = &["start", "end", "error"];

async fn heartbeat(
    app: State,
    Extension(version): Extension<Version>,
    Path(ident): Path<String>,
    body: Bytes,
) -> Result<StatusCode, ApiError> {
    let hb: Heartbeat = parse(&body)?;
    let token = hb
        .agent_token
        .as_deref()
        .filter(|t| !t.is_empty())
        .ok_or_else(|| {
            ApiError::bad_request("Agent token is required for heartbeat processing.")
        })?;
    let callback_url = app
        .conductor
        .agents()
        .callback_url(Uuid::parse_str(&ident).ok(), &hb.callback_url)
        .map_err(ApiError::bad_request)?;
    let gives_status = hb.agent_status.is_some() || hb.agent_status_message.is_some();
    if gives_status && !version.at_least(72) {
        return Err(ApiError::bad_request(format!(
            "agent_status and agent_status_message need API version 1.72 or newer, not {version}."
        )));
    }
    if let Some(status) = hb.agent_status.as_deref()
        && !AGENT_STATUSES.contains(&status)
    {
        return Err(ApiError::bad_request(format!(
            "Unknown agent status {status:?}; expected one of {}.",
            AGENT_STATUSES.join(", ")
        )));
    }
    if hb.agent_version.is_none() && hb.agent_status.is_none() {
        return Err(ApiError::bad_request(
            "Agent did not transmit a version, and a version is required.",
        ));
    }
    // An unknown node and a wrong token answer alike: a heartbeat must not tell a prober
    // which nodes exist.
    let refused = || ApiError::bad_request("Invalid or missing agent token received.");
    let uuid = match Uuid::parse_str(&ident) {
        Ok(u) => u,
        Err(_) => match app.conductor.store().find_node(&ident).await {
            Ok(node) => node.uuid(),
            Err(StoreError::NodeNotFound(_)) => return Err(refused()),
            Err(e) => return Err(e.into()),
        },
    };
    if !app.conductor.agents().token_is(uuid, token) {
        // After a restart the engine knows only the hash.
        let node = match app.conductor.store().node(uuid).await {
            Ok(node) => node,
            Err(StoreError::NodeNotFound(_)) => return Err(refused()),
            Err(e) => return Err(e.into()),
        };
        let stored = node
            .body
            .driver_internal_info
            .get(AGENT_TOKEN_HASH)
            .and_then(Value::as_str);
        if stored != Some(token_hash(token).as_str()) {
            return Err(refused());
        }
    }
    let ca = app
        .conductor
        .agents()
        .check_tls(
            uuid,
            token,
            &callback_url,
            hb.agent_verify_ca.as_deref(),
            async || {
                let node = app.conductor.store().node(uuid).await.ok()?;
                let digest = node.body.driver_internal_info.get(AGENT_CA_SHA256)?;
                digest.as_str().map(str::to_owned)
            },
        )
        .await
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    let agent_version = hb.agent_version.as_deref().unwrap_or("");
    // What the agent says of its work (deployd's agent: the step and the bytes written;
    // an external installer: its status): a different report is progress.
    let report = AgentReport {
        status: hb.agent_status,
        message: hb.agent_status_message,
    };
    app.conductor
        .heartbeat(uuid, token, &callback_url, agent_version, ca, report)
        .await
        .map(|()| StatusCode::ACCEPTED)
        .map_err(ApiError::from)
}
