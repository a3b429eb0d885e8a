//! A deploy's image, made ready by the engine before the machine boots (Ironic's
//! `build_instance_info_for_deploy` with `force_raw_images`): its checksum resolved (a
//! digest, or a line of a checksum file), its format told by its content, and a qcow2
//! verified against the operator's checksum, read through to prove it whole, and served
//! to agents as the raw disk it holds, with the raw disk's own sha256 for them to check.
//!
//! A deploy whose image cannot be deployed (an unsupported format, a qcow2 with a backing
//! file, a wrong checksum) fails here, with the reason as `last_error`, before any power
//! is switched. The result is kept in `driver_internal_info.deploy_image`, which drivers
//! read as the node's `image` (see the WIT's `node.get`).

pub mod checksum;
pub mod format;
pub mod raw_view;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::images::Images;
use crate::node::Node;
use checksum::{Expected, Given};
use deployd_wire::checksum::Hasher;
use format::Format;
use raw_view::RawView;

/// driver_internal_info key of the prepared image.
pub const DEPLOY_IMAGE: &str = "deploy_image";

/// The image as agents get it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Prepared {
    /// Where agents download the disk's bytes.
    pub url: String,
    /// What is served: always a raw disk.
    pub disk_format: String,
    /// What the operator's file is: raw or qcow2.
    pub source_format: String,
    pub os_hash_algo: String,
    pub os_hash_value: String,
    /// The raw disk's size, when the engine read the image through (qcow2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    /// The image was downloaded into the engine's cache (a qcow2 from a url).
    #[serde(default)]
    pub cached: bool,
    /// Where the agent downloads the deploy's config drive, if it has one (see
    /// [`crate::config_drive`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub configdrive: Option<String>,
}

impl Prepared {
    /// The prepared image a node's record holds, if its deploy prepared one.
    pub fn of(node: &Node) -> Option<Prepared> {
        let value = node.body.driver_internal_info.get(DEPLOY_IMAGE)?;
        serde_json::from_value(value.clone()).ok()
    }
}

/// A prepared image, and the staging token it needs if the engine must serve it and no
/// earlier staging gave one (a url's qcow2, now in the cache).
pub struct Preparation {
    pub image: Prepared,
    pub new_token: Option<String>,
}

/// Prepares images: fetches checksum files and remote heads, hashes, caches.
pub struct Preparer {
    images: Option<Images>,
    http: reqwest::Client,
}

fn text<'a>(node: &'a Node, key: &str) -> Option<&'a str> {
    let info = &node.body.instance_info;
    info.get(key)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

fn mismatch(expected: &Expected, actual: &str) -> String {
    format!(
        "image checksum mismatch: expected {} {}, got {actual}",
        expected.algo, expected.value
    )
}

impl Preparer {
    pub fn new(images: Option<Images>) -> Preparer {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .build()
            .expect("an HTTP client");
        Preparer { images, http }
    }

