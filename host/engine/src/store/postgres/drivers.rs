//! Uploaded driver components in the shared store, by version: every version a node's
//! flow may be pinned to is a row (its id, the component's sha256, the limits it runs
//! under, its bytes), and each driver name's active version is a row naming one. So an
//! engine started anywhere on the database (a new host, an empty data directory) loads
//! what was uploaded, an engine that meets a node pinned to a version it has not loaded
//! fetches it, and a row whose bytes no longer match their digest is refused by name, as
//! a changed file in a plugins directory is. Each upload and unload notifies
//! `deployd_drivers` with the driver's name at its commit: every engine listening loads or
//! unloads it in turn.

use serde_json::Value;
use tokio_postgres::types::Json;

use super::{SharedStore, db_error};
use crate::store::StoreError;

/// The channel uploads and unloads are notified on, with the driver's name.
pub(super) const CHANNEL: &str = "deployd_drivers";

/// An uploaded component version as the shared store keeps it.
#[derive(Clone, Debug, PartialEq)]
pub struct KeptDriver {
    pub name: String,
    /// The version's id: the sha256, with the limits when they are not the default ones.
    pub version: String,
    /// sha256 of `body`, hex, as recorded at upload.
    pub sha256: String,
    /// The limits its calls run under (the driver host's `Limits`, as JSON).
    pub limits: Value,
    pub body: Vec<u8>,
}

const COLUMNS: &str = "v.name, v.id, v.sha256, v.limits, v.body";

impl SharedStore {
    /// Keeps `driver` as the active version of its name (an earlier version stays for the
    /// flows pinned to it), and tells every engine.
    pub async fn keep_driver(&self, driver: &KeptDriver) -> Result<(), StoreError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(db_error)?;
        tx.execute(
            "INSERT INTO driver_versions (id, name, sha256, limits, body)
             VALUES ($1, $2, $3, $4, $5) ON CONFLICT (id) DO NOTHING",
            &[
                &driver.version,
                &driver.name,
                &driver.sha256,
                &Json(&driver.limits),
                &driver.body,
            ],
        )
        .await
        .map_err(db_error)?;
        tx.execute(
            "INSERT INTO driver_components (name, sha256, version) VALUES ($1, $2, $3)
             ON CONFLICT (name) DO UPDATE
             SET sha256 = excluded.sha256, version = excluded.version, uploaded_at = now()",
            &[&driver.name, &driver.sha256, &driver.version],
        )
        .await
        .map_err(db_error)?;
        notify(&tx, &driver.name).await?;
        tx.commit().await.map_err(db_error)
    }

    /// Forgets driver `name`'s uploads, every version of it (nothing if none is kept),
    /// and tells every engine.
    pub async fn forget_driver(&self, name: &str) -> Result<(), StoreError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(db_error)?;
        tx.execute("DELETE FROM driver_components WHERE name = $1", &[&name])
            .await
            .map_err(db_error)?;
        tx.execute("DELETE FROM driver_versions WHERE name = $1", &[&name])
            .await
            .map_err(db_error)?;
        notify(&tx, name).await?;
        tx.commit().await.map_err(db_error)
    }

    /// Every driver's active upload, by name.
    pub async fn kept_drivers(&self) -> Result<Vec<KeptDriver>, StoreError> {
        let client = self.client().await?;
        let rows = client
            .query(
                &format!(
                    "SELECT {COLUMNS} FROM driver_components c
                     JOIN driver_versions v ON v.id = c.version ORDER BY c.name"
                ),
                &[],
            )
            .await
            .map_err(db_error)?;
        Ok(rows.iter().map(kept).collect())
    }

    /// Driver `name`'s active upload, if one is kept.
    pub async fn kept_driver(&self, name: &str) -> Result<Option<KeptDriver>, StoreError> {
        let client = self.client().await?;
        let row = client
            .query_opt(
                &format!(
                    "SELECT {COLUMNS} FROM driver_components c
                     JOIN driver_versions v ON v.id = c.version WHERE c.name = $1"
                ),
                &[&name],
            )
            .await
            .map_err(db_error)?;
        Ok(row.as_ref().map(kept))
    }

    /// An uploaded version by its id, active or not.
    pub async fn driver_version(&self, id: &str) -> Result<Option<KeptDriver>, StoreError> {
        let client = self.client().await?;
        let row = client
            .query_opt(
                &format!("SELECT {COLUMNS} FROM driver_versions v WHERE v.id = $1"),
                &[&id],
            )
            .await
            .map_err(db_error)?;
        Ok(row.as_ref().map(kept))
    }
}

async fn notify(tx: &deadpool_postgres::Transaction<'_>, name: &str) -> Result<(), StoreError> {
    tx.execute("SELECT pg_notify($1, $2)", &[&CHANNEL, &name])
        .await
        .map_err(db_error)?;
    Ok(())
}

fn kept(r: &tokio_postgres::Row) -> KeptDriver {
    KeptDriver {
        name: r.get(0),
        version: r.get(1),
        sha256: r.get(2),
        limits: r.get::<_, Json<Value>>(3).0,
        body: r.get(4),
    }
}
