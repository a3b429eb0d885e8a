//! `GET /v1/nodes` and `GET /v1/nodes/detail`: filters, `fields`, pagination.
//!
//! A list is read, projected and written out one node at a time, on a blocking thread,
//! and sent as it is written. Reading a page of whole nodes first and projecting after
//! made `?fields=uuid` over 150 large nodes take 300 MB, and four `/detail` calls stalled
//! the async workers (and every other request) for seconds. Now a list holds one node and
//! a small buffer, whatever the fleet, and at most [`LISTS`] are worked on at once.

use std::sync::Arc;

use std::io::Write;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Extension, Query};
use axum::response::{IntoResponse, Response};
use serde_json::Value;
use tokio::sync::Semaphore;
use uuid::Uuid;

use super::http::error::ApiError;
use super::http::streamed::{self, Chunks};
use super::http::version::Version;
use super::node_view::NodeView;
use super::{App, State, node_doc, schema};

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

/// Bounds the lists worked on at once.
pub fn permits() -> Arc<Semaphore> {
    Arc::new(Semaphore::new(LISTS))
}

/// Waits for a list's turn (one of [`LISTS`]), held until its answer is written.
pub async fn turn(app: &App) -> tokio::sync::OwnedSemaphorePermit {
    app.lists
        .clone()
        .acquire_owned()
        .await
        .expect("the list semaphore is never closed")
}

/// A list's query: Ironic's filters (booleans in any case, as Ironic parses them),
/// `fields`, `detail`, pagination.
#[derive(Default)]
pub struct ListQuery {
    /// `(field, value)`: the node's field (as the API shows it) must equal the value.
    equal: Vec<(&'static str, Value)>,
    associated: Option<bool>,
    description_contains: Option<String>,
    /// `sharded` (1.82): whether the node has a shard.
    sharded: Option<bool>,
    /// `shard` (1.82): the node is in one of these.
    shards: Option<Vec<String>>,
    /// `parent_node` (1.83), as given; [`ListQuery::resolve`] makes it a uuid.
    parent_node: Option<String>,
    /// `include_children` (1.83): child nodes are listed only when asked for.
    include_children: bool,
    fields: Option<String>,
    detail: Option<bool>,
    limit: Option<usize>,
    marker: Option<Uuid>,
    /// The query as given, for `next` links.
    raw: Vec<(String, String)>,
}

/// The faults Ironic records on a node (`ironic.common.faults`): a filter on any other is
/// a 400.
const FAULTS: &[&str] = &[
    "power failure",
    "clean failure",
    "rescue abort failure",
    "service failure",
];

/// Filters that compare one field, and the microversion each came with.
const EQUAL: &[(&str, u32, bool)] = &[
    ("provision_state", 9, false),
    ("driver", 16, false),
    ("maintenance", 1, true),
    ("resource_class", 21, false),
    ("chassis_uuid", 1, false),
    ("instance_uuid", 1, false),
    ("conductor_group", 46, false),
    ("owner", 50, false),
    ("lessee", 65, false),
    ("retired", 61, true),
    ("conductor", 49, false),
    ("instance_name", 104, false),
];

impl ListQuery {
    pub fn parse(pairs: Vec<(String, String)>, version: Version) -> Result<ListQuery, ApiError> {
        let mut q = ListQuery {
            raw: pairs.clone(),
            ..Default::default()
        };
        let boolean = |k: &str, v: &str| {
            schema::parse_bool(&Value::String(v.to_owned())).ok_or_else(|| {
                ApiError::bad_request(format!("Invalid value for {k}: {v}; expected a boolean"))
            })
        };
        for (k, v) in pairs {
            if let Some((name, since, is_bool)) = EQUAL.iter().find(|(n, ..)| *n == k) {
                if !version.at_least(*since) {
                    return Err(ApiError::not_acceptable(format!(
                        "The filter \"{k}\" needs API version 1.{since} or newer."
                    )));
                }
                let value = if *is_bool {
                    Value::Bool(boolean(&k, &v)?)
                } else {
                    Value::String(v)
                };
                q.equal.push((name, value));
                continue;
            }
            let since = |minor: u32| match version.at_least(minor) {
                true => Ok(()),
                false => Err(ApiError::not_acceptable(format!(
                    "The filter \"{k}\" needs API version 1.{minor} or newer."
                ))),
            };
            match k.as_str() {
                "associated" => q.associated = Some(boolean(&k, &v)?),
                "fault" => {
                    since(42)?;
                    if !FAULTS.contains(&v.as_str()) {
                        return Err(ApiError::bad_request(format!("Unknown fault: {v}")));
                    }
                    q.equal.push(("fault", Value::String(v)));
                }
                // Any of several shards, comma-separated.
                "shard" => {
                    since(82)?;
                    q.shards = Some(v.split(',').map(|s| s.trim().to_owned()).collect());
                }
                "sharded" | "parent_node" | "include_children" => {
                    let since = if k == "sharded" { 82 } else { 83 };
                    if !version.at_least(since) {
                        return Err(ApiError::not_acceptable(format!(
                            "The filter \"{k}\" needs API version 1.{since} or newer."
                        )));
                    }
                    match k.as_str() {
                        "sharded" => q.sharded = Some(boolean(&k, &v)?),
                        "parent_node" => q.parent_node = Some(v),
                        _ => q.include_children = boolean(&k, &v)?,
                    }
                }
                "description_contains" => q.description_contains = Some(v),
                "fields" => q.fields = Some(v),
                "detail" => q.detail = Some(boolean(&k, &v)?),
                "limit" => {
                    q.limit = Some(v.parse().map_err(|_| {
                        ApiError::bad_request(format!(
                            "Limit must be a non-negative integer, got '{v}'"
                        ))
                    })?)
                }
                "marker" => {
                    q.marker = Some(Uuid::parse_str(&v).map_err(|_| {
                        ApiError::bad_request(format!("Expected UUID for marker: {v}"))
                    })?)
                }
                "sort_key" if v != "uuid" => {
                    return Err(ApiError::bad_request(format!(
                        "The sort_key value \"{v}\" is not supported; deployd sorts by uuid."
                    )));
                }
                "sort_dir" if v != "asc" => {
                    return Err(ApiError::bad_request("Only sort_dir=asc is supported."));
                }
                "sort_key" | "sort_dir" => {}
                other => {
                    return Err(ApiError::bad_request(format!(
                        "Unknown argument: \"{other}\""
                    )));
                }
            }
        }
        Ok(q)
    }

