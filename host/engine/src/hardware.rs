//! Ironic's hardware model over deployd's components.
//!
//! A node's `driver` is an Ironic *hardware type* (`ipmi`, `redfish`, `fake-hardware`), or
//! the name of a loaded component used as a type of its own (`agent_redfish`). A node also
//! has one *interface* per kind (`deploy_interface`, `power_interface`, …). Most kinds are
//! stored and checked only; two choose the component that runs the node's flows:
//!
//! | deploy interface | component family | | power interface | component power |
//! |---|---|---|---|---|
//! | `direct` | agent (the ramdisk agent writes) | | `ipmitool` | ipmitool |
//! | `iscsi` | pxe (the engine writes the disk the ramdisk exposes) | | `redfish` | redfish |
//! | `fake` | fake | | `fake` | fake |
//!
//! So `ipmi` + `direct` runs `agent_ipmitool`, `redfish` + `iscsi` runs `pxe_redfish` and
//! `fake-hardware` + `fake` runs `fake`. A deploy interface is enabled for a type only
//! while a component for it is loaded; the other kinds are enabled as the type supports
//! them. A node's default interface of a kind is the first enabled one, as in Ironic.

use crate::driver_host::capability::bindings::Family;
use crate::driver_host::{LoadedDriver, Registry};

/// The kinds of interface, in Ironic's order, with the field that holds each and the
/// microversion that introduced that field.
pub const KINDS: &[(&str, u32)] = &[
    ("bios", 40),
    ("boot", 31),
    ("console", 31),
    ("deploy", 31),
    ("firmware", 86),
    ("inspect", 31),
    ("management", 31),
    ("network", 20),
    ("power", 31),
    ("raid", 31),
    ("rescue", 38),
    ("storage", 33),
    ("vendor", 31),
];

/// `boot` → `boot_interface`.
pub fn field(kind: &str) -> String {
    format!("{kind}_interface")
}

pub use crate::node::Interfaces;

/// The hardware types deployd knows, besides each component's own name.
pub const TYPES: &[&str] = &["fake-hardware", "ipmi", "redfish"];

/// What a hardware type supports of a kind (deploy: before checking for components).
fn supported(hw: &str, kind: &str) -> &'static [&'static str] {
    let fake = hw == "fake-hardware";
    match kind {
        "deploy" if fake => &["fake", "direct", "iscsi"],
        "deploy" => &["direct", "iscsi"],
        "power" | "management" if fake => &["fake"],
        "power" | "management" if hw == "ipmi" => &["ipmitool"],
        "power" | "management" => &["redfish"],
        "boot" if fake => &["fake", "pxe", "ipxe"],
        "boot" if hw == "redfish" => &["pxe", "ipxe", "redfish-virtual-media"],
        "boot" => &["pxe", "ipxe"],
        "network" => &["noop", "flat"],
        "storage" if fake => &["noop", "fake"],
        "storage" => &["noop"],
        "console" if fake => &["fake", "no-console"],
        "inspect" if fake => &["fake", "no-inspect"],
        "raid" if fake => &["fake", "no-raid"],
        "rescue" if fake => &["fake", "no-rescue"],
        "vendor" if fake => &["fake", "no-vendor"],
        "bios" if fake => &["fake", "no-bios"],
        "firmware" if fake => &["fake", "no-firmware"],
        "console" => &["no-console"],
        "inspect" => &["no-inspect"],
        "raid" => &["no-raid"],
        "rescue" => &["no-rescue"],
        "vendor" => &["no-vendor"],
        "bios" => &["no-bios"],
        "firmware" => &["no-firmware"],
        _ => &[],
    }
}

fn family_of(deploy: &str) -> Option<Family> {
    match deploy {
        "direct" => Some(Family::Agent),
        "iscsi" => Some(Family::Pxe),
        "fake" => Some(Family::Fake),
        _ => None,
    }
}

pub fn deploy_interface_of(family: Family) -> &'static str {
    match family {
        Family::Agent => "direct",
        Family::Pxe => "iscsi",
        Family::Fake => "fake",
    }
}

/// Why a node's driver or interfaces are not acceptable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HardwareError {
    #[error(
        "No valid host was found. Reason: No conductor service registered which supports driver {0} for conductor group \"\"."
    )]
    UnknownType(String),
    #[error("{kind} interface implementation '{name}' is not supported by hardware type {hw}.")]
    Unsupported {
        kind: String,
        name: String,
        hw: String,
    },
    #[error(
        "No default value found for {kind} interface of hardware type {hw}: enabled {kind} interfaces are none{hint}."
    )]
    NoDefault {
        kind: String,
        hw: String,
        hint: String,
    },
}

