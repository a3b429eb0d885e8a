//! `deployd bench shared-store`: the shared store (PostgreSQL) under heartbeats and sweeps.
//!
//! It migrates the database at `--store-url`, enrolls one node and walks it to `wait
//! call-back` through the store, then copies it (in SQL, as a fixture) into a fleet of
//! `--nodes`. `--engines` engines, each with its own pool and touch groups, take
//! `--concurrency` heartbeaters between them for `--seconds`, each touch on a random node
//! of the fleet. Then the sweep: with nothing expired, and with 1,000 nodes aged past
//! their deadline. Every figure is on the database's clock and commits (synchronous
//! commit) before it counts.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio::time::Instant;
use uuid::Uuid;

use deployd_engine::node::NewNode;
use deployd_engine::state_machine::{ENROLL_TO_WAIT_CALL_BACK, Timeouts};
use deployd_engine::store::postgres::SharedStore;

#[derive(Clone, Debug, clap::Args)]
pub struct SharedStoreBench {
    /// `postgres://user@host:port/database` (an empty database: the bench fills it).
    #[arg(long, env = "DEPLOYD_STORE_URL")]
    pub store_url: String,
    /// Nodes in `wait call-back`.
    #[arg(long, default_value_t = 100_000)]
    pub nodes: usize,
    /// Engines sharing the store.
    #[arg(long, default_value_t = 3)]
    pub engines: usize,
    /// Heartbeaters, spread over the engines.
    #[arg(long, default_value_t = 300)]
    pub concurrency: usize,
    #[arg(long, default_value_t = 5)]
    pub seconds: u64,
}

pub fn run_shared_store(args: &SharedStoreBench) -> anyhow::Result<()> {
    super::runtime()?.block_on(bench(args))
}

async fn bench(args: &SharedStoreBench) -> anyhow::Result<()> {
    let timeouts = Timeouts::uniform(Duration::from_secs(3600));
    let mut engines = Vec::new();
    for _ in 0..args.engines.max(1) {
        engines.push(Arc::new(
            SharedStore::connect(&args.store_url, timeouts).await?,
        ));
    }
    let fake = NewNode {
        driver: "fake".into(),
        ..Default::default()
    };
    let fleet = populate(&engines[0], &args.store_url, args.nodes.max(1), fake).await?;
    println!("store: {} nodes in wait call-back", fleet.len());

    let fleet = Arc::new(fleet);
    let until = Instant::now() + Duration::from_secs(args.seconds.max(1));
    let tasks: Vec<_> = (0..args.concurrency.max(1))
        .map(|i| {
            let engine = engines[i % engines.len()].clone();
            let fleet = fleet.clone();
            tokio::spawn(async move {
                let mut latencies = Vec::new();
                let mut next = i.wrapping_mul(2_654_435_761);
                while Instant::now() < until {
                    next = next.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                    let node = fleet[(next >> 17) % fleet.len()];
                    let started = Instant::now();
                    engine.touch(node, None).await?;
                    latencies.push(started.elapsed());
                }
                anyhow::Ok(latencies)
            })
        })
        .collect();
    let started = Instant::now();
    let mut latencies = Vec::new();
    for task in tasks {
        latencies.extend(task.await??);
    }
    let elapsed = started.elapsed();
    latencies.sort();
    println!(
        "touches: {} in {:.1} s by {} engines ({} heartbeaters): {:.0}/s, p50 {:.2} ms, p99 {:.2} ms",
        latencies.len(),
        elapsed.as_secs_f64(),
        engines.len(),
        args.concurrency,
        latencies.len() as f64 / elapsed.as_secs_f64(),
        super::median(&latencies).as_secs_f64() * 1e3,
        latencies[latencies.len() * 99 / 100].as_secs_f64() * 1e3,
    );

    let sweeper = &engines[engines.len() - 1];
    // The touches left due entries behind (a touch does not move them): the first sweeps
    // re-file them; then there is nothing to do.
    loop {
        let due = sql(&args.store_url)
            .await?
            .query_one("SELECT count(*) FROM nodes WHERE due <= now()", &[])
            .await?
            .get::<_, i64>(0);
        if due == 0 {
            break;
        }
        sweeper.fail_expired(10_000, None).await?;
    }
    let idle = super::sample_async(20, || sweeper.fail_expired(1000, None)).await?;
    super::report("sweep, nothing expired", &idle);
    let expired = (1000).min(fleet.len());
    let db = sql(&args.store_url).await?;
    db.execute(
        "UPDATE nodes SET updated_at = updated_at - interval '2 hours',
             deadline = deadline - interval '2 hours', due = due - interval '2 hours'
         WHERE uuid = ANY($1)",
        &[&fleet[..expired].to_vec()],
    )
    .await?;
    let started = Instant::now();
    let failed = sweeper.fail_expired(expired as i64, None).await?;
    let took = started.elapsed();
    println!(
        "sweep, {expired} expired: {} failed in {:.2} ms ({:.1} µs a node)",
        failed.len(),
        took.as_secs_f64() * 1e3,
        took.as_secs_f64() * 1e6 / failed.len().max(1) as f64
    );
    Ok(())
}

/// One node (`new`) walked to wait call-back by the store, copied into a fleet of `n`.
pub(crate) async fn populate(
    store: &SharedStore,
    url: &str,
    n: usize,
    new: NewNode,
) -> anyhow::Result<Vec<Uuid>> {
    let template = store.create_node(new).await?.uuid();
    for event in ENROLL_TO_WAIT_CALL_BACK {
        store.apply_event(template, None, event, None, None).await?;
    }
    let db = sql(url).await?;
    let started = Instant::now();
    db.execute(
        "WITH g AS (SELECT gen_random_uuid() AS u FROM generate_series(2, $2::int))
         INSERT INTO nodes (uuid, state, target, updated_at, deadline, due, progress_at,
                            progress, callback_ms, stall_ms, body)
         SELECT g.u, n.state, n.target, n.updated_at, n.deadline, n.due, n.progress_at,
                n.progress, n.callback_ms, n.stall_ms,
                jsonb_set(n.body, '{uuid}', to_jsonb(g.u::text))
         FROM g, nodes n WHERE n.uuid = $1",
        &[&template, &(n as i32)],
    )
    .await
    .context("copying the fleet")?;
    db.execute("VACUUM ANALYZE nodes", &[]).await?;
    println!(
        "populate: {n} nodes in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let rows = db
        .query("SELECT uuid FROM nodes WHERE state = 5", &[])
        .await?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

/// A plain connection for the fixture's SQL.
pub(crate) async fn sql(url: &str) -> anyhow::Result<tokio_postgres::Client> {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls).await?;
    tokio::spawn(connection);
    Ok(client)
}
