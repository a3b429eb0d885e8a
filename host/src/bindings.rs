//! Host bindings for the `deployd:driver` world (`wit/driver.wit`): the types and `Host`
//! traits that [`crate::capability`] implements and [`crate::plugin`] calls through. Imports are async (they do network and
//! disk I/O on tokio) and trappable (a host failure that is not the driver's business, such
//! as a corrupt store, ends the call instead of being handed to the guest).

wasmtime::component::bindgen!({
    path: "../wit",
    world: "driver",
    imports: { default: async | trappable },
    exports: { default: async },
});

pub use self::deployd::driver::types::Family;
