//! The agent's command API: what the engine asks the machine to do.
//!
//! Commands are named `<extension>.<command>` and run one at a time, as in
//! ironic-python-agent: a second one while the first runs is refused as busy (409). Each
//! result is kept in order, `{id, command_name, command_status, command_error,
//! command_result}`, with `command_name` the bare command, as IPA reports it.
//!
//! | command | kind | what it does |
//! |---|---|---|
//! | `standby.prepare_image` | async | streams `image_info.urls[0]` to the disk, verified |
//! | `standby.get_partition_uuids` | sync | `{}` (whole-disk images) |
//! | `standby.sync` | sync | flushes the disk |
//! | `standby.power_off` | async | marks the agent as powering off (the BMC does the rest) |
//! | `deploy.erase_devices_metadata` | sync | zeroes the disk's first and last MiB (cleaning) |
//! | `deployd.expose_disk` | sync | lets the engine PUT an image to `/v1/disk` (pxe family) |

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use std::time::Duration;

use futures_util::StreamExt;
use serde_json::{Value, json};
use tokio::sync::{Notify, watch};
use uuid::Uuid;

use super::{clean, config_drive, disk};
pub use deployd_wire::agent::{CommandResult, CommandStatus, Progress};

/// The disk images are written to: given, or chosen at start and again at each lookup by
/// the node's root device hints (see [`crate::root_disk`]); when no disk fits, why not,
/// which every command that needs the disk answers with.
#[derive(Clone, Debug)]
pub struct DiskTarget {
    chosen: Arc<std::sync::RwLock<Result<PathBuf, String>>>,
    /// Bytes per second, to make writes last (demos, tests of long deploys).
    pub throttle: Option<u64>,
}

impl DiskTarget {
    pub fn new(path: PathBuf, throttle: Option<u64>) -> DiskTarget {
        DiskTarget::chosen_as(Ok(path), throttle)
    }

    pub fn chosen_as(chosen: Result<PathBuf, String>, throttle: Option<u64>) -> DiskTarget {
        DiskTarget {
            chosen: Arc::new(std::sync::RwLock::new(chosen)),
            throttle,
        }
    }

    /// The disk, or why there is none.
    pub fn chosen(&self) -> Result<PathBuf, String> {
        self.chosen
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The disk (empty when there is none), to show or read.
    pub fn path(&self) -> PathBuf {
        self.chosen().unwrap_or_default()
    }

    pub fn choose(&self, chosen: Result<PathBuf, String>) {
        *self.chosen.write().unwrap_or_else(|p| p.into_inner()) = chosen;
    }
}

/// Why the agent refused a request (the HTTP status is Ironic's).
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("Token invalid.")]
    BadToken,
    #[error("Agent is busy")]
    Busy,
    #[error("Unknown extension: {0}")]
    UnknownExtension(String),
    #[error("Unknown command: {0}")]
    UnknownCommand(String),
    #[error("Invalid command parameters: {0}")]
    InvalidParams(String),
    #[error("Command {0} could not be found")]
    NotFound(String),
    #[error("The disk is not exposed; run deployd.expose_disk first")]
    NotExposed,
}

impl AgentError {
    pub fn status(&self) -> u16 {
        match self {
            AgentError::BadToken => 401,
            AgentError::Busy => 409,
            AgentError::UnknownExtension(_) | AgentError::NotFound(_) => 404,
            AgentError::UnknownCommand(_) | AgentError::InvalidParams(_) => 400,
            AgentError::NotExposed => 403,
        }
    }
}

