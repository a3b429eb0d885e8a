//! Documents in the shared store (chassis, port groups, allocations, templates, runbooks,
//! inspection rules, volume records, inventories): a row each in `documents`, and a row in
//! `document_names` per unique value it holds. A unique value is taken by inserting its
//! row: two engines naming two documents alike meet on the name's primary key, and the
//! second learns who holds it from the same statement (`ON CONFLICT … RETURNING`). A
//! document's names go with it (their foreign key cascades); documents that go with a
//! node are found by the `node` column, the node they name.

use deadpool_postgres::GenericClient;
use tokio_postgres::types::Json;
use uuid::Uuid;

use super::{SharedStore, db_error};
use crate::store::documents::{Cascade, Doc, check_document_sizes, unique_values};
use crate::store::{StoreError, parse_json};

impl SharedStore {
    pub async fn document(&self, kind: &'static str, uuid: Uuid) -> Result<Doc, StoreError> {
        let client = self.client().await?;
        read(&client, kind, uuid, "").await
    }

    /// A document by uuid, or by the value of a unique field (a name).
    pub async fn find_document(
        &self,
        kind: &'static str,
        field: &str,
        ident: &str,
    ) -> Result<(Uuid, Doc), StoreError> {
        let client = self.client().await?;
        let uuid = match Uuid::parse_str(ident) {
            Ok(uuid) => uuid,
            Err(_) => client
                .query_opt(
                    "SELECT uuid FROM document_names WHERE kind = $1 AND field = $2 AND value = $3",
                    &[&kind, &field, &name_key(ident)],
                )
                .await
                .map_err(db_error)?
                .map(|row| row.get(0))
                .ok_or_else(|| not_found(kind, ident))?,
        };
        let doc = read(&client, kind, uuid, "").await.map_err(|e| match e {
            StoreError::DocumentNotFound { kind, .. } => not_found(kind, ident),
            e => e,
        })?;
        Ok((uuid, doc))
    }

    /// Up to `limit` documents of a kind after `marker`, in uuid order (sled's order too).
    pub async fn documents_after(
        &self,
        kind: &'static str,
        marker: Option<Uuid>,
        limit: usize,
    ) -> Result<Vec<(Uuid, Doc)>, StoreError> {
        let client = self.client().await?;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = client
            .query(
                "SELECT uuid, body::text FROM documents
                 WHERE kind = $1 AND ($2::uuid IS NULL OR uuid > $2) ORDER BY uuid LIMIT $3",
                &[&kind, &marker, &limit],
            )
            .await
            .map_err(db_error)?;
        rows.iter()
            .map(|row| {
                let uuid: Uuid = row.get(0);
                let doc = parse_json(kind, row.get::<_, &str>(1).as_bytes())?;
                Ok((uuid, doc))
            })
            .collect()
    }

