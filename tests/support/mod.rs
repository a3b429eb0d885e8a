//! Real processes for end-to-end tests: the `deployd` binary itself, on loopback.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub const BIN: &str = env!("CARGO_BIN_EXE_deployd");

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A `deployd serve` process; killed (SIGKILL) when dropped if still running.
pub struct Engine {
    pub child: Child,
    pub url: String,
    pub data_dir: PathBuf,
    pub log: PathBuf,
}

impl Engine {
    /// Starts `deployd serve` on a free port with `data_dir` and extra flags, and waits
    /// until it answers.
    pub fn start(data_dir: &Path, extra: &[&str]) -> Engine {
        let port = free_port();
        let log = data_dir.with_extension(format!("{port}.log"));
        let child = Command::new(BIN)
            .args([
                "serve",
                "--listen",
                &format!("127.0.0.1:{port}"),
                "--data-dir",
            ])
            .arg(data_dir)
            .args(extra)
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("starting deployd serve");
        let engine = Engine {
            child,
            url: format!("http://127.0.0.1:{port}"),
            data_dir: data_dir.to_path_buf(),
            log,
        };
        engine.wait_ready();
        engine
    }

    fn wait_ready(&self) {
        for _ in 0..600 {
            if std::net::TcpStream::connect(self.url.trim_start_matches("http://")).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!(
            "deployd did not start: {}",
            std::fs::read_to_string(&self.log).unwrap_or_default()
        );
    }

    /// SIGTERM, and waits for a clean exit.
    pub fn stop(mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let status = self.child.wait().unwrap();
        assert!(
            status.success(),
            "deployd exited with {status}: {}",
            std::fs::read_to_string(&self.log).unwrap_or_default()
        );
    }

    /// SIGKILL: no shutdown at all, as a crash.
    pub fn kill(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A blocking JSON call at API version 1.67; (status, body).
pub fn call(method: &str, url: &str, body: Option<serde_json::Value>) -> (u16, serde_json::Value) {
    let client = reqwest::blocking::Client::new();
    let mut r = client
        .request(method.parse().unwrap(), url)
        .header("X-OpenStack-Ironic-API-Version", "1.67");
    if let Some(b) = body {
        r = r.json(&b);
    }
    let response = r.send().unwrap();
    let status = response.status().as_u16();
    let text = response.text().unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(serde_json::Value::Null),
    )
}

/// The BMC emulators and the test virtualenv, shared with the library's tests.
#[path = "../../host/tests/common/emulators.rs"]
pub mod emulators;

#[allow(unused_imports)]
pub use emulators::venv_bin;
