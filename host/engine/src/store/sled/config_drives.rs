//! Each deploy's config drive, apart from the node's record: up to 64 MiB that only the
//! agent's download reads, where the record is read by every heartbeat.

use uuid::Uuid;

use super::{SledStore, StoreError};
use crate::config_drive::ConfigDrive;

impl SledStore {
    /// Keeps (`Some`) or drops (`None`) a node's config drive, durably.
    pub fn set_config_drive(
        &self,
        node: Uuid,
        drive: Option<&ConfigDrive>,
    ) -> Result<(), StoreError> {
        let t = self.w()?;
        let changed = match drive {
            Some(d) => t.config_drives.insert(node.as_bytes(), d.to_bytes())?,
            None => t.config_drives.remove(node.as_bytes())?,
        };
        // Most deploys have none to drop: no flush for them.
        if drive.is_some() || changed.is_some() {
            self.flush()?;
        }
        Ok(())
    }

    /// The config drive of a node's deploy, if it has one.
    pub fn config_drive(&self, node: Uuid) -> Result<Option<ConfigDrive>, StoreError> {
        let t = self.t()?;
        let value = t.config_drives.get(node.as_bytes())?;
        Ok(value.and_then(|v| ConfigDrive::from_bytes(&v)))
    }
}
