//! `GET /v1/nodes/{node}/history` and `…/history/{event}` (1.78): the node's provision
//! state changes as the store recorded them ([`crate::store::history`]), oldest first.
//! `detail` (or `fields`) shows the whole event; without it, Ironic's short form, whose
//! event text is cut at 255 characters. Every event links to itself, as Ironic's do
//! (`baremetal node history get` reads the link). The state an event entered and the
//! time spent in the one it left show from 1.115.

use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::extract::{Extension, Path, Query};
use axum::routing::get;
use serde::Deserialize;
use serde_json::{Map, Value, json};
use uuid::Uuid;

use super::http::error::ApiError;
use super::http::gate::since;
use super::http::version::Version;
use super::listing::keep;
use super::node_access::find;
use super::{App, State};
use crate::store::history::Event;

pub fn routes() -> Router<Arc<App>> {
    Router::new()
        .route("/v1/nodes/{ident}/history", since(78, get(list)))
        .route("/v1/nodes/{ident}/history/{event}", since(78, get(show)))
}

const SHORT: &[&str] = &["uuid", "created_at", "severity", "event", "links"];
/// The short form's longest event text, in characters (Ironic's).
const SHORT_EVENT: usize = 255;
/// Fields that came with 1.115.
const LATER: &[&str] = &["state", "target_provision_state", "duration_seconds"];

/// An event's whole document, its self link to `…/v1/nodes/{node}/history/{event}`
/// included.
fn document(app: &App, node: Uuid, event: &Event, version: Version) -> Map<String, Value> {
    let Value::Object(mut doc) = json!(event) else {
        unreachable!("an event serialises to an object")
    };
    if !version.at_least(115) {
        doc.retain(|k, _| !LATER.contains(&k.as_str()));
    }
    let href = format!("{}/v1/nodes/{node}/history/{}", app.base(), event.uuid);
    doc.insert("links".into(), json!([{"href": href, "rel": "self"}]));
    doc
}

/// The short form: [`SHORT`]'s fields, a long event text cut as Ironic cuts it.
fn short(doc: Map<String, Value>) -> Map<String, Value> {
    let mut doc = keep(doc, SHORT.iter().copied());
    if let Some(Value::String(text)) = doc.get_mut("event")
        && text.chars().count() > SHORT_EVENT
    {
        *text = text.chars().take(SHORT_EVENT - 4).collect::<String>() + "...";
    }
    doc
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct ListQuery {
    detail: Option<String>,
    fields: Option<String>,
    marker: Option<Uuid>,
    limit: Option<usize>,
}

async fn list(
    app: State,
    Extension(v): Extension<Version>,
    Path(ident): Path<String>,
    Query(q): Query<ListQuery>,
) -> Result<Json<Value>, ApiError> {
    let node = find(&app, &ident).await?;
    let detail = q
        .detail
        .as_deref()
        .map(|d| {
            super::schema::parse_bool(&json!(d))
                .ok_or_else(|| ApiError::bad_request(format!("Invalid value for detail: {d}")))
        })
        .transpose()?
        .unwrap_or(false);
    let fields: Option<Vec<String>> = q
        .fields
        .as_deref()
        .map(|f| f.split(',').map(|s| s.trim().to_owned()).collect());
    let events = app.conductor.store().history_of(node.uuid()).await?;
    let after = q
        .marker
        .and_then(|m| events.iter().position(|e| e.uuid == m))
        .map_or(0, |i| i + 1);
    let limit = q.limit.filter(|&l| l > 0).unwrap_or(usize::MAX);
    let shown: Vec<Value> = events[after..]
        .iter()
        .take(limit)
        .map(|e| {
            let doc = document(&app, node.uuid(), e, v);
            Value::Object(match (&fields, detail) {
                (Some(f), _) => keep(doc, f.iter().map(String::as_str)),
                (None, true) => doc,
                (None, false) => short(doc),
            })
        })
        .collect();
    Ok(Json(json!({"history": shown})))
}

async fn show(
    app: State,
    Extension(v): Extension<Version>,
    Path((ident, event)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    let node = find(&app, &ident).await?;
    let event = Uuid::parse_str(&event)
        .map_err(|_| ApiError::bad_request(format!("Expected UUID for event: {event}")))?;
    let found = app
        .conductor
        .store()
        .history_event(node.uuid(), event)
        .await?;
    Ok(Json(Value::Object(document(&app, node.uuid(), &found, v))))
}
