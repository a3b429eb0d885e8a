//! End-to-end tests over real processes on loopback (`deployd serve`, `deployd lab`,
//! agents, BMC emulators, the real `baremetal` CLI), in one test binary; each file is a
//! module. What they share is `deployd-test-support`'s `processes` and `emulators`.

mod baremetal_cli;
mod benches;
mod client_suites;
mod cluster;
mod dashboard;
mod deployd_cli;
mod images;
mod ironic_api;
mod memory_bounds;
mod real_ipa;
mod seed_end_to_end;
mod serve;
mod shared_store;
mod storage_faults;
mod vm;
mod vm_console;
