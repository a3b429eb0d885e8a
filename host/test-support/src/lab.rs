//! An engine in a test: store, plugin registry, conductor and sweeper, on a temporary
//! directory, with helpers to walk nodes through their flows.

use std::sync::Arc;
use std::time::Duration;

use deployd_engine::agent_sessions::AgentSessions;
use deployd_engine::clock::Clock;
use deployd_engine::conductor::{Conductor, Verb};
use deployd_engine::driver_host::capability::Services;
use deployd_engine::driver_host::{Limits, Registry};
use deployd_engine::node::{NewNode, Node};
use deployd_engine::state_machine::{ProvisionState, Timeouts};
use deployd_engine::store::Store;
use deployd_engine::sweeper::{Sweeper, SweeperConfig};
use serde_json::{Value, json};
use uuid::Uuid;

pub struct Lab {
    pub dir: tempfile::TempDir,
    pub store: Arc<Store>,
    pub registry: Arc<Registry>,
    pub conductor: Arc<Conductor>,
    _sweeper: Sweeper,
}

pub async fn lab(deploy_timeout: Duration) -> Lab {
    let dir = tempfile::tempdir().unwrap();
    let clock = Clock::new();
    let timeouts = Timeouts {
        deploy_callback: deploy_timeout,
        ..Timeouts::uniform(Duration::from_secs(600))
    };
    let (store, _) = crate::store::open(&dir, timeouts, &clock);
    let store = Arc::new(store);
    let agents = Arc::new(AgentSessions::default());
    let services = Services::new(store.clone(), agents.clone(), 16, Default::default());
    let registry =
        Arc::new(Registry::new(services, Some(dir.path().join("compiled")), 16).unwrap());
    let conductor = Conductor::new(
        store.clone(),
        registry.clone(),
        agents,
        None,
        deployd_engine::conductor::Settings::default(),
    );
    let sweep = SweeperConfig {
        check_interval: Duration::from_millis(100),
        ..SweeperConfig::default()
    };
    let sweeper = Sweeper::spawn(store.clone(), sweep, Arc::new(conductor.clone()));
    Lab {
        dir,
        store,
        registry,
        conductor,
        _sweeper: sweeper,
    }
}

pub fn wasm(path: &str) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

impl Lab {
    pub async fn load(
        &self,
        path: &str,
        limits: Limits,
    ) -> std::sync::Arc<deployd_engine::driver_host::LoadedDriver> {
        self.registry.load(&wasm(path), limits).await.unwrap()
    }

    /// An available node of `driver` with these instance_info fields.
    pub async fn node(&self, driver: &str, instance: Value) -> Uuid {
        self.node_with(driver, json!({}), instance).await
    }

    /// An available node of `driver` with these driver_info and instance_info fields.
    pub async fn node_with(&self, driver: &str, info: Value, instance: Value) -> Uuid {
        let (Value::Object(driver_info), Value::Object(instance_info)) = (info, instance) else {
            panic!("driver_info and instance_info are JSON objects")
        };
        // Made available without cleaning (no agent boots here), then with the engine's
        // default again, so an undeploy cleans.
        let mut attrs = deployd_engine::node::JsonMap::new();
        attrs.insert("automated_clean".into(), json!(false));
        let new = NewNode {
            driver: driver.into(),
            driver_info,
            instance_info,
            attrs,
            ..Default::default()
        };
        let uuid = self.store.create_node(new).await.unwrap().uuid();
        self.conductor.provision(uuid, Verb::Manage).await.unwrap();
        self.settle(uuid, ProvisionState::Manageable).await;
        self.conductor.provision(uuid, Verb::Provide).await.unwrap();
        self.settle(uuid, ProvisionState::Available).await;
        self.store
            .edit_node(uuid, |_, b| {
                b.attrs.remove("automated_clean");
                Ok::<(), deployd_engine::store::StoreError>(())
            })
            .await
            .unwrap();
        uuid
    }

    /// Waits until the node is in `state` and no flow step runs on it.
    pub async fn settle(&self, uuid: Uuid, state: ProvisionState) -> Node {
        // Hardware flows wait for BMCs (sushy applies power changes asynchronously): be
        // patient, it costs nothing when the node is quick.
        for _ in 0..12_000 {
            let node = self.store.node(uuid).await.unwrap();
            if node.state() == state && !self.conductor.is_busy(uuid) {
                return node;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let node = self.store.node(uuid).await.unwrap();
        panic!(
            "node stuck in {} (wanted {state}); last_error {:?}",
            node.state(),
            node.body.last_error
        );
    }

    pub async fn deploy(&self, uuid: Uuid, expect: ProvisionState) -> Node {
        self.conductor.provision(uuid, Verb::Deploy).await.unwrap();
        self.settle(uuid, expect).await
    }

    pub async fn heartbeat(&self, uuid: Uuid) {
        self.report(uuid, Default::default()).await;
    }

    /// A heartbeat that says `report` of the agent's work.
    pub async fn report(&self, uuid: Uuid, report: deployd_engine::agent_sessions::AgentReport) {
        self.conductor
            .heartbeat(
                uuid,
                "t".repeat(43).as_str(),
                &deployd_engine::agent_sessions::CallbackUrl::parse("http://127.0.0.1:9").unwrap(),
                "test",
                None,
                report,
            )
            .await
            .unwrap();
    }
}