    pub async fn prepare(&self, node: &Node) -> Result<Preparation, String> {
        let source = text(node, "image_source").ok_or("instance_info.image_source is required")?;
        let name = source.rsplit('/').next().unwrap_or(source).to_owned();
        let allow_md5 = self.images.as_ref().is_some_and(|i| i.allow_md5);
        let expected = match checksum::given(&node.body.instance_info, &name, allow_md5)? {
            Given::Digest(e) => e,
            Given::File { url, image } => {
                checksum::fetch(&self.http, &url, &image, allow_md5).await?
            }
        };
        let declared = text(node, "image_disk_format");
        let url = text(node, "image_url").unwrap_or(source).to_owned();
        let local = self.images.as_ref().and_then(|i| i.resolve(source));
        let raw = |url: String, e: Expected| Prepared {
            url,
            disk_format: "raw".into(),
            source_format: "raw".into(),
            os_hash_algo: e.algo,
            os_hash_value: e.value,
            size: None,
            cached: false,
            configdrive: None,
        };
        let done = |image| Preparation {
            image,
            new_token: None,
        };
        match local {
            Some(Err(e)) => Err(e),
            Some(Ok(path)) => {
                let declared = declared.map(str::to_owned);
                let want = expected.clone();
                let found = blocking(move || {
                    let found = head_of(&path)?;
                    format::check(found, declared.as_deref())?;
                    match found {
                        Format::Qcow2 => qcow2(&path, &want).map(|r| (found, Some(r))),
                        _ => Ok((found, None)),
                    }
                });
                let (found, qcow2) = found.await?;
                Ok(done(match (found, qcow2) {
                    (_, Some(image)) => Prepared { url, ..image },
                    _ => raw(url, expected),
                }))
            }
            None => {
                let found = format::detect(&self.remote_head(&url).await?);
                format::check(found, declared)?;
                if found != Format::Qcow2 {
                    return Ok(done(raw(url, expected)));
                }
                let images = self.images.as_ref().ok_or(
                    "a qcow2 image from a url needs the engine's images directory to convert it",
                )?;
                let cache = images.cache_path(node.uuid());
                let room = Room {
                    dir: &images.dir,
                    keep_free: images.keep_free,
                };
                if let Err(e) = self.download(&url, &cache, &expected, room).await {
                    let _ = tokio::fs::remove_file(&cache).await;
                    return Err(e);
                }
                let image = blocking(move || qcow2_view(&cache)).await?;
                let token = Images::new_token();
                Ok(Preparation {
                    image: Prepared {
                        url: images.staged_url(node.uuid(), &token),
                        cached: true,
                        ..image
                    },
                    new_token: Some(token),
                })
            }
        }
    }

    /// The first [`format::HEAD`] bytes of a remote image (a ranged GET; a server that
    /// ignores the range is read no further).
    async fn remote_head(&self, url: &str) -> Result<Vec<u8>, String> {
        let failed = |e: reqwest::Error| format!("reading the image {url}: {e}");
        let mut response = self
            .http
            .get(url)
            .header("Range", format!("bytes=0-{}", format::HEAD - 1))
            .send()
            .await
            .and_then(reqwest::Response::error_for_status)
            .map_err(failed)?;
        let mut head = Vec::with_capacity(format::HEAD);
        while head.len() < format::HEAD {
            match response.chunk().await.map_err(failed)? {
                Some(chunk) => head.extend_from_slice(&chunk),
                None => break,
            }
        }
        head.truncate(format::HEAD);
        Ok(head)
    }

    /// Downloads an image into the engine's cache, checking the operator's checksum, and
    /// that the cache's disk keeps its free space (before: by the image's announced size;
    /// while writing: every [`Room::EVERY`] bytes). The caller removes what is left of a
    /// failed download.
    async fn download(
        &self,
        url: &str,
        to: &Path,
        expected: &Expected,
        room: Room<'_>,
    ) -> Result<(), String> {
        use tokio::io::AsyncWriteExt;
        let failed = |e: String| format!("downloading the image {url}: {e}");
        let mut response = self
            .http
            .get(url)
            .send()
            .await
            .and_then(reqwest::Response::error_for_status)
            .map_err(|e| failed(e.to_string()))?;
        room.check(response.content_length().unwrap_or(0))
            .map_err(failed)?;
        let mut file = tokio::fs::File::create(to)
            .await
            .map_err(|e| failed(format!("{}: {e}", to.display())))?;
        let mut hasher = Hasher::new(&expected.algo)?;
        let mut unchecked = 0;
        while let Some(chunk) = response.chunk().await.map_err(|e| failed(e.to_string()))? {
            hasher.update(&chunk);
            unchecked += chunk.len() as u64;
            if unchecked >= Room::EVERY {
                room.check(unchecked).map_err(failed)?;
                unchecked = 0;
            }
            file.write_all(&chunk)
                .await
                .map_err(|e| failed(format!("{}: {e}", to.display())))?;
        }
        file.flush().await.map_err(|e| failed(e.to_string()))?;
        let actual = hasher.hex();
        if actual != expected.value {
            return Err(mismatch(expected, &actual));
        }
        Ok(())
    }
}