    /// Names in the query that stand for nodes become their uuids; an unknown parent
    /// matches nothing.
    async fn resolve(&mut self, app: &App) {
        if let Some(parent) = self.parent_node.take() {
            let uuid = app
                .conductor
                .store()
                .find_node(&parent)
                .await
                .map(|n| n.uuid());
            self.parent_node = Some(uuid.map_or(parent, |u| u.to_string()));
        }
    }

    /// Child nodes show only when asked for (`include_children`, or their `parent_node`).
    /// This reads the stored node, so it holds at every version.
    fn shows_child(&self, node: &crate::node::Node) -> bool {
        self.include_children
            || self.parent_node.is_some()
            || node
                .body
                .attrs
                .get("parent_node")
                .is_none_or(Value::is_null)
    }

    fn matches(&self, node: &NodeView) -> bool {
        let field = |k: &str| node.get(k);
        self.equal.iter().all(|(k, v)| field(k) == *v)
            && self.sharded.is_none_or(|s| field("shard").is_null() != s)
            && self.shards.as_ref().is_none_or(|shards| {
                field("shard")
                    .as_str()
                    .is_some_and(|s| shards.iter().any(|w| w == s))
            })
            && self
                .parent_node
                .as_deref()
                .is_none_or(|p| field("parent_node").as_str() == Some(p))
            && self
                .associated
                .is_none_or(|a| field("instance_uuid").is_null() != a)
            && self
                .description_contains
                .as_deref()
                .is_none_or(|d| field("description").as_str().is_some_and(|s| s.contains(d)))
    }

    /// The query string of a `next` link: everything but the marker.
    fn next_query(&self, limit: usize, marker: Uuid) -> String {
        let mut parts = vec![format!("limit={limit}"), format!("marker={marker}")];
        for (k, v) in &self.raw {
            if k != "limit" && k != "marker" {
                parts.push(format!("{k}={}", v.replace(' ', "%20")));
            }
        }
        parts.join("&")
    }

