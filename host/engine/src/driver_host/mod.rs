//! The WebAssembly driver host: where drivers are compiled, kept and called.
//!
//! - [`runtime`]: one wasmtime `Engine` (pooling allocator, epoch interruption, a ticker).
//! - [`driver`]: a loaded driver version and the limits its calls run under.
//! - [`imports`]: a component's imports, checked before it is compiled.
//! - [`sandbox`]: one driver call = a fresh `Store` with limits, a fresh instance from
//!   the driver's `InstancePre`, captured stderr; failures become [`PluginError`]s.
//! - [`registry`]: drivers loaded, replaced and unloaded at runtime, by content hash, with
//!   compiled artifacts cached on disk.
//! - [`compiler`]: where a component is compiled: a child process under a memory limit
//!   (`deployd serve`), or a blocking thread.
//! - [`artifact_cache`]: those artifacts, each with a digest checked before its code runs.
//! - [`component_file`]: uploaded components in the plugins directory, with their sha256.
//! - [`kept`]: uploaded components in the shared store, followed across its engines.
//!
//! - [`capability`]: what a driver may do to the world, one module per import of the
//!   driver world, and the world's bindings.
//! - [`error`]: why a driver could not be loaded, or a call failed.

pub mod artifact_cache;
pub mod capability;
pub mod compiler;
pub mod component_file;
pub mod driver;
pub mod error;
pub mod imports;
pub mod kept;
pub mod registry;
pub mod runtime;
pub mod sandbox;

pub use driver::{Limits, LoadedDriver};
pub use error::{LoadError, PluginError};
pub use registry::Registry;
