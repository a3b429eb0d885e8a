//! Virtual media boot's ISOs (the `redfish-virtual-media` boot interface, Ironic's
//! `prepare_deploy_iso`): [`IsoMaker`] builds a node's ISO ([`image`]) once per token into
//! the engine's data directory and names the url its BMC fetches it at.
//!
//! The deploy kernel, ramdisk and bootloader are local files the images' allow-list
//! admits, or http(s) urls, downloaded for each build.

mod image;

pub use image::{IsoError, Parts, build};

use std::path::{Path, PathBuf};

use serde_json::Value;
use sha2::{Digest, Sha256};
use uuid::Uuid;

use crate::images::Images;
use crate::node::Node;

/// Where a node's ISO token is kept (`driver_internal_info`) while its BMC may fetch the
/// ISO: the ISO's url holds it, and the url is refused once it is gone.
pub const TOKEN: &str = "deployd_boot_iso_token";

/// The engine's side of virtual media boot: each node's ISO, built once per token into
/// the engine's data directory, and the url its BMC fetches it at.
#[derive(Debug)]
pub struct IsoMaker {
    images: Images,
    dir: PathBuf,
    kernel_append_params: String,
    /// How BMCs reach the engine (`[deploy] external_http_url`, else the public url).
    external_url: String,
    /// One build at a time: a second asker for the same ISO waits and finds it built.
    building: tokio::sync::Mutex<()>,
    /// Downloads the parts given as urls.
    http: reqwest::Client,
}

/// Where one of an ISO's parts comes from: a local file, or a url downloaded for each
/// build (the ISO itself is kept for the node's token).
#[derive(Debug)]
enum Source {
    Local(PathBuf),
    Url(String),
}

impl IsoMaker {
    pub fn new(
        images: Images,
        dir: PathBuf,
        kernel_append_params: String,
        external_url: String,
    ) -> IsoMaker {
        IsoMaker {
            images,
            dir,
            kernel_append_params,
            external_url: external_url.trim_end_matches('/').to_owned(),
            building: tokio::sync::Mutex::new(()),
            http: reqwest::Client::builder()
                .connect_timeout(std::time::Duration::from_secs(10))
                .build()
                .expect("an HTTP client"),
        }
    }

    /// The url the node's BMC fetches its ISO at.
    pub fn url(&self, node: Uuid, token: &str) -> String {
        format!("{}/boot/{node}/iso/{token}", self.external_url)
    }

    /// Where the ISO of these parts for this token is kept: named by both, so a node
    /// whose parts changed under the same token (a new bootloader, say) gets a new one.
    fn path(&self, node: Uuid, token: &str, parts: &impl std::fmt::Debug) -> PathBuf {
        let mut hash = Sha256::new();
        hash.update(token.as_bytes());
        hash.update(format!("{parts:?}").as_bytes());
        let tag = hex::encode(&hash.finalize()[..8]);
        self.dir.join(format!("{node}-{tag}.iso"))
    }

    /// Where the node's `driver_info.<which>` comes from, if it names one: a local file
    /// the images' allow-list admits, or an http(s) url.
    fn source(&self, node: &Node, which: &str) -> Result<Option<Source>, String> {
        let Some(given) = node
            .body
            .driver_info
            .get(which)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
        else {
            return Ok(None);
        };
        if given.starts_with("http://") || given.starts_with("https://") {
            return Ok(Some(Source::Url(given.to_owned())));
        }
        match self
            .images
            .resolve_field(&format!("driver_info.{which}"), given)
        {
            Some(result) => result.map(|p| Some(Source::Local(p))),
            None => Err(format!(
                "driver_info.{which} {given:?} is neither a local path nor an http(s) url"
            )),
        }
    }

    fn required(&self, node: &Node, which: &str) -> Result<Source, String> {
        self.source(node, which)?
            .ok_or_else(|| format!("node {} has no driver_info.{which}", node.uuid()))
    }

    /// A part as a local file: itself, or its url downloaded into `into`.
    async fn fetch(&self, source: Source, which: &str, into: &Path) -> Result<PathBuf, String> {
        use tokio::io::AsyncWriteExt;
        let url = match source {
            Source::Local(path) => return Ok(path),
            Source::Url(url) => url,
        };
        let failed = |e: String| format!("downloading driver_info.{which} {url}: {e}");
        let mut response = self
            .http
            .get(&url)
            .send()
            .await
            .and_then(reqwest::Response::error_for_status)
            .map_err(|e| failed(e.to_string()))?;
        let path = into.join(which);
        let mut file = tokio::fs::File::create(&path)
            .await
            .map_err(|e| failed(e.to_string()))?;
        while let Some(chunk) = response.chunk().await.map_err(|e| failed(e.to_string()))? {
            file.write_all(&chunk)
                .await
                .map_err(|e| failed(e.to_string()))?;
        }
        file.flush().await.map_err(|e| failed(e.to_string()))?;
        Ok(path)
    }