/// The hardware types and interfaces, as the loaded components make them.
pub struct Hardware<'a> {
    registry: &'a Registry,
}

impl<'a> Hardware<'a> {
    pub fn new(registry: &'a Registry) -> Hardware<'a> {
        Hardware { registry }
    }

    /// Every type a node may name: the built-in ones and each loaded component.
    pub fn types(&self) -> Vec<String> {
        let mut all: Vec<String> = TYPES.iter().map(|s| s.to_string()).collect();
        all.extend(
            self.registry
                .list()
                .iter()
                .map(|d| d.description.name.clone()),
        );
        all
    }

    pub fn exists(&self, hw: &str) -> bool {
        TYPES.contains(&hw) || self.registry.get(hw).is_some()
    }

    /// The enabled interfaces of one kind of a type, the default first.
    pub fn enabled(&self, hw: &str, kind: &str) -> Vec<String> {
        if let Some(component) = (!TYPES.contains(&hw))
            .then(|| self.registry.get(hw))
            .flatten()
        {
            return own_type(&component, kind);
        }
        let all = supported(hw, kind);
        if kind != "deploy" {
            return all.iter().map(|s| s.to_string()).collect();
        }
        let power = supported(hw, "power");
        all.iter()
            .filter(|d| power.iter().any(|p| self.component_for(d, p).is_some()))
            .map(|s| s.to_string())
            .collect()
    }

    /// Fills in every kind's default and checks every given interface; `given` holds what
    /// the client set (from the node as it was, when its driver did not change).
    pub fn resolve(&self, hw: &str, given: &Interfaces) -> Result<Interfaces, HardwareError> {
        if !self.exists(hw) {
            return Err(HardwareError::UnknownType(hw.to_owned()));
        }
        let mut out = Interfaces::new();
        for (kind, _) in KINDS {
            let enabled = self.enabled(hw, kind);
            let name = match given.get(*kind) {
                Some(name) if enabled.contains(name) => name.clone(),
                Some(name) => {
                    return Err(HardwareError::Unsupported {
                        kind: kind.to_string(),
                        name: name.clone(),
                        hw: hw.to_owned(),
                    });
                }
                None => match enabled.first() {
                    Some(d) => d.clone(),
                    None if *kind == "deploy" => {
                        return Err(HardwareError::NoDefault {
                            kind: kind.to_string(),
                            hw: hw.to_owned(),
                            hint: " (load a component of the agent, pxe or fake family for its power interface)".into(),
                        });
                    }
                    None => continue,
                },
            };
            out.insert(kind.to_string(), name);
        }
        Ok(out)
    }

    /// The name of the component that runs a node's flows.
    pub fn component(&self, hw: &str, interfaces: &Interfaces) -> Option<String> {
        if !TYPES.contains(&hw) {
            return self.registry.get(hw).map(|d| d.description.name.clone());
        }
        let deploy = interfaces.get("deploy")?;
        let power = interfaces.get("power")?;
        self.component_for(deploy, power)
    }

    /// The loaded component of a deploy interface's family with this power backend; the
    /// conventional name (`agent_ipmitool`) first, then the others by name.
    fn component_for(&self, deploy: &str, power: &str) -> Option<String> {
        let family = family_of(deploy)?;
        let conventional = match family {
            Family::Agent => format!("agent_{power}"),
            Family::Pxe => format!("pxe_{power}"),
            Family::Fake => "fake".into(),
        };
        let mut matching: Vec<String> = self
            .registry
            .list()
            .iter()
            .filter(|d| d.description.family == family && d.description.power == power)
            .map(|d| d.description.name.clone())
            .collect();
        matching.sort_by_key(|n| (*n != conventional, n.clone()));
        matching.into_iter().next()
    }
}

/// The interfaces of a component used as a type of its own: its deploy family and power
/// backend, and for the other kinds what a real (non-fake) hardware type has.
fn own_type(d: &LoadedDriver, kind: &str) -> Vec<String> {
    match kind {
        "deploy" => vec![deploy_interface_of(d.description.family).to_owned()],
        "power" | "management" => vec![d.description.power.clone()],
        other => supported("ipmi", other)
            .iter()
            .map(|s| s.to_string())
            .collect(),
    }
}
