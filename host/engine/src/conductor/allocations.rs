//! The allocator: finds an `available` node for an allocation, as Ironic's allocation API
//! does for Nova-less deployments, and lets it go when the allocation is deleted.
//!
//! A node is taken with [`Conductor::edit_if_free`]: under its claim, only if it still
//! fits, so two allocations racing for one node cannot both get it; a node another task
//! holds is tried again once it is let go, within the engine's lock wait, as Ironic's
//! allocator retries the locked nodes of its pass.
//!
//! A delete racing the search must not leave a node taken for an allocation that is gone.
//! So the search's outcome (a node taken and recorded in the allocation, or the error)
//! and a delete's release happen under one lock, over [`Searches`]: the set of allocations
//! still searching. A delete takes its allocation out of the set and then frees whatever
//! the allocation holds; a search takes a node only while its allocation is in the set.
//! Either the search recorded its node first, and the delete frees it, or the delete came
//! first, and the search takes nothing.

use std::collections::HashSet;
use std::sync::Arc;

use tokio::sync::{Mutex, MutexGuard};

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
    /// The allocation was deleted during its search.
    #[error("deleted during its search")]
    Deleted,
    /// The node cannot be backfilled into the allocation (Ironic's words say why).
    #[error("{0}")]
    Refused(String),
    /// Deleting the allocation would free a node in the middle of a flow.
    #[error("Cannot remove allocation {allocation}: its node {node} is in state \"{state}\".")]
    NodeBusy {
        allocation: Uuid,
        node: Uuid,
        state: ProvisionState,
    },
}

/// The allocations whose search has not ended, behind the lock that orders a search's
/// outcome against a delete.
#[derive(Default)]
pub struct Searches(Mutex<HashSet<Uuid>>);

/// An async lock: a search's take and a delete's release each hold it across their write
/// of the node.
impl Searches {
    async fn lock(&self) -> MutexGuard<'_, HashSet<Uuid>> {
        self.0.lock().await
    }
}

fn fits(state: ProvisionState, b: &NodeBody, want: &Doc) -> bool {
    available(state, b, want) && has_traits(b, want)
}

/// Ironic's first filter: available, free, powered, of the class, among the candidates
/// and of the owner asked for (traits come second, with their own error).
fn available(state: ProvisionState, b: &NodeBody, want: &Doc) -> bool {
    let attr = |k: &str| b.attrs.get(k).cloned().unwrap_or(Value::Null);
    let candidates = strings(want, "candidate_nodes");
    state == ProvisionState::Available
        && !b.maintenance
        && b.power_state.is_some()
        && attr("instance_uuid").is_null()
        && attr("allocation_uuid").is_null()
        && want
            .get("resource_class")
            .is_none_or(|rc| rc.is_null() || *rc == attr("resource_class"))
        && (candidates.is_empty() || candidates.contains(&b.uuid.to_string()))
        && want
            .get("owner")
            .is_none_or(|o| o.is_null() || *o == attr("owner"))
}

fn has_traits(b: &NodeBody, want: &Doc) -> bool {
    let traits = strings(&b.attrs, "traits");
    strings(want, "traits").iter().all(|t| traits.contains(t))
}

/// Starts looking for a node for a new allocation.
impl Conductor {
    /// Starts looking for a node for allocation `uuid` in the background; the outcome is
    /// written into the allocation (`active` with its node, or `error` with the reason).
    pub async fn allocate(self: &Arc<Self>, uuid: Uuid) {
        let asked = self.store.document(KIND, uuid).await;
        let backfill = asked.ok().and_then(|d| {
            d.get("node")
                .and_then(Value::as_str)
                .and_then(|n| Uuid::parse_str(n).ok())
        });
        if let Some(node) = backfill {
            if let Err(e) = self.backfill(uuid, node).await {
                let _ = self
                    .record(uuid, |doc| {
                        doc.remove("node");
                        doc.insert("state".into(), json!("error"));
                        doc.insert("last_error".into(), json!(e.to_string()));
                    })
                    .await;
            }
            return;
        }
        self.allocating.lock().await.insert(uuid);
        let conductor = self.clone();
        tokio::spawn(async move {
            if let Err(reason) = conductor.find_node_for(uuid).await {
                let mut searching = conductor.allocating.lock().await;
                if searching.remove(&uuid) {
                    let _ = conductor
                        .record(uuid, |doc| {
                            doc.insert("state".into(), json!("error"));
                            doc.insert("last_error".into(), json!(reason));
                        })
                        .await;
                }
            }
        });
    }

    /// Writes the outcome of allocation `uuid`'s search into it.
    async fn record(&self, uuid: Uuid, outcome: impl FnOnce(&mut Doc)) -> Result<Doc, StoreError> {
        let now = self.store.clock().now().to_datetime();
        self.store
            .update_document(KIND, uuid, UNIQUE, |doc| {
                outcome(doc);
                doc.insert("updated_at".into(), json!(now));
                Ok::<(), StoreError>(())
            })
            .await
    }

