//! IPMI power and boot control by running the real `ipmitool` (Debian package `ipmitool`),
//! as Ironic's `ipmitool` power interface does. The password goes through the environment
//! (`-E`, `IPMI_PASSWORD`), never the command line, where `ps` would show it.

use std::path::PathBuf;
use std::time::Duration;

use tokio::process::Command;

use super::super::bindings::deployd::driver::bmc::{BootDevice, PowerState};

const TIMEOUT: Duration = Duration::from_secs(15);

pub struct Target {
    pub binary: PathBuf,
    pub address: String,
    pub port: String,
    pub username: String,
    pub password: String,
}

impl Target {
    async fn ipmitool(&self, args: &[&str]) -> Result<String, String> {
        let mut cmd = Command::new(&self.binary);
        cmd.args([
            "-I",
            "lanplus",
            "-H",
            &self.address,
            "-p",
            &self.port,
            "-U",
            &self.username,
            "-E",
            "-R",
            "3",
            "-N",
            "2",
        ])
        .args(args)
        .env("IPMI_PASSWORD", &self.password)
        .kill_on_drop(true);
        let what = args.join(" ");
        let output = tokio::time::timeout(TIMEOUT, cmd.output())
            .await
            .map_err(|_| {
                format!(
                    "ipmitool {what}: no answer from {} within {TIMEOUT:?}",
                    self.address
                )
            })?
            .map_err(|e| format!("cannot run {}: {e}", self.binary.display()))?;
        if !output.status.success() {
            let err = String::from_utf8_lossy(&output.stderr);
            return Err(format!("ipmitool {what} failed: {}", err.trim()));
        }
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    }

    pub async fn get_power(&self) -> Result<PowerState, String> {
        let out = self.ipmitool(&["chassis", "power", "status"]).await?;
        if out.contains("is on") {
            Ok(PowerState::On)
        } else if out.contains("is off") {
            Ok(PowerState::Off)
        } else {
            Err(format!(
                "ipmitool chassis power status: unexpected answer {:?}",
                out.trim()
            ))
        }
    }

    pub async fn set_power(&self, state: PowerState) -> Result<(), String> {
        let verb = if state == PowerState::On { "on" } else { "off" };
        self.ipmitool(&["chassis", "power", verb]).await.map(|_| ())
    }

    pub async fn reboot(&self) -> Result<(), String> {
        match self.get_power().await? {
            PowerState::On => self
                .ipmitool(&["chassis", "power", "reset"])
                .await
                .map(|_| ()),
            PowerState::Off => self.set_power(PowerState::On).await,
        }
    }

    pub async fn set_boot_device(
        &self,
        device: BootDevice,
        persistent: bool,
    ) -> Result<(), String> {
        let dev = match device {
            BootDevice::Pxe => "pxe",
            BootDevice::Disk => "disk",
        };
        let mut args = vec!["chassis", "bootdev", dev];
        if persistent {
            args.push("options=persistent");
        }
        self.ipmitool(&args).await.map(|_| ())
    }
}
