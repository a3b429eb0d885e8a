//! Calls for nodes of another conductor group, sent on to an engine of that group (see
//! [`crate::conductor_groups`]), as Ironic's API sends them to a conductor of the group
//! over RPC. Any engine takes any call: behind a load balancer an operator's or an agent's
//! call lands anywhere, and only the node's group's engines may act on it.
//!
//! The calls that make a node's driver act (its provision, power and boot settings, its
//! management and vendor calls, validation, virtual media) are checked before their
//! handler, on a read of the node. An agent's heartbeat is checked after its touch, which
//! returns the node's group, so the calls that are most of the traffic cost no extra read
//! (and its inspection data once its node is found by its MACs): the handler marks a node
//! of another group ([`OtherGroup`]) and the call is sent on as it came. The engine chosen for a node is the same from every engine (see
//! [`conductor_groups::engines_for`]); one that cannot be reached is passed over for the
//! next, and one that was reached but did not answer is not tried again (it may have
//! acted). A call sent on once is never sent on again: an engine of the wrong group that
//! receives one answers as Ironic does where no conductor serves the group.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tokio::time::Instant;
use uuid::Uuid;

use super::App;
use super::http::error::{ApiError, OtherGroup};
use crate::conductor_groups;
use crate::store::{EngineInfo, StoreError};

/// Names the engine a call was sent on by; a call that has it is not sent on again.
pub const FORWARDED_BY: &str = "x-deployd-forwarded-by";

/// How long the engines' list is reused before it is read again.
const ENGINES_FRESH_FOR: Duration = Duration::from_secs(1);
/// How long an engine that was sent a call has to answer it.
const ANSWER_WITHIN: Duration = Duration::from_secs(120);

/// This engine's way to the others: a client, and the engines' list read at most once a
/// second.
pub struct Peers {
    client: reqwest::Client,
    engines: Mutex<Option<(Instant, Arc<Vec<EngineInfo>>)>>,
}

impl Default for Peers {
    fn default() -> Self {
        Peers {
            client: reqwest::Client::builder()
                .timeout(ANSWER_WITHIN)
                .connect_timeout(Duration::from_secs(5))
                .build()
                .expect("a plain HTTP client builds"),
            engines: Mutex::new(None),
        }
    }
}

impl Peers {
    async fn engines(&self, app: &App) -> Result<Arc<Vec<EngineInfo>>, StoreError> {
        let cached = self
            .engines
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        if let Some((at, engines)) = cached
            && at.elapsed() < ENGINES_FRESH_FOR
        {
            return Ok(engines);
        }
        let engines = Arc::new(app.conductor.store().engines().await?);
        *self.engines.lock().unwrap_or_else(|p| p.into_inner()) =
            Some((Instant::now(), engines.clone()));
        Ok(engines)
    }

    /// Which engine each node's `conductor` names (see [`conductor_groups::Conductors`]).
    /// Without the engines' list (the store cannot be read), the other groups' nodes name
    /// none.
    pub async fn conductors(&self, app: &App) -> conductor_groups::Conductors {
        let store = app.conductor.store();
        // Sled's one engine has no others: a list shared by every call, none allocated.
        static NONE: std::sync::LazyLock<Arc<Vec<EngineInfo>>> =
            std::sync::LazyLock::new(Arc::default);
        let engines = match store.records_agents() {
            true => self.engines(app).await.unwrap_or_default(),
            false => NONE.clone(),
        };
        conductor_groups::Conductors::new(Arc::clone(store), engines)
    }

    /// Whether a live engine of `group` runs `driver` (this one, or one on the shared
    /// store): a node of that group and driver can be enrolled.
    pub async fn serve(&self, app: &App, group: &str, driver: &str) -> Result<bool, StoreError> {
        if group == app.conductor.store().conductor_group() {
            return Ok(true);
        }
        let engines = self.engines(app).await?;
        Ok(!conductor_groups::engines_for(&engines, group, Some(driver), Uuid::nil()).is_empty())
    }
}

/// What kind of call a request is, for this module.
enum Kind<'a> {
    /// Makes the node's driver act: its group is checked first.
    Step(&'a str),
    /// An agent's call (a heartbeat, its inspection data), which names its node in the
    /// body or by its MAC: sent on if its handler marks it ([`OtherGroup`]).
    Agent,
}

fn kind<'a>(method: &Method, path: &'a str) -> Option<Kind<'a>> {
    let agent = path.starts_with("/v1/heartbeat") || path == "/v1/continue_inspection";
    if agent && method == Method::POST {
        return Some(Kind::Agent);
    }
    let rest = path.strip_prefix("/v1/nodes/")?;
    let (ident, rest) = rest.split_once('/')?;
    let step = match rest {
        "states/provision" | "states/power" | "states/boot_mode" | "states/secure_boot"
        | "states/raid" | "states/console" => method == Method::PUT,
        "validate" => method == Method::GET,
        "vmedia" => method != Method::GET,
        _ => rest.starts_with("management/") || rest.starts_with("vendor_passthru"),
    };
    step.then_some(Kind::Step(ident))
}

/// The middleware (see the module's doc).
pub async fn calls(State(app): State<Arc<App>>, request: Request, next: Next) -> Response {
    // The node's name is copied only for the calls checked before their handler: the
    // others (a node's GET among them) pass with nothing allocated.
    let step = match kind(request.method(), request.uri().path()) {
        None => return next.run(request).await,
        Some(Kind::Agent) => None,
        Some(Kind::Step(ident)) => Some(ident.to_owned()),
    };
    // Where the store keeps what agents said, other engines read it: the shared store,
    // where engines of other groups may be. On sled the one engine hears every agent.
    let shared = app.conductor.store().records_agents();
    match step {
        Some(ident) => self::step(&app, &ident, request, next).await,
        None if shared => agent(&app, request, next).await,
        None => next.run(request).await,
    }
}

