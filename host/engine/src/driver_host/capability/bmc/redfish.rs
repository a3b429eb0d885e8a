//! Redfish power and boot control (DMTF Redfish `ComputerSystem`), as sushy and Ironic's
//! `redfish` power interface use it.

use serde_json::{Value, json};

use super::super::bindings::deployd::driver::bmc::{BootDevice, PowerState};
use crate::boot_mode::BootMode;

pub struct Target {
    /// `http(s)://host:port/redfish/v1/Systems/<id>`
    pub(super) system: String,
    /// `http(s)://host:port`, which the BMC's `@odata.id` paths are relative to.
    origin: String,
    auth: Option<(String, String)>,
}

impl Target {
    pub fn new(
        address: &str,
        system_id: &str,
        user: Option<String>,
        password: Option<String>,
    ) -> Result<Target, String> {
        let address = address.trim_end_matches('/');
        if !(address.starts_with("http://") || address.starts_with("https://")) {
            return Err(format!(
                "redfish_address {address:?} must be an http(s) url"
            ));
        }
        let path = if system_id.starts_with('/') {
            system_id.to_owned()
        } else {
            format!("/redfish/v1/Systems/{system_id}")
        };
        let origin = match address
            .find("://")
            .and_then(|i| address[i + 3..].find('/').map(|j| i + 3 + j))
        {
            Some(end) => address[..end].to_owned(),
            None => address.to_owned(),
        };
        Ok(Target {
            system: format!("{address}{path}"),
            origin,
            auth: user.map(|u| (u, password.unwrap_or_default())),
        })
    }

    fn request(
        &self,
        http: &reqwest::Client,
        method: reqwest::Method,
        url: &str,
    ) -> reqwest::RequestBuilder {
        let r = http.request(method, url);
        match &self.auth {
            Some((u, p)) => r.basic_auth(u, Some(p)),
            None => r,
        }
    }

    /// A BMC path (`/redfish/v1/...`) as a url.
    pub(super) fn at(&self, path: &str) -> String {
        match path.starts_with('/') {
            true => format!("{}{path}", self.origin),
            false => path.to_owned(),
        }
    }

    pub(super) async fn get(
        &self,
        http: &reqwest::Client,
        url: &str,
        what: &str,
    ) -> Result<Value, String> {
        self.send(self.request(http, reqwest::Method::GET, url), what)
            .await
    }

    /// Sends `body` to a BMC path or url (a POST of an action, a PATCH of a resource).
    pub(super) async fn send_json(
        &self,
        http: &reqwest::Client,
        method: reqwest::Method,
        url: &str,
        body: Value,
        what: &str,
    ) -> Result<(), String> {
        let url = self.at(url);
        let r = self.request(http, method, &url).json(&body);
        self.send(r, what).await.map(drop)
    }

    async fn send(&self, r: reqwest::RequestBuilder, what: &str) -> Result<Value, String> {
        let response = r
            .send()
            .await
            .map_err(|e| format!("redfish {what}: cannot reach the BMC: {e}"))?;
        let status = response.status();
        let body = response.text().await.unwrap_or_default();
        if !status.is_success() {
            return Err(format!(
                "redfish {what}: BMC answered {status}: {}",
                body.chars().take(300).collect::<String>()
            ));
        }
        Ok(serde_json::from_str(&body).unwrap_or(Value::Null))
    }

    pub async fn get_power(&self, http: &reqwest::Client) -> Result<PowerState, String> {
        let system = self
            .send(
                self.request(http, reqwest::Method::GET, &self.system),
                "get power",
            )
            .await?;
        match system.get("PowerState").and_then(Value::as_str) {
            Some("On") | Some("PoweringOn") => Ok(PowerState::On),
            Some("Off") | Some("PoweringOff") => Ok(PowerState::Off),
            other => Err(format!(
                "redfish get power: unexpected PowerState {other:?}"
            )),
        }
    }

    async fn reset(&self, http: &reqwest::Client, kind: &str) -> Result<(), String> {
        let url = format!("{}/Actions/ComputerSystem.Reset", self.system);
        let r = self
            .request(http, reqwest::Method::POST, &url)
            .json(&json!({ "ResetType": kind }));
        self.send(r, kind).await.map(|_| ())
    }

