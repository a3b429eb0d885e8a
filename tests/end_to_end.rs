//! End-to-end tests over real processes on loopback (`deployd serve`, `deployd lab`,
//! agents, BMC emulators, the real `baremetal` CLI), in one test binary; each file is a
//! module.

#[path = "support/mod.rs"]
mod support;

mod baremetal_cli;
mod client_suites;
mod deployd_cli;
mod real_ipa;
mod seed_end_to_end;
mod serve;
