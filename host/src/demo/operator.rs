//! The demo's operator: plain calls to the engine's HTTP API, as any Ironic client would
//! make them.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, bail};
use deployd_client::{Client, Method};
use serde_json::{Value, json};

use crate::lab::Enrollment;

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
        let node = self
            .call(
                Method::POST,
                "/v1/nodes",
                Some(json!({
                    "name": m.name,
                    "driver": driver,
                    "driver_info": {
                        "redfish_address": m.redfish_address,
                        "redfish_system_id": m.redfish_system_id,
                    },
                    "instance_info": {
                        "image_source": image.display().to_string(),
                        "image_os_hash_algo": "sha256",
                        "image_os_hash_value": sha256,
                    },
                })),
            )
            .await?;
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

    pub async fn provision(&self, node: &str, target: &str) -> anyhow::Result<()> {
        let path = format!("/v1/nodes/{node}/states/provision");
        self.call(Method::PUT, &path, Some(json!({ "target": target })))
            .await
            .map(|_| ())
    }

    /// Asks for `target` and waits until the node is in `state`.
    pub async fn walk(&self, node: &str, target: &str, state: &str) -> anyhow::Result<()> {
        self.provision(node, target).await?;
        for _ in 0..600 {
            let n = self
                .call(Method::GET, &format!("/v1/nodes/{node}"), None)
                .await?;
            if n["provision_state"] == state {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        bail!("node {node} did not reach {state}")
    }

    pub async fn nodes(&self) -> anyhow::Result<Vec<Value>> {
        let list = self.call(Method::GET, "/v1/nodes/detail", None).await?;
        Ok(list["nodes"].as_array().cloned().unwrap_or_default())
    }
}
