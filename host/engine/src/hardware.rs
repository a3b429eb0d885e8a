//! Ironic's hardware model over deployd's components.
//!
//! A node's `driver` is an Ironic *hardware type* (`ipmi`, `redfish`, `fake-hardware`), or
//! the name of a loaded component used as a type of its own (`agent_redfish`). A node also
//! has one *interface* per kind (`deploy_interface`, `power_interface`, …).
//!
//! The built-in types enable exactly what Ironic 39 enables with its default options, and
//! default to what it defaults to (`tests/api/ironic39-drivers.json`, compared field by
//! field by a test). deployd adds implementations of its own, because it performs them:
//! the `fake` deploy and boot of its fake component (as an Ironic with them enabled does,
//! `fake-hardware` then defaults to them), `iscsi`, the pxe family, where the engine
//! writes the disk the ramdisk exposes, and `agent` inspection (in band: the ramdisk's
//! inventory), which Ironic 39 has but does not enable by default. On `fake-hardware`,
//! Ironic's fake BIOS, console, inspection, RAID and vendor interfaces are enabled and
//! default, as a devstack with Ironic's plugin enables them: they record what is asked
//! (a console enabled, a RAID target) and touch no machine.
//!
//! Two kinds choose the component that runs the node's flows:
//!
//! | deploy interface | component family | | power interface | component power |
//! |---|---|---|---|---|
//! | `autodetect`, `direct` | agent (the ramdisk agent writes) | | `ipmitool` | ipmitool |
//! | `iscsi` | pxe (the engine writes the disk the ramdisk exposes) | | `redfish` | redfish |
//! | `fake` | fake | | `fake` | fake |
//!
//! So `ipmi` + `autodetect` runs `agent_ipmitool`, `redfish` + `iscsi` runs `pxe_redfish`
//! and `fake-hardware` + `fake` runs `fake`. `ramdisk` and `bootc` are enabled as Ironic
//! enables them and refused when a deploy starts, with the reason.

use crate::driver_host::capability::bindings::Family;
use crate::driver_host::{LoadedDriver, Registry};

/// The kinds of interface, in Ironic's order, with the microversion that introduced each
/// one's field.
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

/// Ironic 39's enabled interfaces of a kind for a type, in its drivers API's order, and
/// the default (before deployd's own, see [`Hardware::enabled`]).
fn ironic(hw: &str, kind: &str) -> (&'static [&'static str], &'static str) {
    let redfish = hw == "redfish";
    let fake = hw == "fake-hardware";
    match kind {
        "bios" if redfish => (&["redfish", "no-bios"], "redfish"),
        "bios" => (&["no-bios"], "no-bios"),
        "boot" if redfish => (
            &["ipxe", "pxe", "redfish-virtual-media", "http-ipxe"],
            "ipxe",
        ),
        "boot" => (&["pxe", "ipxe"], "ipxe"),
        "console" => (&["no-console"], "no-console"),
        "deploy" => (&["ramdisk", "direct", "bootc", "autodetect"], "autodetect"),
        "firmware" => (&["no-firmware"], "no-firmware"),
        "inspect" if redfish => (&["no-inspect", "redfish"], "redfish"),
        "inspect" => (&["no-inspect"], "no-inspect"),
        "management" | "power" if redfish => (&["redfish"], "redfish"),
        "management" | "power" if fake => (&["fake"], "fake"),
        "management" | "power" => (&["ipmitool"], "ipmitool"),
        "network" => (&["flat", "noop"], "flat"),
        "raid" if redfish => (&["no-raid", "agent", "redfish"], "redfish"),
        "raid" => (&["no-raid", "agent"], "no-raid"),
        "rescue" => (&["no-rescue"], "no-rescue"),
        "storage" => (&["cinder", "noop"], "noop"),
        "vendor" if redfish => (&["no-vendor", "redfish"], "redfish"),
        "vendor" if fake => (&["no-vendor"], "no-vendor"),
        "vendor" => (&["no-vendor", "ipmitool"], "ipmitool"),
        _ => (&[], ""),
    }
}

/// Ironic's class name of a type, as its refusals name it.
fn class_of(hw: &str) -> &str {
    match hw {
        "ipmi" => "IPMIHardware",
        "redfish" => "RedfishHardware",
        "fake-hardware" => "FakeHardware",
        other => other,
    }
}

