//! `/v1/allocations`: reserving an available node by resource class and traits, as
//! Ironic's allocation API does for Nova-less deployments.
//!
//! A new allocation answers `allocating` at once; a task then looks for a node that is
//! `available`, not in maintenance, has a known power state, the resource class, every
//! requested trait, no instance and no allocation (and is among `candidate_nodes`, if
//! given), in random order, but a node named as the allocation first (Ironic 1.79). The node is taken under its claim with the conditions checked
//! again, so two allocations never take one node. The allocation ends `active` with the
//! node's uuid (the node's `instance_uuid` and `allocation_uuid` name it), or `error` with
//! a `last_error` that says what was asked.

use std::sync::Arc;

use serde_json::{Value, json};
use uuid::Uuid;

use super::App;
use super::error::ApiError;
use super::resources::Resource;
use super::schema::{Field, Schema, Ty};
use super::stored::check_trait;
use super::version::Version;
use crate::node::{NodeBody, strings};
use crate::state_machine::ProvisionState;
use crate::store::documents::Doc;

pub const ALLOCATION: Resource = Resource {
    kind: "Allocation",
    path: "allocations",
    key: "allocations",
    since: 52,
    patch_since: 57,
    schema: Schema {
        kind: "Allocation",
        fields: &[
            Field::create("uuid", Ty::Uuid, 52),
            Field::rw("name", Ty::Text, 52),
            Field::create("node_uuid", Ty::Text, 52),
            Field::ro("state", Ty::Text, 52),
            Field::ro("last_error", Ty::Text, 52),
            Field::create("resource_class", Ty::Text, 52),
            Field::create("candidate_nodes", Ty::List, 52),
            Field::create("traits", Ty::List, 52),
            Field::rw("extra", Ty::Map, 52),
            Field::create("owner", Ty::Text, 60),
            Field::ro("created_at", Ty::Text, 52),
            Field::ro("updated_at", Ty::Text, 52),
        ],
    },
    unique: &["name"],
    short: &[
        "uuid",
        "name",
        "node_uuid",
        "state",
        "last_error",
        "resource_class",
        "candidate_nodes",
        "traits",
        "extra",
        "owner",
        "created_at",
        "updated_at",
        "links",
    ],
    filters: &[
        ("node", 52),
        ("resource_class", 52),
        ("state", 52),
        ("owner", 60),
    ],
    sublinks: &[],
    check,
    on_create: Some(start),
    on_delete: Some(release),
    shown: None,
};

fn check(app: &App, doc: &mut Doc, old: Option<&Doc>, _: Version) -> Result<(), ApiError> {
    if old.is_some() {
        return Ok(());
    }
    if let Some(name) = doc.get("name").and_then(Value::as_str) {
        crate::node::validate_name(name).map_err(|_| {
            ApiError::bad_request(format!(
                "Cannot create allocation with an invalid name '{name}'"
            ))
        })?;
    }
    if let Some(rc) = doc.get("resource_class").and_then(Value::as_str) {
        super::node_doc::check_resource_class(rc)?;
    }
    if let Some(ident) = doc
        .get("node_uuid")
        .and_then(Value::as_str)
        .map(str::to_owned)
    {
        let node = app.conductor.store.find_node(&ident)?;
        doc.insert("candidate_nodes".into(), json!([node.uuid()]));
        doc.insert("node_uuid".into(), Value::Null);
    } else if doc.get("resource_class").is_none_or(Value::is_null) {
        return Err(ApiError::bad_request(
            "Mandatory field missing: 'resource_class'",
        ));
    }
    let (mut candidates, mut missing) = (Vec::new(), Vec::new());
    for ident in strings(doc, "candidate_nodes") {
        match app.conductor.store.find_node(&ident) {
            Ok(node) => candidates.push(json!(node.uuid())),
            Err(_) => missing.push(ident),
        }
    }
    if !missing.is_empty() {
        return Err(ApiError::bad_request(format!(
            "Nodes cannot be found: {}",
            missing.join(", ")
        )));
    }
    doc.insert("candidate_nodes".into(), Value::Array(candidates));
    for t in strings(doc, "traits") {
        check_trait(&t)?;
    }
    doc.insert("traits".into(), json!(strings(doc, "traits")));
    doc.insert("state".into(), json!("allocating"));
    doc.insert("last_error".into(), Value::Null);
    doc.insert("node_uuid".into(), Value::Null);
    doc.entry("extra").or_insert(json!({}));
    Ok(())
}

