//! The kernel parameters a deploy ramdisk boots with, as Ironic's boot interfaces give
//! them, whichever way it boots: the engine's iPXE script ([`crate::boot_server`]) or a
//! virtual media ISO ([`crate::boot_iso`]).

use std::fmt::Write as _;

use serde_json::Value;

use crate::node::Node;
use crate::state_machine::ProvisionState;

/// `01-52-54-00-12-34-56`: a MAC as PXELINUX and ironic-python-agent read `BOOTIF`.
pub fn bootif(mac: &str) -> String {
    format!("01-{}", mac.replace(':', "-"))
}

/// The `driver_info` fields of the kernel and ramdisk a node boots now: in a rescue its
/// `rescue_kernel` and `rescue_ramdisk` when it names both (Ironic's), else the deploy
/// ones.
pub fn ramdisk_fields(node: &Node) -> (&'static str, &'static str) {
    let info = &node.body.driver_info;
    let named = |k: &str| {
        info.get(k)
            .and_then(Value::as_str)
            .is_some_and(|v| !v.is_empty())
    };
    let rescuing = matches!(
        node.state(),
        ProvisionState::Rescuing | ProvisionState::RescueWait
    );
    match rescuing && named("rescue_kernel") && named("rescue_ramdisk") {
        true => ("rescue_kernel", "rescue_ramdisk"),
        false => ("deploy_kernel", "deploy_ramdisk"),
    }
}

/// A ramdisk's kernel parameters, as Ironic's boot interfaces give them: `ipa-api-url`
/// (the engine at `base`), `BOOTIF` when the machine booted from a known interface, the
/// inspection collectors when it boots for in-band inspection, then the node's
/// `kernel_append_params` or the engine's (`default_append`).
pub fn agent_params(base: &str, node: &Node, mac: Option<&str>, default_append: &str) -> String {
    let own = node
        .body
        .driver_info
        .get("kernel_append_params")
        .and_then(Value::as_str);
    let append = own.unwrap_or(default_append);
    let mut params = format!("ipa-api-url={base}");
    if let Some(mac) = mac {
        let _ = write!(params, " BOOTIF={}", bootif(mac));
    }
    // Booted for in-band inspection: the agent posts its inventory first, as Ironic's
    // agent inspect interface asks of ironic-python-agent.
    if matches!(
        node.state(),
        ProvisionState::InspectWait | ProvisionState::Inspecting
    ) {
        params.push_str(" ipa-inspection-collectors=default");
    }
    if !append.is_empty() {
        let _ = write!(params, " {append}");
    }
    params
}

/// Ironic's DHCP-less deploy (API 1.66) for a ramdisk booted from virtual media: the
/// first IPv4 network of the node's `network_data` (OpenStack's `network_data.json`
/// shape) as the kernel's `ip=` parameter in dracut's syntax
/// (`ip=<address>::<gateway>:<netmask>::<interface>:none[:<dns>]`), with `BOOTIF` naming
/// the MAC of its link, so the ramdisk brings up that interface statically. `None`
/// where the node has no such network: the ramdisk asks DHCP.
pub fn static_network(node: &Node) -> Option<String> {
    let data = node.body.attrs.get("network_data")?;
    let network = data["networks"].as_array()?.iter().find(|n| {
        matches!(n["type"].as_str(), Some("ipv4"))
            && n["ip_address"].as_str().is_some_and(|a| !a.is_empty())
    })?;
    let address = network["ip_address"].as_str()?;
    let netmask = network["netmask"].as_str().unwrap_or("255.255.255.0");
    let gateway = network["routes"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|r| r["network"] == "0.0.0.0")
        .and_then(|r| r["gateway"].as_str())
        .unwrap_or_default();
    let mac = data["links"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|l| l["id"] == network["link"])
        .and_then(|l| l["ethernet_mac_address"].as_str());
    let dns = data["services"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|s| s["type"] == "dns")
        .and_then(|s| s["address"].as_str());
    let mut params = format!("ip={address}::{gateway}:{netmask}:::none");
    if let Some(dns) = dns {
        let _ = write!(params, ":{dns}");
    }
    if let Some(mac) = mac {
        let _ = write!(params, " BOOTIF={}", bootif(&mac.to_ascii_lowercase()));
    }
    Some(params)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(network_data: Option<Value>) -> Node {
        let attrs = match network_data {
            Some(data) => json!({ "network_data": data }),
            None => json!({}),
        };
        let body = serde_json::from_value(json!({
            "uuid": "1be26c0b-03f2-4d2e-ae87-c02d7f33c123", "name": null, "driver": "redfish",
            "driver_info": {}, "driver_internal_info": {}, "instance_info": {},
            "properties": {}, "extra": {}, "last_error": null, "power_state": null,
            "target_power_state": null, "maintenance": false, "maintenance_reason": null,
            "reservation": null, "interfaces": {}, "attrs": attrs,
            "created_at": "2026-01-01T00:00:00Z", "updated_at": null
        }))
        .unwrap();
        Node::waiting_for_tests(body)
    }

    #[test]
    fn network_data_becomes_a_static_address_on_its_links_interface() {
        let data = json!({
            "links": [{"id": "port0", "type": "phy", "ethernet_mac_address": "52:54:00:AB:CD:01"}],
            "networks": [
                {"id": "v6", "type": "ipv6", "link": "port0", "ip_address": "fd00::5"},
                {"id": "net0", "type": "ipv4", "link": "port0", "ip_address": "10.251.0.60",
                 "netmask": "255.255.255.0",
                 "routes": [{"network": "0.0.0.0", "netmask": "0.0.0.0", "gateway": "10.251.0.1"}]},
            ],
            "services": [{"type": "dns", "address": "10.251.0.53"}],
        });
        assert_eq!(
            static_network(&node(Some(data))).unwrap(),
            "ip=10.251.0.60::10.251.0.1:255.255.255.0:::none:10.251.0.53 BOOTIF=01-52-54-00-ab-cd-01"
        );
        let bare = json!({"networks": [{"type": "ipv4", "ip_address": "10.0.0.9", "netmask": "255.0.0.0"}]});
        assert_eq!(
            static_network(&node(Some(bare))).unwrap(),
            "ip=10.0.0.9:::255.0.0.0:::none"
        );
        assert_eq!(static_network(&node(None)), None);
        let dhcp = json!({"networks": [{"type": "ipv4_dhcp", "link": "port0"}]});
        assert_eq!(static_network(&node(Some(dhcp))), None);
    }
}
