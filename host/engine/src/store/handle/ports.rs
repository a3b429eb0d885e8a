//! The handle's ports and config drives.

use super::*;

impl Store {
    /// Creates a port on `node` with `mac`.
    pub async fn create_port(
        &self,
        node: Uuid,
        mac: &str,
        extra: node::JsonMap,
    ) -> Result<Port, StoreError> {
        match &self.backend {
            Backend::Sled(s) => s.create_port(node, mac, extra),
            Backend::Shared(s, _) => Box::pin(s.create_port(node, mac, extra)).await,
        }
    }

    /// Stores a port as given (its uuid, MAC and name unique).
    pub async fn insert_port(&self, port: Port) -> Result<Port, StoreError> {
        match &self.backend {
            Backend::Sled(s) => s.insert_port(port),
            Backend::Shared(s, _) => Box::pin(s.insert_port(port)).await,
        }
    }

    /// Every port.
    pub async fn list_ports(&self) -> Result<Vec<Port>, StoreError> {
        match &self.backend {
            Backend::Sled(s) => s.list_ports(),
            Backend::Shared(s, _) => Box::pin(s.list_ports()).await,
        }
    }

    /// A port by uuid.
    pub async fn port(&self, uuid: Uuid) -> Result<Port, StoreError> {
        match &self.backend {
            Backend::Sled(s) => s.port(uuid),
            Backend::Shared(s, _) => Box::pin(s.port(uuid)).await,
        }
    }

    /// The port with this name, if any.
    pub async fn port_named(&self, name: &str) -> Result<Option<Uuid>, StoreError> {
        match &self.backend {
            Backend::Sled(s) => s.port_named(name),
            Backend::Shared(s, _) => Box::pin(s.port_named(name)).await,
        }
    }

    /// The port with this MAC address, if any.
    pub async fn port_with_mac(&self, mac: &str) -> Result<Option<Port>, StoreError> {
        match &self.backend {
            Backend::Sled(s) => s.port_with_mac(mac),
            Backend::Shared(s, _) => Box::pin(s.port_with_mac(mac)).await,
        }
    }

    /// The node one of `macs` belongs to, if any (an agent's lookup).
    pub async fn node_by_macs<'a>(
        &self,
        macs: impl IntoIterator<Item = &'a str>,
    ) -> Result<Option<Uuid>, StoreError> {
        match &self.backend {
            Backend::Sled(s) => s.node_by_macs(macs),
            Backend::Shared(s, _) => Box::pin(s.node_by_macs(macs)).await,
        }
    }

    /// A node's ports.
    pub async fn ports_of(&self, node: Uuid) -> Result<Vec<Port>, StoreError> {
        match &self.backend {
            Backend::Sled(s) => s.ports_of(node),
            Backend::Shared(s, _) => Box::pin(s.ports_of(node)).await,
        }
    }

    /// Deletes a port.
    pub async fn delete_port(&self, uuid: Uuid) -> Result<(), StoreError> {
        match &self.backend {
            Backend::Sled(s) => s.delete_port(uuid),
            Backend::Shared(s, _) => Box::pin(s.delete_port(uuid)).await,
        }
    }

    /// Changes a port; `change` may refuse, and then nothing is written.
    pub async fn update_port<E: From<StoreError>>(
        &self,
        uuid: Uuid,
        change: impl FnOnce(&mut Port) -> Result<(), E>,
    ) -> Result<Port, E> {
        match &self.backend {
            Backend::Sled(s) => s.update_port(uuid, change),
            Backend::Shared(s, _) => Box::pin(s.update_port(uuid, change)).await,
        }
    }

    /// Keeps (or, with `None`, forgets) the config drive of a node's deploy.
    pub async fn set_config_drive(
        &self,
        node: Uuid,
        drive: Option<&ConfigDrive>,
    ) -> Result<(), StoreError> {
        match &self.backend {
            Backend::Sled(s) => s.set_config_drive(node, drive),
            Backend::Shared(s, _) => Box::pin(s.set_config_drive(node, drive)).await,
        }
    }

    /// The config drive of a node's deploy, if it has one.
    pub async fn config_drive(&self, node: Uuid) -> Result<Option<ConfigDrive>, StoreError> {
        match &self.backend {
            Backend::Sled(s) => s.config_drive(node),
            Backend::Shared(s, _) => Box::pin(s.config_drive(node)).await,
        }
    }
}
