//! Ports in the shared store: a row each, its MAC and its name unique across the fleet by
//! the table's own constraints, so two engines creating ports for one MAC cannot both win.
//! A port goes with its node (`ON DELETE CASCADE`).

use deadpool_postgres::GenericClient;
use tokio_postgres::types::Json;
use uuid::Uuid;

use super::rows::stamp;
use super::{SharedStore, db_error, now, violated};
use crate::node::{self, JsonMap, Port};
use crate::store::ports::{changed, inserted, name_of, new_port};
use crate::store::{StoreError, parse_json};

impl SharedStore {
    /// Adds a port (a MAC address) to a node. MACs are unique across the fleet.
    pub async fn create_port(
        &self,
        node: Uuid,
        mac: &str,
        extra: JsonMap,
    ) -> Result<Port, StoreError> {
        let client = self.client().await?;
        let port = new_port(node, mac, extra, now(&client).await?)?;
        insert(&client, &port).await?;
        Ok(port)
    }

    /// Adds a port built by the caller (its address is normalised, its times set here).
    pub async fn insert_port(&self, port: Port) -> Result<Port, StoreError> {
        let client = self.client().await?;
        let port = inserted(port, now(&client).await?)?;
        insert(&client, &port).await?;
        Ok(port)
    }

    /// Every port, in uuid order.
    pub async fn list_ports(&self) -> Result<Vec<Port>, StoreError> {
        self.ports_where("TRUE", &[]).await
    }

    pub async fn port(&self, uuid: Uuid) -> Result<Port, StoreError> {
        self.ports_where("uuid = $1", &[&uuid])
            .await?
            .pop()
            .ok_or_else(|| StoreError::PortNotFound(uuid.to_string()))
    }

    /// The port with this name, if one has it.
    pub async fn port_named(&self, name: &str) -> Result<Option<Uuid>, StoreError> {
        let client = self.client().await?;
        let row = client
            .query_opt("SELECT uuid FROM ports WHERE name = $1", &[&name])
            .await
            .map_err(db_error)?;
        Ok(row.map(|r| r.get(0)))
    }

    /// The port with this MAC address (normalised), if one has it.
    pub async fn port_with_mac(&self, mac: &str) -> Result<Option<Port>, StoreError> {
        Ok(self.ports_where("address = $1", &[&mac]).await?.pop())
    }

    /// The node that owns the first of these MAC addresses a port has, as agent lookup
    /// needs. Addresses that are not MACs are ignored (Ironic drops them with a warning).
    pub async fn node_by_macs<'a>(
        &self,
        macs: impl IntoIterator<Item = &'a str>,
    ) -> Result<Option<Uuid>, StoreError> {
        let macs: Vec<String> = macs
            .into_iter()
            .filter_map(|m| node::normalize_mac(m).ok())
            .collect();
        let client = self.client().await?;
        let rows = client
            .query(
                "SELECT address, node FROM ports WHERE address = ANY($1)",
                &[&macs],
            )
            .await
            .map_err(db_error)?;
        Ok(macs.iter().find_map(|mac| {
            rows.iter()
                .find(|r| r.get::<_, &str>(0) == mac)
                .map(|r| r.get(1))
        }))
    }

    /// A node's ports, in uuid order.
    pub async fn ports_of(&self, node: Uuid) -> Result<Vec<Port>, StoreError> {
        self.ports_where("node = $1", &[&node]).await
    }

    pub async fn delete_port(&self, uuid: Uuid) -> Result<(), StoreError> {
        let client = self.client().await?;
        let deleted = client
            .execute("DELETE FROM ports WHERE uuid = $1", &[&uuid])
            .await
            .map_err(db_error)?;
        if deleted == 0 {
            return Err(StoreError::PortNotFound(uuid.to_string()));
        }
        Ok(())
    }

    /// Changes a port under its row's lock; a new address, name or node is checked by the
    /// table's constraints in the same statement.
    pub async fn update_port<E: From<StoreError>>(
        &self,
        uuid: Uuid,
        change: impl FnOnce(&mut Port) -> Result<(), E>,
    ) -> Result<Port, E> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(db_error)?;
        let row = tx
            .query_opt(
                "SELECT body::text, now() FROM ports WHERE uuid = $1 FOR UPDATE",
                &[&uuid],
            )
            .await
            .map_err(db_error)?
            .ok_or_else(|| StoreError::PortNotFound(uuid.to_string()))?;
        let old: Port = parse_json("port", row.get::<_, &str>(0).as_bytes())?;
        let mut port = old.clone();
        change(&mut port)?;
        changed(uuid, &mut port, &old, stamp(row.get(1)))?;
        let written = tx
            .execute(
                "UPDATE ports SET node = $2, address = $3, name = $4, body = $5 WHERE uuid = $1",
                &[
                    &uuid,
                    &port.node_uuid,
                    &port.address,
                    &name_of(&port),
                    &Json(&port),
                ],
            )
            .await;
        if let Err(e) = written {
            // The holder of what was taken is read outside the failed transaction.
            tx.rollback().await.map_err(db_error)?;
            return Err(refusal(&client, e, &port).await.into());
        }
        tx.commit().await.map_err(db_error)?;
        Ok(port)
    }

    async fn ports_where(
        &self,
        condition: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<Vec<Port>, StoreError> {
        let client = self.client().await?;
        let rows = client
            .query(
                &format!("SELECT body::text FROM ports WHERE {condition} ORDER BY uuid"),
                params,
            )
            .await
            .map_err(db_error)?;
        rows.iter()
            .map(|r| parse_json("port", r.get::<_, &str>(0).as_bytes()))
            .collect()
    }
}

/// Inserts a port; a taken MAC, name or uuid, or a missing node, is refused by name.
pub(super) async fn insert(client: &impl GenericClient, port: &Port) -> Result<(), StoreError> {
    let inserted = client
        .execute(
            "INSERT INTO ports (uuid, node, address, name, body) VALUES ($1, $2, $3, $4, $5)",
            &[
                &port.uuid,
                &port.node_uuid,
                &port.address,
                &name_of(port),
                &Json(port),
            ],
        )
        .await;
    match inserted {
        Ok(_) => Ok(()),
        Err(e) => Err(refusal(client, e, port).await),
    }
}

/// What a refused write of `port` means: the constraint it broke, with the holder of a
/// taken MAC or name.
async fn refusal(client: &impl GenericClient, e: tokio_postgres::Error, port: &Port) -> StoreError {
    let holder = |column: &'static str, value: String| async move {
        let sql = format!("SELECT uuid FROM ports WHERE {column} = $1");
        let row = client.query_opt(&sql, &[&value]).await.ok().flatten();
        (value, row.map_or(Uuid::nil(), |r| r.get(0)))
    };
    match violated(&e) {
        Some("ports_address_key") => {
            let (mac, port) = holder("address", port.address.clone()).await;
            StoreError::MacTaken { mac, port }
        }
        Some("ports_name_key") => {
            let (name, port) = holder("name", name_of(port).unwrap_or_default().into()).await;
            StoreError::PortNameTaken { name, port }
        }
        Some("ports_node_fkey") => StoreError::NodeNotFound(port.node_uuid.to_string()),
        Some("ports_pkey") => StoreError::DocumentTaken {
            kind: "port",
            field: "uuid",
            value: port.uuid.to_string(),
        },
        _ => db_error(e),
    }
}
