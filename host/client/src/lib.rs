//! One client for deployd's API, as any Ironic client talks to it: a microversion header
//! on every request, optional HTTP basic auth, Ironic's error envelope decoded into its
//! `faultstring`, and python-ironicclient's retries of 409 (node locked) and 503.
//!
//! [`Client`] is async; [`blocking::Client`] wraps it for command-line use, as tokio's
//! mini-redis does.

pub mod blocking;
pub mod timeline;

use std::time::Duration;

use deployd_wire::documents::{History, HistoryEvent, Node, NodeCollection};
use deployd_wire::targets::{PowerTarget, ProvisionTarget};
use deployd_wire::{fault, version};
use serde_json::{Map, Value, json};

pub use reqwest::Method;

/// Why a call did not succeed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot reach deployd at {url}: {source}{}", if source.is_timeout() { " (timed out waiting for its answer)" } else { "" })]
    Unreachable {
        url: String,
        #[source]
        source: reqwest::Error,
    },
    /// The engine answered with an error; `fault` is its `faultstring` (or the body).
    #[error("{status}: {fault}")]
    Api { status: u16, fault: String },
    /// The engine answered, but not with the document asked for.
    #[error("the answer to {what} is not the document expected: {source}")]
    Document {
        what: String,
        #[source]
        source: serde_json::Error,
    },
}

impl ClientError {
    /// The HTTP status of an engine's refusal.
    pub fn status(&self) -> Option<u16> {
        match self {
            ClientError::Api { status, .. } => Some(*status),
            ClientError::Unreachable { .. } | ClientError::Document { .. } => None,
        }
    }
}

/// What a request carries.
/// How long a driver upload may take, its compile included (the engine answers any other
/// request within a minute).
pub const UPLOAD_TIMEOUT: Duration = Duration::from_secs(15 * 60);

