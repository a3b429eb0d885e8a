//! `/v1/ports`: the MAC addresses agents are looked up by, with Ironic's port fields.

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
use super::http::streamed;
use super::http::version::Version;
use super::listing::{Params, ShowQuery, keep};
use super::schema::{Field, Schema, Ty};
use super::{App, State, view};
use crate::node::{JsonMap, Port};

const PORT: Schema = Schema {
    kind: "Port",
    fields: &[
        Field::create("uuid", Ty::Uuid, 1),
        Field::rw("address", Ty::Text, 1),
        Field::rw("node_uuid", Ty::Uuid, 1),
        Field::rw("extra", Ty::Map, 1),
        Field::ro("created_at", Ty::Text, 1),
        Field::ro("updated_at", Ty::Text, 1),
        Field::ro("internal_info", Ty::Map, 18),
        Field::rw("local_link_connection", Ty::Map, 19),
        Field::rw("pxe_enabled", Ty::Bool, 19),
        Field::rw("portgroup_uuid", Ty::Uuid, 24),
        Field::rw("physical_network", Ty::Text, 34),
        Field::rw("is_smartnic", Ty::Bool, 53),
        Field::rw("name", Ty::Text, 88),
        Field::create("node_name", Ty::Text, 94),
        Field::rw("description", Ty::Text, 97),
        Field::rw("vendor", Ty::Text, 100),
        Field::rw("category", Ty::Text, 101),
        Field::rw("available_for_dynamic_portgroup", Ty::Bool, 111),
    ],
};

/// Fields kept in `port.attrs`, with their value when unset.
fn attr_default(name: &str) -> Option<Value> {
    Some(match name {
        "portgroup_uuid" | "physical_network" | "name" | "description" | "vendor" | "category" => {
            Value::Null
        }
        "available_for_dynamic_portgroup" => json!(true),
        "local_link_connection" | "internal_info" => json!({}),
        "is_smartnic" => json!(false),
        _ => return None,
    })
}

const FILTERS: &[(&str, u32)] = &[
    ("node", 1),
    ("node_uuid", 1),
    ("address", 1),
    ("portgroup", 24),
    ("shard", 82),
    ("conductor_group", 99),
];
const SHORT: &[&str] = &["uuid", "address", "links"];

pub fn routes() -> Router<Arc<App>> {
    Router::new()
        .route("/v1/ports", get(list).post(create))
        .route("/v1/ports/", get(list).post(create))
        .route("/v1/ports/detail", get(list_detail))
        .route("/v1/ports/{uuid}", get(show).patch(update).delete(remove))
        .route("/v1/nodes/{ident}/ports", get(of_node))
        .route("/v1/nodes/{ident}/ports/detail", get(of_node_detail))
        .route("/v1/portgroups/{ident}/ports", get(of_portgroup))
        .route(
            "/v1/portgroups/{ident}/ports/detail",
            get(of_portgroup_detail),
        )
}

/// A port as the API shows it at `version`.
fn document(base: &str, port: &Port, version: Version) -> Map<String, Value> {
    let mut doc = editable(port);
    doc.insert("uuid".into(), json!(port.uuid));
    doc.insert("created_at".into(), json!(port.created_at.to_datetime()));
    doc.insert(
        "updated_at".into(),
        json!(port.updated_at.map(|t| t.to_datetime())),
    );
    doc.insert(
        "links".into(),
        view::links(base, "ports", &port.uuid.to_string()),
    );
    PORT.show(&mut doc, version);
    doc
}

/// What a PATCH applies to.
fn editable(port: &Port) -> Map<String, Value> {
    let mut doc = Map::new();
    doc.insert("address".into(), json!(port.address));
    doc.insert("node_uuid".into(), json!(port.node_uuid));
    doc.insert("extra".into(), Value::Object(port.extra.clone()));
    doc.insert("pxe_enabled".into(), json!(port.pxe_enabled));
    for f in PORT.fields {
        if let Some(default) = attr_default(f.name) {
            doc.insert(
                f.name.into(),
                port.attrs.get(f.name).cloned().unwrap_or(default),
            );
        }
    }
    doc
}