pub struct CommandApi {
    token: Mutex<Option<String>>,
    pub disk: DiskTarget,
    /// This agent's own base url, as it advertises it (`http://ip:port`).
    pub advertise: String,
    http: reqwest::Client,
    results: Mutex<Vec<CommandResult>>,
    /// When each command ended, in order (name, time): the agent's own log, which tests
    /// read to check the order of events (a sync before a forced power-off).
    ended_at: Mutex<Vec<(String, tokio::time::Instant)>>,
    /// Bytes written by the current or last image write.
    pub written: Arc<AtomicU64>,
    /// The size of that image, when the server said (0 when unknown).
    pub total: Arc<AtomicU64>,
    running: AtomicBool,
    exposed: AtomicBool,
    finished: Notify,
    /// Set when a command ends, so the heartbeat loop reports it early (IPA's forced
    /// heartbeat); and when the engine asks for power off.
    pub command_ended: watch::Sender<u64>,
    /// Notified when an image transfer takes its first bytes (a heartbeat is due then).
    pub transfer_began: Arc<Notify>,
    pub powered_off: watch::Sender<bool>,
    /// Set once `rescue.finalize_rescue` wrote the rescue password's hash: the agent stops
    /// and its ramdisk sets up the `rescue` login (see [`crate::rescue`]).
    pub rescued: watch::Sender<bool>,
    /// Where `rescue.finalize_rescue` writes the hash (none: this agent does no rescue).
    rescue_file: std::sync::OnceLock<PathBuf>,
    /// The running image write, stopped with the agent (see [`CommandApi::abort`]).
    write: Mutex<Option<tokio::task::AbortHandle>>,
    /// Where efivarfs is, when the agent adds UEFI boot entries (see
    /// [`crate::uefi_boot`]).
    efivars: std::sync::OnceLock<PathBuf>,
}

impl CommandApi {
    pub fn new(disk: DiskTarget, advertise: String) -> Arc<CommandApi> {
        Arc::new(CommandApi {
            token: Mutex::new(None),
            disk,
            advertise,
            http: reqwest::Client::builder()
                .connect_timeout(std::time::Duration::from_secs(10))
                .build()
                .expect("client"),
            results: Mutex::default(),
            ended_at: Mutex::default(),
            written: Arc::default(),
            total: Arc::default(),
            running: AtomicBool::new(false),
            exposed: AtomicBool::new(false),
            finished: Notify::new(),
            command_ended: watch::channel(0).0,
            transfer_began: Arc::default(),
            powered_off: watch::channel(false).0,
            rescued: watch::channel(false).0,
            rescue_file: std::sync::OnceLock::new(),
            write: Mutex::default(),
            efivars: std::sync::OnceLock::new(),
        })
    }

    /// Has every written image get its UEFI boot entry where its loader needs one, in
    /// the firmware variables efivarfs shows at `efivars`.
    pub fn manage_uefi_boot(&self, efivars: PathBuf) {
        let _ = self.efivars.set(efivars);
    }

    /// Has `rescue.finalize_rescue` write the rescue password's hash to `file`.
    pub fn rescue_to(&self, file: PathBuf) {
        let _ = self.rescue_file.set(file);
    }

