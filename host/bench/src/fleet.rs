//! `deployd bench fleet`: a thousand simulated machines deploying at once on one engine.
//!
//! The engine runs in this process; the lab runs as a second `deployd lab --agent-tasks`
//! process (one agent task per machine, so the engine's RSS is its own). Machines are
//! enrolled with `agent_redfish` through the HTTP API, made available, and all deployed
//! at once with a small image. Reported: time until all are active, heartbeats handled
//! per second, engine RSS, and nodes that failed (false timeouts: must be 0).

use deployd_wire::state_machine::ProvisionState;
use deployd_wire::targets::ProvisionTarget;
use std::io::BufRead;
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::Context;
use futures_util::{StreamExt, TryStreamExt};
use tokio::time::Instant;

use deployd_engine::clock::Clock;
use deployd_engine::config::Config;
use deployd_engine::engine::Engine;
use deployd_lab::Enrollment;
use deployd_lab::operator::Operator;

#[derive(Clone, Debug, clap::Args)]
pub struct FleetBench {
    #[arg(long, default_value_t = 1000)]
    pub machines: usize,
    /// Image size in KiB.
    #[arg(long, default_value_t = 256)]
    pub image_kb: u64,
    /// deploy_callback_timeout, seconds.
    #[arg(long, default_value_t = 60)]
    pub timeout: u64,
    /// ramdisk_heartbeat_timeout, seconds (agents heartbeat every 30–60 % of it).
    #[arg(long, default_value_t = 10)]
    pub heartbeat_timeout: u64,
    /// The lab agents' TLS (`auto`, as ironic-python-agent; `off` shows what the engine's
    /// pinned HTTPS clients to the agents hold).
    #[arg(long, default_value = "auto")]
    pub agent_tls: String,
    /// The engine's `store.cache_capacity_mb` (sled's page cache); the default's if unset.
    #[arg(long)]
    pub cache_mb: Option<u64>,
}

pub fn run_fleet(args: &FleetBench) -> anyhow::Result<()> {
    let runtime = super::runtime()?;
    let dir = super::core::BenchDir::new(None)?;
    runtime.block_on(fleet(args, dir.path()))
}

async fn fleet(args: &FleetBench, dir: &std::path::Path) -> anyhow::Result<()> {
    let mut config = Config {
        data_dir: dir.join("engine"),
        listen: "127.0.0.1:0".parse()?,
        ..Config::default()
    };
    // In the engine's images directory: a local file anywhere else is refused (400).
    std::fs::create_dir_all(config.images_dir())?;
    let image = config.images_dir().join("image.raw");
    let sha256 = deployd_lab::random_image(&image, args.image_kb << 10).await?;
    config.conductor.deploy_callback_timeout = args.timeout;
    config.conductor.check_provision_state_interval = 1;
    config.api.ramdisk_heartbeat_timeout = args.heartbeat_timeout;
    if let Some(mb) = args.cache_mb {
        config.store.cache_capacity_mb = mb;
    }
    let engine = Engine::start(&config, Clock::new()).await?;
    let api_url = format!("http://{}", engine.addr);

    let mut lab = Command::new(std::env::current_exe()?)
        .args(["lab", "--agent-tasks", "--listen", "127.0.0.1:0"])
        .args(["--agent-tls", &args.agent_tls])
        .args([
            "--machines",
            &args.machines.to_string(),
            "--api-url",
            &api_url,
        ])
        .arg("--dir")
        .arg(dir.join("lab"))
        .env("RUST_LOG", "error")
        .stdout(Stdio::piped())
        .spawn()
        .context("starting deployd lab")?;
    let lines = std::io::BufReader::new(lab.stdout.take().expect("piped"));
    let machines: Vec<Enrollment> = lines
        .lines()
        .take(args.machines)
        .map(|l| Ok(serde_json::from_str(&l?)?))
        .collect::<anyhow::Result<_>>()?;

    let op = Operator::new(&api_url);
    let started = Instant::now();
    let uuids: Vec<String> = futures_util::stream::iter(&machines)
        .map(|m| async {
            let uuid = op.enroll(m, "agent_redfish", &image, &sha256).await?;
            op.walk(&uuid, ProvisionTarget::Manage, ProvisionState::Manageable)
                .await?;
            op.walk(&uuid, ProvisionTarget::Provide, ProvisionState::Available)
                .await?;
            anyhow::Ok(uuid)
        })
        .buffer_unordered(16)
        .try_collect()
        .await?;
    println!(
        "{} machines enrolled and available in {:.1} s",
        uuids.len(),
        started.elapsed().as_secs_f64()
    );

    let heartbeats_before = engine
        .conductor
        .agents()
        .heartbeats
        .load(std::sync::atomic::Ordering::Relaxed);
    let started = Instant::now();
    futures_util::stream::iter(&uuids)
        .map(|u| op.provision(u, ProvisionTarget::Active))
        .buffer_unordered(16)
        .try_collect::<Vec<()>>()
        .await?;
    // Where the memory is when the engine holds the most: the mappings at the highest
    // resident set sampled.
    let mut highest = (0, String::new());
    let (active, failed) = loop {
        let rss = super::rss_bytes();
        if rss > highest.0 + (highest.0 >> 4) {
            highest = (rss, super::resident_mappings(8));
        }
        let (active, failed) = count(&engine).await?;
        if active + failed == uuids.len() || started.elapsed() > Duration::from_secs(600) {
            break (active, failed);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let took = started.elapsed().as_secs_f64();
    let heartbeats = engine
        .conductor
        .agents()
        .heartbeats
        .load(std::sync::atomic::Ordering::Relaxed)
        - heartbeats_before;
    println!(
        "{active} of {} active in {took:.1} s; {failed} failed (false timeouts); {heartbeats} heartbeats, {:.0}/s; engine RSS {:.0} MiB (peak {:.0} MiB), lab RSS {:.0} MiB",
        uuids.len(),
        heartbeats as f64 / took,
        super::mib(super::rss_bytes()),
        super::mib(super::peak_rss_bytes()),
        super::mib(super::rss_of(lab.id())),
    );
    println!("at the highest sample, {}", highest.1);
    println!("engine threads at the end: {}", super::threads());
    let _ = Command::new("kill")
        .args(["-TERM", &lab.id().to_string()])
        .status();
    let _ = lab.wait();
    engine.shutdown().await?;
    Ok(())
}

/// (active, failed) nodes in the store.
async fn count(engine: &Engine) -> anyhow::Result<(usize, usize)> {
    let (mut active, mut failed, mut marker) = (0, 0, None);
    loop {
        let page = engine.store.list_nodes(marker, 1000).await?;
        let Some(last) = page.last() else {
            return Ok((active, failed));
        };
        marker = Some(last.uuid());
        for n in &page {
            match n.state() {
                ProvisionState::Active => active += 1,
                ProvisionState::DeployFailed | ProvisionState::Error => failed += 1,
                _ => {}
            }
        }
    }
}
