//! The agent's life, as ironic-python-agent lives it: discover the engine's API version,
//! serve the command API (over HTTPS from 1.68, with a certificate made at start), look the machine up by its MACs (or node uuid) until the engine
//! expects it, then heartbeat until the machine is powered off.
//!
//! - Heartbeats come every `heartbeat_timeout × U(0.3, 0.6)` (IPA's interval), and at once
//!   when a command ends, so the engine learns of a finished write without waiting.
//! - An unreachable engine (restarting, say) is retried with jittered backoff: an agent
//!   must outlive its engine's restarts, since the deploy goes on on the machine.
//! - A heartbeat the engine refuses for its token (the engine forgot it, the node was
//!   re-booted into a new flow) sends the agent back to lookup for a fresh one.
//! - Each heartbeat carries `agent_status_message`: the running command and the bytes
//!   written so far, which the engine shows as the node's progress.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use deployd_client::{Client, Method};
use deployd_wire::agent::Heartbeat;
use deployd_wire::version::{self, Version};
use rand::Rng;
use serde_json::Value;
use uuid::Uuid;

use super::{CommandApi, DiskTarget, server, tls};

#[derive(clap::Args, Clone, Debug)]
pub struct AgentArgs {
    /// The engine's API, e.g. http://127.0.0.1:6385.
    #[arg(long)]
    pub api_url: String,
    /// A MAC address of this machine, as enrolled in a port (repeatable).
    #[arg(long = "mac")]
    pub macs: Vec<String>,
    /// Look the node up by uuid too (IPA's `ipa-node-uuid`).
    #[arg(long)]
    pub node_uuid: Option<Uuid>,
    /// The target disk: a file or a block device. Without it, the smallest disk of at
    /// least 4 GiB in `/sys/block`, as ironic-python-agent picks it.
    #[arg(long)]
    pub disk: Option<PathBuf>,
    /// Where the command API listens.
    #[arg(long, default_value = "127.0.0.1:9999")]
    pub listen: SocketAddr,
    /// The url the engine should call back on, if not `http://<listen>`.
    #[arg(long, conflicts_with = "advertise_host")]
    pub advertise_url: Option<String>,
    /// The host the engine should call back on (IPA's `ipa-advertise-host`), with the
    /// scheme the engine's version decides and `--advertise-port` (default: listen's port).
    #[arg(long)]
    pub advertise_host: Option<String>,
    #[arg(long, requires = "advertise_host")]
    pub advertise_port: Option<u16>,
    /// Write at most this many bytes per second (suffixes K, M, G): for demos and tests.
    #[arg(long, value_parser = parse_rate)]
    pub throttle: Option<u64>,
    /// Seconds between heartbeats, instead of heartbeat_timeout × U(0.3, 0.6).
    #[arg(long)]
    pub heartbeat_interval: Option<f64>,
    /// Serve the command API over HTTPS with a certificate made at start, which the
    /// heartbeats send as `agent_verify_ca` for the engine to pin (IPA's auto-TLS):
    /// `auto` does when the engine speaks API 1.68 or newer, as IPA does.
    #[arg(long, value_enum, default_value_t = TlsMode::Auto, num_args = 0..=1, default_missing_value = "on")]
    pub tls: TlsMode,
    /// Where efivarfs is mounted, on a UEFI machine: after writing an image whose loader
    /// is not at the removable-media path, the agent adds its boot entry there (see
    /// [`crate::uefi_boot`]). Only deployd's ramdisk says so: without it no firmware
    /// variable is touched.
    #[arg(long)]
    pub efivars: Option<PathBuf>,
    /// Where `rescue.finalize_rescue` writes the rescue password's hash, for the ramdisk
    /// to set up the `rescue` login from when the agent exits with [`RESCUED`]. Without
    /// it the agent refuses to rescue.
    #[arg(long)]
    pub rescue_password_file: Option<PathBuf>,
}

/// How the agent ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ended {
    /// `standby.power_off`: the machine is off (exit status 0).
    PoweredOff,
    /// `rescue.finalize_rescue`: the ramdisk goes on, with a login ([`RESCUED`]).
    Rescued,
}

/// The exit status of an agent that ended in a rescue: the ramdisk's init sets up the
/// `rescue` login (deployd's `init.sh`); the lab's machine stays on.
pub const RESCUED: i32 = 3;