/// Writes a checked document into a port: the node must exist, and a port group must be
/// the same node's.
async fn write_back(app: &App, port: &mut Port, doc: Map<String, Value>) -> Result<(), ApiError> {
    for (key, value) in doc {
        match key.as_str() {
            "address" => {
                port.address = value
                    .as_str()
                    .ok_or_else(|| ApiError::bad_request("Mandatory field missing: 'address'"))?
                    .to_owned()
            }
            "node_uuid" => {
                let ident = value
                    .as_str()
                    .ok_or_else(|| ApiError::bad_request("Mandatory field missing: 'node_uuid'"))?;
                port.node_uuid = app
                    .conductor
                    .store()
                    .find_node(ident)
                    .await
                    .map_err(|_| {
                        ApiError::bad_request(format!("Node {ident} could not be found."))
                    })?
                    .uuid();
            }
            "extra" => port.extra = value.as_object().cloned().unwrap_or_default(),
            "pxe_enabled" => port.pxe_enabled = value.as_bool().unwrap_or(true),
            "uuid" => {}
            field if attr_default(field) == Some(value.clone()) => {
                port.attrs.remove(field);
            }
            _ => {
                port.attrs.insert(key, value);
            }
        }
    }
    if let Some(name) = port.attrs.get("name").and_then(Value::as_str) {
        crate::node::validate_name(name)
            .map_err(|e| ApiError::bad_request(e.to_string().replace("node name", "port name")))?;
    }
    if let Some(pg) = port.attrs.get("portgroup_uuid").and_then(Value::as_str) {
        let (group_uuid, group) = app
            .conductor
            .store()
            .find_document(super::portgroups::PORTGROUP.kind, "name", pg)
            .await
            .map_err(|_| ApiError::bad_request(format!("Port group {pg} could not be found.")))?;
        if group.get("node_uuid") != Some(&json!(port.node_uuid)) {
            return Err(ApiError::bad_request(format!(
                "Port group {pg} and port {} belong to different nodes.",
                port.uuid
            )));
        }
        port.attrs
            .insert("portgroup_uuid".into(), json!(group_uuid));
        check_physical_network(app, port, group_uuid).await?;
    }
    Ok(())
}

/// Every port of a port group is on one physical network (Ironic's rule: a bond across
/// two networks cannot work): a port joining a group, or changing its network within
/// one, must match the group's other ports (409 otherwise).
async fn check_physical_network(app: &App, port: &Port, group: Uuid) -> Result<(), ApiError> {
    let network = |p: &Port| {
        p.attrs
            .get("physical_network")
            .cloned()
            .unwrap_or(Value::Null)
    };
    let group_json = json!(group);
    let mut others: Vec<Value> = app
        .conductor
        .store()
        .ports_of(port.node_uuid)
        .await?
        .iter()
        .filter(|p| p.uuid != port.uuid && p.attrs.get("portgroup_uuid") == Some(&group_json))
        .map(network)
        .collect();
    others.sort_by_key(Value::to_string);
    others.dedup();
    let mine = network(port);
    if others.is_empty() || others == [mine.clone()] {
        return Ok(());
    }
    let names = |v: &Value| v.as_str().map_or("None".to_owned(), str::to_owned);
    let theirs: Vec<String> = others.iter().map(names).collect();
    Err(ApiError::conflict(format!(
        "Port with physical network {} cannot become a member of port group {group} which has ports in physical network {}.",
        names(&mine),
        theirs.join(", ")
    )))
}

