//! Images given as local paths. An operator may set `instance_info.image_source` to a
//! file on the engine's host (`/srv/images/os.raw` or `file:///srv/images/os.raw`);
//! agents can only download over HTTP, so a deploy *stages* it.
//!
//! A local path is a way to read the engine's files, so it is held to an allow-list, as
//! Ironic's `file_url_allowed_paths` (CVE-2024-44082 was this hole):
//! - the path, with every symlink resolved, must be a regular file inside the images
//!   directory or one of `file_url_allowed_paths`;
//! - staging gives the deploy an unguessable token, kept in `driver_internal_info`, and
//!   sets `instance_info.image_url` to `<public url>/images/staged/<node>/<token>`;
//! - [`crate::image_server`] serves that url only while the node is in its deploy flow
//!   (`deploying`, `wait call-back`) with that token, checking the path again;
//! - the flow's end removes the token and the url ([`Images::unstage`]).
//!
//! Nothing is written to disk: the url names the node, and the node's record names the
//! file. An http(s) source needs none of this.

use std::path::{Path, PathBuf};

use base64::Engine;
use rand::RngCore;
use serde_json::Value;
use uuid::Uuid;

use crate::node::JsonMap;

/// driver_internal_info key of the token of the image staged for the current deploy.
pub const STAGED_TOKEN: &str = "image_staging_token";

/// Where local images may come from, and the url they are served at.
#[derive(Clone, Debug)]
pub struct Images {
    /// Plain files here are served at `/images/<name>`.
    pub dir: PathBuf,
    /// `http://host:port` as agents reach the engine.
    pub base_url: String,
    /// The images directory and `file_url_allowed_paths`, with symlinks resolved.
    allowed: Vec<PathBuf>,
    /// Whether an MD5 image checksum is accepted (`allow_md5_checksum`; off, as Ironic).
    pub allow_md5: bool,
    /// Bytes the images directory's filesystem keeps free: an image the engine downloads
    /// into its cache is refused rather than fill it (`[store] min_free_mb`, at most a
    /// tenth of the filesystem).
    pub keep_free: u64,
}

/// The local path an `image_source` names, if it names one.
fn local_path(source: &str) -> Option<&Path> {
    let path = source.strip_prefix("file://").unwrap_or(source);
    path.starts_with('/').then(|| Path::new(path))
}

impl Images {
    /// `dir` is created if missing; every allowed path must exist.
    pub fn new(
        dir: PathBuf,
        base_url: String,
        allowed_paths: &[PathBuf],
    ) -> Result<Images, String> {
        std::fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
        let allowed = std::iter::once(&dir)
            .chain(allowed_paths)
            .map(|p| {
                std::fs::canonicalize(p)
                    .map_err(|e| format!("file_url_allowed_paths: {}: {e}", p.display()))
            })
            .collect::<Result<_, _>>()?;
        Ok(Images {
            dir,
            base_url,
            allowed,
            allow_md5: false,
            keep_free: 0,
        })
    }

    /// A fresh, unguessable staging token.
    pub fn new_token() -> String {
        let mut bytes = [0u8; 32];
        rand::rng().fill_bytes(&mut bytes);
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
    }

    /// The url a staged image is served at with `token`.
    pub fn staged_url(&self, node: Uuid, token: &str) -> String {
        format!("{}{token}", self.url_prefix(node))
    }

    /// Where a node's deploy keeps an image the engine downloaded (a qcow2 from a url,
    /// served as its raw disk). A dot file: `/images/<name>` never serves it.
    pub fn cache_path(&self, node: Uuid) -> PathBuf {
        self.dir.join(format!(".deploy-{node}.qcow2"))
    }

    fn url_prefix(&self, node: Uuid) -> String {
        format!(
            "{}/images/staged/{node}/",
            self.base_url.trim_end_matches('/')
        )
    }

