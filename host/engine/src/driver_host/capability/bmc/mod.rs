//! `deployd:driver/bmc`: the node's baseboard management controller.
//!
//! The backend is the one the driver described (`power`): `redfish` over HTTP, `ipmitool`
//! by running the real ipmitool binary, or `fake`, which only records the power state. The
//! address and credentials always come from the node's own driver_info, so a driver can
//! reach no other BMC. After every power change the node's `power_state` is updated, as
//! the API and the CLI show it.

pub mod ipmitool;
mod redfish;
mod redfish_inspect;
mod redfish_secure_boot;
mod redfish_vmedia;
mod vmedia_boot;

use std::path::PathBuf;

use serde_json::Value;

use uuid::Uuid;

use super::bindings::deployd::driver::bmc::{BootDevice, Host, PowerState};
use super::{CapabilityError, HostState, Services};
use crate::boot_mode::{self, BootMode};
use crate::node::JsonMap;

/// Settings of the host's BMC backends.
#[derive(Clone, Debug)]
pub struct Backends {
    /// The ipmitool binary.
    pub ipmitool: PathBuf,
    /// The mode a node boots in when it does not say (see [`crate::boot_mode`]).
    pub default_boot_mode: BootMode,
    /// The ISOs of virtual media boot (none: a `redfish-virtual-media` node cannot boot).
    pub isos: Option<std::sync::Arc<crate::boot_iso::IsoMaker>>,
}

impl Default for Backends {
    fn default() -> Self {
        Backends {
            ipmitool: PathBuf::from("ipmitool"),
            default_boot_mode: BootMode::default(),
            isos: None,
        }
    }
}

/// The BMC of one node, resolved from its driver_info.
enum Bmc {
    Fake,
    Redfish(redfish::Target),
    Ipmi(ipmitool::Target),
}

