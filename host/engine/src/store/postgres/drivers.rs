//! Uploaded driver components in the shared store: a row per name, with the component's
//! sha256, so an engine started anywhere on the database (a new host, an empty data
//! directory) loads what was uploaded, and a row whose bytes no longer match their digest
//! is refused by name, as a changed file in a plugins directory is.

use super::{SharedStore, db_error};
use crate::store::StoreError;

/// An uploaded component as the shared store keeps it.
pub struct KeptDriver {
    pub name: String,
    /// sha256 of `body`, hex, as recorded at upload.
    pub sha256: String,
    pub body: Vec<u8>,
}

impl SharedStore {
    /// Keeps `body` as the component of driver `name` (replacing an earlier upload).
    pub async fn keep_driver(
        &self,
        name: &str,
        sha256: &str,
        body: &[u8],
    ) -> Result<(), StoreError> {
        let client = self.client().await?;
        client
            .execute(
                "INSERT INTO driver_components (name, sha256, body) VALUES ($1, $2, $3)
                 ON CONFLICT (name) DO UPDATE
                 SET sha256 = excluded.sha256, body = excluded.body, uploaded_at = now()",
                &[&name, &sha256, &body],
            )
            .await
            .map_err(db_error)?;
        Ok(())
    }

    /// Forgets driver `name`'s upload (nothing if none is kept).
    pub async fn forget_driver(&self, name: &str) -> Result<(), StoreError> {
        let client = self.client().await?;
        client
            .execute("DELETE FROM driver_components WHERE name = $1", &[&name])
            .await
            .map_err(db_error)?;
        Ok(())
    }

    /// Every kept upload, by name.
    pub async fn kept_drivers(&self) -> Result<Vec<KeptDriver>, StoreError> {
        let client = self.client().await?;
        let rows = client
            .query(
                "SELECT name, sha256, body FROM driver_components ORDER BY name",
                &[],
            )
            .await
            .map_err(db_error)?;
        Ok(rows
            .iter()
            .map(|r| KeptDriver {
                name: r.get(0),
                sha256: r.get(1),
                body: r.get(2),
            })
            .collect())
    }
}
