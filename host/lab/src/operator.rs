//! An operator for lab machines (the demo's and the fleet bench's): plain calls to the engine's HTTP API, as any Ironic client would
//! make them.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, bail};
use deployd_client::{Client, Method, Payload};
use deployd_wire::documents::{HistoryEvent, Node};
use deployd_wire::state_machine::ProvisionState;
use deployd_wire::targets::ProvisionTarget;
use serde_json::{Map, Value, json};

use crate::Enrollment;

pub struct Operator {
    client: Client,
}

impl Operator {
    /// Retries a locked node (409) every 100 ms, 50 times: the step that held it ends
    /// within moments.
    pub fn new(url: &str) -> Operator {
        Operator {
            client: Client::new(url).with_retries(50, Duration::from_millis(100)),
        }
    }

    async fn call(&self, method: Method, path: &str, body: Option<Value>) -> anyhow::Result<Value> {
        self.client
            .call(method.clone(), path, body.as_ref())
            .await
            .with_context(|| format!("{method} {path}"))
    }

    /// Creates the node (driver_info pointing at its BMC, the image as a local path) and
    /// its port; returns the node's uuid.
    pub async fn enroll(
        &self,
        m: &Enrollment,
        driver: &str,
        image: &Path,
        sha256: &str,
    ) -> anyhow::Result<String> {
        self.enroll_with(m, json!({"driver": driver}), image, sha256)
            .await
    }

    /// [`Operator::enroll`] with more of the node's fields (`driver`, its interfaces,
    /// more `driver_info`, which is merged with the BMC's).
    pub async fn enroll_with(
        &self,
        m: &Enrollment,
        fields: Value,
        image: &Path,
        sha256: &str,
    ) -> anyhow::Result<String> {
        let mut body = json!({
            "name": m.name,
            "driver_info": {
                "redfish_address": m.redfish_address,
                "redfish_system_id": m.redfish_system_id,
            },
            "instance_info": {
                "image_source": image.display().to_string(),
                "image_os_hash_algo": "sha256",
                "image_os_hash_value": sha256,
            },
        });
        if let Value::Object(fields) = fields {
            for (key, value) in fields {
                match (body.get_mut(&key), value) {
                    (Some(Value::Object(have)), Value::Object(more)) => have.extend(more),
                    (_, value) => {
                        body[key] = value;
                    }
                }
            }
        }
        let node = self.call(Method::POST, "/v1/nodes", Some(body)).await?;
        let uuid = node["uuid"]
            .as_str()
            .context("a node has a uuid")?
            .to_owned();
        self.call(
            Method::POST,
            "/v1/ports",
            Some(json!({"node_uuid": uuid, "address": m.mac})),
        )
        .await?;
        Ok(uuid)
    }

    pub async fn provision(&self, node: &str, target: ProvisionTarget) -> anyhow::Result<()> {
        self.client
            .provision(node, target, Map::new())
            .await
            .with_context(|| format!("{target} {node}"))
    }

    /// Asks for `target` and waits until the node is in `state`.
    pub async fn walk(
        &self,
        node: &str,
        target: ProvisionTarget,
        state: ProvisionState,
    ) -> anyhow::Result<()> {
        self.provision(node, target).await?;
        for _ in 0..600 {
            if self.client.node(node).await?.provision_state == Some(state) {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        bail!("node {node} did not reach {state}")
    }

    /// Loads a driver component into the engine; its document as the engine answers.
    pub async fn load_driver(&self, component: &[u8]) -> anyhow::Result<Value> {
        let path = "/v1/deployd/drivers";
        Ok(self
            .client
            .call(Method::POST, path, Payload::Bytes(component))
            .await?)
    }

    /// Waits until no flow runs on the node (it has no target state) or its flow failed
    /// (a failed state keeps its target, as in Ironic), at most `limit`.
    pub async fn settled(&self, node: &str, limit: Duration) -> anyhow::Result<Node> {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let n = self.client.node(node).await?;
            if n.is_settled() || n.provision_state.is_some_and(|s| s.is_failed()) {
                return Ok(n);
            }
            if tokio::time::Instant::now() >= deadline {
                bail!(
                    "node {node} is still in {} after {limit:?}",
                    n.provision_state.map_or("?", |s| s.as_str())
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The node's history: its state changes and milestones, oldest first.
    pub async fn history(&self, node: &str) -> anyhow::Result<Vec<HistoryEvent>> {
        Ok(self.client.history(node).await?)
    }

    pub async fn nodes(&self) -> anyhow::Result<Vec<Node>> {
        Ok(self.client.nodes().await?)
    }
}
