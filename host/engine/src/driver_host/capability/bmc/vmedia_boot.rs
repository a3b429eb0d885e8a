//! Virtual media boot (`boot_interface: redfish-virtual-media`), as Ironic's boot
//! interface of that name: where a driver asks for a network boot (the ramdisk), the BMC
//! is given the node's ISO (see [`crate::boot_iso`]) in its virtual CD and boots from it,
//! with no DHCP boot options involved; where it asks for the disk, the CD is ejected and
//! the ISO's url stops being served (its token is dropped from the node).

use uuid::Uuid;

use super::super::bindings::deployd::driver::bmc::BootDevice;
use super::super::{CapabilityError, Services};
use super::redfish::Target;
use crate::boot_iso;
use crate::boot_mode::BootMode;
use crate::node::Node;

/// Whether the node boots its ramdisk from virtual media.
pub(super) fn boots_from_media(node: &Node) -> bool {
    node.body.interfaces.get("boot").map(String::as_str) == Some("redfish-virtual-media")
}

/// The boot device for a virtual media node: the ISO in the CD and `Cd` for the
/// ramdisk, the CD ejected and `Hdd` for the disk. Returns the mode the BMC shows.
pub(super) async fn set_boot_device(
    services: &Services,
    t: &Target,
    node: &Node,
    device: BootDevice,
    persistent: bool,
    mode: BootMode,
) -> Result<Option<BootMode>, CapabilityError> {
    let http = &services.http;
    let remote = CapabilityError::Remote;
    match device {
        BootDevice::Pxe => {
            let isos = services.bmc.isos.as_ref().ok_or_else(|| {
                CapabilityError::NotConfigured("this engine builds no virtual media ISO".into())
            })?;
            let token = token(services, node).await?;
            isos.prepare(node, &token)
                .await
                .map_err(CapabilityError::NotConfigured)?;
            let url = isos.url(node.uuid(), &token);
            t.insert_media(http, "cdrom", &url).await.map_err(remote)?;
            t.set_boot_target(http, "Cd", persistent, mode)
                .await
                .map_err(remote)
        }
        BootDevice::Disk => {
            t.eject_media(http, Some(&["cdrom".to_owned()]))
                .await
                .map_err(remote)?;
            forget(services, node.uuid()).await?;
            t.set_boot_target(http, "Hdd", persistent, mode)
                .await
                .map_err(remote)
        }
    }
}

/// When a flow ends without booting the disk (a failure, a timeout, a tear-down): the
/// CD ejected and the ISO forgotten, if the node still holds one, as Ironic's
/// `clean_up_ramdisk` does.
pub(super) async fn release(
    services: &Services,
    t: &Target,
    node: &Node,
) -> Result<(), CapabilityError> {
    if !node.body.driver_internal_info.contains_key(boot_iso::TOKEN) {
        return Ok(());
    }
    t.eject_media(&services.http, Some(&["cdrom".to_owned()]))
        .await
        .map_err(CapabilityError::Remote)?;
    forget(services, node.uuid()).await
}

/// The node's ISO token: the one it holds, or a new one recorded in it.
async fn token(services: &Services, node: &Node) -> Result<String, CapabilityError> {
    if let Some(held) = node
        .body
        .driver_internal_info
        .get(boot_iso::TOKEN)
        .and_then(serde_json::Value::as_str)
    {
        return Ok(held.to_owned());
    }
    let token = hex::encode(rand::random::<[u8; 24]>());
    let kept = token.clone();
    services
        .store
        .update_node(node.uuid(), move |b| {
            b.driver_internal_info
                .insert(boot_iso::TOKEN.into(), kept.clone().into());
            Ok(())
        })
        .await?;
    Ok(token)
}

/// Drops the node's ISO token (its url is refused from now on) and this engine's ISOs.
async fn forget(services: &Services, node: Uuid) -> Result<(), CapabilityError> {
    services
        .store
        .update_node(node, |b| {
            b.driver_internal_info.remove(boot_iso::TOKEN);
            Ok(())
        })
        .await?;
    if let Some(isos) = &services.bmc.isos {
        isos.forget(node);
    }
    Ok(())
}
