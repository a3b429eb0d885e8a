//! How nodes are grouped: shards (1.82, `GET /v1/shards`) and child nodes (1.83,
//! `GET /v1/nodes/{node}/children`), both from the nodes' own fields (`shard`,
//! `parent_node`).

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::extract::Path;
use axum::routing::get;
use serde_json::{Value, json};

use super::http::error::ApiError;
use super::http::gate::since;
use super::node_access::find;
use super::{App, State};

pub fn routes() -> Router<Arc<App>> {
    Router::new()
        .route("/v1/shards", since(82, get(shards)))
        .route("/v1/nodes/{ident}/children", since(83, get(children)))
}

/// Each shard in use and how many nodes it holds.
async fn shards(app: State) -> Result<Json<Value>, ApiError> {
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    let mut nodes = app.conductor.store().nodes_after(None);
    while let Some(node) = nodes.next().await {
        if let Some(shard) = node?.body.attrs.get("shard").and_then(Value::as_str) {
            *counts.entry(shard.to_owned()).or_default() += 1;
        }
    }
    let list: Vec<Value> = counts
        .into_iter()
        .map(|(name, count)| json!({"name": name, "count": count}))
        .collect();
    Ok(Json(json!({"shards": list})))
}

/// The uuids of the nodes whose `parent_node` is this node.
async fn children(app: State, Path(ident): Path<String>) -> Result<Json<Value>, ApiError> {
    let parent = json!(find(&app, &ident).await?.uuid());
    let mut list = Vec::new();
    let mut nodes = app.conductor.store().nodes_after(None);
    while let Some(node) = nodes.next().await {
        let node = node?;
        if node.body.attrs.get("parent_node") == Some(&parent) {
            list.push(json!(node.uuid()));
        }
    }
    Ok(Json(json!({"children": list})))
}