async fn create(
    app: State,
    Extension(version): Extension<Version>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let input: Map<String, Value> = parse(&body)?;
    let mut doc = PORT.create(input, version)?;
    let uuid = match doc.remove("uuid") {
        Some(Value::String(s)) => Uuid::parse_str(&s)
            .map_err(|_| ApiError::bad_request(format!("Expected UUID for uuid: {s}")))?,
        _ => Uuid::new_v4(),
    };
    // From 1.94 the node may be named instead.
    if let Some(name) = doc.remove("node_name").filter(|n| !n.is_null()) {
        if doc.get("node_uuid").is_some_and(|u| !u.is_null()) {
            return Err(ApiError::bad_request(
                "Give either node_uuid or node_name, not both.",
            ));
        }
        doc.insert("node_uuid".into(), name);
    }
    for required in ["address", "node_uuid"] {
        if doc.get(required).is_none_or(Value::is_null) {
            return Err(ApiError::bad_request(format!(
                "Mandatory field missing: '{required}'"
            )));
        }
    }
    let now = app.conductor.store().clock().now();
    let mut port = Port {
        uuid,
        address: String::new(),
        node_uuid: Uuid::nil(),
        extra: JsonMap::new(),
        pxe_enabled: true,
        attrs: JsonMap::new(),
        created_at: now,
        updated_at: None,
    };
    write_back(&app, &mut port, doc).await?;
    let port = app.conductor.create_port(port).await?;
    let base = &app.base();
    let location = format!("{base}/v1/ports/{}", port.uuid);
    let shown = Value::Object(document(base, &port, version));
    Ok((
        StatusCode::CREATED,
        [(header::LOCATION, location)],
        Json(shown),
    )
        .into_response())
}

type Pairs = Result<Query<Vec<(String, String)>>, QueryRejection>;

/// Which ports a list is over.
enum Scope {
    All,
    Node(String),
    Portgroup(String),
}

async fn respond(
    app: &App,
    version: Version,
    query: Pairs,
    detail: bool,
    scope: Scope,
) -> Result<Response, ApiError> {
    let Query(pairs) = query.map_err(|e| super::http::error::query_refused(&e))?;
    let params = Params::parse(pairs, &PORT, FILTERS, version, detail)?;
    let store = &app.conductor.store();
    let node_ident = match &scope {
        Scope::Node(ident) => Some(ident.as_str()),
        _ => params.filter("node").or(params.filter("node_uuid")),
    };
    let node = match node_ident {
        Some(i) => Some(store.find_node(i).await?.uuid()),
        None => None,
    };
    let group_ident = match &scope {
        Scope::Portgroup(ident) => Some(ident.as_str()),
        _ => params.filter("portgroup"),
    };
    let group = match group_ident {
        Some(i) => {
            let kind = super::portgroups::PORTGROUP.kind;
            Some(json!(store.find_document(kind, "name", i).await?.0))
        }
        None => None,
    };
    let mut of_nodes = None::<std::collections::HashSet<Uuid>>;
    for field in super::node_doc::NODE_FILTERS {
        if let Some(value) = params.filter(field) {
            let these = super::node_doc::nodes_where(app, field, value).await?;
            of_nodes = Some(match of_nodes {
                Some(before) => before.intersection(&these).copied().collect(),
                None => these,
            });
        }
    }
    // By address: one read of the MAC index.
    let ports = match (params.filter("address"), node) {
        (Some(address), _) => {
            let mac = crate::node::normalize_mac(address).map_err(|_| {
                ApiError::bad_request(format!("Expected a MAC address but received {address}."))
            })?;
            store.port_with_mac(&mac).await?.into_iter().collect()
        }
        (None, Some(n)) => store.ports_of(n).await?,
        (None, None) => store.list_ports().await?,
    };
    let mut matching: Vec<_> = ports
        .into_iter()
        .filter(|p| node.is_none_or(|n| p.node_uuid == n))
        .filter(|p| of_nodes.as_ref().is_none_or(|n| n.contains(&p.node_uuid)))
        .filter(|p| {
            group
                .as_ref()
                .is_none_or(|g| p.attrs.get("portgroup_uuid") == Some(g))
        })
        .collect();
    matching.sort_by_key(|p| p.uuid);
    let base = app.base();
    // Each port is shown as it is written: the answer is never held whole.
    Ok(streamed::respond("application/json", None, move |out| {
        let shown = matching
            .iter()
            .map(|p| Ok((p.uuid, document(&base, p, version))));
        params.write(out, "ports", shown, SHORT, &format!("{base}/v1/ports"))
    }))
}

