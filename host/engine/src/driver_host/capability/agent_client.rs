//! `deployd:driver/agent`: the command API of the node's own ramdisk agent, at the url
//! its heartbeats reported, with its token (Ironic's `agent_client`).

use serde_json::Value;

use super::bindings::deployd::driver::agent::Host;
use super::{CapabilityError, HostState, Services};
use crate::store::progress_fingerprint;

impl HostState {
    /// The agent's commands endpoint, token and client, or why the driver cannot reach it.
    fn agent_endpoint(&self) -> Result<Endpoint, CapabilityError> {
        endpoint(&self.services, self.node)
    }
}

/// The node's agent's commands endpoint, token and client, from its last heartbeat.
fn endpoint(services: &Services, node: uuid::Uuid) -> Result<Endpoint, CapabilityError> {
    let session = services
        .agents
        .read(node, |s| (s.url.clone(), s.token.clone()));
    match session.unwrap_or_default() {
        (Some(url), Some(token)) => {
            let client = services
                .agent_client(node, url.as_str(), &services.http)
                .map_err(CapabilityError::NotReady)?;
            Ok((url.commands(), token, client))
        }
        _ => Err(CapabilityError::NotReady(
            "the node's agent has not called back yet (no agent url or token)".into(),
        )),
    }
}

/// Runs a command of the node's agent for the engine's own steps (rescue), waiting for
/// its end: the agent's result object.
pub async fn run_for_engine(
    services: &Services,
    node: uuid::Uuid,
    name: &str,
    params: Value,
) -> Result<Value, CapabilityError> {
    services.store.may_act(node)?;
    let answer = run_command(
        endpoint(services, node)?,
        name.into(),
        params.to_string(),
        true,
    )
    .await?;
    serde_json::from_str(&answer)
        .map_err(|e| CapabilityError::Remote(format!("the agent's answer is not JSON: {e}")))
}

/// How long one call to an agent's command API may take.
const AGENT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(20);

/// How long a connection the agent refuses (or that cannot be made) is tried again: an
/// agent restarting its API or a network blip is not a failed deploy. Nothing reached the
/// agent then, so even a command is safe to send again.
const CONNECT_RETRY: std::time::Duration = std::time::Duration::from_secs(5);

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
    ) -> Result<String, CapabilityError> {
        // A command acts on the machine: not from an engine unsure of its lease.
        self.services.store.may_act(self.node)?;
        run_command(self.agent_endpoint()?, name, params, wait).await
    }

    async fn commands(&mut self) -> Result<String, CapabilityError> {
        let commands = list_commands(self.agent_endpoint()?).await?;
        self.command_progress(&commands).await?;
        self.image_written(&commands).await?;
        Ok(Value::Array(commands).to_string())
    }
}

/// The image's length, when the agent's image write succeeded and said what it wrote
/// (deployd's agent: `bytes_written` and `bytes_zeroed`).
fn image_written(listed: &[Value]) -> Option<u64> {
    let done = listed
        .iter()
        .find(|c| c["command_name"] == "prepare_image" && c["command_status"] == "SUCCEEDED")?;
    let result = &done["command_result"];
    Some(result["bytes_written"].as_u64()? + result["bytes_zeroed"].as_u64().unwrap_or(0))
}

