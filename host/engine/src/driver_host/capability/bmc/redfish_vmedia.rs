//! Redfish virtual media (DMTF `VirtualMedia`), as Ironic's `redfish` management does it
//! through sushy: the devices under the system (`Systems/<id>/VirtualMedia`, newer BMCs)
//! or under its first manager (`Managers/<id>/VirtualMedia`), a device chosen by its
//! `MediaTypes`, media ejected before an insert, `InsertMedia`/`EjectMedia` actions.

use serde_json::{Value, json};

use super::redfish::Target;

/// Ironic's device types and the Redfish media types that serve each.
pub fn media_types(device: &str) -> &'static [&'static str] {
    match device {
        "cdrom" => &["CD", "DVD"],
        "floppy" => &["Floppy"],
        "disk" => &["USBStick"],
        _ => &[],
    }
}

/// One virtual media device of the BMC.
struct Device {
    url: String,
    doc: Value,
}

impl Device {
    fn serves(&self, device: &str) -> bool {
        let types = self.doc["MediaTypes"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        media_types(device)
            .iter()
            .any(|t| types.iter().any(|m| m == t))
    }

    fn inserted(&self) -> bool {
        self.doc["Inserted"] == Value::Bool(true)
            || self.doc["Image"].as_str().is_some_and(|i| !i.is_empty())
    }

    fn action(&self, name: &str) -> String {
        self.doc["Actions"][format!("#VirtualMedia.{name}")]["target"]
            .as_str()
            .map(str::to_owned)
            .unwrap_or_else(|| format!("{}/Actions/VirtualMedia.{name}", self.url))
    }
}

impl Target {
    /// The virtual media devices, from the system or else its first manager.
    async fn devices(&self, http: &reqwest::Client) -> Result<Vec<Device>, String> {
        let system = self.get(http, &self.system, "virtual media").await?;
        let collection = match system["VirtualMedia"]["@odata.id"].as_str() {
            Some(c) => c.to_owned(),
            None => {
                let manager = system["Links"]["ManagedBy"][0]["@odata.id"]
                    .as_str()
                    .ok_or(
                        "redfish virtual media: the system has no VirtualMedia and no manager",
                    )?;
                let manager = self.get(http, &self.at(manager), "virtual media").await?;
                manager["VirtualMedia"]["@odata.id"]
                    .as_str()
                    .ok_or("redfish virtual media: neither the system nor its manager has VirtualMedia")?
                    .to_owned()
            }
        };
        let members = self
            .get(http, &self.at(&collection), "virtual media")
            .await?;
        let mut devices = Vec::new();
        for member in members["Members"].as_array().into_iter().flatten() {
            let Some(id) = member["@odata.id"].as_str() else {
                continue;
            };
            let url = self.at(id);
            let doc = self.get(http, &url, "virtual media").await?;
            devices.push(Device { url, doc });
        }
        Ok(devices)
    }

    /// Inserts `image` into the first device of its type, ejecting what any device of that
    /// type holds first (a stale image would otherwise be booted).
    pub async fn insert_media(
        &self,
        http: &reqwest::Client,
        device: &str,
        image: &str,
    ) -> Result<(), String> {
        let devices = self.devices(http).await?;
        let usable: Vec<&Device> = devices.iter().filter(|d| d.serves(device)).collect();
        let Some(first) = usable.first() else {
            return Err(format!(
                "No suitable virtual media device found for {device} (media types {:?})",
                media_types(device)
            ));
        };
        for d in usable.iter().filter(|d| d.inserted()) {
            self.eject(http, d).await?;
        }
        let body = json!({"Image": image, "Inserted": true, "WriteProtected": true});
        self.send_json(
            http,
            reqwest::Method::POST,
            &first.action("InsertMedia"),
            body,
            "insert media",
        )
        .await
    }

    /// Ejects the media of these device types (all devices when `None`).
    pub async fn eject_media(
        &self,
        http: &reqwest::Client,
        devices: Option<&[String]>,
    ) -> Result<(), String> {
        for d in self.devices(http).await? {
            let chosen = devices.is_none_or(|list| list.iter().any(|t| d.serves(t)));
            if chosen && d.inserted() {
                self.eject(http, &d).await?;
            }
        }
        Ok(())
    }

    async fn eject(&self, http: &reqwest::Client, d: &Device) -> Result<(), String> {
        let action = d.action("EjectMedia");
        self.send_json(
            http,
            reqwest::Method::POST,
            &action,
            json!({}),
            "eject media",
        )
        .await
    }

    /// The devices as Ironic's `get_virtual_media` lists them.
    pub async fn list_media(&self, http: &reqwest::Client) -> Result<Vec<Value>, String> {
        Ok(self
            .devices(http)
            .await?
            .into_iter()
            .map(|d| {
                json!({
                    "media_types": d.doc["MediaTypes"],
                    "inserted": d.doc["Inserted"],
                    "image": d.doc["Image"],
                })
            })
            .collect())
    }
}