    /// Adds a document; its uuid and its unique values must be free.
    pub async fn insert_document(
        &self,
        kind: &'static str,
        uuid: Uuid,
        doc: &Doc,
        unique: &[&'static str],
    ) -> Result<(), StoreError> {
        let json = serde_json::to_vec(doc).expect("a document serialises");
        check_document_sizes(kind, doc, &json, None)?;
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(db_error)?;
        let inserted = tx
            .execute(
                "INSERT INTO documents (kind, uuid, node, body) VALUES ($1, $2, $3, $4)
                 ON CONFLICT DO NOTHING",
                &[&kind, &uuid, &node_of(doc), &Json(doc)],
            )
            .await
            .map_err(db_error)?;
        if inserted == 0 {
            return Err(StoreError::DocumentTaken {
                kind,
                field: "uuid",
                value: uuid.to_string(),
            });
        }
        take_names(&tx, kind, uuid, None, doc, unique).await?;
        tx.commit().await.map_err(db_error)
    }

    /// Changes a document under its row's lock; `change` may refuse with the caller's
    /// error, and then nothing is written.
    pub async fn update_document<E: From<StoreError>>(
        &self,
        kind: &'static str,
        uuid: Uuid,
        unique: &[&'static str],
        change: impl FnOnce(&mut Doc) -> Result<(), E>,
    ) -> Result<Doc, E> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(db_error)?;
        let old = read(&tx, kind, uuid, "FOR UPDATE").await?;
        let mut new = old.clone();
        change(&mut new)?;
        let json = serde_json::to_vec(&new).expect("a document serialises");
        check_document_sizes(kind, &new, &json, Some(&old))?;
        tx.execute(
            "UPDATE documents SET node = $3, body = $4 WHERE kind = $1 AND uuid = $2",
            &[&kind, &uuid, &node_of(&new), &Json(&new)],
        )
        .await
        .map_err(db_error)?;
        take_names(&tx, kind, uuid, Some(&old), &new, unique).await?;
        tx.commit().await.map_err(db_error)?;
        Ok(new)
    }

    /// Deletes a document and its names.
    pub async fn delete_document(&self, kind: &'static str, uuid: Uuid) -> Result<(), StoreError> {
        let client = self.client().await?;
        let deleted = client
            .execute(
                "DELETE FROM documents WHERE kind = $1 AND uuid = $2",
                &[&kind, &uuid],
            )
            .await
            .map_err(db_error)?;
        if deleted == 0 {
            return Err(not_found(kind, &uuid.to_string()));
        }
        Ok(())
    }
}

/// Deletes, inside a node's deletion, the documents `cascade` names for it: those of its
/// kinds that name the node, and those its body names by uuid.
pub(super) async fn delete_attached(
    tx: &impl GenericClient,
    node: Uuid,
    body: &crate::node::NodeBody,
    cascade: &Cascade,
) -> Result<(), StoreError> {
    let kinds: Vec<&str> = cascade.of_node.iter().map(|(kind, _)| *kind).collect();
    if !kinds.is_empty() {
        tx.execute(
            "DELETE FROM documents WHERE node = $1 AND kind = ANY($2)",
            &[&node, &kinds],
        )
        .await
        .map_err(db_error)?;
    }
    for &(attr, kind, _) in &cascade.named_by {
        let named = body.attrs.get(attr).and_then(serde_json::Value::as_str);
        if let Some(uuid) = named.and_then(|u| Uuid::parse_str(u).ok()) {
            tx.execute(
                "DELETE FROM documents WHERE kind = $1 AND uuid = $2",
                &[&kind, &uuid],
            )
            .await
            .map_err(db_error)?;
        }
    }
    Ok(())
}

/// A document's row; `lock` is empty or `FOR UPDATE`.
async fn read(
    client: &impl GenericClient,
    kind: &'static str,
    uuid: Uuid,
    lock: &str,
) -> Result<Doc, StoreError> {
    let sql = format!("SELECT body::text FROM documents WHERE kind = $1 AND uuid = $2 {lock}");
    let row = client
        .query_opt(&sql, &[&kind, &uuid])
        .await
        .map_err(db_error)?
        .ok_or_else(|| not_found(kind, &uuid.to_string()))?;
    parse_json(kind, row.get::<_, &str>(0).as_bytes())
}

/// Moves a document's unique values from what `old` held to what `new` holds: each new
/// value is taken by inserting its row, or found held by another document, which refuses
/// the write (the caller's transaction then rolls back).
async fn take_names(
    tx: &impl GenericClient,
    kind: &'static str,
    uuid: Uuid,
    old: Option<&Doc>,
    new: &Doc,
    unique: &[&'static str],
) -> Result<(), StoreError> {
    let before = old.map(|d| unique_values(d, unique)).unwrap_or_default();
    let after = unique_values(new, unique);
    for (field, value) in before.iter().filter(|v| !after.contains(v)) {
        tx.execute(
            "DELETE FROM document_names WHERE kind = $1 AND field = $2 AND value = $3",
            &[&kind, field, &name_key(value)],
        )
        .await
        .map_err(db_error)?;
    }
    for (field, value) in after.iter().filter(|v| !before.contains(v)) {
        // A conflict updates nothing but returns the holder (and locks its row until
        // this transaction ends).
        let holder: Uuid = tx
            .query_one(
                "INSERT INTO document_names (kind, field, value, uuid) VALUES ($1, $2, $3, $4)
                 ON CONFLICT (kind, field, value) DO UPDATE SET uuid = document_names.uuid
                 RETURNING uuid",
                &[&kind, field, &name_key(value), &uuid],
            )
            .await
            .map_err(db_error)?
            .get(0);
        if holder != uuid {
            return Err(StoreError::DocumentTaken {
                kind,
                field,
                value: value.replace('\0', " "),
            });
        }
    }
    Ok(())
}

/// How a unique value is kept: as a JSON string, since a value of several fields is
/// joined by NUL (see `unique_values`), which PostgreSQL's text cannot hold.
pub(super) fn name_key(value: &str) -> String {
    serde_json::Value::from(value).to_string()
}

/// The node a document names in `node_uuid`, if it names one.
pub(super) fn node_of(doc: &Doc) -> Option<Uuid> {
    doc.get("node_uuid")
        .and_then(serde_json::Value::as_str)
        .and_then(|u| Uuid::parse_str(u).ok())
}

fn not_found(kind: &'static str, ident: &str) -> StoreError {
    StoreError::DocumentNotFound {
        kind,
        ident: ident.to_owned(),
    }
}
