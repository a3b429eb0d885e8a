//! Engine configuration: built-in defaults, then a TOML file, then environment variables,
//! then command-line flags (each later source wins).
//!
//! ```toml
//! data_dir = "deployd-data"          # where sled keeps the node store
//! listen = "127.0.0.1:6385"          # the API address (Ironic's port)
//!
//! [conductor]                        # seconds; 0 disables that check
//! deploy_callback_timeout = 1800     # wait call-back
//! clean_callback_timeout = 1800      # clean wait
//! service_callback_timeout = 1800    # service wait
//! rescue_callback_timeout = 1800     # rescue wait
//! inspect_wait_timeout = 1800        # inspect wait (from the inspection's boot)
//! deploy_stall_timeout = 0           # wait call-back with heartbeats but no progress
//! clean_stall_timeout = 0            # clean wait, the same (0: off, the default)
//! check_provision_state_interval = 60  # longest the sweeper sleeps; 0 turns it off
//! automated_clean = true             # clean on provide and undeploy (a node's own
//!                                    # automated_clean field wins), as Ironic's default
//! node_history = true                # record every state change (GET …/history)
//! node_locked_retry_attempts = 3     # an operator's call on a node busy with a step
//! node_locked_retry_interval = 1     # waits (attempts - 1) x interval s for it, as Ironic
//! conductor_group = ""               # the nodes this engine runs the steps of (those of
//!                                    # this group; "" is the default group), as Ironic's
//! rescue_password_hash_algorithm = "sha256"   # or "sha512": how rescue passwords are
//!                                    # hashed (crypt's $5$ / $6$), as Ironic's option
//!
//! [interfaces]                       # Ironic's enabled_<kind>_interfaces ([DEFAULT])
//! enabled_rescue_interfaces = ["no-rescue"]   # add "agent": rescue through the ramdisk
//! enabled_console_interfaces = ["no-console"] # add "ipmitool-socat": serial consoles
//!
//! [console]                          # Ironic's [console]
//! port_range = "10000:20000"         # the TCP ports consoles listen on (first:last)
//! socat_address = "127.0.0.1"        # the address they listen on
//!
//! [store]
//! flush_every_ms = 500               # bound on touches lost in a crash
//! cache_capacity_mb = 256            # sled page cache
//! min_free_mb = 64                   # below this much free space writes are refused
//!                                    # (503) and reads go on; 0: off; at most 1/10 of
//!                                    # the filesystem; the images directory keeps it too
//! resume_free_mb = 128               # writes are taken again above this much
//! url = "postgres://deployd@db/deployd?sslmode=verify-full&sslrootcert=/etc/deployd/db-ca.pem"
//!                                    # the shared store (PostgreSQL) instead of sled, TLS
//!                                    # as libpq's sslmode asks; several engines may share it
//!
//! [api]
//! auth_strategy = "noauth"           # or "http_basic"
//! http_basic_auth_user_file = "/etc/deployd/htpasswd"   # bcrypt entries (htpasswd -B)
//! ramdisk_heartbeat_timeout = 300    # agents heartbeat every 30–60 % of this
//! public_url = "http://10.0.0.1:6385" # how clients and agents reach the engine (links,
//!                                    # image urls); default http://<listen>
//! peer_url = "http://10.0.0.1:6385"  # how other engines on the shared store reach this
//!                                    # one's API (the calls for its group's nodes);
//!                                    # default http://<listen>, with the host's name
//!                                    # when listening on every address
//! max_connections = 1000             # at the limit the connection idle the longest is
//!                                    # closed for a new one; if none is idle, a 503
//! max_connections_per_client = 750   # one client address's share; default 3/4 of max
//! header_read_timeout = 30           # seconds to send a request's headers, and the
//!                                    # longest a kept-alive connection may sit idle
//! file_url_allowed_paths = []        # directories local image_source files may be in
//!                                    # (besides the images directory)
//! allow_md5_checksum = false         # accept MD5 image checksums (Ironic's default: no)
//! dashboard_open_to_remote = false   # with noauth, the dashboard (/dashboard) answers
//!                                    # loopback clients only, unless this is true
//! dashboard_console_writers = ["*"]  # who may type into a serial console in the
//!                                    # dashboard ("*": whoever may use the API, as the
//!                                    # console's own url allows; [] : nobody, read-only);
//!                                    # others watch it read-only
//!
//! [deploy]
//! default_boot_mode = "uefi"         # or "bios": the mode a node boots in when neither its
//!                                    # instance_info.deploy_boot_mode nor its boot_mode
//!                                    # capability says (Ironic's default)
//! external_http_url = "http://10.1.0.1:6385"  # how BMCs reach the engine (the virtual
//!                                    # media ISOs they fetch); default the public url
//!
//! [pxe]
//! kernel_append_params = "nofb nomodeset vga=normal"   # a ramdisk's kernel parameters
//!                                    # after ipa-api-url and BOOTIF, for nodes without
//!                                    # driver_info.kernel_append_params (Ironic's default)
//! uefi_ipxe_bootfile = "/usr/lib/ipxe/snponly.efi"   # iPXE for UEFI HTTP boot, served
//!                                    # at /boot/ipxe.efi (Debian's ipxe)
//!
//! [plugins]
//! dir = "deployd-data/plugins"       # *.wasm loaded at start; uploads are kept here
//! bundled = true                     # load the drivers built into the binary
//! max_concurrent_calls = 256         # driver instances alive at once
//! compile_memory_mib = 4096          # address space of the process a driver compiles in
//! ```

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::conductor::Settings as ConductorSettings;
use crate::state_machine::Timeouts;
use crate::store::StoreConfig;
use crate::sweeper::SweeperConfig;

