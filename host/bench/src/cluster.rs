//! `deployd bench cluster`: `--engines` engines (`deployd serve` processes) serving one
//! shared store (an empty PostgreSQL database at `--store-url`), beside one engine on sled,
//! in the same run and on the same machine.
//!
//! 1. The fleets: `--nodes` nodes of the test driver in `wait call-back`, each with an
//!    agent token's hash on record (on PostgreSQL copied in SQL from one node the store
//!    walked there, as `bench shared-store` does; on sled through the store's batches).
//! 2. A warm-up: one heartbeat per node through each engine (each node's driver records
//!    its step once, as mid-deploy nodes have; every engine learns each token, as it does
//!    from an agent whose heartbeats a balancer spreads).
//! 3. Heartbeats (a token checked, a touch, the WASM driver's call): `wrk` against every
//!    engine at once, `--connections` split between them, for `--seconds`; then against
//!    the engine on sled alone with all of them. The aggregate rate, each engine's p50 and
//!    p99, and the answers that were not 2xx.
//! 4. Takeover: under the same load, one engine SIGKILLed; how long until a survivor
//!    declared it dead, and until no node is claimed by it any more (the goal: its lease,
//!    10 s, and a renewal, 2 s).
//!
//! The sweep at 100,000 and 1,000,000 nodes is `bench shared-store`'s.

use std::time::Duration;

use anyhow::Context;
use futures_util::StreamExt;
use tokio::time::Instant;
use uuid::Uuid;

use deployd_engine::clock::Clock;
use deployd_engine::conductor::token_hash;
use deployd_engine::node::NewNode;
use deployd_engine::state_machine::{ENROLL_TO_WAIT_CALL_BACK, Timeouts};
use deployd_engine::store::postgres::SharedStore;
use deployd_engine::store::{Store, StoreConfig};

use super::flood::Served;
use super::wrk::{Load, Report};

#[derive(Clone, Debug, clap::Args)]
pub struct ClusterBench {
    /// `postgres://user@host:port/database` (an empty database: the bench fills it).
    #[arg(long, env = "DEPLOYD_STORE_URL")]
    pub store_url: String,
    /// Nodes in `wait call-back` (in each fleet).
    #[arg(long, default_value_t = 100_000)]
    pub nodes: usize,
    /// Engines serving the shared store.
    #[arg(long, default_value_t = 3)]
    pub engines: usize,
    #[arg(long, default_value_t = 10)]
    pub seconds: u64,
    /// wrk's connections in all, split between the engines.
    #[arg(long, default_value_t = 96)]
    pub connections: u32,
}

/// Every node's agent token (the bench's agents are one script).
const TOKEN: &str = "bench-cluster-agent-token-xxxxxxxxxxxxxxxxxxxxxxxx";
/// The deploy timeout the engines run with: no node times out during the bench.
const TIMEOUT: &str = "7200";

pub fn run_cluster(args: &ClusterBench) -> anyhow::Result<()> {
    super::runtime()?.block_on(bench(args))
}

