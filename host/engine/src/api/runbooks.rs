//! `/v1/runbooks` (1.92): named lists of steps that manual cleaning runs in place of
//! `clean_steps`, on nodes whose traits match the runbook.
//!
//! Until 1.112 a runbook's name is a trait and a node may run it when it has that trait;
//! from 1.112 the name is any logical name, a runbook carries its own `traits` (edited
//! through `/v1/runbooks/{id}/traits`) and a node may run it when they share one.

use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{Extension, Path};
use axum::http::StatusCode;
use axum::routing::{get, put};
use serde_json::{Value, json};

use super::http::error::ApiError;
use super::http::gate::TooOld;
use super::http::version::Version;
use super::resources::{Resource, exists};
use super::schema::{Field, Schema, Ty};
use super::steps::check_steps;
use super::traits::{self, check_trait};
use super::{App, State};
use crate::node::{self, NodeBody};
use crate::store::documents::Doc;

pub const RUNBOOK: Resource = Resource {
    kind: "Runbook",
    path: "runbooks",
    key: "runbooks",
    since: 92,
    patch_since: 92,
    schema: Schema {
        kind: "Runbook",
        fields: &[
            Field::create("uuid", Ty::Uuid, 92),
            Field::rw("name", Ty::Text, 92),
            Field::rw("steps", Ty::Any, 92),
            Field::rw("disable_ramdisk", Ty::Bool, 92),
            Field::rw("extra", Ty::Map, 92),
            Field::rw("public", Ty::Bool, 92),
            Field::rw("owner", Ty::Text, 92),
            Field::rw("description", Ty::Text, 112),
            Field::ro("traits", Ty::List, 112),
            Field::ro("created_at", Ty::Text, 92),
            Field::ro("updated_at", Ty::Text, 92),
        ],
    },
    unique: &["name"],
    short: &["uuid", "name", "links"],
    filters: &[],
    sublinks: &[],
    check: |a, d, o, v| Box::pin(check(a, d, o, v)),
    on_create: None,
    on_delete: None,
    shown: None,
    of_node: None,
    too_old_writes: TooOld::NotAllowed,
};

/// A runbook's traits: a node may run it when they share one (1.112).
pub fn routes() -> Router<Arc<App>> {
    Router::new()
        .route("/v1/runbooks/{ident}/traits", get(traits).put(set_traits))
        .route(
            "/v1/runbooks/{ident}/traits/{name}",
            put(add_trait).delete(remove_trait),
        )
}

/// What a runbook name may be from 1.112 on: a logical name (letters, digits, `-._~`).
fn check_logical_name(name: &str) -> Result<(), ApiError> {
    let ok = !name.is_empty()
        && name.len() <= 255
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._~".contains(&b));
    if ok {
        return Ok(());
    }
    Err(ApiError::bad_request(format!(
        "'{name}' is not a valid runbook name: 1 to 255 letters, digits, '-', '.', '_' or '~'"
    )))
}

async fn check(
    _: &App,
    doc: &mut Doc,
    old: Option<&Doc>,
    version: Version,
) -> Result<(), ApiError> {
    let name = doc
        .get("name")
        .and_then(Value::as_str)
        .ok_or_else(|| ApiError::bad_request("Mandatory field missing: 'name'"))?;
    if version.at_least(112) {
        check_logical_name(name)?;
    } else {
        check_trait(name)?;
    }
    check_steps(doc, "order")?;
    if old.is_none() {
        doc.entry("extra").or_insert(json!({}));
        doc.entry("public").or_insert(json!(false));
        doc.entry("disable_ramdisk").or_insert(json!(false));
        doc.entry("traits").or_insert(json!([]));
    }
    if doc.get("public") == Some(&Value::Bool(true))
        && doc.get("owner").is_some_and(|o| !o.is_null())
    {
        return Err(ApiError::bad_request(
            "A public runbook cannot have an owner.",
        ));
    }
    Ok(())
}