impl HostState {
    /// Records the image transfer's end in the node's history when the command list is
    /// where the engine learns of it first.
    fn image_written(
        &self,
        listed: &[Value],
    ) -> impl Future<Output = Result<(), CapabilityError>> + Send + 'static {
        let (store, node) = (self.services.store.clone(), self.node);
        let transfer = image_written(listed).and_then(|bytes| {
            let now = store.clock().now();
            self.services.agents.image_written(node, bytes, now)
        });
        async move {
            if let Some(transfer) = transfer {
                store.transfer_milestone(node, &transfer).await?;
            }
            Ok(())
        }
    }

    /// The command list is the only progress the real ironic-python-agent shows: a
    /// command that starts or ends is progress for the stall timeout. An agent that
    /// reports its progress in its heartbeats (deployd's) is judged by those alone: two
    /// sources taking turns would look like progress at every turn.
    fn command_progress(
        &self,
        listed: &[Value],
    ) -> impl Future<Output = Result<(), CapabilityError>> + Send + 'static {
        let (store, node) = (self.services.store.clone(), self.node);
        let reported = self.services.agents.reports_status(node);
        // Each command's name and status, as `name\0status\n`.
        fn text(v: &Value) -> &[u8] {
            v.as_str().unwrap_or_default().as_bytes()
        }
        let mark = (!reported).then(|| {
            progress_fingerprint(listed.iter().flat_map(|c| {
                let name = text(&c["command_name"]);
                [name, b"\0", text(&c["command_status"]), b"\n"]
            }))
        });
        async move {
            if let Some(mark) = mark {
                store.report_progress(node, mark).await?;
            }
            Ok(())
        }
    }
}

/// The agent's commands url, its token, and the client that reaches it.
type Endpoint = (String, String, reqwest::Client);

/// Sends a request to the agent at `url` (its commands endpoint, without the query that
/// holds the token), trying a connection that fails again for [`CONNECT_RETRY`]; a refusal
/// comes back in the agent's own words. No error names the request's url: its query
/// holds the agent's token, which must not reach `last_error`, history or logs.
async fn send(
    url: &str,
    request: reqwest::RequestBuilder,
) -> Result<reqwest::Response, CapabilityError> {
    let started = tokio::time::Instant::now();
    let mut pause = std::time::Duration::from_millis(200);
    let response = loop {
        let attempt = request
            .try_clone()
            .expect("an agent request (a JSON body or none) can be cloned");
        match attempt.send().await {
            Ok(response) => break response,
            Err(e) if e.is_connect() && started.elapsed() + pause < CONNECT_RETRY => {
                tokio::time::sleep(pause).await;
                pause *= 2;
            }
            Err(e) => {
                return Err(CapabilityError::Remote(format!(
                    "cannot reach the agent at {url}: {}",
                    without_url(e)
                )));
            }
        }
    };
    if !response.status().is_success() {
        return Err(CapabilityError::Remote(agent_error(response).await));
    }
    Ok(response)
}

/// An HTTP client error and its causes, without the url it was for.
fn without_url(e: reqwest::Error) -> String {
    let e = e.without_url();
    let mut text = e.to_string();
    let mut cause = std::error::Error::source(&e);
    while let Some(c) = cause {
        text = format!("{text}: {c}");
        cause = c.source();
    }
    text
}

/// `POST <agent>/v1/commands/`: the command's result document, as the agent sent it.
async fn run_command(
    (url, token, http): Endpoint,
    name: String,
    params: String,
    wait: bool,
) -> Result<String, CapabilityError> {
    let params: Value = serde_json::from_str(&params)
        .map_err(|e| CapabilityError::Invalid(format!("command params are not JSON: {e}")))?;
    let request = http
        .post(&url)
        .timeout(AGENT_TIMEOUT)
        .query(&[
            ("wait", if wait { "true" } else { "false" }),
            ("agent_token", token.as_str()),
        ])
        .json(&serde_json::json!({ "name": name, "params": params }));
    send(&url, request)
        .await?
        .text()
        .await
        .map_err(|e| CapabilityError::Remote(format!("reading the agent's answer: {e}")))
}

/// `GET <agent>/v1/commands/`: the commands the agent ran this boot, read once (the
/// stall check fingerprints them, the driver gets them as a JSON list).
async fn list_commands((url, token, http): Endpoint) -> Result<Vec<Value>, CapabilityError> {
    let request = http
        .get(&url)
        .timeout(AGENT_TIMEOUT)
        .query(&[("agent_token", token.as_str())]);
    let body: Value = send(&url, request).await?.json().await.map_err(|e| {
        CapabilityError::Remote(format!("the agent's command list is not JSON: {e}"))
    })?;
    Ok(match body {
        Value::Object(mut doc) => match doc.remove("commands") {
            Some(Value::Array(commands)) => commands,
            _ => Vec::new(),
        },
        _ => Vec::new(),
    })
}
