//! The HTTP API: Ironic's v1 subset for operators and ramdisk agents, on hyper via axum.
//!
//! Handlers parse a request, call the conductor (every write goes through it) and render
//! the answer; the plumbing under them is in [`http`]. By resource:
//!
//! | module | routes, or what it holds |
//! |---|---|
//! | [`http`] | the listener, authentication, microversions and their route gates, errors, middleware |
//! | [`root`] | `GET /`, `GET /v1` (discovery) |
//! | [`nodes`] | `/v1/nodes…`: create, show, patch, delete, states, provision, power, validate |
//! | [`node_list`] | `GET /v1/nodes`, `GET /v1/nodes/detail`: filters, fields, pagination |
//! | [`node_access`] | a node by uuid or name, and edited under its claim |
//! | [`node_doc`] | a node as an Ironic document, and what a create or PATCH may set |
//! | [`node_view`] | a node as `GET` shows it, serialised straight from the stored node |
//! | [`view`] | what every document on the wire shares: links, secrets masked, fields |
//! | [`maintenance`] | `/v1/nodes/{node}/maintenance` |
//! | [`traits`] | `/v1/nodes/{node}/traits…` (1.37), and the trait names every resource checks |
//! | [`vifs`] | `/v1/nodes/{node}/vifs…` (1.28) |
//! | [`node_members`] | the string lists traits and VIFs are kept in |
//! | [`node_settings`] | `/v1/nodes/{node}/bios` (1.40), `/v1/nodes/{node}/states/raid` (1.12) |
//! | [`vendor_passthru`] | `/v1/nodes/{node}/vendor_passthru…`, `/v1/drivers/{name}/vendor_passthru…` |
//! | [`node_hardware`] | virtual media, boot mode, secure boot, firmware, inventory |
//! | [`node_management`] | the boot device and the console |
//! | [`node_groups`] | `/v1/shards` (1.82), `/v1/nodes/{node}/children` (1.83) |
//! | [`node_history`] | `/v1/nodes/{node}/history…` (1.78) |
//! | [`ports`] | `/v1/ports…`, `/v1/nodes/{node}/ports` |
//! | [`drivers`] | `GET /v1/drivers…`; the extension `/v1/deployd/drivers` to load and unload |
//! | [`continue_inspection`] | `POST /v1/continue_inspection` (1.84): an agent's inventory for in-band inspection |
//! | [`ramdisk`] | the agents' endpoints: `GET /v1/lookup`, `POST /v1/heartbeat/{node}` (1.22) |
//! | [`conductors`] | `/v1/conductors…` (1.49) |
//! | [`forward`] | calls for nodes of another conductor group, sent on to an engine of it |
//! | [`resources`] | the handlers every stored-only resource below shares |
//! | [`schema`] | resource documents as tables of fields, by microversion |
//! | [`listing`] | list query parameters and answers of the stored-only resources |
//! | [`chassis`] | `/v1/chassis` |
//! | [`portgroups`] | `/v1/portgroups` |
//! | [`deploy_templates`] | `/v1/deploy_templates` |
//! | [`volume`] | `/v1/volume/connectors`, `/v1/volume/targets` |
//! | [`allocations`] | `/v1/allocations` (the allocator itself is the conductor's) |
//! | [`runbooks`] | `/v1/runbooks` (1.92) |
//! | [`inspection_rules`] | `/v1/inspection_rules` (1.96) |
//! | [`provision_steps`] | the steps a manual cleaning or a servicing is asked to run |
//! | [`steps`] | the steps deploy templates and runbooks carry |
//! | [`metrics`] | `GET /metrics` (Prometheus) |
//! | [`store_backup`] | `GET /store/backup` (an online backup of the store) |
//! | [`dashboard`] | the web console at `/dashboard`: the page, its assets, the fleet's event stream |
//!
//! Every answer carries the microversion headers ([`http::version`]) and an
//! `openstack-request-id`; errors are in Ironic's shape ([`http::error`]); operator routes
//! pass through [`http::auth`], the agent routes are gated by agent tokens instead.

mod allocations;
mod chassis;
mod conductors;
mod continue_inspection;
pub mod dashboard;
mod deploy_templates;
pub mod drivers;
pub mod forward;
pub mod http;
mod inspection_rules;
mod listing;
mod maintenance;
mod metrics;
mod node_access;
mod node_doc;
mod node_groups;
mod node_hardware;
mod node_history;
mod node_list;
mod node_management;
mod node_members;
mod node_settings;
mod node_view;
pub mod nodes;
mod portgroups;
pub mod ports;
mod provision_steps;
pub mod ramdisk;
mod resources;
pub mod root;
mod runbooks;
pub mod schema;
mod steps;
mod store_backup;
mod traits;
mod vendor_passthru;
mod view;
mod vifs;
mod volume;

