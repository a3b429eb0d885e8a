//! The bundled drivers, built from `plugins/` for wasm32-wasip2 by this crate's build
//! script: [`BUNDLED`] holds their bytes (embedded in whatever links this crate), and one
//! constant per driver its path in the build tree.

include!(concat!(env!("OUT_DIR"), "/bundled.rs"));
