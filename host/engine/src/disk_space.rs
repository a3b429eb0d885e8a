//! The free space of the filesystems the engine writes to (the store's, the images
//! directory's), and the floor of free space each keeps: below it the engine stops
//! writing there, with a clear error, rather than let the disk fill (see
//! `store::sled::watermark` and `deploy_image`).

use std::path::Path;

/// Free bytes (for an unprivileged writer) on the filesystem holding `path` (or, when
/// `path` does not exist yet, its parent's).
pub fn free(path: &Path) -> Option<u64> {
    let s = statvfs(path)?;
    Some(s.f_bavail.saturating_mul(s.f_frsize))
}

/// Bytes of the filesystem holding `path`.
pub fn size(path: &Path) -> Option<u64> {
    let s = statvfs(path)?;
    Some(s.f_blocks.saturating_mul(s.f_frsize))
}

/// The floor a filesystem keeps free: `configured`, but at most a tenth of the
/// filesystem, so a small one is not refused at once.
pub fn floor(configured: u64, path: &Path) -> u64 {
    configured.min(size(path).map_or(u64::MAX, |size| size / 10))
}

/// Bytes as MiB, for messages.
pub fn mib(bytes: u64) -> u64 {
    bytes >> 20
}

fn statvfs(path: &Path) -> Option<rustix::fs::StatVfs> {
    rustix::fs::statvfs(path)
        .or_else(|_| rustix::fs::statvfs(path.parent().unwrap_or(path)))
        .ok()
}
