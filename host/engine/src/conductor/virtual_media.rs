//! Virtual media on a node's Redfish BMC, as Ironic's `redfish` management interface does
//! it: the API's attach or detach is taken at once (204) and done under the node's claim
//! in the background; a failure goes where Ironic's worker puts it, the node's
//! `last_error` and an error event of its history (see `capability::bmc::virtual_media`).

use std::sync::Arc;

use serde_json::Value;
use uuid::Uuid;

use super::{Conductor, ConductorError};
use crate::driver_host::capability::bmc::{self, Media};

impl Conductor {
    /// Starts inserting `image` as the node's `device` (cdrom, floppy, disk).
    pub async fn attach_media(
        self: &Arc<Self>,
        node: Uuid,
        device: String,
        image: String,
    ) -> Result<(), ConductorError> {
        let error = format!("Could not attach device {device} to node {node}");
        self.media_in_background(
            node,
            "attaching virtual media",
            Media::Insert(device, image),
            error,
        )
        .await
    }

    /// Starts ejecting the media of these devices (every device when `None`).
    pub async fn detach_media(
        self: &Arc<Self>,
        node: Uuid,
        devices: Option<Vec<String>>,
    ) -> Result<(), ConductorError> {
        let named = devices
            .as_ref()
            .map_or_else(|| "cdrom, floppy, disk".to_owned(), |d| d.join(", "));
        let error = format!("Could not detach device(s) {named} from node {node}");
        self.media_in_background(
            node,
            "detaching virtual media",
            Media::Eject(devices),
            error,
        )
        .await
    }

    /// The node's virtual media devices, read from its BMC now.
    pub async fn list_media(&self, node: Uuid) -> Result<Value, String> {
        let services = self.registry.services().clone();
        bmc::virtual_media(&services, node, "redfish", Media::List).await
    }

    async fn media_in_background(
        self: &Arc<Self>,
        node: Uuid,
        operation: &'static str,
        what: Media,
        error: String,
    ) -> Result<(), ConductorError> {
        let claim = self.claim_for_operator(node, operation).await?;
        let me = self.clone();
        tokio::spawn(async move {
            let services = me.registry.services().clone();
            if let Err(e) = bmc::virtual_media(&services, node, "redfish", what).await
                && let Err(e) = me.note_failure(node, format!("{error}: {e}")).await
            {
                tracing::error!(%node, "recording a virtual media failure: {e}");
            }
            drop(claim);
        });
        Ok(())
    }
}
