//! Ironic's stored-only resources, all served by the same handlers: create, list (with
//! `fields`, `detail`, filters and pagination), show (by uuid or name), PATCH, DELETE.
//!
//! Each resource is a [`Resource`]: its path, its fields ([`Schema`]), its unique fields,
//! the filters its list takes and a `check` that validates a document before it is
//! written (a node reference exists, a MAC is a MAC, a trait is a trait). The documents
//! live in the store's [`Documents`](crate::store::documents::Documents).

use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Extension, Path, Query};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::{Map, Value, json};
use uuid::Uuid;

use super::http::error::{ApiError, parse};
use super::http::gate::{TooOld, since, too_old};
use super::http::streamed;
use super::http::version::Version;
use futures_util::future::BoxFuture;

use super::listing::{Params, ShowQuery, keep};
use super::schema::Schema;
use super::{App, State, view};
use crate::store::documents::Doc;

/// Checks (and normalises) a document about to be written; `old` is None at create.
/// The request's version is given, for checks that changed with it (a runbook's name).
/// The check may read other records (a node the document names), so it is async.
pub type Check = for<'a> fn(
    &'a App,
    &'a mut Doc,
    Option<&'a Doc>,
    Version,
) -> BoxFuture<'a, Result<(), ApiError>>;

/// Refuses a delete, or undoes what the document did.
pub type OnDelete = for<'a> fn(&'a App, Uuid, &'a Doc) -> BoxFuture<'a, Result<(), ApiError>>;

/// Work a new document starts, given the app and the document's uuid.
pub type OnCreate = fn(Arc<App>, Uuid) -> BoxFuture<'static, ()>;

pub struct Resource {
    /// The kind in the store and in messages (`Chassis`, `Portgroup`).
    pub kind: &'static str,
    /// Under `/v1/`: `chassis`, `volume/connectors`.
    pub path: &'static str,
    /// The key of a list answer: `chassis`, `connectors`.
    pub key: &'static str,
    /// The microversion the resource came with; older requests get 404, as in Ironic.
    pub since: u32,
    /// The microversion from which PATCH is allowed.
    pub patch_since: u32,
    pub schema: Schema,
    /// Unique fields (`a+b`: unique together); `name`, when listed, is also an identifier.
    pub unique: &'static [&'static str],
    /// The fields of a list without `detail`.
    pub short: &'static [&'static str],
    /// The list's filters (`node` takes a node's uuid or name) and their microversions.
    pub filters: &'static [(&'static str, u32)],
    /// Sub-resource links a document carries (`nodes` for a chassis: `/v1/chassis/{id}/nodes`).
    pub sublinks: &'static [&'static str],
    pub check: Check,
    /// Work a new document starts (an allocation looks for a node).
    pub on_create: Option<OnCreate>,
    /// Refuses a delete, or undoes what the document did (an allocation frees its node).
    pub on_delete: Option<OnDelete>,
    /// Hides what a document keeps from view (a sensitive inspection rule's conditions).
    pub shown: Option<fn(&mut Doc)>,
    /// What a write older than the resource is answered (Ironic: 404 for most, 405 for
    /// allocations, deploy templates and runbooks).
    pub too_old_writes: TooOld,
    /// The microversion from which a node's own list is served under it
    /// (`/v1/nodes/{node}/portgroups`), if it is.
    pub of_node: Option<u32>,
}