    /// The file a local `image_source` names, if it may be served: `None` for a url
    /// source, else the canonical path or why it is refused.
    pub fn resolve(&self, source: &str) -> Option<Result<PathBuf, String>> {
        self.resolve_field("image_source", source)
    }

    /// [`Images::resolve`] for a local path in another field (`driver_info.deploy_kernel`),
    /// which its refusal names.
    pub fn resolve_field(&self, field: &str, source: &str) -> Option<Result<PathBuf, String>> {
        let path = local_path(source)?;
        let refused = |why: String| Some(Err(format!("{field} {}: {why}", path.display())));
        let real = match std::fs::canonicalize(path) {
            Ok(p) => p,
            Err(e) => return refused(e.to_string()),
        };
        if !self.allowed.iter().any(|dir| real.starts_with(dir)) {
            return refused(format!(
                "local images must be in one of {} (file_url_allowed_paths)",
                self.allowed
                    .iter()
                    .map(|d| d.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        match std::fs::metadata(&real) {
            Ok(m) if m.is_file() => Some(Ok(real)),
            Ok(_) => refused("not a regular file".into()),
            Err(e) => refused(e.to_string()),
        }
    }

    /// Whether [`Images::stage`] has anything to do for this record.
    pub fn needs_staging(&self, node: Uuid, instance_info: &JsonMap) -> bool {
        let source = instance_info.get("image_source").and_then(Value::as_str);
        source.is_some_and(|s| local_path(s).is_some()) || self.ours(node, instance_info)
    }

    /// Stages a local `image_source` for a new deploy (a fresh token, and `image_url`),
    /// or clears an earlier staging when the source is a url. A local file that may not
    /// be served is an error the operator sees at once.
    pub fn stage(
        &self,
        node: Uuid,
        instance_info: &mut JsonMap,
        internal: &mut JsonMap,
    ) -> Result<(), String> {
        let source = instance_info.get("image_source").and_then(Value::as_str);
        match source.and_then(|s| self.resolve(s)) {
            None => {
                self.unstage(node, instance_info, internal);
                Ok(())
            }
            Some(Err(e)) => Err(e),
            Some(Ok(_)) => {
                let token = Images::new_token();
                let url = self.staged_url(node, &token);
                instance_info.insert("image_url".into(), Value::String(url));
                internal.insert(STAGED_TOKEN.into(), Value::String(token));
                Ok(())
            }
        }
    }

    /// Ends a staging: its token, the `image_url` it set and the image the engine cached
    /// for it are removed. Returns whether anything changed in the record.
    pub fn unstage(&self, node: Uuid, instance_info: &mut JsonMap, internal: &mut JsonMap) -> bool {
        match std::fs::remove_file(self.cache_path(node)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                tracing::warn!(%node, "removing the cached image: {e}");
            }
            _ => {}
        }
        let ours = self.ours(node, instance_info);
        if ours {
            instance_info.remove("image_url");
        }
        internal.remove(STAGED_TOKEN).is_some() || ours
    }

    /// Whether `image_url` is a staging url of this node's.
    fn ours(&self, node: Uuid, instance_info: &JsonMap) -> bool {
        instance_info
            .get("image_url")
            .and_then(Value::as_str)
            .is_some_and(|u| u.starts_with(&self.url_prefix(node)))
    }
}

/// Compares two secrets in time that does not depend on where they differ.
pub fn same_secret(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn images(dir: &Path, allowed: &[PathBuf]) -> Images {
        Images::new(dir.join("images"), "http://127.0.0.1:6385".into(), allowed).unwrap()
    }

    fn info(source: &str) -> JsonMap {
        json!({ "image_source": source })
            .as_object()
            .unwrap()
            .clone()
    }

    #[test]
    fn an_allowed_file_gets_a_fresh_token_and_url_per_deploy() {
        let dir = tempfile::tempdir().unwrap();
        let allowed = dir.path().join("srv");
        std::fs::create_dir(&allowed).unwrap();
        let file = allowed.join("os.raw");
        std::fs::write(&file, b"image").unwrap();
        let images = images(dir.path(), std::slice::from_ref(&allowed));
        let node = Uuid::new_v4();
        let mut urls = Vec::new();
        for source in [
            file.display().to_string(),
            format!("file://{}", file.display()),
        ] {
            let (mut info, mut internal) = (info(&source), JsonMap::new());
            images.stage(node, &mut info, &mut internal).unwrap();
            let token = internal[STAGED_TOKEN].as_str().unwrap().to_owned();
            assert_eq!(token.len(), 43);
            let url = info["image_url"].as_str().unwrap().to_owned();
            assert_eq!(
                url,
                format!("http://127.0.0.1:6385/images/staged/{node}/{token}")
            );
            urls.push(url);
            assert!(images.unstage(node, &mut info, &mut internal));
            assert!(!info.contains_key("image_url") && internal.is_empty());
        }
        assert_ne!(urls[0], urls[1], "every deploy gets its own token");
    }

    #[test]
    fn files_outside_the_allowed_directories_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let images = images(dir.path(), &[]);
        let outside = dir.path().join("secret");
        std::fs::write(&outside, b"secret").unwrap();
        // A symlink inside the images directory that points out of it.
        let link = dir.path().join("images").join("escape.raw");
        std::os::unix::fs::symlink(&outside, &link).unwrap();
        let sub = dir.path().join("images").join("sub");
        std::fs::create_dir(&sub).unwrap();
        for source in [
            "/etc/shadow".to_owned(),
            "file:///etc/passwd".to_owned(),
            outside.display().to_string(),
            link.display().to_string(),
            format!("{}/images/../secret", dir.path().display()),
            sub.display().to_string(),
            "/no/such/image.raw".to_owned(),
        ] {
            let (mut info, mut internal) = (info(&source), JsonMap::new());
            let e = images.stage(Uuid::new_v4(), &mut info, &mut internal);
            assert!(e.is_err(), "{source} was staged");
            assert!(!info.contains_key("image_url") && internal.is_empty());
        }
        let inside = dir.path().join("images").join("os.raw");
        std::fs::write(&inside, b"image").unwrap();
        let (mut info, mut internal) = (info(&inside.display().to_string()), JsonMap::new());
        images
            .stage(Uuid::new_v4(), &mut info, &mut internal)
            .unwrap();
    }

    #[test]
    fn a_url_needs_nothing_and_clears_an_old_staging() {
        let dir = tempfile::tempdir().unwrap();
        let images = images(dir.path(), &[]);
        let node = Uuid::new_v4();
        let ours = format!("http://127.0.0.1:6385/images/staged/{node}/abc");
        let mut info = json!({"image_source": "http://x/os.raw", "image_url": ours})
            .as_object()
            .unwrap()
            .clone();
        let mut internal = json!({ STAGED_TOKEN: "abc" }).as_object().unwrap().clone();
        assert!(images.needs_staging(node, &info));
        images.stage(node, &mut info, &mut internal).unwrap();
        assert!(!info.contains_key("image_url") && internal.is_empty());
        let mut info =
            json!({"image_source": "http://x/os.raw", "image_url": "http://mirror/os.raw"})
                .as_object()
                .unwrap()
                .clone();
        assert!(!images.needs_staging(node, &info));
        assert!(!images.unstage(node, &mut info, &mut JsonMap::new()));
        assert_eq!(info["image_url"], json!("http://mirror/os.raw"));
    }

    #[test]
    fn a_missing_allowed_directory_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let e = Images::new(
            dir.path().join("images"),
            "http://x".into(),
            &[dir.path().join("nope")],
        )
        .unwrap_err();
        assert!(
            e.contains("file_url_allowed_paths") && e.contains("nope"),
            "{e}"
        );
    }

    #[test]
    fn secrets_compare_by_content() {
        assert!(same_secret("abc", "abc"));
        assert!(!same_secret("abc", "abd"));
        assert!(!same_secret("abc", "ab"));
    }
}