    pub async fn set_power(&self, http: &reqwest::Client, state: PowerState) -> Result<(), String> {
        // BMCs differ on whether "On" while on is an error: ask first, as Ironic does.
        if self.get_power(http).await? == state {
            return Ok(());
        }
        self.reset(
            http,
            if state == PowerState::On {
                "On"
            } else {
                "ForceOff"
            },
        )
        .await
    }

    pub async fn reboot(&self, http: &reqwest::Client) -> Result<(), String> {
        match self.get_power(http).await? {
            PowerState::On => self.reset(http, "ForceRestart").await,
            PowerState::Off => self.reset(http, "On").await,
        }
    }

    /// Sets the boot device and, where the BMC shows a boot mode that is not `mode`, the
    /// mode with it, in one PATCH (as sushy's `set_system_boot_options`). A BMC that shows
    /// no `BootSourceOverrideMode` has no mode to set. Returns the mode the BMC has now,
    /// if it shows one.
    pub async fn set_boot_device(
        &self,
        http: &reqwest::Client,
        device: BootDevice,
        persistent: bool,
        mode: BootMode,
    ) -> Result<Option<BootMode>, String> {
        let target = match device {
            BootDevice::Pxe => "Pxe",
            BootDevice::Disk => "Hdd",
        };
        self.set_boot_target(http, target, persistent, mode).await
    }

    /// [`Target::set_boot_device`] with Redfish's own name of the device (`Cd` too).
    pub async fn set_boot_target(
        &self,
        http: &reqwest::Client,
        target: &str,
        persistent: bool,
        mode: BootMode,
    ) -> Result<Option<BootMode>, String> {
        let shown = self.get_boot_mode(http).await?;
        let enabled = if persistent { "Continuous" } else { "Once" };
        let mut boot =
            json!({ "BootSourceOverrideTarget": target, "BootSourceOverrideEnabled": enabled });
        if shown.is_some_and(|m| m != mode) {
            boot["BootSourceOverrideMode"] = json!(redfish_mode(mode));
        }
        self.patch_boot(http, boot, "set boot device").await?;
        Ok(shown.map(|_| mode))
    }

    /// Sets the boot mode alone (`PUT …/states/boot_mode`) and returns the mode the BMC
    /// reports afterwards.
    pub async fn set_boot_mode(
        &self,
        http: &reqwest::Client,
        mode: BootMode,
    ) -> Result<BootMode, String> {
        let boot = json!({ "BootSourceOverrideMode": redfish_mode(mode) });
        self.patch_boot(http, boot, "set boot mode").await?;
        self.get_boot_mode(http)
            .await?
            .ok_or_else(|| "redfish set boot mode: the BMC shows no BootSourceOverrideMode".into())
    }

    /// The boot mode the BMC shows (`Boot.BootSourceOverrideMode`), if it shows one.
    pub async fn get_boot_mode(&self, http: &reqwest::Client) -> Result<Option<BootMode>, String> {
        let system = self.get(http, &self.system, "get boot mode").await?;
        match system["Boot"]["BootSourceOverrideMode"].as_str() {
            None => Ok(None),
            Some("UEFI") => Ok(Some(BootMode::Uefi)),
            Some("Legacy") => Ok(Some(BootMode::Bios)),
            Some(other) => Err(format!(
                "redfish get boot mode: unexpected BootSourceOverrideMode {other:?}"
            )),
        }
    }

    async fn patch_boot(
        &self,
        http: &reqwest::Client,
        boot: Value,
        what: &str,
    ) -> Result<(), String> {
        self.send_json(
            http,
            reqwest::Method::PATCH,
            &self.system,
            json!({ "Boot": boot }),
            what,
        )
        .await
    }
}

/// Redfish's name of a boot mode.
fn redfish_mode(mode: BootMode) -> &'static str {
    match mode {
        BootMode::Uefi => "UEFI",
        BootMode::Bios => "Legacy",
    }
}
