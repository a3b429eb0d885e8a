//! The allocator: finds an `available` node for an allocation, as Ironic's allocation API
//! does for Nova-less deployments, and lets it go when the allocation is deleted.
//!
//! A node is taken with [`Conductor::edit_if_free`]: under its claim, only if it still
//! fits, so two allocations racing for one node cannot both get it; a node another task
//! holds is skipped for the next candidate, as Ironic's allocator does.

use std::sync::Arc;

use serde_json::{Value, json};
use uuid::Uuid;

use super::{Conductor, ConductorError};
use crate::node::{NodeBody, strings};
use crate::state_machine::ProvisionState;
use crate::store::StoreError;
use crate::store::documents::Doc;

/// The allocations' kind among the stored documents, and their unique fields.
pub const KIND: &str = "Allocation";
pub const UNIQUE: &[&str] = &["name"];

#[derive(Debug, thiserror::Error)]
pub enum AllocationError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Conductor(#[from] ConductorError),
    /// The node was taken or changed between the search and the claim.
    #[error("taken meanwhile")]
    TakenMeanwhile,
    /// Deleting the allocation would free a node in the middle of a flow.
    #[error("Cannot remove allocation {allocation}: its node {node} is in state \"{state}\".")]
    NodeBusy {
        allocation: Uuid,
        node: Uuid,
        state: ProvisionState,
    },
}

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
impl Conductor {
    /// Starts looking for a node for allocation `uuid` in the background; the outcome is
    /// written into the allocation (`active` with its node, or `error` with the reason).
    pub fn allocate(self: &Arc<Self>, uuid: Uuid) {
        let conductor = self.clone();
        tokio::task::spawn_blocking(move || {
            let outcome = conductor.find_node_for(uuid);
            let now = conductor.store.clock().now().to_datetime();
            let _ = conductor.store.docs.update(KIND, uuid, UNIQUE, |doc| {
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
                Ok::<(), StoreError>(())
            });
        });
    }

    /// The node allocation `uuid` gets, or why none fits.
    fn find_node_for(&self, uuid: Uuid) -> Result<Uuid, String> {
        let store = &self.store;
        let want = store.docs.get(KIND, uuid).map_err(|e| e.to_string())?;
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
            let taken = self.edit_if_free::<AllocationError>(node, |provision, b| {
                if !fits(provision.state, b, &want) {
                    return Err(AllocationError::TakenMeanwhile);
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

    // Before an allocation is deleted: its node is freed (not while it is being deployed).

    /// Frees the node allocation `uuid` (whose document is `doc`) holds, unless the node is
    /// in a flow. A node that is gone is nothing to free.
    pub fn release_allocation(&self, uuid: Uuid, doc: &Doc) -> Result<(), AllocationError> {
        let Some(node) = doc
            .get("node_uuid")
            .and_then(Value::as_str)
            .and_then(|s| Uuid::parse_str(s).ok())
        else {
            return Ok(());
        };
        let result = self.edit_if_free(node, |provision, b| {
            if !provision.state.is_stable() && !b.maintenance {
                return Err(AllocationError::NodeBusy {
                    allocation: uuid,
                    node,
                    state: provision.state,
                });
            }
            free(b, uuid);
            Ok(())
        });
        match result {
            Err(AllocationError::Store(StoreError::NodeNotFound(_))) => Ok(()),
            other => other.map(drop),
        }
    }
}

/// Takes allocation `uuid` off a node's body, if it is the node's.
fn free(b: &mut NodeBody, uuid: Uuid) {
    let mine = Some(&json!(uuid));
    if b.attrs.get("allocation_uuid") == mine {
        b.attrs.remove("allocation_uuid");
        if b.attrs.get("instance_uuid") == mine {
            b.attrs.remove("instance_uuid");
        }
    }
}