/// Ironic's (Placement's) limit on a resource class name.
/// Whether a node may be given to the allocation `want`.
fn fits(state: ProvisionState, b: &NodeBody, want: &Doc) -> bool {
    let attr = |k: &str| b.attrs.get(k).cloned().unwrap_or(Value::Null);
    let traits = strings(&b.attrs, "traits");
    let candidates = strings(want, "candidate_nodes");
    state == ProvisionState::Available
        && !b.maintenance
        && b.power_state.is_some()
        && attr("instance_uuid").is_null()
        && attr("allocation_uuid").is_null()
        && want
            .get("resource_class")
            .is_none_or(|rc| rc.is_null() || *rc == attr("resource_class"))
        && strings(want, "traits").iter().all(|t| traits.contains(t))
        && (candidates.is_empty() || candidates.contains(&b.uuid.to_string()))
        && want
            .get("owner")
            .is_none_or(|o| o.is_null() || *o == attr("owner"))
}

/// Starts looking for a node for a new allocation.
pub fn start(app: Arc<App>, uuid: Uuid) {
    tokio::task::spawn_blocking(move || {
        let outcome = allocate(&app, uuid);
        let store = &app.conductor.store;
        let now = store.clock().now().to_datetime();
        let _ = store
            .docs
            .update(ALLOCATION.kind, uuid, ALLOCATION.unique, |doc| {
                match &outcome {
                    Ok(node) => {
                        doc.insert("state".into(), json!("active"));
                        doc.insert("node_uuid".into(), json!(node));
                    }
                    Err(reason) => {
                        doc.insert("state".into(), json!("error"));
                        doc.insert("last_error".into(), json!(reason));
                    }
                }
                doc.insert("updated_at".into(), json!(now));
                Ok::<(), crate::store::StoreError>(())
            });
    });
}

fn allocate(app: &App, uuid: Uuid) -> Result<Uuid, String> {
    let store = &app.conductor.store;
    let want = store
        .docs
        .get(ALLOCATION.kind, uuid)
        .map_err(|e| e.to_string())?;
    let name = want.get("name").and_then(Value::as_str);
    let mut candidates: Vec<(bool, Uuid)> = store
        .nodes_after(None)
        .filter_map(Result::ok)
        .filter(|n| fits(n.state(), &n.body, &want))
        .map(|n| {
            (
                n.body.name.is_some() && n.body.name.as_deref() == name,
                n.uuid(),
            )
        })
        .collect();
    // Random order, so concurrent allocations spread over the fleet; but a node named as
    // the allocation is tried first (Ironic 1.79).
    candidates.sort_by_key(|(named, _)| (!named, Uuid::new_v4()));
    let candidates = candidates.into_iter().map(|(_, u)| u);
    for node in candidates {
        let taken = app.conductor.edit_if_free(node, |provision, b| {
            if !fits(provision.state, b, &want) {
                return Err(ApiError::conflict("taken meanwhile"));
            }
            b.attrs.insert("instance_uuid".into(), json!(uuid));
            b.attrs.insert("allocation_uuid".into(), json!(uuid));
            Ok(())
        });
        if taken.is_ok() {
            return Ok(node);
        }
    }
    let mut asked = vec![format!(
        "resource class {}",
        want.get("resource_class").unwrap_or(&Value::Null)
    )];
    for field in ["traits", "candidate_nodes"] {
        let values = strings(&want, field);
        if !values.is_empty() {
            asked.push(format!("{field} {}", values.join(", ")));
        }
    }
    Err(format!(
        "Failed to process allocation {uuid}: no available nodes match {}",
        asked.join(" and ")
    ))
}

/// Before an allocation is deleted: its node is freed (not while it is being deployed).
pub fn release(app: &App, uuid: Uuid, doc: &Doc) -> Result<(), ApiError> {
    let Some(node) = doc
        .get("node_uuid")
        .and_then(Value::as_str)
        .and_then(|s| Uuid::parse_str(s).ok())
    else {
        return Ok(());
    };
    let result = app.conductor.edit_if_free(node, |provision, b| {
        if !provision.state.is_stable() && !b.maintenance {
            return Err(ApiError::conflict(format!(
                "Cannot remove allocation {uuid}: its node {node} is in state \"{}\".",
                provision.state
            )));
        }
        free(b, uuid);
        Ok(())
    });
    match result {
        Err(e) if e.status.as_u16() != 404 => Err(e),
        _ => Ok(()),
    }
}

/// Clears a node's references to allocation `uuid`.
pub fn free(b: &mut NodeBody, uuid: Uuid) {
    let mine = Some(&json!(uuid));
    if b.attrs.get("allocation_uuid") == mine {
        b.attrs.remove("allocation_uuid");
        if b.attrs.get("instance_uuid") == mine {
            b.attrs.remove("instance_uuid");
        }
    }
}
