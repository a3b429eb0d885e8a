//! The machines' IPMI BMCs (`deployd lab --ipmi-python`): one process per machine of
//! `ipmi_bmc.py`, a BMC on pyghmi's BMC class (PyPI's `pyghmi`, as its `fakebmc`), on a
//! UDP port of the loopback, user `admin`, password `password`. Power and boot device go
//! to the machine's Redfish system on the lab's BMC, so ipmitool and Redfish act on one
//! machine; Serial-over-LAN (`ipmitool sol activate`, Ironic's `ipmitool-socat` console)
//! reaches the machine's serial port (a VM's socket, see [`crate::vm`]). What the port
//! printed while no session was active (its last 4 KiB) goes to the next session first,
//! as a console server replays recent output.

use std::path::{Path, PathBuf};

use anyhow::Context;
use tokio::io::AsyncBufReadExt;

/// The BMC's program, written beside the machines when the lab starts.
const SCRIPT: &str = include_str!("ipmi_bmc.py");

pub const USERNAME: &str = "admin";
pub const PASSWORD: &str = "password";

/// One machine's running BMC; stopped when dropped.
pub struct IpmiBmc {
    pub port: u16,
    _process: tokio::process::Child,
}

/// Writes the BMC's program into `dir`; its path.
pub fn write_script(dir: &Path) -> anyhow::Result<PathBuf> {
    let path = dir.join("ipmi_bmc.py");
    std::fs::write(&path, SCRIPT).with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
}

impl IpmiBmc {
    /// Starts a BMC with `python` (one that imports pyghmi) running `script`, for the
    /// Redfish system at `system`, bridging SOL to `serial`; returns once it listens.
    pub async fn start(
        python: &Path,
        script: &Path,
        system: &str,
        serial: &Path,
    ) -> anyhow::Result<IpmiBmc> {
        let port = free_udp_port()?;
        let mut process = tokio::process::Command::new(python)
            .arg(script)
            .args(["--port", &port.to_string(), "--system", system, "--serial"])
            .arg(serial)
            .args(["--username", USERNAME, "--password", PASSWORD])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting the IPMI BMC with {}", python.display()))?;
        let stdout = process.stdout.take().context("the BMC's stdout")?;
        let mut lines = tokio::io::BufReader::new(stdout).lines();
        let ready = tokio::time::timeout(std::time::Duration::from_secs(30), lines.next_line());
        match ready.await {
            Ok(Ok(Some(line))) if line.starts_with("ready") => {}
            other => anyhow::bail!(
                "the IPMI BMC for {system} did not start ({other:?}); does {} import pyghmi?",
                python.display()
            ),
        }
        Ok(IpmiBmc {
            port,
            _process: process,
        })
    }
}

/// A UDP port of the loopback nothing uses now.
fn free_udp_port() -> anyhow::Result<u16> {
    let socket = std::net::UdpSocket::bind("127.0.0.1:0")?;
    Ok(socket.local_addr()?.port())
}
