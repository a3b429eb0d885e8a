//! A whole engine (`Engine::start`, as `deployd serve` runs it) on an ephemeral loopback
//! port, and an HTTP client that speaks to it as Ironic clients do.

use std::time::Duration;

use deployd_engine::clock::Clock;
use deployd_engine::config::Config;
use deployd_engine::engine::Engine;
use reqwest::{Method, StatusCode};
use serde_json::Value;

pub struct Server {
    pub dir: tempfile::TempDir,
    pub engine: Engine,
    pub base: String,
    pub http: reqwest::Client,
    config: Config,
}

/// Configures an engine in a temporary directory (listening on :0), with the test driver
/// in its plugins directory, then starts it.
pub async fn start(configure: impl FnOnce(&mut Config)) -> Server {
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config {
        data_dir: dir.path().join("data"),
        listen: "127.0.0.1:0".parse().unwrap(),
        ..Config::default()
    };
    config.conductor.check_provision_state_interval = 1;
    std::fs::create_dir_all(config.plugins_dir()).unwrap();
    std::fs::copy(
        deployd_fixtures::TEST_DRIVER,
        config.plugins_dir().join("test_driver.wasm"),
    )
    .unwrap();
    configure(&mut config);
    Server::run(dir, config, reqwest::Client::new()).await
}

/// A response: status, a few headers, and the body as JSON (Null if empty).
#[derive(Debug)]
pub struct Answer {
    pub status: StatusCode,
    pub headers: reqwest::header::HeaderMap,
    pub body: Value,
}

impl Answer {
    /// The `faultstring` inside Ironic's `error_message` JSON string.
    pub fn fault(&self) -> String {
        let text = self.body["error_message"]
            .as_str()
            .unwrap_or_else(|| panic!("not an Ironic error: {:?}", self.body));
        let inner: Value = serde_json::from_str(text).expect("error_message holds JSON");
        inner["faultstring"].as_str().unwrap().to_owned()
    }
}

impl Server {
    /// Starts an engine with `config` in `dir`.
    async fn run(dir: tempfile::TempDir, config: Config, http: reqwest::Client) -> Server {
        let engine = Engine::start(&config, Clock::new()).await.unwrap();
        let base = format!("http://{}", engine.addr);
        Server {
            dir,
            engine,
            base,
            http,
            config,
        }
    }

    /// Stops the engine as SIGTERM does and starts it again on the same data directory
    /// (on another port): only what it wrote to disk is left.
    pub async fn restart(self) -> Server {
        let Server {
            dir,
            engine,
            http,
            config,
            ..
        } = self;
        engine.shutdown().await.unwrap();
        Server::run(dir, config, http).await
    }

    pub async fn call(
        &self,
        method: Method,
        path: &str,
        version: Option<&str>,
        body: Option<Vec<u8>>,
    ) -> Answer {
        let mut request = self.http.request(method, format!("{}{path}", self.base));
        if let Some(v) = version {
            request = request.header("X-OpenStack-Ironic-API-Version", v);
        }
        if let Some(b) = body {
            request = request.header("Content-Type", "application/json").body(b);
        }
        let response = request.send().await.unwrap();
        let status = response.status();
        let headers = response.headers().clone();
        let bytes = response.bytes().await.unwrap();
        let body = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes)
                .unwrap_or(Value::String(String::from_utf8_lossy(&bytes).into()))
        };
        Answer {
            status,
            headers,
            body,
        }
    }

    /// A request at a microversion, with an optional JSON body.
    pub async fn at(
        &self,
        method: Method,
        path: &str,
        version: &str,
        body: Option<serde_json::Value>,
    ) -> Answer {
        let body = body.map(|b| b.to_string().into_bytes());
        self.call(method, path, Some(version), body).await
    }

    pub async fn get(&self, path: &str) -> Answer {
        self.call(Method::GET, path, Some("1.67"), None).await
    }

    pub async fn send(&self, method: Method, path: &str, body: Value) -> Answer {
        self.call(
            method,
            path,
            Some("1.67"),
            Some(body.to_string().into_bytes()),
        )
        .await
    }

    pub async fn delete(&self, path: &str) -> Answer {
        self.call(Method::DELETE, path, Some("1.67"), None).await
    }

    /// From enroll to waiting for the agent, with the test driver in `wait` mode.
    pub const TO_WAIT_CALL_BACK: &[(&str, &str)] = &[
        ("manage", "manageable"),
        ("provide", "available"),
        ("active", "wait call-back"),
    ];

    /// Moves a node through provision targets, waiting for each state in turn.
    pub async fn walk(&self, node: &str, steps: &[(&str, &str)]) {
        for (target, state) in steps {
            let a = self.provision(node, target).await;
            assert_eq!(a.status, StatusCode::ACCEPTED, "{target}: {:?}", a.body);
            self.wait_for(node, state).await;
        }
    }

    /// Creates a node and returns its uuid.
    pub async fn node(&self, body: Value) -> String {
        let a = self.send(Method::POST, "/v1/nodes", body).await;
        assert_eq!(a.status, StatusCode::CREATED, "{:?}", a.body);
        a.body["uuid"].as_str().unwrap().to_owned()
    }

    /// Loads the test driver (`query`: its upload's, such as `?deadline_ms=300`) and
    /// returns an available node of it whose steps run in `mode` (`loop`, `wait`, …).
    pub async fn test_driver_node(&self, query: &str, mode: &str) -> String {
        let wasm = std::fs::read(deployd_fixtures::TEST_DRIVER).unwrap();
        let url = format!("{}/v1/deployd/drivers{query}", self.base);
        let upload = self.http.post(url).body(wasm).send().await.unwrap();
        assert_eq!(upload.status(), StatusCode::CREATED);
        let body = serde_json::json!({"driver": "test_driver", "instance_info": {"mode": mode}});
        let node = self.node(body).await;
        self.walk(&node, &[("manage", "manageable"), ("provide", "available")])
            .await;
        node
    }

    pub async fn provision(&self, node: &str, target: &str) -> Answer {
        self.send(
            Method::PUT,
            &format!("/v1/nodes/{node}/states/provision"),
            serde_json::json!({ "target": target }),
        )
        .await
    }

    /// Polls the node until it is in `state` with no target (or `state` is a wait state).
    pub async fn wait_for(&self, node: &str, state: &str) -> Value {
        for _ in 0..600 {
            let n = self.get(&format!("/v1/nodes/{node}")).await.body;
            if n["provision_state"] == state
                && !self
                    .engine
                    .conductor
                    .is_busy(n["uuid"].as_str().unwrap().parse().unwrap())
            {
                // The step that held the node may have written after the read above
                // (its claim goes last): read the record again now that it is free.
                return self.get(&format!("/v1/nodes/{node}")).await.body;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let n = self.get(&format!("/v1/nodes/{node}")).await.body;
        panic!(
            "node {node} is in {} (wanted {state}); last_error {}",
            n["provision_state"], n["last_error"]
        );
    }
}
