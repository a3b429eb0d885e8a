//! The engine as `deployd serve` runs it: the store opened and recovered, the drivers
//! loaded, the conductor, the sweeper and the HTTP API running. Tests start the same
//! thing on an ephemeral port.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::agent_sessions::AgentSessions;
use crate::api::{self, App, http::auth::Auth};
use crate::boot_server::BootServer;
use crate::clock::Clock;
use crate::conductor::Conductor;
use crate::config::{AuthStrategy, Config};
use crate::driver_host::capability::Services;
use crate::driver_host::{Limits, Registry};
use crate::images::Images;
use crate::store::{FaultStep, Recovery, Store};
use crate::sweeper::Sweeper;

pub struct Engine {
    pub store: Arc<Store>,
    pub conductor: Arc<Conductor>,
    pub recovery: Recovery,
    /// Where the API listens (the configured address, with the port the OS gave for :0).
    pub addr: SocketAddr,
    sweeper: Sweeper,
    stop: watch::Sender<bool>,
    server: JoinHandle<std::io::Result<()>>,
    keeper: JoinHandle<()>,
    /// Follows other engines' driver uploads on the shared store (see `driver_host::kept`).
    drivers: JoinHandle<()>,
}

/// How often the store's high-water mark is raised (see [`crate::store::manifest`]):
/// what a damaged store lost since the last one is the part it cannot detect.
const CHECKPOINT_EVERY: u32 = 2;
/// How often, in seconds, the keeper looks at the store.
const KEEP_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// Keeps the store, off the async workers: raises its checkpoint every
/// [`CHECKPOINT_EVERY`] seconds and, while a storage fault has it degraded (see
/// [`crate::store::health`]), takes it out of the fault a step a second
/// ([`Store::leave_fault`]): reads first, writes once the disk has room again.
fn keeper(store: Arc<Store>) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut every = tokio::time::interval(KEEP_EVERY);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut failing = false;
        // Why the last reopen of a degraded store failed: each new reason is logged once.
        let mut not_reopened = String::new();
        for tick in 0u32.. {
            tokio::select! {
                _ = every.tick() => {}
                () = store.health().fault() => {}
            }
            let degraded = store.health().is_degraded();
            if !degraded && tick % CHECKPOINT_EVERY != 0 {
                continue;
            }
            let kept = store.clone();
            let done = tokio::task::spawn_blocking(move || match degraded {
                true => kept.leave_fault().map(|step| {
                    if step == FaultStep::Reopened {
                        tracing::info!(
                            "the store was opened again on its space reserve: reads are served, writes wait for room on the disk"
                        );
                    }
                }),
                false => kept.checkpoint(),
            })
            .await;
            match done {
                Ok(Ok(())) if failing => {
                    failing = false;
                    tracing::info!("store checkpoints are written again");
                }
                // A degraded store said why once; its failed reopens say nothing new.
                Ok(Err(e)) if !failing && !store.health().is_degraded() => {
                    failing = true;
                    tracing::warn!("the store's checkpoint could not be written: {e}");
                }
                // Each new reason a degraded store is not opened again is worth seeing: a
                // store that stays closed refuses reads too.
                Ok(Err(e)) if degraded => {
                    let why = e.to_string();
                    if why != not_reopened {
                        tracing::warn!(
                            "the store is not opened again yet (tried each second): {why}"
                        );
                        not_reopened = why;
                    }
                }
                _ => {}
            }
        }
    })
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| "localhost".into())
}

/// How this engine names itself on the shared store: its host and API port.
fn engine_name(listen: SocketAddr) -> String {
    format!("{}:{}", host_name(), listen.port())
}

/// Where other engines reach this one's API: `api.peer_url`, else the address it listens
/// on (its host's name where that is every address).
fn peer_url(config: &Config, listen: SocketAddr) -> String {
    match &config.api.peer_url {
        Some(url) => url.trim_end_matches('/').to_owned(),
        None if listen.ip().is_unspecified() => format!("http://{}:{}", host_name(), listen.port()),
        None => format!("http://{listen}"),
    }
}

