//! `GET /v1/nodes` and `GET /v1/nodes/detail`: filters, `fields`, pagination.
//!
//! A list is read, projected and written out one node at a time, on a blocking thread,
//! and sent as it is written. Reading a page of whole nodes first and projecting after
//! made `?fields=uuid` over 150 large nodes take 300 MB, and four `/detail` calls stalled
//! the async workers (and every other request) for seconds. Now a list holds one node and
//! a small buffer, whatever the fleet, and at most [`LISTS`] are worked on at once.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::Query;
use axum::extract::rejection::QueryRejection;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde::Deserialize;
use tokio::sync::{Semaphore, mpsc};
use uuid::Uuid;

use super::error::ApiError;
use super::{App, State, view};
use crate::node::Node;

const DEFAULT_FIELDS: &[&str] = &[
    "uuid",
    "name",
    "instance_uuid",
    "power_state",
    "provision_state",
    "maintenance",
    "links",
];
const MAX_LIMIT: usize = 1000;
/// Lists worked on at once; more wait their turn (not holding a worker).
pub const LISTS: usize = 2;
/// How much of a list is written before it is sent on.
const CHUNK: usize = 64 << 10;

/// Bounds the lists worked on at once.
pub fn permits() -> Arc<Semaphore> {
    Arc::new(Semaphore::new(LISTS))
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    provision_state: Option<String>,
    driver: Option<String>,
    maintenance: Option<bool>,
    associated: Option<bool>,
    fields: Option<String>,
    detail: Option<bool>,
    limit: Option<usize>,
    marker: Option<Uuid>,
    sort_key: Option<String>,
    sort_dir: Option<String>,
}

impl ListQuery {
    fn matches(&self, node: &Node) -> bool {
        self.provision_state.as_deref().is_none_or(|s| node.state().as_str() == s)
            && self.driver.as_deref().is_none_or(|d| node.body.driver == d)
            && self.maintenance.is_none_or(|m| node.body.maintenance == m)
            // deployd has no instance_uuid: no node is associated.
            && self.associated != Some(true)
    }

    /// The query string of a `next` link: everything but the marker.
    fn next_query(&self, limit: usize, marker: Uuid) -> String {
        let mut parts = vec![format!("limit={limit}"), format!("marker={marker}")];
        let mut add = |k: &str, v: Option<String>| {
            if let Some(v) = v {
                parts.push(format!("{k}={}", v.replace(' ', "%20")));
            }
        };
        add("provision_state", self.provision_state.clone());
        add("driver", self.driver.clone());
        add("maintenance", self.maintenance.map(|m| m.to_string()));
        add("fields", self.fields.clone());
        add("detail", self.detail.map(|d| d.to_string()));
        parts.join("&")
    }

    fn limit(&self) -> usize {
        match self.limit {
            None | Some(0) => MAX_LIMIT,
            Some(n) => n.min(MAX_LIMIT),
        }
    }

    fn check(&self) -> Result<(), ApiError> {
        if let Some(key) = self.sort_key.as_deref().filter(|k| *k != "uuid") {
            return Err(ApiError::bad_request(format!(
                "The sort_key value \"{key}\" is not supported; deployd sorts by uuid."
            )));
        }
        if self.sort_dir.as_deref().is_some_and(|d| d != "asc") {
            return Err(ApiError::bad_request("Only sort_dir=asc is supported."));
        }
        Ok(())
    }
}

pub async fn list(app: State, query: Result<Query<ListQuery>, QueryRejection>) -> Response {
    let detail = match &query {
        Ok(Query(q)) => q.detail.unwrap_or(false),
        Err(_) => false,
    };
    respond(app, query, detail, "/v1/nodes").await
}

pub async fn detail(app: State, query: Result<Query<ListQuery>, QueryRejection>) -> Response {
    respond(app, query, true, "/v1/nodes/detail").await
}

async fn respond(
    app: State,
    query: Result<Query<ListQuery>, QueryRejection>,
    detail: bool,
    path: &'static str,
) -> Response {
    let q = match query {
        Ok(Query(q)) => q,
        Err(e) => return ApiError::bad_request(e.body_text()).into_response(),
    };
    if let Err(e) = q.check() {
        return e.into_response();
    }
    let permit = app
        .lists
        .clone()
        .acquire_owned()
        .await
        .expect("the list semaphore is never closed");
    let (chunks, body) = mpsc::channel::<Result<Bytes, std::io::Error>>(2);
    let app = app.0.clone();
    tokio::task::spawn_blocking(move || {
        let _permit = permit;
        if let Err(e) = write_list(&app, &q, detail, path, &chunks) {
            // The status is sent already: cut the body short, so the client sees an error.
            let _ = chunks.blocking_send(Err(std::io::Error::other(e.message)));
        }
    });
    let stream = stream_of(body);
    (
        [(header::CONTENT_TYPE, "application/json")],
        Body::from_stream(stream),
    )
        .into_response()
}

fn stream_of(
    mut rx: mpsc::Receiver<Result<Bytes, std::io::Error>>,
) -> impl futures_util::Stream<Item = Result<Bytes, std::io::Error>> {
    futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

/// Writes `{"nodes": [...], "next": ...}` into `chunks`, a node at a time.
fn write_list(
    app: &App,
    q: &ListQuery,
    detail: bool,
    path: &str,
    chunks: &mpsc::Sender<Result<Bytes, std::io::Error>>,
) -> Result<(), ApiError> {
    let limit = q.limit();
    let fields: Option<Vec<&str>> = q
        .fields
        .as_deref()
        .map(|f| f.split(',').map(str::trim).collect());
    let base = &app.public_url;
    let mut buf = Vec::with_capacity(CHUNK + 4096);
    buf.extend_from_slice(b"{\"nodes\": [");
    let (mut count, mut last) = (0, None);
    for node in app.conductor.store.nodes_after(q.marker) {
        let node = node?;
        if !q.matches(&node) {
            continue;
        }
        let agent = app.conductor.agents.get(node.uuid());
        let doc = view::node(base, &node, agent.as_ref());
        let doc = match (&fields, detail) {
            (Some(f), _) => view::fields(doc, f),
            (None, true) => doc,
            (None, false) => view::fields(doc, DEFAULT_FIELDS),
        };
        if count > 0 {
            buf.extend_from_slice(b", ");
        }
        serde_json::to_writer(&mut buf, &doc).expect("a document serialises");
        count += 1;
        last = Some(node.uuid());
        if buf.len() >= CHUNK && !send(chunks, &mut buf) {
            return Ok(()); // the client went away
        }
        if count == limit {
            break;
        }
    }
    buf.push(b']');
    if let (true, Some(last)) = (count == limit, last) {
        let next = format!("{base}{path}?{}", q.next_query(limit, last));
        buf.extend_from_slice(b", \"next\": ");
        serde_json::to_writer(&mut buf, &next).expect("a string serialises");
    }
    buf.push(b'}');
    send(chunks, &mut buf);
    Ok(())
}

/// Sends what is buffered; false if the client is gone.
fn send(chunks: &mpsc::Sender<Result<Bytes, std::io::Error>>, buf: &mut Vec<u8>) -> bool {
    let chunk = Bytes::from(std::mem::take(buf));
    buf.reserve(CHUNK + 4096);
    chunks.blocking_send(Ok(chunk)).is_ok()
}
