//! `deployd agent`: a ramdisk agent speaking Ironic's agent protocol.
//!
//! - [`commands`]: the command API the engine calls (`/v1/commands`), one command at a
//!   time, as ironic-python-agent runs them.
//! - [`disk`]: writing an image to the target disk, streamed and verified.
//! - [`server`]: the agent's HTTP endpoints.
//! - [`runner`]: the process: lookup, then heartbeats until power-off.

pub mod commands;
pub mod disk;
pub mod runner;
pub mod server;

pub use commands::{CommandApi, DiskTarget};
pub use runner::AgentArgs;
