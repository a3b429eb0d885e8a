//! The shared store's side of a backup (see [`crate::store::backup`]): its rows read a page
//! at a time in key order, each page in one statement's snapshot, and a backup's records
//! written into an empty database in one transaction.

use std::collections::HashSet;

use base64::Engine as _;
use deadpool_postgres::GenericClient;
use tokio_postgres::types::Json;
use uuid::Uuid;

use super::documents::{name_key, node_of};
use super::history::{COLUMNS, recorded_of};
use super::rows::{code, state};
use super::{SharedStore, db_error};
use crate::store::backup_records::{BackupSummary, Cursor, Kept, PAGE, Page, Part, Record};
use crate::store::documents::unique_values;
use crate::store::{StoreError, parse_json};

/// Nodes whose events one page of the history holds.
const NODES_OF_HISTORY: i64 = 32;

fn b64() -> base64::engine::GeneralPurpose {
    base64::engine::general_purpose::STANDARD
}

impl SharedStore {
    /// The records of `at.part` after `at.after`, in key order.
    pub async fn export(&self, at: &Cursor) -> Result<Page, StoreError> {
        let client = self.client().await?;
        let after = at.after.as_ref().map(|(_, u)| *u);
        let limit = PAGE as i64;
        let page = |sql: &str| {
            format!("{sql} WHERE $1::uuid IS NULL OR {{key}} > $1 ORDER BY {{key}} LIMIT $2")
        };
        let mut records = Vec::new();
        let mut last = None;
        match at.part {
            Part::Nodes => {
                let sql = page(
                    "SELECT uuid, state, target, updated_at, progress_at, progress, body::text FROM nodes",
                )
                .replace("{key}", "uuid");
                for row in query(&client, &sql, after, limit).await? {
                    let uuid: Uuid = row.get(0);
                    let provision = Kept {
                        state: state(uuid, row.get(1))?,
                        target: row
                            .get::<_, Option<i16>>(2)
                            .map(|c| state(uuid, c))
                            .transpose()?,
                        updated_at: row
                            .get::<_, chrono::DateTime<chrono::Utc>>(3)
                            .timestamp_micros(),
                        progress_at: row
                            .get::<_, chrono::DateTime<chrono::Utc>>(4)
                            .timestamp_micros(),
                        progress: row.get::<_, i64>(5) as u64,
                    };
                    let body = crate::store::parse_body(uuid, row.get::<_, &str>(6).as_bytes())?;
                    records.push(Record::Node {
                        provision,
                        body: Box::new(body),
                    });
                    last = Some(uuid);
                }
            }
            Part::Ports => {
                let sql = page("SELECT uuid, body::text FROM ports").replace("{key}", "uuid");
                for row in query(&client, &sql, after, limit).await? {
                    records.push(Record::Port(parse_json(
                        "port",
                        row.get::<_, &str>(1).as_bytes(),
                    )?));
                    last = Some(row.get(0));
                }
            }
            Part::ConfigDrives => {
                let sql = page("SELECT node, body FROM config_drives").replace("{key}", "node");
                for row in query(&client, &sql, after, limit).await? {
                    let node: Uuid = row.get(0);
                    records.push(Record::ConfigDrive {
                        node,
                        bytes: b64().encode(row.get::<_, &[u8]>(1)),
                    });
                    last = Some(node);
                }
            }
            Part::Documents => return documents(&client, at).await,
            Part::History => {
                let nodes: Vec<Uuid> = query(
                    &client,
                    "SELECT uuid FROM nodes WHERE $1::uuid IS NULL OR uuid > $1 ORDER BY uuid LIMIT $2",
                    after,
                    NODES_OF_HISTORY,
                )
                .await?
                .iter()
                .map(|r| r.get(0))
                .collect();
                let rows = client
                    .query(
                        &format!(
                            "SELECT node, {COLUMNS} FROM history WHERE node = ANY($1) ORDER BY node, seq"
                        ),
                        &[&nodes],
                    )
                    .await
                    .map_err(db_error)?;
                for row in rows {
                    let node: Uuid = row.get(0);
                    let (micros, sequence, recorded) = recorded_of(node, &row, 1)?;
                    records.push(Record::Event {
                        node,
                        micros,
                        sequence,
                        recorded,
                    });
                }
                let next = nodes
                    .last()
                    .filter(|_| nodes.len() as i64 == NODES_OF_HISTORY);
                return Ok(Page {
                    records,
                    next: next.map(|u| (String::new(), *u)),
                });
            }
        }
        let next = last.filter(|_| records.len() == PAGE);
        Ok(Page {
            records,
            next: next.map(|u| (String::new(), u)),
        })
    }