fn family_of(deploy: &str) -> Option<Family> {
    match deploy {
        "direct" | "autodetect" => Some(Family::Agent),
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

/// Why a node's driver or interfaces are not acceptable (Ironic's words).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HardwareError {
    /// No engine runs this driver; the API words it with the node's conductor group
    /// ([`crate::conductor_groups::no_valid_host`]).
    #[error(
        "No valid host was found. Reason: No conductor service registered which supports driver {0}."
    )]
    UnknownType(String),
    #[error(
        "Could not find the following interface in the 'ironic.hardware.interfaces.{kind}' entrypoint: {name}. Valid interfaces are [{valid}]."
    )]
    NotLoaded {
        kind: String,
        name: String,
        valid: String,
    },
    #[error("{kind} interface implementation '{name}' is not supported by hardware type {hw}.")]
    Unsupported {
        kind: String,
        name: String,
        hw: String,
    },
}

/// The interfaces deployd performs that Ironic 39 leaves disabled by default, enabled by
/// the engine's configuration (`[interfaces]`) as Ironic's `enabled_<kind>_interfaces`
/// enable them. Each goes where Ironic's hardware types list it among their supported
/// interfaces, so a type's default is the first enabled one, as in Ironic: `ipmitool-socat`
/// before `no-console` on `ipmi`, `no-rescue` before `agent` everywhere.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Optional {
    /// `agent` rescue (see [`crate::conductor::rescue`]) on every type but `fake-hardware`.
    pub agent_rescue: bool,
    /// `ipmitool-socat` consoles (see [`crate::console`]) on types whose power is ipmitool.
    pub ipmitool_socat: bool,
}

impl Optional {
    /// The configuration's lists (Ironic's names; the `no-…` ones are always enabled).
    pub fn from_lists(rescue: &[String], console: &[String]) -> Result<Optional, String> {
        let mut optional = Optional::default();
        for (kind, names) in [("rescue", rescue), ("console", console)] {
            for name in names {
                match (kind, name.as_str()) {
                    (_, n) if n == format!("no-{kind}") => {}
                    ("rescue", "agent") => optional.agent_rescue = true,
                    ("console", "ipmitool-socat") => optional.ipmitool_socat = true,
                    _ => {
                        return Err(format!(
                            "enabled_{kind}_interfaces: deployd has no {kind} interface {name:?}"
                        ));
                    }
                }
            }
        }
        Ok(optional)
    }

    /// Adds the enabled ones of `kind` to a type's list, where Ironic lists them.
    fn add(&self, kind: &str, power: Option<&str>, fake: bool, list: &mut Vec<String>) {
        match kind {
            "rescue" if self.agent_rescue && !fake => list.push("agent".into()),
            "console" if self.ipmitool_socat && power == Some("ipmitool") => {
                list.insert(0, "ipmitool-socat".into())
            }
            _ => {}
        }
    }
}

/// The hardware types and interfaces, as the loaded components make them.
pub struct Hardware<'a> {
    registry: &'a Registry,
    optional: Optional,
}

impl<'a> Hardware<'a> {
    /// Ironic 39's interfaces and deployd's own, without the optional ones.
    pub fn new(registry: &'a Registry) -> Hardware<'a> {
        Hardware {
            registry,
            optional: Optional::default(),
        }
    }

    /// With the optional interfaces the configuration enables.
    pub fn enabling(mut self, optional: &Optional) -> Hardware<'a> {
        self.optional = optional.clone();
        self
    }