    /// Takes `node` for allocation `uuid` if it fits `want` and the allocation is still
    /// searching, and records it in the allocation: all or nothing, under the lock.
    async fn take(&self, uuid: Uuid, node: Uuid, want: &Doc) -> Result<(), AllocationError> {
        let mut searching = self.allocating.lock().await;
        if !searching.contains(&uuid) {
            return Err(AllocationError::Deleted);
        }
        self.edit_if_free::<AllocationError>(node, |provision, b| {
            if !fits(provision.state, b, want) {
                return Err(AllocationError::TakenMeanwhile);
            }
            b.attrs.insert("instance_uuid".into(), json!(uuid));
            b.attrs.insert("allocation_uuid".into(), json!(uuid));
            Ok(())
        })
        .await?;
        searching.remove(&uuid);
        self.holds(uuid, node).await
    }

    /// Records in allocation `uuid` that it holds `node` (just taken for it): `active`. If
    /// the allocation cannot say so, the node is freed again, so it is never held by an
    /// allocation that does not name it.
    async fn holds(&self, uuid: Uuid, node: Uuid) -> Result<(), AllocationError> {
        let recorded = self
            .record(uuid, |doc| {
                doc.remove("node");
                doc.insert("state".into(), json!("active"));
                doc.insert("node_uuid".into(), json!(node));
            })
            .await;
        if let Err(e) = recorded {
            self.edit::<AllocationError>(node, |_, b| {
                free(b, uuid);
                Ok(())
            })
            .await?;
            return Err(e.into());
        }
        Ok(())
    }

    /// Records `node`, already deployed, as allocation `uuid`'s (Ironic's backfill, 1.58):
    /// under the node's claim, only if it fits what the allocation asks and no other
    /// allocation or instance holds it.
    async fn backfill(&self, uuid: Uuid, node: Uuid) -> Result<(), AllocationError> {
        let want = self.store.document(KIND, uuid).await?;
        self.edit::<AllocationError>(node, |provision, b| {
            let attr = |k: &str| b.attrs.get(k).cloned().unwrap_or(Value::Null);
            let mut errors = Vec::new();
            if provision.state != ProvisionState::Active {
                errors.push(format!(
                    "Node must be in the \"active\" state, but the current state is \"{}\"",
                    provision.state
                ));
            }
            let class = want.get("resource_class").cloned().unwrap_or(Value::Null);
            if !class.is_null() && class != attr("resource_class") {
                errors.push(format!(
                    "Resource class {} does not match the requested resource class {class}",
                    attr("resource_class")
                ));
            }
            if !has_traits(b, &want) {
                errors.push(format!(
                    "List of traits {} does not match the requested traits {}",
                    attr("traits"),
                    want.get("traits").cloned().unwrap_or(Value::Null)
                ));
            }
            let candidates = strings(&want, "candidate_nodes");
            if !candidates.is_empty() && !candidates.contains(&node.to_string()) {
                errors.push(format!(
                    "Candidate nodes must be empty or contain the target node, but got {candidates:?}"
                ));
            }
            if !errors.is_empty() {
                return Err(AllocationError::Refused(format!(
                    "Cannot backfill an allocation for node {node}: {}",
                    errors.join("; ")
                )));
            }
            for held in ["allocation_uuid", "instance_uuid"] {
                let holder = attr(held);
                if !holder.is_null() && holder != json!(uuid) {
                    return Err(AllocationError::Refused(format!(
                        "Node {node} is associated with {} {holder}.",
                        held.trim_end_matches("_uuid")
                    )));
                }
            }
            b.attrs.insert("instance_uuid".into(), json!(uuid));
            b.attrs.insert("allocation_uuid".into(), json!(uuid));
            Ok(())
        })
        .await?;
        self.holds(uuid, node).await
    }

