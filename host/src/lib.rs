//! deployd: a bare-metal deploy engine whose drivers are sandboxed WebAssembly components.
//!
//! Layout, from the bottom up:
//!
//! - [`clock`]: wall-clock timestamps driven by tokio's clock (pausable in tests).
//! - [`state_machine`]: Ironic's provision states and events, a pure table.
//! - [`node`]: what a node and a port are.
//! - [`store`]: durable node state on sled, the deadline index, touches and transitions.
//! - [`sweeper`]: the task that fails nodes whose agent went silent.
//! - [`bindings`]: the driver world's types; [`plugin`]: the wasmtime host that runs
//!   drivers; [`capability`]: what they may do.
//! - [`agents`]: what the engine knows of each node's running agent.
//! - [`config`]: the TOML file, environment and flags.
//! - [`engine`]: the pieces above wired together, as `deployd serve` runs them.
//! - [`agent`]: `deployd agent`, the ramdisk agent (the `deployd-agent` crate); [`lab`]:
//!   simulated machines with a Redfish BMC whose power-on boots an agent (the
//!   `deployd-lab` crate, which needs the agent, not the engine); [`demo`]: the whole
//!   story in one command.
//! - [`bench`]: `deployd bench`, the measurements quoted in the README.

pub use deployd_agent as agent;
pub mod agent_tls;
pub mod agents;
pub mod api;
pub mod bench;
pub mod bindings;
pub mod capability;
pub use deployd_agent::checksum;
pub mod cli;
pub mod clock;
pub mod conductor;
pub mod config;
pub mod demo;
pub mod engine;
pub mod hardware;
pub mod image_server;
pub mod images;
pub use deployd_lab as lab;
pub mod node;
pub mod plugin;
pub mod reservations;
pub use deployd_agent::signal;
pub mod state_machine;
pub mod store;
pub mod sweeper;
