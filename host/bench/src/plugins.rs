//! `deployd bench plugins`: the cost of calling a driver, and of loading drivers at start.
//!
//! - Heartbeat dispatch: a fresh instance of the bundled `fake` driver from its
//!   `InstancePre`, its `heartbeat` export called, the store dropped — no network, as the
//!   conductor does on every heartbeat. Median and p99 on one task, then calls per second
//!   with `--concurrency` tasks on a multi-threaded runtime.
//! - The heartbeat record: the same dispatch for a 0.2 driver and a 0.1 driver (the test
//!   fixtures' `listen` mode: read the agent's last heartbeat, wait), the agent having
//!   reported progress; 0.2's record carries it, 0.1's adapter drops it. Blocks of calls
//!   alternate between the two, so drift on the machine falls on both.
//! - `--component FILE` (repeatable): any driver, e.g. the Python and JavaScript
//!   examples, beside the bundled `agent_redfish` (the same logic in Rust): size, compile
//!   and load, a load from the compiled cache, and heartbeat dispatch on a node whose
//!   record lacks an image (each driver reads the node, the heartbeat and its scratch,
//!   and fails the call: no network, the same host calls in every language).
//! - Start-up: `--drivers` distinct components (the bundled drivers, made distinct by a
//!   custom section) compiled once into a cache, then loaded by a fresh registry from it.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use uuid::Uuid;

use super::{median, report};
use deployd_engine::agent_sessions::{AgentReport, AgentSessions, CallbackUrl};
use deployd_engine::clock::Clock;
use deployd_engine::driver_host::capability::Services;
use deployd_engine::driver_host::sandbox::Export;
use deployd_engine::driver_host::{Limits, LoadedDriver, Registry};
use deployd_engine::node::NewNode;
use deployd_engine::state_machine::Timeouts;
use deployd_engine::store::{Store, StoreConfig};

#[derive(Clone, Debug, clap::Args)]
pub struct PluginBench {
    /// Calls to time on one task.
    #[arg(long, default_value_t = 20_000)]
    pub calls: usize,
    /// Concurrent tasks for the throughput run.
    #[arg(long, default_value_t = 8)]
    pub concurrency: usize,
    /// Distinct cached drivers to load at start-up.
    #[arg(long, default_value_t = 20)]
    pub drivers: usize,
    /// Also time these driver components (size, compile, heartbeat dispatch).
    #[arg(long = "component")]
    pub components: Vec<std::path::PathBuf>,
}

/// `n` heartbeat calls of `driver` for `node`, one after another: their durations.
async fn time_calls(
    registry: &Registry,
    driver: &Arc<LoadedDriver>,
    node: Uuid,
    n: usize,
) -> anyhow::Result<Vec<Duration>> {
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        registry.call(driver, node, Export::Heartbeat).await?;
        samples.push(t.elapsed());
    }
    Ok(samples)
}

/// A node of `driver` whose agent has called back and reported progress.
async fn listening_node(
    store: &Store,
    agents: &AgentSessions,
    driver: &str,
) -> anyhow::Result<Uuid> {
    let instance = serde_json::json!({"heartbeat_mode": "listen"});
    let node = store
        .create_node(NewNode {
            driver: driver.into(),
            instance_info: instance.as_object().cloned().unwrap_or_default(),
            ..Default::default()
        })
        .await?
        .uuid();
    let url = CallbackUrl::parse("http://127.0.0.1:9").map_err(anyhow::Error::msg)?;
    let report = AgentReport {
        status: None,
        message: Some("prepare_image: running, 1048576 of 8388608 bytes written".into()),
    };
    let now = store.clock().now();
    agents.heartbeat(node, "bench-token", &url, "13.0.0", None, report, now);
    Ok(node)
}

/// The 0.2 heartbeat record against 0.1's, in alternating blocks.
async fn heartbeat_record(
    registry: &Registry,
    store: &Store,
    agents: &AgentSessions,
    calls: usize,
) -> anyhow::Result<()> {
    let now = registry
        .load(
            &std::fs::read(deployd_fixtures::TEST_DRIVER)?,
            Limits::default(),
        )
        .await?;
    let old = registry
        .load(
            &std::fs::read(deployd_fixtures::DRIVER_V0_1)?,
            Limits::default(),
        )
        .await?;
    let (now_node, old_node) = (
        listening_node(store, agents, "test_driver").await?,
        listening_node(store, agents, "driver_v0_1").await?,
    );
    time_calls(registry, &now, now_node, 500).await?;
    time_calls(registry, &old, old_node, 500).await?;
    let (mut a, mut b) = (Vec::new(), Vec::new());
    let block = 500.min(calls.max(1));
    for _ in 0..calls.div_ceil(block) {
        a.extend(time_calls(registry, &now, now_node, block).await?);
        b.extend(time_calls(registry, &old, old_node, block).await?);
    }
    a.sort();
    b.sort();
    report(
        "heartbeat dispatch, WIT 0.2 driver reading the 0.2 record (status + progress)",
        &a,
    );
    report(
        "heartbeat dispatch, WIT 0.1 driver reading the 0.1 record (through the adapter)",
        &b,
    );
    println!(
        "0.2 / 0.1 median: {:.2}",
        median(&a).as_secs_f64() / median(&b).as_secs_f64()
    );
    Ok(())
}

