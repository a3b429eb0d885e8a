//! The WebAssembly driver host.
//!
//! - [`engine`]: one wasmtime `Engine` (pooling allocator, epoch interruption, a ticker).
//! - [`driver`]: a loaded driver version and the limits its calls run under.
//! - [`imports`]: a component's imports, checked before it is compiled.
//! - [`sandbox`]: one driver call = a fresh `Store` with limits, a fresh instance from
//!   the driver's `InstancePre`, captured stderr; failures become [`PluginError`]s.
//! - [`registry`]: drivers loaded, replaced and unloaded at runtime, by content hash, with
//!   compiled artifacts cached on disk.
//!
//! What a driver may do to the world is in `crate::capability`, one module per import.

pub mod driver;
pub mod engine;
pub mod error;
pub mod imports;
pub mod registry;
pub mod sandbox;

pub use driver::{Limits, LoadedDriver};
pub use error::{LoadError, PluginError};
pub use registry::Registry;
