//! What a driver can do to the world: the host side of each import of `wit/driver.wit`,
//! one module per interface, each implementing that interface's generated `Host` trait on
//! [`HostState`].
//!
//! Every capability is scoped to the one node the call is about ([`HostState::node`]):
//! the node's own record, its own agent's url and token, its own BMC, its own image job.
//! All of WASI is linked, so components from any language's toolchain load, but with no
//! ambient capability ([`linker`]). The 0.1 line of the world is adapted in [`v0_1`].

pub mod agent_client;
pub mod bindings;
pub mod bmc;
pub mod error;
pub mod image;
pub mod log;
pub mod node;
pub mod provision;
#[cfg(test)]
mod tests;
pub mod v0_1;

use std::sync::Arc;

use uuid::Uuid;
use wasmtime::StoreLimits;
use wasmtime::component::{HasSelf, Linker, ResourceTable};
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpHooks, WasiHttpView};

use crate::agent_sessions::AgentSessions;
use crate::store::{Store, StoreError};
use bindings::Driver;
pub use error::{CapabilityError, HostFailure, infallible};

/// The engine's services that capabilities act through, shared by all calls.
pub struct Services {
    pub store: Arc<Store>,
    pub agents: Arc<AgentSessions>,
    pub http: reqwest::Client,
    pub images: image::ImageJobs,
    pub bmc: bmc::Backends,
    /// One permit per instance slot of the pooling allocator.
    pub call_slots: tokio::sync::Semaphore,
    /// HTTPS clients pinned to agents' certificates.
    pub pinned: crate::agent_pinning::PinnedClients,
}

impl Services {
    pub fn new(
        store: Arc<Store>,
        agents: Arc<AgentSessions>,
        max_concurrent_calls: u32,
        bmc: bmc::Backends,
    ) -> Arc<Services> {
        // The engine names itself to BMCs and agents (their logs tell engines apart).
        let user_agent = format!(
            "deployd/{} ({})",
            env!("CARGO_PKG_VERSION"),
            store.conductor_name()
        );
        Arc::new(Services {
            store,
            agents,
            http: reqwest::Client::builder()
                .user_agent(user_agent)
                .timeout(std::time::Duration::from_secs(20))
                .build()
                .expect("an HTTP client with default TLS-less settings"),
            images: image::ImageJobs::default(),
            bmc,
            call_slots: tokio::sync::Semaphore::new(max_concurrent_calls.max(1) as usize),
            pinned: Default::default(),
        })
    }

    /// The client for a node's agent at `url`: `plain` for http; for https, one that
    /// accepts only the certificate the agent registered (see [`crate::agent_pinning`]).
    pub fn agent_client(
        &self,
        node: uuid::Uuid,
        url: &str,
        plain: &reqwest::Client,
    ) -> Result<reqwest::Client, String> {
        if !url.starts_with("https://") {
            return Ok(plain.clone());
        }
        let ca =
            self.agents.read(node, |s| s.ca.clone()).flatten().ok_or(
                "the agent's url is https but it registered no certificate (agent_verify_ca)",
            )?;
        Ok(self.pinned.get(&ca.der))
    }
}

/// The state of one driver call.
pub struct HostState {
    pub node: Uuid,
    /// The node's record as this call sees it: read once (the conductor hands over the one
    /// it just read) and replaced by this call's own writes to it. `node.get` and
    /// `get-scratch` answer from it instead of reading and parsing the record again.
    pub snapshot: Option<crate::node::Node>,
    pub driver: String,
    /// The power backend the driver described ("ipmitool", "redfish", "fake").
    pub power: String,
    pub services: Arc<Services>,
    pub wasi: WasiCtx,
    pub http: WasiHttpCtx,
    pub no_http: NoHttp,
    pub table: ResourceTable,
    pub limits: StoreLimits,
}

impl HostState {
    /// The state of one call of `driver` (whose power backend is `power`) about `node`:
    /// stderr into the bounded `stderr`, memory within `limits`, nothing else from WASI.
    pub fn new(
        node: Uuid,
        snapshot: Option<crate::node::Node>,
        driver: String,
        power: String,
        services: Arc<Services>,
        stderr: wasmtime_wasi::p2::pipe::MemoryOutputPipe,
        limits: StoreLimits,
    ) -> HostState {
        HostState {
            node,
            snapshot,
            driver,
            power,
            services,
            wasi: wasi_context(stderr),
            http: WasiHttpCtx::new(),
            no_http: NoHttp,
            table: ResourceTable::new(),
            limits,
        }
    }

    /// The node's record for this call (see [`HostState::snapshot`]).
    pub async fn record(&mut self) -> Result<&crate::node::Node, StoreError> {
        if self.snapshot.is_none() {
            let node = self.services.store.node(self.node).await?;
            self.snapshot = Some(node);
        }
        Ok(self.snapshot.as_ref().expect("just filled"))
    }
}

impl WasiView for HostState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