    /// Writes a backup's `records` into this database, which must hold no nodes nor
    /// documents and have no engine serving it, in one transaction: the first error (a
    /// record the database refuses, or the backup not checking out at its end) rolls
    /// everything back.
    pub async fn import(
        &self,
        records: impl Iterator<Item = Result<Record, StoreError>>,
    ) -> Result<BackupSummary, StoreError> {
        let serving: Vec<String> = self
            .engines()
            .await?
            .into_iter()
            .filter(|e| e.alive)
            .map(|e| format!("{} (id {})", e.hostname, e.id))
            .collect();
        if !serving.is_empty() {
            return Err(StoreError::Manifest(format!(
                "engines are serving this database ({}): stop them before restoring into it",
                serving.join(", ")
            )));
        }
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(db_error)?;
        let held: bool = tx
            .query_one(
                "SELECT EXISTS (SELECT 1 FROM nodes) OR EXISTS (SELECT 1 FROM documents)",
                &[],
            )
            .await
            .map_err(db_error)?
            .get(0);
        if held {
            return Err(StoreError::Manifest(
                "the database already holds nodes or documents: restore into an empty one".into(),
            ));
        }
        let mut nodes = HashSet::new();
        let mut summary = BackupSummary::default();
        for record in records {
            let record = record?;
            match &record {
                Record::Node { provision, body } => {
                    let micros = |m| chrono::DateTime::from_timestamp_micros(m).unwrap_or_default();
                    tx.execute(
                        "INSERT INTO nodes (uuid, name, state, target, updated_at, progress_at, progress, body)
                         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
                        &[
                            &body.uuid,
                            &body.name,
                            &code(provision.state),
                            &provision.target.map(code),
                            &micros(provision.updated_at),
                            &micros(provision.progress_at),
                            &(provision.progress as i64),
                            &Json(body),
                        ],
                    )
                    .await
                    .map_err(db_error)?;
                    nodes.insert(body.uuid);
                }
                Record::Port(port) if nodes.contains(&port.node_uuid) => {
                    super::ports::insert(&tx, port).await?;
                }
                Record::ConfigDrive { node, bytes } if nodes.contains(node) => {
                    let bytes = b64().decode(bytes).map_err(|_| {
                        StoreError::Corrupt(format!("the backup's config drive of node {node}"))
                    })?;
                    tx.execute(
                        "INSERT INTO config_drives (node, body) VALUES ($1, $2)",
                        &[node, &bytes],
                    )
                    .await
                    .map_err(db_error)?;
                }
                Record::Document {
                    kind,
                    uuid,
                    unique,
                    body,
                } => {
                    tx.execute(
                        "INSERT INTO documents (kind, uuid, node, body) VALUES ($1, $2, $3, $4)",
                        &[kind, uuid, &node_of(body), &Json(body)],
                    )
                    .await
                    .map_err(db_error)?;
                    let specs: Vec<&str> = unique.iter().map(String::as_str).collect();
                    for (field, value) in unique_values(body, &specs) {
                        tx.execute(
                            "INSERT INTO document_names (kind, field, value, uuid) VALUES ($1, $2, $3, $4)",
                            &[kind, &field, &name_key(&value), uuid],
                        )
                        .await
                        .map_err(db_error)?;
                    }
                }
                Record::Event {
                    node,
                    micros,
                    sequence,
                    recorded: r,
                } if nodes.contains(node) => {
                    let at =
                        chrono::DateTime::from_timestamp_micros(*micros as i64).unwrap_or_default();
                    tx.execute(
                        "INSERT INTO history (node, seq, at, from_state, to_state, event, target, error, seconds, note)
                         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
                        &[
                            node,
                            &(*sequence as i64),
                            &at,
                            &code(r.from),
                            &code(r.to),
                            &r.event,
                            &r.target.map(code),
                            &r.error,
                            &r.seconds,
                            &r.note,
                        ],
                    )
                    .await
                    .map_err(db_error)?;
                }
                Record::Port(_) | Record::ConfigDrive { .. } | Record::Event { .. } => {
                    summary.dropped += 1;
                    continue;
                }
                Record::End(_) => continue,
            }
            summary.count(&record);
        }
        // The events restored keep their sequence (their uuids); new ones come after.
        tx.execute(
            "SELECT setval(pg_get_serial_sequence('history', 'seq'),
                           GREATEST((SELECT max(seq) FROM history), 1))",
            &[],
        )
        .await
        .map_err(db_error)?;
        tx.commit().await.map_err(db_error)?;
        Ok(summary)
    }
}

async fn query(
    client: &impl GenericClient,
    sql: &str,
    after: Option<Uuid>,
    limit: i64,
) -> Result<Vec<tokio_postgres::Row>, StoreError> {
    client.query(sql, &[&after, &limit]).await.map_err(db_error)
}

/// A page of documents, each with the unique fields that hold a value in it; in byte
/// order (`COLLATE "C"`), as sled keeps them, so both backends read a fleet alike.
async fn documents(client: &impl GenericClient, at: &Cursor) -> Result<Page, StoreError> {
    let (kind, uuid) = match &at.after {
        Some((kind, uuid)) => (kind.clone(), *uuid),
        None => (String::new(), Uuid::nil()),
    };
    let rows = client
        .query(
            "SELECT d.kind, d.uuid, d.body::text,
                    COALESCE(array_agg(n.field ORDER BY n.field COLLATE \"C\")
                             FILTER (WHERE n.field IS NOT NULL), '{}')
             FROM documents d LEFT JOIN document_names n USING (kind, uuid)
             WHERE (d.kind COLLATE \"C\", d.uuid) > ($1, $2)
             GROUP BY d.kind, d.uuid ORDER BY d.kind COLLATE \"C\", d.uuid LIMIT $3",
            &[&kind, &uuid, &(PAGE as i64)],
        )
        .await
        .map_err(db_error)?;
    let mut records = Vec::with_capacity(rows.len());
    let mut last = None;
    for row in rows {
        let (kind, uuid): (String, Uuid) = (row.get(0), row.get(1));
        records.push(Record::Document {
            kind: kind.clone(),
            uuid,
            unique: row.get(3),
            body: parse_json("document", row.get::<_, &str>(2).as_bytes())?,
        });
        last = Some((kind, uuid));
    }
    let next = last.filter(|_| records.len() == PAGE);
    Ok(Page { records, next })
}
