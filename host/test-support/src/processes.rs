//! Real processes for end-to-end tests: the `deployd` binary itself, on loopback.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::LazyLock;
use std::time::Duration;

use crate::emulators::free_tcp_port;
use crate::netns::Netns;

/// The `deployd` binary the running test binary was built with: cargo puts a package's
/// binaries beside the folder (`deps/`) that holds its test binaries, and builds them
/// before it runs the tests (a library cannot read `CARGO_BIN_EXE_deployd`, which cargo
/// sets only for the package's own tests).
pub static BIN: LazyLock<PathBuf> = LazyLock::new(|| {
    let test = std::env::current_exe().expect("the test binary's path");
    let bin = test
        .parent()
        .and_then(Path::parent)
        .expect("the test binary is in target/<profile>/deps")
        .join("deployd");
    assert!(
        bin.exists(),
        "{} is missing: the end-to-end tests are the deployd package's (cargo test -p deployd)",
        bin.display()
    );
    bin
});

/// Whether `GET /` on `addr` is answered by a deployd (Ironic's version headers).
fn answers_as_deployd(addr: &str) -> bool {
    use std::io::{Read, Write};
    let Ok(mut stream) = std::net::TcpStream::connect(addr) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    if stream
        .write_all(b"GET / HTTP/1.0\r\nHost: test\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    String::from_utf8_lossy(&answer)
        .to_ascii_lowercase()
        .contains("x-openstack-ironic-api-maximum-version")
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
        Engine::start_on(free_tcp_port(), data_dir, extra)
    }

    /// `deployd serve` on `data_dir`, or, if it exits instead of answering, its log (a
    /// refusal to start).
    pub fn try_start(data_dir: &Path, extra: &[&str]) -> Result<Engine, String> {
        let listen = format!("127.0.0.1:{}", free_tcp_port());
        let url = format!("http://{listen}");
        Engine::spawn(Command::new(&*BIN), &listen, url, data_dir, extra).wait_ready()
    }

    /// [`Engine::start`] on a given port (a restart where agents expect it).
    pub fn start_on(port: u16, data_dir: &Path, extra: &[&str]) -> Engine {
        let listen = format!("127.0.0.1:{port}");
        let url = format!("http://{listen}");
        Engine::launch(Command::new(&*BIN), &listen, url, data_dir, extra)
    }

    /// [`Engine::start_on`] inside a network namespace, listening on all its addresses;
    /// the test calls it over the namespace's management address.
    pub fn start_in(ns: &Netns, port: u16, data_dir: &Path, extra: &[&str]) -> Engine {
        let url = format!("http://{}:{port}", ns.management);
        let listen = format!("0.0.0.0:{port}");
        Engine::launch(ns.command(&*BIN), &listen, url, data_dir, extra)
    }

    fn launch(
        command: Command,
        listen: &str,
        url: String,
        data_dir: &Path,
        extra: &[&str],
    ) -> Engine {
        Engine::spawn(command, listen, url, data_dir, extra)
            .wait_ready()
            .unwrap_or_else(|log| panic!("deployd did not start: {log}"))
    }

    fn spawn(
        mut command: Command,
        listen: &str,
        url: String,
        data_dir: &Path,
        extra: &[&str],
    ) -> Engine {
        let port = listen.rsplit(':').next().unwrap_or_default();
        let log = data_dir.with_extension(format!("{port}.log"));
        let child = command
            .args(["serve", "--listen", listen, "--data-dir"])
            .arg(data_dir)
            .args(extra)
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("starting deployd serve");
        Engine {
            child,
            url,
            data_dir: data_dir.to_path_buf(),
            log,
        }
    }

    /// Waits until this engine answers, or its log if it exits first. A bare connect is
    /// not enough: a port taken from `free_port` may meanwhile be bound by another test's
    /// process (an agent), so the answer must be a deployd's (it carries the microversion
    /// headers).
    fn wait_ready(mut self) -> Result<Engine, String> {
        for _ in 0..600 {
            if answers_as_deployd(self.url.trim_start_matches("http://")) {
                return Ok(self);
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!("exited with {status}: {}", self.log_text()));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Err(format!("not answering after 60 s: {}", self.log_text()))
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

    /// SIGSTOP: the process keeps its sockets and answers nothing, as a machine that
    /// froze (or a process starved of CPU) does, until [`Engine::resume`].
    pub fn pause(&self) {
        self.signal("-STOP");
    }

    /// SIGCONT after [`Engine::pause`].
    pub fn resume(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([signal, &self.child.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success(), "kill {signal} {}", self.child.id());
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
        // A failed test shows what the engine said last.
        if std::thread::panicking() {
            let log = self.log_text();
            let tail: Vec<_> = log.lines().rev().take(150).collect();
            eprintln!("--- the engine's log, last {} lines ---", tail.len());
            for line in tail.iter().rev() {
                eprintln!("{line}");
            }
        }
    }
}

thread_local! {
    /// The operator's credentials for [`call`] on this test's thread, if the engine
    /// under test runs `http_basic`.
    static CREDENTIALS: std::cell::RefCell<Option<(String, String)>> = const { std::cell::RefCell::new(None) };
}

/// Makes [`call`] (and the helpers built on it) authenticate as `user` on this thread.
pub fn authenticate_as(user: &str, password: &str) {
    CREDENTIALS.with(|c| *c.borrow_mut() = Some((user.to_owned(), password.to_owned())));
}

/// A blocking JSON call through `deployd-client` (no retries: tests see every 409);
/// (status, body).
pub fn call(method: &str, url: &str, body: Option<serde_json::Value>) -> (u16, serde_json::Value) {
    let origin = reqwest::Url::parse(url)
        .unwrap()
        .origin()
        .ascii_serialization();
    let path = &url[origin.len()..];
    let mut client = deployd_client::Client::new(&origin).with_retries(0, Duration::ZERO);
    if let Some((user, password)) = CREDENTIALS.with(|c| c.borrow().clone()) {
        client = client.with_basic_auth(&user, &password);
    }
    let answer = deployd_client::blocking::Client::new(client)
        .answer(method.parse().unwrap(), path, body.as_ref())
        .unwrap();
    (answer.status, answer.body)
}

/// A `deployd lab` process: simulated machines behind its Redfish BMC, each booting a
/// `deployd agent` process when powered on from the network. Stopped when dropped.
pub struct Lab {
    pub child: Child,
    /// One enrollment per machine: name, mac, disk, redfish_address, redfish_system_id.
    pub machines: Vec<serde_json::Value>,
    pub bmc: String,
}

impl Lab {
    pub fn start(dir: &Path, machines: usize, api_url: &str, throttle: &str) -> Lab {
        Lab::start_with(dir, machines, api_url, &["--throttle", throttle])
    }

    /// One QEMU virtual machine with a 4 GiB disk (`deployd lab --vm`) and `more` of the
    /// lab's flags; the engine at `api_url` must serve guests at
    /// `--public-url http://10.0.2.100:<its port>`.
    pub fn start_vm(dir: &Path, api_url: &str, more: &[&str]) -> Lab {
        let disk = (4u64 << 30).to_string();
        let mut extra = vec!["--vm", "--disk-size", &disk];
        extra.extend(more);
        Lab::start_with(dir, 1, api_url, &extra)
    }

    pub fn start_with(dir: &Path, machines: usize, api_url: &str, extra: &[&str]) -> Lab {
        Lab::launch(
            Command::new(&*BIN),
            "127.0.0.1:0",
            dir,
            machines,
            api_url,
            extra,
        )
    }

    /// One VM whose NIC is the namespace's tap, its BMC on the namespace's management
    /// address (the engine inside and the test outside both reach it there). It has three
    /// disks: 8 GiB (serial `machine-000-disk0`, the one it boots), then 5 GiB, which is
    /// the one an agent picks without root device hints, then 7 GiB.
    pub fn start_vm_in(ns: &Netns, dir: &Path, api_url: &str, more: &[&str]) -> Lab {
        let gib = |n: u64| (n << 30).to_string();
        let (disk, second, third) = (gib(8), gib(5), gib(7));
        let mut extra = vec![
            "--vm",
            "--disk-size",
            &disk,
            "--extra-disk-size",
            &second,
            "--extra-disk-size",
            &third,
            "--tap",
            &ns.tap,
        ];
        extra.extend(more);
        let listen = format!("{}:0", ns.management);
        Lab::launch(ns.command(&*BIN), &listen, dir, 1, api_url, &extra)
    }

    fn launch(
        mut command: Command,
        listen: &str,
        dir: &Path,
        machines: usize,
        api_url: &str,
        extra: &[&str],
    ) -> Lab {
        use std::io::BufRead;
        let mut child = command
            .args(["lab", "--machines", &machines.to_string(), "--dir"])
            .arg(dir)
            .args(["--listen", listen, "--api-url", api_url])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(dir.with_extension("lab.log")).unwrap())
            .spawn()
            .expect("starting deployd lab");
        let stdout = std::io::BufReader::new(child.stdout.take().unwrap());
        let machines: Vec<serde_json::Value> = stdout
            .lines()
            .take(machines)
            .map(|l| serde_json::from_str(&l.unwrap()).unwrap())
            .collect();
        let bmc = machines[0]["redfish_address"].as_str().unwrap().to_owned();
        Lab {
            child,
            machines,
            bmc,
        }
    }

    /// The lab's view of a machine: power, boot, agent pid, agent boots.
    pub fn machine(&self, name: &str) -> serde_json::Value {
        let all: Vec<serde_json::Value> =
            reqwest::blocking::get(format!("{}/lab/machines", self.bmc))
                .unwrap()
                .json()
                .unwrap();
        all.into_iter().find(|m| m["name"] == name).unwrap()
    }

    /// SIGKILLs a machine's agent process (the machine stays on, hung).
    pub fn kill_agent(&self, name: &str) {
        let pid = self.machine(name)["agent_pid"]
            .as_u64()
            .expect("an agent runs");
        let status = Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        // SIGTERM: the lab powers its machines off (kills their agents) and exits.
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
    }
}

/// A file of `bytes` pseudo-random bytes; its sha256.
pub fn image(path: &Path, bytes: usize) -> String {
    use sha2::Digest;
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15 ^ bytes as u64;
    let data: Vec<u8> = (0..bytes)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect();
    std::fs::write(path, &data).unwrap();
    hex::encode(sha2::Sha256::digest(&data))
}

pub fn sha256_of(path: &Path) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(std::fs::read(path).unwrap()))
}