#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    pub data_dir: PathBuf,
    pub listen: SocketAddr,
    pub conductor: Conductor,
    pub store: Store,
    pub api: Api,
    pub deploy: Deploy,
    pub pxe: Pxe,
    pub plugins: Plugins,
    pub interfaces: Interfaces,
    pub console: Console,
}

/// The optional interfaces enabled (Ironic's `enabled_<kind>_interfaces`).
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Interfaces {
    pub enabled_rescue_interfaces: Vec<String>,
    pub enabled_console_interfaces: Vec<String>,
}

impl Default for Interfaces {
    fn default() -> Self {
        Interfaces {
            enabled_rescue_interfaces: vec!["no-rescue".into()],
            enabled_console_interfaces: vec!["no-console".into()],
        }
    }
}

/// Serial consoles (Ironic's `[console]`, see [`crate::console`]).
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Console {
    /// `first:last`, both included.
    pub port_range: String,
    pub socat_address: std::net::IpAddr,
}

impl Default for Console {
    fn default() -> Self {
        Console {
            port_range: "10000:20000".into(),
            socat_address: [127, 0, 0, 1].into(),
        }
    }
}

/// How nodes are deployed (Ironic's `[deploy]`).
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Deploy {
    /// See [`crate::boot_mode`].
    pub default_boot_mode: crate::boot_mode::BootMode,
    /// The engine's url as BMCs reach it (virtual media ISOs); default the public url.
    pub external_http_url: Option<String>,
}

/// Network boot (`/boot/ipxe…`, see [`crate::boot_server`]).
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Pxe {
    pub kernel_append_params: String,
    /// iPXE's UEFI binary, which UEFI HTTP boot fetches from `/boot/ipxe.efi`.
    pub uefi_ipxe_bootfile: PathBuf,
}