impl Ended {
    /// Exits the process with the status that says how the agent ended.
    pub fn exit(self) -> ! {
        std::process::exit(match self {
            Ended::PoweredOff => 0,
            Ended::Rescued => RESCUED,
        })
    }
}

/// When the command API serves HTTPS.
#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TlsMode {
    /// From API 1.68 on (ironic-python-agent's auto-TLS).
    #[default]
    Auto,
    On,
    Off,
}

/// The API version from which agents serve HTTPS with a certificate of their own.
const AUTO_TLS: u32 = 68;

impl TlsMode {
    fn serves_https(self, engine: Version) -> bool {
        match self {
            TlsMode::Auto => engine.at_least(AUTO_TLS),
            TlsMode::On => true,
            TlsMode::Off => false,
        }
    }
}

/// `10M` → 10 MiB/s.
pub fn parse_rate(s: &str) -> Result<u64, String> {
    let (digits, unit) = match s.char_indices().find(|(_, c)| c.is_ascii_alphabetic()) {
        Some((i, _)) => s.split_at(i),
        None => (s, ""),
    };
    let n: f64 = digits
        .parse()
        .map_err(|_| format!("{s:?} is not a rate like 512K or 10M"))?;
    let scale = match unit
        .to_ascii_uppercase()
        .trim_end_matches("IB")
        .trim_end_matches('B')
    {
        "" => 1u64,
        "K" => 1 << 10,
        "M" => 1 << 20,
        "G" => 1 << 30,
        _ => return Err(format!("{s:?}: unknown unit {unit:?}")),
    };
    Ok((n * scale as f64) as u64)
}

/// The engine, at the newest API version both sides speak. Retries are the runner's
/// own (backoff, back to lookup), so the client makes none.
struct Engine {
    client: Client,
    version: Version,
}

/// Why a heartbeat did not land.
enum Refused {
    /// Network error or 5xx: retry soon with backoff.
    Unreachable(String),
    /// The node is busy (409): retry soon.
    Busy,
    /// The token or the node is unknown: look up again.
    Lookup(String),
}

/// Runs the agent until the machine is powered off (`standby.power_off`) or rescued.
pub async fn run(args: AgentArgs) -> anyhow::Result<Ended> {
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("listening on {}", args.listen))?;
    run_on(args, listener).await
}

/// [`run`] on a socket already bound. Everything the agent does lives in this future:
/// dropping it (the lab pulling a simulated machine's power) stops the command API and
/// any image write at once.
pub async fn run_on(args: AgentArgs, listener: tokio::net::TcpListener) -> anyhow::Result<Ended> {
    if args.macs.is_empty() && args.node_uuid.is_none() {
        anyhow::bail!(
            "give at least one --mac or --node-uuid, so the engine can find this machine"
        );
    }
    let addr = listener.local_addr()?;
    // The engine's version decides the scheme (as IPA asks before it serves), so the
    // command API starts once the engine answers.
    let engine = discover(&args.api_url).await;
    let tls = args.tls.serves_https(engine.version);
    let scheme = if tls { "https" } else { "http" };
    let advertise = match (&args.advertise_url, &args.advertise_host) {
        (Some(url), _) => url.clone(),
        (None, Some(host)) => {
            let port = args.advertise_port.unwrap_or(addr.port());
            format!("{scheme}://{host}:{port}")
        }
        (None, None) => {
            let ip = match addr.ip().is_unspecified() {
                true => route_source(&args.api_url)?,
                false => addr.ip(),
            };
            format!("{scheme}://{}", SocketAddr::new(ip, addr.port()))
        }
    };
    // Without --disk, a first choice now; the node's root device hints may change it at
    // lookup.
    let disk = DiskTarget::chosen_as(
        match &args.disk {
            Some(path) => Ok(path.clone()),
            None => crate::root_disk::choose(std::path::Path::new(SYS_BLOCK)),
        },
        args.throttle,
    );
    let api = CommandApi::new(disk, advertise.clone());
    if let Some(dir) = &args.efivars {
        api.manage_uefi_boot(dir.clone());
    }
    if let Some(file) = &args.rescue_password_file {
        api.rescue_to(file.clone());
    }
    let _writes = StopWrites(api.clone());
    let router = server::router(api.clone());
    let identity = match tls {
        true => Some(tls::Identity::generate(&advertised_host(&advertise)?)?),
        false => None,
    };
    let server = async {
        match &identity {
            Some(identity) => tls::serve(listener, router, identity).await,
            None => axum::serve(listener, router)
                .await
                .context("the command API stopped"),
        }
    };
    tracing::info!(%advertise, disk = %api.disk.path().display(), tls, "agent command API is up");
    let pem = identity.as_ref().map(|i| i.pem.clone());
    tokio::select! {
        r = server => r.map(|()| Ended::PoweredOff),
        r = live(&args, engine, &api, pem) => r,
    }
}

