//! What an operator sets on a node's management outside a flow: its next boot device, its
//! boot mode and its Secure Boot, through the BMC its power interface names (a no-op for the fake one's
//! device). Its console is [`super::console`]'s.

use serde_json::json;
use uuid::Uuid;

use super::{Conductor, ConductorError};
use crate::boot_mode::BootMode;
use crate::driver_host::capability::bindings::deployd::driver::bmc::BootDevice;
use crate::driver_host::capability::bmc;

/// Where the boot device last set through the API is kept (`driver_internal_info`):
/// deployd's BMC backends set a boot device but do not read one back.
pub const BOOT_DEVICE: &str = "deployd_boot_device";

impl Conductor {
    /// Sets the device the node boots from next (every time with `persistent`), under the
    /// node's claim, and records it.
    pub async fn set_boot_device(
        &self,
        node: Uuid,
        device: BootDevice,
        persistent: bool,
    ) -> Result<(), ConductorError> {
        let _claim = self.claim_for_operator(node, "set the boot device").await?;
        let power = self.power_backend(node).await?;
        let services = self.registry.services().clone();
        bmc::set_boot_device(&services, node, &power, device, persistent)
            .await
            .map_err(|e| ConductorError::Hardware(format!("Failed to set boot device: {e}")))?;
        let name = match device {
            BootDevice::Pxe => "pxe",
            BootDevice::Disk => "disk",
        };
        let set = json!({"boot_device": name, "persistent": persistent});
        self.store
            .update_node(node, |b| {
                b.driver_internal_info
                    .insert(BOOT_DEVICE.into(), set.clone());
                Ok(())
            })
            .await?;
        Ok(())
    }

    /// Sets the machine's boot mode through its BMC (`PUT …/states/boot_mode`), under the
    /// node's claim; the node then shows the mode the BMC reports.
    pub async fn set_boot_mode(&self, node: Uuid, mode: BootMode) -> Result<(), ConductorError> {
        let _claim = self.claim_for_operator(node, "set the boot mode").await?;
        let power = self.power_backend(node).await?;
        let services = self.registry.services().clone();
        bmc::set_boot_mode(&services, node, &power, mode)
            .await
            .map_err(|e| ConductorError::Hardware(format!("Failed to set boot mode: {e}")))?;
        Ok(())
    }

    /// Enables or disables the machine's UEFI Secure Boot through its BMC (`PUT
    /// …/states/secure_boot`), under the node's claim; the node then shows what the BMC
    /// reports.
    pub async fn set_secure_boot(&self, node: Uuid, on: bool) -> Result<(), ConductorError> {
        let _claim = self.claim_for_operator(node, "set secure boot").await?;
        let power = self.power_backend(node).await?;
        let services = self.registry.services().clone();
        bmc::set_secure_boot(&services, node, &power, on)
            .await
            .map_err(|e| ConductorError::Hardware(format!("Failed to set secure boot: {e}")))?;
        Ok(())
    }

    /// The BMC backend the node's driver powers it through (`redfish`, `ipmitool`, `fake`).
    pub(super) async fn power_backend(&self, node: Uuid) -> Result<String, ConductorError> {
        let record = self.store.node(node).await?;
        let driver = self
            .driver_for(&record)
            .await
            .map_err(|e| ConductorError::Invalid(e.to_string()))?;
        Ok(driver.description.power.clone())
    }
}
