//! `/v1/nodes/{node}/traits` (1.37), and the trait names nodes, deploy templates and
//! runbooks carry, checked as Ironic (and Placement) check them.

use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::Path;
use axum::http::StatusCode;
use axum::routing::{delete, get, put};
use serde_json::{Value, json};

use super::http::error::ApiError;
use super::http::gate::{TooOld, gated, since};
use super::node_access::{edit, find};
use super::node_members::{List, remove_member};
use super::{App, State};

pub fn routes() -> Router<Arc<App>> {
    Router::new()
        .route(
            "/v1/nodes/{ident}/traits",
            gated(37, TooOld::NotAcceptable, get(traits))
                .merge(gated(37, TooOld::NotAllowed, put(set_traits)))
                .merge(since(37, delete(clear_traits))),
        )
        .route(
            "/v1/nodes/{ident}/traits/{name}",
            gated(37, TooOld::NotAllowed, put(add_trait)).merge(since(37, delete(remove_trait))),
        )
}

async fn traits(app: State, Path(ident): Path<String>) -> Result<Json<Value>, ApiError> {
    let node = find(&app, &ident).await?;
    Ok(Json(json!({"traits": List::Traits.get(&node.body)})))
}

async fn set_traits(
    app: State,
    Path(ident): Path<String>,
    body: Bytes,
) -> Result<StatusCode, ApiError> {
    let unique = trait_list(&body)?;
    edit(&app, &ident, |b| {
        List::Traits.set(b, unique.clone());
        Ok(())
    })
    .await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn clear_traits(app: State, Path(ident): Path<String>) -> Result<StatusCode, ApiError> {
    edit(&app, &ident, |b| {
        List::Traits.set(b, Vec::new());
        Ok(())
    })
    .await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn add_trait(
    app: State,
    Path((ident, name)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    check_trait(&name)?;
    edit(&app, &ident, |b| {
        let mut list = List::Traits.get(b);
        if !list.contains(&name) {
            if list.len() >= MAX_TRAITS {
                return Err(too_many_traits());
            }
            list.push(name.clone());
        }
        List::Traits.set(b, list);
        Ok(())
    })
    .await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn remove_trait(
    app: State,
    Path((ident, name)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    remove_member(&app, &ident, List::Traits, &name, |b, t| {
        ApiError::not_found(format!("Node {} does not have trait {t}", b.uuid))
    })
    .await
}

/// A trait name as Ironic (and Placement) take them: upper case letters, digits and `_`,
/// at most 255 characters; custom ones start with `CUSTOM_`.
pub fn check_trait(name: &str) -> Result<(), ApiError> {
    let ok = !name.is_empty()
        && name.len() <= 255
        && name
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_');
    if ok {
        return Ok(());
    }
    Err(ApiError::bad_request(format!(
        "'{name}' does not match '^CUSTOM_[A-Z0-9_]+$' nor the form of a standard trait (upper case letters, digits and _, at most 255 characters)"
    )))
}

/// Ironic's limit on the traits of a node or a runbook.
pub const MAX_TRAITS: usize = 50;

pub fn too_many_traits() -> ApiError {
    ApiError::bad_request(format!("At most {MAX_TRAITS} traits are allowed."))
}

/// The body of a `PUT …/traits`: `{"traits": [...]}`, each a valid trait, without repeats.
pub fn trait_list(body: &[u8]) -> Result<Vec<String>, ApiError> {
    let doc: Value = super::http::error::parse(body)?;
    let Some(given) = doc.get("traits").and_then(Value::as_array) else {
        return Err(ApiError::bad_request("Expected {\"traits\": [...]}"));
    };
    let mut unique: Vec<String> = Vec::new();
    for t in given {
        let t = t
            .as_str()
            .ok_or_else(|| ApiError::bad_request("Every trait must be a string."))?;
        check_trait(t)?;
        if !unique.iter().any(|u| u == t) {
            unique.push(t.to_owned());
        }
    }
    if unique.len() > MAX_TRAITS {
        return Err(too_many_traits());
    }
    Ok(unique)
}