async fn list(
    app: State,
    Extension(v): Extension<Version>,
    q: Pairs,
) -> Result<Response, ApiError> {
    respond(&app, v, q, false, Scope::All).await
}

async fn list_detail(
    app: State,
    Extension(v): Extension<Version>,
    q: Pairs,
) -> Result<Response, ApiError> {
    respond(&app, v, q, true, Scope::All).await
}

async fn of_node(
    app: State,
    Extension(v): Extension<Version>,
    Path(ident): Path<String>,
    q: Pairs,
) -> Result<Response, ApiError> {
    respond(&app, v, q, false, Scope::Node(ident)).await
}

async fn of_node_detail(
    app: State,
    Extension(v): Extension<Version>,
    Path(ident): Path<String>,
    q: Pairs,
) -> Result<Response, ApiError> {
    respond(&app, v, q, true, Scope::Node(ident)).await
}

async fn of_portgroup(
    app: State,
    Extension(v): Extension<Version>,
    Path(ident): Path<String>,
    q: Pairs,
) -> Result<Response, ApiError> {
    respond(&app, v, q, false, Scope::Portgroup(ident)).await
}

async fn of_portgroup_detail(
    app: State,
    Extension(v): Extension<Version>,
    Path(ident): Path<String>,
    q: Pairs,
) -> Result<Response, ApiError> {
    respond(&app, v, q, true, Scope::Portgroup(ident)).await
}

/// A port by uuid, or by name (1.88). What can be neither (a MAC address, anything with
/// a `:`) is a malformed request, as Ironic answers it, not a missing port.
async fn port_uuid(app: &App, text: &str) -> Result<Uuid, ApiError> {
    if let Ok(uuid) = Uuid::parse_str(text) {
        return Ok(uuid);
    }
    if crate::node::validate_name(text).is_err() {
        return Err(ApiError::bad_request(format!(
            "Expected a logical name or UUID but received {text}."
        )));
    }
    app.conductor
        .store()
        .port_named(text)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("Port {text} could not be found.")))
}

async fn show(
    app: State,
    Extension(version): Extension<Version>,
    Path(id): Path<String>,
    Query(q): Query<ShowQuery>,
) -> Result<Json<Value>, ApiError> {
    let port = app
        .conductor
        .store()
        .port(port_uuid(&app, &id).await?)
        .await?;
    let doc = document(&app.base(), &port, version);
    Ok(Json(Value::Object(match q.fields {
        Some(f) => keep(doc, PORT.fields(&f, version)?),
        None => doc,
    })))
}

async fn update(
    app: State,
    Extension(version): Extension<Version>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    let ops: Value = parse(&body)?;
    let uuid = port_uuid(&app, &id).await?;
    let port = app
        .conductor
        .update_port(uuid, |mut port| {
            let (app, ops) = (&app, &ops);
            async move {
                let mut doc = editable(&port);
                PORT.patch(&mut doc, ops, version)?;
                write_back(app, &mut port, doc).await?;
                Ok::<_, ApiError>(port)
            }
        })
        .await?;
    Ok(Json(Value::Object(document(&app.base(), &port, version))))
}

async fn remove(app: State, Path(id): Path<String>) -> Result<StatusCode, ApiError> {
    app.conductor
        .delete_port(port_uuid(&app, &id).await?)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}
