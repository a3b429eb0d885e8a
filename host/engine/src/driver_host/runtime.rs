//! The wasmtime engine every driver runs on.
//!
//! - Pooling allocator: instantiation per call costs microseconds (wasm-host-notes §6),
//!   so every driver call gets a fresh instance and nothing leaks between calls or nodes.
//! - Epoch interruption with a 10 ms ticker thread: a call's deadline is a number of
//!   ticks, checked by compiled code at loop heads and function entries, so a spinning
//!   driver is stopped without fuel's per-instruction cost.
//! - `max_concurrent_calls` bounds the pool; callers take a permit first (`sandbox`).

use std::time::Duration;

use wasmtime::{Config, Enabled, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

/// How often the epoch advances; a deadline is rounded up to whole ticks.
pub const TICK: Duration = Duration::from_millis(10);

/// The largest memory any driver may be given (per-driver limits are at most this).
pub const MAX_MEMORY: usize = 256 << 20;

/// Builds the engine and starts its epoch ticker (which stops when the engine is dropped).
pub fn new_engine(max_concurrent_calls: u32) -> wasmtime::Result<Engine> {
    let mut pool = PoolingAllocationConfig::default();
    let calls = max_concurrent_calls.max(1);
    pool.total_component_instances(calls)
        // A Rust component is a handful of core instances (the program and its adapters).
        .total_core_instances(calls * 8)
        .total_memories(calls * 2)
        .total_tables(calls * 8)
        .max_memory_size(MAX_MEMORY)
        // Reset only dirty pages when a slot is reused (Linux ≥ 6.7; off elsewhere).
        .pagemap_scan(Enabled::Auto)
        .linear_memory_keep_resident(1 << 20)
        .table_keep_resident(1 << 16);
    let mut config = compiling_config();
    config.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    let engine = Engine::new(&config)?;
    let weak = engine.weak();
    std::thread::Builder::new()
        .name("wasm-epoch".into())
        .spawn(move || {
            while let Some(engine) = weak.upgrade() {
                engine.increment_epoch();
                drop(engine);
                std::thread::sleep(TICK);
            }
        })?;
    Ok(engine)
}

/// The settings compiled code depends on, shared by the running engine and the
/// compiler's ([`compiling_engine`]), so what one compiles the other loads.
fn compiling_config() -> Config {
    let mut config = Config::new();
    config.wasm_component_model(true).epoch_interruption(true);
    config
}

/// An engine that only compiles (`deployd compile-driver`): no pool, no ticker.
pub fn compiling_engine() -> wasmtime::Result<Engine> {
    Engine::new(&compiling_config())
}

/// A key that changes whenever compiled artifacts stop being loadable by this engine.
pub fn compatibility_key(engine: &Engine) -> String {
    use std::hash::{DefaultHasher, Hash, Hasher};
    let mut h = DefaultHasher::new();
    engine.precompile_compatibility_hash().hash(&mut h);
    format!("{:016x}", h.finish())
}
