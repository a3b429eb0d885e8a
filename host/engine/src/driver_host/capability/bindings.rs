//! Host bindings for the `deployd:driver` worlds: the types and `Host` traits that
//! the capabilities implement and [`crate::driver_host`] calls through.
//!
//! - The root is the current line, 0.2 (`wit/driver.wit`). Imports are async (they do
//!   network and disk I/O on tokio) and trappable; their errors are
//!   [`CapabilityError`](super::error::CapabilityError)s, which the host turns into
//!   the driver's typed `error` or, for a failure of the host itself (a corrupt store),
//!   a trap that ends the call.
//! - [`v0_1`] is the frozen 0.1 line (`wit/v0.1/driver.wit`), linked beside it so drivers
//!   built against it still load; [`super::v0_1`] adapts its calls.

wasmtime::component::bindgen!({
    path: "../../wit",
    world: "driver",
    imports: { default: async | trappable },
    exports: { default: async },
    trappable_error_type: {
        "deployd:driver/types.error" => crate::driver_host::capability::error::CapabilityError,
    },
});

pub use self::deployd::driver::types::Family;

/// The 0.1 world, with its own types (the component model keeps 0.x lines apart).
pub mod v0_1 {
    wasmtime::component::bindgen!({
        path: "../../wit/v0.1",
        world: "driver",
        imports: { default: async | trappable },
        exports: { default: async },
    });
}