impl Default for Pxe {
    fn default() -> Self {
        Pxe {
            kernel_append_params: crate::boot_server::DEFAULT_APPEND.into(),
            uefi_ipxe_bootfile: "/usr/lib/ipxe/snponly.efi".into(),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Api {
    pub auth_strategy: AuthStrategy,
    pub http_basic_auth_user_file: Option<PathBuf>,
    pub ramdisk_heartbeat_timeout: u64,
    /// The engine's url as agents reach it (image downloads); default `http://<listen>`.
    pub public_url: Option<String>,
    /// The engine's url as other engines on the shared store reach it; default
    /// `http://<listen>` (the host's name for an address that listens on all).
    pub peer_url: Option<String>,
    /// Served at `/images/<name>`; default `<data_dir>/images`.
    pub images_dir: Option<PathBuf>,
    /// API connections open at once; one more takes the slot of the connection idle the
    /// longest, or is refused with a 503 when none is idle.
    pub max_connections: usize,
    /// How many of them one client address may hold; default three quarters of
    /// `max_connections`, so one client cannot take every slot.
    pub max_connections_per_client: Option<usize>,
    /// Seconds a client has to send a request's headers (and to send the next request on
    /// a kept-alive connection) before the connection is closed.
    pub header_read_timeout: u64,
    /// Directories (besides the images directory) that a local `image_source` may name a
    /// file in, as Ironic's `file_url_allowed_paths`. Anything else is refused.
    pub file_url_allowed_paths: Vec<PathBuf>,
    /// Whether an image's checksum may be MD5 (Ironic's `[agent]allow_md5_checksum`).
    pub allow_md5_checksum: bool,
    /// With `noauth`, whether the dashboard answers clients not on loopback (an API
    /// client must know the API; a browser finds a page by accident).
    pub dashboard_open_to_remote: bool,
    /// The `http_basic` users who may type into a node's serial console in the dashboard
    /// (`*`: every user, and anyone under `noauth`); the others see it read-only.
    pub dashboard_console_writers: Vec<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum AuthStrategy {
    Noauth,
    /// Ironic spells it `http_basic`; both spellings are accepted everywhere.
    #[serde(alias = "http-basic")]
    #[value(alias = "http_basic")]
    HttpBasic,
}

#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Plugins {
    /// Defaults to `<data_dir>/plugins`.
    pub dir: Option<PathBuf>,
    pub bundled: bool,
    pub max_concurrent_calls: u32,
    /// The address-space limit of the process each driver is compiled in, in MiB: a
    /// compile past it is stopped and the upload refused (an 18 MB Python driver needs
    /// about 1 GiB of address space).
    pub compile_memory_mib: u64,
    /// How drivers are compiled: in a child process under `compile_memory_mib` when the
    /// engine is the `deployd` binary (`deployd serve` sets it), else in process.
    #[serde(skip)]
    pub compiler: crate::driver_host::compiler::Compiler,
}

impl Default for Api {
    fn default() -> Self {
        Api {
            auth_strategy: AuthStrategy::Noauth,
            http_basic_auth_user_file: None,
            ramdisk_heartbeat_timeout: 300,
            public_url: None,
            peer_url: None,
            images_dir: None,
            max_connections: 1000,
            max_connections_per_client: None,
            header_read_timeout: 30,
            file_url_allowed_paths: Vec::new(),
            allow_md5_checksum: false,
            dashboard_open_to_remote: false,
            dashboard_console_writers: vec!["*".into()],
        }
    }
}

impl Default for Plugins {
    fn default() -> Self {
        Plugins {
            dir: None,
            bundled: true,
            max_concurrent_calls: 256,
            compile_memory_mib: crate::driver_host::compiler::DEFAULT_COMPILE_MEMORY_MIB,
            compiler: crate::driver_host::compiler::Compiler::InProcess,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Conductor {
    pub deploy_callback_timeout: u64,
    pub clean_callback_timeout: u64,
    pub service_callback_timeout: u64,
    pub rescue_callback_timeout: u64,
    pub inspect_wait_timeout: u64,
    /// Seconds a deploy's agent may heartbeat without progress before the node fails; 0
    /// (the default) turns the check off: the real ironic-python-agent shows progress
    /// only as commands start and end, so a long image write looks stalled to it.
    pub deploy_stall_timeout: u64,
    /// The same for cleaning.
    pub clean_stall_timeout: u64,
    pub check_provision_state_interval: u64,
    /// Whether provide and undeploy clean the disk (boot the ramdisk, erase its metadata)
    /// for nodes whose own `automated_clean` is unset. Ironic's default: true.
    pub automated_clean: bool,
    /// Whether each provision state change is recorded in the node's history.
    pub node_history: bool,
    /// Ironic's retry of a busy node's lock, whose defaults (3 attempts, 1 s apart) let an
    /// operator's call wait up to 2 s for a short task (a heartbeat's driver step, a power
    /// action) instead of failing with 409. deployd waits for the release itself rather
    /// than trying again on the interval's tick.
    pub node_locked_retry_attempts: u32,
    /// Seconds between those attempts.
    pub node_locked_retry_interval: u64,
    /// The conductor group whose nodes this engine runs the steps of (see
    /// [`crate::conductor_groups`]).
    pub conductor_group: String,
    pub rescue_password_hash_algorithm: crate::rescue_password::Algorithm,
}

#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Store {
    pub flush_every_ms: u64,
    pub cache_capacity_mb: u64,
    /// Free space the store's filesystem keeps (MiB): below it writes are refused with a
    /// 503 and reads go on; 0 turns it off. At most a tenth of the filesystem. The images
    /// directory's filesystem keeps the same floor against images the engine downloads.
    pub min_free_mb: u64,
    /// Free space (MiB) above which writes are taken again.
    pub resume_free_mb: u64,
    /// The shared store (`postgres://user@host:port/database`) instead of sled.
    pub url: Option<String>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            data_dir: PathBuf::from("deployd-data"),
            listen: "127.0.0.1:6385".parse().expect("a valid address"),
            conductor: Conductor::default(),
            store: Store::default(),
            api: Api::default(),
            deploy: Deploy::default(),
            pxe: Pxe::default(),
            plugins: Plugins::default(),
            interfaces: Interfaces::default(),
            console: Console::default(),
        }
    }
}

impl Default for Conductor {
    fn default() -> Self {
        Conductor {
            deploy_callback_timeout: 1800,
            clean_callback_timeout: 1800,
            service_callback_timeout: 1800,
            rescue_callback_timeout: 1800,
            inspect_wait_timeout: 1800,
            deploy_stall_timeout: 0,
            clean_stall_timeout: 0,
            check_provision_state_interval: 60,
            automated_clean: true,
            node_history: true,
            node_locked_retry_attempts: 3,
            node_locked_retry_interval: 1,
            conductor_group: String::new(),
            rescue_password_hash_algorithm: Default::default(),
        }
    }
}

impl Default for Store {
    fn default() -> Self {
        Store {
            flush_every_ms: 500,
            cache_capacity_mb: 256,
            min_free_mb: 64,
            resume_free_mb: 128,
            url: None,
        }
    }
}

/// Why a configuration could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("invalid config file {path}: {source}")]
    Parse {
        path: PathBuf,
        source: toml::de::Error,
    },
    #[error("invalid configuration: {0}")]
    Invalid(String),
}

/// Values given on the command line or in the environment; `None` keeps the file's value.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct Overrides {
    /// TOML configuration file.
    #[arg(long, env = "DEPLOYD_CONFIG")]
    pub config: Option<PathBuf>,
    /// API listen address [default: 127.0.0.1:6385].
    #[arg(long, env = "DEPLOYD_LISTEN")]
    pub listen: Option<SocketAddr>,
    /// Directory of the sled store [default: deployd-data].
    #[arg(long, env = "DEPLOYD_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// The shared store, PostgreSQL (`postgres://user@host:port/database`), instead of
    /// sled in the data directory (which keeps the drivers and images either way).
    #[arg(long, env = "DEPLOYD_STORE_URL")]
    pub store_url: Option<String>,
    /// Seconds a node may wait in "wait call-back" without a heartbeat; 0 disables [default: 1800].
    #[arg(long, env = "DEPLOYD_DEPLOY_CALLBACK_TIMEOUT")]
    pub deploy_callback_timeout: Option<u64>,
    /// Seconds for "clean wait"; 0 disables [default: 1800].
    #[arg(long, env = "DEPLOYD_CLEAN_CALLBACK_TIMEOUT")]
    pub clean_callback_timeout: Option<u64>,
    /// Seconds for "service wait"; 0 disables [default: 1800].
    #[arg(long, env = "DEPLOYD_SERVICE_CALLBACK_TIMEOUT")]
    pub service_callback_timeout: Option<u64>,
    /// Seconds for "rescue wait"; 0 disables [default: 1800].
    #[arg(long, env = "DEPLOYD_RESCUE_CALLBACK_TIMEOUT")]
    pub rescue_callback_timeout: Option<u64>,
    /// Seconds for "inspect wait", from the inspection's boot; 0 disables [default: 1800].
    #[arg(long, env = "DEPLOYD_INSPECT_WAIT_TIMEOUT")]
    pub inspect_wait_timeout: Option<u64>,
    /// Seconds a deploy's agent may heartbeat with no progress; 0 disables [default: 0].
    #[arg(long, env = "DEPLOYD_DEPLOY_STALL_TIMEOUT")]
    pub deploy_stall_timeout: Option<u64>,
    /// Seconds a cleaning's agent may heartbeat with no progress; 0 disables [default: 0].
    #[arg(long, env = "DEPLOYD_CLEAN_STALL_TIMEOUT")]
    pub clean_stall_timeout: Option<u64>,
    /// Longest the sweeper sleeps, in seconds; 0 turns it off [default: 60].
    #[arg(long, env = "DEPLOYD_CHECK_PROVISION_STATE_INTERVAL")]
    pub check_provision_state_interval: Option<u64>,
    /// Clean on provide and undeploy unless a node says otherwise [default: true].
    #[arg(long, env = "DEPLOYD_AUTOMATED_CLEAN")]
    pub automated_clean: Option<bool>,
    /// Ironic's enabled rescue interfaces, comma-separated: add `agent` [default: no-rescue].
    #[arg(long, env = "DEPLOYD_ENABLED_RESCUE_INTERFACES", value_delimiter = ',')]
    pub enabled_rescue_interfaces: Vec<String>,
    /// Ironic's enabled console interfaces: add `ipmitool-socat` [default: no-console].
    #[arg(
        long,
        env = "DEPLOYD_ENABLED_CONSOLE_INTERFACES",
        value_delimiter = ','
    )]
    pub enabled_console_interfaces: Vec<String>,
    /// The TCP ports serial consoles listen on, `first:last` [default: 10000:20000].
    #[arg(long, env = "DEPLOYD_CONSOLE_PORT_RANGE")]
    pub console_port_range: Option<String>,
    /// How often sled flushes touches to disk, in ms [default: 500].
    #[arg(long, env = "DEPLOYD_FLUSH_EVERY_MS")]
    pub flush_every_ms: Option<u64>,
    /// Operator authentication [default: noauth].
    #[arg(long, env = "DEPLOYD_AUTH_STRATEGY", value_enum)]
    pub auth_strategy: Option<AuthStrategy>,
    /// htpasswd file (bcrypt) for http_basic.
    #[arg(long, env = "DEPLOYD_HTTP_BASIC_AUTH_USER_FILE")]
    pub http_basic_auth_user_file: Option<PathBuf>,
    /// Seconds agents are told to heartbeat within (every 30–60 % of it) [default: 300].
    #[arg(long, env = "DEPLOYD_RAMDISK_HEARTBEAT_TIMEOUT")]
    pub ramdisk_heartbeat_timeout: Option<u64>,
    /// Directory served at /images/<name> [default: <data-dir>/images].
    #[arg(long, env = "DEPLOYD_IMAGES_DIR")]
    pub images_dir: Option<PathBuf>,
    /// The engine's url as clients and agents reach it [default: http://<listen>].
    #[arg(long, env = "DEPLOYD_PUBLIC_URL")]
    pub public_url: Option<String>,
    /// The engine's url as other engines on the shared store reach it [default:
    /// http://<listen>].
    #[arg(long, env = "DEPLOYD_PEER_URL")]
    pub peer_url: Option<String>,
    /// The conductor group whose nodes this engine runs the steps of [default: ""].
    #[arg(long, env = "DEPLOYD_CONDUCTOR_GROUP")]
    pub conductor_group: Option<String>,
    /// API connections open at once; more are refused with a 503 [default: 1000].
    #[arg(long, env = "DEPLOYD_MAX_CONNECTIONS")]
    pub max_connections: Option<usize>,
    /// Seconds to send request headers, and the idle limit of kept-alive connections [default: 30].
    #[arg(long, env = "DEPLOYD_HEADER_READ_TIMEOUT")]
    pub header_read_timeout: Option<u64>,
    /// A directory local image_source files may be in (repeat for more) [default: none but the images dir].
    #[arg(
        long = "file-url-allowed-path",
        env = "DEPLOYD_FILE_URL_ALLOWED_PATHS",
        value_delimiter = ','
    )]
    pub file_url_allowed_paths: Vec<PathBuf>,
    /// Directory of driver components loaded at start [default: <data-dir>/plugins].
    #[arg(long, env = "DEPLOYD_PLUGINS_DIR")]
    pub plugins_dir: Option<PathBuf>,
    /// The mode nodes boot in unless their instance or capabilities say [default: uefi].
    #[arg(long, env = "DEPLOYD_DEFAULT_BOOT_MODE", value_enum)]
    pub default_boot_mode: Option<crate::boot_mode::BootMode>,
    /// The engine's url as BMCs reach it, for virtual media ISOs [default: the public url].
    #[arg(long, env = "DEPLOYD_EXTERNAL_HTTP_URL")]
    pub external_http_url: Option<String>,
}

