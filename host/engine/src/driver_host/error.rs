//! What can go wrong with a driver, in words an operator can act on.

use std::time::Duration;

/// A driver call that did not return normally. The node it was working on is failed with
/// this as `last_error`; the instance is thrown away, so the next call starts clean.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PluginError {
    #[error("driver {driver} ran past its deadline of {deadline:?} and was stopped")]
    Timeout { driver: String, deadline: Duration },
    #[error("driver {driver} exceeded its memory limit of {limit_mib} MiB")]
    OutOfMemory { driver: String, limit_mib: usize },
    #[error("driver {driver} trapped ({trap}){}", stderr_suffix(.stderr))]
    Trap {
        driver: String,
        trap: String,
        stderr: String,
    },
    #[error("driver {driver} failed in the host: {message}")]
    Host { driver: String, message: String },
    #[error("no driver named {0:?} is loaded")]
    NotLoaded(String),
}

fn stderr_suffix(stderr: &str) -> String {
    let text = stderr.trim();
    if text.is_empty() {
        String::new()
    } else {
        format!(": {text}")
    }
}

/// Why a component was not loaded. Nothing was registered.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("not a WebAssembly component: {0}")]
    NotAComponent(String),
    #[error("the component needs something this host does not provide: {0}")]
    Import(String),
    #[error("the component is not a deployd driver (world deployd:driver, 0.2 or 0.1): {0}")]
    WrongWorld(String),
    #[error("the driver's describe() failed: {0}")]
    Describe(PluginError),
    #[error("invalid driver description: {0}")]
    Description(String),
    #[error("driver {name:?} is in use by {nodes} node(s) mid-flow; unload with force to proceed")]
    InUse { name: String, nodes: usize },
    #[error("the driver could not be compiled: {0}")]
    Compiler(String),
    #[error("cannot write the driver to disk: {0}")]
    Io(#[from] std::io::Error),
}
