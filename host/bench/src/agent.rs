//! `deployd bench agent`: the agent's image write against `dd` of the same image onto the
//! same disk, for three images of the same size: a raw one of random bytes, a qcow2 of
//! it (dense), and a qcow2 of a disk that is three quarters zeros (sparse, as images
//! with free space are). The qcow2s are made by the real `qemu-img`.
//!
//! Each round writes the raw disk to a fresh file with `dd bs=4M conv=fsync`, then has the
//! agent's command API do `standby.prepare_image` of it: download over loopback HTTP from
//! the engine's image server (a qcow2 served as its raw disk, as a deploy serves it),
//! sha256 verified on the way, written (zeros punched) and fsynced. Rounds alternate so
//! both see the same page cache and disk state; medians are compared, and the bytes the
//! agent actually wrote are reported.

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

/// One image the bench writes: its raw disk (what dd writes), and the file served.
struct Case {
    name: &'static str,
    raw: std::path::PathBuf,
    served: String,
}

pub fn run_agent(args: &AgentBench) -> anyhow::Result<()> {
    let bench_dir = super::core::BenchDir::new(args.dir.as_deref())?;
    let dir = bench_dir.path().to_path_buf();
    let runtime = super::runtime()?;
    let bytes = args.image_mb << 20;
    let dense = dir.join("dense.raw");
    runtime.block_on(deployd_lab::random_image(&dense, bytes))?;
    // Sparse: random data in the first quarter, zeros after it.
    let sparse = dir.join("sparse.raw");
    std::fs::copy(&dense, &sparse)?;
    std::fs::OpenOptions::new()
        .write(true)
        .open(&sparse)?
        .set_len(bytes / 4)?;
    std::fs::OpenOptions::new()
        .write(true)
        .open(&sparse)?
        .set_len(bytes)?;
    for (raw, qcow2) in [(&dense, "dense.qcow2"), (&sparse, "sparse.qcow2")] {
        let status = Command::new("qemu-img")
            .args(["convert", "-f", "raw", "-O", "qcow2"])
            .arg(raw)
            .arg(dir.join(qcow2))
            .status()
            .context("running qemu-img (Debian's qemu-utils)")?;
        anyhow::ensure!(status.success(), "qemu-img failed: {status}");
    }
    let images = deployd_engine::image_server::qcow2_files(dir.clone())
        .merge(deployd_engine::image_server::files(dir.clone()));
    let addr = runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        tokio::spawn(async move { axum::serve(listener, images).await });
        anyhow::Ok(addr)
    })?;
    let cases = [
        Case {
            name: "raw",
            raw: dense.clone(),
            served: format!("http://{addr}/images/dense.raw"),
        },
        Case {
            name: "qcow2 (dense)",
            raw: dense.clone(),
            served: format!("http://{addr}/images/raw-of/dense.qcow2"),
        },
        Case {
            name: "qcow2 (sparse, 3/4 zeros)",
            raw: sparse.clone(),
            served: format!("http://{addr}/images/raw-of/sparse.qcow2"),
        },
    ];
    for case in &cases {
        run_case(args, &runtime, &dir, case)?;
    }
    Ok(())
}

fn run_case(
    args: &AgentBench,
    runtime: &tokio::runtime::Runtime,
    dir: &std::path::Path,
    case: &Case,
) -> anyhow::Result<()> {
    let (image, url) = (&case.raw, &case.served);
    let sha256 = sha256_of(image)?;
    let (mut dd, mut agent, mut written) = (vec![], vec![], 0);
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
        let (took, bytes) = runtime.block_on(agent_write(&disk, url, &sha256))?;
        agent.push(took);
        written = bytes;
        std::fs::remove_file(&disk)?;
        println!(
            "{} round {round}: dd {:.2} s, agent {:.2} s",
            case.name,
            dd[round].as_secs_f64(),
            took.as_secs_f64()
        );
    }
    dd.sort();
    agent.sort();
    let (dd, agent) = (super::median(&dd), super::median(&agent));
    let mib = args.image_mb as f64;
    println!(
        "{} MiB {}: dd median {:.0} MiB/s, agent (HTTP + sha256 + write + fsync) median {:.0} MiB/s; ratio agent/dd {:.2}; the agent wrote {:.0} MiB",
        args.image_mb,
        case.name,
        mib / dd.as_secs_f64(),
        mib / agent.as_secs_f64(),
        dd.as_secs_f64() / agent.as_secs_f64(),
        super::mib(written)
    );
    Ok(())
}

fn sha256_of(path: &std::path::Path) -> anyhow::Result<String> {
    let mut hasher = deployd_wire::checksum::Hasher::new("sha256").map_err(anyhow::Error::msg)?;
    let mut file = std::fs::File::open(path)?;
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = std::io::Read::read(&mut file, &mut buf)?;
        if n == 0 {
            return Ok(hasher.hex());
        }
        hasher.update(&buf[..n]);
    }
}

/// One `standby.prepare_image` by the agent's command API, to completion: how long it
/// took and the bytes it wrote (zeros punched are not written).
async fn agent_write(
    disk: &std::path::Path,
    url: &str,
    sha256: &str,
) -> anyhow::Result<(Duration, u64)> {
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
    let result = done.command_result.unwrap_or_default();
    let written = result["bytes_written"].as_u64().unwrap_or(0);
    Ok((took, written))
}
