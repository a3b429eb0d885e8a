//! Compiled drivers on disk, verified before they run.
//!
//! Loading a compiled artifact is `unsafe`: wasmtime maps its bytes as native code and
//! trusts them. A flipped bit in the file would run as corrupted machine code (an `int3`
//! stops the engine with SIGTRAP at every start). So each artifact carries a digest, and
//! nothing is deserialized unless the digest matches:
//!
//! ```text
//! deployd-cwasm-1\n | sha256(component hash, compatibility key, code) | code
//! ```
//!
//! The digest covers the key the file is named by (the component's hash and the engine's
//! compatibility key: wasmtime's version and settings), so an artifact renamed to another
//! key fails too. A file that fails is logged, removed and compiled again. Writes go to a
//! file unique to the writer, fsynced, then renamed into place and the directory fsynced,
//! so a crash leaves the old artifact, the new one, or none: never half of one.

use std::io::Write;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::Component;

const MAGIC: &[u8] = b"deployd-cwasm-1\n";
const HEADER: usize = MAGIC.len() + 32;

/// The directory of compiled artifacts of one engine configuration.
pub struct ArtifactCache {
    dir: PathBuf,
    compat: String,
}

/// Why a cached artifact was not used.
#[derive(Debug, thiserror::Error)]
pub enum ArtifactError {
    #[error("it is not a deployd artifact (no header)")]
    NoHeader,
    #[error("its digest does not match its contents")]
    Digest,
    #[error("reading it: {0}")]
    Io(#[from] std::io::Error),
    #[error("wasmtime refused it: {0:#}")]
    Refused(wasmtime::Error),
}

impl ArtifactCache {
    /// A cache in `dir` (created) for an engine whose compatibility key is `compat`.
    pub fn new(dir: PathBuf, compat: String) -> std::io::Result<ArtifactCache> {
        std::fs::create_dir_all(&dir)?;
        Ok(ArtifactCache { dir, compat })
    }

    fn path(&self, hash: &str) -> PathBuf {
        self.dir.join(format!("{hash}-{}.cwasm", self.compat))
    }

    fn digest(&self, hash: &str, code: &[u8]) -> [u8; 32] {
        let mut h = Sha256::new();
        h.update(hash.as_bytes());
        h.update(b"\n");
        h.update(self.compat.as_bytes());
        h.update(b"\n");
        h.update(code);
        h.finalize().into()
    }

    /// The component compiled from the code whose sha256 is `hash`, if a verified artifact
    /// of it is cached. One that fails verification is removed (and logged), so the caller
    /// compiles and stores it again.
    pub fn load(&self, engine: &Engine, hash: &str) -> Option<Component> {
        let path = self.path(hash);
        match self.verified(engine, hash, &path) {
            Ok(Some(component)) => Some(component),
            Ok(None) => None,
            Err(e) => {
                tracing::warn!(path = %path.display(), "compiled driver artifact rejected, compiling again: {e}");
                let _ = std::fs::remove_file(&path);
                None
            }
        }
    }

    fn verified(
        &self,
        engine: &Engine,
        hash: &str,
        path: &Path,
    ) -> Result<Option<Component>, ArtifactError> {
        let bytes = match std::fs::read(path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        if bytes.len() < HEADER || !bytes.starts_with(MAGIC) {
            return Err(ArtifactError::NoHeader);
        }
        let (digest, code) = bytes[MAGIC.len()..].split_at(32);
        if digest != self.digest(hash, code) {
            return Err(ArtifactError::Digest);
        }
        // SAFETY: `code` is, byte for byte, what `Component::serialize` produced for this
        // component under this engine's compatibility key (the digest above covers both),
        // written by `store` below into the engine's own data directory.
        #[allow(unsafe_code)]
        let component =
            unsafe { Component::deserialize(engine, code) }.map_err(ArtifactError::Refused)?;
        Ok(Some(component))
    }

    /// Stores `component`, compiled from the code whose sha256 is `hash`.
    pub fn store(&self, hash: &str, component: &Component) -> Result<(), ArtifactError> {
        let code = component.serialize().map_err(ArtifactError::Refused)?;
        let path = self.path(hash);
        // Unique per writer: engines sharing a cache may compile the same driver at once.
        let tmp = path.with_extension(format!(
            "{}.{}.tmp",
            std::process::id(),
            rand::random::<u64>()
        ));
        let written = (|| {
            let mut file = std::fs::File::create(&tmp)?;
            file.write_all(MAGIC)?;
            file.write_all(&self.digest(hash, &code))?;
            file.write_all(&code)?;
            file.sync_all()?;
            std::fs::rename(&tmp, &path)?;
            std::fs::File::open(&self.dir)?.sync_all()
        })();
        if written.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        Ok(written?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn engine() -> Engine {
        Engine::default()
    }

    /// The smallest component there is: `(component)` in the binary format.
    fn component(engine: &Engine) -> Component {
        Component::new(engine, b"\0asm\x0d\0\x01\0").unwrap()
    }

    fn cache(dir: &Path) -> ArtifactCache {
        ArtifactCache::new(dir.join("compiled"), "k1".into()).unwrap()
    }

    #[test]
    fn an_artifact_stored_loads_and_any_changed_byte_is_rejected_and_removed() {
        let dir = tempfile::tempdir().unwrap();
        let (engine, cache) = (engine(), cache(dir.path()));
        assert!(cache.load(&engine, "h").is_none(), "nothing cached yet");
        cache.store("h", &component(&engine)).unwrap();
        assert!(cache.load(&engine, "h").is_some());
        let path = cache.path("h");
        let good = std::fs::read(&path).unwrap();
        for at in [0, MAGIC.len() + 3, HEADER, good.len() / 2, good.len() - 1] {
            let mut bad = good.clone();
            bad[at] ^= 0x01;
            std::fs::write(&path, &bad).unwrap();
            assert!(cache.load(&engine, "h").is_none(), "byte {at} flipped");
            assert!(!path.exists(), "the rejected artifact is removed");
        }
        std::fs::write(&path, &good[..HEADER - 1]).unwrap();
        assert!(cache.load(&engine, "h").is_none(), "truncated");
        std::fs::write(&path, b"").unwrap();
        assert!(cache.load(&engine, "h").is_none(), "empty");
    }

    #[test]
    fn an_artifact_renamed_to_another_key_is_rejected() {
        let dir = tempfile::tempdir().unwrap();
        let (engine, cache) = (engine(), cache(dir.path()));
        cache.store("h", &component(&engine)).unwrap();
        std::fs::rename(cache.path("h"), cache.path("other")).unwrap();
        assert!(cache.load(&engine, "other").is_none());
        let other_engine = ArtifactCache::new(dir.path().join("compiled"), "k2".into()).unwrap();
        cache.store("h", &component(&engine)).unwrap();
        std::fs::rename(cache.path("h"), other_engine.path("h")).unwrap();
        assert!(other_engine.load(&engine, "h").is_none());
        let leftovers: Vec<_> = std::fs::read_dir(dir.path().join("compiled"))
            .unwrap()
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
    }
}
