//! Drivers loaded at runtime: validated, compiled once, and identified by content hash.
//!
//! Loading a component checks, before anything becomes visible, that it is a component,
//! that it needs nothing this host does not link (an interface of another package, or a
//! `deployd:driver` line this host lacks, is refused here, naming the import), that it is
//! a `deployd:driver` world of a line the host has (0.2, or 0.1 through the adapter), and
//! that `describe` answers. A driver version is immutable: its identity ([`LoadedDriver::id`]) is its
//! code and the limits it runs under. Loading new bytes, or the same bytes with other
//! limits, under the same name makes a new active version for new flows, while the old
//! version stays available by id for the nodes that started with it. Compiles run one at
//! a time, in a child process under a memory limit when the engine is `deployd serve`
//! ([`compiler`]). Compiled code is cached on
//! disk, verified before it is loaded ([`ArtifactCache`]), so a restart loads drivers
//! without compiling.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, RwLock};

use sha2::{Digest, Sha256};
use uuid::Uuid;
use wasmtime::Engine;
use wasmtime::component::{Component, Linker};

use super::artifact_cache::ArtifactCache;
use super::capability::bindings::Description;
use super::capability::{self, HostState, Services};
use super::compiler::{self, ChildCompiler, Compiler};
use super::driver::{Limits, LoadedDriver, Pre, version_id};
use super::error::{LoadError, PluginError};
use super::runtime;
use super::sandbox::{self, Export, Reply};

#[derive(Default)]
struct Drivers {
    /// The version new flows use, by driver name.
    active: BTreeMap<String, Arc<LoadedDriver>>,
    /// Every version loaded, by id (flows in progress keep theirs).
    versions: HashMap<String, Arc<LoadedDriver>>,
}

pub struct Registry {
    engine: Engine,
    linker: Linker<HostState>,
    services: Arc<Services>,
    cache: Option<ArtifactCache>,
    /// The engine's compatibility key, which a child compiler must share.
    compat: String,
    compiler: Compiler,
    drivers: RwLock<Drivers>,
    /// One compile at a time.
    compiling: tokio::sync::Semaphore,
}

const POWER_BACKENDS: &[&str] = &["fake", "ipmitool", "redfish"];

impl Registry {
    /// A registry on a new engine. `cache_dir` holds compiled artifacts (none: no cache).
    pub fn new(
        services: Arc<Services>,
        cache_dir: Option<PathBuf>,
        max_concurrent_calls: u32,
    ) -> wasmtime::Result<Registry> {
        let engine = runtime::new_engine(max_concurrent_calls)?;
        let linker = capability::linker(&engine)?;
        let compat = runtime::compatibility_key(&engine);
        let cache = cache_dir
            .map(|dir| ArtifactCache::new(dir, compat.clone()))
            .transpose()?;
        Ok(Registry {
            engine,
            linker,
            services,
            cache,
            compat,
            compiler: Compiler::InProcess,
            drivers: RwLock::default(),
            compiling: tokio::sync::Semaphore::new(1),
        })
    }

    /// The registry compiling with `compiler` (in process by default).
    pub fn compiling_with(mut self, compiler: Compiler) -> Registry {
        self.compiler = compiler;
        self
    }

    pub fn services(&self) -> &Arc<Services> {
        &self.services
    }

    /// Validates and loads a component, making it the active version of its name.
    pub async fn load(&self, bytes: &[u8], limits: Limits) -> Result<Arc<LoadedDriver>, LoadError> {
        let driver = self.prepare(bytes, limits).await?;
        Ok(self.activate(driver))
    }

    /// Validates and loads a component as a version for the flows pinned to it (one
    /// another engine started), leaving its name's active version as it is.
    pub async fn load_version(
        &self,
        bytes: &[u8],
        limits: Limits,
    ) -> Result<Arc<LoadedDriver>, LoadError> {
        let driver = self.prepare(bytes, limits).await?;
        let mut drivers = self.write();
        drivers.versions.insert(driver.id.clone(), driver.clone());
        Ok(driver)
    }

