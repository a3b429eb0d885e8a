//! The handle's nodes: enrolment, reads, edits, deletion, transitions and history.

use super::*;

impl Store {
    /// A node's last [`history::MAX_EVENTS`] history events, oldest first.
    pub async fn history_of(&self, node: Uuid) -> Result<Vec<history::Event>, StoreError> {
        match &self.backend {
            Backend::Sled(s) => s.history()?.list(node),
            Backend::Shared(s, _) => Box::pin(s.history_of(node)).await,
        }
    }

    /// One of a node's history events, by its uuid.
    pub async fn history_event(
        &self,
        node: Uuid,
        event: Uuid,
    ) -> Result<history::Event, StoreError> {
        match &self.backend {
            Backend::Sled(s) => s.history()?.get(node, event),
            Backend::Shared(s, _) => Box::pin(s.history_event(node, event)).await,
        }
    }

    /// Records an engine's note in a node's history, in the state the node is in.
    pub async fn milestone(&self, uuid: Uuid, note: String) -> Result<(), StoreError> {
        match &self.backend {
            Backend::Sled(s) => s.milestone(uuid, note),
            Backend::Shared(s, _) => Box::pin(s.in_place(uuid, None, Some(&note))).await,
        }
    }

    /// Records an image transfer's start or end in a node's history, once per boot of its
    /// agent: on the shared store, where each engine that hears the agent sees the
    /// transfer start and end, only the first engine to record it does (and an end's
    /// time is counted on the database's clock from the recorded start).
    pub async fn transfer_milestone(
        &self,
        uuid: Uuid,
        transfer: &super::history::Transfer,
    ) -> Result<(), StoreError> {
        match &self.backend {
            Backend::Sled(s) => s.milestone(uuid, transfer.to_string()),
            Backend::Shared(s, _) => Box::pin(s.transfer_milestone(uuid, transfer)).await,
        }
    }

    /// Records a failure in a node's history (an operation that failed outside any flow).
    pub async fn failure(&self, uuid: Uuid, error: String) -> Result<(), StoreError> {
        match &self.backend {
            Backend::Sled(s) => s.failure(uuid, error),
            Backend::Shared(s, _) => Box::pin(s.in_place(uuid, Some(&error), None)).await,
        }
    }

    /// Enrolls a node (in `enroll`, as Ironic does from API 1.11 on), durable when it returns.
    pub async fn create_node(&self, new: NewNode) -> Result<Node, StoreError> {
        match &self.backend {
            Backend::Sled(s) => s.create_node(new),
            Backend::Shared(s, _) => Box::pin(s.create_node(new)).await,
        }
    }

    /// Enrolls many nodes with one flush at the end; each is all-or-nothing.
    pub async fn create_nodes(
        &self,
        new: Vec<NewNode>,
    ) -> Result<Vec<Result<Node, StoreError>>, StoreError> {
        match &self.backend {
            Backend::Sled(s) => s.create_nodes(new),
            // Each row commits on its own (sled's one flush has no cost to save here).
            Backend::Shared(s, _) => {
                let mut created = Vec::with_capacity(new.len());
                for node in new {
                    created.push(Box::pin(s.create_node(node)).await);
                }
                Ok(created)
            }
        }
    }

    /// A node by uuid.
    pub async fn node(&self, uuid: Uuid) -> Result<Node, StoreError> {
        match &self.backend {
            Backend::Sled(s) => s.node(uuid),
            Backend::Shared(s, _) => Box::pin(s.node(uuid)).await,
        }
    }

    /// Only a node's provision record (state, clock, deadline).
    pub async fn provision(&self, uuid: Uuid) -> Result<Provision, StoreError> {
        match &self.backend {
            Backend::Sled(s) => s.provision(uuid),
            Backend::Shared(s, _) => Box::pin(s.provision(uuid)).await,
        }
    }

    /// A node by uuid or by name, as `GET /v1/nodes/{ident}` resolves it.
    pub async fn find_node(&self, ident: &str) -> Result<Node, StoreError> {
        match &self.backend {
            Backend::Sled(s) => s.find_node(ident),
            Backend::Shared(s, _) => Box::pin(s.find_node(ident)).await,
        }
    }

    /// Up to `limit` nodes in uuid order, starting after `marker`.
    pub async fn list_nodes(
        &self,
        marker: Option<Uuid>,
        limit: usize,
    ) -> Result<Vec<Node>, StoreError> {
        match &self.backend {
            Backend::Sled(s) => s.list_nodes(marker, limit),
            Backend::Shared(s, _) => Box::pin(s.list_nodes(marker, limit)).await,
        }
    }

