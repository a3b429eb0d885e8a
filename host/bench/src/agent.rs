//! `deployd bench agent`: the agent's image write against `dd` of the same image onto the
//! same disk.
//!
//! Each round writes the image to a fresh file with `dd bs=4M conv=fsync`, then has the
//! agent's command API do `standby.prepare_image` of it: download over loopback HTTP from
//! the engine's image server, sha256 verified on the way, written and fsynced. Rounds
//! alternate so both see the same page cache and disk state; medians are compared.

use std::process::Command;
use std::sync::atomic::Ordering;
use std::time::Duration;

use anyhow::{Context, bail};
use serde_json::json;
use tokio::time::Instant;

use deployd_agent::{CommandApi, DiskTarget};

#[derive(Clone, Debug, clap::Args)]
pub struct AgentBench {
    /// Image size in MiB.
    #[arg(long, default_value_t = 1024)]
    pub image_mb: u64,
    #[arg(long, default_value_t = 5)]
    pub rounds: usize,
    /// Where the image and the disks go (default: a temporary directory).
    #[arg(long)]
    pub dir: Option<std::path::PathBuf>,
}

pub fn run_agent(args: &AgentBench) -> anyhow::Result<()> {
    let bench_dir = super::core::BenchDir::new(args.dir.as_deref())?;
    let dir = bench_dir.path().to_path_buf();
    let runtime = super::runtime()?;
    let image = dir.join("image.raw");
    let sha256 = runtime.block_on(deployd_lab::random_image(&image, args.image_mb << 20))?;
    let images = axum::Router::new().merge(deployd_engine::image_server::files(dir.clone()));
    let addr = runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        tokio::spawn(async move { axum::serve(listener, images).await });
        anyhow::Ok(addr)
    })?;
    let url = format!("http://{addr}/images/image.raw");
    let (mut dd, mut agent) = (vec![], vec![]);
    for round in 0..args.rounds {
        let target = dir.join("dd.disk");
        let _ = std::fs::remove_file(&target);
        let started = Instant::now();
        let status = Command::new("dd")
            .arg(format!("if={}", image.display()))
            .arg(format!("of={}", target.display()))
            .args(["bs=4M", "conv=fsync", "status=none"])
            .status()
            .context("running dd")?;
        anyhow::ensure!(status.success(), "dd failed: {status}");
        dd.push(started.elapsed());
        std::fs::remove_file(&target)?;

        let disk = dir.join("agent.disk");
        let _ = std::fs::remove_file(&disk);
        let took = runtime.block_on(agent_write(&disk, &url, &sha256))?;
        agent.push(took);
        std::fs::remove_file(&disk)?;
        println!(
            "round {round}: dd {:.2} s, agent {:.2} s",
            dd[round].as_secs_f64(),
            took.as_secs_f64()
        );
    }
    dd.sort();
    agent.sort();
    let (dd, agent) = (super::median(&dd), super::median(&agent));
    let mib = args.image_mb as f64;
    println!(
        "{} MiB image: dd median {:.0} MiB/s, agent (HTTP + sha256 + write + fsync) median {:.0} MiB/s; ratio agent/dd {:.2}",
        args.image_mb,
        mib / dd.as_secs_f64(),
        mib / agent.as_secs_f64(),
        dd.as_secs_f64() / agent.as_secs_f64()
    );
    std::fs::remove_file(&image)?;
    Ok(())
}

/// One `standby.prepare_image` by the agent's command API, to completion.
async fn agent_write(disk: &std::path::Path, url: &str, sha256: &str) -> anyhow::Result<Duration> {
    let api = CommandApi::new(
        DiskTarget::new(disk.to_path_buf(), None),
        "http://bench".into(),
    );
    let params = json!({"image_info": {"id": "bench", "urls": [url], "os_hash_algo": "sha256", "os_hash_value": sha256}});
    let started = Instant::now();
    let command = api
        .execute("standby.prepare_image", &params)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let done = api
        .wait_for(&command.id)
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let took = started.elapsed();
    if !done.succeeded() {
        bail!("the agent's write failed: {:?}", done.command_error);
    }
    anyhow::ensure!(api.written.load(Ordering::SeqCst) > 0);
    Ok(took)
}
