//! The operator's writes that start no flow: enrolling a node, its delete with what goes
//! with it, the agent token a lookup issues, ports, and the stored-only documents. They go
//! through the conductor like every write, so the API never writes around it (the
//! architecture test checks that `api/` calls no store write).

use std::future::Future;

use base64::Engine as _;
use rand::RngCore;
use serde_json::json;
use sha2::{Digest, Sha256};
use uuid::Uuid;

use super::{AGENT_TOKEN_HASH, Conductor, ConductorError};
use crate::node::{NewNode, Node, Port};
use crate::store::documents::Doc;
use crate::store::{Cascade, StoreError};

/// The hex sha256 an agent token is kept as (the token itself is never stored).
pub fn token_hash(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

impl Conductor {
    /// Enrolls a node; before API 1.11 it starts in `available`, as Ironic's did.
    pub async fn enroll(&self, new: NewNode, available: bool) -> Result<Node, StoreError> {
        let node = self.store.create_node(new).await?;
        match available {
            true => self.store.set_initial_available(node.uuid()).await,
            false => Ok(node),
        }
    }

    /// An operation the API took and the node's interfaces could not do, outside any flow
    /// (virtual media on a BMC deployd does not drive): the error goes where Ironic puts
    /// it, the node's `last_error` and an error event of its history.
    pub async fn record_failure(&self, node: Uuid, error: String) -> Result<(), ConductorError> {
        let _claim = self.claim_for_operator(node, "update").await?;
        self.note_failure(node, error).await
    }

    /// [`Conductor::record_failure`] for a caller that holds the node's claim.
    pub(super) async fn note_failure(
        &self,
        node: Uuid,
        error: String,
    ) -> Result<(), ConductorError> {
        self.store
            .update_node(node, |b| {
                b.last_error = Some(error.clone());
                Ok(())
            })
            .await?;
        self.store.failure(node, error).await?;
        Ok(())
    }

    /// Deletes a node (`DELETE`), holding its claim: never while a flow step runs. Its
    /// ports and what `cascade` names go with it, in one store transaction.
    pub async fn delete(&self, node: Uuid, cascade: &Cascade) -> Result<(), ConductorError> {
        let _claim = self.claim_for_operator(node, "delete").await?;
        if self.store.node(node).await?.body.is_protected() {
            return Err(ConductorError::Protected(node));
        }
        self.store.delete_node_with(node, cascade).await?;
        self.agents.forget(node);
        self.stop_console(node).await;
        Ok(())
    }

    /// The token a lookup hands the agent: a fresh one if none was issued for this boot,
    /// else `"******"`. A repeat lookup is a read: agents retry lookups in a loop, and a
    /// write (and flush) per call let a lookup flood cut the engine's throughput by two
    /// thirds. The write, when there is one, only inserts if absent, so two racing first
    /// lookups still issue exactly one token.
    pub async fn issue_agent_token(&self, node: &Node) -> Result<String, StoreError> {
        if node
            .body
            .driver_internal_info
            .contains_key(AGENT_TOKEN_HASH)
        {
            return Ok("******".into());
        }
        let mut bytes = [0u8; 32];
        rand::rng().fill_bytes(&mut bytes);
        let token = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);
        let digest = token_hash(&token);
        let updated = self
            .store
            .update_node(node.uuid(), |b| {
                if !b.driver_internal_info.contains_key(AGENT_TOKEN_HASH) {
                    b.driver_internal_info
                        .insert(AGENT_TOKEN_HASH.into(), json!(digest));
                    // A new boot: no certificate of a former one stays pinned.
                    b.driver_internal_info.remove(super::AGENT_CA_SHA256);
                }
                Ok(())
            })
            .await?;
        if updated.body.driver_internal_info.get(AGENT_TOKEN_HASH) != Some(&json!(digest)) {
            return Ok("******".into());
        }
        self.agents.issued(node.uuid(), token.clone());
        let note = "Ramdisk agent looked the node up; agent token issued";
        self.store.milestone(node.uuid(), note.into()).await?;
        Ok(token)
    }

    pub async fn create_port(&self, port: Port) -> Result<Port, StoreError> {
        self.store.insert_port(port).await
    }

    /// Changes a port: `compute` makes the new port from a copy, and may read other
    /// records as it does; it is written only if the port is still as it was read, else
    /// computed again (as [`Conductor::edit_reading`] does for nodes).
    pub async fn update_port<E: From<StoreError>, F: Future<Output = Result<Port, E>>>(
        &self,
        uuid: Uuid,
        compute: impl Fn(Port) -> F,
    ) -> Result<Port, E> {
        for _ in 0..super::RECOMPUTE {
            let read = self.store.port(uuid).await?;
            let port = compute(read.clone()).await?;
            let written = self
                .store
                .update_port(uuid, |current| {
                    if *current != read {
                        return Err(StoreError::Changed(format!("port {uuid}")));
                    }
                    *current = port.clone();
                    Ok(())
                })
                .await;
            match written {
                Err(StoreError::Changed(_)) => continue,
                written => return Ok(written?),
            }
        }
        Err(StoreError::Changed(format!("port {uuid}")).into())
    }

    pub async fn delete_port(&self, uuid: Uuid) -> Result<(), StoreError> {
        self.store.delete_port(uuid).await
    }

    /// Keeps an uploaded driver component in the store, where every engine on it finds it
    /// (the shared store: see [`Store::keeps_drivers`](crate::store::Store::keeps_drivers)).
    pub async fn keep_driver(
        &self,
        driver: &crate::driver_host::LoadedDriver,
        body: &[u8],
    ) -> Result<(), StoreError> {
        let kept = crate::driver_host::kept::upload(driver, body);
        self.store.keep_driver(&kept).await?;
        self.announce_drivers().await
    }

    /// Forgets an uploaded driver component the store keeps.
    pub async fn forget_driver(&self, name: &str) -> Result<(), StoreError> {
        self.store.forget_driver(name).await?;
        self.announce_drivers().await
    }

    /// Records the drivers this engine runs where the other engines read them (its row
    /// on the shared store, for their `/v1/conductors`).
    pub async fn announce_drivers(&self) -> Result<(), StoreError> {
        let types = crate::hardware::Hardware::new(self.registry()).types();
        self.store.announce_drivers(&types).await
    }

    /// Adds a stored-only document (chassis, port group, allocation, …).
    pub async fn create_document(
        &self,
        kind: &'static str,
        uuid: Uuid,
        doc: &Doc,
        unique: &[&'static str],
    ) -> Result<(), StoreError> {
        self.store.insert_document(kind, uuid, doc, unique).await
    }

    /// Changes a stored-only document: `compute` makes the new document from a copy,
    /// and may read other records as it does; it is written only if the document is
    /// still as it was read, else computed again.
    pub async fn update_document<E: From<StoreError>, F: Future<Output = Result<Doc, E>>>(
        &self,
        kind: &'static str,
        uuid: Uuid,
        unique: &[&'static str],
        compute: impl Fn(Doc) -> F,
    ) -> Result<Doc, E> {
        for _ in 0..super::RECOMPUTE {
            let read = self.store.document(kind, uuid).await?;
            let doc = compute(read.clone()).await?;
            let written = self
                .store
                .update_document(kind, uuid, unique, |current| {
                    if *current != read {
                        return Err(StoreError::Changed(format!("{kind} {uuid}")));
                    }
                    *current = doc.clone();
                    Ok(())
                })
                .await;
            match written {
                Err(StoreError::Changed(_)) => continue,
                written => return Ok(written?),
            }
        }
        Err(StoreError::Changed(format!("{kind} {uuid}")).into())
    }

    pub async fn delete_document(
        &self,
        kind: &'static str,
        uuid: Uuid,
        unique: &[&'static str],
    ) -> Result<(), StoreError> {
        self.store.delete_document(kind, uuid, unique).await
    }
}
