//! `deployd bench plugins`: the cost of calling a driver, and of loading drivers at start.
//!
//! - Heartbeat dispatch: a fresh instance of the bundled `fake` driver from its
//!   `InstancePre`, its `heartbeat` export called, the store dropped — no network, as the
//!   conductor does on every heartbeat. Median and p99 on one task, then calls per second
//!   with `--concurrency` tasks on a multi-threaded runtime.
//! - Start-up: `--drivers` distinct components (the bundled drivers, made distinct by a
//!   custom section) compiled once into a cache, then loaded by a fresh registry from it.

use std::sync::Arc;

use tokio::time::Instant;

use super::{median, report};
use deployd_engine::agents::Agents;
use deployd_engine::capability::Services;
use deployd_engine::clock::Clock;
use deployd_engine::node::NewNode;
use deployd_engine::plugin::sandbox::Export;
use deployd_engine::plugin::{Limits, Registry};
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
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let bench_dir = super::core::BenchDir::new(None)?;
        let dir = bench_dir.path().to_path_buf();
        let (store, _) = Store::open(&dir.join("store"), &StoreConfig::default(), Timeouts::uniform(std::time::Duration::from_secs(1800)), Clock::new())?;
        let store = Arc::new(store);
        let services = Services::new(store.clone(), Arc::new(Agents::default()), 64);
        let registry = Arc::new(Registry::new(services.clone(), Some(dir.join("compiled")), 64)?);
        let fake = deployd_fixtures::BUNDLED.iter().find(|(n, _)| *n == "fake").expect("fake is bundled").1;
        let driver = registry.load(fake, Limits::default()).await?;
        let node = store.create_node(NewNode { driver: "fake".into(), ..Default::default() })?.uuid();

        for _ in 0..1000 {
            registry.call(&driver, node, Export::Heartbeat).await?;
        }
        let mut samples = Vec::with_capacity(args.calls);
        for _ in 0..args.calls {
            let t = Instant::now();
            registry.call(&driver, node, Export::Heartbeat).await?;
            samples.push(t.elapsed());
        }
        samples.sort();
        report("heartbeat dispatch (fresh instance + call + drop), one task", &samples);

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
