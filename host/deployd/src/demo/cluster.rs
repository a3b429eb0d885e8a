//! `deployd demo --engines N`: the story told by N engines (`deployd serve` processes)
//! sharing a PostgreSQL cluster the demo starts (`deployd_lab::postgres`), behind a balancer of
//! the demo's own that every call and every agent goes through. One engine is SIGKILLed
//! midway: the balancer sends its calls to the others, which take its nodes over once its
//! lease lapses, and every deploy carries on.

use std::net::SocketAddr;
use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::Context;
use tokio::net::{TcpListener, TcpStream};
use tokio::process::{Child, Command};

use deployd_lab::postgres::Postgres;

/// The engines, their database and the balancer in front of them.
pub struct Cluster {
    /// The engines' processes, each with its address; `None` once killed.
    engines: Vec<(Option<Child>, SocketAddr)>,
    balancer: tokio::task::JoinHandle<()>,
    /// Where clients and agents call the engines: the balancer.
    pub url: String,
    /// Dropped last: the engines stop first.
    _postgres: Postgres,
}

impl Cluster {
    /// Starts PostgreSQL, `n` engines on it (each with `flags`, its own data directory in
    /// `dir` and the balancer's url as its public one) and the balancer.
    pub async fn start(dir: &Path, n: usize, flags: &[String]) -> anyhow::Result<Cluster> {
        let postgres = Postgres::start(dir).await?;
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}", listener.local_addr()?);
        let exe = std::env::current_exe().context("finding this executable")?;
        let mut engines = Vec::new();
        for i in 0..n {
            let addr: SocketAddr =
                format!("127.0.0.1:{}", deployd_lab::machine::free_port()).parse()?;
            let log = std::fs::File::create(dir.join(format!("engine{i}.log")))?;
            let child = Command::new(&exe)
                .args(["serve", "--listen", &addr.to_string(), "--data-dir"])
                .arg(dir.join(format!("engine{i}")))
                .args(["--store-url", &postgres.url, "--public-url", &url])
                .args(flags)
                .env("RUST_LOG", "warn")
                .stdout(Stdio::null())
                .stderr(log)
                .kill_on_drop(true)
                .spawn()
                .context("starting an engine")?;
            engines.push((Some(child), addr));
        }
        let http = reqwest::Client::new();
        for (_, addr) in &engines {
            let ready = async {
                while http.get(format!("http://{addr}/v1")).send().await.is_err() {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            };
            tokio::time::timeout(Duration::from_secs(60), ready)
                .await
                .with_context(|| {
                    format!("the engine at {addr} did not start (see {})", dir.display())
                })?;
        }
        let backends: Vec<SocketAddr> = engines.iter().map(|(_, a)| *a).collect();
        let balancer = tokio::spawn(balance(listener, backends));
        Ok(Cluster {
            engines,
            balancer,
            url,
            _postgres: postgres,
        })
    }

    /// The engines' addresses.
    pub fn addrs(&self) -> Vec<SocketAddr> {
        self.engines.iter().map(|(_, a)| *a).collect()
    }

    /// SIGKILLs engine `i`: no shutdown, its lease left to lapse.
    pub async fn kill(&mut self, i: usize) -> anyhow::Result<SocketAddr> {
        let (child, addr) = &mut self.engines[i];
        if let Some(mut child) = child.take() {
            child.kill().await?;
        }
        Ok(*addr)
    }

    /// Stops the engines (SIGTERM: each ends its lease) and the balancer.
    pub async fn stop(mut self) {
        for (child, _) in &mut self.engines {
            if let Some(pid) = child
                .as_ref()
                .and_then(Child::id)
                .and_then(|p| rustix::process::Pid::from_raw(p as i32))
            {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
            }
        }
        for (child, _) in &mut self.engines {
            if let Some(child) = child {
                let _ = tokio::time::timeout(Duration::from_secs(10), child.wait()).await;
            }
        }
        self.balancer.abort();
    }
}

/// Round robin over `backends`, a connection at a time: one whose engine does not accept
/// it goes to the next (as haproxy's `redispatch`), so a killed engine costs a client
/// nothing but a connection that broke under it.
async fn balance(listener: TcpListener, backends: Vec<SocketAddr>) {
    let next = Arc::new(AtomicUsize::new(0));
    while let Ok((mut inbound, _)) = listener.accept().await {
        let (next, backends) = (next.clone(), backends.clone());
        tokio::spawn(async move {
            let first = next.fetch_add(1, Ordering::Relaxed);
            for k in 0..backends.len() {
                let backend = backends[(first + k) % backends.len()];
                if let Ok(mut outbound) = TcpStream::connect(backend).await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    return;
                }
            }
        });
    }
}
