//! Network boot for the `ipxe`, `pxe` and `http-ipxe` boot interfaces: the iPXE scripts a
//! machine's firmware runs, and the deploy kernel and ramdisk they load.
//!
//! The chain, as with Ironic's iPXE boot:
//! 1. the operator's DHCP server hands iPXE clients `<public url>/boot/ipxe` (firmware
//!    without iPXE first gets the iPXE binary by TFTP: `deployd boot dnsmasq-config`; or,
//!    booting by UEFI HTTP boot (`http-ipxe`, the BMC's `UefiHttp`), over HTTP from
//!    `/boot/ipxe.efi`, `[pxe] uefi_ipxe_bootfile`);
//! 2. that entry script chains to `/boot/ipxe/<mac>` with the MAC the machine booted from;
//! 3. the per-MAC script looks the port up, and for a node that boots its ramdisk now
//!    (deploy, clean, rescue, inspection, servicing) loads `driver_info.deploy_kernel` and
//!    `deploy_ramdisk` with Ironic's kernel parameters (`ipa-api-url`, `BOOTIF`, then
//!    `kernel_append_params`), so an Ironic ramdisk boots unchanged too. An active node
//!    boots its local disk; any other node, and an unknown MAC, exits to the next boot
//!    device.
//!
//! Nothing secret is in a script (the agent gets its token at lookup), so the routes need
//! no authentication, like Ironic's HTTP boot server. A kernel or ramdisk given as a local
//! path is served from `/boot/<node>/<which>` only through the images' allow-list
//! ([`crate::images`]), checked at every request.

use std::fmt::Write as _;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::Value;
use uuid::Uuid;

use crate::boot_iso::{self, IsoMaker};
use crate::image_server::send;
use crate::images::{Images, same_secret};
use crate::node::{Node, normalize_mac};
use crate::ramdisk_params;
use crate::state_machine::{ProvisionState, runs_ramdisk};
use crate::store::Store;

/// The kernel parameters every ramdisk gets before the node's own, unless the engine's
/// configuration says otherwise (Ironic's default `[pxe]kernel_append_params`).
pub const DEFAULT_APPEND: &str = "nofb nomodeset vga=normal";

/// What the boot routes read.
pub struct BootServer {
    pub store: Arc<Store>,
    pub images: Images,
    /// `[pxe] kernel_append_params`: appended for nodes that set none of their own.
    pub kernel_append_params: String,
    /// The nodes' virtual media ISOs.
    pub isos: Arc<IsoMaker>,
    /// iPXE for UEFI, served to firmware that boots by UEFI HTTP boot.
    pub uefi_ipxe_bootfile: std::path::PathBuf,
}

pub fn router(server: Arc<BootServer>) -> Router {
    Router::new()
        .route("/boot/ipxe", get(entry))
        .route("/boot/ipxe.efi", get(uefi_ipxe).head(uefi_ipxe))
        .route("/boot/ipxe/{mac}", get(per_mac))
        .route("/boot/{node}/{which}", get(file).head(file))
        .route("/boot/{node}/iso/{token}", get(iso).head(iso))
        .with_state(server)
}

fn script(text: String) -> Response {
    ([(header::CONTENT_TYPE, "text/plain")], text).into_response()
}

/// The script DHCP hands to iPXE: chain to the script of the MAC it booted from.
async fn entry(State(server): State<Arc<BootServer>>) -> Response {
    let base = server.images.base_url.trim_end_matches('/');
    script(format!(
        "#!ipxe\n\
         # deployd: on to the script of the interface this machine booted from\n\
         chain --autofree {base}/boot/ipxe/${{mac:hexhyp}} || goto failed\n\
         exit\n\
         :failed\n\
         echo deployd: no boot script for ${{mac}}; booting the next device\n\
         exit\n"
    ))
}

/// iPXE's UEFI binary, as UEFI HTTP boot fetches it (the url the DHCP server's
/// `HTTPClient` answer names): Debian's `snponly.efi` by default.
async fn uefi_ipxe(State(server): State<Arc<BootServer>>, headers: HeaderMap) -> Response {
    match tokio::fs::File::open(&server.uefi_ipxe_bootfile).await {
        Ok(file) => send(file, &headers).await,
        Err(e) => {
            let file = server.uefi_ipxe_bootfile.display();
            tracing::warn!("UEFI HTTP boot asked for {file}: {e}");
            let why =
                format!("{file}: {e} (install Debian's ipxe, or set [pxe] uefi_ipxe_bootfile)");
            (StatusCode::NOT_FOUND, why).into_response()
        }
    }
}

/// Exits iPXE, so the firmware goes on to its next boot device.
fn next_device(why: &str) -> String {
    format!("#!ipxe\necho deployd: {why}; booting the next device\nexit\n")
}

async fn per_mac(State(server): State<Arc<BootServer>>, Path(mac): Path<String>) -> Response {
    script(boot_script(&server, &mac).await)
}

