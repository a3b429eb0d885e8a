//! What a driver can do to the world: the host side of each import of `wit/driver.wit`,
//! one module per interface, each implementing that interface's generated `Host` trait on
//! [`HostState`].
//!
//! Every capability is scoped to the one node the call is about ([`HostState::node`]):
//! the node's own record, its own agent's url and token, its own BMC, its own image job.
//! WASI is linked only for what Rust's standard library needs to start (streams, an empty
//! environment, clocks, randomness, stderr into a bounded pipe); no filesystem and no
//! sockets are linked, so a component that imports them is refused at load.

pub mod agent;
pub mod bmc;
pub mod image;
pub mod log;
pub mod node;
pub mod provision;
#[cfg(test)]
mod tests;

use std::sync::Arc;

use uuid::Uuid;
use wasmtime::StoreLimits;
use wasmtime::component::{HasSelf, Linker, ResourceTable};
use wasmtime_wasi::cli::{WasiCli, WasiCliView};
use wasmtime_wasi::clocks::{WasiClocks, WasiClocksView};
use wasmtime_wasi::random::WasiRandom;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use crate::agents::Agents;
use crate::bindings::Driver;
use crate::store::{Store, StoreError};

/// The engine's services that capabilities act through, shared by all calls.
pub struct Services {
    pub store: Arc<Store>,
    pub agents: Arc<Agents>,
    pub http: reqwest::Client,
    pub images: image::ImageJobs,
    pub bmc: bmc::Backends,
    /// One permit per instance slot of the pooling allocator.
    pub call_slots: tokio::sync::Semaphore,
    /// HTTPS clients pinned to agents' certificates.
    pub pinned: crate::agent_tls::PinnedClients,
}

impl Services {
    pub fn new(store: Arc<Store>, agents: Arc<Agents>, max_concurrent_calls: u32) -> Arc<Services> {
        Arc::new(Services {
            store,
            agents,
            http: reqwest::Client::builder()
                .timeout(std::time::Duration::from_secs(20))
                .build()
                .expect("an HTTP client with default TLS-less settings"),
            images: image::ImageJobs::default(),
            bmc: bmc::Backends::default(),
            call_slots: tokio::sync::Semaphore::new(max_concurrent_calls.max(1) as usize),
            pinned: Default::default(),
        })
    }

    /// The client for a node's agent at `url`: `plain` for http; for https, one that
    /// accepts only the certificate the agent registered (see [`crate::agent_tls`]).
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
            self.agents.get(node).and_then(|s| s.ca).ok_or(
                "the agent's url is https but it registered no certificate (agent_verify_ca)",
            )?;
        Ok(self.pinned.get(&ca))
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
    pub table: ResourceTable,
    pub limits: StoreLimits,
}

impl HostState {
    /// The node's record for this call (see [`HostState::snapshot`]).
    pub fn record(&mut self) -> Result<&crate::node::Node, StoreError> {
        if self.snapshot.is_none() {
            let node = self.services.store.node(self.node)?;
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

/// Why a capability did not do what the driver asked.
///
/// Every import decides through [`outcome`] (or [`infallible`]), wasmtime's
/// `TrappableError` pattern: what the driver can act on is handed to it as its result's
/// error; a failure of the host itself ends the call with a trap, and the node fails with
/// it as `last_error`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CapabilityError {
    /// The request cannot be done as asked (bad arguments, a BMC or agent that refused or
    /// cannot be reached, a node not in a state for it): the driver decides what next.
    #[error("{0}")]
    Refused(String),
    /// The host failed (its store): nothing the driver could do about it.
    #[error("{0}")]
    Host(String),
}

impl From<String> for CapabilityError {
    fn from(message: String) -> Self {
        CapabilityError::Refused(message)
    }
}

impl From<&str> for CapabilityError {
    fn from(message: &str) -> Self {
        CapabilityError::Refused(message.to_owned())
    }
}

/// The store's answers about the node (not found, not waiting, an illegal move) are the
/// driver's to handle; its own failures (sled, corrupt or locked data) are the host's.
impl From<StoreError> for CapabilityError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Db(_)
            | StoreError::Corrupt(_)
            | StoreError::Locked(_)
            | StoreError::Format { .. } => CapabilityError::Host(e.to_string()),
            other => CapabilityError::Refused(other.to_string()),
        }
    }
}

/// The one place a capability's result becomes what the driver sees: `Ok(Err(text))` for
/// a refusal, a trap carrying [`HostFailure`] for a failure of the host.
pub fn outcome<T>(result: Result<T, CapabilityError>) -> wasmtime::Result<Result<T, String>> {
    match result {
        Ok(value) => Ok(Ok(value)),
        Err(CapabilityError::Refused(message)) => Ok(Err(message)),
        Err(CapabilityError::Host(message)) => Err(wasmtime::Error::new(HostFailure(message))),
    }
}