/// An arbitrary component: size, compile + load, a load from the compiled cache by a
/// fresh registry (an engine restart), and heartbeat dispatch.
async fn component(
    registry: &Registry,
    cache: &std::path::Path,
    store: &Store,
    agents: &AgentSessions,
    (label, bytes): (&str, &[u8]),
    calls: usize,
) -> anyhow::Result<()> {
    let t = Instant::now();
    let driver = registry.load(bytes, Limits::default()).await?;
    let load = t.elapsed();
    let restarted = Registry::new(registry.services().clone(), Some(cache.to_path_buf()), 8)?;
    let t = Instant::now();
    restarted.load(bytes, Limits::default()).await?;
    let cached = t.elapsed();
    let name = driver.description.name.clone();
    let node = listening_node(store, agents, &name).await?;
    time_calls(registry, &driver, node, 20.min(calls)).await?;
    let mut samples = time_calls(registry, &driver, node, calls).await?;
    samples.sort();
    println!(
        "{name} ({label}): {:.1} MiB, WIT {}, compile + load {:.2} s, from the compiled cache {:.0} ms",
        super::mib(bytes.len() as u64),
        driver.world(),
        load.as_secs_f64(),
        cached.as_secs_f64() * 1e3
    );
    report(&format!("{name}: heartbeat dispatch"), &samples);
    Ok(())
}

/// `bytes` with a custom section appended: the same driver under another content hash.
fn variant(bytes: &[u8], i: usize) -> Vec<u8> {
    let name = b"deployd-bench";
    let payload = i.to_le_bytes();
    let body_len = 1 + name.len() + payload.len();
    let mut out = bytes.to_vec();
    out.push(0); // custom section
    out.push(body_len as u8);
    out.push(name.len() as u8);
    out.extend_from_slice(name);
    out.extend_from_slice(&payload);
    out
}

pub fn run_plugins(args: &PluginBench) -> anyhow::Result<()> {
    let runtime = super::runtime()?;
    runtime.block_on(async {
        let bench_dir = super::core::BenchDir::new(None)?;
        let dir = bench_dir.path().to_path_buf();
        let (store, _) = Store::open(&dir.join("store"), &StoreConfig::default(), Timeouts::uniform(std::time::Duration::from_secs(1800)), Clock::new())?;
        let store = Arc::new(store);
        let services = Services::new(
            store.clone(),
            Arc::new(AgentSessions::default()),
            64,
            Default::default(),
        );
        let registry = Arc::new(Registry::new(services.clone(), Some(dir.join("compiled")), 64)?);
        let fake = deployd_fixtures::BUNDLED.iter().find(|(n, _)| *n == "fake").expect("fake is bundled").1;
        let driver = registry.load(fake, Limits::default()).await?;
        let node = store.create_node(NewNode { driver: "fake".into(), ..Default::default() }).await?.uuid();

        time_calls(&registry, &driver, node, 1000).await?;
        let mut samples = time_calls(&registry, &driver, node, args.calls).await?;
        samples.sort();
        report("heartbeat dispatch (fresh instance + call + drop), one task", &samples);
        heartbeat_record(&registry, &store, &services.agents, args.calls).await?;
        if !args.components.is_empty() {
            // The same driver logic in Rust, as the baseline of the others.
            let rust = deployd_fixtures::BUNDLED.iter().find(|(n, _)| *n == "agent_redfish").expect("agent_redfish is bundled").1;
            let calls = (args.calls / 10).max(100);
            let cache = dir.join("compiled");
            component(&registry, &cache, &store, &services.agents, ("bundled, Rust", rust), calls).await?;
            for path in &args.components {
                let bytes = std::fs::read(path)?;
                component(&registry, &cache, &store, &services.agents, (&path.display().to_string(), &bytes), calls).await?;
            }
        }

        let per_task = args.calls / args.concurrency.max(1);
        let t = Instant::now();
        let mut tasks = Vec::new();
        for _ in 0..args.concurrency.max(1) {
            let (registry, driver) = (registry.clone(), driver.clone());
            tasks.push(tokio::spawn(async move {
                for _ in 0..per_task {
                    registry.call(&driver, node, Export::Heartbeat).await.expect("call");
                }
            }));
        }
        for task in tasks {
            task.await?;
        }
        let total = per_task * args.concurrency.max(1);
        println!(
            "heartbeat dispatch throughput: {total} calls in {:.2} s = {:.0} calls/s ({} tasks, 2 worker threads)",
            t.elapsed().as_secs_f64(),
            total as f64 / t.elapsed().as_secs_f64(),
            args.concurrency
        );

        // Start-up with cached drivers.
        let cache = dir.join("startup-cache");
        let components: Vec<Vec<u8>> = (0..args.drivers)
            .map(|i| variant(deployd_fixtures::BUNDLED[i % deployd_fixtures::BUNDLED.len()].1, i))
            .collect();
        let cold = Registry::new(services.clone(), Some(cache.clone()), 64)?;
        let t = Instant::now();
        for c in &components {
            cold.load(c, Limits::default()).await?;
        }
        println!("start-up, {} drivers, nothing cached (compile + describe): {:.1} ms", args.drivers, t.elapsed().as_secs_f64() * 1e3);
        let samples = {
            let mut out = Vec::new();
            for _ in 0..5 {
                let warm = Registry::new(services.clone(), Some(cache.clone()), 64)?;
                let t = Instant::now();
                for c in &components {
                    warm.load(c, Limits::default()).await?;
                }
                out.push(t.elapsed());
            }
            out.sort();
            out
        };
        println!(
            "start-up, {} drivers from the compiled cache (hash + deserialize + link + describe): median {:.1} ms of {} runs",
            args.drivers,
            median(&samples).as_secs_f64() * 1e3,
            samples.len()
        );
        anyhow::Ok(())
    })
}