    /// Takes a node for allocation `uuid`, or says why none fits.
    async fn find_node_for(self: &Arc<Self>, uuid: Uuid) -> Result<(), String> {
        let store = &self.store;
        let want = store
            .document(KIND, uuid)
            .await
            .map_err(|e| e.to_string())?;
        let name = want.get("name").and_then(Value::as_str).map(str::to_owned);
        let class = want
            .get("resource_class")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let asked_for = !strings(&want, "candidate_nodes").is_empty();
        let failed = |error: String| format!("Failed to process allocation {uuid}: {error}.");
        // The fleet is read off the async workers: it is the one pass that reads every node.
        let (me, wanted) = (self.clone(), want.clone());
        let available: Vec<(bool, Uuid, bool)> = tokio::task::spawn_blocking(move || {
            let mut nodes = me.store.nodes_after(None);
            std::iter::from_fn(|| nodes.next_blocking())
                .filter_map(Result::ok)
                .filter(|n| available(n.state(), &n.body, &wanted))
                .map(|n| {
                    (
                        n.body.name.is_some() && n.body.name == name,
                        n.uuid(),
                        has_traits(&n.body, &wanted),
                    )
                })
                .collect()
        })
        .await
        .map_err(|e| format!("the search for a node failed: {e}"))?;
        // Ironic's words for each filter that leaves nothing, which clients match on.
        if available.is_empty() {
            return Err(failed(if asked_for {
                format!(
                    "none of the requested nodes are available and match the resource class {class}"
                )
            } else {
                format!("no available nodes match the resource class {class}")
            }));
        }
        let mut candidates: Vec<(bool, Uuid)> = available
            .into_iter()
            .filter(|(_, _, traits)| *traits)
            .map(|(named, node, _)| (named, node))
            .collect();
        if candidates.is_empty() {
            let traits = strings(&want, "traits").join(", ");
            return Err(failed(format!(
                "no suitable nodes have the requested traits {traits}"
            )));
        }
        // Random order, so concurrent allocations spread over the fleet; but a node named as
        // the allocation is tried first (Ironic 1.79).
        candidates.sort_by_key(|(named, _)| (!named, Uuid::new_v4()));
        // A node another task holds (a power action, a heartbeat's step) is tried again
        // after the free ones, once it is let go, all of them within one lock wait: as
        // Ironic retries the locked nodes of a pass, and with its words if none is had. Its
        // claim is waited for, not kept: a node is claimed only under the search's lock,
        // as a delete claims it, so the two never wait on each other.
        let busy = |e: &AllocationError| {
            matches!(e, AllocationError::Conductor(ConductorError::Busy { .. }))
        };
        let mut locked = Vec::new();
        for (_, node) in candidates {
            match self.take(uuid, node, &want).await {
                Ok(()) => return Ok(()),
                Err(AllocationError::Deleted) => return Err("deleted".into()),
                Err(e) if busy(&e) => locked.push(node),
                Err(_) => continue,
            }
        }
        let mut still_locked = 0;
        let until = tokio::time::Instant::now() + self.settings.lock_wait;
        for node in locked {
            let wait = until.saturating_duration_since(tokio::time::Instant::now());
            if let Err(_held) = self
                .reservations
                .claim_within(node, "allocating", wait)
                .await
            {
                still_locked += 1;
                continue;
            }
            match self.take(uuid, node, &want).await {
                Ok(()) => return Ok(()),
                Err(AllocationError::Deleted) => return Err("deleted".into()),
                Err(e) if busy(&e) => still_locked += 1,
                Err(_) => continue,
            }
        }
        Err(failed(match still_locked {
            0 => "all nodes were filtered out during reservation".into(),
            n => format!("could not reserve any of {n} suitable nodes"),
        }))
    }

    // Before an allocation is deleted: its node is freed (not while it is being deployed).

    /// Frees the node allocation `uuid` (whose document was `doc`) holds, unless the node
    /// is in a flow, and ends its search. A node that is gone is nothing to free.
    pub async fn release_allocation(&self, uuid: Uuid, doc: &Doc) -> Result<(), AllocationError> {
        let mut searching = self.allocating.lock().await;
        // From here on the search takes nothing.
        searching.remove(&uuid);
        // Read again under the lock: the search may have recorded a node since `doc`.
        let doc = match self.store.document(KIND, uuid).await {
            Ok(now) => now,
            Err(_) => doc.clone(),
        };
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
        let result = result.await;
        drop(searching);
        match result {
            Err(AllocationError::Store(StoreError::NodeNotFound(_))) => Ok(()),
            other => other.map(drop),
        }
    }
}

impl Conductor {
    /// An undeploy ends the node's instance, as Ironic's tear-down does: its
    /// `instance_uuid` is cleared and its allocation deleted, so the node can be allocated
    /// again. The node is freed first: a crash in between leaves an allocation naming a
    /// free node (deleting it frees nothing), never a node held by no allocation.
    pub(super) async fn end_instance(&self, node: Uuid) -> Result<(), StoreError> {
        let held = self
            .store
            .node(node)
            .await?
            .body
            .attrs
            .get("allocation_uuid")
            .cloned();
        self.store
            .update_node(node, |b| {
                b.attrs.remove("instance_uuid");
                b.attrs.remove("allocation_uuid");
                Ok(())
            })
            .await?;
        let allocation = held
            .as_ref()
            .and_then(Value::as_str)
            .and_then(|a| Uuid::parse_str(a).ok());
        if let Some(allocation) = allocation {
            match self.store.delete_document(KIND, allocation, UNIQUE).await {
                Ok(()) | Err(StoreError::DocumentNotFound { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
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