fn runbook_traits(doc: &Doc) -> Vec<String> {
    node::strings(doc, "traits")
}

/// The steps of the runbook `ident` for manual cleaning of `node`, which must have one
/// of its traits (its name, for a runbook without traits).
pub async fn steps_for(app: &App, ident: &str, node: &NodeBody) -> Result<Value, ApiError> {
    let (uuid, doc) = app
        .conductor
        .store()
        .find_document(RUNBOOK.kind, "name", ident)
        .await?;
    let mut wanted = runbook_traits(&doc);
    if wanted.is_empty() {
        wanted.extend(doc.get("name").and_then(Value::as_str).map(str::to_owned));
    }
    let has = node::strings(&node.attrs, "traits");
    if !wanted.iter().any(|t| has.contains(t)) {
        return Err(ApiError::bad_request(format!(
            "Node {} does not have any of the traits of runbook {uuid} ({}).",
            node.uuid,
            wanted.join(", ")
        )));
    }
    let mut steps: Vec<Value> = doc
        .get("steps")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    steps.sort_by_key(|s| s.get("order").and_then(Value::as_u64).unwrap_or(0));
    Ok(Value::Array(
        steps
            .into_iter()
            .map(|mut s| {
                if let Some(o) = s.as_object_mut() {
                    o.remove("order");
                }
                s
            })
            .collect(),
    ))
}

fn since_traits(version: Version) -> Result<(), ApiError> {
    exists(&RUNBOOK, version)?;
    if version.at_least(112) {
        return Ok(());
    }
    Err(ApiError::not_found(
        "The resource could not be found; runbook traits need API version 1.112 or newer.",
    ))
}

async fn edit_traits(
    app: &App,
    ident: &str,
    change: impl Fn(&mut Vec<String>) -> Result<(), ApiError>,
) -> Result<(), ApiError> {
    let (uuid, _) = app
        .conductor
        .store()
        .find_document(RUNBOOK.kind, "name", ident)
        .await?;
    let now = app.conductor.store().clock().now().to_datetime();
    app.conductor
        .update_document(RUNBOOK.kind, uuid, RUNBOOK.unique, |mut doc| {
            let mut list = runbook_traits(&doc);
            let changed = change(&mut list).and_then(|()| {
                if list.len() > traits::MAX_TRAITS {
                    return Err(traits::too_many_traits());
                }
                doc.insert("traits".into(), json!(list));
                doc.insert("updated_at".into(), json!(now));
                Ok(doc)
            });
            std::future::ready(changed)
        })
        .await?;
    Ok(())
}

async fn traits(
    app: State,
    Extension(v): Extension<Version>,
    Path(ident): Path<String>,
) -> Result<Json<Value>, ApiError> {
    since_traits(v)?;
    let (_, doc) = app
        .conductor
        .store()
        .find_document(RUNBOOK.kind, "name", &ident)
        .await?;
    Ok(Json(json!({"traits": runbook_traits(&doc)})))
}

async fn set_traits(
    app: State,
    Extension(v): Extension<Version>,
    Path(ident): Path<String>,
    body: Bytes,
) -> Result<StatusCode, ApiError> {
    since_traits(v)?;
    let given = traits::trait_list(&body)?;
    edit_traits(&app, &ident, |list| {
        *list = given.clone();
        Ok(())
    })
    .await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn add_trait(
    app: State,
    Extension(v): Extension<Version>,
    Path((ident, name)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    since_traits(v)?;
    check_trait(&name)?;
    edit_traits(&app, &ident, |list| {
        if !list.contains(&name) {
            list.push(name.clone());
        }
        Ok(())
    })
    .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Removing a trait the runbook does not have changes nothing (as in Ironic).
async fn remove_trait(
    app: State,
    Extension(v): Extension<Version>,
    Path((ident, name)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    since_traits(v)?;
    edit_traits(&app, &ident, |list| {
        list.retain(|t| *t != name);
        Ok(())
    })
    .await?;
    Ok(StatusCode::NO_CONTENT)
}
