//! `deployd bench flood`: how the engine holds up under the floods of the hardening issue,
//! seen from a client that only wants `GET /v1`.
//!
//! It starts `deployd serve` as a separate process (this binary, or `--engine-bin`, so an
//! older build can be measured the same way), sets it up over the API, then for
//! `--seconds` runs a flood of one kind beside a probe that calls `GET /v1` every 20 ms:
//!
//! - `auth`: `http_basic` with bcrypt cost 12; clients send wrong passwords;
//! - `lookup`: agents look up a node waiting for its agent, again and again;
//! - `list`: `GET /v1/nodes?fields=uuid` and `/v1/nodes/detail` over nodes with large
//!   `extra` (`--extra-kib`).
//!
//! It prints the probe's p50 and p99 before and during the flood, the flood's rate and
//! answers, and the engine's resident memory before and at its peak.

use std::collections::BTreeMap;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context, bail};
use base64::Engine as _;
use serde_json::{Value, json};
use tokio::time::Instant;

use deployd_client::Client;
use deployd_wire::version;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Flood {
    Auth,
    Lookup,
    List,
}

#[derive(Clone, Debug, clap::Args)]
pub struct FloodBench {
    /// What to flood the engine with.
    #[arg(long, value_enum)]
    pub kind: Flood,
    /// How long the flood lasts.
    #[arg(long, default_value_t = 10)]
    pub seconds: u64,
    /// Concurrent flooding clients.
    #[arg(long, default_value_t = 8)]
    pub clients: usize,
    /// Nodes for the list flood.
    #[arg(long, default_value_t = 150)]
    pub nodes: usize,
    /// Size of each node's `extra` for the list flood, in KiB.
    #[arg(long, default_value_t = 60)]
    pub extra_kib: usize,
    /// The deployd binary to measure (default: this one).
    #[arg(long)]
    pub engine_bin: Option<std::path::PathBuf>,
}

/// A `deployd serve` process, killed when dropped.
pub(crate) struct Served {
    child: Child,
    pub(crate) url: String,
    /// The binary serving.
    pub(crate) bin: std::path::PathBuf,
}

impl Served {
    /// Starts `bin` (default: this binary) serving from `dir` on a free loopback port,
    /// with the test driver loaded and `configure`'s flags, and waits until it answers.
    pub(crate) async fn start(
        bin: Option<&std::path::Path>,
        dir: &std::path::Path,
        configure: impl FnOnce(&mut Command) -> anyhow::Result<()>,
    ) -> anyhow::Result<Served> {
        let bin = match bin {
            Some(b) => b.to_path_buf(),
            None => std::env::current_exe()?,
        };
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let plugins = dir.join("plugins");
        std::fs::create_dir_all(&plugins)?;
        std::fs::copy(
            deployd_fixtures::TEST_DRIVER,
            plugins.join("test_driver.wasm"),
        )
        .context("the test driver (run from a source checkout)")?;
        let mut command = Command::new(&bin);
        command
            .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
            .arg("--data-dir")
            .arg(dir.join("data"))
            .arg("--plugins-dir")
            .arg(&plugins)
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        configure(&mut command)?;
        let served = Served {
            child: command
                .spawn()
                .with_context(|| format!("starting {}", bin.display()))?,
            url: format!("http://127.0.0.1:{port}"),
            bin,
        };
        wait_ready(&reqwest::Client::new(), &served.url).await?;
        Ok(served)
    }
}

