//! What the tests share, in one crate so that the engine's integration tests
//! (`host/engine/tests`) and the end-to-end tests (`tests/`) use one copy.
//!
//! | module | what it holds | used by |
//! |---|---|---|
//! | [`store`] | a store in a temporary directory, walks through the state machine, a timeout recorder | engine tests |
//! | [`lab`] | a conductor, registry and sweeper in process, with drivers loaded from `plugins/` | engine tests |
//! | [`server`] | an engine served on loopback, and its answers | engine tests |
//! | [`emulators`] | sushy-tools, pyghmi's `fakebmc`, in-process peers, the test virtualenv | both |
//! | [`vm`] | the musl agent, a ramdisk, a bootable test OS image, console logs | end-to-end tests |
//! | [`netns`] | a network namespace with a tap for a VM and a veth pair to it, the real dnsmasq in it | end-to-end tests |
//! | [`postgres`] | a real PostgreSQL cluster on loopback, a database per test | engine tests |
//! | [`balancer`] | Debian's haproxy in front of several engines | end-to-end tests |
//! | [`browser`] | headless chromium driven by WebDriver | end-to-end tests, the dashboard bench |
//! | [`processes`] | the real `deployd` binary as `serve` and `lab` processes, and calls to them | end-to-end tests |

pub mod balancer;
pub mod browser;
pub mod emulators;
pub mod lab;
pub mod netns;
pub mod postgres;
pub mod processes;
pub mod server;
pub mod store;
pub mod vm;
