//! Uploaded components kept in the plugins directory, each beside its sha256.
//!
//! An upload is saved as `<name>.wasm` and `<name>.wasm.sha256` (`sha256sum`'s format), both
//! fsynced before their renames. At start a component whose file no longer matches its
//! recorded digest is refused by name rather than loaded as whatever it has become. A
//! `.wasm` an operator placed without a `.sha256` loads as it is.

use std::io::Write;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

#[derive(Debug, thiserror::Error)]
pub enum ComponentFileError {
    #[error("reading {0}: {1}")]
    Read(PathBuf, std::io::Error),
    #[error(
        "{path} has sha256 {found}, not the {recorded} recorded when it was uploaded: the file \
         changed on disk. Upload the driver again (or, if the file was replaced on purpose, \
         remove {sidecar})"
    )]
    Changed {
        path: PathBuf,
        sidecar: PathBuf,
        found: String,
        recorded: String,
    },
}

fn sidecar(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".sha256");
    PathBuf::from(name)
}

/// The component at `path`, checked against its recorded sha256 if it has one.
pub fn read(path: &Path) -> Result<Vec<u8>, ComponentFileError> {
    let bytes = std::fs::read(path).map_err(|e| ComponentFileError::Read(path.into(), e))?;
    let sidecar = sidecar(path);
    let recorded = match std::fs::read_to_string(&sidecar) {
        Ok(text) => text
            .split_whitespace()
            .next()
            .unwrap_or_default()
            .to_owned(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(bytes),
        Err(e) => return Err(ComponentFileError::Read(sidecar, e)),
    };
    let found = hex::encode(Sha256::digest(&bytes));
    if found != recorded {
        return Err(ComponentFileError::Changed {
            path: path.into(),
            sidecar,
            found,
            recorded,
        });
    }
    Ok(bytes)
}

/// Moves the upload at `upload` to `path` and records `hash` (its sha256) beside it.
pub fn save(upload: tempfile::NamedTempFile, path: &Path, hash: &str) -> std::io::Result<()> {
    upload.as_file().sync_all()?;
    upload.persist(path).map_err(|e| e.error)?;
    let sidecar = sidecar(path);
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut record = tempfile::NamedTempFile::new_in(dir)?;
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    writeln!(record, "{hash}  {name}")?;
    record.as_file().sync_all()?;
    record.persist(&sidecar).map_err(|e| e.error)?;
    std::fs::File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_saved_component_reads_back_until_a_byte_changes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("d.wasm");
        let mut upload = tempfile::NamedTempFile::new_in(dir.path()).unwrap();
        upload.write_all(b"component bytes").unwrap();
        let hash = hex::encode(Sha256::digest(b"component bytes"));
        save(upload, &path, &hash).unwrap();
        assert_eq!(read(&path).unwrap(), b"component bytes");
        let line = std::fs::read_to_string(sidecar(&path)).unwrap();
        assert_eq!(line, format!("{hash}  d.wasm\n"), "sha256sum -c reads it");
        std::fs::write(&path, b"component bytez").unwrap();
        let error = read(&path).unwrap_err().to_string();
        assert!(
            error.contains(&hash) && error.contains("d.wasm.sha256"),
            "{error}"
        );
        std::fs::remove_file(sidecar(&path)).unwrap();
        assert_eq!(read(&path).unwrap(), b"component bytez", "placed by hand");
    }
}
