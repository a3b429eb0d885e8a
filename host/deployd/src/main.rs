//! The `deployd` command line.

#[cfg(feature = "bench")]
mod bench;
mod cli;
mod console_cli;
mod demo;
mod dnsmasq;
mod driver_test;
mod store_cli;

use clap::{Parser, Subcommand};
use deployd_engine::clock::Clock;
use deployd_engine::config::{Config, Overrides};
use deployd_engine::engine::Engine;

#[derive(Parser)]
#[command(
    name = "deployd",
    version,
    about = "A bare-metal deploy engine with WebAssembly drivers"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the engine: the API, the node store on sled, the drivers and the sweeper.
    Serve(Overrides),
    /// Nodes: list, show, create, manage, provide, deploy, undeploy, delete, power.
    Node {
        #[command(flatten)]
        endpoint: crate::cli::Endpoint,
        #[command(subcommand)]
        command: crate::cli::NodeCommand,
    },
    /// Ports (the MACs agents are looked up by).
    Port {
        #[command(flatten)]
        endpoint: crate::cli::Endpoint,
        #[command(subcommand)]
        command: crate::cli::PortCommand,
    },
    /// Drivers: list, load and unload at runtime; test one against a simulated machine.
    Driver {
        #[command(flatten)]
        endpoint: crate::cli::Endpoint,
        #[command(subcommand)]
        command: crate::cli::DriverCommand,
    },
    /// The store: an online backup, a restore into a new data directory, a check at rest.
    #[command(subcommand)]
    Store(store_cli::StoreCommand),
    /// A ramdisk agent: looks its machine up, heartbeats, writes images to its disk.
    Agent(deployd_agent::AgentArgs),
    /// The whole story in a minute: engine, lab, image, deploys, a killed agent, a summary.
    Demo(crate::demo::DemoArgs),
    /// Simulated machines behind a Redfish BMC, whose power-on boots `deployd agent`.
    Lab(deployd_lab::LabArgs),
    /// Network boot: the configuration of the operator's DHCP server for the boot chain.
    #[command(subcommand)]
    Boot(Boot),
    /// Compiles the driver component on stdin (what `deployd serve` runs per driver).
    #[command(hide = true)]
    CompileDriver {
        #[arg(long)]
        compat: String,
        #[arg(long)]
        memory_mib: u64,
        #[arg(long)]
        out: std::path::PathBuf,
    },
    /// Carries one connection of a lab VM to the engine (QEMU runs it per connection).
    #[command(hide = true)]
    LabRelay { addr: std::net::SocketAddr },
    /// The deploy kernel and ramdisk machines network-boot into.
    #[command(subcommand)]
    Ramdisk(Ramdisk),
    /// Measure the engine (in a build with `--features bench`).
    #[cfg(feature = "bench")]
    #[command(subcommand)]
    Bench(bench::Bench),
}

#[derive(Subcommand)]
enum Boot {
    /// Prints the dnsmasq configuration that hands machines deployd's boot chain.
    DnsmasqConfig(dnsmasq::DnsmasqArgs),
}

#[derive(Subcommand)]
enum Ramdisk {
    /// Builds `deploy_kernel` and `deploy_ramdisk` around a static deployd-agent.
    Build(deployd_ramdisk::BuildArgs),
}

fn ramdisk_build(args: &deployd_ramdisk::BuildArgs) -> anyhow::Result<()> {
    let built = deployd_ramdisk::build(args)?;
    let size = |p: &std::path::Path| std::fs::metadata(p).map_or(0, |m| m.len());
    println!(
        "deploy_kernel  {} ({:.1} MB, Linux {})",
        built.kernel.display(),
        size(&built.kernel) as f64 / 1e6,
        built.kernel_version
    );
    println!(
        "deploy_ramdisk {} ({:.1} MB, {} drivers: {})",
        built.ramdisk.display(),
        size(&built.ramdisk) as f64 / 1e6,
        built.modules.len(),
        built.modules.join(" ")
    );
    if !built.missing.is_empty() {
        println!(
            "not in this kernel (neither a module nor built in): {}",
            built.missing.join(" ")
        );
    }
    println!(
        "set them on a node: driver_info.deploy_kernel={} driver_info.deploy_ramdisk={}",
        built.kernel.display(),
        built.ramdisk.display()
    );
    if let Some(esp) = &built.bootloader {
        println!(
            "bootloader     {} (Debian's signed shim and GRUB; for Secure Boot over virtual media: driver_info.bootloader={})",
            esp.display(),
            esp.display()
        );
    }
    Ok(())
}

