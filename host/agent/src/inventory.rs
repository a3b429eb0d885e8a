//! In-band inspection: the machine's inventory, in the shape ironic-python-agent reports
//! it (`cpu`, `memory`, `disks`, `interfaces`), posted to the engine's
//! `POST /v1/continue_inspection` at boot, before lookup, as IPA does with its inspection
//! collectors on. An engine that awaits no inspection from this machine answers 404 and
//! the agent goes on to lookup.

use std::path::Path;

use deployd_client::{Client, ClientError};
use serde_json::{Value, json};

use crate::runner::AgentArgs;

/// What this machine has. With `--disk`, that disk is the machine's only one (a file for
/// a simulated machine); otherwise the disks of `/sys/block`, with what root device hints
/// match on.
pub fn collect(args: &AgentArgs) -> Value {
    let disks: Vec<Value> = match &args.disk {
        Some(disk) => vec![json!({
            "name": disk.display().to_string(),
            "size": size_of(disk),
            "model": "", "vendor": "", "serial": "", "wwn": "", "rotational": false,
        })],
        None => crate::root_disk::disks(Path::new("/sys/block"))
            .unwrap_or_default()
            .into_iter()
            .map(|d| {
                json!({
                    "name": format!("/dev/{}", d.name), "size": d.size, "model": d.model,
                    "vendor": d.vendor, "serial": d.serial, "wwn": d.wwn,
                    "rotational": d.rotational, "hctl": d.hctl,
                })
            })
            .collect(),
    };
    let interfaces: Vec<Value> = args
        .macs
        .iter()
        .enumerate()
        .map(|(i, mac)| json!({"name": format!("eth{i}"), "mac_address": mac.to_ascii_lowercase()}))
        .collect();
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    json!({
        "cpu": {"count": cpus, "architecture": std::env::consts::ARCH},
        "memory": {"physical_mb": memory_mb()},
        "disks": disks,
        "interfaces": interfaces,
    })
}

/// A file's length, or a block device's size from `/sys/class/block`.
fn size_of(disk: &Path) -> u64 {
    let sectors = disk
        .file_name()
        .map(|n| Path::new("/sys/class/block").join(n).join("size"))
        .and_then(|p| std::fs::read_to_string(p).ok())
        .and_then(|s| s.trim().parse::<u64>().ok());
    match sectors {
        Some(s) => s * 512,
        None => std::fs::metadata(disk).map(|m| m.len()).unwrap_or(0),
    }
}

/// `MemTotal` of `/proc/meminfo`, in MiB.
fn memory_mb() -> u64 {
    let info = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    info.lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb / 1024)
}

/// Posts the inventory; whether the engine took it (an inspection awaited it).
pub async fn post(client: &Client, args: &AgentArgs) -> bool {
    let body = json!({"inventory": collect(args)});
    match client.post("/v1/continue_inspection", &body).await {
        Ok(_) => {
            tracing::info!("inventory posted for inspection");
            true
        }
        Err(ClientError::Api { status: 404, .. }) => {
            tracing::debug!("no inspection awaits this machine");
            false
        }
        Err(e) => {
            tracing::warn!("posting the inventory failed: {e}");
            false
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_inventory_names_the_given_disk_and_macs() {
        let dir = tempfile::tempdir().unwrap();
        let disk = dir.path().join("disk.img");
        std::fs::write(&disk, vec![0u8; 4096]).unwrap();
        let args = crate::AgentArgs {
            macs: vec!["52:54:00:AA:00:01".into()],
            disk: Some(disk),
            ..crate::runner::test_args()
        };
        let inventory = super::collect(&args);
        assert_eq!(inventory["disks"][0]["size"], 4096);
        assert_eq!(
            inventory["interfaces"][0]["mac_address"],
            "52:54:00:aa:00:01"
        );
        assert_eq!(inventory["cpu"]["architecture"], std::env::consts::ARCH);
        assert!(inventory["memory"]["physical_mb"].as_u64().unwrap() > 0);
    }
}