pub fn routes(resources: &'static [&'static Resource]) -> Router<Arc<App>> {
    let mut router = Router::new();
    for res in resources {
        let r: &'static Resource = res;
        let base = format!("/v1/{}", r.path);
        router = router
            .route(
                &base,
                get(move |a, v, q| list(r, a, v, q, false)).post(move |a, v, b| create(r, a, v, b)),
            )
            .route(
                &format!("{base}/"),
                get(move |a, v, q| list(r, a, v, q, false)),
            )
            .route(
                &format!("{base}/detail"),
                get(move |a, v, q| list(r, a, v, q, true)),
            )
            .route(
                &format!("{base}/{{ident}}"),
                get(move |a, v, p, q| show(r, a, v, p, q))
                    .patch(move |a, v, p, b| update(r, a, v, p, b))
                    .delete(move |a, v, p| remove(r, a, v, p)),
            );
        if let Some(minor) = r.of_node {
            let under = format!("/v1/nodes/{{node}}/{}", r.path);
            router = router
                .route(
                    &under,
                    since(minor, get(move |a, v, p, q| of_node(r, a, v, p, q, false))),
                )
                .route(
                    &format!("{under}/detail"),
                    since(minor, get(move |a, v, p, q| of_node(r, a, v, p, q, true))),
                );
        }
    }
    router
}

pub fn exists(r: &Resource, version: Version) -> Result<(), ApiError> {
    if version.at_least(r.since) {
        return Ok(());
    }
    Err(ApiError::not_found(format!(
        "The resource could not be found. /v1/{} needs API version 1.{} or newer.",
        r.path, r.since
    )))
}

/// [`exists`] for a write (see [`Resource::too_old_writes`]).
pub fn writable(r: &Resource, version: Version) -> Result<(), ApiError> {
    match version.at_least(r.since) {
        true => Ok(()),
        false => Err(too_old(r.since, r.too_old_writes)),
    }
}

/// A document as the API shows it: every field (null if unset), links, version gates,
/// and what the resource hides ([`Resource::shown`]) hidden.
pub fn document(app: &App, r: &Resource, uuid: Uuid, doc: Doc, version: Version) -> Doc {
    let mut doc = unmasked(app, r, uuid, doc, version);
    if let Some(hide) = r.shown {
        hide(&mut doc);
    }
    doc
}

/// A document with every field (a PATCH applies to this, so nothing hidden is lost).
fn unmasked(app: &App, r: &Resource, uuid: Uuid, mut doc: Doc, version: Version) -> Doc {
    for f in r.schema.fields {
        if f.access != super::schema::Access::Input {
            doc.entry(f.name).or_insert(Value::Null);
        }
    }
    doc.insert("uuid".into(), json!(uuid));
    let id = uuid.to_string();
    doc.insert("links".into(), view::links(&app.base(), r.path, &id));
    for sub in r.sublinks {
        doc.insert(
            (*sub).into(),
            view::links(&app.base(), r.path, &format!("{id}/{sub}")),
        );
    }
    r.schema.show(&mut doc, version);
    doc
}

async fn find(app: &App, r: &Resource, ident: &str) -> Result<(Uuid, Doc), ApiError> {
    // A resource without names is only ever named by its uuid: anything else is a
    // malformed request (400, as Ironic validates it), not a missing resource.
    if !r.unique.contains(&"name") && Uuid::parse_str(ident).is_err() {
        return Err(ApiError::bad_request(format!(
            "Expected a UUID but received {ident}."
        )));
    }
    Ok(app
        .conductor
        .store()
        .find_document(r.kind, "name", ident)
        .await?)
}

async fn create(
    r: &'static Resource,
    app: State,
    Extension(version): Extension<Version>,
    body: Bytes,
) -> Result<Response, ApiError> {
    writable(r, version)?;
    let input: Map<String, Value> = parse(&body)?;
    let mut doc = r.schema.create(input, version)?;
    let uuid = match doc.remove("uuid") {
        Some(Value::String(s)) => Uuid::parse_str(&s)
            .map_err(|_| ApiError::bad_request(format!("Expected UUID for uuid: {s}")))?,
        _ => Uuid::new_v4(),
    };
    (r.check)(&app, &mut doc, None, version).await?;
    let now = app.conductor.store().clock().now().to_datetime();
    doc.insert("created_at".into(), json!(now));
    doc.insert("updated_at".into(), Value::Null);
    app.conductor
        .create_document(r.kind, uuid, &doc, r.unique)
        .await?;
    // A create that asks for work done at once (an input such as a backfilled
    // allocation's node) is answered as the work left it; other work runs on after the
    // answer (a new allocation answers `allocating`).
    let done_at_once = r
        .schema
        .fields
        .iter()
        .any(|f| f.access == super::schema::Access::Input && doc.contains_key(f.name));
    if let Some(start) = r.on_create {
        start(app.0.clone(), uuid).await;
        if done_at_once {
            doc = app.conductor.store().document(r.kind, uuid).await?;
        }
    }
    let location = format!("{}/v1/{}/{uuid}", app.base(), r.path);
    let shown = document(&app, r, uuid, doc, version);
    Ok((
        StatusCode::CREATED,
        [(header::LOCATION, location)],
        Json(Value::Object(shown)),
    )
        .into_response())
}

