//! `deployd bench api`: the API under load from a second process on loopback (`wrk`,
//! Debian package `wrk`).
//!
//! The engine runs in this process with `--nodes` nodes of the test driver in
//! `wait call-back`, each with an agent token issued. Then `wrk` sends, for `--seconds`:
//! 1. `POST /v1/heartbeat/{node}` with that node's token, to random nodes: each one is
//!    verified, touches the node and dispatches the node's WASM driver (`heartbeat` →
//!    `wait`, no network);
//! 2. `GET /v1/nodes/{uuid}` for random nodes.
//!
//! Before measuring, every node gets one heartbeat (the driver's first one records its
//! step, a durable write; later ones, as mid-deploy, only read). Afterwards it counts
//! nodes that left `wait call-back` (false timeouts: must be 0).
//! It reads the test driver from the build tree, so run it from a source checkout. With
//! `--store-url` the engine runs on that shared store (an empty database) instead of sled.

use std::fmt::Write as _;
use std::time::Duration;

use anyhow::Context;
use serde_json::json;
use tokio::time::Instant;

use deployd_engine::clock::Clock;
use deployd_engine::config::Config;
use deployd_engine::engine::Engine;
use deployd_engine::node::NewNode;

use deployd_engine::state_machine::{ENROLL_TO_WAIT_CALL_BACK, ProvisionState};

#[derive(Clone, Debug, clap::Args)]
pub struct ApiBench {
    #[arg(long, default_value_t = 10_000)]
    pub nodes: usize,
    #[arg(long, default_value_t = 10)]
    pub seconds: u64,
    #[arg(long, default_value_t = 64)]
    pub connections: u32,
    /// Rounds of the three loads (the ceiling, node reads, heartbeats), alternated; with
    /// more than one, each figure's median is printed after them.
    #[arg(long, default_value_t = 1)]
    pub runs: usize,
    /// Run the engine on this shared store (an empty PostgreSQL database) instead of sled.
    #[arg(long, env = "DEPLOYD_STORE_URL")]
    pub store_url: Option<String>,
}

/// An engine's configuration in `dir` on loopback (port 0), with the test driver among
/// its plugins (read from the build tree: run from a source checkout).
pub fn test_driver_config(dir: &std::path::Path) -> anyhow::Result<Config> {
    let config = Config {
        data_dir: dir.join("data"),
        listen: "127.0.0.1:0".parse()?,
        ..Config::default()
    };
    std::fs::create_dir_all(config.plugins_dir())?;
    std::fs::copy(
        deployd_fixtures::TEST_DRIVER,
        config.plugins_dir().join("test_driver.wasm"),
    )
    .context("the test driver (run from a source checkout)")?;
    Ok(config)
}

