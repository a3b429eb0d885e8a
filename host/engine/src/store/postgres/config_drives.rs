//! Each deploy's config drive in the shared store, a row beside its node's (read only by
//! the agent's download, from whichever engine serves it), gone with its node.

use uuid::Uuid;

use super::{SharedStore, db_error, violated};
use crate::config_drive::ConfigDrive;
use crate::store::StoreError;

impl SharedStore {
    /// Keeps (`Some`) or drops (`None`) a node's config drive, committed when it returns.
    pub async fn set_config_drive(
        &self,
        node: Uuid,
        drive: Option<&ConfigDrive>,
    ) -> Result<(), StoreError> {
        let client = self.client().await?;
        let written = match drive {
            Some(d) => {
                client
                    .execute(
                        "INSERT INTO config_drives (node, body) VALUES ($1, $2)
                         ON CONFLICT (node) DO UPDATE SET body = EXCLUDED.body",
                        &[&node, &d.to_bytes()],
                    )
                    .await
            }
            None => {
                client
                    .execute("DELETE FROM config_drives WHERE node = $1", &[&node])
                    .await
            }
        };
        match written {
            Ok(_) => Ok(()),
            Err(e) if violated(&e) == Some("config_drives_node_fkey") => {
                Err(StoreError::NodeNotFound(node.to_string()))
            }
            Err(e) => Err(db_error(e)),
        }
    }

    /// The config drive of a node's deploy, if it has one.
    pub async fn config_drive(&self, node: Uuid) -> Result<Option<ConfigDrive>, StoreError> {
        let client = self.client().await?;
        let row = client
            .query_opt("SELECT body FROM config_drives WHERE node = $1", &[&node])
            .await
            .map_err(db_error)?;
        Ok(row.and_then(|r| ConfigDrive::from_bytes(r.get(0))))
    }
}