    /// Every node in uuid order after `marker`, a node at a time (see [`NodePages`]).
    pub fn nodes_after(&self, marker: Option<Uuid>) -> NodePages<'_> {
        match &self.backend {
            Backend::Sled(s) => NodePages::sled(s.nodes_after(marker)),
            Backend::Shared(s, _) => NodePages::shared(s, marker),
        }
    }

    /// How many nodes are enrolled.
    pub async fn node_count(&self) -> Result<usize, StoreError> {
        match &self.backend {
            Backend::Sled(s) => Ok(s.node_count()),
            Backend::Shared(s, _) => Box::pin(s.node_count()).await,
        }
    }

    /// Changes a node's body (never its provision state: that is what events are for).
    pub async fn update_node(
        &self,
        uuid: Uuid,
        change: impl Fn(&mut NodeBody) -> Result<(), StoreError>,
    ) -> Result<Node, StoreError> {
        self.edit_node(uuid, |_, body| change(body)).await
    }

    /// [`Store::update_node`] where `change` also sees the node's provision state and may
    /// refuse with an error of the caller's.
    pub async fn edit_node<E: From<StoreError>>(
        &self,
        uuid: Uuid,
        change: impl Fn(&Provision, &mut NodeBody) -> Result<(), E>,
    ) -> Result<Node, E> {
        match &self.backend {
            Backend::Sled(s) => s.edit_node(uuid, change),
            Backend::Shared(s, _) => {
                let claim = self.claimed(uuid);
                Box::pin(s.edit_node(uuid, change, claim.as_ref())).await
            }
        }
    }

    /// Deletes a node and its ports, in the states where Ironic allows it.
    pub async fn delete_node(&self, uuid: Uuid) -> Result<(), StoreError> {
        self.delete_node_with(uuid, &Cascade::default()).await
    }

    /// Deletes a node, its ports and the documents that go with it, all or none.
    pub async fn delete_node_with(&self, uuid: Uuid, cascade: &Cascade) -> Result<(), StoreError> {
        match &self.backend {
            Backend::Sled(s) => s.delete_node_with(uuid, cascade),
            Backend::Shared(s, _) => {
                let claim = self.claimed(uuid);
                Box::pin(s.delete_node(uuid, cascade, claim.as_ref())).await
            }
        }
    }

    /// Puts a node just enrolled straight into `available` (clients older than API 1.11).
    pub async fn set_initial_available(&self, uuid: Uuid) -> Result<Node, StoreError> {
        match &self.backend {
            Backend::Sled(s) => s.set_initial_available(uuid),
            Backend::Shared(s, _) => Box::pin(s.set_initial_available(uuid)).await,
        }
    }

    /// Applies `event` to a node, durable when it returns; `last_error` replaces the node's.
    pub async fn apply_event(
        &self,
        uuid: Uuid,
        event: Event,
        last_error: Option<String>,
    ) -> Result<Node, StoreError> {
        match &self.backend {
            Backend::Sled(s) => s.apply_event(uuid, event, last_error),
            Backend::Shared(s, _) => {
                let claim = self.claimed(uuid);
                Box::pin(s.apply_event(uuid, None, event, last_error, claim.as_ref())).await
            }
        }
    }

    /// [`Store::apply_event`], only if the node is still in `expected`.
    pub async fn apply_event_from(
        &self,
        uuid: Uuid,
        expected: ProvisionState,
        event: Event,
        last_error: Option<String>,
    ) -> Result<Node, StoreError> {
        match &self.backend {
            Backend::Sled(s) => s.apply_event_from(uuid, expected, event, last_error),
            Backend::Shared(s, _) => {
                let (expected, claim) = (Some(expected), self.claimed(uuid));
                Box::pin(s.apply_event(uuid, expected, event, last_error, claim.as_ref())).await
            }
        }
    }

    /// Applies many events with one flush at the end; each is all-or-nothing.
    pub async fn apply_events(
        &self,
        events: impl IntoIterator<Item = (Uuid, Event)>,
    ) -> Result<Vec<Result<Node, StoreError>>, StoreError> {
        match &self.backend {
            Backend::Sled(s) => s.apply_events(events),
            Backend::Shared(s, _) => {
                let mut applied = Vec::new();
                for (uuid, event) in events {
                    let claim = self.claimed(uuid);
                    let node = s.apply_event(uuid, None, event, None, claim.as_ref());
                    applied.push(Box::pin(node).await);
                }
                Ok(applied)
            }
        }
    }
}