/// mimalloc instead of glibc's malloc: a heartbeat allocates and frees many small
/// objects on two threads, where glibc spent a tenth of the engine's time (measured with
/// `deployd bench api`).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's `mi_option_purge_delay` (the same place in v2's and v3's `mi_option_e`;
/// libmimalloc-sys names no constant for it).
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Memory the engine frees goes back to the system at once, not a second later (v3's
/// default): under a fleet's deploys the allocator held freed pages for a reuse that did
/// not come, and the engine's resident set grew past what it used. With 1,000 machines
/// deploying (`bench fleet`) its peak fell from 345 to about 250 MiB; `bench api`'s
/// heartbeats and GETs did not slow (within run-to-run noise). An operator's
/// `MIMALLOC_PURGE_DELAY` is left to rule.
fn purge_freed_memory_at_once() {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_some() {
        return;
    }
    // SAFETY: sets a process-wide allocator option, which mimalloc reads at each purge.
    #[allow(unsafe_code)]
    unsafe {
        libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, 0);
    }
}

fn main() -> anyhow::Result<()> {
    purge_freed_memory_at_once();
    let cli = Cli::parse();
    // The demo draws on the terminal: only errors may interrupt it.
    let default = match &cli.command {
        Command::Demo(_) => "error",
        // The driver's own log lines, and the engine's warnings.
        Command::Driver {
            command: cli::DriverCommand::Test(_),
            ..
        } => "warn,deployd_engine::driver_host::capability::log=info",
        // sled logs each failed flush of a full disk; the store says it once, with the
        // cause, and again when it recovers (`store::health`).
        _ => "info,sled=off",
    };
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| default.into()),
        )
        .init();
    let runtime = || tokio::runtime::Runtime::new();
    match cli.command {
        Command::Serve(overrides) => serve(Config::load(&overrides)?),
        Command::Node { endpoint, command } => crate::cli::node(&endpoint, command),
        Command::Port { endpoint, command } => crate::cli::port(&endpoint, command),
        Command::Driver {
            command: cli::DriverCommand::Test(args),
            ..
        } => runtime()?.block_on(driver_test::run(args)),
        Command::Driver { endpoint, command } => crate::cli::driver(&endpoint, command),
        Command::Store(command) => store_cli::run(command),
        Command::Agent(args) => runtime()?
            .block_on(deployd_agent::runner::run(args))?
            .exit(),
        Command::Demo(args) => runtime()?.block_on(crate::demo::run(args)),
        Command::Lab(args) => runtime()?.block_on(deployd_lab::run(args)),
        Command::Ramdisk(Ramdisk::Build(args)) => ramdisk_build(&args),
        Command::Boot(Boot::DnsmasqConfig(args)) => {
            print!("{}", dnsmasq::config(&args));
            Ok(())
        }
        Command::CompileDriver {
            compat,
            memory_mib,
            out,
        } => std::process::exit(deployd_engine::driver_host::compiler::child_main(
            &compat, memory_mib, &out,
        )),
        Command::LabRelay { addr } => Ok(deployd_lab::vm::relay(addr)?),
        #[cfg(feature = "bench")]
        // The benches measure the engine as `serve` runs it.
        Command::Bench(which) => {
            no_huge_pages();
            bench::run(which)
        }
    }
}

/// Transparent huge pages off for the engine: mimalloc asks for them, and compiling the
/// drivers at start then left 70 MiB of huge pages resident for good (RSS 140 MiB on a
/// fresh data dir, 80 MiB without them). Under load they cost time too: zeroing a 2 MiB
/// page at mimalloc's page extensions was 9 % of `bench api`'s CPU; without them its
/// heartbeats ran 14 % and its GETs 7 % faster (medians of 3 alternated runs). Only for
/// `serve` and the benches (which measure the engine as `serve` runs it): the lab's QEMU
/// guests, children of other commands, keep them.
fn no_huge_pages() {
    if let Err(e) = rustix::thread::disable_transparent_huge_pages(true) {
        tracing::warn!("transparent huge pages stay on: {e}");
    }
}

fn serve(mut config: Config) -> anyhow::Result<()> {
    // Drivers compile in this binary's `compile-driver`, so their memory is the child's.
    config.plugins.compiler = deployd_engine::driver_host::compiler::Compiler::this_executable(
        config.plugins.compile_memory_mib,
    )?;
    let config = &config;
    no_huge_pages();
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async {
        let stop = deployd_agent::signal::shutdown();
        let engine = Engine::start(config, Clock::new()).await?;
        let r = &engine.recovery;
        tracing::info!(
            listen = %engine.addr,
            data_dir = %config.data_dir.display(),
            nodes = r.nodes,
            waiting = r.waiting,
            failed_on_restart = r.failed.len(),
            drivers = engine.conductor.registry().list().len(),
            "deployd is running"
        );
        stop.await;
        tracing::info!("shutting down");
        engine.shutdown().await
    })
}