/// Polls a node until `done(node)` or `secs` pass; returns the node.
pub fn wait_node(
    url: &str,
    node: &str,
    secs: u64,
    done: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    loop {
        let (_, n) = call("GET", &format!("{url}/v1/nodes/{node}"), None);
        if done(&n) {
            return n;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "node {node} did not get there in {secs} s: state {} last_error {}",
            n["provision_state"],
            n["last_error"]
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Asks for a provision target, retrying while the node is locked (409).
pub fn provision(url: &str, node: &str, target: &str) {
    for _ in 0..100 {
        let (status, body) = call(
            "PUT",
            &format!("{url}/v1/nodes/{node}/states/provision"),
            Some(serde_json::json!({ "target": target })),
        );
        match status {
            202 => return,
            409 => std::thread::sleep(Duration::from_millis(100)),
            _ => panic!("{target} on {node}: {status} {body}"),
        }
    }
    panic!("{node} stayed locked");
}

/// Walks a node through manage and provide to available.
pub fn make_available(url: &str, node: &str) {
    provision(url, node, "manage");
    wait_node(url, node, 30, |n| n["provision_state"] == "manageable");
    provision(url, node, "provide");
    wait_node(url, node, 30, |n| n["provision_state"] == "available");
}

/// [`make_available`] without cleaning, for tests that start an agent by hand only to
/// deploy (an emulator's power-on boots nothing): `automated_clean` is off for the
/// provide, then back to the engine's default, so an undeploy cleans.
pub fn make_available_without_cleaning(url: &str, node: &str) {
    let path = format!("{url}/v1/nodes/{node}");
    let set = |op: serde_json::Value| {
        let (status, body) = call("PATCH", &path, Some(op));
        assert_eq!(status, 200, "{body}");
    };
    set(serde_json::json!([{"op": "add", "path": "/automated_clean", "value": false}]));
    make_available(url, node);
    set(serde_json::json!([{"op": "remove", "path": "/automated_clean"}]));
}

/// Enrolls `node` (a `POST /v1/nodes` body) with a port of `mac`, and makes it available
/// without cleaning: its uuid.
pub fn enroll_available(url: &str, node: serde_json::Value, mac: &serde_json::Value) -> String {
    let (status, node) = call("POST", &format!("{url}/v1/nodes"), Some(node));
    assert_eq!(status, 201, "{node}");
    let node = node["uuid"].as_str().unwrap().to_owned();
    let port = serde_json::json!({"node_uuid": node, "address": mac});
    let (status, doc) = call("POST", &format!("{url}/v1/ports"), Some(port));
    assert_eq!(status, 201, "{doc}");
    make_available_without_cleaning(url, &node);
    node
}

/// Runs `command` to its end; its output. A failure stops the test with its stderr.
pub fn run(command: &mut Command) -> std::process::Output {
    let out = command
        .output()
        .unwrap_or_else(|e| panic!("running {command:?}: {e}"));
    assert!(
        out.status.success(),
        "{command:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// A qcow2 of the raw disk `raw`, by the real `qemu-img` (Debian's qemu-utils).
pub fn to_qcow2(raw: &Path, qcow2: &Path) {
    run(Command::new("qemu-img")
        .args(["convert", "-f", "raw", "-O", "qcow2"])
        .arg(raw)
        .arg(qcow2));
}