type Pairs = Result<Query<Vec<(String, String)>>, QueryRejection>;

async fn list(
    r: &'static Resource,
    app: State,
    Extension(version): Extension<Version>,
    query: Pairs,
    detail: bool,
) -> Result<Response, ApiError> {
    exists(r, version)?;
    let Query(pairs) = query.map_err(|e| super::http::error::query_refused(&e))?;
    let params = Params::parse(pairs, &r.schema, r.filters, version, detail)?;
    let node = match params.filter("node") {
        Some(ident) => Some(json!(app.conductor.store().find_node(ident).await?.uuid())),
        None => None,
    };
    let mut of_nodes = None::<std::collections::HashSet<Uuid>>;
    for (k, v) in &params.filters {
        if super::node_doc::NODE_FILTERS.contains(&k.as_str()) {
            let these = super::node_doc::nodes_where(&app, k, v).await?;
            of_nodes = Some(match of_nodes {
                Some(before) => before.intersection(&these).copied().collect(),
                None => these,
            });
        }
    }
    let permit = super::node_list::turn(&app).await;
    let app = app.0.clone();
    Ok(streamed::respond(
        "application/json",
        Some(permit),
        move |out| {
            let in_nodes = |d: &Doc| {
                of_nodes.as_ref().is_none_or(|set| {
                    d.get("node_uuid")
                        .and_then(Value::as_str)
                        .and_then(|u| Uuid::parse_str(u).ok())
                        .is_some_and(|u| set.contains(&u))
                })
            };
            let store = app.conductor.store();
            let docs = store.documents_after(r.kind, params.marker()).blocking();
            let shown = docs
                .filter(|item| {
                    item.as_ref().is_err()
                        || item.as_ref().is_ok_and(|(_, d)| {
                            node.as_ref().is_none_or(|n| d.get("node_uuid") == Some(n))
                                && in_nodes(d)
                                && filters_match(&params, d)
                        })
                })
                .map(|item| {
                    let (u, d) = item?;
                    Ok((u, document(&app, r, u, d, version)))
                });
            let next = format!("{}/v1/{}", app.base(), r.path);
            params.write(out, r.key, shown, r.short, &next)
        },
    ))
}

/// A node's own list (`/v1/nodes/{node}/portgroups`): the list filtered by the node.
async fn of_node(
    r: &'static Resource,
    app: State,
    version: Extension<Version>,
    Path(node): Path<String>,
    query: Pairs,
    detail: bool,
) -> Result<Response, ApiError> {
    let query = query.map(|Query(mut pairs)| {
        pairs.retain(|(k, _)| k != "node");
        pairs.push(("node".into(), node));
        Query(pairs)
    });
    list(r, app, version, query, detail).await
}

/// Whether a document passes the list's own filters (a node's are checked apart).
fn filters_match(params: &Params, d: &Doc) -> bool {
    params
        .filters
        .iter()
        .filter(|(k, _)| k != "node" && !super::node_doc::NODE_FILTERS.contains(&k.as_str()))
        .all(|(k, v)| match d.get(k) {
            Some(Value::String(s)) => s.eq_ignore_ascii_case(v),
            Some(Value::Bool(b)) => super::schema::parse_bool(&json!(v)) == Some(*b),
            Some(Value::Number(n)) => v.parse::<i64>().ok() == n.as_i64(),
            Some(_) => false,
            None => false,
        })
}

