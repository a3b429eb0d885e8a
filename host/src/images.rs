//! Images given as local paths. An operator may set `instance_info.image_source` to a
//! file on the engine's host (`/srv/images/os.raw` or `file:///srv/images/os.raw`);
//! agents can only download over HTTP, so a deploy *stages* it: a symlink named after the
//! node in the engine's image directory, served by [`crate::image_server`] at
//! `<public url>/images/<node uuid>`, and that url set as `instance_info.image_url`
//! (which drivers prefer to `image_source`). An http(s) source needs nothing.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};
use uuid::Uuid;

/// The directory images are served from, and the url it is served at.
#[derive(Clone, Debug)]
pub struct Images {
    pub dir: PathBuf,
    /// `http://host:port` as agents reach the engine.
    pub base_url: String,
}

/// The local path an `image_source` names, if it names one.
fn local_path(source: &str) -> Option<&Path> {
    let path = source.strip_prefix("file://").unwrap_or(source);
    path.starts_with('/').then(|| Path::new(path))
}

impl Images {
    fn url(&self, node: Uuid) -> String {
        format!("{}/images/{node}", self.base_url.trim_end_matches('/'))
    }

    /// Stages a local `image_source` (or unstages a stale one) in `instance_info`.
    /// Returns whether `instance_info` changed; an unreadable local file is an error
    /// the operator sees at once.
    pub fn stage(
        &self,
        node: Uuid,
        instance_info: &mut Map<String, Value>,
    ) -> Result<bool, String> {
        let ours = self.url(node);
        let source = instance_info.get("image_source").and_then(Value::as_str);
        let Some(path) = source.and_then(local_path) else {
            // A url source: drop an image_url we set for an earlier local one.
            let stale = instance_info.get("image_url").and_then(Value::as_str) == Some(&ours);
            if stale {
                instance_info.remove("image_url");
            }
            return Ok(stale);
        };
        let meta =
            std::fs::metadata(path).map_err(|e| format!("image_source {}: {e}", path.display()))?;
        if !meta.is_file() {
            return Err(format!("image_source {} is not a file", path.display()));
        }
        std::fs::create_dir_all(&self.dir)
            .map_err(|e| format!("creating {}: {e}", self.dir.display()))?;
        let link = self.dir.join(node.to_string());
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(path, &link)
            .map_err(|e| format!("staging {} at {}: {e}", path.display(), link.display()))?;
        let changed = instance_info.get("image_url").and_then(Value::as_str) != Some(&ours);
        instance_info.insert("image_url".into(), Value::String(ours));
        Ok(changed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn images(dir: &Path) -> Images {
        Images {
            dir: dir.join("images"),
            base_url: "http://127.0.0.1:6385".into(),
        }
    }

    #[test]
    fn a_local_file_is_linked_and_served_by_node() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("os.raw");
        std::fs::write(&file, b"image").unwrap();
        let node = Uuid::new_v4();
        for source in [
            file.display().to_string(),
            format!("file://{}", file.display()),
        ] {
            let mut info = json!({"image_source": source}).as_object().unwrap().clone();
            images(dir.path()).stage(node, &mut info).unwrap();
            assert_eq!(
                info["image_url"],
                json!(format!("http://127.0.0.1:6385/images/{node}"))
            );
            let served = dir.path().join("images").join(node.to_string());
            assert_eq!(std::fs::read(served).unwrap(), b"image");
        }
    }

    #[test]
    fn a_url_needs_nothing_and_clears_an_old_staging() {
        let dir = tempfile::tempdir().unwrap();
        let node = Uuid::new_v4();
        let ours = format!("http://127.0.0.1:6385/images/{node}");
        let mut info = json!({"image_source": "http://x/os.raw", "image_url": ours})
            .as_object()
            .unwrap()
            .clone();
        assert!(images(dir.path()).stage(node, &mut info).unwrap());
        assert!(!info.contains_key("image_url"));
        let mut info =
            json!({"image_source": "http://x/os.raw", "image_url": "http://mirror/os.raw"})
                .as_object()
                .unwrap()
                .clone();
        assert!(!images(dir.path()).stage(node, &mut info).unwrap());
        assert_eq!(info["image_url"], json!("http://mirror/os.raw"));
    }

    #[test]
    fn a_missing_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let mut info = json!({"image_source": "/no/such/image.raw"})
            .as_object()
            .unwrap()
            .clone();
        let e = images(dir.path())
            .stage(Uuid::new_v4(), &mut info)
            .unwrap_err();
        assert!(e.contains("/no/such/image.raw"), "{e}");
    }
}
