//! `deployd bench core`: the store and sweeper figures the engine-core issue asks for.
//!
//! It builds a fleet of `--nodes` nodes, all in `wait call-back`, on a manual clock that
//! gives node *i* the deadline `T + i µs`, so a sweep at `T + (k − 1) µs` finds exactly *k*
//! expired. Then it measures:
//!
//! - a sweep with nothing expired (many samples; median and p99);
//! - sweeps that each fail exactly `--expired` nodes (includes the one flush per sweep);
//! - touches per second on one thread (durable as the store makes them: flushed in the
//!   background every `flush_every_ms`);
//! - sweeps over entries of touched nodes, which re-file them without failing anyone;
//! - resident memory and disk per node.
//!
//! Run `deployd bench core --nodes 10000` and `--nodes 1000000` to see the sweep cost not
//! depend on fleet size.

use std::time::Duration;

use anyhow::Context;
use tokio::time::Instant;
use uuid::Uuid;

use deployd_engine::clock::{Clock, Timestamp};
use deployd_engine::node::NewNode;
use deployd_engine::state_machine::{ENROLL_TO_WAIT_CALL_BACK, Timeouts};
use deployd_engine::store::{Store, StoreConfig};

use super::{dir_size, median, mib, report, rss_bytes, sample_async};

#[derive(Clone, Debug, clap::Args)]
pub struct CoreBench {
    /// Nodes in wait call-back.
    #[arg(long, default_value_t = 100_000)]
    pub nodes: usize,
    /// Nodes that expire in each "expired" sweep sample.
    #[arg(long, default_value_t = 1000)]
    pub expired: usize,
    /// Touches to time.
    #[arg(long, default_value_t = 500_000)]
    pub touches: usize,
    /// sled's page cache, in MiB.
    #[arg(long, default_value_t = 256)]
    pub cache_mb: u64,
    /// Record each state change in the node's history (`[conductor] node_history`).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub node_history: bool,
    /// Directory for the store (a temporary one by default).
    #[arg(long)]
    pub data_dir: Option<std::path::PathBuf>,
}

const TIMEOUT: Duration = Duration::from_secs(1800);
const START: Timestamp = Timestamp::from_micros(1_800_000_000_000_000);

pub fn run_core(args: &CoreBench) -> anyhow::Result<()> {
    super::runtime()?.block_on(core(args))
}

async fn core(args: &CoreBench) -> anyhow::Result<()> {
    let dir = BenchDir::new(args.data_dir.as_deref())?;
    let tmp = dir.path();
    let clock = Clock::manual(START);
    let (store, _) = Store::open(
        &tmp.join("store"),
        &StoreConfig {
            cache_capacity: args.cache_mb << 20,
            node_history: args.node_history,
            ..StoreConfig::default()
        },
        Timeouts::uniform(TIMEOUT),
        clock.clone(),
    )?;

    let t = Instant::now();
    let uuids = populate(&store, &clock, args.nodes).await?;
    println!(
        "fleet: {} nodes in wait call-back, built in {:.1} s",
        uuids.len(),
        t.elapsed().as_secs_f64()
    );
    let rss = rss_bytes();
    store.flush()?;
    let disk = dir_size(tmp)?;
    println!(
        "memory: {:.1} MiB resident ({:.0} B/node); disk: {:.1} MiB ({:.0} B/node; sled reports {:.1} MiB)",
        mib(rss),
        rss as f64 / args.nodes as f64,
        mib(disk),
        disk as f64 / args.nodes as f64,
        mib(store.size_on_disk().await?),
    );

    // Nothing expired: the front of the index is 1 s in the future.
    let first_deadline = START.plus(TIMEOUT);
    let quiet = first_deadline.as_micros() - 1_000_000;
    let samples = sample_async(10_000, || async {
        let failed = store
            .fail_expired(Timestamp::from_micros(quiet), 1 << 20)
            .await?;
        anyhow::ensure!(failed.is_empty(), "nothing is expired yet");
        Ok(())
    })
    .await?;
    report("sweep, nothing expired", &samples);

    // k expired per sweep: window j covers nodes [j*k, (j+1)*k).
    let k = args.expired.max(1);
    // At most 20 samples, and never more than half the fleet, which is left for touches.
    let windows = (args.nodes / k / 2).min(20);
    let mut j = 0;
    let samples = sample_async(windows, || {
        j += 1;
        let (store, j) = (&store, j);
        let now = first_deadline.plus(Duration::from_micros((j * k - 1) as u64));
        async move {
            let failed = store.fail_expired(now, 1 << 20).await?;
            anyhow::ensure!(failed.len() == k, "window {j}: {} failed", failed.len());
            Ok(())
        }
    })
    .await?;
    if !samples.is_empty() {
        report(&format!("sweep, {k} expired (one flush)"), &samples);
        let med = median(&samples);
        println!(
            "  = {:.2} µs per expired node",
            med.as_secs_f64() * 1e6 / k as f64
        );
    }

    // Touches on one thread, over the nodes no sweep window reached, in a scattered order
    // (a prime stride) over the first `covered` of them, each touched at least once.
    let alive = &uuids[windows * k..];
    anyhow::ensure!(!alive.is_empty(), "no nodes left to touch; raise --nodes");
    let mut covered = args.touches.min(alive.len()).max(1);
    if covered > 1 && covered.is_multiple_of(7919) {
        covered -= 1;
    }
    let t = Instant::now();
    for i in 0..args.touches {
        clock.advance(Duration::from_micros(1));
        store
            .touch_provisioning(alive[(i * 7919) % covered])
            .await?;
    }
    let elapsed = t.elapsed();
    println!(
        "touches: {} in {:.2} s = {:.0}/s on one thread ({:.2} µs each)",
        args.touches,
        elapsed.as_secs_f64(),
        args.touches as f64 / elapsed.as_secs_f64(),
        elapsed.as_secs_f64() * 1e6 / args.touches as f64
    );

    // The touched nodes' entries still sit at their old deadlines; sweeps over them
    // re-file each at its real deadline and fail nothing.
    let refile_windows = (covered / k).min(20);
    let mut j = windows;
    let samples = sample_async(refile_windows, || {
        j += 1;
        let store = &store;
        let now = first_deadline.plus(Duration::from_micros((j * k - 1) as u64));
        async move {
            let failed = store.fail_expired(now, 1 << 20).await?;
            anyhow::ensure!(failed.is_empty(), "touched nodes are never failed");
            Ok(())
        }
    })
    .await?;
    if !samples.is_empty() {
        report(&format!("sweep re-filing {k} touched entries"), &samples);
    }
    Ok(())
}