/// For the imports whose WIT result has no error case (`node.get`, `get-scratch`): any
/// failure is the host's, and traps.
pub fn infallible<T, E: Into<CapabilityError>>(result: Result<T, E>) -> wasmtime::Result<T> {
    result.map_err(|e| match e.into() {
        CapabilityError::Refused(m) | CapabilityError::Host(m) => {
            wasmtime::Error::new(HostFailure(m))
        }
    })
}

/// The trap a failure of the host ends a call with; the sandbox turns it into the
/// plugin error `Host`, naming the driver.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct HostFailure(pub String);

/// The interfaces [`linker`] provides, with the version line of each: what a component
/// may import (checked before it is compiled, by `plugin::imports`).
pub const LINKED_INTERFACES: &[(&str, &str)] = &[
    ("wasi:io/error", "0.2"),
    ("wasi:io/poll", "0.2"),
    ("wasi:io/streams", "0.2"),
    ("wasi:clocks/wall-clock", "0.2"),
    ("wasi:clocks/monotonic-clock", "0.2"),
    ("wasi:random/random", "0.2"),
    ("wasi:random/insecure", "0.2"),
    ("wasi:random/insecure-seed", "0.2"),
    ("wasi:cli/exit", "0.2"),
    ("wasi:cli/environment", "0.2"),
    ("wasi:cli/stdin", "0.2"),
    ("wasi:cli/stdout", "0.2"),
    ("wasi:cli/stderr", "0.2"),
    ("wasi:cli/terminal-input", "0.2"),
    ("wasi:cli/terminal-output", "0.2"),
    ("wasi:cli/terminal-stdin", "0.2"),
    ("wasi:cli/terminal-stdout", "0.2"),
    ("wasi:cli/terminal-stderr", "0.2"),
    ("deployd:driver/types", "0.1"),
    ("deployd:driver/node", "0.1"),
    ("deployd:driver/provision", "0.1"),
    ("deployd:driver/agent", "0.1"),
    ("deployd:driver/bmc", "0.1"),
    ("deployd:driver/image", "0.1"),
    ("deployd:driver/log", "0.1"),
];

/// The one linker every driver is instantiated through: the driver world's imports, and
/// the part of WASI a Rust program needs to start.
pub fn linker(engine: &wasmtime::Engine) -> wasmtime::Result<Linker<HostState>> {
    use wasmtime_wasi::p2::bindings::{cli, clocks, random};
    let mut l = Linker::new(engine);
    wasmtime_wasi_io::bindings::wasi::io::error::add_to_linker::<HostState, HasIo>(&mut l, |t| {
        &mut t.table
    })?;
    wasmtime_wasi_io::bindings::wasi::io::poll::add_to_linker::<HostState, HasIo>(&mut l, |t| {
        &mut t.table
    })?;
    wasmtime_wasi_io::bindings::wasi::io::streams::add_to_linker::<HostState, HasIo>(
        &mut l,
        |t| &mut t.table,
    )?;
    clocks::wall_clock::add_to_linker::<HostState, WasiClocks>(&mut l, HostState::clocks)?;
    clocks::monotonic_clock::add_to_linker::<HostState, WasiClocks>(&mut l, HostState::clocks)?;
    random::random::add_to_linker::<HostState, WasiRandom>(&mut l, |t| t.wasi.random())?;
    random::insecure::add_to_linker::<HostState, WasiRandom>(&mut l, |t| t.wasi.random())?;
    random::insecure_seed::add_to_linker::<HostState, WasiRandom>(&mut l, |t| t.wasi.random())?;
    cli::exit::add_to_linker::<HostState, WasiCli>(&mut l, HostState::cli)?;
    cli::environment::add_to_linker::<HostState, WasiCli>(&mut l, HostState::cli)?;
    cli::stdin::add_to_linker::<HostState, WasiCli>(&mut l, HostState::cli)?;
    cli::stdout::add_to_linker::<HostState, WasiCli>(&mut l, HostState::cli)?;
    cli::stderr::add_to_linker::<HostState, WasiCli>(&mut l, HostState::cli)?;
    cli::terminal_input::add_to_linker::<HostState, WasiCli>(&mut l, HostState::cli)?;
    cli::terminal_output::add_to_linker::<HostState, WasiCli>(&mut l, HostState::cli)?;
    cli::terminal_stdin::add_to_linker::<HostState, WasiCli>(&mut l, HostState::cli)?;
    cli::terminal_stdout::add_to_linker::<HostState, WasiCli>(&mut l, HostState::cli)?;
    cli::terminal_stderr::add_to_linker::<HostState, WasiCli>(&mut l, HostState::cli)?;
    Driver::add_to_linker::<HostState, HasSelf<HostState>>(&mut l, |s| s)?;
    Ok(l)
}

/// The `types` interface has only types; nothing to implement.
impl crate::bindings::deployd::driver::types::Host for HostState {}

struct HasIo;

impl wasmtime::component::HasData for HasIo {
    type Data<'a> = &'a mut ResourceTable;
}