    /// A component validated and compiled (or found loaded already), not yet a version
    /// of the registry's.
    async fn prepare(&self, bytes: &[u8], limits: Limits) -> Result<Arc<LoadedDriver>, LoadError> {
        let hash = hex::encode(Sha256::digest(bytes));
        let limits = Limits {
            memory_bytes: limits.memory_bytes.min(runtime::MAX_MEMORY),
            ..limits
        };
        let id = version_id(&hash, &limits);
        if let Some(driver) = self.known(&hash, &id, limits) {
            return Ok(driver);
        }
        let imports = super::imports::check(bytes)?;
        let _turn = self
            .compiling
            .acquire()
            .await
            .expect("the compile semaphore is never closed");
        // Another upload of the same code may have compiled it while this one waited.
        if let Some(driver) = self.known(&hash, &id, limits) {
            return Ok(driver);
        }
        let component = self.compile(bytes, &hash).await?;
        let pre = self
            .linker
            .instantiate_pre(&component)
            .map_err(|e| LoadError::Import(format!("{e:#}")))?;
        let pre = Pre::new(pre, super::imports::driver_line(&imports))
            .map_err(|e| LoadError::WrongWorld(format!("{e:#}")))?;
        let mut driver = LoadedDriver {
            description: Description {
                name: String::new(),
                version: String::new(),
                family: super::capability::bindings::Family::Fake,
                power: "fake".into(),
                summary: String::new(),
            },
            hash: hash.clone(),
            id: id.clone(),
            size: bytes.len(),
            loaded_at: self.services.store.clock().now(),
            limits,
            pre,
        };
        driver.description =
            match sandbox::call(&self.services, &driver, Uuid::nil(), None, Export::Describe).await
            {
                Ok(Reply::Description(d)) => d,
                Ok(other) => {
                    return Err(LoadError::Description(format!(
                        "describe returned {other:?}"
                    )));
                }
                Err(e) => return Err(LoadError::Describe(e)),
            };
        check_description(&driver.description)?;
        tracing::info!(name = %driver.description.name, version = %driver.description.version, world = driver.world(), id = %driver.id, "driver loaded");
        Ok(Arc::new(driver))
    }

    /// This version if loaded, or a new version of code already compiled (other limits).
    fn known(&self, hash: &str, id: &str, limits: Limits) -> Option<Arc<LoadedDriver>> {
        let drivers = self.read();
        if let Some(same) = drivers.versions.get(id) {
            return Some(same.clone());
        }
        let code = drivers.versions.values().find(|d| d.hash == hash)?;
        Some(Arc::new(LoadedDriver {
            description: code.description.clone(),
            hash: code.hash.clone(),
            id: id.to_owned(),
            size: code.size,
            loaded_at: self.services.store.clock().now(),
            limits,
            pre: code.pre.clone(),
        }))
    }

    /// Makes a version the active one of its name; older versions stay for their flows.
    fn activate(&self, driver: Arc<LoadedDriver>) -> Arc<LoadedDriver> {
        let mut drivers = self.write();
        drivers.versions.insert(driver.id.clone(), driver.clone());
        drivers
            .active
            .insert(driver.description.name.clone(), driver.clone());
        driver
    }

    /// Compiles `bytes`, or loads the artifact a previous compile left in the cache.
    async fn compile(&self, bytes: &[u8], hash: &str) -> Result<Component, LoadError> {
        let (engine, cache, key) = (self.engine.clone(), self.cache.clone(), hash.to_owned());
        let cached = blocking(move || cache.and_then(|c| c.load(&engine, &key))).await;
        if let Some(component) = cached {
            return Ok(component);
        }
        match &self.compiler {
            Compiler::InProcess => self.compile_here(bytes, hash).await,
            Compiler::Child(child) => self.compile_in_child(child, bytes, hash).await,
        }
    }