impl Config {
    pub fn from_file(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.into(),
            source,
        })?;
        toml::from_str(&text).map_err(|source| ConfigError::Parse {
            path: path.into(),
            source,
        })
    }

    /// Defaults, then the file named by `overrides.config`, then the overrides.
    pub fn load(overrides: &Overrides) -> Result<Config, ConfigError> {
        let mut config = match &overrides.config {
            Some(path) => Config::from_file(path)?,
            None => Config::default(),
        };
        let c = &mut config.conductor;
        let o = overrides;
        set(&mut config.listen, o.listen);
        set(&mut config.data_dir, o.data_dir.clone());
        set(&mut c.deploy_callback_timeout, o.deploy_callback_timeout);
        set(&mut c.clean_callback_timeout, o.clean_callback_timeout);
        set(&mut c.service_callback_timeout, o.service_callback_timeout);
        set(&mut c.rescue_callback_timeout, o.rescue_callback_timeout);
        set(&mut c.inspect_wait_timeout, o.inspect_wait_timeout);
        set(&mut c.deploy_stall_timeout, o.deploy_stall_timeout);
        set(&mut c.clean_stall_timeout, o.clean_stall_timeout);
        set(
            &mut c.check_provision_state_interval,
            o.check_provision_state_interval,
        );
        set(&mut c.automated_clean, o.automated_clean);
        set(&mut config.store.flush_every_ms, o.flush_every_ms);
        if o.store_url.is_some() {
            config.store.url = o.store_url.clone();
        }
        set(&mut config.api.auth_strategy, o.auth_strategy);
        if o.http_basic_auth_user_file.is_some() {
            config.api.http_basic_auth_user_file = o.http_basic_auth_user_file.clone();
        }
        if o.plugins_dir.is_some() {
            config.plugins.dir = o.plugins_dir.clone();
        }
        set(
            &mut config.api.ramdisk_heartbeat_timeout,
            o.ramdisk_heartbeat_timeout,
        );
        if o.images_dir.is_some() {
            config.api.images_dir = o.images_dir.clone();
        }
        if o.public_url.is_some() {
            config.api.public_url = o.public_url.clone();
        }
        if o.peer_url.is_some() {
            config.api.peer_url = o.peer_url.clone();
        }
        if let Some(group) = &o.conductor_group {
            config.conductor.conductor_group = group.clone();
        }
        config.conductor.conductor_group =
            crate::conductor_groups::normalise(&config.conductor.conductor_group)
                .map_err(ConfigError::Invalid)?;
        set(&mut config.deploy.default_boot_mode, o.default_boot_mode);
        if o.external_http_url.is_some() {
            config.deploy.external_http_url = o.external_http_url.clone();
        }
        set(&mut config.api.max_connections, o.max_connections);
        set(&mut config.api.header_read_timeout, o.header_read_timeout);
        if !o.file_url_allowed_paths.is_empty() {
            config.api.file_url_allowed_paths = o.file_url_allowed_paths.clone();
        }
        if !o.enabled_rescue_interfaces.is_empty() {
            config.interfaces.enabled_rescue_interfaces = o.enabled_rescue_interfaces.clone();
        }
        if !o.enabled_console_interfaces.is_empty() {
            config.interfaces.enabled_console_interfaces = o.enabled_console_interfaces.clone();
        }
        set(&mut config.console.port_range, o.console_port_range.clone());
        config.optional_interfaces()?;
        crate::console::PortRange::parse(&config.console.port_range)
            .map_err(ConfigError::Invalid)?;
        if config.api.max_connections == 0 || config.api.header_read_timeout == 0 {
            return Err(ConfigError::Invalid(
                "api.max_connections and api.header_read_timeout must be at least 1".into(),
            ));
        }
        Ok(config)
    }

    pub fn timeouts(&self) -> Timeouts {
        let c = &self.conductor;
        Timeouts {
            deploy_callback: Duration::from_secs(c.deploy_callback_timeout),
            clean_callback: Duration::from_secs(c.clean_callback_timeout),
            service_callback: Duration::from_secs(c.service_callback_timeout),
            rescue_callback: Duration::from_secs(c.rescue_callback_timeout),
            inspect_wait: Duration::from_secs(c.inspect_wait_timeout),
            deploy_stall: Duration::from_secs(c.deploy_stall_timeout),
            clean_stall: Duration::from_secs(c.clean_stall_timeout),
        }
    }

    /// Callback timeouts that would fail healthy flows: shorter than the longest interval
    /// agents are told to keep between heartbeats (`ramdisk_heartbeat_timeout` × 0.6, the
    /// top of IPA's 0.3–0.6 jitter), so a live agent can be silent past them.
    pub fn timeout_warnings(&self) -> Vec<String> {
        let c = &self.conductor;
        let longest = self.api.ramdisk_heartbeat_timeout as f64 * 0.6;
        [
            ("deploy_callback_timeout", c.deploy_callback_timeout),
            ("clean_callback_timeout", c.clean_callback_timeout),
            ("service_callback_timeout", c.service_callback_timeout),
            ("rescue_callback_timeout", c.rescue_callback_timeout),
        ]
        .into_iter()
        .filter(|&(_, t)| t > 0 && (t as f64) < longest)
        .map(|(name, t)| {
            format!(
                "[conductor] {name} = {t} s is shorter than the {longest:.0} s agents may wait between heartbeats (ramdisk_heartbeat_timeout = {} × 0.6): healthy flows will time out",
                self.api.ramdisk_heartbeat_timeout
            )
        })
        .collect()
    }

    pub fn store(&self) -> StoreConfig {
        StoreConfig {
            flush_every_ms: self.store.flush_every_ms,
            cache_capacity: self.store.cache_capacity_mb * 1024 * 1024,
            node_history: self.conductor.node_history,
            min_free: self.store.min_free_mb << 20,
            resume_free: self.store.resume_free_mb << 20,
            conductor_group: self.conductor.conductor_group.clone(),
        }
    }

    pub fn plugins_dir(&self) -> PathBuf {
        self.plugins
            .dir
            .clone()
            .unwrap_or_else(|| self.data_dir.join("plugins"))
    }

    pub fn connection_limits(&self) -> crate::api::http::listener::ConnectionLimits {
        crate::api::http::listener::ConnectionLimits {
            max_connections: self.api.max_connections,
            max_per_client: self
                .api
                .max_connections_per_client
                .unwrap_or(self.api.max_connections * 3 / 4)
                .clamp(1, self.api.max_connections),
            header_read_timeout: Duration::from_secs(self.api.header_read_timeout),
        }
    }

    pub fn images_dir(&self) -> PathBuf {
        self.api
            .images_dir
            .clone()
            .unwrap_or_else(|| self.data_dir.join("images"))
    }

    pub fn conductor(&self) -> ConductorSettings {
        let c = &self.conductor;
        ConductorSettings {
            automated_clean: c.automated_clean,
            lock_wait: Duration::from_secs(c.node_locked_retry_interval)
                * c.node_locked_retry_attempts.saturating_sub(1),
            optional: self.optional_interfaces().expect("checked when loaded"),
            rescue_hash: c.rescue_password_hash_algorithm,
            console: crate::console::Settings {
                ports: crate::console::PortRange::parse(&self.console.port_range)
                    .expect("checked when loaded"),
                address: self.console.socat_address,
                script_dir: self.data_dir.clone(),
                ..Default::default()
            },
        }
    }

    /// The optional interfaces `[interfaces]` enables.
    pub fn optional_interfaces(&self) -> Result<crate::hardware::Optional, ConfigError> {
        let i = &self.interfaces;
        crate::hardware::Optional::from_lists(
            &i.enabled_rescue_interfaces,
            &i.enabled_console_interfaces,
        )
        .map_err(ConfigError::Invalid)
    }

    pub fn sweeper(&self) -> SweeperConfig {
        SweeperConfig {
            check_interval: Duration::from_secs(self.conductor.check_provision_state_interval),
            ..SweeperConfig::default()
        }
    }
}

