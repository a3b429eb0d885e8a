//! Redfish UEFI Secure Boot (DMTF `SecureBoot`, linked from the system), as sushy's
//! `system.secure_boot` reads and sets it for Ironic's `redfish` management:
//! `SecureBootEnable`, which the BMC applies at the machine's next boot.

use serde_json::{Value, json};

use super::redfish::Target;

impl Target {
    /// The url of the system's `SecureBoot` resource, if the BMC has one.
    async fn secure_boot_url(&self, http: &reqwest::Client) -> Result<Option<String>, String> {
        let system = self.get(http, &self.system, "get secure boot").await?;
        Ok(system["SecureBoot"]["@odata.id"]
            .as_str()
            .map(|path| self.at(path)))
    }

    /// Whether Secure Boot is enabled for the next boot (`SecureBootEnable`); `None`
    /// where the BMC has no Secure Boot to set.
    pub async fn get_secure_boot(&self, http: &reqwest::Client) -> Result<Option<bool>, String> {
        let Some(url) = self.secure_boot_url(http).await? else {
            return Ok(None);
        };
        let doc = self.get(http, &url, "get secure boot").await?;
        read(&doc).map(Some)
    }

    /// Enables or disables Secure Boot and returns what the BMC reports afterwards.
    pub async fn set_secure_boot(&self, http: &reqwest::Client, on: bool) -> Result<bool, String> {
        let url = self.secure_boot_url(http).await?.ok_or_else(|| {
            "redfish set secure boot: the BMC's system has no SecureBoot resource".to_owned()
        })?;
        self.send_json(
            http,
            reqwest::Method::PATCH,
            &url,
            json!({ "SecureBootEnable": on }),
            "set secure boot",
        )
        .await?;
        read(&self.get(http, &url, "get secure boot").await?)
    }
}

fn read(doc: &Value) -> Result<bool, String> {
    doc["SecureBootEnable"].as_bool().ok_or_else(|| {
        format!(
            "redfish get secure boot: the BMC shows no boolean SecureBootEnable: {}",
            doc.to_string().chars().take(200).collect::<String>()
        )
    })
}
