//! Real peers for the tests, as processes on loopback: sushy-tools' Redfish emulator (fake
//! driver), pyghmi's `fakebmc` for IPMI, and in-process HTTP servers (agent, images).
//! `.ci/run` installs the Python tools into `target/test-venv`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

/// A child process killed when the test ends, and the directory of its own state, if it
/// has one (removed after it).
pub struct Process {
    child: std::process::Child,
    _state: Option<tempfile::TempDir>,
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The repository's top folder (the one with `rust-toolchain.toml`), whichever crate's
/// tests ask.
pub fn repo_root() -> PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .find(|dir| dir.join("rust-toolchain.toml").exists())
        .expect("the tests run inside the repository")
        .to_path_buf()
}

/// A tool from the test virtualenv (`DEPLOYD_TEST_VENV`, default `target/test-venv`).
pub fn venv_bin(name: &str) -> PathBuf {
    let venv = std::env::var_os("DEPLOYD_TEST_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target/test-venv"));
    let bin = venv.join("bin").join(name);
    assert!(
        bin.exists(),
        "{} is missing: run .ci/run once, or: python3 -m venv target/test-venv && target/test-venv/bin/pip install sushy-tools pyghmi python-ironicclient componentize-py==0.25.1",
        bin.display()
    );
    bin
}

/// The Python driver example (`plugins/examples/python`), built into `dir` with
/// componentize-py from the test virtualenv: an 18 MB component carrying CPython.
pub fn python_driver(dir: &std::path::Path) -> PathBuf {
    let root = repo_root();
    let wasm = dir.join("py_redfish.wasm");
    let out = Command::new(venv_bin("componentize-py"))
        .current_dir(root.join("plugins/examples/python"))
        .arg("-d")
        .arg(root.join("wit"))
        .args(["-w", "driver", "componentize", "driver", "-o"])
        .arg(&wasm)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "componentize-py: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    wasm
}

pub fn free_tcp_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub fn free_udp_port() -> u16 {
    std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Serves `router` on an ephemeral loopback port for the rest of the test.
pub async fn serve(router: axum::Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    addr
}

/// sushy-tools' Redfish emulator with its fake driver: (process, base url, system id).
pub async fn sushy() -> (Process, String, String) {
    let port = free_tcp_port();
    // The fake driver keeps its systems in a database under the temporary directory,
    // shared by every emulator of the machine: each test's has its own, or one test's
    // changes (a boot mode) would be another's starting state.
    let state = tempfile::tempdir().expect("a directory for the emulator's state");
    let child = Command::new(venv_bin("sushy-emulator"))
        .args(["--fake", "-i", "127.0.0.1", "-p", &port.to_string()])
        .env("TMPDIR", state.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("starting sushy-emulator");
    let process = Process {
        child,
        _state: Some(state),
    };
    let base = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::new();
    for _ in 0..300 {
        if let Ok(r) = http.get(format!("{base}/redfish/v1/Systems")).send().await
            && let Ok(body) = r.json::<serde_json::Value>().await
        {
            let id = body["Members"][0]["@odata.id"]
                .as_str()
                .unwrap()
                .rsplit('/')
                .next()
                .unwrap()
                .to_owned();
            return (process, base, id);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("sushy-emulator did not start on port {port}");
}

/// pyghmi's fake BMC (user admin, password password): (process, UDP port).
pub async fn fakebmc() -> (Process, u16) {
    let port = free_udp_port();
    let child = Command::new(venv_bin("fakebmc"))
        .args(["--port", &port.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("starting fakebmc");
    let process = Process {
        child,
        _state: None,
    };
    for _ in 0..100 {
        if ipmitool(port, &["chassis", "power", "status"]).is_some() {
            return (process, port);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("fakebmc did not answer on UDP port {port}");
}

/// Runs ipmitool against a fakebmc; its stdout, or None if it failed.
pub fn ipmitool(port: u16, args: &[&str]) -> Option<String> {
    let out = Command::new("ipmitool")
        .args([
            "-I",
            "lanplus",
            "-H",
            "127.0.0.1",
            "-p",
            &port.to_string(),
            "-U",
            "admin",
            "-P",
            "password",
            "-R",
            "1",
            "-N",
            "1",
        ])
        .args(args)
        .output()
        .expect("ipmitool is installed (apt-get install ipmitool)");
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}