    /// The node's ISO for `token`, built now if this engine has not built it yet.
    pub async fn prepare(&self, node: &Node, token: &str) -> Result<PathBuf, String> {
        let (kernel_field, ramdisk_field) = crate::ramdisk_params::ramdisk_fields(node);
        let kernel = self.required(node, kernel_field)?;
        let ramdisk = self.required(node, ramdisk_field)?;
        let bootloader = self.source(node, "bootloader")?;
        let cmdline = format!(
            "{} boot_method=vmedia{}",
            crate::ramdisk_params::agent_params(
                &self.images.base_url,
                node,
                None,
                &self.kernel_append_params
            ),
            // DHCP-less: the address the node's network_data gives.
            crate::ramdisk_params::static_network(node)
                .map(|p| format!(" {p}"))
                .unwrap_or_default()
        );
        let sources = (&kernel, &ramdisk, &bootloader, &cmdline);
        let path = self.path(node.uuid(), token, &sources);
        let _one = self.building.lock().await;
        if path.exists() {
            return Ok(path);
        }
        std::fs::create_dir_all(&self.dir)
            .map_err(|e| format!("creating {}: {e}", self.dir.display()))?;
        let downloads = tempfile::tempdir_in(&self.dir)
            .map_err(|e| format!("a directory for the ISO's parts: {e}"))?;
        let bootloader = match bootloader {
            Some(source) => Some(self.fetch(source, "bootloader", downloads.path()).await?),
            None => None,
        };
        let parts = Parts {
            kernel: self.fetch(kernel, kernel_field, downloads.path()).await?,
            ramdisk: self.fetch(ramdisk, ramdisk_field, downloads.path()).await?,
            bootloader,
            cmdline,
        };
        let partial = path.with_extension("partial");
        let built = partial.clone();
        tokio::task::spawn_blocking(move || build(&parts, &built))
            .await
            .map_err(|e| format!("building the boot ISO: {e}"))?
            .map_err(|e| format!("building the boot ISO: {e}"))?;
        std::fs::rename(&partial, &path).map_err(|e| format!("keeping {}: {e}", path.display()))?;
        Ok(path)
    }

    /// Removes the node's ISOs this engine built.
    pub fn forget(&self, node: Uuid) {
        let prefix = format!("{node}-");
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return;
        };
        for entry in entries.flatten() {
            if entry.file_name().to_string_lossy().starts_with(&prefix) {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    /// Parts given as urls are downloaded for the build; one that cannot be is named.
    #[tokio::test]
    async fn parts_given_as_urls_are_downloaded() {
        let dir = tempfile::tempdir().unwrap();
        let kernel = vec![7u8; 150_000];
        let served = kernel.clone();
        let app = axum::Router::new()
            .route(
                "/deploy.kernel",
                axum::routing::get(move || async move { served.clone() }),
            )
            .route(
                "/deploy.initrd",
                axum::routing::get(|| async { vec![8u8; 90_000] }),
            );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await });
        let images = Images::new(dir.path().join("images"), base.clone(), &[]).unwrap();
        let isos = IsoMaker::new(images, dir.path().join("iso"), String::new(), base.clone());
        let node = |kernel: &str| {
            let body = serde_json::from_value(serde_json::json!({
                "uuid": "1be26c0b-03f2-4d2e-ae87-c02d7f33c123", "name": null,
                "driver": "redfish", "instance_info": {}, "properties": {}, "extra": {},
                "driver_info": {
                    "deploy_kernel": format!("{base}{kernel}"),
                    "deploy_ramdisk": format!("{base}/deploy.initrd"),
                },
                "driver_internal_info": {}, "last_error": null, "power_state": null,
                "target_power_state": null, "maintenance": false, "maintenance_reason": null,
                "reservation": null, "interfaces": {}, "attrs": {},
                "created_at": "2026-01-01T00:00:00Z", "updated_at": null
            }))
            .unwrap();
            Node::waiting_for_tests(body)
        };
        let iso = isos.prepare(&node("/deploy.kernel"), "t1").await.unwrap();
        let out = dir.path().join("vmlinuz");
        let got = Command::new("xorriso")
            .args(["-osirrox", "on", "-indev"])
            .arg(&iso)
            .args(["-extract", "/isolinux/vmlinuz"])
            .arg(&out)
            .output()
            .unwrap();
        assert!(got.status.success(), "{got:?}");
        assert_eq!(std::fs::read(out).unwrap(), kernel);
        let missing = isos.prepare(&node("/gone"), "t2").await.unwrap_err();
        assert!(
            missing.contains("downloading driver_info.deploy_kernel") && missing.contains("404"),
            "{missing}"
        );
        // What was downloaded went with the build.
        let left: Vec<_> = std::fs::read_dir(dir.path().join("iso"))
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        assert!(left.iter().all(|f| f.ends_with(".iso")), "{left:?}");
    }
}