async fn bench(args: &ClusterBench) -> anyhow::Result<()> {
    let dir = super::core::BenchDir::new(None)?;
    let dir = dir.path();
    let n = args.nodes.max(1);
    let engines = args.engines.max(1);

    let shared = SharedStore::connect(
        &args.store_url,
        Timeouts::uniform(Duration::from_secs(7200)),
    )
    .await?;
    let fleet = super::shared_store::populate(&shared, &args.store_url, n, test_node()).await?;
    super::shared_store::sql(&args.store_url)
        .await?
        .execute(
            "UPDATE nodes SET body = jsonb_set(body, '{driver_internal_info}',
                 coalesce(body->'driver_internal_info', '{}') || jsonb_build_object('agent_token_hash', $1::text))",
            &[&token_hash(TOKEN)],
        )
        .await
        .context("recording the agents' token")?;
    drop(shared);
    let mut served = Vec::new();
    for i in 0..engines {
        let url = args.store_url.clone();
        served.push(
            Served::start(None, &dir.join(format!("engine{i}")), |c| {
                c.args(["--store-url", &url, "--deploy-callback-timeout", TIMEOUT]);
                Ok(())
            })
            .await?,
        );
    }
    let urls: Vec<String> = served.iter().map(|s| s.url.clone()).collect();
    println!("{engines} engines on the shared store, {n} nodes in wait call-back: {urls:?}");
    warm_up(&urls, &fleet).await?;
    let script = super::wrk::heartbeats(dir, "shared", fleet.iter().map(|&u| (u, TOKEN)))?;
    let per_engine = (args.connections / engines as u32).max(1);
    let reports = load(&urls, &script, per_engine, args.seconds)?;
    summary(&format!("{engines} engines on PostgreSQL"), &reports);

    let sled_fleet = sled_fleet(&dir.join("sled"), n).await?;
    let sled = Served::start(None, &dir.join("sled"), |c| {
        c.args(["--deploy-callback-timeout", TIMEOUT]);
        Ok(())
    })
    .await?;
    warm_up(std::slice::from_ref(&sled.url), &sled_fleet).await?;
    let sled_script = super::wrk::heartbeats(dir, "sled", sled_fleet.iter().map(|&u| (u, TOKEN)))?;
    let reports = load(
        std::slice::from_ref(&sled.url),
        &sled_script,
        args.connections,
        args.seconds,
    )?;
    summary("1 engine on sled", &reports);
    drop(sled);

    takeover(args, &mut served, &script, per_engine).await
}

/// The test driver's node, waiting on its agent's heartbeats.
fn test_node() -> NewNode {
    let instance = serde_json::json!({"mode": "wait", "heartbeat_mode": "wait"});
    NewNode {
        driver: "test_driver".into(),
        instance_info: instance.as_object().cloned().unwrap_or_default(),
        ..Default::default()
    }
}