    /// The power backend of a type: its component's, or the built-in type's.
    fn power_of(&self, hw: &str) -> Option<String> {
        match self.own_component(hw) {
            Some(c) => Some(c.description.power.clone()),
            None => ironic(hw, "power").0.first().map(|p| p.to_string()),
        }
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

    fn own_component(&self, hw: &str) -> Option<std::sync::Arc<LoadedDriver>> {
        (!TYPES.contains(&hw))
            .then(|| self.registry.get(hw))
            .flatten()
    }

    /// The enabled interfaces of one kind of a type: Ironic 39's, then deployd's own where
    /// a component performs them (`fake` first on `fake-hardware`, as Ironic orders it).
    pub fn enabled(&self, hw: &str, kind: &str) -> Vec<String> {
        let mut all = self.built_in(hw, kind);
        let power = self.power_of(hw);
        let fake = hw == "fake-hardware";
        self.optional.add(kind, power.as_deref(), fake, &mut all);
        all
    }

    /// [`Hardware::enabled`] before the optional interfaces.
    fn built_in(&self, hw: &str, kind: &str) -> Vec<String> {
        if let Some(component) = self.own_component(hw) {
            return own_type(&component, kind);
        }
        let mut all: Vec<String> = ironic(hw, kind).0.iter().map(|s| s.to_string()).collect();
        if hw == "fake-hardware" && self.fake_loaded(kind) {
            all.insert(0, "fake".into());
        }
        if kind == "deploy" && hw != "fake-hardware" && self.pxe_loaded(hw) {
            all.push("iscsi".into());
        }
        if kind == "inspect" {
            all.push("agent".into());
        }
        all
    }

    /// The interface a node of a type gets when none is asked for.
    pub fn default(&self, hw: &str, kind: &str) -> Option<String> {
        if self.own_component(hw).is_some() {
            return self.enabled(hw, kind).into_iter().next();
        }
        if hw == "fake-hardware" && self.fake_loaded(kind) {
            return Some("fake".into());
        }
        // An optional interface Ironic lists first is the default once enabled.
        let enabled = self.enabled(hw, kind);
        if enabled.first() != self.built_in(hw, kind).first() {
            return enabled.into_iter().next();
        }
        Some(ironic(hw, kind).1.to_owned()).filter(|d| !d.is_empty())
    }

    /// deployd's `fake` boot always; its `fake` deploy while the fake component is loaded;
    /// and Ironic's fake interfaces that only record what is asked of them (`fake` BIOS,
    /// console, inspection, RAID and vendor), enabled as a devstack with Ironic's plugin
    /// enables them (its API tests need them).
    fn fake_loaded(&self, kind: &str) -> bool {
        match kind {
            "boot" | "bios" | "console" | "inspect" | "raid" | "vendor" => true,
            "deploy" => self.component_for("fake", "fake").is_some(),
            _ => false,
        }
    }

    /// Whether a pxe-family component drives this type's power interface.
    fn pxe_loaded(&self, hw: &str) -> bool {
        ironic(hw, "power")
            .0
            .iter()
            .any(|p| self.component_for("iscsi", p).is_some())
    }

    /// Every implementation of a kind any type enables: Ironic's "valid interfaces",
    /// sorted. `fake-hardware` accepts any of them, as Ironic's driver factory does.
    fn loaded(&self, kind: &str) -> Vec<String> {
        let mut all: Vec<String> = TYPES.iter().flat_map(|hw| self.enabled(hw, kind)).collect();
        if kind == "deploy"
            && self
                .registry
                .list()
                .iter()
                .any(|d| d.description.family == Family::Pxe)
        {
            all.push("iscsi".into());
        }
        all.sort();
        all.dedup();
        all
    }

    /// Fills in every kind's default and checks every given interface.
    pub fn resolve(&self, hw: &str, given: &Interfaces) -> Result<Interfaces, HardwareError> {
        if !self.exists(hw) {
            return Err(HardwareError::UnknownType(hw.to_owned()));
        }
        let mut out = Interfaces::new();
        for (kind, _) in KINDS {
            let name = match given.get(*kind) {
                Some(name) => {
                    self.check(hw, kind, name)?;
                    name.clone()
                }
                None => match self.default(hw, kind) {
                    Some(d) => d,
                    None => continue,
                },
            };
            out.insert(kind.to_string(), name);
        }
        Ok(out)
    }

    /// Ironic's two refusals: a name no type has, and one this type does not support.
    fn check(&self, hw: &str, kind: &str, name: &str) -> Result<(), HardwareError> {
        if self.enabled(hw, kind).iter().any(|e| e == name) {
            return Ok(());
        }
        let loaded = self.loaded(kind);
        if !loaded.iter().any(|l| l == name) {
            let valid: Vec<String> = loaded.iter().map(|l| format!("'{l}'")).collect();
            return Err(HardwareError::NotLoaded {
                kind: kind.to_owned(),
                name: name.to_owned(),
                valid: valid.join(", "),
            });
        }
        if hw == "fake-hardware" {
            return Ok(());
        }
        Err(HardwareError::Unsupported {
            kind: kind.to_owned(),
            name: name.to_owned(),
            hw: class_of(hw).to_owned(),
        })
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
        other => ironic("ipmi", other)
            .0
            .iter()
            .map(|s| s.to_string())
            .collect(),
    }
}