    /// The image's boot entry, if this agent manages them and the image needs one.
    async fn boot_entry(&self) -> Result<Option<String>, String> {
        let Some(efivars) = self.efivars.get().cloned() else {
            return Ok(None);
        };
        let disk = self.disk.chosen()?;
        tokio::task::spawn_blocking(move || crate::uefi_boot::after_write(&disk, &efivars))
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| format!("adding the image's UEFI boot entry: {e}"))
    }

    /// The token from lookup; commands are refused until there is one.
    pub fn set_token(&self, token: String) {
        *self.token.lock().unwrap() = Some(token);
    }

    pub fn token(&self) -> Option<String> {
        self.token.lock().unwrap().clone()
    }

    pub fn check_token(&self, given: Option<&str>) -> Result<(), AgentError> {
        match (self.token.lock().unwrap().as_deref(), given) {
            (Some(t), Some(g)) if t == g => Ok(()),
            _ => Err(AgentError::BadToken),
        }
    }

    pub fn list(&self) -> Vec<CommandResult> {
        self.results.lock().unwrap().clone()
    }

    pub fn get(&self, id: &str) -> Result<CommandResult, AgentError> {
        self.list()
            .into_iter()
            .find(|c| c.id == id)
            .ok_or_else(|| AgentError::NotFound(id.to_owned()))
    }

    /// Waits until command `id` is no longer running.
    pub async fn wait_for(&self, id: &str) -> Result<CommandResult, AgentError> {
        loop {
            let notified = self.finished.notified();
            let result = self.get(id)?;
            if !result.is_running() {
                return Ok(result);
            }
            notified.await;
        }
    }

    /// Stops a running image write: the agent is going away (its machine lost power).
    pub fn abort(&self) {
        if let Some(task) = self.write.lock().unwrap().take() {
            task.abort();
        }
    }

    /// One line for the heartbeat's `agent_status_message`: what the agent is doing, with
    /// the bytes written so far (the engine shows it as the node's progress).
    pub fn status_message(&self) -> String {
        let written = self.written.load(Ordering::Relaxed);
        let total = self.total.load(Ordering::Relaxed);
        let last = self.results.lock().unwrap().last().cloned();
        Progress {
            command: last.map(|c| (c.command_name, c.command_status)),
            written,
            total: (total > 0).then_some(total),
        }
        .to_string()
    }

    pub fn is_exposed(&self) -> bool {
        self.exposed.load(Ordering::SeqCst)
    }

    /// Runs a command; returns its result (RUNNING for an async one).
    pub fn execute(
        self: &Arc<Self>,
        name: &str,
        params: &Value,
    ) -> Result<CommandResult, AgentError> {
        let (extension, command) = name
            .split_once('.')
            .ok_or_else(|| AgentError::UnknownCommand(name.to_owned()))?;
        if !matches!(
            extension,
            "standby" | "deploy" | "clean" | "deployd" | "rescue"
        ) {
            return Err(AgentError::UnknownExtension(extension.to_owned()));
        }
        if self.running.swap(true, Ordering::SeqCst) {
            return Err(AgentError::Busy);
        }
        let mut result = CommandResult {
            id: Uuid::new_v4().to_string(),
            command_name: command.to_owned(),
            command_status: CommandStatus::Succeeded,
            command_error: None,
            command_result: None,
        };
        let outcome = match (extension, command) {
            ("standby", "prepare_image") => match self.start_prepare_image(&result.id, params) {
                Ok(()) => {
                    result.command_status = CommandStatus::Running;
                    Ok(None)
                }
                Err(e) => Err(e),
            },
            ("standby", "get_partition_uuids") => Ok(Some(json!({}))),
            ("standby", "sync") => self
                .disk
                .chosen()
                .and_then(|disk| {
                    std::fs::File::open(&disk)
                        .and_then(|f| f.sync_all())
                        .map_err(|e| format!("cannot sync {}: {e}", disk.display()))
                })
                .map(|()| Some(json!({"result": "sync: disk synced"})))
                .map_err(AgentError::InvalidParams),
            ("standby", "power_off") => {
                self.powered_off.send_replace(true);
                Ok(Some(json!({"result": "power_off: powering off"})))
            }
            ("deploy", "erase_devices_metadata") => self
                .disk
                .chosen()
                .and_then(|disk| disk::erase_metadata(&disk))
                .map(|n| Some(json!({"result": format!("erased {n} bytes of metadata")})))
                .map_err(AgentError::InvalidParams),
            ("clean", "get_clean_steps") => Ok(Some(clean::steps())),
            ("clean", "execute_clean_step") => match self
                .disk
                .chosen()
                .map_err(AgentError::InvalidParams)
                .and_then(|disk| clean::execute(&disk, params))
            {
                Ok(clean::Run::Done(r)) => Ok(Some(r)),
                Ok(clean::Run::Full(step)) => {
                    self.start_full_erase(&result.id, step);
                    result.command_status = CommandStatus::Running;
                    Ok(None)
                }
                Err(e) => Err(e),
            },
            ("rescue", "finalize_rescue") => {
                crate::rescue::finalize(self.rescue_file.get().map(PathBuf::as_path), params).map(
                    |()| {
                        self.rescued.send_replace(true);
                        None
                    },
                )
            }
            ("deployd", "expose_disk") => {
                self.exposed.store(true, Ordering::SeqCst);
                let token = self.token().unwrap_or_default();
                let device = self.disk.chosen().ok().map(|d| d.display().to_string());
                Ok(Some(json!({
                    "url": format!("{}/v1/disk?agent_token={token}", self.advertise),
                    "device": device,
                })))
            }
            _ => Err(AgentError::UnknownCommand(name.to_owned())),
        };
        let command_result = match outcome {
            Ok(r) => r,
            Err(e) => {
                self.running.store(false, Ordering::SeqCst);
                return Err(e);
            }
        };
        result.command_result = command_result;
        let running = result.is_running();
        self.results.lock().unwrap().push(result.clone());
        if !running {
            self.end(command);
        }
        Ok(result)
    }

    /// Zeroes the whole disk in the background (`erase_devices` with `full: true`).
    fn start_full_erase(self: &Arc<Self>, id: &str, step: Value) {
        let (me, id, path) = (self.clone(), id.to_owned(), self.disk.path());
        tokio::task::spawn_blocking(move || {
            let outcome = disk::erase_all(&path)
                .map(|n| json!({"clean_result": format!("zeroed {n} bytes"), "clean_step": step}));
            me.finish(&id, outcome);
        });
    }

    /// When the last command of this name ended.
    pub fn finished_at(&self, command: &str) -> Option<tokio::time::Instant> {
        let ended = self.ended_at.lock().unwrap();
        ended
            .iter()
            .rev()
            .find(|(n, _)| n == command)
            .map(|(_, t)| *t)
    }

    fn end(&self, command: &str) {
        self.ended_at
            .lock()
            .unwrap()
            .push((command.to_owned(), tokio::time::Instant::now()));
        self.running.store(false, Ordering::SeqCst);
        self.finished.notify_waiters();
        self.command_ended.send_modify(|n| *n += 1);
    }

    fn finish(&self, id: &str, outcome: Result<Value, String>) {
        let mut command = String::new();
        if let Some(r) = self.results.lock().unwrap().iter_mut().find(|r| r.id == id) {
            command.clone_from(&r.command_name);
            match outcome {
                Ok(v) => {
                    r.command_status = CommandStatus::Succeeded;
                    r.command_result = Some(v);
                }
                Err(e) => {
                    r.command_status = CommandStatus::Failed;
                    r.command_error = Some(
                        json!({"type": "ImageWriteError", "code": 500, "message": "Error writing image", "details": e}),
                    );
                }
            }
        }
        self.end(&command);
    }

    fn start_prepare_image(self: &Arc<Self>, id: &str, params: &Value) -> Result<(), AgentError> {
        let info = params
            .get("image_info")
            .ok_or_else(|| AgentError::InvalidParams("image_info is required".into()))?;
        let url = info
            .get("urls")
            .and_then(Value::as_array)
            .and_then(|u| u.first())
            .and_then(Value::as_str)
            .ok_or_else(|| {
                AgentError::InvalidParams("image_info.urls must be a non-empty list".into())
            })?
            .to_owned();
        let (algo, expected) = disk::expected_hash(info).map_err(AgentError::InvalidParams)?;
        let image_id = info
            .get("id")
            .and_then(Value::as_str)
            .unwrap_or("?")
            .to_owned();
        let configdrive = match params.get("configdrive") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) if !s.is_empty() => Some(s.clone()),
            Some(other) => {
                return Err(AgentError::InvalidParams(format!(
                    "configdrive must be a url or base64 text, not {other}"
                )));
            }
        };
        let (me, id) = (self.clone(), id.to_owned());
        me.written.store(0, Ordering::SeqCst);
        me.total.store(0, Ordering::SeqCst);
        let task = tokio::spawn(async move {
            let written = me.write_image(&url, &algo, &expected).await;
            let outcome = match (written, &configdrive) {
                (Ok(done), Some(drive)) => {
                    me.write_config_drive(drive).await.map(|p| (done, Some(p)))
                }
                (Ok(done), None) => Ok((done, None)),
                (Err(e), _) => Err(e),
            };
            let outcome = match outcome {
                Ok(done) => match me.boot_entry().await {
                    Ok(Some(entry)) => {
                        tracing::info!(%entry, "UEFI boot entry added");
                        Ok(done)
                    }
                    Ok(None) => Ok(done),
                    Err(e) => Err(e),
                },
                Err(e) => Err(e),
            };
            let outcome = outcome.map(|(done, placed)| {
                tracing::info!(
                    bytes_written = done.written,
                    bytes_zeroed = done.zeroed,
                    "image written"
                );
                let mut result = json!({
                    "result": format!("prepare_image: image ({image_id}) written to device {}", me.disk.path().display()),
                    "bytes_written": done.written,
                    "bytes_zeroed": done.zeroed,
                });
                if let Some(p) = placed {
                    result["configdrive"] = json!({"partition": p.number, "start": p.start, "bytes": p.bytes, "table": p.table});
                }
                result
            });
            me.finish(&id, outcome);
        });
        *self.write.lock().unwrap() = Some(task.abort_handle());
        Ok(())
    }

    /// Downloads `url` onto the disk, verified. A download that breaks (the image server
    /// restarted, the network dropped) resumes from the last byte written with a `Range`
    /// request, with jittered backoff, for up to [`RESUME_ATTEMPTS`] attempts.
    async fn write_image(
        &self,
        url: &str,
        algo: &str,
        expected: &str,
    ) -> Result<disk::Written, String> {
        let path = self.disk.chosen()?;
        let mut disk = disk::DiskWriter::open(&path, algo, &self.written, self.disk.throttle)
            .await?
            .announcing(self.transfer_began.clone());
        let mut failures = 0u32;
        while let Err(e) = self.download(url, &mut disk).await {
            let e = match e {
                Download::Broken(e) => e,
                Download::Fatal(e) => return Err(e),
            };
            failures += 1;
            if failures > RESUME_ATTEMPTS {
                return Err(format!("{e} (gave up after {RESUME_ATTEMPTS} attempts)"));
            }
            tracing::warn!(
                "the image download broke at byte {} ({e}); resuming",
                disk.offset()
            );
            let backoff = Duration::from_millis(250 << failures.min(4));
            tokio::time::sleep(backoff.mul_f64(rand::random_range(0.5..1.0))).await;
        }
        let done = disk.finish().await?;
        if done.digest != expected {
            return Err(format!(
                "image checksum mismatch: expected {algo} {expected}, got {}",
                done.digest
            ));
        }
        Ok(done)
    }

    /// Downloads the config drive and writes it to a new partition at the end of the disk.
    async fn write_config_drive(&self, given: &str) -> Result<config_drive::Placed, String> {
        let iso = config_drive::fetch(&self.http, given).await?;
        let disk = self.disk.chosen()?;
        let placed = tokio::task::spawn_blocking(move || config_drive::write(&disk, &iso))
            .await
            .map_err(|e| format!("writing the config drive: {e}"))??;
        tracing::info!(
            partition = placed.number,
            table = placed.table,
            "config drive written"
        );
        Ok(placed)
    }

    /// One download attempt from the disk's current offset.
    async fn download(&self, url: &str, disk: &mut disk::DiskWriter) -> Result<(), Download> {
        let offset = disk.offset();
        let mut request = self.http.get(url);
        if offset > 0 {
            request = request.header(reqwest::header::RANGE, format!("bytes={offset}-"));
        }
        let response = request
            .send()
            .await
            .map_err(|e| Download::Broken(format!("cannot download {url}: {e}")))?;
        let status = response.status();
        if status.is_server_error() {
            return Err(Download::Broken(format!("downloading {url}: {status}")));
        }
        if !status.is_success() {
            return Err(Download::Fatal(format!("downloading {url}: {status}")));
        }
        // A server that ignores the range sends it all again: skip what is on disk.
        let mut skip = if status == reqwest::StatusCode::PARTIAL_CONTENT {
            0
        } else {
            offset
        };
        if offset == 0 {
            self.total
                .store(response.content_length().unwrap_or(0), Ordering::SeqCst);
        }
        let mut body = response.bytes_stream();
        while let Some(chunk) = body.next().await {
            let mut chunk =
                chunk.map_err(|e| Download::Broken(format!("reading the image: {e}")))?;
            if skip > 0 {
                let n = skip.min(chunk.len() as u64);
                skip -= n;
                chunk = chunk.slice(n as usize..);
            }
            disk.write(&chunk).await.map_err(Download::Fatal)?;
        }
        if skip > 0 {
            return Err(Download::Broken(format!(
                "{url} ended before byte {offset}"
            )));
        }
        Ok(())
    }
}

/// How many times a broken download is resumed before the write fails (about two
/// minutes of backoff: long enough for an engine restart).
pub const RESUME_ATTEMPTS: u32 = 30;

/// Why a download attempt stopped.
enum Download {
    /// Worth resuming: the connection or the server failed.
    Broken(String),
    /// Not: the disk failed, or the server refused the image.
    Fatal(String),
}