fn text(info: &JsonMap, key: &str) -> Option<String> {
    match info.get(key)? {
        Value::String(s) if !s.is_empty() => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

impl Bmc {
    fn resolve(power: &str, info: &JsonMap, backends: &Backends) -> Result<Bmc, String> {
        let need = |key: &str| {
            text(info, key)
                .ok_or_else(|| format!("driver_info.{key} is required for {power} power"))
        };
        match power {
            "fake" => Ok(Bmc::Fake),
            "redfish" => Ok(Bmc::Redfish(redfish::Target::new(
                &need("redfish_address")?,
                &need("redfish_system_id")?,
                text(info, "redfish_username"),
                text(info, "redfish_password"),
            )?)),
            "ipmitool" => Ok(Bmc::Ipmi(ipmitool::Target {
                binary: backends.ipmitool.clone(),
                address: need("ipmi_address")?,
                port: text(info, "ipmi_port").unwrap_or_else(|| "623".into()),
                username: text(info, "ipmi_username").unwrap_or_default(),
                password: text(info, "ipmi_password").unwrap_or_default(),
            })),
            other => Err(format!("unknown power backend {other:?}")),
        }
    }
}

/// The IPMI BMC a node's driver_info names (its serial console's), or what is missing.
pub fn ipmi_target(services: &Services, info: &JsonMap) -> Result<ipmitool::Target, String> {
    match Bmc::resolve("ipmitool", info, &services.bmc)? {
        Bmc::Ipmi(target) => Ok(target),
        _ => Err("the ipmitool backend resolved to another BMC".into()),
    }
}

/// The node's BMC, if this engine may act on the node now (on the shared store, not
/// while it is unsure of its lease: see `Store::may_act`).
async fn resolve(services: &Services, node: Uuid, power: &str) -> Result<Bmc, CapabilityError> {
    Ok(resolve_with_node(services, node, power).await?.0)
}

/// [`resolve`], with the node as it was read for it.
async fn resolve_with_node(
    services: &Services,
    node: Uuid,
    power: &str,
) -> Result<(Bmc, crate::node::Node), CapabilityError> {
    services.store.may_act(node)?;
    let node = services.store.node(node).await?;
    let bmc = Bmc::resolve(power, &node.body.driver_info, &services.bmc)
        .map_err(CapabilityError::NotConfigured)?;
    Ok((bmc, node))
}

/// Records the machine's power in the node (as the API shows it) and, when it changed, a
/// milestone in the node's history.
async fn record_power(
    services: &Services,
    node: Uuid,
    state: PowerState,
) -> Result<(), CapabilityError> {
    let text = match state {
        PowerState::On => "power on",
        PowerState::Off => "power off",
    };
    let changed = std::sync::atomic::AtomicBool::new(false);
    services
        .store
        .update_node(node, |b| {
            let differs = b.power_state.as_deref() != Some(text);
            changed.store(differs, std::sync::atomic::Ordering::Relaxed);
            b.power_state = Some(text.into());
            b.target_power_state = None;
            Ok(())
        })
        .await?;
    if changed.load(std::sync::atomic::Ordering::Relaxed) {
        services
            .store
            .milestone(node, format!("Machine is now in {text}"))
            .await?;
    }
    Ok(())
}

/// BMCs apply power changes asynchronously (sushy's fake driver, real hardware): poll
/// until the machine reports `want`, as Ironic's `_wait_for_power_state` does.
async fn settle<F, Fut>(want: PowerState, read: F) -> Result<(), String>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<PowerState, String>>,
{
    let mut last = None;
    for _ in 0..POWER_WAIT_POLLS {
        match read().await {
            Ok(state) if state == want => return Ok(()),
            other => last = Some(other),
        }
        tokio::time::sleep(POWER_WAIT_INTERVAL).await;
    }
    Err(format!(
        "the BMC did not reach power {want:?} within {:?} (last answer: {last:?})",
        POWER_WAIT_INTERVAL * POWER_WAIT_POLLS
    ))
}

const POWER_WAIT_POLLS: u32 = 60;
const POWER_WAIT_INTERVAL: std::time::Duration = std::time::Duration::from_millis(250);

/// Powers the node's machine on or off through its BMC and records the new state.
pub async fn set_power(
    services: &Services,
    node: Uuid,
    power: &str,
    state: PowerState,
) -> Result<(), CapabilityError> {
    let http = &services.http;
    // A machine already in the state is left alone, as Ironic's `node_power_action` does:
    // a hard power-off of a machine its agent powered off cleanly is no-op at best, and
    // some BMCs refuse it.
    match resolve(services, node, power).await? {
        Bmc::Fake => {}
        Bmc::Redfish(t) => match t.get_power(http).await {
            Ok(now) if now == state => {}
            _ => {
                t.set_power(http, state)
                    .await
                    .map_err(CapabilityError::Remote)?;
                settle(state, || t.get_power(http))
                    .await
                    .map_err(CapabilityError::Remote)?;
            }
        },
        Bmc::Ipmi(t) => match t.get_power().await {
            Ok(now) if now == state => {}
            _ => {
                t.set_power(state).await.map_err(CapabilityError::Remote)?;
                settle(state, || t.get_power())
                    .await
                    .map_err(CapabilityError::Remote)?;
            }
        },
    }
    record_power(services, node, state).await
}

/// Reboots the node's machine through its BMC; it is on afterwards.
pub async fn reboot(services: &Services, node: Uuid, power: &str) -> Result<(), CapabilityError> {
    match resolve(services, node, power).await? {
        Bmc::Fake => {}
        Bmc::Redfish(t) => t
            .reboot(&services.http)
            .await
            .map_err(CapabilityError::Remote)?,
        Bmc::Ipmi(t) => t.reboot().await.map_err(CapabilityError::Remote)?,
    }
    services
        .store
        .milestone(node, "Machine rebooted".into())
        .await?;
    record_power(services, node, PowerState::On).await
}

/// The machine's power as its BMC reports it (the fake backend: as last recorded).
pub async fn get_power(
    services: &Services,
    node: Uuid,
    power: &str,
) -> Result<PowerState, CapabilityError> {
    Ok(match resolve(services, node, power).await? {
        Bmc::Fake => {
            let node = services.store.node(node).await?;
            if node.body.power_state.as_deref() == Some("power on") {
                PowerState::On
            } else {
                PowerState::Off
            }
        }
        Bmc::Redfish(t) => t
            .get_power(&services.http)
            .await
            .map_err(CapabilityError::Remote)?,
        Bmc::Ipmi(t) => t.get_power().await.map_err(CapabilityError::Remote)?,
    })
}

/// The device the machine boots from next (once, or every time with `persistent`), in
/// the node's boot mode (see [`crate::boot_mode`]), which the node then shows as the mode
/// its BMC has (a BMC that shows none, and the fake one, leave it as it was).
pub async fn set_boot_device(
    services: &Services,
    node: Uuid,
    power: &str,
    device: BootDevice,
    persistent: bool,
) -> Result<(), CapabilityError> {
    let (bmc, record) = resolve_with_node(services, node, power).await?;
    let body = &record.body;
    let mode = boot_mode::wanted(
        &body.instance_info,
        &body.properties,
        services.bmc.default_boot_mode,
    );
    let secure_boot = boot_mode::secure_boot_wanted(&body.instance_info, &body.properties);
    if secure_boot == Some(true) && mode != BootMode::Uefi {
        return Err(CapabilityError::NotConfigured(format!(
            "node {node} asks for Secure Boot in the {} boot mode: Secure Boot needs uefi",
            mode.as_str()
        )));
    }
    let http_boot = record.body.interfaces.get("boot").map(String::as_str) == Some("http-ipxe");
    if http_boot && device == BootDevice::Pxe && mode != BootMode::Uefi {
        return Err(CapabilityError::NotConfigured(format!(
            "node {node} boots by UEFI HTTP boot (boot_interface http-ipxe) in the {} boot mode: it needs uefi",
            mode.as_str()
        )));
    }
    let now = match &bmc {
        Bmc::Fake => None,
        Bmc::Redfish(t) if vmedia_boot::boots_from_media(&record) => {
            vmedia_boot::set_boot_device(services, t, &record, device, persistent, mode).await?
        }
        // Ironic's `http-ipxe`: the network boot is the firmware's UEFI HTTP boot.
        Bmc::Redfish(t) if http_boot && device == BootDevice::Pxe => t
            .set_boot_target(&services.http, "UefiHttp", persistent, mode)
            .await
            .map_err(CapabilityError::Remote)?,
        Bmc::Redfish(t) => t
            .set_boot_device(&services.http, device, persistent, mode)
            .await
            .map_err(CapabilityError::Remote)?,
        Bmc::Ipmi(t) => {
            t.set_boot_device(device, persistent, mode)
                .await
                .map_err(CapabilityError::Remote)?;
            Some(mode)
        }
    };
    if let Some(mode) = now
        && body.attrs.get("boot_mode").and_then(Value::as_str) != Some(mode.as_str())
    {
        record_boot_mode(services, node, mode).await?;
    }
    match secure_boot {
        Some(on) => secure_boot_as_wanted(services, &record, bmc, on).await,
        None => Ok(()),
    }
}

/// Before a boot: the BMC's Secure Boot set as the node's instance asks (see
/// [`boot_mode::secure_boot_wanted`]), after the boot mode (Secure Boot is UEFI's: it is
/// refused in the bios mode before the BMC is told anything), and the node's
/// `secure_boot` showing what the BMC reports.
async fn secure_boot_as_wanted(
    services: &Services,
    record: &crate::node::Node,
    bmc: Bmc,
    on: bool,
) -> Result<(), CapabilityError> {
    let now = match bmc {
        Bmc::Fake => on,
        Bmc::Redfish(t) => match t.get_secure_boot(&services.http).await {
            Ok(Some(shown)) if shown == on => Ok(shown),
            Ok(Some(_)) => t.set_secure_boot(&services.http, on).await,
            Ok(None) if !on => return Ok(()),
            Ok(None) => Err("the BMC's system has no SecureBoot resource".into()),
            Err(e) => Err(e),
        }
        .map_err(|e| CapabilityError::Remote(format!("Secure Boot: {e}")))?,
        Bmc::Ipmi(_) if !on => return Ok(()),
        Bmc::Ipmi(_) => {
            return Err(CapabilityError::NotConfigured(format!(
                "node {} asks for Secure Boot, which IPMI cannot set",
                record.uuid()
            )));
        }
    };
    record_secure_boot(services, record.uuid(), now).await
}

/// When the node's flow ended without booting its disk: the virtual media it booted its
/// ramdisk from is ejected (see [`vmedia_boot::release`]); nothing for other boots.
pub async fn release_boot_media(
    services: &Services,
    node: Uuid,
    power: &str,
) -> Result<(), CapabilityError> {
    match resolve_with_node(services, node, power).await? {
        (Bmc::Redfish(t), record) if vmedia_boot::boots_from_media(&record) => {
            vmedia_boot::release(services, &t, &record).await
        }
        _ => Ok(()),
    }
}

/// Enables or disables Secure Boot through the node's Redfish BMC (`PUT
/// …/states/secure_boot`) and records what the BMC reports afterwards.
pub async fn set_secure_boot(
    services: &Services,
    node: Uuid,
    power: &str,
    on: bool,
) -> Result<bool, CapabilityError> {
    let now = redfish_only(services, node, power, "cannot set Secure Boot")
        .await?
        .set_secure_boot(&services.http, on)
        .await
        .map_err(CapabilityError::Remote)?;
    record_secure_boot(services, node, now).await?;
    Ok(now)
}

/// Sets the machine's boot mode through its Redfish BMC (`PUT …/states/boot_mode`) and
/// records the mode the BMC reports afterwards.
pub async fn set_boot_mode(
    services: &Services,
    node: Uuid,
    power: &str,
    mode: BootMode,
) -> Result<BootMode, CapabilityError> {
    let refusal = "sets a boot mode only with a boot device";
    let now = redfish_only(services, node, power, refusal)
        .await?
        .set_boot_mode(&services.http, mode)
        .await
        .map_err(CapabilityError::Remote)?;
    record_boot_mode(services, node, now).await?;
    Ok(now)
}

/// The node's BMC, for what only Redfish sets by itself (the other backends `refusal`).
async fn redfish_only(
    services: &Services,
    node: Uuid,
    power: &str,
    refusal: &str,
) -> Result<redfish::Target, CapabilityError> {
    match resolve(services, node, power).await? {
        Bmc::Redfish(t) => Ok(t),
        Bmc::Fake | Bmc::Ipmi(_) => Err(CapabilityError::NotConfigured(format!(
            "the {power} BMC backend {refusal}"
        ))),
    }
}

async fn record_boot_mode(
    services: &Services,
    node: Uuid,
    mode: BootMode,
) -> Result<(), CapabilityError> {
    record_attr(services, node, "boot_mode", mode.as_str().into()).await
}

async fn record_secure_boot(
    services: &Services,
    node: Uuid,
    on: bool,
) -> Result<(), CapabilityError> {
    record_attr(services, node, "secure_boot", on.into()).await
}

/// Records what the BMC reports in the node's field `key`.
async fn record_attr(
    services: &Services,
    node: Uuid,
    key: &str,
    value: Value,
) -> Result<(), CapabilityError> {
    services
        .store
        .update_node(node, |b| {
            b.attrs.insert(key.into(), value.clone());
            Ok(())
        })
        .await?;
    Ok(())
}

/// What an operator asks of a node's power (`PUT /v1/nodes/{node}/states/power`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PowerAction {
    On,
    Off,
    Reboot,
}

/// Carries out an operator's power action through the node's driver's backend.
pub async fn act(
    services: &Services,
    node: Uuid,
    power: &str,
    action: PowerAction,
) -> Result<(), String> {
    let result = match action {
        PowerAction::On => set_power(services, node, power, PowerState::On).await,
        PowerAction::Off => set_power(services, node, power, PowerState::Off).await,
        PowerAction::Reboot => reboot(services, node, power).await,
    };
    result.map_err(|e| e.to_string())
}

/// Virtual media on the node's BMC, which only Redfish has: `Insert(device, image)`,
/// `Eject(devices or all)`, `List`. The answer of `List` is the devices as Ironic lists
/// them; the others answer `Null`.
pub enum Media {
    Insert(String, String),
    Eject(Option<Vec<String>>),
    List,
}

pub async fn virtual_media(
    services: &Services,
    node: Uuid,
    power: &str,
    what: Media,
) -> Result<Value, String> {
    let target = match resolve(services, node, power)
        .await
        .map_err(|e| e.to_string())?
    {
        Bmc::Redfish(t) => t,
        _ => return Err(format!("the {power} BMC has no virtual media")),
    };
    let http = &services.http;
    match what {
        Media::Insert(device, image) => target
            .insert_media(http, &device, &image)
            .await
            .map(|()| Value::Null),
        Media::Eject(devices) => target
            .eject_media(http, devices.as_deref())
            .await
            .map(|()| Value::Null),
        Media::List => target.list_media(http).await.map(Value::from),
    }
}

/// The node's inventory, read out of band from its Redfish BMC.
pub async fn inspect(services: &Services, node: Uuid) -> Result<Value, String> {
    match resolve(services, node, "redfish")
        .await
        .map_err(|e| e.to_string())?
    {
        Bmc::Redfish(t) => t.inventory(&services.http).await,
        _ => Err("only a Redfish BMC is inspected out of band".into()),
    }
}

/// Whether the node's driver_info is complete for this power backend.
pub async fn check(services: &Services, node: Uuid, power: &str) -> Result<(), String> {
    resolve(services, node, power)
        .await
        .map(drop)
        .map_err(|e| e.to_string())
}

/// The driver's view: the same operations, on its own node through its own backend.
impl Host for HostState {
    async fn set_power(&mut self, state: PowerState) -> Result<(), CapabilityError> {
        set_power(&self.services, self.node, &self.power, state).await
    }

    async fn reboot(&mut self) -> Result<(), CapabilityError> {
        reboot(&self.services, self.node, &self.power).await
    }

    async fn get_power(&mut self) -> Result<PowerState, CapabilityError> {
        get_power(&self.services, self.node, &self.power).await
    }

    async fn set_boot_device(
        &mut self,
        device: BootDevice,
        persistent: bool,
    ) -> Result<(), CapabilityError> {
        set_boot_device(&self.services, self.node, &self.power, device, persistent).await
    }
}
