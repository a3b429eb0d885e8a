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