/// The free space the images directory keeps while an image is written into it.
#[derive(Clone, Copy)]
struct Room<'a> {
    dir: &'a Path,
    keep_free: u64,
}

impl Room<'_> {
    /// How many bytes are written between two readings of the free space.
    const EVERY: u64 = 8 << 20;

    /// Refuses when writing `bytes` more would leave less than the floor free.
    fn check(&self, bytes: u64) -> Result<(), String> {
        let Some(free) = crate::disk_space::free(self.dir) else {
            return Ok(());
        };
        if free.saturating_sub(bytes) >= self.keep_free {
            return Ok(());
        }
        use crate::disk_space::mib;
        Err(format!(
            "the images directory's disk ({}) has {} MiB free and keeps {} MiB free: {} MiB more of the image do not fit; nothing was left in its cache",
            self.dir.display(),
            mib(free),
            mib(self.keep_free),
            mib(bytes).max(1)
        ))
    }
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, String> + Send + 'static,
) -> Result<T, String> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| format!("preparing the image: {e}"))?
}

/// The format of a local image file.
fn head_of(path: &Path) -> Result<Format, String> {
    let mut head = Vec::with_capacity(format::HEAD);
    std::fs::File::open(path)
        .and_then(|f| f.take(format::HEAD as u64).read_to_end(&mut head))
        .map_err(|e| format!("reading the image {}: {e}", path.display()))?;
    Ok(format::detect(&head))
}

/// A local qcow2: its file checked against the operator's checksum, then read through.
fn qcow2(path: &Path, expected: &Expected) -> Result<Prepared, String> {
    let mut hasher = Hasher::new(&expected.algo)?;
    let mut file = std::fs::File::open(path)
        .map_err(|e| format!("reading the image {}: {e}", path.display()))?;
    let mut buf = vec![0u8; raw_view::CHUNK];
    loop {
        let n = file
            .read(&mut buf)
            .map_err(|e| format!("reading the image {}: {e}", path.display()))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    let actual = hasher.hex();
    if actual != expected.value {
        return Err(mismatch(expected, &actual));
    }
    qcow2_view(path)
}

/// The raw disk a (verified) qcow2 holds: its size and sha256.
fn qcow2_view(path: &Path) -> Result<Prepared, String> {
    let mut view = RawView::open(path)?;
    let digest = view.digest("sha256")?;
    Ok(Prepared {
        url: String::new(),
        disk_format: "raw".into(),
        source_format: "qcow2".into(),
        os_hash_algo: "sha256".into(),
        os_hash_value: digest,
        size: Some(view.size()),
        cached: false,
        configdrive: None,
    })
}

/// Whether a node's staged url serves a qcow2 as its raw disk, and from which file.
pub fn served_file(images: &Images, node: &Node) -> Option<(PathBuf, bool)> {
    let prepared = Prepared::of(node);
    let qcow2 = prepared
        .as_ref()
        .is_some_and(|p| p.source_format == "qcow2");
    if prepared.as_ref().is_some_and(|p| p.cached) {
        return Some((images.cache_path(node.uuid()), true));
    }
    let source = text(node, "image_source")?;
    let path = images.resolve(source)?.ok()?;
    Some((path, qcow2))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_image_fits_only_where_the_disk_keeps_its_floor_free_beside_it() {
        let dir = tempfile::tempdir().unwrap();
        let free = crate::disk_space::free(dir.path()).unwrap();
        let room = |keep_free| Room {
            dir: dir.path(),
            keep_free,
        };
        assert_eq!(room(0).check(1 << 20), Ok(()));
        // A floor just inside what is free takes nothing that fills it.
        let floor = free.saturating_sub(64 << 20);
        assert_eq!(room(floor).check(1 << 20), Ok(()));
        let refused = room(floor).check(128 << 20).unwrap_err();
        assert!(refused.contains("keeps"), "{refused}");
        assert!(
            refused.contains("128 MiB more of the image do not fit"),
            "{refused}"
        );
    }
}