async fn show(
    r: &'static Resource,
    app: State,
    Extension(version): Extension<Version>,
    Path(ident): Path<String>,
    Query(q): Query<ShowQuery>,
) -> Result<Json<Value>, ApiError> {
    exists(r, version)?;
    let (uuid, doc) = find(&app, r, &ident).await?;
    let doc = document(&app, r, uuid, doc, version);
    Ok(Json(Value::Object(match q.fields {
        Some(f) => keep(doc, r.schema.fields(&f, version)?),
        None => doc,
    })))
}

async fn update(
    r: &'static Resource,
    app: State,
    Extension(version): Extension<Version>,
    Path(ident): Path<String>,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    writable(r, version)?;
    if !version.at_least(r.patch_since) {
        return Err(ApiError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            format!(
                "Updating a {} needs API version 1.{} or newer.",
                r.kind, r.patch_since
            ),
        ));
    }
    let ops: Value = parse(&body)?;
    let (uuid, _) = find(&app, r, &ident).await?;
    let now = app.conductor.store().clock().now().to_datetime();
    let doc = app
        .conductor
        .update_document(r.kind, uuid, r.unique, |old| {
            let (app, ops) = (&app, &ops);
            async move {
                let mut full = unmasked(app, r, uuid, old.clone(), version);
                r.schema.patch(&mut full, ops, version)?;
                let mut next: Doc = full
                    .into_iter()
                    .filter(|(k, _)| r.schema.field(k).is_some() && k != "uuid")
                    .collect();
                for (k, v) in &old {
                    if !r.schema.field(k).is_some_and(|f| version.at_least(f.since)) {
                        next.insert(k.clone(), v.clone());
                    }
                }
                (r.check)(app, &mut next, Some(&old), version).await?;
                next.insert("updated_at".into(), json!(now));
                next.insert(
                    "created_at".into(),
                    old.get("created_at").cloned().unwrap_or(Value::Null),
                );
                Ok::<_, ApiError>(next)
            }
        })
        .await?;
    Ok(Json(Value::Object(document(&app, r, uuid, doc, version))))
}

async fn remove(
    r: &'static Resource,
    app: State,
    Extension(version): Extension<Version>,
    Path(ident): Path<String>,
) -> Result<StatusCode, ApiError> {
    writable(r, version)?;
    let (uuid, doc) = find(&app, r, &ident).await?;
    delete(r, &app, uuid, &doc).await
}

/// Deletes a document: its resource's hook first (which may refuse), then the document.
pub async fn delete(
    r: &'static Resource,
    app: &App,
    uuid: Uuid,
    doc: &Doc,
) -> Result<StatusCode, ApiError> {
    if let Some(hook) = r.on_delete {
        hook(app, uuid, doc).await?;
    }
    app.conductor
        .delete_document(r.kind, uuid, r.unique)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

pub(super) fn no_check<'a>(
    _: &'a App,
    _: &'a mut Doc,
    _: Option<&'a Doc>,
    _: Version,
) -> BoxFuture<'a, Result<(), ApiError>> {
    Box::pin(std::future::ready(Ok(())))
}

pub(super) fn missing(field: &str) -> ApiError {
    ApiError::bad_request(format!("Mandatory field missing: '{field}'"))
}

pub(super) fn text<'a>(doc: &'a Doc, field: &str) -> Option<&'a str> {
    doc.get(field).and_then(Value::as_str)
}

/// `node_uuid` must name an existing node (400 otherwise, as Ironic answers).
pub async fn check_node(app: &App, doc: &mut Doc) -> Result<Uuid, ApiError> {
    let ident = text(doc, "node_uuid").ok_or_else(|| missing("node_uuid"))?;
    let node = app
        .conductor
        .store()
        .find_node(ident)
        .await
        .map_err(|_| ApiError::bad_request(format!("Node {ident} could not be found.")))?;
    doc.insert("node_uuid".into(), json!(node.uuid()));
    Ok(node.uuid())
}
