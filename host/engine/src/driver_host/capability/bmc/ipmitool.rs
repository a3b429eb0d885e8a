//! IPMI power and boot control by running the real `ipmitool` (Debian package `ipmitool`),
//! as Ironic's `ipmitool` power interface does. The password goes through the environment
//! (`-E`, `IPMI_PASSWORD`), never the command line, where `ps` would show it.

use std::path::PathBuf;
use std::time::Duration;

use tokio::process::Command;

use super::super::bindings::deployd::driver::bmc::{BootDevice, PowerState};
use crate::boot_mode::BootMode;

const TIMEOUT: Duration = Duration::from_secs(15);

pub struct Target {
    pub binary: PathBuf,
    pub address: String,
    pub port: String,
    pub username: String,
    pub password: String,
}

impl Target {
    /// The arguments that reach the BMC (the password is `IPMI_PASSWORD`'s, see `-E`).
    pub fn connection_args(&self) -> [&str; 12] {
        [
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
        ]
    }

    async fn ipmitool(&self, args: &[&str]) -> Result<String, String> {
        let mut cmd = Command::new(&self.binary);
        cmd.args(self.connection_args())
            .arg("2")
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

    /// Ends the BMC's Serial-over-LAN session, if one is open (before a console starts
    /// one, as Ironic's socat console does: a BMC has one).
    pub async fn deactivate_sol(&self) -> Result<(), String> {
        self.ipmitool(&["sol", "deactivate"]).await.map(|_| ())
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

    /// The boot device, with the boot flags' EFI bit for a UEFI node (IPMI sets the
    /// mode only with a device, as Ironic's ipmitool interface does).
    pub async fn set_boot_device(
        &self,
        device: BootDevice,
        persistent: bool,
        mode: BootMode,
    ) -> Result<(), String> {
        let args = bootdev_args(device, persistent, mode);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        self.ipmitool(&args).await.map(|_| ())
    }
}

/// `chassis bootdev <device> [options=persistent,efiboot]`.
fn bootdev_args(device: BootDevice, persistent: bool, mode: BootMode) -> Vec<String> {
    let dev = match device {
        BootDevice::Pxe => "pxe",
        BootDevice::Disk => "disk",
    };
    let options: Vec<&str> = [
        persistent.then_some("persistent"),
        (mode == BootMode::Uefi).then_some("efiboot"),
    ]
    .into_iter()
    .flatten()
    .collect();
    let mut args = vec!["chassis".to_owned(), "bootdev".to_owned(), dev.to_owned()];
    if !options.is_empty() {
        args.push(format!("options={}", options.join(",")));
    }
    args
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A UEFI node's boot flags carry the EFI bit (pyghmi's fakebmc does not keep it, so
    /// the command line is what can be checked).
    #[test]
    fn a_uefi_boot_device_sets_the_efi_boot_flag() {
        let args = |d, p, m| bootdev_args(d, p, m).join(" ");
        assert_eq!(
            args(BootDevice::Pxe, true, BootMode::Uefi),
            "chassis bootdev pxe options=persistent,efiboot"
        );
        assert_eq!(
            args(BootDevice::Disk, false, BootMode::Uefi),
            "chassis bootdev disk options=efiboot"
        );
        assert_eq!(
            args(BootDevice::Disk, true, BootMode::Bios),
            "chassis bootdev disk options=persistent"
        );
        assert_eq!(
            args(BootDevice::Pxe, false, BootMode::Bios),
            "chassis bootdev pxe"
        );
    }
}