#[derive(Clone, Copy, Debug)]
pub enum Payload<'a> {
    None,
    Json(&'a Value),
    /// Raw bytes (a driver component).
    Bytes(&'a [u8]),
}

impl<'a> From<Option<&'a Value>> for Payload<'a> {
    fn from(body: Option<&'a Value>) -> Payload<'a> {
        body.map_or(Payload::None, Payload::Json)
    }
}

/// An answer, whatever its status: for callers that look at refusals themselves.
#[derive(Clone, Debug)]
pub struct Answer {
    pub status: u16,
    /// The body as JSON (`Null` if empty or not JSON).
    pub body: Value,
    /// The `faultstring` of an error body, if it is one.
    pub fault: Option<String>,
}

impl Answer {
    /// The body of a success, or the refusal as an error.
    pub fn into_result(self) -> Result<Value, ClientError> {
        match self.fault {
            None => Ok(self.body),
            Some(fault) => Err(ClientError::Api {
                status: self.status,
                fault,
            }),
        }
    }
}

#[derive(Clone, Debug)]
pub struct Client {
    http: reqwest::Client,
    url: String,
    version: String,
    auth: Option<(String, String)>,
    retries: u32,
    retry_delay: Duration,
    /// How long a call (but an upload) may wait for its answer.
    timeout: Duration,
}

/// How long a pooled connection may sit idle and still be used: less than the engine's
/// own idle limit (`api.header_read_timeout`, 30 s by default), so a connection the engine
/// (or a relay between) already closed is not sent a request that then waits for nothing.
const POOL_IDLE: Duration = Duration::from_secs(10);

impl Client {
    /// A client of the engine at `url`, at the highest microversion deployd serves, that
    /// retries 409 and 503 five times a second apart (as python-ironicclient does).
    pub fn new(url: &str) -> Client {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .pool_idle_timeout(POOL_IDLE)
            .build()
            .expect("an HTTP client");
        Client {
            http,
            url: url.trim_end_matches('/').to_owned(),
            version: version::MAX.to_string(),
            auth: None,
            retries: 5,
            retry_delay: Duration::from_secs(1),
            timeout: Duration::from_secs(120),
        }
    }

    /// How long a call may wait for its answer (an upload excepted: [`UPLOAD_TIMEOUT`]);
    /// 120 s by default. An agent waits less: its next heartbeat, on a new connection,
    /// is worth more than an answer on one that may be dead.
    pub fn with_timeout(mut self, timeout: Duration) -> Client {
        self.timeout = timeout;
        self
    }

    pub fn with_basic_auth(mut self, user: &str, password: &str) -> Client {
        self.auth = Some((user.to_owned(), password.to_owned()));
        self
    }

    pub fn with_version(mut self, version: version::Version) -> Client {
        self.version = version.to_string();
        self
    }

    /// How often a 409 or 503 is tried again (0: never).
    pub fn with_retries(mut self, retries: u32, delay: Duration) -> Client {
        self.retries = retries;
        self.retry_delay = delay;
        self
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    /// Any answer, refusals included (409 and 503 retried first).
    pub async fn answer<'a>(
        &self,
        method: Method,
        path: &str,
        body: impl Into<Payload<'a>>,
    ) -> Result<Answer, ClientError> {
        let body = body.into();
        let mut attempt = 0;
        loop {
            let mut request = self
                .http
                .request(method.clone(), format!("{}{path}", self.url))
                .timeout(self.timeout)
                .header(version::HEADER, &self.version);
            if let Some((user, password)) = &self.auth {
                request = request.basic_auth(user, Some(password));
            }
            request = match body {
                Payload::None => request,
                Payload::Json(json) => request.json(json),
                // An upload and its compile take what they take; the engine cuts one that
                // stalls. This bound is only against an engine that never answers.
                Payload::Bytes(bytes) => request
                    .timeout(UPLOAD_TIMEOUT)
                    .header("content-type", "application/octet-stream")
                    .body(bytes.to_vec()),
            };
            let response = request.send().await.map_err(|e| self.unreachable(e))?;
            let status = response.status().as_u16();
            if matches!(status, 409 | 503) && attempt < self.retries {
                attempt += 1;
                tokio::time::sleep(self.retry_delay).await;
                continue;
            }
            let bytes = response.bytes().await.map_err(|e| self.unreachable(e))?;
            let fault = (status >= 400).then(|| {
                fault::faultstring(&bytes)
                    .unwrap_or_else(|| String::from_utf8_lossy(&bytes).into_owned())
            });
            return Ok(Answer {
                status,
                body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
                fault,
            });
        }
    }

    fn unreachable(&self, source: reqwest::Error) -> ClientError {
        ClientError::Unreachable {
            url: self.url.clone(),
            source,
        }
    }

    /// A successful answer's body, or the refusal as an error.
    pub async fn call<'a>(
        &self,
        method: Method,
        path: &str,
        body: impl Into<Payload<'a>>,
    ) -> Result<Value, ClientError> {
        self.answer(method, path, body).await?.into_result()
    }

    pub async fn get(&self, path: &str) -> Result<Value, ClientError> {
        self.call(Method::GET, path, Payload::None).await
    }

    pub async fn post(&self, path: &str, body: &Value) -> Result<Value, ClientError> {
        self.call(Method::POST, path, Some(body)).await
    }

    pub async fn put(&self, path: &str, body: &Value) -> Result<Value, ClientError> {
        self.call(Method::PUT, path, Some(body)).await
    }

    pub async fn patch(&self, path: &str, body: &Value) -> Result<Value, ClientError> {
        self.call(Method::PATCH, path, Some(body)).await
    }

    pub async fn delete(&self, path: &str) -> Result<Value, ClientError> {
        self.call(Method::DELETE, path, Payload::None).await
    }

    /// `GET /v1/nodes/{ident}`, decoded.
    pub async fn node(&self, ident: &str) -> Result<Node, ClientError> {
        let path = format!("/v1/nodes/{ident}");
        decode(&path, self.get(&path).await?)
    }

    /// `GET /v1/nodes/detail`: every node, with all its fields.
    pub async fn nodes(&self) -> Result<Vec<Node>, ClientError> {
        let path = "/v1/nodes/detail";
        Ok(decode::<NodeCollection>(path, self.get(path).await?)?.nodes)
    }

    /// `GET /v1/nodes/{ident}/history?detail=true`: its state changes and milestones,
    /// oldest first.
    pub async fn history(&self, ident: &str) -> Result<Vec<HistoryEvent>, ClientError> {
        let path = format!("/v1/nodes/{ident}/history?detail=true");
        Ok(decode::<History>(&path, self.get(&path).await?)?.history)
    }

    /// Asks for a provision target, with the target's own arguments (`clean_steps`, …)
    /// beside it; the engine answers 202 and works in the background.
    pub async fn provision(
        &self,
        ident: &str,
        target: ProvisionTarget,
        arguments: Map<String, Value>,
    ) -> Result<(), ClientError> {
        let mut body = arguments;
        body.insert("target".into(), json!(target));
        let path = format!("/v1/nodes/{ident}/states/provision");
        self.put(&path, &Value::Object(body)).await.map(drop)
    }

    /// Asks for a power target.
    pub async fn power(&self, ident: &str, target: PowerTarget) -> Result<(), ClientError> {
        let path = format!("/v1/nodes/{ident}/states/power");
        self.put(&path, &json!({ "target": target }))
            .await
            .map(drop)
    }
}

