//! `deployd bench dashboard`: the web console at fleet scale, in Debian's headless
//! chromium (`chromium` and `chromium-driver`) driven by WebDriver.
//!
//! The engine runs in this process with `--nodes` nodes of the test driver, a third left
//! in `enroll`, a third `manageable`, a third in `wait call-back`. Measured:
//! 1. the first event of `GET /dashboard/events` (every node's summary): time to receive
//!    it and its size, from a plain HTTP client;
//! 2. the fleet view's first paint: from the page's navigation to the `fleet-painted`
//!    mark the page sets once it drew rows of a fleet, over `--runs` fresh loads;
//! 3. a filter change: typing a search, and clearing it, to the second animation frame
//!    after (the list redrawn and painted), timed in the page, `--runs` of each.

use std::time::Duration;

use serde_json::json;
use tokio::time::Instant;

use deployd_engine::clock::Clock;
use deployd_engine::engine::Engine;
use deployd_engine::node::NewNode;
use deployd_engine::state_machine::{ENROLL_TO_WAIT_CALL_BACK, Event};
use deployd_test_support::browser::Browser;

#[derive(Clone, Debug, clap::Args)]
pub struct DashboardBench {
    #[arg(long, default_value_t = 10_000)]
    pub nodes: usize,
    #[arg(long, default_value_t = 7)]
    pub runs: usize,
}

pub fn run_dashboard(args: &DashboardBench) -> anyhow::Result<()> {
    let runtime = super::runtime()?;
    let bench_dir = super::core::BenchDir::new(None)?;
    let dir = bench_dir.path().to_path_buf();
    let mut config = super::api::test_driver_config(&dir)?;
    config.conductor.deploy_callback_timeout = 0;
    let engine = runtime.block_on(Engine::start(&config, Clock::new()))?;
    let store = engine.store.clone();
    let instance = json!({"mode": "wait", "heartbeat_mode": "wait"});
    let batch = (0..args.nodes)
        .map(|i| NewNode {
            name: Some(format!("node-{i:05}")),
            driver: "test_driver".into(),
            instance_info: instance.as_object().cloned().unwrap_or_default(),
            ..Default::default()
        })
        .collect();
    let mut uuids = Vec::with_capacity(args.nodes);
    for node in runtime.block_on(store.create_nodes(batch))? {
        uuids.push(node?.uuid());
    }
    let third = args.nodes / 3;
    let walks: [(&[_], &[Event]); 2] = [
        (&uuids[third..2 * third], &[Event::Manage, Event::Done]),
        (&uuids[2 * third..], &ENROLL_TO_WAIT_CALL_BACK),
    ];
    for (nodes, events) in walks {
        for event in events {
            for r in runtime.block_on(store.apply_events(nodes.iter().map(|&u| (u, *event))))? {
                r?;
            }
        }
    }
    let url = format!("http://{}", engine.addr);
    println!("{} nodes on {url}", args.nodes);

    let (took, bytes) = runtime.block_on(first_event(&url))?;
    println!(
        "first event of /dashboard/events: {:.1} ms, {:.2} MiB",
        took.as_secs_f64() * 1e3,
        super::mib(bytes)
    );

    let browser = Browser::start();
    let mut paints = Vec::new();
    for _ in 0..args.runs {
        browser.goto("about:blank");
        browser.goto(&format!("{url}/dashboard"));
        let painted = browser.wait_for(
            "the fleet's first paint",
            120,
            "const m = performance.getEntriesByName('fleet-painted'); \
             return m.length ? m[0].startTime : null;",
        );
        let painted = Duration::from_secs_f64(painted.as_f64().unwrap_or(0.0) / 1e3);
        println!("  first paint: {:.1} ms", painted.as_secs_f64() * 1e3);
        paints.push(painted);
    }
    paints.sort();
    super::report("fleet view, navigation to first paint", &paints);

    let (mut typed, mut cleared) = (Vec::new(), Vec::new());
    for run in 0..args.runs {
        let needle = format!("node-{:04}", run % 10);
        for (search, into) in [(needle.as_str(), &mut typed), ("", &mut cleared)] {
            let script = format!(
                "const done = arguments[0]; \
                 const input = document.querySelector('input[name=search]'); \
                 const t0 = performance.now(); \
                 input.value = {search:?}; \
                 input.dispatchEvent(new Event('input', {{bubbles: true}})); \
                 requestAnimationFrame(() => requestAnimationFrame(() => \
                   done([performance.now() - t0, document.querySelector('.shown').textContent])));"
            );
            let answer = browser.eval_async(&script);
            into.push(Duration::from_secs_f64(
                answer[0].as_f64().unwrap_or(0.0) / 1e3,
            ));
            if run == 0 {
                println!("  search {search:?}: {}", answer[1].as_str().unwrap_or("?"));
            }
        }
    }
    typed.sort();
    cleared.sort();
    super::report("filter change: a search typed, to the list painted", &typed);
    super::report(
        "filter change: the search cleared, to the list painted",
        &cleared,
    );
    drop(browser);
    runtime.block_on(engine.shutdown())?;
    Ok(())
}

/// How long the first server-sent event takes to arrive whole, and its size.
async fn first_event(url: &str) -> anyhow::Result<(Duration, u64)> {
    use futures_util::StreamExt;
    let start = Instant::now();
    let response = reqwest::get(format!("{url}/dashboard/events")).await?;
    anyhow::ensure!(response.status() == 200, "{}", response.status());
    let mut body = response.bytes_stream();
    let mut received = Vec::new();
    while let Some(chunk) = body.next().await {
        received.extend_from_slice(&chunk?);
        // An event ends with a blank line.
        if received.windows(2).any(|w| w == b"\n\n") {
            return Ok((start.elapsed(), received.len() as u64));
        }
    }
    anyhow::bail!("the stream ended before its first event")
}
