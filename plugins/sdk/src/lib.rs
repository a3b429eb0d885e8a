//! The deployd driver SDK: write a driver as a Rust type, build it with
//! `cargo build --release --target wasm32-wasip2`, load the `.wasm` into a running engine.
//!
//! ```ignore
//! use deployd_driver_sdk::{Description, Driver, Family, Outcome, bmc};
//!
//! struct MyDriver;
//!
//! impl Driver for MyDriver {
//!     fn describe() -> Description { deployd_driver_sdk::describe!("my_driver", Family::Fake, "fake", "Does nothing") }
//!     fn deploy() -> Outcome { Outcome::Done }
//! }
//!
//! deployd_driver_sdk::export_driver!(MyDriver);
//! ```
//!
//! Each module below wraps one host interface of the `deployd:driver` world (see
//! `wit/driver.wit`): [`node`], [`scratch`], [`provision`], [`agent`], [`bmc`], [`image`],
//! [`log`]. Every call is about the node the engine called the driver for.

pub mod bindings {
    //! The raw bindings generated from `wit/driver.wit`.
    wit_bindgen::generate!({
        path: "../../wit",
        world: "driver",
        pub_export_macro: true,
        default_bindings_module: "deployd_driver_sdk::bindings",
    });
}

pub mod agent;
pub mod node;

pub use bindings::deployd::driver::types::{Description, Error, Family, Outcome};
pub use bindings::deployd::driver::{bmc, image, provision};

impl Error {
    /// What happened, in words fit for the node's `last_error`.
    pub fn message(&self) -> &str {
        match self {
            Error::Invalid(m) | Error::NotReady(m) | Error::NotConfigured(m) | Error::Remote(m) => {
                m
            }
        }
    }
}

/// A host error becomes its message, so a driver step that returns `Result<_, String>`
/// can `?` host calls and fail the node with their words.
impl From<Error> for String {
    fn from(e: Error) -> String {
        e.message().to_owned()
    }
}

/// What a driver does. Only `describe` and `deploy` have no default.
pub trait Driver {
    /// Who the driver is; called once when the engine loads it.
    fn describe() -> Description;
    /// Whether the node's record is complete for this driver.
    fn validate() -> Result<(), String> {
        Ok(())
    }
    /// Starts a deploy (the node is in `deploying`).
    fn deploy() -> Outcome;
    /// The agent called back while the node waits (already touched by the engine).
    fn heartbeat() -> Outcome {
        Outcome::Wait
    }
    /// Undeploys the node.
    fn tear_down() -> Outcome {
        Outcome::Done
    }
    /// The flow failed or timed out; tidy up.
    fn clean_up(_reason: String) {}
}

/// A [`Description`] whose version is the calling crate's own (`CARGO_PKG_VERSION` of
/// the driver's `Cargo.toml`): `describe!("my_driver", Family::Agent, "redfish", "…")`.
#[macro_export]
macro_rules! describe {
    ($name:expr, $family:expr, $power:expr, $summary:expr $(,)?) => {
        $crate::describe_version($name, $family, $power, $summary, env!("CARGO_PKG_VERSION"))
    };
}

/// A [`Description`] with the version given (see [`describe!`]).
pub fn describe_version(
    name: &str,
    family: Family,
    power: &str,
    summary: &str,
    version: &str,
) -> Description {
    Description {
        name: name.into(),
        version: version.into(),
        family,
        power: power.into(),
        summary: summary.into(),
    }
}

/// Exports a [`Driver`] as the component's `deployd:driver/driver` world.
#[macro_export]
macro_rules! export_driver {
    ($driver:ty) => {
        struct __DeploydDriverExport;

        impl $crate::bindings::Guest for __DeploydDriverExport {
            fn describe() -> $crate::Description {
                <$driver as $crate::Driver>::describe()
            }
            fn validate() -> Result<(), String> {
                <$driver as $crate::Driver>::validate()
            }
            fn deploy() -> $crate::Outcome {
                <$driver as $crate::Driver>::deploy()
            }
            fn heartbeat() -> $crate::Outcome {
                <$driver as $crate::Driver>::heartbeat()
            }
            fn tear_down() -> $crate::Outcome {
                <$driver as $crate::Driver>::tear_down()
            }
            fn clean_up(reason: String) {
                <$driver as $crate::Driver>::clean_up(reason)
            }
        }

        $crate::bindings::export!(__DeploydDriverExport with_types_in $crate::bindings);
    };
}

/// Logging through the host, tagged with driver and node.
pub mod log {
    use crate::bindings::deployd::driver::log::{Level, log};

    pub fn debug(message: &str) {
        log(Level::Debug, message)
    }
    pub fn info(message: &str) {
        log(Level::Info, message)
    }
    pub fn warn(message: &str) {
        log(Level::Warn, message)
    }
    pub fn error(message: &str) {
        log(Level::Error, message)
    }
}

/// This driver's scratch space in the node's driver_internal_info, as typed values.
pub mod scratch {
    use serde::Serialize;
    use serde::de::DeserializeOwned;

    use crate::Error;
    use crate::bindings::deployd::driver::node;

    /// The value under `key`, if it is set and parses as `T`.
    pub fn get<T: DeserializeOwned>(key: &str) -> Option<T> {
        node::get_scratch(key).and_then(|json| serde_json::from_str(&json).ok())
    }

    pub fn set<T: Serialize>(key: &str, value: &T) -> Result<(), Error> {
        let json = serde_json::to_string(value).map_err(|e| Error::Invalid(e.to_string()))?;
        node::set_scratch(key, Some(&json))
    }

    pub fn remove(key: &str) -> Result<(), Error> {
        node::set_scratch(key, None)
    }
}
