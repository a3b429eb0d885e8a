//! Compiled drivers on disk, verified before they run.
//!
//! Loading a compiled artifact is `unsafe`: wasmtime maps its bytes as native code and
//! trusts them. A flipped bit in the file would run as corrupted machine code (an `int3`
//! stops the engine with SIGTRAP at every start). So each artifact has a digest beside it,
//! and nothing is mapped unless the digest matches:
//!
//! ```text
//! <component hash>-<compatibility key>.cwasm          the code, as wasmtime wrote it
//! <component hash>-<compatibility key>.cwasm.sha256   sha256(hash \n key \n code), hex
//! ```
//!
//! The code stays a file of its own so wasmtime maps it (`Component::deserialize_file`):
//! a loaded driver's code is file-backed pages the kernel can drop and read again, not a
//! heap copy. The digest covers the key the file is named by (the component's hash and
//! the engine's compatibility key: wasmtime's version and settings), so an artifact
//! renamed to another key fails too. A file that fails is logged, removed and compiled
//! again. The code is written to a file unique to its writer and fsynced, then renamed
//! into place, the digest last, and the directory fsynced: a crash leaves the old
//! artifact, the new one, or a digest that does not match (compiled again); never half
//! of one that loads.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::Component;

/// The directory of compiled artifacts of one engine configuration.
#[derive(Clone)]
pub struct ArtifactCache {
    dir: PathBuf,
    compat: String,
}

/// Why a cached artifact was not used.
#[derive(Debug, thiserror::Error)]
pub enum ArtifactError {
    #[error("it has no digest beside it")]
    NoDigest,
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

    fn digest_path(&self, hash: &str) -> PathBuf {
        self.dir
            .join(format!("{hash}-{}.cwasm.sha256", self.compat))
    }

    /// The digest of the artifact at `path`, read in blocks (never whole in memory).
    fn digest(&self, hash: &str, path: &Path) -> std::io::Result<String> {
        let mut h = Sha256::new();
        h.update(hash.as_bytes());
        h.update(b"\n");
        h.update(self.compat.as_bytes());
        h.update(b"\n");
        let (mut file, mut block) = (std::fs::File::open(path)?, vec![0u8; 1 << 20]);
        loop {
            match file.read(&mut block)? {
                0 => break,
                n => h.update(&block[..n]),
            }
        }
        Ok(hex::encode(h.finalize()))
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
                let _ = std::fs::remove_file(self.digest_path(hash));
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
        let actual = match self.digest(hash, path) {
            Ok(digest) => digest,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let expected = match std::fs::read_to_string(self.digest_path(hash)) {
            Ok(digest) => digest,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(ArtifactError::NoDigest);
            }
            Err(e) => return Err(e.into()),
        };
        if expected.trim() != actual {
            return Err(ArtifactError::Digest);
        }
        // SAFETY: the file is, byte for byte, what wasmtime compiled for this component
        // under this engine's compatibility key (the digest above covers both), written by
        // `install` below into the engine's own data directory.
        #[allow(unsafe_code)]
        let component =
            unsafe { Component::deserialize_file(engine, path) }.map_err(ArtifactError::Refused)?;
        Ok(Some(component))
    }

    /// A new file in the cache's directory, unique to its writer (engines sharing a cache
    /// may compile the same driver at once), for the code of `hash` before [`install`].
    ///
    /// [`install`]: ArtifactCache::install
    pub fn scratch(&self, hash: &str) -> PathBuf {
        self.path(hash).with_extension(format!(
            "{}.{}.tmp",
            std::process::id(),
            rand::random::<u64>()
        ))
    }

    /// Moves the code in `scratch` (complete and fsynced) into place as the artifact of
    /// `hash`, with its digest. On an error `scratch` is left to the caller.
    pub fn install(&self, hash: &str, scratch: &Path) -> std::io::Result<()> {
        let digest_tmp = scratch.with_extension("sha256.tmp");
        let installed = (|| {
            let digest = self.digest(hash, scratch)?;
            let mut file = std::fs::File::create(&digest_tmp)?;
            writeln!(file, "{digest}")?;
            file.sync_all()?;
            std::fs::rename(scratch, self.path(hash))?;
            std::fs::rename(&digest_tmp, self.digest_path(hash))?;
            std::fs::File::open(&self.dir)?.sync_all()
        })();
        if installed.is_err() {
            let _ = std::fs::remove_file(&digest_tmp);
        }
        installed
    }

    /// Stores `component` (compiled in this process) as the artifact of `hash`.
    pub fn store(&self, hash: &str, component: &Component) -> Result<(), ArtifactError> {
        let code = component.serialize().map_err(ArtifactError::Refused)?;
        let scratch = self.scratch(hash);
        let written = (|| {
            let mut file = std::fs::File::create(&scratch)?;
            file.write_all(&code)?;
            file.sync_all()
        })();
        let installed = written.and_then(|()| self.install(hash, &scratch));
        if installed.is_err() {
            let _ = std::fs::remove_file(&scratch);
        }
        Ok(installed?)
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
        let (path, digest) = (cache.path("h"), cache.digest_path("h"));
        let (good, good_digest) = (
            std::fs::read(&path).unwrap(),
            std::fs::read(&digest).unwrap(),
        );
        let restore = || {
            std::fs::write(&path, &good).unwrap();
            std::fs::write(&digest, &good_digest).unwrap();
        };
        for at in [0, 3, good.len() / 2, good.len() - 1] {
            restore();
            let mut bad = good.clone();
            bad[at] ^= 0x01;
            std::fs::write(&path, &bad).unwrap();
            assert!(cache.load(&engine, "h").is_none(), "byte {at} flipped");
            assert!(
                !path.exists() && !digest.exists(),
                "the rejected artifact is removed"
            );
        }
        restore();
        let mut bad = good_digest.clone();
        bad[5] = if bad[5] == b'0' { b'1' } else { b'0' };
        std::fs::write(&digest, &bad).unwrap();
        assert!(cache.load(&engine, "h").is_none(), "digest changed");
        restore();
        std::fs::remove_file(&digest).unwrap();
        assert!(cache.load(&engine, "h").is_none(), "no digest");
        restore();
        std::fs::write(&path, &good[..good.len() - 1]).unwrap();
        assert!(cache.load(&engine, "h").is_none(), "truncated");
        restore();
        std::fs::write(&path, b"").unwrap();
        assert!(cache.load(&engine, "h").is_none(), "empty");
        restore();
        assert!(cache.load(&engine, "h").is_some(), "restored");
    }

    #[test]
    fn an_artifact_renamed_to_another_key_is_rejected() {
        let dir = tempfile::tempdir().unwrap();
        let (engine, cache) = (engine(), cache(dir.path()));
        cache.store("h", &component(&engine)).unwrap();
        let moved = |from: &ArtifactCache, to: &ArtifactCache, hash: &str| {
            std::fs::rename(from.path("h"), to.path(hash)).unwrap();
            std::fs::rename(from.digest_path("h"), to.digest_path(hash)).unwrap();
        };
        moved(&cache, &cache, "other");
        assert!(cache.load(&engine, "other").is_none());
        let other_engine = ArtifactCache::new(dir.path().join("compiled"), "k2".into()).unwrap();
        cache.store("h", &component(&engine)).unwrap();
        moved(&cache, &other_engine, "h");
        assert!(other_engine.load(&engine, "h").is_none());
        let leftovers: Vec<_> = std::fs::read_dir(dir.path().join("compiled"))
            .unwrap()
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
    }
}