use std::sync::Arc;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::middleware;
use tower_http::trace::TraceLayer;

use http::{auth, plumbing};

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
    /// `Location` when configured (`api.public_url`); else the default, unless a request
    /// names the engine otherwise in its `Host` (see [`App::base`]).
    pub public_url: String,
    /// Whether `public_url` was configured: then no request's `Host` replaces it.
    pub public_url_fixed: bool,
    /// Bounds the node lists worked on at once (see [`node_list`]).
    pub lists: Arc<tokio::sync::Semaphore>,
    /// When this engine started (its conductor's `created_at`).
    pub started_at: crate::clock::Timestamp,
    /// The other engines, which the calls for their conductor groups' nodes are sent to.
    pub peers: forward::Peers,
    /// The web console's fleet scanner and access (see [`dashboard`]).
    pub dashboard: dashboard::Dashboard,
}

impl App {
    pub fn new(
        conductor: Arc<Conductor>,
        auth: auth::Auth,
        ramdisk_heartbeat_timeout: u64,
        plugins_dir: Option<std::path::PathBuf>,
        public_url: String,
        public_url_fixed: bool,
        dashboard: dashboard::Access,
    ) -> App {
        App {
            dashboard: dashboard::Dashboard {
                fleet: dashboard::fleet::Fleet::new(
                    Arc::clone(conductor.store()),
                    Arc::clone(conductor.agents()),
                ),
                access: dashboard,
                consoles: Arc::new(tokio::sync::Semaphore::new(dashboard::console::MAX_OPEN)),
            },
            started_at: conductor.store().clock().now(),
            conductor,
            auth,
            ramdisk_heartbeat_timeout,
            plugins_dir,
            public_url,
            public_url_fixed,
            lists: node_list::permits(),
            peers: forward::Peers::default(),
        }
    }

    /// The base of the links and `Location`s of the request being answered: the
    /// request's own (see [`http::base`]), else `public_url`.
    pub fn base(&self) -> String {
        http::base::current().unwrap_or_else(|| self.public_url.clone())
    }
}

pub type State = axum::extract::State<Arc<App>>;

/// JSON bodies are small; a driver upload may be larger (it has its own limit).
pub const MAX_BODY: usize = 1 << 20;
pub const MAX_DRIVER: usize = 64 << 20;

/// The resources served by [`resources`]' generic handlers.
const RESOURCES: &[&resources::Resource] = &[
    &chassis::CHASSIS,
    &portgroups::PORTGROUP,
    &deploy_templates::DEPLOY_TEMPLATE,
    &volume::VOLUME_CONNECTOR,
    &volume::VOLUME_TARGET,
    &allocations::ALLOCATION,
    &runbooks::RUNBOOK,
    &inspection_rules::INSPECTION_RULE,
];

pub fn router(app: Arc<App>) -> Router {
    Router::new()
        .merge(root::routes())
        .merge(nodes::routes())
        .merge(chassis::routes())
        .merge(volume::routes())
        .merge(allocations::routes())
        .merge(ports::routes())
        .merge(drivers::routes())
        .merge(ramdisk::routes())
        .merge(continue_inspection::routes())
        .merge(resources::routes(RESOURCES))
        .merge(maintenance::routes())
        .merge(traits::routes())
        .merge(vifs::routes())
        .merge(node_settings::routes())
        .merge(node_management::routes())
        .merge(vendor_passthru::routes())
        .merge(conductors::routes())
        .merge(runbooks::routes())
        .merge(node_hardware::routes())
        .merge(node_groups::routes())
        .merge(node_history::routes())
        .merge(metrics::routes())
        .merge(store_backup::routes())
        .merge(dashboard::routes(app.clone()))
        .fallback(plumbing::unrouted)
        .method_not_allowed_fallback(plumbing::not_allowed)
        .layer(middleware::from_fn_with_state(app.clone(), forward::calls))
        .layer(middleware::from_fn_with_state(app.clone(), auth::check))
        .layer(middleware::from_fn_with_state(
            app.clone(),
            http::base::from_host,
        ))
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .layer(middleware::from_fn(|request, next| {
            plumbing::envelope(request, next, drivers::UPLOAD_PATH)
        }))
        .layer(TraceLayer::new_for_http().on_failure(plumbing::log_failure))
        .with_state(app)
    // Ironic's paths are rewritten before routing, by the listener
    // (`plumbing::ironic_path`): a layer here would run after routing.
}
