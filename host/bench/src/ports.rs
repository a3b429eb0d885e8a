//! `deployd bench ports`: the port calls whose cost could grow with the fleet.
//!
//! It starts `deployd serve` as a separate process (this binary, or `--engine-bin`, so an
//! older build is measured the same way), enrolls 10 nodes, then creates `--ports` named
//! ports (API 1.88) one at a time. Every fifth create it also reads a port by name
//! (`GET /v1/ports/{name}`) and lists ports by address (`GET /v1/ports?address=`). It
//! prints each call's median per quarter of the run: flat means the call does not read
//! the other ports.

use std::time::Duration;

use serde_json::json;
use tokio::time::Instant;

use deployd_client::Client;
use deployd_wire::version;

use super::flood::Served;

#[derive(Clone, Debug, clap::Args)]
pub struct PortsBench {
    /// Named ports to create.
    #[arg(long, default_value_t = 4000)]
    pub ports: usize,
    /// The deployd binary to measure (default: this one).
    #[arg(long)]
    pub engine_bin: Option<std::path::PathBuf>,
}

pub fn run_ports(args: &PortsBench) -> anyhow::Result<()> {
    let dir = super::core::BenchDir::new(None)?;
    let runtime = super::runtime()?;
    runtime.block_on(ports(args, dir.path()))
}

/// Each call's samples, by quarter of the run.
#[derive(Default)]
struct Quarters([Vec<Duration>; 4]);

impl Quarters {
    async fn time<T>(&mut self, quarter: usize, call: impl Future<Output = T>) -> T {
        let started = Instant::now();
        let out = call.await;
        self.0[quarter].push(started.elapsed());
        out
    }

    fn median_ms(&mut self, quarter: usize) -> f64 {
        let samples = &mut self.0[quarter];
        samples.sort();
        super::median(samples).as_secs_f64() * 1e3
    }
}

async fn ports(args: &PortsBench, dir: &std::path::Path) -> anyhow::Result<()> {
    let total = args.ports.max(20);
    let served = Served::start(args.engine_bin.as_deref(), dir, |_| Ok(())).await?;
    let api = Client::new(&served.url);
    let mut nodes = Vec::new();
    for _ in 0..10 {
        let node = api.post("/v1/nodes", &json!({"driver": "fake"})).await?;
        nodes.push(node["uuid"].as_str().unwrap_or_default().to_owned());
    }
    // Raw requests for the reads: the client's own checks would be measured too.
    let http = reqwest::Client::new();
    let get = |path: String| {
        http.get(format!("{}{path}", served.url))
            .header(version::HEADER, version::MAX.to_string())
            .send()
    };
    let mut create = Quarters::default();
    let mut by_name = Quarters::default();
    let mut by_address = Quarters::default();
    for i in 0..total {
        let quarter = i * 4 / total;
        let mac = format!(
            "52:54:{:02x}:{:02x}:{:02x}:{:02x}",
            i >> 24 & 255,
            i >> 16 & 255,
            i >> 8 & 255,
            i & 255
        );
        let port =
            json!({"node_uuid": nodes[i % nodes.len()], "address": mac, "name": format!("p{i}")});
        create.time(quarter, api.post("/v1/ports", &port)).await?;
        if i % 5 == 0 {
            let answer = by_name
                .time(quarter, get(format!("/v1/ports/p{}", i / 2)))
                .await?;
            anyhow::ensure!(
                answer.status().is_success(),
                "port p{}: {}",
                i / 2,
                answer.status()
            );
            let answer = by_address
                .time(quarter, get(format!("/v1/ports?address={mac}")))
                .await?;
            anyhow::ensure!(
                answer.status().is_success(),
                "ports of {mac}: {}",
                answer.status()
            );
        }
    }
    println!(
        "{total} named ports on 10 nodes, served by {}; medians per quarter of the run (ms):",
        served.bin.display()
    );
    println!(
        "{:>13} {:>8} {:>12} {:>15}",
        "ports", "create", "get by name", "list by address"
    );
    for q in 0..4 {
        println!(
            "{:>13} {:>8.2} {:>12.2} {:>15.2}",
            format!("{}-{}", q * total / 4, (q + 1) * total / 4),
            create.median_ms(q),
            by_name.median_ms(q),
            by_address.median_ms(q)
        );
    }
    Ok(())
}
