//! The WebAssembly driver host.
//!
//! - [`engine`]: one wasmtime `Engine` (pooling allocator, epoch interruption, a ticker).
//! - [`bindings`]: the host side of `wit/driver.wit`.
//! - [`sandbox`]: one driver call = a fresh `Store` with limits, a fresh instance from
//!   the driver's `InstancePre`, captured stderr; failures become [`PluginError`]s.
//! - [`registry`]: drivers loaded, replaced and unloaded at runtime, by content hash, with
//!   compiled artifacts cached on disk.
//!
//! What a driver may do to the world is in `crate::capability`, one module per import.

pub mod bindings;
pub mod engine;
pub mod error;
pub mod registry;
pub mod sandbox;

pub use error::{LoadError, PluginError};
pub use registry::{LoadedDriver, Registry};
pub use sandbox::Limits;

/// The bundled drivers (embedded in the binary) and the paths of every component the
/// build produced, for tests.
pub mod built {
    include!(concat!(env!("OUT_DIR"), "/plugins.rs"));
}
