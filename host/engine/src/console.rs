//! Serial consoles, as Ironic's `ipmitool-socat` console interface gives them: a node's
//! console enabled is a `socat` process (Debian's) listening on a TCP port of the engine,
//! from `[console] port_range`, that runs `ipmitool … sol activate` for each connection
//! (one at a time, each ending the session the last one may have left: [`SOL_SCRIPT`]),
//! so whoever connects types into the machine's serial port through its BMC's
//! Serial-over-LAN. The node then shows `console_info`
//! `{"type": "socat", "url": "tcp://<address>:<port>"}`.
//!
//! A console lives as long as the engine that started it: it stops when disabled, when
//! its node is deleted, and with the engine (dropped, or killed: socat gets SIGKILL when
//! the engine dies). Enabled is kept in the node (`console_enabled`), so a restarted
//! engine starts its nodes' consoles again ([`crate::conductor::Conductor::restore_consoles`]).

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Mutex;

use serde_json::{Value, json};
use uuid::Uuid;

use crate::driver_host::capability::bmc::ipmitool::Target;

/// The TCP ports consoles listen on (Ironic's `[console] port_range`), both ends included.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PortRange {
    pub first: u16,
    pub last: u16,
}

impl PortRange {
    /// `first:last`, as Ironic writes it.
    pub fn parse(text: &str) -> Result<PortRange, String> {
        let bad =
            || format!("console port_range {text:?} is not first:last (two ports, first <= last)");
        let (first, last) = text.split_once(':').ok_or_else(bad)?;
        let first: u16 = first.trim().parse().map_err(|_| bad())?;
        let last: u16 = last.trim().parse().map_err(|_| bad())?;
        if first == 0 || first > last {
            return Err(bad());
        }
        Ok(PortRange { first, last })
    }
}

/// Where consoles listen, and the programs they run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    pub ports: PortRange,
    pub address: IpAddr,
    /// Seconds a connection may stay idle before socat closes it (Ironic's
    /// `terminal_timeout`).
    pub idle_timeout: u64,
    pub socat: PathBuf,
    /// Where the per-connection script ([`SOL_SCRIPT`]) is written: the engine's data
    /// directory, not a directory others may write to.
    pub script_dir: PathBuf,
}

/// What socat runs for each connection, with ipmitool's path and its arguments: it ends
/// the Serial-over-LAN session the BMC may still hold, then activates one. A session's
/// ipmitool, ended by socat when its client left, does not deactivate it, and the BMC
/// refused the next connection's ("SOL payload already active on another session") until
/// it timed the old one out. socat serves one connection at a time, so the session ended
/// is never a live one of this console. A script because socat's `EXEC` has no shell, and
/// its quoting cannot carry a shell command's own quotes.
pub const SOL_SCRIPT: &str = "#!/bin/sh
# Written by deployd (its console module): one Serial-over-LAN session per connection.
ipmitool=$1
shift
\"$ipmitool\" \"$@\" sol deactivate >/dev/null 2>&1
exec \"$ipmitool\" \"$@\" sol activate
";

/// [`SOL_SCRIPT`] in `dir`, written (through a rename, so a running socat never reads it
/// half written) unless it is there already; its path.
fn sol_script(dir: &std::path::Path) -> std::io::Result<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join("console-sol.sh");
    if std::fs::read(&path).is_ok_and(|held| held == SOL_SCRIPT.as_bytes()) {
        return Ok(path);
    }
    std::fs::create_dir_all(dir)?;
    let fresh = dir.join(format!("console-sol.sh.{}", std::process::id()));
    std::fs::write(&fresh, SOL_SCRIPT)?;
    std::fs::set_permissions(&fresh, std::fs::Permissions::from_mode(0o700))?;
    std::fs::rename(&fresh, &path)?;
    Ok(path)
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            ports: PortRange {
                first: 10000,
                last: 20000,
            },
            address: [127, 0, 0, 1].into(),
            idle_timeout: 600,
            socat: "socat".into(),
            // The default data directory (`Config::data_dir`), which sets it.
            script_dir: "deployd-data".into(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConsoleError {
    #[error(
        "Unable to allocate a free port on host {address} for the console of node {node}: every port of [console] port_range {first}:{last} is taken"
    )]
    NoFreePort {
        node: Uuid,
        address: IpAddr,
        first: u16,
        last: u16,
    },
    #[error("Failed to start the console of node {node}: {reason}")]
    Start { node: Uuid, reason: String },
}

/// A console's socat, and the port it listens on. socat leads a process group of its own,
/// with the socat it forks for a connection and that one's ipmitool: the console stops
/// as a whole, sessions included.
struct Running {
    port: u16,
    socat: tokio::process::Child,
}

impl Running {
    /// Kills the console's processes; returns once socat is gone (its port closed).
    async fn stop(mut self) {
        self.kill_group();
        let _ = self.socat.wait().await;
    }

    fn kill_group(&self) {
        let group = self
            .socat
            .id()
            .and_then(|id| rustix::process::Pid::from_raw(id as i32));
        if let Some(group) = group {
            let _ = rustix::process::kill_process_group(group, rustix::process::Signal::KILL);
        }
    }
}

impl Drop for Running {
    /// An engine dropped without stopping its consoles leaves none running.
    fn drop(&mut self) {
        self.kill_group();
    }
}

/// The consoles this engine runs, one per node at most.
pub struct Consoles {
    settings: Settings,
    running: Mutex<HashMap<Uuid, Running>>,
}