    /// Compiles in a child process; the artifact is installed in the cache and mapped
    /// from there (or, with no cache or a cache that cannot be written, from a file of
    /// this load's own).
    async fn compile_in_child(
        &self,
        child: &ChildCompiler,
        bytes: &[u8],
        hash: &str,
    ) -> Result<Component, LoadError> {
        let (out, own) = match &self.cache {
            Some(cache) => (cache.scratch(hash), None),
            None => {
                let own = tempfile::tempdir()?;
                (own.path().join("driver.cwasm"), Some(own))
            }
        };
        if let Err(e) = child.compile(&self.compat, bytes, &out).await {
            let _ = std::fs::remove_file(&out);
            return Err(e);
        }
        let (engine, cache, hash) = (self.engine.clone(), self.cache.clone(), hash.to_owned());
        blocking(move || {
            if let Some(cache) = &cache {
                match cache.install(&hash, &out) {
                    Ok(()) => {
                        return cache.load(&engine, &hash).ok_or_else(|| {
                            LoadError::Compiler(
                                "the compiled code did not load back (see the log)".into(),
                            )
                        });
                    }
                    // A cache that cannot be written costs the next start a compile.
                    Err(e) => tracing::warn!("compiled driver not cached: {e}"),
                }
            }
            let loaded = compiler::load_compiled(&engine, &out);
            let _ = std::fs::remove_file(&out);
            drop(own);
            loaded
        })
        .await
    }

    /// Compiles on a blocking thread of this process.
    async fn compile_here(&self, bytes: &[u8], hash: &str) -> Result<Component, LoadError> {
        let (engine, owned) = (self.engine.clone(), bytes.to_vec());
        let component = blocking(move || Component::new(&engine, &owned))
            .await
            .map_err(|e| LoadError::NotAComponent(format!("{e:#}")))?;
        if let Some(cache) = &self.cache {
            // A cache that cannot be written costs the next start a compile, nothing more.
            if let Err(e) = cache.store(hash, &component) {
                tracing::warn!("compiled driver not cached: {e}");
            }
        }
        Ok(component)
    }

    /// The active version of a driver.
    pub fn get(&self, name: &str) -> Option<Arc<LoadedDriver>> {
        self.read().active.get(name).cloned()
    }

    /// A driver version by id, active or not.
    pub fn version(&self, id: &str) -> Option<Arc<LoadedDriver>> {
        self.read().versions.get(id).cloned()
    }

    /// The active drivers, by name.
    pub fn list(&self) -> Vec<Arc<LoadedDriver>> {
        self.read().active.values().cloned().collect()
    }

    /// Unloads a driver name and its versions. `in_use` is how many nodes are mid-flow on
    /// it; unless `force`, that must be none.
    pub fn unload(&self, name: &str, in_use: usize, force: bool) -> Result<(), LoadError> {
        if in_use > 0 && !force {
            return Err(LoadError::InUse {
                name: name.to_owned(),
                nodes: in_use,
            });
        }
        let mut drivers = self.write();
        drivers.active.remove(name);
        drivers.versions.retain(|_, d| d.description.name != name);
        Ok(())
    }

    /// Calls a driver export for a node.
    pub async fn call(
        &self,
        driver: &LoadedDriver,
        node: Uuid,
        export: Export,
    ) -> Result<Reply, PluginError> {
        sandbox::call(&self.services, driver, node, None, export).await
    }

    /// [`Registry::call`] with the node's record the caller just read, so the driver's
    /// first `node.get` needs no store read.
    pub async fn call_on(
        &self,
        driver: &LoadedDriver,
        node: crate::node::Node,
        export: Export,
    ) -> Result<Reply, PluginError> {
        sandbox::call(&self.services, driver, node.uuid(), Some(node), export).await
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Drivers> {
        self.drivers.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Drivers> {
        self.drivers.write().unwrap_or_else(|p| p.into_inner())
    }
}

/// Runs `work` on a blocking thread (compiles, digests and maps read and write files).
async fn blocking<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(work)
        .await
        .expect("a driver's compile or load does not panic")
}

fn check_description(d: &Description) -> Result<(), LoadError> {
    let name_ok = !d.name.is_empty()
        && d.name.len() <= 64
        && d.name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-');
    if !name_ok {
        return Err(LoadError::Description(format!(
            "driver name {:?}: use 1 to 64 of a-z 0-9 _ -",
            d.name
        )));
    }
    if !POWER_BACKENDS.contains(&d.power.as_str()) {
        return Err(LoadError::Description(format!(
            "power backend {:?}: use one of {POWER_BACKENDS:?}",
            d.power
        )));
    }
    Ok(())
}
