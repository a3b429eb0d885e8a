//! The shared store's schema, versioned: each migration is applied once, in order, in one
//! transaction with the version it brings, under an advisory lock so that engines
//! starting together do not race. A database migrated by a newer deployd is refused, not
//! read: its rows may mean what this deployd cannot know.

use deadpool_postgres::Object;

use super::db_error;
use crate::store::StoreError;

/// Each migration's statements; the schema's version is how many have been applied.
const MIGRATIONS: &[&str] = &[
    // 1: engines and their leases, nodes with their hot columns, history.
    r#"
    CREATE TABLE engines (
        id bigserial PRIMARY KEY,
        epoch bigint NOT NULL DEFAULT 1,
        hostname text NOT NULL,
        conductor_group text NOT NULL DEFAULT '',
        drivers text[] NOT NULL DEFAULT '{}',
        started_at timestamptz NOT NULL DEFAULT now(),
        lease_until timestamptz NOT NULL,
        dead_at timestamptz,
        dead_by bigint
    );
    -- Room on every page for a touch's new row version: a heap-only update.
    CREATE TABLE nodes (
        uuid uuid PRIMARY KEY,
        name text UNIQUE,
        state smallint NOT NULL,
        target smallint,
        updated_at timestamptz NOT NULL,
        deadline timestamptz,
        due timestamptz,
        progress_at timestamptz NOT NULL,
        progress bigint NOT NULL DEFAULT 0,
        callback_ms bigint,
        stall_ms bigint,
        owner bigint,
        owner_epoch bigint,
        body jsonb NOT NULL
    ) WITH (fillfactor = 70);
    CREATE INDEX nodes_due ON nodes (due) WHERE due IS NOT NULL;
    CREATE TABLE history (
        node uuid NOT NULL,
        seq bigserial,
        at timestamptz NOT NULL,
        from_state smallint NOT NULL,
        to_state smallint NOT NULL,
        event text NOT NULL,
        target smallint,
        error text,
        seconds double precision NOT NULL,
        note text,
        engine bigint,
        PRIMARY KEY (node, seq)
    );
    "#,
    // 2: ports, their MAC and name unique across the fleet; a port goes with its node.
    r#"
    CREATE TABLE ports (
        uuid uuid PRIMARY KEY,
        node uuid NOT NULL REFERENCES nodes (uuid) ON DELETE CASCADE,
        address text NOT NULL UNIQUE,
        name text UNIQUE,
        body jsonb NOT NULL
    );
    CREATE INDEX ports_node ON ports (node);
    "#,
    // 3: each deploy's config drive, beside its node's row and gone with it.
    r#"
    CREATE TABLE config_drives (
        node uuid PRIMARY KEY REFERENCES nodes (uuid) ON DELETE CASCADE,
        body bytea NOT NULL
    );
    "#,
    // 4: documents by kind and uuid, their unique values a row each; the node a document
    // names, to find what goes with a deleted node.
    r#"
    CREATE TABLE documents (
        kind text NOT NULL,
        uuid uuid NOT NULL,
        node uuid,
        body jsonb NOT NULL,
        PRIMARY KEY (kind, uuid)
    );
    CREATE INDEX documents_node ON documents (node) WHERE node IS NOT NULL;
    CREATE TABLE document_names (
        kind text NOT NULL,
        field text NOT NULL,
        value text NOT NULL,
        uuid uuid NOT NULL,
        PRIMARY KEY (kind, field, value),
        FOREIGN KEY (kind, uuid) REFERENCES documents (kind, uuid) ON DELETE CASCADE
    );
    CREATE INDEX document_names_of ON document_names (kind, uuid);
    "#,
    // 5: uploaded driver components by name, each with its sha256: what every engine loads.
    r#"
    CREATE TABLE driver_components (
        name text PRIMARY KEY,
        sha256 text NOT NULL,
        body bytea NOT NULL,
        uploaded_at timestamptz NOT NULL DEFAULT now()
    );
    "#,
    // 6: driver components by version (sha256 and limits), so a node pinned to a version
    // finds it on any engine; each name's active version names one.
    r#"
    CREATE TABLE driver_versions (
        id text PRIMARY KEY,
        name text NOT NULL,
        sha256 text NOT NULL,
        limits jsonb NOT NULL DEFAULT '{}',
        body bytea NOT NULL,
        uploaded_at timestamptz NOT NULL DEFAULT now()
    );
    CREATE INDEX driver_versions_name ON driver_versions (name);
    INSERT INTO driver_versions (id, name, sha256, body, uploaded_at)
        SELECT sha256, name, sha256, body, uploaded_at FROM driver_components
        ON CONFLICT (id) DO NOTHING;
    ALTER TABLE driver_components ADD COLUMN version text REFERENCES driver_versions (id);
    UPDATE driver_components SET version = sha256;
    ALTER TABLE driver_components ALTER COLUMN version SET NOT NULL, DROP COLUMN body;
    "#,
    // 7: what each node's agent last said in a heartbeat (any engine's), beside the hot
    // columns a touch writes; not indexed, so the touch stays a heap-only update.
    r#"
    ALTER TABLE nodes ADD COLUMN agent jsonb;
    "#,
    // 8: each engine's highest epoch whose claims were all taken over (or found none): the
    // look for orphaned claims reads the nodes only for engines with a dead epoch above it.
    r#"
    ALTER TABLE engines ADD COLUMN settled_epoch bigint NOT NULL DEFAULT 0;
    "#,
    // 9: where each engine's API answers other engines, which send it the calls for the
    // nodes of its conductor group.
    r#"
    ALTER TABLE engines ADD COLUMN url text NOT NULL DEFAULT '';
    "#,
];

