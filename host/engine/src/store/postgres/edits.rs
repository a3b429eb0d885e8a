//! A node's record read by name or in pages, changed, or deleted on the shared store. A
//! change or a deletion is one transaction that locks the node's row, with the rules of
//! `store::edits`; a node claimed by an engine whose lease lives is refused
//! (`NotOwner`), as a transition is. A name is unique by the table's own constraint, so
//! two engines renaming two nodes to one name cannot both win.

use tokio_postgres::types::Json;
use uuid::Uuid;

use super::nodes::{lock, owned};
use super::rows::{self, PROVISION, code};
use super::{Lease, SharedStore, db_error};
use crate::node::{Node, NodeBody, Provision};
use crate::store::documents::Cascade;
use crate::store::edits::{deletable, edited, initially_available};
use crate::store::{StoreError, parse_body};

impl SharedStore {
    /// A node by uuid or by name, as `GET /v1/nodes/{ident}` resolves it.
    pub async fn find_node(&self, ident: &str) -> Result<Node, StoreError> {
        let (column, by_uuid) = match Uuid::parse_str(ident) {
            Ok(uuid) => ("uuid", Some(uuid)),
            Err(_) => ("name", None),
        };
        let client = self.client().await?;
        let sql = format!("SELECT uuid, {PROVISION}, body::text FROM nodes WHERE {column} = $1");
        let row = match by_uuid {
            Some(uuid) => client.query_opt(&sql, &[&uuid]).await,
            None => client.query_opt(&sql, &[&ident]).await,
        }
        .map_err(db_error)?
        .ok_or_else(|| StoreError::NodeNotFound(ident.to_owned()))?;
        node_of(&row)
    }

    /// A node's provision record only.
    pub async fn provision(&self, uuid: Uuid) -> Result<Provision, StoreError> {
        let client = self.client().await?;
        let row = client
            .query_opt(
                &format!("SELECT {PROVISION} FROM nodes WHERE uuid = $1"),
                &[&uuid],
            )
            .await
            .map_err(db_error)?
            .ok_or_else(|| StoreError::NodeNotFound(uuid.to_string()))?;
        rows::provision(uuid, &row, 0)
    }

    /// Up to `limit` nodes in uuid order (the byte order sled keeps them in too), after
    /// `marker`.
    pub async fn list_nodes(
        &self,
        marker: Option<Uuid>,
        limit: usize,
    ) -> Result<Vec<Node>, StoreError> {
        let client = self.client().await?;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = client
            .query(
                &format!(
                    "SELECT uuid, {PROVISION}, body::text FROM nodes
                     WHERE $1::uuid IS NULL OR uuid > $1 ORDER BY uuid LIMIT $2"
                ),
                &[&marker, &limit],
            )
            .await
            .map_err(db_error)?;
        rows.iter().map(node_of).collect()
    }

    /// How many nodes are enrolled.
    pub async fn node_count(&self) -> Result<usize, StoreError> {
        let client = self.client().await?;
        let row = client
            .query_one("SELECT count(*) FROM nodes", &[])
            .await
            .map_err(db_error)?;
        Ok(usize::try_from(row.get::<_, i64>(0)).unwrap_or(0))
    }

    /// Changes a node's body as `change` says, seeing its provision state, under the
    /// row's lock; stamped with the database's clock.
    pub async fn edit_node<E: From<StoreError>>(
        &self,
        uuid: Uuid,
        change: impl Fn(&Provision, &mut NodeBody) -> Result<(), E>,
        engine: Option<&Lease>,
    ) -> Result<Node, E> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(db_error)?;
        let locked = lock(&tx, uuid).await?;
        owned(uuid, &locked, engine)?;
        let provision = locked.provision;
        let (body, _) = edited(uuid, &provision, &locked.body, change, locked.now)?;
        let written = tx
            .execute(
                "UPDATE nodes SET name = $2, body = $3 WHERE uuid = $1",
                &[&uuid, &body.name, &Json(&body)],
            )
            .await;
        if let Err(e) = written {
            return Err(match e.as_db_error().and_then(|d| d.constraint()) {
                Some("nodes_name_key") => StoreError::NameTaken(body.name.unwrap_or_default()),
                _ => db_error(e),
            }
            .into());
        }
        tx.commit().await.map_err(db_error)?;
        Ok(Node { body, provision })
    }

    /// Deletes a node, with its ports, config drive and history, where
    /// [`deletable`] allows it.
    pub async fn delete_node(
        &self,
        uuid: Uuid,
        cascade: &Cascade,
        engine: Option<&Lease>,
    ) -> Result<(), StoreError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(db_error)?;
        let locked = lock(&tx, uuid).await?;
        owned(uuid, &locked, engine)?;
        deletable(uuid, &locked.provision, &locked.body)?;
        // Ports and the config drive go with the row (their foreign keys cascade).
        super::documents::delete_attached(&tx, uuid, &locked.body, cascade).await?;
        tx.execute("DELETE FROM history WHERE node = $1", &[&uuid])
            .await
            .map_err(db_error)?;
        tx.execute("DELETE FROM nodes WHERE uuid = $1", &[&uuid])
            .await
            .map_err(db_error)?;
        tx.commit().await.map_err(db_error)
    }

    /// Puts a node just enrolled straight into `available` (clients older than API 1.11).
    pub async fn set_initial_available(&self, uuid: Uuid) -> Result<Node, StoreError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(db_error)?;
        let locked = lock(&tx, uuid).await?;
        owned(uuid, &locked, None)?;
        let provision = initially_available(uuid, locked.provision)?;
        tx.execute(
            "UPDATE nodes SET state = $2 WHERE uuid = $1",
            &[&uuid, &code(provision.state)],
        )
        .await
        .map_err(db_error)?;
        tx.commit().await.map_err(db_error)?;
        Ok(Node {
            body: locked.body,
            provision,
        })
    }
}

/// A node from a row of `uuid, PROVISION…, body`.
fn node_of(row: &tokio_postgres::Row) -> Result<Node, StoreError> {
    let uuid: Uuid = row.get(0);
    Ok(Node {
        provision: rows::provision(uuid, row, 1)?,
        body: parse_body(uuid, row.get::<_, &str>(8).as_bytes())?,
    })
}
