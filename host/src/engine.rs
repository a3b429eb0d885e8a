//! The engine as `deployd serve` runs it: the store opened and recovered, the sweeper
//! running. Later layers (API, plugin host) hang off [`Engine`].

use std::sync::Arc;

use crate::clock::Clock;
use crate::config::Config;
use crate::store::{Recovery, Store, StoreError};
use crate::sweeper::{Sweeper, TimeoutHook};

pub struct Engine {
    pub store: Arc<Store>,
    pub recovery: Recovery,
    sweeper: Sweeper,
}

impl Engine {
    /// Opens the store under `config.data_dir` and starts the sweeper. Must run inside a
    /// tokio runtime.
    pub fn start(
        config: &Config,
        clock: Clock,
        hook: Arc<dyn TimeoutHook>,
    ) -> Result<Engine, StoreError> {
        std::fs::create_dir_all(&config.data_dir)
            .map_err(|e| StoreError::Db(sled::Error::Io(e)))?;
        let (store, recovery) = Store::open(
            &config.data_dir.join("store"),
            &config.store(),
            config.timeouts(),
            clock,
        )?;
        let store = Arc::new(store);
        let sweeper = Sweeper::spawn(store.clone(), config.sweeper(), hook);
        Ok(Engine {
            store,
            recovery,
            sweeper,
        })
    }

    /// Stops the sweeper and flushes the store.
    pub async fn shutdown(self) -> Result<(), StoreError> {
        self.sweeper.shutdown().await;
        self.store.flush()
    }
}