impl Served {
    /// SIGKILL: no shutdown at all, as a crash.
    pub(crate) fn crash(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn run_flood(args: &FloodBench) -> anyhow::Result<()> {
    let dir = super::core::BenchDir::new(None)?;
    let runtime = super::runtime()?;
    runtime.block_on(flood(args, dir.path()))
}

async fn flood(args: &FloodBench, dir: &std::path::Path) -> anyhow::Result<()> {
    let auth = |command: &mut Command| -> anyhow::Result<()> {
        if args.kind == Flood::Auth {
            let htpasswd = dir.join("htpasswd");
            std::fs::write(
                &htpasswd,
                format!("admin:{}\n", bcrypt::hash("secret", 12)?),
            )?;
            command
                .args([
                    "--auth-strategy",
                    "http-basic",
                    "--http-basic-auth-user-file",
                ])
                .arg(&htpasswd);
        }
        Ok(())
    };
    let served = Served::start(args.engine_bin.as_deref(), dir, auth).await?;
    let http = reqwest::Client::new();
    // Set-up goes through the one client (it retries a node still locked by its step).
    let api = Client::new(&served.url).with_retries(50, Duration::from_millis(100));
    let admin = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode("admin:secret")
    );
    let target = match args.kind {
        Flood::Auth => Target::Auth,
        Flood::Lookup => Target::Lookup(set_up_lookup(&api).await?),
        Flood::List => {
            set_up_list(&api, args.nodes, args.extra_kib).await?;
            Target::List
        }
    };
    let pid = served.child.id();
    let rss_before = super::rss_of(pid);
    let quiet = probe(&http, &served.url, Duration::from_secs(3), pid, None).await;
    let stop = Arc::new(AtomicBool::new(false));
    let answers = Arc::new(std::sync::Mutex::new(BTreeMap::<String, u64>::new()));
    let sent = Arc::new(AtomicU64::new(0));
    let clients: Vec<_> = (0..args.clients)
        .map(|i| {
            let (http, url, target) = (http.clone(), served.url.clone(), target.clone());
            let (stop, answers, sent) = (stop.clone(), answers.clone(), sent.clone());
            tokio::spawn(async move {
                let mut n = i;
                while !stop.load(Ordering::Relaxed) {
                    let answer = match target.request(&http, &url, n).send().await {
                        Ok(r) => {
                            let status = r.status().as_u16().to_string();
                            // Read the whole answer, as a real client does.
                            let _ = r.bytes().await;
                            status
                        }
                        Err(e) if e.is_timeout() => "timeout".into(),
                        Err(_) => "error".into(),
                    };
                    sent.fetch_add(1, Ordering::Relaxed);
                    *answers.lock().unwrap().entry(answer).or_default() += 1;
                    n += 1;
                }
            })
        })
        .collect();
    let started = Instant::now();
    let operator = (args.kind == Flood::Auth).then_some(admin.as_str());
    let flooded = probe(
        &http,
        &served.url,
        Duration::from_secs(args.seconds),
        pid,
        operator,
    )
    .await;
    stop.store(true, Ordering::Relaxed);
    let elapsed = started.elapsed();
    for c in clients {
        let _ = tokio::time::timeout(Duration::from_secs(30), c).await;
    }
    println!(
        "flood {:?} with {} clients for {} s against {}",
        args.kind,
        args.clients,
        args.seconds,
        served.bin.display()
    );
    println!(
        "  flood: {} requests, {:.0}/s; answers {:?}",
        sent.load(Ordering::Relaxed),
        sent.load(Ordering::Relaxed) as f64 / elapsed.as_secs_f64(),
        answers.lock().unwrap()
    );
    quiet.print("GET /v1 before the flood");
    flooded.print("GET /v1 during the flood");
    if let Some(ok) = flooded.authenticated {
        println!("  an authenticated GET /v1/nodes during the flood: {ok}");
    }
    println!(
        "  engine RSS: {:.1} MiB before, {:.1} MiB at the flood's peak",
        super::mib(rss_before),
        super::mib(flooded.peak_rss)
    );
    Ok(())
}

#[derive(Clone)]
enum Target {
    Auth,
    Lookup(String),
    List,
}

impl Target {
    fn request(&self, http: &reqwest::Client, url: &str, n: usize) -> reqwest::RequestBuilder {
        let request = match self {
            Target::Auth => http
                .get(format!("{url}/v1/nodes"))
                .basic_auth("admin", Some(format!("wrong-{n}"))),
            Target::Lookup(mac) => http.get(format!("{url}/v1/lookup?addresses={mac}")),
            Target::List if n.is_multiple_of(2) => http.get(format!("{url}/v1/nodes?fields=uuid")),
            Target::List => http.get(format!("{url}/v1/nodes/detail")),
        };
        request
            .header(version::HEADER, version::MAX.to_string())
            .timeout(Duration::from_secs(60))
    }
}

/// What the probe saw.
struct Probed {
    latencies: Vec<Duration>,
    failures: usize,
    peak_rss: u64,
    /// Whether a real client's (cached) credentials still passed, for the auth flood.
    authenticated: Option<String>,
}

impl Probed {
    fn print(&self, what: &str) {
        let l = &self.latencies;
        if l.is_empty() {
            println!("  {what}: no answers ({} failures)", self.failures);
            return;
        }
        let at = |q: usize| l[(l.len() * q / 100).min(l.len() - 1)];
        println!(
            "  {what}: p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms ({} calls, {} failed)",
            at(50).as_secs_f64() * 1e3,
            at(99).as_secs_f64() * 1e3,
            l[l.len() - 1].as_secs_f64() * 1e3,
            l.len(),
            self.failures
        );
    }
}

/// `GET /v1` every 20 ms for `length`, and the engine's RSS every 100 ms.
async fn probe(
    http: &reqwest::Client,
    url: &str,
    length: Duration,
    pid: u32,
    admin: Option<&str>,
) -> Probed {
    let end = Instant::now() + length;
    let mut probed = Probed {
        latencies: Vec::new(),
        failures: 0,
        peak_rss: 0,
        authenticated: None,
    };
    let mut last_rss = Instant::now();
    while Instant::now() < end {
        let t = Instant::now();
        let answer = http
            .get(format!("{url}/v1"))
            .timeout(Duration::from_secs(30))
            .send()
            .await;
        match answer {
            Ok(r) if r.status().is_success() => probed.latencies.push(t.elapsed()),
            _ => probed.failures += 1,
        }
        if last_rss.elapsed() >= Duration::from_millis(100) {
            probed.peak_rss = probed.peak_rss.max(super::rss_of(pid));
            last_rss = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    probed.peak_rss = probed.peak_rss.max(super::rss_of(pid));
    if let Some(admin) = admin {
        let answer = http
            .get(format!("{url}/v1/nodes"))
            .header("authorization", admin)
            .header(version::HEADER, version::MAX.to_string())
            .timeout(Duration::from_secs(30))
            .send()
            .await;
        probed.authenticated = Some(match answer {
            Ok(r) => r.status().to_string(),
            Err(e) => e.to_string(),
        });
    }
    probed.latencies.sort();
    probed
}

async fn wait_ready(http: &reqwest::Client, url: &str) -> anyhow::Result<()> {
    for _ in 0..300 {
        if http.get(format!("{url}/v1")).send().await.is_ok() {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    bail!("the engine at {url} did not start")
}

/// A node in `wait call-back` with a port; returns the port's MAC.
async fn set_up_lookup(api: &Client) -> anyhow::Result<String> {
    let node = api
        .post(
            "/v1/nodes",
            &json!({"driver": "test_driver", "instance_info": {"mode": "wait"}}),
        )
        .await?;
    let uuid = node["uuid"].as_str().context("a node uuid")?.to_owned();
    let mac = "52:54:00:aa:bb:cc";
    api.post("/v1/ports", &json!({"node_uuid": uuid, "address": mac}))
        .await?;
    for (target, state) in [
        ("manage", "manageable"),
        ("provide", "available"),
        ("active", "wait call-back"),
    ] {
        let path = format!("/v1/nodes/{uuid}/states/provision");
        api.put(&path, &json!({ "target": target })).await?;
        wait_state(api, &uuid, state).await?;
    }
    Ok(mac.to_owned())
}

async fn wait_state(api: &Client, uuid: &str, state: &str) -> anyhow::Result<()> {
    for _ in 0..200 {
        let node = api.get(&format!("/v1/nodes/{uuid}")).await?;
        if node["provision_state"] == state {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    bail!("node {uuid} did not reach {state}")
}

/// `nodes` nodes, each with an `extra` of about `extra_kib` KiB.
async fn set_up_list(api: &Client, nodes: usize, extra_kib: usize) -> anyhow::Result<()> {
    let blob = "x".repeat(1000);
    let extra: serde_json::Map<String, Value> = (0..extra_kib)
        .map(|i| (format!("k{i:05}"), json!(blob)))
        .collect();
    for _ in 0..nodes {
        api.post("/v1/nodes", &json!({"driver": "fake", "extra": extra}))
            .await?;
    }
    Ok(())
}