async fn agent(app: &App, request: Request, next: Next) -> Response {
    let (parts, body) = request.into_parts();
    let body = match axum::body::to_bytes(body, super::MAX_BODY).await {
        Ok(body) => body,
        Err(e) => return ApiError::bad_request(format!("The request's body: {e}")).into_response(),
    };
    let call = Call {
        method: parts.method.clone(),
        uri: parts.uri.clone(),
        headers: parts.headers.clone(),
        body: body.clone(),
    };
    let response = next.run(Request::from_parts(parts, Body::from(body))).await;
    match response.extensions().get::<OtherGroup>() {
        Some(other) if !call.headers.contains_key(FORWARDED_BY) => {
            let other = other.clone();
            send(app, other.node, &other.group, None, call).await
        }
        _ => response,
    }
}

async fn step(app: &App, ident: &str, request: Request, next: Next) -> Response {
    let store = app.conductor.store();
    let node = match store.find_node(ident).await {
        Ok(node) => node,
        // The handler answers for a node it cannot find, as it would without groups.
        Err(StoreError::NodeNotFound(_)) => return next.run(request).await,
        Err(e) => return ApiError::from(e).into_response(),
    };
    let group = super::node_doc::conductor_group(&node.body.attrs);
    if group == store.conductor_group() {
        return next.run(request).await;
    }
    let driver = node.body.driver.as_str();
    if !store.records_agents() || request.headers().contains_key(FORWARDED_BY) {
        return no_valid_host(Some(driver), group);
    }
    let (parts, body) = request.into_parts();
    let body = match axum::body::to_bytes(body, super::MAX_BODY).await {
        Ok(body) => body,
        Err(e) => return ApiError::bad_request(format!("The request's body: {e}")).into_response(),
    };
    let call = Call {
        method: parts.method,
        uri: parts.uri,
        headers: parts.headers,
        body,
    };
    send(app, node.uuid(), group, Some(driver), call).await
}

fn no_valid_host(driver: Option<&str>, group: &str) -> Response {
    let message = match driver {
        Some(driver) => conductor_groups::no_valid_host(driver, group),
        None => format!(
            "No valid host was found. Reason: No conductor service registered for conductor group \"{group}\"."
        ),
    };
    ApiError::not_found(message).into_response()
}

/// A call as it came, to send on.
struct Call {
    method: Method,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: Bytes,
}

/// Headers of one connection, not of the call.
const HOP_BY_HOP: &[header::HeaderName] = &[
    header::CONNECTION,
    header::TRANSFER_ENCODING,
    header::TE,
    header::TRAILER,
    header::UPGRADE,
    header::PROXY_AUTHORIZATION,
    header::CONTENT_LENGTH,
];

/// Sends `call` for `node` to the first engine of `group` that can be reached, and
/// answers with its answer.
async fn send(app: &App, node: Uuid, group: &str, driver: Option<&str>, call: Call) -> Response {
    let engines = match app.peers.engines(app).await {
        Ok(engines) => engines,
        Err(e) => return ApiError::from(e).into_response(),
    };
    let me = app.conductor.store().conductor_name();
    let fit: Vec<&EngineInfo> = conductor_groups::engines_for(&engines, group, driver, node)
        .into_iter()
        .filter(|e| e.hostname != me)
        .collect();
    let path = call.uri.path_and_query().map_or("/", |p| p.as_str());
    let mut unreachable = Vec::new();
    for engine in fit {
        let mut headers = call.headers.clone();
        for name in HOP_BY_HOP {
            headers.remove(name);
        }
        headers.insert(
            FORWARDED_BY,
            me.parse()
                .unwrap_or(header::HeaderValue::from_static("deployd")),
        );
        let sent = app
            .peers
            .client
            .request(call.method.clone(), format!("{}{path}", engine.url))
            .headers(headers)
            .body(call.body.clone())
            .send()
            .await;
        match sent {
            Ok(answer) => return relay(answer).await,
            Err(e) if e.is_connect() => {
                tracing::warn!(engine = %engine.hostname, error = %e, "an engine of conductor group {group:?} could not be reached; trying the next");
                unreachable.push(engine.hostname.clone());
            }
            Err(e) => {
                return ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    format!(
                        "Engine {} of conductor group {group:?}, which runs node {node}'s steps, did not answer: {e}",
                        engine.hostname
                    ),
                )
                .into_response();
            }
        }
    }
    match unreachable.is_empty() {
        true => no_valid_host(driver, group),
        false => ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "No engine of conductor group {group:?} could be reached for node {node} (tried {}).",
                unreachable.join(", ")
            ),
        )
        .into_response(),
    }
}

/// The other engine's answer, as this engine's.
async fn relay(answer: reqwest::Response) -> Response {
    let status = answer.status();
    let mut headers = answer.headers().clone();
    for name in HOP_BY_HOP {
        headers.remove(name);
    }
    match answer.bytes().await {
        Ok(body) => {
            let mut response = Response::new(Body::from(body));
            *response.status_mut() = status;
            *response.headers_mut() = headers;
            response
        }
        Err(e) => ApiError::new(
            StatusCode::BAD_GATEWAY,
            format!("The answer of the engine the call was sent to was cut short: {e}"),
        )
        .into_response(),
    }
}