impl Engine {
    /// Opens the store (sled under `config.data_dir`, or the shared store at
    /// `config.store.url`), loads drivers, and starts serving.
    pub async fn start(config: &Config, clock: Clock) -> anyhow::Result<Engine> {
        for warning in config.timeout_warnings() {
            tracing::warn!("{warning}");
        }
        std::fs::create_dir_all(&config.data_dir)
            .with_context(|| format!("creating {}", config.data_dir.display()))?;
        // Bound first: on the shared store the engine registers under its port, which
        // the OS picks for :0.
        let listener = tokio::net::TcpListener::bind(config.listen)
            .await
            .with_context(|| format!("listening on {}", config.listen))?;
        let addr = listener.local_addr()?;
        let (store, recovery) = match &config.store.url {
            None => Store::open(
                &config.data_dir.join("store"),
                &config.store(),
                config.timeouts(),
                clock,
            )
            .with_context(|| format!("opening the store in {}", config.data_dir.display()))?,
            Some(url) => {
                let name = engine_name(addr);
                let peer_url = peer_url(config, addr);
                let store = config.store();
                Store::open_shared(url, &name, &peer_url, &store, config.timeouts(), clock)
                    .await
                    .with_context(|| format!("opening the shared store as engine {name}"))?
            }
        };
        let store = Arc::new(store);
        let store_for_checkpoints = store.clone();
        let agents = Arc::new(AgentSessions::default());
        let calls = config.plugins.max_concurrent_calls;
        let public_url = match &config.api.public_url {
            Some(url) => url.trim_end_matches('/').to_owned(),
            None => {
                if addr.ip().is_unspecified() {
                    tracing::warn!(
                        "listening on {addr} without public_url: links and image urls will name {addr}, which clients cannot reach; set api.public_url"
                    );
                }
                format!("http://{addr}")
            }
        };
        let mut images = Images::new(
            config.images_dir(),
            public_url.clone(),
            &config.api.file_url_allowed_paths,
        )
        .map_err(anyhow::Error::msg)?;
        images.allow_md5 = config.api.allow_md5_checksum;
        images.keep_free =
            crate::disk_space::floor(config.store.min_free_mb << 20, &config.images_dir());
        let isos = Arc::new(crate::boot_iso::IsoMaker::new(
            images.clone(),
            config.data_dir.join("boot-iso"),
            config.pxe.kernel_append_params.clone(),
            config
                .deploy
                .external_http_url
                .clone()
                .unwrap_or_else(|| public_url.clone()),
        ));
        let backends = crate::driver_host::capability::bmc::Backends {
            default_boot_mode: config.deploy.default_boot_mode,
            isos: Some(isos.clone()),
            ..Default::default()
        };
        let services = Services::new(store.clone(), agents.clone(), calls, backends);
        let registry = Arc::new(
            Registry::new(services, Some(config.data_dir.join("compiled")), calls)?
                .compiling_with(config.plugins.compiler.clone()),
        );
        load_drivers(config, &registry).await?;
        crate::driver_host::kept::load_all(&store, &registry).await?;
        store
            .announce_drivers(&crate::hardware::Hardware::new(&registry).types())
            .await
            .context("recording this engine's drivers in the shared store")?;

        let auth = match config.api.auth_strategy {
            AuthStrategy::Noauth => Auth::NoAuth,
            AuthStrategy::HttpBasic => {
                let file = config
                    .api
                    .http_basic_auth_user_file
                    .as_ref()
                    .context("http_basic needs http_basic_auth_user_file")?;
                Auth::http_basic(file).map_err(anyhow::Error::msg)?
            }
        };
        let conductor = Conductor::new(
            store.clone(),
            registry,
            agents,
            Some(images.clone()),
            config.conductor(),
        );
        let drivers = tokio::spawn(follow_drivers(conductor.clone()));
        // The consoles that were enabled run again (in the background: each asks a BMC).
        tokio::spawn({
            let conductor = conductor.clone();
            async move { conductor.restore_consoles().await }
        });
        // The busy nodes this engine fails as it takes a dead engine's over get the
        // clean-up their driver owes them, as a timeout's do.
        if let Some(mut failed) = store.takeover_failures() {
            let conductor = conductor.clone();
            tokio::spawn(async move {
                while let Some(node) = failed.recv().await {
                    conductor.spawn_clean_up(node, "takeover clean-up", None);
                }
            });
        }
        let sweeper = Sweeper::spawn(store.clone(), config.sweeper(), Arc::new(conductor.clone()));
        let app = Arc::new(App::new(
            conductor.clone(),
            auth,
            config.api.ramdisk_heartbeat_timeout,
            Some(config.plugins_dir()),
            public_url,
            config.api.public_url.is_some(),
            api::dashboard::Access {
                open_to_remote: config.api.dashboard_open_to_remote,
                console_writers: config.api.dashboard_console_writers.clone(),
            },
        ));
        let (stop, mut stopped) = watch::channel(false);
        // Outside the API's layers: downloads are long and need no API version or auth
        // (as Ironic's image HTTP server); staged images are gated by their own token.
        let boot = Arc::new(BootServer {
            store: store.clone(),
            images: images.clone(),
            kernel_append_params: config.pxe.kernel_append_params.clone(),
            isos,
            uefi_ipxe_bootfile: config.pxe.uefi_ipxe_bootfile.clone(),
        });
        let files = crate::image_server::router(images.clone(), store.clone())
            .merge(crate::boot_server::router(boot))
            .layer(axum::middleware::from_fn(api::http::plumbing::json_errors));
        let router = api::router(app).merge(files);
        let mut limits = config.connection_limits();
        limits.max_connections =
            api::http::listener::fit_to_descriptor_limit(limits.max_connections);
        let server = tokio::spawn(api::http::listener::serve(
            listener,
            router,
            limits,
            async move {
                let _ = stopped.wait_for(|s| *s).await;
            },
        ));
        Ok(Engine {
            store,
            conductor,
            recovery,
            addr,
            sweeper,
            stop,
            server,
            keeper: keeper(store_for_checkpoints),
            drivers,
        })
    }

