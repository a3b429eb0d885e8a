//! deployd: a bare-metal deploy engine whose drivers are sandboxed WebAssembly components.
//!
//! Layout, from the bottom up:
//!
//! - [`clock`]: wall-clock timestamps driven by tokio's clock (pausable in tests).
//! - [`state_machine`]: Ironic's provision states and events, a pure table.
//! - [`node`]: what a node and a port are.
//! - [`store`]: where the nodes live: one handle over the embedded sled store and the shared
//!   store on PostgreSQL, the deadline index, touches and transitions.
//! - [`disk_space`]: the free space of the disks the engine writes to, and the floor each
//!   keeps free.
//! - [`metrics`]: counters and driver-call latencies for `GET /metrics`.
//! - [`sweeper`]: the task that fails nodes whose agent went silent.
//! - [`agent_sessions`]: what the engine knows of each node's running agent (its url, its
//!   token for this boot, its last report).
//! - [`agent_pinning`]: HTTPS to an agent, pinned to the certificate it sent (auto-TLS).
//! - [`driver_host`]: the wasmtime host that runs drivers, and what they may do
//!   (`driver_host::capability`, one module per host interface).
//! - [`hardware`]: Ironic's hardware types and interfaces over the loaded drivers.
//! - [`raid`]: a target RAID configuration checked against Ironic's RAID schema.
//! - [`inspection_rules`]: the stored inspection rules, run on an inspected node.
//! - [`python_text`]: JSON values as Python shows them, in Ironic's messages.
//! - [`images`]: local image paths staged for agents; [`image_server`]: serves them.
//! - [`config_drive`]: a deploy's config drive, built from a dict or taken as given.
//! - [`deploy_image`]: a deploy's image made ready before the machine boots: its checksum
//!   resolved, its format read from its content, a qcow2 served as its raw disk.
//! - [`boot_server`]: the iPXE scripts, deploy kernels and ramdisks of network boot.
//! - [`boot_mode`]: the mode (UEFI or BIOS) a node boots in, as Ironic decides it.
//! - [`boot_iso`]: the bootable ISO of the `redfish-virtual-media` boot interface.
//! - [`ramdisk_params`]: the kernel parameters a deploy ramdisk boots with.
//! - [`rescue_password`]: a rescue's password, hashed as crypt(3) does.
//! - [`console`]: serial consoles: the ports they listen on.
//! - [`reservations`]: which task holds each node, and for what.
//! - [`conductor`]: owns every node transition and every write, one task per node at a time.
//! - [`conductor_groups`]: which engines run a node's steps, as Ironic's conductor groups.
//! - [`api`]: the HTTP API, thin handlers over the conductor.
//! - [`config`]: the TOML file, environment and flags.
//! - [`engine`]: the pieces above wired together, as `deployd serve` runs them.
//!
//! Beside it, under `host/`: `deployd` (the binary: the CLI, `serve`, the demo),
//! `deployd-wire` (what crosses the wire, checksums included), `deployd-client`,
//! `deployd-agent` (the ramdisk agent), `deployd-lab` (simulated machines, which need the
//! agent, not the engine), `deployd-bench`, the driver components, bundled
//! (`deployd-artifacts`) and test-only (`deployd-fixtures`), and `deployd-test-support`.

pub mod agent_pinning;
pub mod agent_sessions;
pub mod api;
pub mod boot_iso;
pub mod boot_mode;
pub mod boot_server;
pub mod clock;
pub mod conductor;
pub mod conductor_groups;
pub mod config;
pub mod config_drive;
pub mod console;
pub mod deploy_image;
pub mod disk_space;
pub mod driver_host;
pub mod engine;
pub mod hardware;
pub mod image_server;
pub mod images;
pub mod inspection_rules;
pub mod metrics;
pub mod node;
pub mod python_text;
pub mod raid;
pub mod ramdisk_params;
pub mod rescue_password;
pub mod reservations;
pub mod state_machine;
pub mod store;
pub mod sweeper;