fn set<T>(slot: &mut T, value: Option<T>) {
    if let Some(v) = value {
        *slot = v;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_values_are_overridden_by_flags_and_the_rest_default() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("deployd.toml");
        std::fs::write(&path, "data_dir = \"/var/lib/deployd\"\n[conductor]\ndeploy_callback_timeout = 0\nclean_callback_timeout = 7\n").unwrap();
        let overrides = Overrides {
            config: Some(path),
            clean_callback_timeout: Some(9),
            ..Default::default()
        };
        let config = Config::load(&overrides).unwrap();
        assert_eq!(config.data_dir, PathBuf::from("/var/lib/deployd"));
        assert_eq!(config.conductor.deploy_callback_timeout, 0);
        assert_eq!(config.conductor.clean_callback_timeout, 9);
        assert_eq!(config.conductor.rescue_callback_timeout, 1800);
        assert_eq!(config.listen, Config::default().listen);
        assert_eq!(
            config
                .timeouts()
                .for_state(crate::state_machine::ProvisionState::WaitCallBack),
            None
        );
    }

    /// A callback timeout a live agent's heartbeat interval can exceed is warned of; 0
    /// (off) and a timeout at or past the longest interval are not.
    #[test]
    fn callback_timeouts_shorter_than_the_heartbeat_interval_are_warned_of() {
        assert!(Config::default().timeout_warnings().is_empty());
        let toml = "[conductor]\ndeploy_callback_timeout = 100\nclean_callback_timeout = 0\nrescue_callback_timeout = 180\n[api]\nramdisk_heartbeat_timeout = 300\n";
        let config: Config = toml::from_str(toml).unwrap();
        let warnings = config.timeout_warnings();
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(
            warnings[0].contains("deploy_callback_timeout = 100 s")
                && warnings[0].contains("180 s"),
            "{warnings:?}"
        );
    }

    /// Ironic's lock retry: attempts − 1 waits of the interval; one attempt waits not at all.
    #[test]
    fn the_lock_retry_becomes_the_conductors_wait() {
        assert_eq!(Config::default().conductor(), ConductorSettings::default());
        let toml = "[conductor]\nnode_locked_retry_attempts = 5\nnode_locked_retry_interval = 3\n";
        let config: Config = toml::from_str(toml).unwrap();
        assert_eq!(config.conductor().lock_wait, Duration::from_secs(12));
        for attempts in [0, 1] {
            let toml = format!("[conductor]\nnode_locked_retry_attempts = {attempts}\n");
            let config: Config = toml::from_str(&toml).unwrap();
            assert_eq!(config.conductor().lock_wait, Duration::ZERO);
        }
    }

    /// The store is sled unless a URL names the shared store; a flag (or its environment
    /// variable) wins over the file's.
    #[test]
    fn the_shared_store_is_named_by_url_in_the_file_or_by_flag() {
        assert_eq!(Config::default().store.url, None);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("deployd.toml");
        std::fs::write(&path, "[store]\nurl = \"postgres://deployd@db/fleet\"\n").unwrap();
        let from_file = Overrides {
            config: Some(path.clone()),
            ..Default::default()
        };
        let config = Config::load(&from_file).unwrap();
        assert_eq!(
            config.store.url.as_deref(),
            Some("postgres://deployd@db/fleet")
        );
        let flagged = Overrides {
            config: Some(path),
            store_url: Some("postgres://deployd@other/fleet".into()),
            ..Default::default()
        };
        let config = Config::load(&flagged).unwrap();
        assert_eq!(
            config.store.url.as_deref(),
            Some("postgres://deployd@other/fleet")
        );
    }

    #[test]
    fn both_spellings_of_http_basic_are_accepted() {
        use clap::ValueEnum;
        for spelling in ["http_basic", "http-basic"] {
            assert_eq!(
                AuthStrategy::from_str(spelling, false),
                Ok(AuthStrategy::HttpBasic)
            );
            let toml = format!("[api]\nauth_strategy = \"{spelling}\"\n");
            let config: Config = toml::from_str(&toml).unwrap();
            assert_eq!(config.api.auth_strategy, AuthStrategy::HttpBasic);
        }
    }

    #[test]
    fn unknown_keys_and_bad_values_are_clear_errors() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bad.toml");
        std::fs::write(&path, "[conductor]\ndeploy_callback_timout = 5\n").unwrap();
        let err = Config::from_file(&path).unwrap_err().to_string();
        assert!(
            err.contains("unknown field `deploy_callback_timout`"),
            "{err}"
        );
        std::fs::write(&path, "listen = \"not an address\"\n").unwrap();
        assert!(Config::from_file(&path).is_err());
        let missing = Config::from_file(&dir.path().join("nope.toml"))
            .unwrap_err()
            .to_string();
        assert!(missing.starts_with("cannot read config file"), "{missing}");
    }
}
