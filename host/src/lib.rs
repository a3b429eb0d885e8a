//! deployd: a bare-metal deploy engine whose drivers are sandboxed WebAssembly components.
//!
//! Layout, from the bottom up:
//!
//! - [`clock`]: wall-clock timestamps driven by tokio's clock (pausable in tests).
//! - [`state_machine`]: Ironic's provision states and events, a pure table.
//! - [`node`]: what a node and a port are.
//! - [`store`]: durable node state on sled, the deadline index, touches and transitions.
//! - [`sweeper`]: the task that fails nodes whose agent went silent.
//! - [`plugin`]: the wasmtime host that runs drivers; [`capability`]: what they may do,
//!   and the driver world's bindings.
//! - [`agents`]: what the engine knows of each node's running agent.
//! - [`config`]: the TOML file, environment and flags.
//! - [`metrics`]: counters and driver-call latencies for `GET /metrics`.
//! - [`engine`]: the pieces above wired together, as `deployd serve` runs them.
//! - [`agent`]: the ramdisk agent's protocol pieces the engine shares (the `deployd-agent`
//!   crate: checksums, signals, its TLS).
//!
//! Beside it: `deployd` (the binary: the CLI, `serve`, the demo), `deployd-bench`,
//! `deployd-lab` (simulated machines, which need the agent, not the engine), and the
//! driver components, bundled (`deployd-artifacts`) and test-only (`deployd-fixtures`).

pub use deployd_agent as agent;
pub mod agent_tls;
pub mod agents;
pub mod api;
pub mod capability;
pub use deployd_agent::checksum;
pub mod clock;
pub mod conductor;
pub mod config;
pub mod engine;
pub mod hardware;
pub mod image_server;
pub mod images;
pub mod metrics;
pub mod node;
pub mod plugin;
pub mod reservations;
pub use deployd_agent::signal;
pub mod state_machine;
pub mod store;
pub mod sweeper;