pub fn run_api(args: &ApiBench) -> anyhow::Result<()> {
    let runtime = super::runtime()?;
    let bench_dir = super::core::BenchDir::new(None)?;
    let dir = bench_dir.path().to_path_buf();
    let mut config = test_driver_config(&dir)?;
    config.conductor.check_provision_state_interval = 1;
    config.store.url = args.store_url.clone();
    let engine = runtime.block_on(Engine::start(&config, Clock::new()))?;
    let store = engine.store.clone();

    let instance = json!({"mode": "wait", "heartbeat_mode": "wait"});
    let mut uuids = Vec::with_capacity(args.nodes);
    for chunk in 0..args.nodes.div_ceil(10_000) {
        let count = 10_000.min(args.nodes - chunk * 10_000);
        let batch = (0..count)
            .map(|_| NewNode {
                driver: "test_driver".into(),
                instance_info: instance.as_object().cloned().unwrap_or_default(),
                ..Default::default()
            })
            .collect();
        for node in runtime.block_on(store.create_nodes(batch))? {
            uuids.push(node?.uuid());
        }
    }
    for event in ENROLL_TO_WAIT_CALL_BACK {
        let events = uuids.iter().map(|&u| (u, event));
        for r in runtime.block_on(store.apply_events(events))? {
            r?;
        }
    }
    let tokens: Vec<String> = (0..uuids.len())
        .map(|i| format!("bench-token-{i:08}-xxxxxxxxxxxxxxxxxxxxxxxx"))
        .collect();
    for (uuid, token) in uuids.iter().zip(&tokens) {
        engine.conductor.agents().issued(*uuid, token.clone());
    }
    // Steady state: each node's driver has seen a heartbeat and recorded its step (the
    // test driver's one durable scratch write per node), as mid-deploy nodes have.
    let warm = Instant::now();
    let callback = deployd_engine::agent_sessions::CallbackUrl::parse("http://127.0.0.1:9")
        .expect("a valid url");
    runtime.block_on(async {
        for (uuid, token) in uuids.iter().zip(&tokens) {
            let answered = engine
                .conductor
                .heartbeat(*uuid, token, &callback, "13.0.0", None, Default::default())
                .await;
            if let Err(e) = answered {
                anyhow::bail!("the warm-up heartbeat of node {uuid} was refused: {e}");
            }
        }
        while uuids.iter().any(|u| engine.conductor.is_busy(*u)) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        anyhow::Ok(())
    })?;
    println!(
        "warm-up: one heartbeat per node in {:.1} s",
        warm.elapsed().as_secs_f64()
    );
    let nodes = uuids.iter().copied().zip(tokens.iter().map(String::as_str));
    let heartbeat = super::wrk::heartbeats(&dir, "heartbeat", nodes)?;
    let get = dir.join("get.lua");
    let mut reads = String::from("nodes = {\n");
    for uuid in &uuids {
        writeln!(reads, "  {{\"{uuid}\"}},")?;
    }
    std::fs::write(
        &get,
        reads
            + &r#"}
wrk.headers["X-OpenStack-Ironic-API-Version"] = "@VERSION@"
request = function()
  return wrk.format("GET", "/v1/nodes/" .. nodes[math.random(#nodes)][1])
end
"#
            .replace("@VERSION@", &deployd_wire::version::MAX.to_string()),
    )?;
    let url = format!("http://{}", engine.addr);
    println!("{} nodes in wait call-back on {url}", args.nodes);
    let body = runtime.block_on(node_body(&url, uuids[0]))?;
    let ceiling = format!("http://{}", runtime.block_on(ceiling(body.clone()))?);
    println!(
        "the ceiling: axum on this runtime answering every request with the {} bytes of a node's GET, on {ceiling}",
        body.len()
    );
    let loads = [
        (CEILING, &get, &ceiling),
        (GET, &get, &url),
        (HEARTBEATS, &heartbeat, &url),
    ];
    let mut figures: Vec<Vec<(f64, f64)>> = vec![Vec::new(); loads.len()];
    for run in 0..args.runs.max(1) {
        // Each round starts with another load, so none always runs on a cooler machine.
        for i in (0..loads.len()).map(|i| (i + run) % loads.len()) {
            let (what, script, url) = loads[i];
            let report = measure(what, script, url, args)?;
            figures[i].push((report.rate(), report.latency_ms("99%")));
            std::thread::sleep(Duration::from_millis(500));
        }
    }
    let median = |i: usize, of: fn(&(f64, f64)) -> f64| {
        let mut v: Vec<f64> = figures[i].iter().map(of).collect();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    if args.runs > 1 {
        for (i, (what, _, _)) in loads.iter().enumerate() {
            println!(
                "{what}, median of {} runs: {:.0} requests/s, p99 {:.2} ms",
                args.runs,
                median(i, |f| f.0),
                median(i, |f| f.1)
            );
        }
    }
    let top = median(0, |f| f.0);
    println!(
        "of the ceiling (medians): GET {:.2}, heartbeats {:.2}; load average {}",
        median(1, |f| f.0) / top,
        median(2, |f| f.0) / top,
        super::load_average()
    );
    let mut moved = 0;
    for uuid in &uuids {
        if runtime.block_on(store.node(*uuid))?.state() != ProvisionState::WaitCallBack {
            moved += 1;
        }
    }
    println!("nodes that left wait call-back (false timeouts): {moved}");
    let rss = super::rss_bytes();
    println!("engine RSS after the run: {:.1} MiB", super::mib(rss));
    runtime.block_on(engine.shutdown())?;
    Ok(())
}

const CEILING: &str = "ceiling (a static body, no work)";
const GET: &str = "GET /v1/nodes/{uuid}";
const HEARTBEATS: &str = "heartbeats (touch + WASM driver call)";

/// One `wrk` run of `script` against `url`, its figures printed with the CPU this process
/// spent (the engine's, or the ceiling's) per request.
fn measure(
    what: &str,
    script: &std::path::Path,
    url: &str,
    args: &ApiBench,
) -> anyhow::Result<super::wrk::Report> {
    let (cpu_before, wall) = (super::cpu_seconds_of("self"), Instant::now());
    let report = super::wrk::Load::start(script, url, args.connections, args.seconds)?.report()?;
    let cpu = super::cpu_seconds_of("self") - cpu_before;
    println!(
        "{what}: {} | p50 {} | p99 {} | {}",
        report.line("Requests/sec:"),
        report.line("50%"),
        report.line("99%"),
        report
            .line("Non-2xx")
            .replace("Non-2xx or 3xx responses:", "non-2xx:")
    );
    println!(
        "{what}, engine CPU: {:.1} µs per request ({:.2} of 2 cores busy); load average {}",
        cpu * 1e6 / report.requests().max(1.0),
        cpu / wall.elapsed().as_secs_f64(),
        super::load_average()
    );
    Ok(report)
}

/// The bytes the engine answers a GET of `node` with, at the newest API version.
async fn node_body(url: &str, node: uuid::Uuid) -> anyhow::Result<bytes::Bytes> {
    let answer = reqwest::Client::new()
        .get(format!("{url}/v1/nodes/{node}"))
        .header(
            "X-OpenStack-Ironic-API-Version",
            deployd_wire::version::MAX.to_string(),
        )
        .send()
        .await?
        .error_for_status()?;
    Ok(answer.bytes().await?)
}

/// The HTTP stack's own rate, the bar the API's figures are held to: axum on hyper, on
/// the engine's runtime, answering every request with `body` (the bytes of a real node's
/// GET) and doing nothing else. Serves until the process ends.
async fn ceiling(body: bytes::Bytes) -> anyhow::Result<std::net::SocketAddr> {
    use axum::serve::ListenerExt;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    let router = axum::Router::new().fallback(move || {
        let body = body.clone();
        async move {
            (
                [(axum::http::header::CONTENT_TYPE, "application/json")],
                body,
            )
        }
    });
    tokio::spawn(async move { axum::serve(listener, router).await });
    Ok(addr)
}