/// The script for the machine whose interface has `mac` (hyphens or colons).
pub async fn boot_script(server: &BootServer, mac: &str) -> String {
    let Ok(mac) = normalize_mac(&mac.replace('-', ":")) else {
        return next_device(&format!("{mac:?} is not a MAC address"));
    };
    let node = match server.store.node_by_macs([mac.as_str()]).await {
        Ok(Some(uuid)) => server.store.node(uuid).await,
        _ => return next_device(&format!("no node has a port with MAC {mac}")),
    };
    let Ok(node) = node else {
        return next_device(&format!("the node of MAC {mac} is gone"));
    };
    let boot = node.body.interfaces.get("boot").map(String::as_str);
    if !matches!(boot, Some("ipxe" | "pxe" | "http-ipxe")) {
        return next_device(&format!(
            "node {} does not boot from the network (boot_interface {})",
            node.uuid(),
            boot.unwrap_or("unset")
        ));
    }
    if runs_ramdisk(node.state()) {
        return ramdisk_script(server, &node, &mac);
    }
    if node.state() == ProvisionState::Active {
        // As Ironic's template boots a whole-disk image: the first local disk. Under
        // UEFI iPXE has no BIOS drive to boot: it gives the machine back to its firmware,
        // which boots its next boot option (the disk).
        return format!(
            "#!ipxe\necho deployd: node {} is active; booting its local disk\n\
             iseq ${{platform}} efi && exit ||\n\
             sanboot --no-describe --drive 0x80 || exit\n",
            node.uuid()
        );
    }
    next_device(&format!(
        "node {} is {}, with nothing to boot from the network",
        node.uuid(),
        node.state()
    ))
}

fn ramdisk_script(server: &BootServer, node: &Node, mac: &str) -> String {
    let base = server.images.base_url.trim_end_matches('/');
    let info = &node.body.driver_info;
    let url = |which: &str| -> Result<String, String> {
        let given = info
            .get(which)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .ok_or_else(|| format!("node {} has no driver_info.{which}", node.uuid()))?;
        if given.starts_with("http://") || given.starts_with("https://") {
            return Ok(given.to_owned());
        }
        match server
            .images
            .resolve_field(&format!("driver_info.{which}"), given)
        {
            Some(Ok(_)) => Ok(format!("{base}/boot/{}/{which}", node.uuid())),
            Some(Err(e)) => Err(e),
            None => Err(format!(
                "driver_info.{which} {given:?} is neither a url nor a path"
            )),
        }
    };
    let (kernel_field, ramdisk_field) = ramdisk_params::ramdisk_fields(node);
    let (kernel, ramdisk) = match (url(kernel_field), url(ramdisk_field)) {
        (Ok(k), Ok(r)) => (k, r),
        (Err(e), _) | (_, Err(e)) => return next_device(&e),
    };
    let params = ramdisk_params::agent_params(base, node, Some(mac), &server.kernel_append_params);
    let mut text = String::from("#!ipxe\n");
    let _ = writeln!(
        text,
        "echo deployd: node {} boots its ramdisk ({})",
        node.uuid(),
        node.state()
    );
    let _ = writeln!(text, "imgfree");
    let _ = writeln!(
        text,
        "kernel {kernel} {params} initrd=deploy_ramdisk || goto failed"
    );
    let _ = writeln!(
        text,
        "initrd --name deploy_ramdisk {ramdisk} || goto failed"
    );
    text.push_str("boot\n:failed\necho deployd: the ramdisk could not be loaded\nexit\n");
    text
}

/// A local deploy kernel or ramdisk, if the node names it and the allow-list admits it.
async fn file(
    State(server): State<Arc<BootServer>>,
    Path((node, which)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    let not_found = || (StatusCode::NOT_FOUND, "no such boot file").into_response();
    if !matches!(
        which.as_str(),
        "deploy_kernel" | "deploy_ramdisk" | "rescue_kernel" | "rescue_ramdisk"
    ) {
        return not_found();
    }
    let Ok(uuid) = Uuid::parse_str(&node) else {
        return not_found();
    };
    let Ok(node) = server.store.node(uuid).await else {
        return not_found();
    };
    let given = node.body.driver_info.get(&which).and_then(Value::as_str);
    let Some(Ok(path)) = given.and_then(|g| server.images.resolve(g)) else {
        return not_found();
    };
    match tokio::fs::File::open(&path).await {
        Ok(file) => send(file, &headers).await,
        Err(_) => not_found(),
    }
}

/// A node's virtual media ISO (see [`crate::boot_iso`]): only while the node boots its
/// ramdisk and with the token its BMC was given; built here if this engine has not yet.
async fn iso(
    State(server): State<Arc<BootServer>>,
    Path((node, token)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    let not_found = || (StatusCode::NOT_FOUND, "no such boot ISO").into_response();
    let Ok(uuid) = Uuid::parse_str(&node) else {
        return not_found();
    };
    let Ok(node) = server.store.node(uuid).await else {
        return not_found();
    };
    let held = node.body.driver_internal_info.get(boot_iso::TOKEN);
    if !held
        .and_then(Value::as_str)
        .is_some_and(|t| same_secret(t, &token))
        || !runs_ramdisk(node.state())
    {
        return not_found();
    }
    let path = match server.isos.prepare(&node, &token).await {
        Ok(path) => path,
        Err(e) => {
            tracing::warn!(node = %uuid, "the boot ISO could not be built: {e}");
            return (StatusCode::INTERNAL_SERVER_ERROR, e).into_response();
        }
    };
    match tokio::fs::File::open(&path).await {
        Ok(file) => send(file, &headers).await,
        Err(_) => not_found(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bootif_is_pxelinux_style() {
        assert_eq!(
            ramdisk_params::bootif("52:54:00:12:34:56"),
            "01-52-54-00-12-34-56"
        );
    }
}
