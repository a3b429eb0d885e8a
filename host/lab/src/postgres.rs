//! A PostgreSQL cluster of its own, for the demo (`deployd demo --engines N`): Debian's
//! server (`apt-get install postgresql-15`), initialised in a temporary directory and
//! served on a free loopback port with no Unix socket, as nobody when this process is
//! root (the server refuses root). A fast shutdown, by pid, when dropped. The tests'
//! cluster (`deployd-test-support`) finds and runs the server the same way
//! ([`server_bin`], [`server_user`]).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::Context;
use tokio::process::{Child, Command};

/// The cluster's one role (trust authentication, loopback only).
const USER: &str = "deployd";
const NOBODY: u32 = 65534;

pub struct Postgres {
    child: Child,
    /// The demo's database, `postgres://deployd@127.0.0.1:<port>/deployd`.
    pub url: String,
}

impl Postgres {
    /// Initialises a cluster in `dir/postgres`, starts it and creates the demo's database.
    pub async fn start(dir: &Path) -> anyhow::Result<Postgres> {
        let bin = server_bin()?;
        let home = dir.join("postgres");
        std::fs::create_dir_all(&home)?;
        if server_user().is_some() {
            use std::os::unix::fs::PermissionsExt;
            // The server's user passes through the demo's directory to its own.
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o711))?;
            std::os::unix::fs::chown(&home, Some(NOBODY), Some(NOBODY))?;
        }
        let data = home.join("data");
        let init = as_server_user(Command::new(bin.join("initdb")).args(initdb_args(USER)))
            .arg(&data)
            .output()
            .await
            .context("running initdb")?;
        anyhow::ensure!(
            init.status.success(),
            "initdb failed: {}",
            String::from_utf8_lossy(&init.stderr)
        );
        let port = crate::machine::free_port();
        let log = std::fs::File::create(home.join("server.log"))?;
        let child = as_server_user(Command::new(bin.join("postgres")).arg("-D").arg(&data))
            .args(["-p", &port.to_string(), "-c", "listen_addresses=127.0.0.1"])
            .args([
                "-c",
                "unix_socket_directories=",
                "-c",
                "max_connections=200",
            ])
            .stdout(Stdio::null())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .context("starting postgres")?;
        let server = Postgres {
            child,
            url: format!("postgres://{USER}@127.0.0.1:{port}/deployd"),
        };
        for _ in 0..300 {
            let created = Command::new(bin.join("psql"))
                .args(["-X", "-q", "-h", "127.0.0.1", "-p", &port.to_string()])
                .args([
                    "-U",
                    USER,
                    "-d",
                    "postgres",
                    "-c",
                    "CREATE DATABASE deployd",
                ])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .await
                .is_ok_and(|s| s.success());
            if created {
                return Ok(server);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        anyhow::bail!(
            "PostgreSQL did not start: {}",
            std::fs::read_to_string(home.join("server.log")).unwrap_or_default()
        )
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        // SIGINT: a fast shutdown (the demo's data goes with its directory anyway).
        if let Some(pid) = self
            .child
            .id()
            .and_then(|p| rustix::process::Pid::from_raw(p as i32))
        {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::INT);
        }
    }
}

/// The newest installed server's `bin` folder.
pub fn server_bin() -> anyhow::Result<PathBuf> {
    let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("bin"))
        .filter(|bin| bin.join("postgres").exists())
        .collect();
    versions.sort();
    versions
        .pop()
        .context("PostgreSQL's server is not installed: apt-get install postgresql-15")
}

/// `initdb`'s arguments, up to the data directory: one superuser `user` that loopback
/// trusts, UTF-8 in the C locale, no sync (a scratch cluster).
pub fn initdb_args(user: &str) -> [&str; 7] {
    [
        "--no-sync",
        "--auth=trust",
        "--encoding=UTF8",
        "--locale=C",
        "-U",
        user,
        "-D",
    ]
}

/// The uid (and gid) the server runs as: nobody's when this process is root, since the
/// server refuses to run as root; `None` to run as this process does.
pub fn server_user() -> Option<u32> {
    rustix::process::geteuid().is_root().then_some(NOBODY)
}

fn as_server_user(command: &mut Command) -> &mut Command {
    if let Some(id) = server_user() {
        command.uid(id).gid(id);
    }
    command
}