/// Nodes per batch of a bulk load.
const CHUNK: usize = 10_000;

/// Enrolls `n` nodes and takes them to wait call-back, 10,000 at a time (so the nodes
/// each step returns are dropped as it goes, and a million-node fleet is never held
/// whole in memory), printing how long creating and each step took.
async fn populate(store: &Store, clock: &Clock, n: usize) -> anyhow::Result<Vec<Uuid>> {
    // A bulk load walks the nodes in key order, as any bulk load into a B-tree should:
    // consecutive writes land on the same leaf (node records, their history, their
    // deadline entries) instead of a random one each. The uuids are random (v4, as an
    // operator's tools make them), only the order of loading is sorted.
    let mut uuids: Vec<Uuid> = (0..n).map(|_| Uuid::new_v4()).collect();
    uuids.sort_unstable();

    let t = Instant::now();
    on_every_core(&uuids, |chunk| {
        let batch = chunk
            .iter()
            .map(|&uuid| NewNode {
                uuid: Some(uuid),
                driver: "fake".into(),
                ..Default::default()
            })
            .collect();
        for node in at_once(store.create_nodes(batch))? {
            node?;
        }
        Ok(())
    })?;
    let mut steps = vec![format!("enroll {:.1} s", t.elapsed().as_secs_f64())];
    let (last, path) = ENROLL_TO_WAIT_CALL_BACK.split_last().expect("a path");
    for &event in path {
        let t = Instant::now();
        on_every_core(&uuids, |chunk| {
            let events = chunk.iter().map(|&u| (u, event));
            for result in at_once(store.apply_events(events))? {
                result?;
            }
            Ok(())
        })?;
        steps.push(format!("{event} {:.1} s", t.elapsed().as_secs_f64()));
    }
    // Node i enters wait call-back at START + i µs, so its deadline is START + timeout + i µs.
    let t = Instant::now();
    let mut first = true;
    for chunk in uuids.chunks(CHUNK) {
        let results = store
            .apply_events(chunk.iter().map(|&u| {
                if !std::mem::take(&mut first) {
                    clock.advance(Duration::from_micros(1));
                }
                (u, *last)
            }))
            .await?;
        for r in results {
            r?;
        }
    }
    steps.push(format!("{last} {:.1} s", t.elapsed().as_secs_f64()));
    println!("  steps: {}", steps.join(", "));
    Ok(uuids)
}

/// Runs `work` over `uuids` in chunks of [`CHUNK`], a contiguous share per core (as the
/// engine's API takes writes from many tasks at once), each share in key order.
fn on_every_core(
    uuids: &[Uuid],
    work: impl Fn(&[Uuid]) -> anyhow::Result<()> + Sync,
) -> anyhow::Result<()> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let share = uuids.len().div_ceil(cores).max(1);
    std::thread::scope(|s| {
        let workers: Vec<_> = uuids
            .chunks(share)
            .map(|mine| s.spawn(|| mine.chunks(CHUNK).try_for_each(&work)))
            .collect();
        workers
            .into_iter()
            .try_for_each(|w| w.join().expect("a loader does not panic"))
    })
}

/// A store call made on a loader's own thread (one per core): sled answers at once,
/// without waiting on a runtime.
fn at_once<T>(call: impl std::future::Future<Output = T>) -> T {
    futures_util::FutureExt::now_or_never(call).expect("a sled store answers at once")
}

/// Where a bench keeps its store: the given directory (kept), or a temporary one that is
/// removed when the bench ends.
pub(super) enum BenchDir {
    Given(std::path::PathBuf),
    Temporary(tempfile::TempDir),
}

impl BenchDir {
    pub(super) fn new(given: Option<&std::path::Path>) -> anyhow::Result<BenchDir> {
        Ok(match given {
            Some(d) => {
                std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
                BenchDir::Given(d.to_path_buf())
            }
            None => BenchDir::Temporary(
                tempfile::Builder::new()
                    .prefix("deployd-bench-")
                    .tempdir()
                    .context("creating a temporary directory")?,
            ),
        })
    }

    pub(super) fn path(&self) -> &std::path::Path {
        match self {
            BenchDir::Given(p) => p,
            BenchDir::Temporary(t) => t.path(),
        }
    }
}
