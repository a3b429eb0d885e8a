//! Out-of-band inspection through Redfish, as Ironic's `redfish` inspect interface does
//! it: the system's processor and memory summaries, its processors' instruction set, its
//! ethernet interfaces' MACs, its disks (`SimpleStorage` devices and `Storage` drives)
//! and its boot mode, in the inventory shape ironic-python-agent reports, so the same
//! consumers read both.

use serde_json::{Value, json};

use super::redfish::Target;

/// Redfish `InstructionSet` → Ironic's `cpu_arch`.
fn architecture(instruction_set: &str) -> &'static str {
    match instruction_set {
        "x86-64" => "x86_64",
        "x86" => "i686",
        "ARM-A64" => "aarch64",
        "ARM-A32" => "arm",
        "IA-64" => "ia64",
        "MIPS32" => "mips",
        "MIPS64" => "mips64",
        _ => "",
    }
}

/// `aa:BB:cc…` with six hex pairs, lower-cased; anything else is not a MAC.
fn mac(text: &str) -> Option<String> {
    let parts: Vec<&str> = text.split([':', '-']).collect();
    let valid = parts.len() == 6
        && parts
            .iter()
            .all(|p| p.len() == 2 && p.chars().all(|c| c.is_ascii_hexdigit()));
    valid.then(|| parts.join(":").to_ascii_lowercase())
}

impl Target {
    /// The members of a collection the system links to under `field`. A collection the
    /// BMC does not have, or cannot serve (sushy-tools' fake driver answers 500 for some),
    /// is none: what inspection cannot do without is checked on the properties it yields.
    async fn members(
        &self,
        http: &reqwest::Client,
        doc: &Value,
        field: &str,
    ) -> Result<Vec<Value>, String> {
        let Some(link) = doc[field]["@odata.id"].as_str() else {
            return Ok(Vec::new());
        };
        let collection = match self.get(http, &self.at(link), "inspect").await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!("redfish inspection skips {field}: {e}");
                return Ok(Vec::new());
            }
        };
        let mut out = Vec::new();
        for member in collection["Members"].as_array().into_iter().flatten() {
            if let Some(id) = member["@odata.id"].as_str() {
                out.push(self.get(http, &self.at(id), "inspect").await?);
            }
        }
        Ok(out)
    }

    /// The node's inventory as the BMC reports it.
    pub async fn inventory(&self, http: &reqwest::Client) -> Result<Value, String> {
        let system = self.get(http, &self.system, "inspect").await?;
        let processors = self.members(http, &system, "Processors").await?;
        let arch = processors
            .iter()
            .find_map(|p| p["InstructionSet"].as_str())
            .map(architecture)
            .unwrap_or_default();
        let count = system["ProcessorSummary"]["Count"].as_u64().unwrap_or(0);
        let mut inventory = json!({"cpu": {"count": count, "architecture": arch}});
        if let Some(gib) = system["MemorySummary"]["TotalSystemMemoryGiB"].as_f64() {
            inventory["memory"] = json!({"physical_mb": (gib * 1024.0) as u64});
        }
        let mut disks = Vec::new();
        for storage in self.members(http, &system, "SimpleStorage").await? {
            for device in storage["Devices"].as_array().into_iter().flatten() {
                if let Some(size) = device["CapacityBytes"].as_u64() {
                    disks.push(json!({"name": device["Name"], "size": size}));
                }
            }
        }
        for storage in self.members(http, &system, "Storage").await? {
            for link in storage["Drives"].as_array().into_iter().flatten() {
                let Some(id) = link["@odata.id"].as_str() else {
                    continue;
                };
                let drive = self.get(http, &self.at(id), "inspect").await?;
                if let Some(size) = drive["CapacityBytes"].as_u64() {
                    disks.push(json!({"name": drive["Name"], "size": size}));
                }
            }
        }
        inventory["disks"] = Value::Array(disks);
        let mut interfaces = Vec::new();
        for nic in self.members(http, &system, "EthernetInterfaces").await? {
            if let Some(address) = nic["MACAddress"].as_str().and_then(mac) {
                interfaces.push(json!({"mac_address": address, "name": nic["Id"]}));
            }
        }
        inventory["interfaces"] = Value::Array(interfaces);
        let vendor = json!({
            "manufacturer": system["Manufacturer"],
            "product_name": system["Model"],
            "serial_number": system["SerialNumber"],
        });
        inventory["system_vendor"] = vendor;
        match system["Boot"]["BootSourceOverrideMode"].as_str() {
            Some("UEFI") => inventory["boot"] = json!({"current_boot_mode": "uefi"}),
            Some("Legacy") => inventory["boot"] = json!({"current_boot_mode": "bios"}),
            _ => {}
        }
        Ok(inventory)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn macs_are_normalised_and_others_refused() {
        assert_eq!(
            super::mac("52:54:00:AB:cd:01").as_deref(),
            Some("52:54:00:ab:cd:01")
        );
        assert_eq!(
            super::mac("52-54-00-ab-cd-01").as_deref(),
            Some("52:54:00:ab:cd:01")
        );
        for bad in [
            "",
            "52:54:00:ab:cd",
            "zz:54:00:ab:cd:01",
            "52:54:00:ab:cd:011",
        ] {
            assert_eq!(super::mac(bad), None, "{bad}");
        }
        assert_eq!(super::architecture("x86-64"), "x86_64");
        assert_eq!(super::architecture("PowerISA"), "");
    }
}
