//! A node's smaller sub-resources: maintenance, traits, VIFs, BIOS and RAID settings, and
//! `/v1/conductors` (this engine, as Ironic's one conductor).

use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{Extension, Path};
use axum::http::StatusCode;
use axum::routing::{get, put};
use serde_json::{Value, json};

use super::error::{ApiError, parse};
use super::nodes::find;
use super::stored::{self, check_trait};
use super::version::Version;
use super::{App, State, view};
use crate::node::{self, NodeBody};

pub fn routes() -> Router<Arc<App>> {
    Router::new()
        .route(
            "/v1/nodes/{ident}/maintenance",
            put(maintenance_on).delete(maintenance_off),
        )
        .route(
            "/v1/nodes/{ident}/traits",
            get(traits).put(set_traits).delete(clear_traits),
        )
        .route(
            "/v1/nodes/{ident}/traits/{name}",
            put(add_trait).delete(remove_trait),
        )
        .route("/v1/nodes/{ident}/vifs", get(vifs).post(attach_vif))
        .route(
            "/v1/nodes/{ident}/vifs/{vif}",
            axum::routing::delete(detach_vif),
        )
        .route("/v1/nodes/{ident}/bios", get(bios))
        .route("/v1/nodes/{ident}/states/raid", put(raid))
        .route("/v1/conductors", get(conductors))
        .route("/v1/conductors/{hostname}", get(conductor))
}

pub(super) fn since(version: Version, minor: u32) -> Result<(), ApiError> {
    if version.at_least(minor) {
        return Ok(());
    }
    Err(ApiError::not_found(format!(
        "The resource could not be found; it needs API version 1.{minor} or newer."
    )))
}

/// Changes a node's body under its claim.
pub(super) async fn edit(
    app: &App,
    ident: &str,
    change: impl Fn(&mut NodeBody) -> Result<(), ApiError>,
) -> Result<(), ApiError> {
    let uuid = find(app, ident)?.uuid();
    app.conductor.edit(uuid, |_, b| change(b)).await?;
    Ok(())
}

async fn maintenance_on(
    app: State,
    Path(ident): Path<String>,
    body: Bytes,
) -> Result<StatusCode, ApiError> {
    let reason = if body.is_empty() {
        None
    } else {
        let v: Value = parse(&body)?;
        v.get("reason").and_then(Value::as_str).map(str::to_owned)
    };
    edit(&app, &ident, |b| {
        b.maintenance = true;
        b.maintenance_reason = reason.clone();
        Ok(())
    })
    .await?;
    Ok(StatusCode::ACCEPTED)
}

async fn maintenance_off(app: State, Path(ident): Path<String>) -> Result<StatusCode, ApiError> {
    edit(&app, &ident, |b| {
        b.maintenance = false;
        b.maintenance_reason = None;
        Ok(())
    })
    .await?;
    Ok(StatusCode::ACCEPTED)
}

/// A list of strings kept on a node: its traits (an Ironic field, in `attrs`) or its VIFs.
/// VIFs are kept in `driver_internal_info.vifs`: deployd plugs no networks, so they are
/// records for the operator's network tooling, as with Ironic's `noop` interface.
#[derive(Clone, Copy)]
enum List {
    Traits,
    Vifs,
}

impl List {
    fn get(self, b: &NodeBody) -> Vec<String> {
        match self {
            List::Traits => node::strings(&b.attrs, "traits"),
            List::Vifs => node::strings(&b.driver_internal_info, "vifs"),
        }
    }

    fn set(self, b: &mut NodeBody, list: Vec<String>) {
        match self {
            List::Traits => node::set_strings(&mut b.attrs, "traits", list),
            List::Vifs => node::set_strings(&mut b.driver_internal_info, "vifs", list),
        }
    }
}