/// The address this machine reaches the engine from, as ironic-python-agent finds the
/// host it advertises when listening on every address: the source the kernel's routes
/// pick for the engine's address (a UDP "connect" sends nothing).
fn route_source(api_url: &str) -> anyhow::Result<std::net::IpAddr> {
    let url =
        reqwest::Url::parse(api_url).with_context(|| format!("the engine's url {api_url}"))?;
    let engine = url
        .socket_addrs(|| None)
        .with_context(|| format!("resolving {api_url}"))?
        .into_iter()
        .next()
        .with_context(|| format!("{api_url} names no address"))?;
    let unspecified: SocketAddr = match engine {
        SocketAddr::V4(_) => "0.0.0.0:0".parse()?,
        SocketAddr::V6(_) => "[::]:0".parse()?,
    };
    let socket = std::net::UdpSocket::bind(unspecified)?;
    socket
        .connect(engine)
        .with_context(|| format!("no route to the engine at {engine}"))?;
    Ok(socket.local_addr()?.ip())
}

/// Where the kernel lists block devices.
const SYS_BLOCK: &str = "/sys/block";

/// The host part of the advertised url: what the certificate must name.
fn advertised_host(url: &str) -> anyhow::Result<String> {
    let parsed = reqwest::Url::parse(url).with_context(|| format!("the advertised url {url}"))?;
    let host = parsed
        .host_str()
        .with_context(|| format!("the advertised url {url} has no host"))?;
    Ok(host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned())
}

/// Aborts the image write when the agent's future is dropped.
struct StopWrites(Arc<CommandApi>);

