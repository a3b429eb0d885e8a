//! A real PostgreSQL for the tests: Debian's server (`.ci/run` installs it) in a temporary
//! directory, on a free loopback port, with no Unix socket. One cluster per test binary,
//! started on first use; each test gets a database of its own.
//!
//! The server speaks TLS too, with a certificate for 127.0.0.1 signed by a CA made for the
//! cluster ([`Cluster::ca_file`]); a URL that does not ask for TLS connects in the clear.
//!
//! The server refuses to run as root, so under root (CI) it runs as nobody. It is started
//! by a small shell that holds the server's pid: when the test binary exits, the pipe to
//! that shell closes and it stops the server (a fast shutdown, by pid) and removes the
//! directory. No server outlives its tests.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{LazyLock, Mutex};
use std::time::Duration;

use crate::emulators::free_tcp_port;

/// The cluster's one superuser (trust authentication, loopback only).
const USER: &str = "deployd";
const NOBODY: u32 = 65534;

pub struct Cluster {
    port: u16,
    /// The CA that signed the server's certificate, PEM.
    ca: PathBuf,
    bin: PathBuf,
    /// The shell that stops the server when this pipe closes; also used to stop it early.
    keeper: Mutex<Child>,
    databases: AtomicU32,
    /// Its data, log and certificates.
    dir: PathBuf,
}

/// The test binary's cluster.
pub static CLUSTER: LazyLock<Cluster> = LazyLock::new(Cluster::start);

/// The newest installed server's `bin` folder (the lab's rule: the demo runs it too).
fn server_bin() -> PathBuf {
    deployd_lab::postgres::server_bin().unwrap_or_else(|e| panic!("{e}: run .ci/run once"))
}

fn as_server_user(command: &mut Command) -> &mut Command {
    if let Some(id) = deployd_lab::postgres::server_user() {
        use std::os::unix::process::CommandExt;
        command.uid(id).gid(id);
    }
    command
}

/// A CA of its own in `dir` (`other-ca.pem`), which signed nothing the cluster has: what a
/// client that trusts the wrong CA holds.
pub fn another_ca(dir: &Path) -> PathBuf {
    let key = rcgen::KeyPair::generate().expect("a CA key");
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("CA params");
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca = params.self_signed(&key).expect("a CA certificate");
    let path = dir.join("other-ca.pem");
    std::fs::write(&path, ca.pem()).expect("writing a CA");
    path
}

/// A CA and the server's certificate for 127.0.0.1 signed by it, in `dir`: `ca.pem`,
/// `server.crt` and `server.key` (the key the server's own, mode 0600, as it demands).
/// Returns the CA's path.
fn certificates(dir: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let ca_key = rcgen::KeyPair::generate().expect("a CA key");
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("CA params");
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "deployd test CA");
    let ca = ca_params
        .self_signed(&ca_key)
        .expect("the CA's certificate");
    let key = rcgen::KeyPair::generate().expect("a server key");
    let params = rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned()]).expect("params");
    let cert = params
        .signed_by(&key, &ca, &ca_key)
        .expect("the server's certificate");
    let write = |name: &str, text: String, mode: u32| {
        let path = dir.join(name);
        std::fs::write(&path, text).expect("writing a certificate");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).expect("chmod");
        if rustix::process::geteuid().is_root() {
            std::os::unix::fs::chown(&path, Some(NOBODY), Some(NOBODY)).expect("chown");
        }
        path
    };
    write("server.crt", cert.pem(), 0o644);
    write("server.key", key.serialize_pem(), 0o600);
    write("ca.pem", ca.pem(), 0o644)
}

