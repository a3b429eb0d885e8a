//! The engine's integration tests, in one test binary (one link instead of nine; each
//! file is a module, named as before).

mod agent_api;
mod agent_commands;
mod api;
mod architecture;
mod drivers;
mod lab;
mod plugins;
mod race;
mod restart;
mod seed;
mod shared_store;
mod store_contract;
