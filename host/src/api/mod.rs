//! The HTTP API: Ironic's v1 subset for operators and ramdisk agents, on hyper via axum.
//!
//! | module | routes |
//! |---|---|
//! | [`root`] | `GET /`, `GET /v1` (discovery) |
//! | [`nodes`] | `/v1/nodes…`: create, list, show, patch, delete, states, provision, power, validate |
//! | [`ports`] | `/v1/ports…`, `/v1/nodes/{node}/ports` |
//! | [`drivers`] | `GET /v1/drivers…`; the extension `/v1/deployd/drivers` to load and unload |
//! | [`agent`] | `GET /v1/lookup`, `POST /v1/heartbeat/{node}` |
//! | [`metrics`] | `GET /metrics` (Prometheus) |
//!
//! Every answer carries the microversion headers ([`version`]) and an
//! `openstack-request-id`; errors are in Ironic's shape ([`error`]); operator routes pass
//! through [`auth`], the agent routes are gated by agent tokens instead.

pub mod agent;
mod allocations;
pub mod auth;
pub mod drivers;
pub mod error;
mod inspection_rules;
pub mod listener;
mod listing;
mod metrics;
mod node_doc;
mod node_extras;
mod node_groups;
mod node_hardware;
mod node_history;
mod node_list;
pub mod nodes;
pub mod ports;
mod resources;
pub mod root;
mod runbooks;
pub mod schema;
mod stored;
pub mod version;
mod view;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{DefaultBodyLimit, Request};
use axum::http::HeaderValue;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use tower_http::trace::TraceLayer;

use crate::conductor::Conductor;

/// What the handlers share.
pub struct App {
    pub conductor: Arc<Conductor>,
    pub auth: auth::Auth,
    /// `config.heartbeat_timeout` given to agents at lookup (Ironic's
    /// `[api]ramdisk_heartbeat_timeout`).
    pub ramdisk_heartbeat_timeout: u64,
    /// Where uploaded drivers are kept so a restart loads them again.
    pub plugins_dir: Option<std::path::PathBuf>,
    /// `http://host:port` as clients reach the engine: the base of every link and
    /// `Location` (never the request's `Host` header, which a client chooses).
    pub public_url: String,
    /// Bounds the node lists worked on at once (see [`node_list`]).
    pub lists: Arc<tokio::sync::Semaphore>,
    /// When this engine started (its conductor's `created_at`).
    pub started_at: crate::clock::Timestamp,
}

impl App {
    pub fn new(
        conductor: Arc<Conductor>,
        auth: auth::Auth,
        ramdisk_heartbeat_timeout: u64,
        plugins_dir: Option<std::path::PathBuf>,
        public_url: String,
    ) -> App {
        App {
            started_at: conductor.store.clock().now(),
            conductor,
            auth,
            ramdisk_heartbeat_timeout,
            plugins_dir,
            public_url,
            lists: node_list::permits(),
        }
    }
}

pub type State = axum::extract::State<Arc<App>>;

/// JSON bodies are small; a driver upload may be larger (it has its own limit).
pub const MAX_BODY: usize = 1 << 20;
pub const MAX_DRIVER: usize = 64 << 20;

/// The resources served by [`resources`]' generic handlers.
const RESOURCES: &[&resources::Resource] = &[
    &stored::CHASSIS,
    &stored::PORTGROUP,
    &stored::DEPLOY_TEMPLATE,
    &stored::VOLUME_CONNECTOR,
    &stored::VOLUME_TARGET,
    &allocations::ALLOCATION,
    &runbooks::RUNBOOK,
    &inspection_rules::INSPECTION_RULE,
];

pub fn router(app: Arc<App>) -> Router {
    Router::new()
        .merge(root::routes())
        .merge(nodes::routes())
        .merge(ports::routes())
        .merge(drivers::routes())
        .merge(agent::routes())
        .merge(resources::routes(RESOURCES))
        .merge(node_extras::routes())
        .merge(runbooks::routes())
        .merge(node_hardware::routes())
        .merge(node_groups::routes())
        .merge(node_history::routes())
        .merge(metrics::routes())
        .fallback(unrouted)
        .method_not_allowed_fallback(not_allowed)
        .layer(middleware::from_fn_with_state(app.clone(), auth::check))
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .layer(middleware::from_fn(version::negotiate))
        .layer(middleware::from_fn(request_id))
        .layer(middleware::from_fn(request_timeout))
        .layer(middleware::from_fn(close_after_refused_body))
        .layer(TraceLayer::new_for_http())
        .with_state(app)
}

/// How long a request may take, but a driver upload.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// Every request must be answered within [`REQUEST_TIMEOUT`], but a driver upload: a large
/// component (a Python runtime is tens of MiB) over a slow link, then its compile, can
/// take longer while making progress all along. An upload is bounded by progress instead
/// ([`drivers::UPLOAD_IDLE`] between bytes) and compiles one at a time.
async fn request_timeout(request: Request, next: Next) -> Response {
    if request.method() == axum::http::Method::POST && request.uri().path() == drivers::UPLOAD_PATH
    {
        return next.run(request).await;
    }
    match tokio::time::timeout(REQUEST_TIMEOUT, next.run(request)).await {
        Ok(response) => response,
        Err(_) => error::ApiError::new(
            axum::http::StatusCode::REQUEST_TIMEOUT,
            format!(
                "The request was not answered within {} s.",
                REQUEST_TIMEOUT.as_secs()
            ),
        )
        .into_response(),
    }
}

/// A path no route serves: 404 in Ironic's error shape (clients parse every 4xx body).
async fn unrouted(uri: axum::http::Uri) -> error::ApiError {
    error::ApiError::not_found(format!("The resource could not be found: {}", uri.path()))
}

/// A known path with a method it does not take: 405 in Ironic's error shape.
async fn not_allowed(method: axum::http::Method, uri: axum::http::Uri) -> error::ApiError {
    error::ApiError::new(
        axum::http::StatusCode::METHOD_NOT_ALLOWED,
        format!("The method {method} is not allowed for {}", uri.path()),
    )
}

/// A body refused for its size (413) is answered before it is read, and hyper then closes
/// the connection rather than read the rest. The answer says so (`Connection: close`):
/// otherwise a client that had written the whole body into its socket pools the
/// connection, and its next request there is cut off (seen as an incomplete message).
async fn close_after_refused_body(request: Request, next: Next) -> Response {
    let mut response = next.run(request).await;
    if response.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE {
        let close = HeaderValue::from_static("close");
        response
            .headers_mut()
            .insert(axum::http::header::CONNECTION, close);
    }
    response
}

/// Every answer names its request, as Ironic's `openstack-request-id`.
async fn request_id(request: Request, next: Next) -> Response {
    let id = format!("req-{}", uuid::Uuid::new_v4());
    let mut response = next.run(request).await;
    let value = HeaderValue::from_str(&id).expect("a uuid is a valid header");
    response
        .headers_mut()
        .insert("openstack-request-id", value.clone());
    response
        .headers_mut()
        .insert("x-openstack-request-id", value);
    response
}