/// Takes `item` out of a node's list; `missing` says why not, when it is not there.
async fn remove_member(
    app: &App,
    ident: &str,
    list: List,
    item: &str,
    missing: fn(&NodeBody, &str) -> ApiError,
) -> Result<StatusCode, ApiError> {
    edit(app, ident, |b| {
        let mut members = list.get(b);
        let before = members.len();
        members.retain(|m| m != item);
        if members.len() == before {
            return Err(missing(b, item));
        }
        list.set(b, members);
        Ok(())
    })
    .await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn traits(
    app: State,
    Extension(v): Extension<Version>,
    Path(ident): Path<String>,
) -> Result<Json<Value>, ApiError> {
    since(v, 37)?;
    let node = find(&app, &ident)?;
    Ok(Json(json!({"traits": List::Traits.get(&node.body)})))
}

async fn set_traits(
    app: State,
    Extension(v): Extension<Version>,
    Path(ident): Path<String>,
    body: Bytes,
) -> Result<StatusCode, ApiError> {
    since(v, 37)?;
    let unique = stored::trait_list(&body)?;
    edit(&app, &ident, |b| {
        List::Traits.set(b, unique.clone());
        Ok(())
    })
    .await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn clear_traits(
    app: State,
    Extension(v): Extension<Version>,
    Path(ident): Path<String>,
) -> Result<StatusCode, ApiError> {
    since(v, 37)?;
    edit(&app, &ident, |b| {
        List::Traits.set(b, Vec::new());
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
    since(v, 37)?;
    check_trait(&name)?;
    edit(&app, &ident, |b| {
        let mut list = List::Traits.get(b);
        if !list.contains(&name) {
            if list.len() >= stored::MAX_TRAITS {
                return Err(stored::too_many_traits());
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
    Extension(v): Extension<Version>,
    Path((ident, name)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    since(v, 37)?;
    remove_member(&app, &ident, List::Traits, &name, |b, t| {
        ApiError::not_found(format!("Node {} does not have trait {t}", b.uuid))
    })
    .await
}

async fn vifs(
    app: State,
    Extension(v): Extension<Version>,
    Path(ident): Path<String>,
) -> Result<Json<Value>, ApiError> {
    since(v, 28)?;
    let node = find(&app, &ident)?;
    let list: Vec<Value> = List::Vifs
        .get(&node.body)
        .into_iter()
        .map(|id| json!({"id": id}))
        .collect();
    Ok(Json(json!({"vifs": list})))
}

async fn attach_vif(
    app: State,
    Extension(v): Extension<Version>,
    Path(ident): Path<String>,
    body: Bytes,
) -> Result<StatusCode, ApiError> {
    since(v, 28)?;
    let doc: Value = parse(&body)?;
    let id = doc
        .get("id")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .ok_or_else(|| ApiError::bad_request("Mandatory field missing: 'id'"))?
        .to_owned();
    let node = find(&app, &ident)?;
    let ports = app.conductor.store.ports_of(node.uuid())?.len();
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
    Extension(v): Extension<Version>,
    Path((ident, vif)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    since(v, 28)?;
    remove_member(&app, &ident, List::Vifs, &vif, |b, vif| {
        ApiError::bad_request(format!(
            "Unable to detach VIF {vif} from node {}: it is not attached.",
            b.uuid
        ))
    })
    .await
}

async fn bios(
    app: State,
    Extension(v): Extension<Version>,
    Path(ident): Path<String>,
) -> Result<Json<Value>, ApiError> {
    since(v, 40)?;
    find(&app, &ident)?;
    Ok(Json(json!({"bios": []})))
}

/// `PUT /v1/nodes/{id}/states/raid`: stored as the target for a RAID-capable interface; a
/// node whose `raid_interface` is `no-raid` is refused, as Ironic refuses it.
async fn raid(
    app: State,
    Extension(v): Extension<Version>,
    Path(ident): Path<String>,
    body: Bytes,
) -> Result<StatusCode, ApiError> {
    since(v, 12)?;
    let target: Value = parse(&body)?;
    if !target.is_object() {
        return Err(ApiError::bad_request(
            "The RAID configuration must be an object.",
        ));
    }
    edit(&app, &ident, |b| {
        let iface = b
            .interfaces
            .get("raid")
            .cloned()
            .unwrap_or_else(|| "no-raid".into());
        if iface == "no-raid" {
            return Err(ApiError::bad_request(format!(
                "Node {} does not support RAID: its raid_interface is \"no-raid\".",
                b.uuid
            )));
        }
        match target.as_object().is_some_and(|t| t.is_empty()) {
            true => b.attrs.remove("target_raid_config"),
            false => b.attrs.insert("target_raid_config".into(), target.clone()),
        };
        Ok(())
    })
    .await?;
    Ok(StatusCode::NO_CONTENT)
}

fn conductor_doc(app: &App, detail: bool) -> Value {
    let mut doc = json!({
        "hostname": view::CONDUCTOR,
        "conductor_group": "",
        "alive": true,
        "links": view::links(&app.public_url, "conductors", view::CONDUCTOR),
    });
    if detail {
        doc["drivers"] = json!(crate::hardware::Hardware::new(&app.conductor.registry).types());
        doc["created_at"] = json!(app.started_at.to_datetime());
        doc["updated_at"] = json!(app.conductor.store.clock().now().to_datetime());
    }
    doc
}

async fn conductors(
    app: State,
    Extension(v): Extension<Version>,
    axum::extract::Query(q): axum::extract::Query<Vec<(String, String)>>,
) -> Result<Json<Value>, ApiError> {
    since(v, 49)?;
    let detail = q
        .iter()
        .any(|(k, val)| k == "detail" && super::schema::parse_bool(&json!(val)) == Some(true));
    Ok(Json(json!({"conductors": [conductor_doc(&app, detail)]})))
}

async fn conductor(
    app: State,
    Extension(v): Extension<Version>,
    Path(hostname): Path<String>,
) -> Result<Json<Value>, ApiError> {
    since(v, 49)?;
    if hostname != view::CONDUCTOR {
        return Err(ApiError::not_found(format!(
            "Conductor {hostname} could not be found."
        )));
    }
    Ok(Json(conductor_doc(&app, true)))
}