/// The one place a capability's error becomes what a 0.2 driver sees.
impl bindings::deployd::driver::types::Host for HostState {
    fn convert_error(
        &mut self,
        err: CapabilityError,
    ) -> wasmtime::Result<bindings::deployd::driver::types::Error> {
        use bindings::deployd::driver::types::Error;
        Ok(match err {
            CapabilityError::Invalid(m) => Error::Invalid(m),
            CapabilityError::NotReady(m) => Error::NotReady(m),
            CapabilityError::NotConfigured(m) => Error::NotConfigured(m),
            CapabilityError::Remote(m) => Error::Remote(m),
            CapabilityError::Host(m) => return Err(wasmtime::Error::new(HostFailure(m))),
        })
    }
}

/// The WASI interfaces [`linker`] provides, all of the 0.2 line: what a component may
/// import besides the driver world (checked before it is compiled, by `driver_host::imports`).
pub const LINKED_WASI: &[&str] = &[
    "wasi:io/error",
    "wasi:io/poll",
    "wasi:io/streams",
    "wasi:clocks/wall-clock",
    "wasi:clocks/monotonic-clock",
    "wasi:random/random",
    "wasi:random/insecure",
    "wasi:random/insecure-seed",
    "wasi:cli/exit",
    "wasi:cli/environment",
    "wasi:cli/stdin",
    "wasi:cli/stdout",
    "wasi:cli/stderr",
    "wasi:cli/terminal-input",
    "wasi:cli/terminal-output",
    "wasi:cli/terminal-stdin",
    "wasi:cli/terminal-stdout",
    "wasi:cli/terminal-stderr",
    "wasi:filesystem/types",
    "wasi:filesystem/preopens",
    "wasi:sockets/network",
    "wasi:sockets/instance-network",
    "wasi:sockets/ip-name-lookup",
    "wasi:sockets/tcp",
    "wasi:sockets/tcp-create-socket",
    "wasi:sockets/udp",
    "wasi:sockets/udp-create-socket",
    "wasi:http/types",
    "wasi:http/outgoing-handler",
];

/// The lines of the `deployd:driver` world [`linker`] provides, newest first, and the
/// interfaces of each.
pub const DRIVER_LINES: &[&str] = &["0.2", "0.1"];
pub const DRIVER_INTERFACES: &[&str] =
    &["types", "node", "provision", "agent", "bmc", "image", "log"];

/// The one linker every driver is instantiated through: both lines of the driver world,
/// and all of WASI 0.2 with `wasi:http`, so a component built by any language's toolchain
/// (componentize-py imports the filesystem and sockets, componentize-js `wasi:http`)
/// links. What WASI could reach stays closed: the context every call gets
/// ([`wasi_context`]) preopens no directory, passes no environment, permits no socket
/// address and no name lookup, and every outgoing HTTP request is denied ([`NoHttp`]).
/// A driver reaches the world only through the node-scoped interfaces above.
pub fn linker(engine: &wasmtime::Engine) -> wasmtime::Result<Linker<HostState>> {
    let mut l = Linker::new(engine);
    wasmtime_wasi::p2::add_to_linker_async(&mut l)?;
    wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut l)?;
    Driver::add_to_linker::<HostState, HasSelf<HostState>>(&mut l, |s| s)?;
    bindings::v0_1::Driver::add_to_linker::<HostState, HasSelf<HostState>>(&mut l, |s| s)?;
    Ok(l)
}

/// The WASI context of one call: stderr into `stderr` (bounded), and nothing else: no
/// preopened directory, no environment, no arguments, no network.
fn wasi_context(stderr: wasmtime_wasi::p2::pipe::MemoryOutputPipe) -> WasiCtx {
    WasiCtxBuilder::new()
        .stderr(stderr)
        .allow_tcp(false)
        .allow_udp(false)
        .allow_ip_name_lookup(false)
        .build()
}

/// `wasi:http`'s outgoing handler for drivers: every request is denied. A driver talks to
/// its node's agent through `deployd:driver/agent`, which knows the agent's url and token.
#[derive(Default)]
pub struct NoHttp;

impl WasiHttpHooks for NoHttp {
    fn send_request(
        &mut self,
        _request: http::Request<wasmtime_wasi_http::WasiBody>,
        _options: Option<wasmtime_wasi_http::RequestOptions>,
        _fut: Box<dyn Future<Output = Result<(), wasmtime_wasi_http::Error>> + Send>,
    ) -> Box<
        dyn Future<
                Output = wasmtime_wasi_http::Result<(
                    http::Response<wasmtime_wasi_http::WasiBody>,
                    Box<dyn Future<Output = Result<(), wasmtime_wasi_http::Error>> + Send>,
                )>,
            > + Send,
    > {
        Box::new(async { Err(wasmtime_wasi_http::Error::HttpRequestDenied) })
    }
}

impl WasiHttpView for HostState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView {
            ctx: &mut self.http,
            table: &mut self.table,
            hooks: &mut self.no_http,
        }
    }
}
