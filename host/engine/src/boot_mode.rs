//! A node's boot mode, as Ironic decides it (`boot_mode_utils.get_boot_mode`): the
//! instance's `instance_info.deploy_boot_mode`, else the `boot_mode` capability of its
//! `properties.capabilities`, else the engine's `[deploy] default_boot_mode` (`uefi`, as
//! Ironic's since its Yoga release). The BMC is told it with every boot device (see
//! [`crate::driver_host::capability::bmc`]), and the node's `boot_mode` shows the mode the
//! BMC was last told or reported.

use serde::Deserialize;
use serde_json::Value;

use crate::node::JsonMap;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum BootMode {
    #[default]
    Uefi,
    Bios,
}

impl BootMode {
    /// Ironic's name (`uefi`, `bios`).
    pub fn as_str(self) -> &'static str {
        match self {
            BootMode::Uefi => "uefi",
            BootMode::Bios => "bios",
        }
    }

    pub fn parse(text: &str) -> Option<BootMode> {
        match text {
            "uefi" => Some(BootMode::Uefi),
            "bios" => Some(BootMode::Bios),
            _ => None,
        }
    }
}

/// The value of `key` in a node's capabilities: Ironic keeps them as `"k1:v1,k2:v2"`
/// (a JSON object is read too, as Ironic's utilities accept one).
pub fn capability<'a>(properties: &'a JsonMap, key: &str) -> Option<&'a str> {
    match properties.get("capabilities")? {
        Value::String(text) => text
            .split(',')
            .filter_map(|pair| pair.split_once(':'))
            .find(|(k, _)| k.trim() == key)
            .map(|(_, v)| v.trim()),
        Value::Object(map) => map.get(key)?.as_str(),
        _ => None,
    }
}

/// The mode a node with these `instance_info` and `properties` boots in (see the
/// module's doc); a value that names no mode is passed over.
pub fn wanted(instance_info: &JsonMap, properties: &JsonMap, default: BootMode) -> BootMode {
    instance_info
        .get("deploy_boot_mode")
        .and_then(Value::as_str)
        .and_then(BootMode::parse)
        .or_else(|| capability(properties, "boot_mode").and_then(BootMode::parse))
        .unwrap_or(default)
}

/// Whether the node's instance asks for UEFI Secure Boot, as Ironic reads it
/// (`boot_mode_utils.is_secure_boot_requested`): the `secure_boot` capability of
/// `instance_info.capabilities`, else of `properties.capabilities`. `None` where neither
/// says: the BMC's setting is left as it is.
pub fn secure_boot_wanted(instance_info: &JsonMap, properties: &JsonMap) -> Option<bool> {
    let parse = |v: &str| match v.to_ascii_lowercase().as_str() {
        "true" => Some(true),
        "false" => Some(false),
        _ => None,
    };
    capability(instance_info, "secure_boot")
        .and_then(parse)
        .or_else(|| capability(properties, "secure_boot").and_then(parse))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn mode(properties: Value, instance_info: Value, default: BootMode) -> BootMode {
        let map = |v: Value| v.as_object().unwrap().clone();
        wanted(&map(instance_info), &map(properties), default)
    }

    #[test]
    fn the_instance_wins_then_the_capability_then_the_default() {
        let bios = json!({"capabilities": "cpu_vt:true, boot_mode:bios"});
        assert_eq!(mode(json!({}), json!({}), BootMode::Uefi), BootMode::Uefi);
        assert_eq!(mode(json!({}), json!({}), BootMode::Bios), BootMode::Bios);
        assert_eq!(
            mode(bios.clone(), json!({}), BootMode::Uefi),
            BootMode::Bios
        );
        let instance = json!({"deploy_boot_mode": "uefi"});
        assert_eq!(mode(bios, instance, BootMode::Bios), BootMode::Uefi);
        let object = json!({"capabilities": {"boot_mode": "bios"}});
        assert_eq!(mode(object, json!({}), BootMode::Uefi), BootMode::Bios);
        let unknown = json!({"capabilities": "boot_mode:dos"});
        assert_eq!(mode(unknown, json!({}), BootMode::Uefi), BootMode::Uefi);
    }

    #[test]
    fn secure_boot_is_asked_by_the_instance_then_the_node() {
        let map = |v: Value| v.as_object().unwrap().clone();
        let wanted = |i: Value, p: Value| secure_boot_wanted(&map(i), &map(p));
        assert_eq!(wanted(json!({}), json!({})), None);
        let node_on = json!({"capabilities": "boot_mode:uefi,secure_boot:true"});
        assert_eq!(wanted(json!({}), node_on.clone()), Some(true));
        let instance_off = json!({"capabilities": {"secure_boot": "False"}});
        assert_eq!(wanted(instance_off, node_on), Some(false));
        let nonsense = json!({"capabilities": "secure_boot:maybe"});
        assert_eq!(wanted(json!({}), nonsense), None);
    }
}