impl Consoles {
    pub fn new(settings: Settings) -> Consoles {
        Consoles {
            settings,
            running: Mutex::default(),
        }
    }

    /// Starts the node's console on a free port (its running one stops first); the port.
    pub async fn start(&self, node: Uuid, bmc: &Target) -> Result<u16, ConsoleError> {
        self.stop(node).await;
        // The BMC has one Serial-over-LAN session: one left open (a console this engine
        // lost, another tool) would refuse ours. Nothing open is no failure.
        let _ = bmc.deactivate_sol().await;
        let failed = |reason: String| ConsoleError::Start { node, reason };
        let port = self.free_port(node)?;
        let s = &self.settings;
        let script = sol_script(&s.script_dir)
            .map_err(|e| failed(format!("cannot write its script: {e}")))?;
        let exec = format!(
            "EXEC:\"{} {} {} 2\",pty,stderr",
            script.display(),
            bmc.binary.display(),
            bmc.connection_args().join(" ")
        );
        let mut command = tokio::process::Command::new(&s.socat);
        command
            .arg(format!("-T{}", s.idle_timeout))
            .arg(format!(
                "TCP-LISTEN:{port},bind={},reuseaddr,fork,max-children=1",
                s.address
            ))
            .arg(exec)
            .env("IPMI_PASSWORD", &bmc.password)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        die_with_parent(&mut command);
        let socat = command
            .spawn()
            .map_err(|e| failed(format!("cannot run {}: {e}", s.socat.display())))?;
        // Listening, or why not: socat exits at once when it cannot bind.
        let mut running = Running { port, socat };
        if let Err(reason) = listening(&mut running.socat, s.address, port).await {
            running.stop().await;
            return Err(failed(reason));
        }
        // What socat says from now on goes to the engine's log (a full pipe would stall it).
        if let Some(stderr) = running.socat.stderr.take() {
            tokio::spawn(async move {
                use tokio::io::AsyncBufReadExt;
                let mut lines = tokio::io::BufReader::new(stderr).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    tracing::warn!(%node, "console: {line}");
                }
            });
        }
        self.running.lock().unwrap().insert(node, running);
        tracing::info!(%node, port, "console started");
        Ok(port)
    }

    /// Stops the node's console, if it runs: its port is closed when this returns.
    pub async fn stop(&self, node: Uuid) {
        let running = self.running.lock().unwrap().remove(&node);
        if let Some(running) = running {
            running.stop().await;
            tracing::info!(%node, "console stopped");
        }
    }

    /// Stops every console.
    pub async fn stop_all(&self) {
        let all: Vec<Running> = self
            .running
            .lock()
            .unwrap()
            .drain()
            .map(|(_, r)| r)
            .collect();
        for running in all {
            running.stop().await;
        }
    }

    /// The node's `console_info` while its console runs.
    pub fn info(&self, node: Uuid) -> Option<Value> {
        let endpoint = self.endpoint(node)?;
        Some(json!({"type": "socat", "url": format!("tcp://{endpoint}")}))
    }

    /// Where the node's console listens, while it runs.
    pub fn endpoint(&self, node: Uuid) -> Option<std::net::SocketAddr> {
        let port = self.running.lock().unwrap().get(&node)?.port;
        Some((self.settings.address, port).into())
    }

    /// A port of the range no console of this engine holds and nothing else listens on.
    fn free_port(&self, node: Uuid) -> Result<u16, ConsoleError> {
        let held: Vec<u16> = self
            .running
            .lock()
            .unwrap()
            .values()
            .map(|r| r.port)
            .collect();
        let PortRange { first, last } = self.settings.ports;
        (first..=last)
            .filter(|p| !held.contains(p))
            .find(|p| std::net::TcpListener::bind((self.settings.address, *p)).is_ok())
            .ok_or(ConsoleError::NoFreePort {
                node,
                address: self.settings.address,
                first,
                last,
            })
    }
}

/// Waits until socat listens on `port` (up to 5 s); its own words if it exited.
async fn listening(
    socat: &mut tokio::process::Child,
    address: IpAddr,
    port: u16,
) -> Result<(), String> {
    for _ in 0..100 {
        if let Ok(Some(status)) = socat.try_wait() {
            let mut err = String::new();
            if let Some(mut stderr) = socat.stderr.take() {
                use tokio::io::AsyncReadExt;
                let _ = stderr.read_to_string(&mut err).await;
            }
            return Err(format!("socat exited ({status}): {}", err.trim()));
        }
        if std::net::TcpListener::bind((address, port)).is_err() {
            return Ok(());
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    Err(format!("socat did not listen on port {port} within 5 s"))
}

/// Has the child get SIGKILL when the engine's thread that started it dies, so a killed
/// engine leaves no console listening (tokio's workers live as long as its runtime).
fn die_with_parent(command: &mut tokio::process::Command) {
    #[allow(unsafe_code)]
    // SAFETY: between fork and exec the closure only makes one system call (prctl),
    // which is async-signal-safe, and allocates nothing.
    unsafe {
        command.pre_exec(|| {
            rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))
                .map_err(std::io::Error::from)
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_port_range_is_first_colon_last() {
        assert_eq!(
            PortRange::parse("10000:20000"),
            Ok(PortRange {
                first: 10000,
                last: 20000
            })
        );
        assert_eq!(PortRange::parse("5:5"), Ok(PortRange { first: 5, last: 5 }));
        for bad in ["", "10000", "2:1", "0:4", "1:70000", "a:b"] {
            assert!(PortRange::parse(bad).is_err(), "{bad}");
        }
    }
}
