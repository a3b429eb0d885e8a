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
//! | `deployd.expose_disk` | sync | lets the engine PUT an image to `/v1/disk` (pxe family) |

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde::Serialize;
use serde_json::{Value, json};
use tokio::sync::{Notify, watch};
use uuid::Uuid;

use super::disk;

/// The disk images are written to.
#[derive(Clone, Debug)]
pub struct DiskTarget {
    pub path: PathBuf,
    /// Bytes per second, to make writes last (demos, tests of long deploys).
    pub throttle: Option<u64>,
}

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct CommandResult {
    pub id: String,
    pub command_name: String,
    pub command_status: String,
    pub command_error: Option<Value>,
    pub command_result: Option<Value>,
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
    /// Bytes written by the current or last image write.
    pub written: Arc<AtomicU64>,
    running: AtomicBool,
    exposed: AtomicBool,
    finished: Notify,
    /// Set when a command ends, so the heartbeat loop reports it early (IPA's forced
    /// heartbeat); and when the engine asks for power off.
    pub command_ended: watch::Sender<u64>,
    pub powered_off: watch::Sender<bool>,
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
            written: Arc::default(),
            running: AtomicBool::new(false),
            exposed: AtomicBool::new(false),
            finished: Notify::new(),
            command_ended: watch::channel(0).0,
            powered_off: watch::channel(false).0,
        })
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
            if result.command_status != "RUNNING" {
                return Ok(result);
            }
            notified.await;
        }
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
        if !matches!(extension, "standby" | "deployd") {
            return Err(AgentError::UnknownExtension(extension.to_owned()));
        }
        if self.running.swap(true, Ordering::SeqCst) {
            return Err(AgentError::Busy);
        }
        let mut result = CommandResult {
            id: Uuid::new_v4().to_string(),
            command_name: command.to_owned(),
            command_status: "SUCCEEDED".into(),
            command_error: None,
            command_result: None,
        };
        let outcome = match (extension, command) {
            ("standby", "prepare_image") => match self.start_prepare_image(&result.id, params) {
                Ok(()) => {
                    result.command_status = "RUNNING".into();
                    Ok(None)
                }
                Err(e) => Err(e),
            },
            ("standby", "get_partition_uuids") => Ok(Some(json!({}))),
            ("standby", "sync") => std::fs::File::open(&self.disk.path)
                .and_then(|f| f.sync_all())
                .map(|()| Some(json!({"result": "sync: disk synced"})))
                .map_err(|e| {
                    AgentError::InvalidParams(format!(
                        "cannot sync {}: {e}",
                        self.disk.path.display()
                    ))
                }),
            ("standby", "power_off") => {
                self.powered_off.send_replace(true);
                Ok(Some(json!({"result": "power_off: powering off"})))
            }
            ("deployd", "expose_disk") => {
                self.exposed.store(true, Ordering::SeqCst);
                let token = self.token().unwrap_or_default();
                Ok(Some(
                    json!({"url": format!("{}/v1/disk?agent_token={token}", self.advertise)}),
                ))
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
        let running = result.command_status == "RUNNING";
        self.results.lock().unwrap().push(result.clone());
        if !running {
            self.end();
        }
        Ok(result)
    }

    fn end(&self) {
        self.running.store(false, Ordering::SeqCst);
        self.finished.notify_waiters();
        self.command_ended.send_modify(|n| *n += 1);
    }

    fn finish(&self, id: &str, outcome: Result<Value, String>) {
        if let Some(r) = self.results.lock().unwrap().iter_mut().find(|r| r.id == id) {
            match outcome {
                Ok(v) => {
                    r.command_status = "SUCCEEDED".into();
                    r.command_result = Some(v);
                }
                Err(e) => {
                    r.command_status = "FAILED".into();
                    r.command_error = Some(
                        json!({"type": "ImageWriteError", "code": 500, "message": "Error writing image", "details": e}),
                    );
                }
            }
        }
        self.end();
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
        let (me, id) = (self.clone(), id.to_owned());
        me.written.store(0, Ordering::SeqCst);
        tokio::spawn(async move {
            let outcome = me.write_image(&url, &algo, &expected).await.map(|()| {
                json!({"result": format!("prepare_image: image ({image_id}) written to device {}", me.disk.path.display())})
            });
            me.finish(&id, outcome);
        });
        Ok(())
    }

    async fn write_image(&self, url: &str, algo: &str, expected: &str) -> Result<(), String> {
        let response = self
            .http
            .get(url)
            .send()
            .await
            .map_err(|e| format!("cannot download {url}: {e}"))?;
        if !response.status().is_success() {
            return Err(format!("downloading {url}: {}", response.status()));
        }
        let actual = disk::write_stream(
            &self.disk.path,
            response.bytes_stream(),
            algo,
            &self.written,
            self.disk.throttle,
        )
        .await?;
        if actual != expected {
            return Err(format!(
                "image checksum mismatch: expected {algo} {expected}, got {actual}"
            ));
        }
        Ok(())
    }
}