impl Cluster {
    fn start() -> Cluster {
        let bin = server_bin();
        let dir = tempfile::Builder::new()
            .prefix("deployd-pg-")
            .tempdir()
            .expect("a temporary directory")
            .keep();
        if rustix::process::geteuid().is_root() {
            std::os::unix::fs::chown(&dir, Some(NOBODY), Some(NOBODY)).expect("chown");
        }
        let data = dir.join("data");
        let initdb = deployd_lab::postgres::initdb_args(USER);
        let init = as_server_user(Command::new(bin.join("initdb")).args(initdb))
            .arg(&data)
            .output()
            .expect("initdb runs");
        assert!(
            init.status.success(),
            "initdb failed: {}",
            String::from_utf8_lossy(&init.stderr)
        );
        let ca = certificates(&dir);
        let port = free_tcp_port();
        let keeper = as_server_user(Command::new("sh").args([
            "-c",
            r#"bin="$1"; data="$2"; port="$3"; dir="$4"
               start() {
                 "$bin/postgres" -D "$data" -p "$port" -c listen_addresses=127.0.0.1 \
                   -c unix_socket_directories= -c max_connections=300 -c fsync=on \
                   -c synchronous_commit=on -c ssl=on -c ssl_cert_file="$dir/server.crt" \
                   -c ssl_key_file="$dir/server.key" >>"$dir/server.log" 2>&1 &
                 pid=$!
               }
               start
               while read command && [ "$command" = crash ]; do
                 kill -QUIT "$pid"; wait "$pid"; start
               done
               kill -INT "$pid"; wait "$pid"; rm -rf "$dir""#,
            "keeper",
        ]))
        .arg(&bin)
        .arg(&data)
        .arg(port.to_string())
        .arg(&dir)
        .stdin(Stdio::piped())
        .spawn()
        .expect("the server starts");
        let cluster = Cluster {
            port,
            ca,
            bin,
            keeper: Mutex::new(keeper),
            databases: AtomicU32::new(0),
            dir: dir.clone(),
        };
        cluster.wait_ready(&dir);
        cluster
    }

    fn wait_ready(&self, dir: &Path) {
        for _ in 0..300 {
            let ready = Command::new(self.bin.join("pg_isready"))
                .args(["-q", "-h", "127.0.0.1", "-p", &self.port.to_string()])
                .status()
                .is_ok_and(|s| s.success());
            if ready {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!(
            "PostgreSQL did not start: {}",
            std::fs::read_to_string(dir.join("server.log")).unwrap_or_default()
        );
    }

    /// A new, empty database; its URL.
    pub fn database(&self) -> String {
        let name = format!(
            "t{}_{}",
            std::process::id(),
            self.databases.fetch_add(1, Ordering::SeqCst)
        );
        self.psql("postgres", &format!("CREATE DATABASE {name}"));
        self.url(&name)
    }

    /// The PEM file of the CA that signed the server's certificate.
    pub fn ca_file(&self) -> &Path {
        &self.ca
    }

    pub fn url(&self, database: &str) -> String {
        format!("postgres://{USER}@127.0.0.1:{}/{database}", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Runs `sql` in `database` with psql; panics with its words if it fails. Returns what
    /// it printed (unaligned, tuples only).
    pub fn psql(&self, database: &str, sql: &str) -> String {
        let out = self.run_psql(database, USER, sql);
        assert!(
            out.status.success(),
            "psql {sql:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// Runs `sql` in `database` as `role`; what it printed, or its error's words.
    pub fn psql_as(&self, database: &str, role: &str, sql: &str) -> String {
        let out = self.run_psql(database, role, sql);
        let text = match out.status.success() {
            true => out.stdout,
            false => out.stderr,
        };
        String::from_utf8_lossy(&text).trim().to_string()
    }

    fn run_psql(&self, database: &str, role: &str, sql: &str) -> std::process::Output {
        Command::new(self.bin.join("psql"))
            .args(["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1"])
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args(["-U", role, "-d", database, "-c", sql])
            .output()
            .expect("psql runs")
    }

    /// A cluster of the caller's own, for a test that stops its server (the test binary's
    /// [`CLUSTER`] serves every other test meanwhile).
    pub fn own() -> Cluster {
        Cluster::start()
    }

    /// Stops the server in immediate mode (SIGQUIT: no checkpoint, every connection cut,
    /// as a crash leaves it) and starts it again, recovering from its write-ahead log;
    /// returns once it answers.
    pub fn crash_and_restart(&self) {
        let mut keeper = self.keeper.lock().unwrap();
        let stdin = keeper.stdin.as_mut().expect("the server is running");
        stdin.write_all(b"crash\n").expect("telling the keeper");
        stdin.flush().expect("telling the keeper");
        drop(keeper);
        // The old server's port is free once it stopped: wait for it to go first.
        for _ in 0..100 {
            let down = !Command::new(self.bin.join("pg_isready"))
                .args(["-q", "-h", "127.0.0.1", "-p", &self.port.to_string()])
                .status()
                .is_ok_and(|s| s.success());
            if down {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.wait_ready(&self.dir);
    }

    /// Stops the server now (a fast shutdown); the cluster cannot be used after.
    pub fn stop(&self) {
        let mut keeper = self.keeper.lock().unwrap();
        if let Some(mut stdin) = keeper.stdin.take() {
            let _ = stdin.write_all(b"\n");
        }
        let _ = keeper.wait();
    }
}

/// The database's name in a URL from [`Cluster::database`].
pub fn database_of(url: &str) -> &str {
    url.rsplit('/').next().unwrap_or(url)
}