impl Drop for StopWrites {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Discovery, the inventory for an inspection that may await it, lookup, then heartbeats
/// until power-off.
async fn live(
    args: &AgentArgs,
    engine: Engine,
    api: &Arc<CommandApi>,
    verify_ca: Option<String>,
) -> anyhow::Result<Ended> {
    if engine.version.at_least(84) {
        crate::inventory::post(&engine.client, args).await;
    }
    let mut session = lookup(&engine, args).await;
    api.set_token(session.token.clone());
    choose_disk(args, api, &session);
    let mut ended = api.command_ended.subscribe();
    let mut off = api.powered_off.subscribe();
    let mut rescued = api.rescued.subscribe();
    let mut failures = 0u32;
    loop {
        let delay = match heartbeat(&engine, &session, api, verify_ca.as_deref()).await {
            Ok(()) => {
                failures = 0;
                session.interval(args.heartbeat_interval)
            }
            Err(Refused::Busy) => jitter(Duration::from_millis(500)),
            Err(Refused::Unreachable(e)) => {
                failures += 1;
                tracing::warn!("heartbeat failed (attempt {failures}): {e}");
                backoff(failures, session.interval(args.heartbeat_interval))
            }
            Err(Refused::Lookup(e)) => {
                tracing::warn!("the engine refused the heartbeat ({e}); looking up again");
                session = lookup(&engine, args).await;
                api.set_token(session.token.clone());
                choose_disk(args, api, &session);
                continue;
            }
        };
        tokio::select! {
            _ = tokio::time::sleep(delay) => {}
            _ = ended.changed() => {}
            () = api.transfer_began.notified() => {}
            _ = off.changed() => {}
            _ = rescued.changed() => {}
        }
        if *off.borrow() {
            // Give the engine a moment to read the command's result, then "power off".
            tokio::time::sleep(Duration::from_millis(500)).await;
            tracing::info!("powered off");
            return Ok(Ended::PoweredOff);
        }
        if *rescued.borrow() {
            // As ironic-python-agent after finalize_rescue: no more API, no heartbeats.
            tokio::time::sleep(Duration::from_millis(500)).await;
            tracing::info!("rescue set up; the agent stops");
            return Ok(Ended::Rescued);
        }
    }
}

/// Without `--disk`, the disk the node's root device hints name (or the default one).
fn choose_disk(args: &AgentArgs, api: &CommandApi, session: &Session) {
    if args.disk.is_some() {
        return;
    }
    let chosen = crate::root_disk::choose_with(
        std::path::Path::new(SYS_BLOCK),
        session.root_device.as_ref(),
    );
    match &chosen {
        Ok(disk) => {
            tracing::info!(disk = %disk.display(), hints = ?session.root_device, "root disk")
        }
        Err(e) => tracing::warn!("no root disk: {e}"),
    }
    api.disk.choose(chosen);
}

/// `d × U(0.5, 1.0)`: spreads a fleet's retries.
fn jitter(d: Duration) -> Duration {
    d.mul_f64(rand::rng().random_range(0.5..1.0))
}

/// 1 s, 2 s, 4 s… capped at the heartbeat interval (and at 10 s), jittered.
fn backoff(failures: u32, interval: Duration) -> Duration {
    let cap = interval
        .min(Duration::from_secs(10))
        .max(Duration::from_secs(1));
    jitter(Duration::from_secs(1 << failures.min(4).saturating_sub(1)).min(cap))
}

/// Finds the engine's newest API version, retrying until it answers.
async fn discover(base: &str) -> Engine {
    // A heartbeat that gets no answer in a minute is given up and sent again on a new
    // connection a second later (a relay once kept a dead one open: 120 s of silence).
    // Not less: a ramdisk under software emulation on a loaded host answers slowly.
    let client = Client::new(base)
        .with_retries(0, Duration::ZERO)
        .with_timeout(Duration::from_secs(60));
    let mut failures = 0;
    loop {
        match root_version(&client).await {
            Ok(version) => {
                tracing::info!(%version, "engine found");
                return Engine {
                    client: client.with_version(version),
                    version,
                };
            }
            Err(e) => {
                failures += 1;
                tracing::warn!("engine not reachable at {} yet: {e}", client.url());
                tokio::time::sleep(backoff(failures, Duration::from_secs(10))).await;
            }
        }
    }
}

async fn root_version(client: &Client) -> Result<Version, String> {
    let root = client.get("/").await.map_err(|e| e.to_string())?;
    let max = root
        .pointer("/default_version/version")
        .and_then(Value::as_str)
        .ok_or("the engine's root document has no default_version.version")?;
    let version = Version::parse(max)
        .ok_or_else(|| format!("unreadable API version {max:?}"))?
        .min(version::MAX);
    if !version.at_least(22) {
        return Err(format!(
            "API {max} is too old for lookup and heartbeat (1.22)"
        ));
    }
    Ok(version)
}

/// What lookup gave: the node, its token, and how often to heartbeat.
struct Session {
    node: String,
    token: String,
    heartbeat_timeout: f64,
    /// The node's `properties.root_device`.
    root_device: Option<Value>,
}

impl Session {
    fn interval(&self, fixed: Option<f64>) -> Duration {
        let secs =
            fixed.unwrap_or_else(|| self.heartbeat_timeout * rand::rng().random_range(0.3..0.6));
        Duration::from_secs_f64(secs.max(0.05))
    }
}

/// Looks the machine up until the engine expects it and hands out a token.
async fn lookup(engine: &Engine, args: &AgentArgs) -> Session {
    let mut query = vec![];
    if !args.macs.is_empty() {
        query.push(("addresses", args.macs.join(",")));
    }
    if let Some(u) = args.node_uuid {
        query.push(("node_uuid", u.to_string()));
    }
    let mut failures = 0;
    loop {
        match lookup_once(engine, &query).await {
            Ok(session) => {
                tracing::info!(node = %session.node, "looked up");
                return session;
            }
            Err(e) => {
                failures += 1;
                if failures == 1 || failures % 10 == 0 {
                    tracing::info!("lookup: {e}; retrying");
                }
                tokio::time::sleep(jitter(Duration::from_secs(1))).await;
            }
        }
    }
}

async fn lookup_once(engine: &Engine, query: &[(&str, String)]) -> Result<Session, String> {
    let query: Vec<String> = query.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let path = format!("/v1/lookup?{}", query.join("&"));
    let body = engine.client.get(&path).await.map_err(|e| e.to_string())?;
    let node = body
        .pointer("/node/uuid")
        .and_then(Value::as_str)
        .ok_or("lookup answered without node.uuid")?;
    let token = body
        .pointer("/config/agent_token")
        .and_then(Value::as_str)
        .ok_or("lookup answered without an agent token")?;
    if token == "******" {
        return Err(format!(
            "node {node} already issued its token to another agent; waiting for a new boot"
        ));
    }
    Ok(Session {
        node: node.to_owned(),
        token: token.to_owned(),
        heartbeat_timeout: body
            .pointer("/config/heartbeat_timeout")
            .and_then(Value::as_f64)
            .unwrap_or(300.0),
        root_device: body.pointer("/node/properties/root_device").cloned(),
    })
}

async fn heartbeat(
    engine: &Engine,
    session: &Session,
    api: &Arc<CommandApi>,
    verify_ca: Option<&str>,
) -> Result<(), Refused> {
    let body = Heartbeat {
        callback_url: api.advertise.clone(),
        agent_token: Some(session.token.clone()),
        agent_version: Some(concat!("deployd-agent ", env!("CARGO_PKG_VERSION")).to_owned()),
        agent_status_message: Some(api.status_message()),
        agent_verify_ca: verify_ca.map(str::to_owned),
        ..Default::default()
    };
    let body = serde_json::to_value(&body).expect("a heartbeat serialises");
    let path = format!("/v1/heartbeat/{}", session.node);
    let answer = engine
        .client
        .answer(Method::POST, &path, Some(&body))
        .await
        .map_err(|e| Refused::Unreachable(e.to_string()))?;
    let status = answer.status;
    let fault = answer.fault.unwrap_or_default();
    match status {
        200..=299 => Ok(()),
        409 => Err(Refused::Busy),
        400 | 401 | 403 | 404 => Err(Refused::Lookup(format!("{status}: {fault}"))),
        _ => Err(Refused::Unreachable(format!("{status}: {fault}"))),
    }
}

impl AgentArgs {
    /// An agent of the engine at `api_url`, with every other flag at its default (its
    /// command API on a free loopback port).
    pub fn for_engine(api_url: String) -> AgentArgs {
        AgentArgs {
            api_url,
            macs: Vec::new(),
            node_uuid: None,
            disk: None,
            listen: "127.0.0.1:0".parse().expect("an address"),
            advertise_url: None,
            advertise_host: None,
            advertise_port: None,
            throttle: None,
            heartbeat_interval: None,
            tls: TlsMode::default(),
            efivars: None,
            rescue_password_file: None,
        }
    }
}

/// Arguments for unit tests: nothing reachable, nothing given.
#[cfg(test)]
pub(crate) fn test_args() -> AgentArgs {
    AgentArgs::for_engine("http://127.0.0.1:9".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_agent_on_every_address_advertises_the_one_it_reaches_the_engine_from() {
        let ip = route_source("http://127.0.0.1:6385").unwrap();
        assert_eq!(ip, std::net::IpAddr::from([127, 0, 0, 1]));
        assert!(route_source("http://[::1]:6385/").unwrap().is_loopback());
        assert!(route_source("not a url").is_err());
    }

    #[test]
    fn rates_parse_with_binary_units() {
        assert_eq!(parse_rate("512").unwrap(), 512);
        assert_eq!(parse_rate("2K").unwrap(), 2048);
        assert_eq!(parse_rate("10M").unwrap(), 10 << 20);
        assert_eq!(parse_rate("1.5MiB").unwrap(), 3 << 19);
        assert!(parse_rate("fast").is_err());
        assert!(parse_rate("3X").is_err());
    }

    #[test]
    fn backoff_grows_and_is_capped_by_the_interval() {
        let long = Duration::from_secs(60);
        assert!(backoff(1, long) <= Duration::from_secs(1));
        assert!(backoff(3, long) >= Duration::from_secs(2));
        assert!(backoff(30, long) <= Duration::from_secs(8));
        assert!(backoff(30, Duration::from_secs(2)) <= Duration::from_secs(2));
    }
}
