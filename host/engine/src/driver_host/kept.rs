//! Drivers the shared store keeps: components uploaded through any engine on it.
//!
//! An engine loads them when it starts ([`load_all`]), follows every engine's uploads and
//! unloads while it runs (its task hears each, notified with the driver's name, and
//! [`follow`] loads the name's active version or unloads it as the uploading engine did),
//! and fetches the version a node's flow is pinned to when it meets the node without it
//! ([`pinned`]: a flow another engine started, on a version since replaced). A copy whose
//! bytes no longer match the sha256 recorded at upload is refused by name.

use std::sync::Arc;

use sha2::Digest;

use super::{Limits, LoadedDriver, Registry};
use crate::store::{KeptDriver, Store};

/// What the store keeps of an upload: `driver`, loaded from `body`.
pub fn upload(driver: &LoadedDriver, body: &[u8]) -> KeptDriver {
    KeptDriver {
        name: driver.description.name.clone(),
        version: driver.id.clone(),
        sha256: driver.hash.clone(),
        limits: serde_json::to_value(driver.limits).unwrap_or_default(),
        body: body.to_vec(),
    }
}

/// Every driver the store keeps, each name's active version, after the plugins
/// directory's: one that does not load is reported and skipped.
pub async fn load_all(store: &Store, registry: &Registry) -> anyhow::Result<()> {
    use anyhow::Context;
    let kept = store
        .kept_drivers()
        .await
        .context("reading the drivers the shared store keeps")?;
    for driver in kept {
        match load(registry, &driver, true).await {
            Ok(d) => {
                tracing::info!(name = %d.description.name, "loaded driver from the shared store")
            }
            Err(e) => tracing::error!(name = %driver.name, "skipping a kept driver: {e}"),
        }
    }
    Ok(())
}

/// The version `id` of a node's flow, fetched from the store and loaded beside the
/// active ones when this engine has not loaded it.
pub async fn pinned(store: &Store, registry: &Registry, id: &str) -> Option<Arc<LoadedDriver>> {
    if let Some(loaded) = registry.version(id) {
        return Some(loaded);
    }
    let kept = match store.driver_version(id).await {
        Ok(kept) => kept?,
        Err(e) => {
            tracing::warn!(version = id, error = %e, "cannot fetch a pinned driver version");
            return None;
        }
    };
    match load(registry, &kept, false).await {
        Ok(loaded) => {
            tracing::info!(name = %kept.name, version = id, "loaded a pinned driver version from the shared store");
            Some(loaded)
        }
        Err(e) => {
            tracing::error!(name = %kept.name, version = id, "a pinned driver version does not load: {e}");
            None
        }
    }
}

/// Driver `name` as the store keeps it now: its active version loaded, or, when the
/// store keeps none, unloaded (the engine that unloaded it checked that no node's flow
/// was pinned to it, across the fleet).
pub async fn follow(store: &Store, registry: &Registry, name: &str) {
    match store.kept_driver(name).await {
        Ok(Some(kept)) if registry.get(name).is_some_and(|d| d.id == kept.version) => {}
        Ok(Some(kept)) => match load(registry, &kept, true).await {
            Ok(d) => tracing::info!(name, id = %d.id, "loaded a driver another engine uploaded"),
            Err(e) => tracing::error!(name, "a driver another engine uploaded does not load: {e}"),
        },
        Ok(None) if registry.get(name).is_some() => {
            let _ = registry.unload(name, 0, true);
            tracing::info!(name, "unloaded a driver another engine unloaded");
        }
        Ok(None) => {}
        Err(e) => tracing::warn!(name, error = %e, "cannot read a driver another engine changed"),
    }
}

/// Loads `kept` (as its name's active version when `active`), checked against the sha256
/// and version recorded at upload.
async fn load(
    registry: &Registry,
    kept: &KeptDriver,
    active: bool,
) -> Result<Arc<LoadedDriver>, String> {
    let found = hex::encode(sha2::Sha256::digest(&kept.body));
    if found != kept.sha256 {
        return Err(format!(
            "the shared store's copy has sha256 {found}, not the {} recorded at upload; upload it again",
            kept.sha256
        ));
    }
    let limits: Limits = serde_json::from_value(kept.limits.clone())
        .map_err(|e| format!("its recorded limits do not read: {e}"))?;
    let loaded = match active {
        true => registry.load(&kept.body, limits).await,
        false => registry.load_version(&kept.body, limits).await,
    }
    .map_err(|e| e.to_string())?;
    if loaded.id != kept.version {
        return Err(format!(
            "it loaded as version {}, not the {} recorded at upload",
            loaded.id, kept.version
        ));
    }
    Ok(loaded)
}