    /// Stops accepting requests, lets those in flight finish, stops the sweeper, flushes.
    pub async fn shutdown(self) -> anyhow::Result<()> {
        self.stop.send_replace(true);
        let _ = self.server.await;
        self.sweeper.shutdown().await;
        self.drivers.abort();
        // The consoles end with the engine (a restart starts the enabled ones again).
        self.conductor.stop_consoles().await;
        if let Err(e) = self.store.leave().await {
            tracing::warn!("could not end this engine's lease on the shared store: {e}");
        }
        self.keeper.abort();
        let _ = self.keeper.await;
        // A degraded store said why when it failed; what it acknowledged is on disk.
        if !self.store.health().is_degraded() {
            self.store.checkpoint()?;
        }
        Ok(())
    }
}

/// Keeps this engine's drivers in step with every engine's uploads and unloads on the
/// shared store, for as long as the engine runs (nothing to do on sled): a listener whose
/// connection ended listens again (after a pause when it cannot yet) and loads what the
/// store keeps again, for what it missed meanwhile. Each change is recorded in this
/// engine's row, for the other engines' `/v1/conductors`.
async fn follow_drivers(conductor: Arc<Conductor>) {
    use crate::driver_host::kept;
    let (store, registry) = (conductor.store(), conductor.registry());
    loop {
        let mut changed = match store.drivers_changed().await {
            Ok(Some(changed)) => changed,
            Ok(None) => return,
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for other engines' driver uploads; trying again");
                tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                continue;
            }
        };
        if let Err(e) = kept::load_all(store, registry).await {
            tracing::warn!("{e:#}");
        }
        loop {
            if let Err(e) = conductor.announce_drivers().await {
                tracing::warn!(error = %e, "cannot record this engine's drivers in the shared store");
            }
            let Some(name) = changed.next().await else {
                break;
            };
            kept::follow(store, registry, &name).await;
        }
        tracing::warn!("the driver listener's connection ended; listening again");
    }
}

/// The bundled drivers, then every `*.wasm` in the plugins directory (which may replace a
/// bundled one of the same name). A file that fails to load, or that changed since it was
/// uploaded, is reported and skipped.
async fn load_drivers(config: &Config, registry: &Registry) -> anyhow::Result<()> {
    if config.plugins.bundled {
        for (name, bytes) in deployd_artifacts::BUNDLED {
            registry
                .load(bytes, Limits::default())
                .await
                .with_context(|| format!("loading the bundled driver {name}"))?;
        }
    }
    let dir = config.plugins_dir();
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Ok(());
    };
    let mut paths: Vec<_> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "wasm"))
        .collect();
    paths.sort();
    for path in paths {
        let bytes = match crate::driver_host::component_file::read(&path) {
            Ok(bytes) => bytes,
            Err(e) => {
                tracing::error!("skipping a driver: {e}");
                continue;
            }
        };
        match registry.load(&bytes, Limits::default()).await {
            Ok(d) => {
                tracing::info!(path = %path.display(), name = %d.description.name, "loaded driver")
            }
            Err(e) => {
                tracing::error!(path = %path.display(), "skipping a driver that does not load: {e}")
            }
        }
    }
    Ok(())
}