/// `n` test nodes in `wait call-back` in a sled store in `dir`'s data directory (as
/// `deployd serve --data-dir <dir>/data` opens it), each with the agents' token on record.
async fn sled_fleet(dir: &std::path::Path, n: usize) -> anyhow::Result<Vec<Uuid>> {
    let (store, _) = Store::open(
        &dir.join("data").join("store"),
        &StoreConfig::default(),
        Timeouts::uniform(Duration::from_secs(7200)),
        Clock::new(),
    )?;
    let started = Instant::now();
    let mut fleet = Vec::with_capacity(n);
    for chunk in 0..n.div_ceil(10_000) {
        let batch = (0..10_000.min(n - chunk * 10_000))
            .map(|_| test_node())
            .collect();
        for node in store.create_nodes(batch).await? {
            fleet.push(node?.uuid());
        }
    }
    for event in ENROLL_TO_WAIT_CALL_BACK {
        for r in store
            .apply_events(fleet.iter().map(|&u| (u, event)))
            .await?
        {
            r?;
        }
    }
    let hash = serde_json::Value::String(token_hash(TOKEN));
    for &uuid in &fleet {
        store
            .update_node(uuid, |b| {
                b.driver_internal_info
                    .insert("agent_token_hash".into(), hash.clone());
                Ok(())
            })
            .await?;
    }
    store.checkpoint()?;
    println!(
        "sled: {n} nodes in wait call-back in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    Ok(fleet)
}

/// One heartbeat per node through each engine at `urls` in turn, 64 at a time.
async fn warm_up(urls: &[String], fleet: &[Uuid]) -> anyhow::Result<()> {
    let http = reqwest::Client::new();
    let started = Instant::now();
    let body = serde_json::json!({
        "callback_url": "http://127.0.0.1:9",
        "agent_version": "13.0.0",
        "agent_token": TOKEN,
    })
    .to_string();
    let version = deployd_wire::version::MAX.to_string();
    let through_each = urls
        .iter()
        .flat_map(|url| fleet.iter().map(move |uuid| (url, uuid)));
    let refused = futures_util::stream::iter(through_each)
        .map(|(url, uuid)| {
            let request = http
                .post(format!("{url}/v1/heartbeat/{uuid}"))
                .header("Content-Type", "application/json")
                .header("X-OpenStack-Ironic-API-Version", &version)
                .body(body.clone());
            async move {
                match request.send().await {
                    Ok(answer) if answer.status().is_success() => 0,
                    _ => 1,
                }
            }
        })
        .buffer_unordered(64)
        .fold(0u64, |sum, r| async move { sum + r })
        .await;
    println!(
        "warm-up: one heartbeat per node through each engine in {:.1} s ({refused} refused)",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// `wrk` against every engine at `urls` at once.
fn load(
    urls: &[String],
    script: &std::path::Path,
    connections: u32,
    seconds: u64,
) -> anyhow::Result<Vec<Report>> {
    let runs = urls
        .iter()
        .map(|url| Load::start(script, url, connections, seconds))
        .collect::<anyhow::Result<Vec<_>>>()?;
    runs.into_iter().map(Load::report).collect()
}

fn summary(what: &str, reports: &[Report]) {
    let rate: f64 = reports.iter().map(Report::rate).sum();
    let refused: u64 = reports.iter().map(Report::refused).sum();
    let each: Vec<String> = reports
        .iter()
        .map(|r| format!("p50 {} p99 {}", r.latency("50%"), r.latency("99%")))
        .collect();
    println!(
        "heartbeats (token, touch, WASM driver call), {what}: {rate:.0}/s in all; {}; non-2xx: {refused}",
        each.join(" | ")
    );
}

/// Under load, the first engine SIGKILLed: how long until a survivor declared it dead, and
/// until it claims no node.
async fn takeover(
    args: &ClusterBench,
    served: &mut [Served],
    script: &std::path::Path,
    connections: u32,
) -> anyhow::Result<()> {
    let db = super::shared_store::sql(&args.store_url).await?;
    let port = served[0]
        .url
        .rsplit(':')
        .next()
        .unwrap_or_default()
        .to_owned();
    let id: i64 = db
        .query_one(
            "SELECT id FROM engines WHERE hostname LIKE '%:' || $1 ORDER BY id DESC LIMIT 1",
            &[&port],
        )
        .await
        .context("the first engine's row")?
        .get(0);
    let urls: Vec<String> = served.iter().map(|s| s.url.clone()).collect();
    let running = urls
        .iter()
        .map(|url| Load::start(script, url, connections, 20))
        .collect::<anyhow::Result<Vec<_>>>()?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    served[0].crash();
    let killed = Instant::now();
    let (mut dead_after, mut held_at_kill) = (None, None);
    let free_after = loop {
        let dead: bool = db
            .query_one(
                "SELECT dead_at IS NOT NULL FROM engines WHERE id = $1",
                &[&id],
            )
            .await?
            .get(0);
        let held: i64 = db
            .query_one("SELECT count(*) FROM nodes WHERE owner = $1", &[&id])
            .await?
            .get(0);
        held_at_kill.get_or_insert(held);
        if dead && dead_after.is_none() {
            dead_after = Some(killed.elapsed());
        }
        if dead && held == 0 {
            break killed.elapsed();
        }
        anyhow::ensure!(
            killed.elapsed() < Duration::from_secs(120),
            "the killed engine was not taken over within 120 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    for run in running {
        let _ = run.report();
    }
    println!(
        "takeover: engine {id} SIGKILLed under load holding {} claims; declared dead after {:.2} s, its claims taken over after {:.2} s (goal: lease 10 s + renewal 2 s)",
        held_at_kill.unwrap_or(0),
        dead_after.unwrap_or(free_after).as_secs_f64(),
        free_after.as_secs_f64()
    );
    Ok(())
}