fn decode<T: serde::de::DeserializeOwned>(what: &str, body: Value) -> Result<T, ClientError> {
    serde_json::from_value(body).map_err(|source| ClientError::Document {
        what: what.to_owned(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A server on loopback that answers each connection with the next canned status and
    /// body, and records the request heads it got.
    async fn server(
        answers: Vec<(u16, &'static str)>,
    ) -> (String, tokio::task::JoinHandle<Vec<String>>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            let mut heads = Vec::new();
            for (status, body) in answers {
                let (mut stream, _) = listener.accept().await.unwrap();
                let mut buf = vec![0u8; 8192];
                let n = stream.read(&mut buf).await.unwrap();
                heads.push(String::from_utf8_lossy(&buf[..n]).into_owned());
                let answer = format!(
                    "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                stream.write_all(answer.as_bytes()).await.unwrap();
            }
            heads
        });
        (url, task)
    }

    #[tokio::test]
    async fn locked_answers_are_retried_and_errors_carry_their_faultstring() {
        let envelope = r#"{"error_message": "{\"faultcode\": \"Client\", \"faultstring\": \"Node n could not be found.\", \"debuginfo\": null}"}"#;
        let (url, server) = server(vec![
            (409, "{}"),
            (503, "{}"),
            (200, r#"{"ok": 1}"#),
            (404, envelope),
        ])
        .await;
        let client = Client::new(&url)
            .with_basic_auth("admin", "pw")
            .with_retries(2, Duration::from_millis(1));
        assert_eq!(client.get("/v1/nodes").await.unwrap()["ok"], 1);
        let refused = client.get("/v1/nodes/n").await.unwrap_err();
        assert_eq!(refused.status(), Some(404));
        assert_eq!(refused.to_string(), "404: Node n could not be found.");
        let heads = server.await.unwrap();
        assert_eq!(heads.len(), 4, "two retries, then the 200, then the 404");
        for head in heads {
            let head = head.to_ascii_lowercase();
            assert!(
                head.contains(&format!("x-openstack-ironic-api-version: {}", version::MAX)),
                "{head}"
            );
            assert!(head.contains("authorization: basic "), "{head}");
        }
    }

    /// An engine (or a relay) that takes a request and never answers: the call ends at
    /// the client's timeout as unreachable, instead of the default two minutes.
    #[tokio::test(start_paused = true)]
    async fn a_call_without_an_answer_ends_at_its_timeout() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let silent = tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            let mut buf = vec![0u8; 8192];
            let _ = stream.read(&mut buf).await;
            std::future::pending::<()>().await;
        });
        let client = Client::new(&url)
            .with_retries(0, Duration::ZERO)
            .with_timeout(Duration::from_secs(20));
        let started = tokio::time::Instant::now();
        let e = client.get("/v1").await.unwrap_err();
        let ClientError::Unreachable { source, .. } = &e else {
            panic!("{e}");
        };
        assert!(source.is_timeout(), "{e}");
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{:?}",
            started.elapsed()
        );
        silent.abort();
    }

    #[test]
    fn the_blocking_client_needs_no_runtime_and_reports_an_unreachable_engine() {
        let client = blocking::Client::new(Client::new("http://127.0.0.1:9"));
        let e = client.get("/v1").unwrap_err();
        assert!(matches!(e, ClientError::Unreachable { .. }), "{e}");
        assert!(
            e.to_string()
                .starts_with("cannot reach deployd at http://127.0.0.1:9")
        );
    }
}
