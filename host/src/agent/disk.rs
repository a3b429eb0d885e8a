//! Streams an image from a url onto the target disk (a file or a block device), hashing it
//! on the way, never holding more than one chunk in memory. An optional throttle slows the
//! write (for demos and tests of long deploys).

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures_util::{Stream, StreamExt};
use tokio::io::AsyncWriteExt;
use tokio::time::Instant;

use crate::checksum::Hasher;

/// Writes `body` to `disk` from offset 0, counting into `written`, at most `throttle`
/// bytes per second if set; returns the hex digest of what was written.
pub async fn write_stream<E: std::fmt::Display>(
    disk: &Path,
    mut body: impl Stream<Item = Result<bytes::Bytes, E>> + Unpin,
    algo: &str,
    written: &Arc<AtomicU64>,
    throttle: Option<u64>,
) -> Result<String, String> {
    let mut hasher = Hasher::new(algo)?;
    let mut file = tokio::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(disk)
        .await
        .map_err(|e| format!("cannot open the disk {}: {e}", disk.display()))?;
    let started = Instant::now();
    while let Some(chunk) = body.next().await {
        let chunk = chunk.map_err(|e| format!("reading the image: {e}"))?;
        hasher.update(&chunk);
        file.write_all(&chunk)
            .await
            .map_err(|e| format!("writing to {}: {e}", disk.display()))?;
        let total = written.fetch_add(chunk.len() as u64, Ordering::Relaxed) + chunk.len() as u64;
        if let Some(rate) = throttle.filter(|&r| r > 0) {
            let due = started + Duration::from_secs_f64(total as f64 / rate as f64);
            tokio::time::sleep_until(due).await;
        }
    }
    file.flush().await.map_err(|e| e.to_string())?;
    file.sync_all()
        .await
        .map_err(|e| format!("syncing {}: {e}", disk.display()))?;
    Ok(hasher.hex())
}

/// The checksum an `image_info` asks for: `os_hash_algo`/`os_hash_value`, or a sha256 or
/// sha512 `checksum` (told apart by length, as IPA does).
pub fn expected_hash(info: &serde_json::Value) -> Result<(String, String), String> {
    let field = |k: &str| {
        info.get(k)
            .and_then(|v| v.as_str())
            .filter(|s| !s.is_empty())
    };
    match (
        field("os_hash_algo"),
        field("os_hash_value"),
        field("checksum"),
    ) {
        (Some(a), Some(v), _) => Ok((a.to_owned(), v.to_ascii_lowercase())),
        (_, _, Some(sum)) if sum.len() == 64 => Ok(("sha256".into(), sum.to_ascii_lowercase())),
        (_, _, Some(sum)) if sum.len() == 128 => Ok(("sha512".into(), sum.to_ascii_lowercase())),
        _ => Err(
            "image_info needs os_hash_algo and os_hash_value, or a sha256/sha512 checksum".into(),
        ),
    }
}
