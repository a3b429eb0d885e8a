//! `/v1/nodes/{node}/vifs` (1.28). VIFs are kept in `driver_internal_info.vifs`: deployd
//! plugs no networks, so they are records for the operator's network tooling, as with
//! Ironic's `noop` interface.

use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::Path;
use axum::http::StatusCode;
use axum::routing::{delete, get};
use serde_json::{Value, json};

use super::http::error::{ApiError, parse};
use super::http::gate::since;
use super::node_access::{edit, find};
use super::node_members::{List, remove_member};
use super::{App, State};

pub fn routes() -> Router<Arc<App>> {
    Router::new()
        .route(
            "/v1/nodes/{ident}/vifs",
            since(28, get(vifs).post(attach_vif)),
        )
        .route(
            "/v1/nodes/{ident}/vifs/{vif}",
            since(28, delete(detach_vif)),
        )
}

async fn vifs(app: State, Path(ident): Path<String>) -> Result<Json<Value>, ApiError> {
    let node = find(&app, &ident).await?;
    let list: Vec<Value> = List::Vifs
        .get(&node.body)
        .into_iter()
        .map(|id| json!({"id": id}))
        .collect();
    Ok(Json(json!({"vifs": list})))
}

async fn attach_vif(
    app: State,
    Path(ident): Path<String>,
    body: Bytes,
) -> Result<StatusCode, ApiError> {
    let doc: Value = parse(&body)?;
    let id = doc
        .get("id")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .ok_or_else(|| ApiError::bad_request("Mandatory field missing: 'id'"))?
        .to_owned();
    let node = find(&app, &ident).await?;
    let ports = app.conductor.store().ports_of(node.uuid()).await?.len();
    edit(&app, &ident, |b| {
        let mut list = List::Vifs.get(b);
        if list.contains(&id) {
            return Err(ApiError::conflict(format!(
                "VIF {id} is already attached to node {}",
                b.uuid
            )));
        }
        if b.interfaces.get("network").map(String::as_str) == Some("flat") && list.len() >= ports {
            return Err(ApiError::bad_request(format!(
                "Unable to attach VIF {id} to node {}: not enough free physical ports.",
                b.uuid
            )));
        }
        list.push(id.clone());
        List::Vifs.set(b, list);
        Ok(())
    })
    .await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn detach_vif(
    app: State,
    Path((ident, vif)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    remove_member(&app, &ident, List::Vifs, &vif, |b, vif| {
        ApiError::bad_request(format!(
            "Unable to detach VIF {vif} from node {}: it is not attached.",
            b.uuid
        ))
    })
    .await
}
