//! deployd's ramdisk agent, speaking Ironic's agent protocol: the `deployd-agent`
//! binary, and `deployd agent` in the engine's. It links neither wasmtime nor sled, so it
//! stays small enough for a ramdisk.
//!
//! - [`commands`]: the command API the engine calls (`/v1/commands`), one command at a
//!   time, as ironic-python-agent runs them.
//! - [`clean`]: the clean steps (`clean.get_clean_steps`, `clean.execute_clean_step`).
//! - [`disk`]: writing an image to the target disk, streamed and verified.
//! - [`server`]: the agent's HTTP endpoints.
//! - [`root_disk`]: the disk an image goes to when none is named, as IPA picks it.
//! - [`inventory`]: the machine's inventory, posted for in-band inspection at boot.
//! - [`runner`]: the process: lookup, then heartbeats until power-off.

pub mod clean;
pub mod commands;
pub mod config_drive;
pub mod disk;
pub mod inventory;
pub mod rescue;
pub mod root_disk;
pub mod runner;
pub mod server;
pub mod signal;
pub mod tls;
pub mod uefi_boot;

pub use commands::{CommandApi, DiskTarget};
pub use runner::{AgentArgs, TlsMode};
