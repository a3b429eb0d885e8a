//! `deployd:driver/agent`: the command API of the node's own ramdisk agent, at the url
//! its heartbeats reported, with its token (Ironic's `agent_client`).

use serde_json::Value;

use super::HostState;
use crate::bindings::deployd::driver::agent::Host;

impl HostState {
    /// The agent's commands endpoint, token and client, or why the driver cannot reach it.
    fn agent_endpoint(&self) -> Result<(String, String, reqwest::Client), String> {
        let session = self.services.agents.get(self.node).unwrap_or_default();
        match (session.url, session.token) {
            (Some(url), Some(token)) => {
                let client =
                    self.services
                        .agent_client(self.node, url.as_str(), &self.services.http)?;
                Ok((url.commands(), token, client))
            }
            _ => Err("the node's agent has not called back yet (no agent url or token)".into()),
        }
    }
}

/// How long one call to an agent's command API may take.
const AGENT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(20);

/// The agent's error text from an error response (`{"faultstring": …}`), or the status.
async fn agent_error(response: reqwest::Response) -> String {
    let status = response.status();
    let body: Value = response.json().await.unwrap_or(Value::Null);
    match body.get("faultstring").and_then(Value::as_str) {
        Some(fault) => format!("agent answered {status}: {fault}"),
        None => format!("agent answered {status}"),
    }
}

impl Host for HostState {
    async fn run(
        &mut self,
        name: String,
        params: String,
        wait: bool,
    ) -> wasmtime::Result<Result<String, String>> {
        let (url, token, http) = match self.agent_endpoint() {
            Ok(e) => e,
            Err(e) => return Ok(Err(e)),
        };
        let params: Value = match serde_json::from_str(&params) {
            Ok(p) => p,
            Err(e) => return Ok(Err(format!("command params are not JSON: {e}"))),
        };
        let request = http
            .post(url)
            .timeout(AGENT_TIMEOUT)
            .query(&[
                ("wait", if wait { "true" } else { "false" }),
                ("agent_token", token.as_str()),
            ])
            .json(&serde_json::json!({ "name": name, "params": params }));
        Ok(match request.send().await {
            Ok(r) if r.status().is_success() => r
                .text()
                .await
                .map_err(|e| format!("reading the agent's answer: {e}")),
            Ok(r) => Err(agent_error(r).await),
            Err(e) => Err(format!("cannot reach the agent: {e}")),
        })
    }

    async fn commands(&mut self) -> wasmtime::Result<Result<String, String>> {
        let (url, token, http) = match self.agent_endpoint() {
            Ok(e) => e,
            Err(e) => return Ok(Err(e)),
        };
        let request = http
            .get(url)
            .timeout(AGENT_TIMEOUT)
            .query(&[("agent_token", token.as_str())]);
        Ok(match request.send().await {
            Ok(r) if r.status().is_success() => match r.json::<Value>().await {
                Ok(body) => Ok(body
                    .get("commands")
                    .cloned()
                    .unwrap_or(Value::Array(vec![]))
                    .to_string()),
                Err(e) => Err(format!("the agent's command list is not JSON: {e}")),
            },
            Ok(r) => Err(agent_error(r).await),
            Err(e) => Err(format!("cannot reach the agent: {e}")),
        })
    }
}
