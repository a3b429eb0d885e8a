//! `deployd bench`: the measurements of `deployd-bench`, in a build made with
//! `--features bench` only, so that the shipped binary links neither the benches nor the
//! test-only drivers they load. They run inside this binary because several start it
//! again as `deployd serve` or `deployd lab` (the engine a bench measures is the one it
//! was built with, or `--engine-bin`).

use clap::Subcommand;

#[derive(Subcommand)]
pub enum Bench {
    /// Sweep cost, touch throughput, memory and disk per node.
    Core(deployd_bench::CoreBench),
    /// Driver call cost and start-up with cached drivers.
    Plugins(deployd_bench::PluginBench),
    /// The API under load from wrk: heartbeats and node reads.
    Api(deployd_bench::ApiBench),
    /// The agent's verified image write against dd of the same image.
    Agent(deployd_bench::AgentBench),
    /// A thousand simulated machines deploying at once.
    Fleet(deployd_bench::FleetBench),
    /// Power-on to the agent's first heartbeat on a lab VM, per boot path (iPXE, virtual
    /// media, Secure Boot; BIOS and UEFI), and the virtual media ISO's size and build time.
    Boot(deployd_bench::BootBench),
    /// GET /v1 latency and engine memory during a flood (auth, lookup, list).
    Flood(deployd_bench::FloodBench),
    /// Named port create, get by name and list by address as the ports grow.
    Ports(deployd_bench::PortsBench),
    /// The shared store (PostgreSQL): touches by several engines, sweeps with nothing and
    /// with 1,000 expired.
    SharedStore(deployd_bench::SharedStoreBench),
    /// Engines serving one shared store (PostgreSQL) under heartbeats, beside one on
    /// sled; the takeover of a killed engine.
    Cluster(deployd_bench::ClusterBench),
    /// The web console at fleet scale in headless chromium: the fleet's first event, the
    /// fleet view's first paint, a filter change.
    Dashboard(deployd_bench::DashboardBench),
    /// One bench by this build and a previous one (`--engine-bin`), alternated: medians
    /// and ratios.
    Compare(deployd_bench::CompareBench),
}

pub fn run(which: Bench) -> anyhow::Result<()> {
    match which {
        Bench::Core(args) => deployd_bench::run_core(&args),
        Bench::Plugins(args) => deployd_bench::run_plugins(&args),
        Bench::Api(args) => deployd_bench::run_api(&args),
        Bench::Agent(args) => deployd_bench::run_agent(&args),
        Bench::Fleet(args) => deployd_bench::run_fleet(&args),
        Bench::Boot(args) => deployd_bench::run_boot(&args),
        Bench::Flood(args) => deployd_bench::run_flood(&args),
        Bench::Ports(args) => deployd_bench::run_ports(&args),
        Bench::SharedStore(args) => deployd_bench::run_shared_store(&args),
        Bench::Cluster(args) => deployd_bench::run_cluster(&args),
        Bench::Compare(args) => deployd_bench::run_compare(&args),
        Bench::Dashboard(args) => deployd_bench::run_dashboard(&args),
    }
}