    fn limit(&self) -> usize {
        match self.limit {
            None | Some(0) => MAX_LIMIT,
            Some(n) => n.min(MAX_LIMIT),
        }
    }
}

pub type Pairs = Result<Query<Vec<(String, String)>>, QueryRejection>;

pub async fn list(app: State, Extension(version): Extension<Version>, query: Pairs) -> Response {
    respond(app, version, query, false, "/v1/nodes".into()).await
}

pub async fn detail(app: State, Extension(version): Extension<Version>, query: Pairs) -> Response {
    respond(app, version, query, true, "/v1/nodes/detail".into()).await
}

/// `GET /v1/chassis/{chassis}/nodes[/detail]`: the node list of one chassis (the chassis
/// must exist), paged from its own path.
pub async fn of_chassis(
    app: State,
    version: Version,
    chassis: uuid::Uuid,
    query: Pairs,
    detail: bool,
) -> Response {
    let query = query.map(|Query(mut pairs)| {
        pairs.retain(|(k, _)| k != "chassis_uuid");
        pairs.push(("chassis_uuid".into(), chassis.to_string()));
        Query(pairs)
    });
    let path = match detail {
        true => format!("/v1/chassis/{chassis}/nodes/detail"),
        false => format!("/v1/chassis/{chassis}/nodes"),
    };
    respond(app, version, query, detail, path).await
}

async fn respond(
    app: State,
    version: Version,
    query: Pairs,
    detail: bool,
    path: String,
) -> Response {
    let q = match query {
        Ok(Query(pairs)) => ListQuery::parse(pairs, version),
        Err(e) => Err(super::http::error::query_refused(&e)),
    };
    let mut q = match q {
        Ok(q) => q,
        Err(e) => return e.into_response(),
    };
    q.resolve(&app).await;
    let detail = detail || q.detail.unwrap_or(false);
    let fields = match q
        .fields
        .as_deref()
        .map(|f| node_doc::NODE.fields(f, version))
        .transpose()
    {
        Ok(f) => f.map(|f| f.into_iter().map(str::to_owned).collect::<Vec<_>>()),
        Err(e) => return e.into_response(),
    };
    if detail && fields.is_some() {
        return ApiError::bad_request(
            "Can not specify ?detail=True and fields in the same request.",
        )
        .into_response();
    }
    let permit = turn(&app).await;
    let shape = Shape {
        version,
        detail,
        fields,
        path,
        conductors: app.peers.conductors(&app).await,
    };
    let app = app.0.clone();
    streamed::respond("application/json", Some(permit), move |out| {
        write_list(&app, &q, &shape, out)
    })
}

/// What each listed node looks like.
struct Shape {
    version: Version,
    detail: bool,
    fields: Option<Vec<String>>,
    path: String,
    /// Which engine each node's `conductor` names.
    conductors: crate::conductor_groups::Conductors,
}

/// Writes `{"nodes": [...], "next": ...}` into `out`, a node at a time. A write that
/// fails means the client went away: the list stops there.
fn write_list(app: &App, q: &ListQuery, shape: &Shape, out: &mut Chunks) -> Result<(), ApiError> {
    let limit = q.limit();
    let fields: Option<Vec<&str>> = shape
        .fields
        .as_ref()
        .map(|f| f.iter().map(String::as_str).collect());
    let base = &app.base();
    if out.write_all(b"{\"nodes\": [").is_err() {
        return Ok(());
    }
    let (mut count, mut last) = (0, None);
    let mut nodes = app.conductor.store().nodes_after(q.marker);
    while let Some(node) = nodes.next_blocking() {
        let node = node?;
        if !q.shows_child(&node) {
            continue;
        }
        let agent = match app.conductor.store().records_agents() {
            // On its blocking thread, as the pages of the shared store are read.
            true => {
                tokio::runtime::Handle::current().block_on(app.conductor.agent_view(node.uuid()))
            }
            false => app.conductor.agents().get(node.uuid()),
        };
        let view = NodeView {
            base,
            conductor: shape.conductors.of(&node),
            node: &node,
            agent: agent.as_ref(),
            version: shape.version,
            only: match (&fields, shape.detail) {
                (Some(f), _) => Some(f),
                (None, true) => None,
                (None, false) => Some(DEFAULT_FIELDS),
            },
        };
        if !q.matches(&view) {
            continue;
        }
        let sent = (count == 0 || out.write_all(b", ").is_ok())
            && serde_json::to_writer(&mut *out, &view).is_ok();
        if !sent {
            return Ok(());
        }
        count += 1;
        last = Some(node.uuid());
        if count == limit {
            break;
        }
    }
    let mut tail = b"]".to_vec();
    if let (true, Some(last)) = (count == limit, last) {
        let next = format!("{base}{}?{}", shape.path, q.next_query(limit, last));
        tail.extend_from_slice(b", \"next\": ");
        serde_json::to_writer(&mut tail, &next).expect("a string serialises");
    }
    tail.push(b'}');
    let _ = out.write_all(&tail);
    Ok(())
}