/// The version this deployd writes.
pub const SCHEMA_VERSION: i32 = MIGRATIONS.len() as i32;

/// An arbitrary key, the same in every engine, for the migration's advisory lock.
const MIGRATION_LOCK: i64 = 0x0064_6570_6c6f_7964; // "deployd"

/// Brings the schema to [`SCHEMA_VERSION`]; returns the versions before and after. A
/// schema already current is only read, so an engine may serve as a role that cannot
/// change it (see the README's least-privilege role).
pub(super) async fn migrate(client: &mut Object) -> Result<(i32, i32), StoreError> {
    let current = client
        .query_opt("SELECT version FROM deployd_schema", &[])
        .await;
    match current {
        Ok(Some(row)) => match row.get::<_, i32>(0) {
            found if found > SCHEMA_VERSION => return Err(StoreError::Schema { found }),
            found if found == SCHEMA_VERSION => return Ok((found, found)),
            _ => {}
        },
        // No schema yet (the table is missing): it is made below.
        Ok(None) => {}
        Err(e) if e.code() == Some(&tokio_postgres::error::SqlState::UNDEFINED_TABLE) => {}
        Err(e) => return Err(db_error(e)),
    }
    let tx = client.transaction().await.map_err(db_error)?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
        .await
        .map_err(db_error)?;
    tx.batch_execute(
        "SET LOCAL client_min_messages = warning;
         CREATE TABLE IF NOT EXISTS deployd_schema (
             one boolean PRIMARY KEY DEFAULT true CHECK (one),
             version integer NOT NULL
         );
         INSERT INTO deployd_schema (version) VALUES (0) ON CONFLICT DO NOTHING;",
    )
    .await
    .map_err(db_error)?;
    let found: i32 = tx
        .query_one("SELECT version FROM deployd_schema", &[])
        .await
        .map_err(db_error)?
        .get(0);
    if found > SCHEMA_VERSION {
        return Err(StoreError::Schema { found });
    }
    for sql in &MIGRATIONS[found.max(0) as usize..] {
        tx.batch_execute(sql).await.map_err(db_error)?;
    }
    tx.execute("UPDATE deployd_schema SET version = $1", &[&SCHEMA_VERSION])
        .await
        .map_err(db_error)?;
    tx.commit().await.map_err(db_error)?;
    Ok((found, SCHEMA_VERSION))
}
