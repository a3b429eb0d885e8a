//! The WebAssembly driver host, with real components built from `plugins/`: the bundled
//! fake driver's whole flow, every sandbox limit just inside and just past, components the
//! host must refuse, and a driver replaced while a node is mid-deploy.

use deployd_test_support as common;

use std::time::Duration;

use common::lab::{Lab, lab, wasm};
use deployd_engine::conductor::{DRIVER_HASH, Verb};
use deployd_engine::driver_host::{Limits, LoadError, Registry};
use deployd_engine::node::Node;
use deployd_engine::state_machine::ProvisionState;
use serde_json::{Value, json};

fn scratch(node: &Node, key: &str) -> Value {
    node.body
        .driver_internal_info
        .get("scratch")
        .and_then(|s| s.get(key))
        .cloned()
        .unwrap_or(Value::Null)
}

fn limits(memory_mib: usize, deadline_ms: u64) -> Limits {
    Limits {
        memory_bytes: memory_mib << 20,
        deadline: Duration::from_millis(deadline_ms),
        ..Limits::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fake_driver_deploys_and_undeploys_a_node() {
    let lab = lab(Duration::from_secs(60)).await;
    lab.load(deployd_fixtures::FAKE, Limits::default()).await;
    let uuid = lab.node("fake", json!({})).await;
    let node = lab.deploy(uuid, ProvisionState::Active).await;
    assert_eq!(node.body.power_state.as_deref(), Some("power on"));
    assert_eq!(node.provision.target, None);
    assert!(
        !node.body.driver_internal_info.contains_key(DRIVER_HASH),
        "the pin ends with the flow"
    );
    lab.conductor.provision(uuid, Verb::Undeploy).await.unwrap();
    let node = lab.settle(uuid, ProvisionState::Available).await;
    assert_eq!(node.body.power_state.as_deref(), Some("power off"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_infinite_loop_is_stopped_at_its_deadline_and_the_next_call_is_fresh() {
    let lab = lab(Duration::from_secs(60)).await;
    lab.load(deployd_fixtures::TEST_DRIVER, limits(64, 300))
        .await;
    let looping = lab.node("test_driver", json!({"mode": "loop"})).await;
    let healthy = lab.node("test_driver", json!({"mode": "done"})).await;
    let node = lab.deploy(looping, ProvisionState::DeployFailed).await;
    let error = node.body.last_error.unwrap();
    assert!(error.contains("ran past its deadline of 300ms"), "{error}");
    // The same driver, a fresh instance: the healthy node deploys.
    lab.deploy(healthy, ProvisionState::Active).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_just_inside_the_cap_works_and_just_past_it_fails_the_node() {
    let lab = lab(Duration::from_secs(60)).await;
    lab.load(deployd_fixtures::TEST_DRIVER, limits(24, 5000))
        .await;
    // 16 MiB of data plus the program's own pages fit in 24 MiB; 24 MiB of data cannot.
    let inside = lab.node("test_driver", json!({"mode": "alloc:16"})).await;
    let past = lab.node("test_driver", json!({"mode": "alloc:24"})).await;
    let node = lab.deploy(inside, ProvisionState::DeployFailed).await;
    assert_eq!(
        node.body.last_error.as_deref(),
        Some("allocated 16 MiB"),
        "the driver's own answer"
    );
    let node = lab.deploy(past, ProvisionState::DeployFailed).await;
    let error = node.body.last_error.unwrap();
    assert!(
        error.contains("exceeded its memory limit of 24 MiB"),
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_message_reaches_last_error_and_clean_up_runs() {
    let lab = lab(Duration::from_secs(60)).await;
    lab.load(deployd_fixtures::TEST_DRIVER, Limits::default())
        .await;
    let uuid = lab.node("test_driver", json!({"mode": "panic"})).await;
    let node = lab.deploy(uuid, ProvisionState::DeployFailed).await;
    let error = node.body.last_error.clone().unwrap();
    assert!(
        error.contains("driver bug: the test asked for a panic"),
        "{error}"
    );
    assert!(error.contains("wasm trap"), "{error}");
    assert_eq!(scratch(&node, "cleaned_up"), Value::String(error));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn components_that_are_not_drivers_for_this_host_are_refused_with_the_reason() {
    let lab = lab(Duration::from_secs(60)).await;
    // Every bundled driver imports only what the host links (they load in every test).
    for (name, bytes) in deployd_fixtures::BUNDLED {
        deployd_engine::driver_host::imports::check(bytes)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    // A line of the driver world this host does not have: refused from its imports, read
    // before any compile, naming what it lacks.
    let mut future = wasm(deployd_fixtures::DRIVER_V0_1);
    let at = future
        .windows(22)
        .position(|w| w == b"deployd:driver/node@0.")
        .expect("the 0.1 fixture names its node import");
    future[at + 22] = b'9';
    let err = lab
        .registry
        .load(&future, Limits::default())
        .await
        .unwrap_err();
    assert!(matches!(err, LoadError::Import(_)), "{err}");
    assert!(
        err.to_string()
            .contains("it imports deployd:driver/node@0.9"),
        "{err}"
    );
    let err = lab
        .registry
        .load(&wasm(deployd_fixtures::WRONG_WORLD), Limits::default())
        .await
        .unwrap_err();
    assert!(matches!(err, LoadError::WrongWorld(_)), "{err}");
    let err = lab
        .registry
        .load(b"\0asm\x01\0\0\0", Limits::default())
        .await
        .unwrap_err();
    assert!(
        matches!(err, LoadError::NotAComponent(_)),
        "a core module is not a component: {err}"
    );
    let err = lab
        .registry
        .load(b"definitely not wasm", Limits::default())
        .await
        .unwrap_err();
    assert!(matches!(err, LoadError::NotAComponent(_)), "{err}");
    assert!(
        lab.registry.list().is_empty(),
        "nothing refused became visible"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_mid_deploy_finishes_on_the_version_it_started_with() {
    let lab = lab(Duration::from_secs(60)).await;
    lab.load(deployd_fixtures::TEST_DRIVER, Limits::default())
        .await;
    let v1 = lab.registry.get("test_driver").unwrap();
    let early = lab
        .node(
            "test_driver",
            json!({"mode": "wait", "heartbeat_mode": "done"}),
        )
        .await;
    let node = lab.deploy(early, ProvisionState::WaitCallBack).await;
    assert_eq!(node.body.driver_internal_info[DRIVER_HASH], v1.hash);

    lab.load(deployd_fixtures::TEST_DRIVER_V2, Limits::default())
        .await;
    let v2 = lab.registry.get("test_driver").unwrap();
    assert_ne!(v1.hash, v2.hash);
    assert_eq!(
        (
            v1.description.version.as_str(),
            v2.description.version.as_str()
        ),
        ("1.0.0", "2.0.0")
    );
    let late = lab
        .node(
            "test_driver",
            json!({"mode": "wait", "heartbeat_mode": "done"}),
        )
        .await;
    lab.deploy(late, ProvisionState::WaitCallBack).await;

    // Unloading a driver in use is refused unless forced.
    let in_use = lab.conductor.nodes_pinned_to("test_driver").await.unwrap();
    assert_eq!(in_use, 2);
    let err = lab
        .registry
        .unload("test_driver", in_use, false)
        .unwrap_err();
    assert!(err.to_string().contains("in use by 2 node(s)"), "{err}");

    lab.heartbeat(early).await;
    lab.heartbeat(late).await;
    let early = lab.settle(early, ProvisionState::Active).await;
    let late = lab.settle(late, ProvisionState::Active).await;
    assert_eq!(scratch(&early, "handled_by"), "1.0.0");
    assert_eq!(scratch(&late, "handled_by"), "2.0.0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timed_out_node_gets_its_drivers_clean_up_and_heartbeats_keep_others_alive() {
    let lab = lab(Duration::from_millis(600)).await;
    lab.load(deployd_fixtures::TEST_DRIVER, Limits::default())
        .await;
    let silent = lab.node("test_driver", json!({"mode": "wait"})).await;
    let alive = lab
        .node(
            "test_driver",
            json!({"mode": "wait", "heartbeat_mode": "wait"}),
        )
        .await;
    lab.deploy(silent, ProvisionState::WaitCallBack).await;
    lab.deploy(alive, ProvisionState::WaitCallBack).await;
    for _ in 0..12 {
        lab.heartbeat(alive).await;
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    let node = lab.settle(silent, ProvisionState::DeployFailed).await;
    let error = node.body.last_error.clone().unwrap();
    assert!(error.contains("deploy_callback_timeout"), "{error}");
    for _ in 0..200 {
        if scratch(&lab.store.node(silent).await.unwrap(), "cleaned_up") != Value::Null {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        scratch(&lab.store.node(silent).await.unwrap(), "cleaned_up"),
        Value::String(error)
    );
    assert_eq!(
        lab.store.node(alive).await.unwrap().state(),
        ProvisionState::WaitCallBack,
        "1.8 s of heartbeats past a 0.6 s timeout"
    );
}

/// The fake driver loaded by a new registry on `lab`'s compiled cache, as a restarted
/// engine would load it.
async fn load_fake_afresh(lab: &Lab) -> std::sync::Arc<deployd_engine::driver_host::LoadedDriver> {
    let services = lab.registry.services().clone();
    let registry = Registry::new(services, Some(lab.dir.path().join("compiled")), 4).unwrap();
    registry
        .load(&wasm(deployd_fixtures::FAKE), Limits::default())
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compiled_drivers_are_cached_on_disk_by_hash_and_engine() {
    let lab = lab(Duration::from_secs(60)).await;
    lab.load(deployd_fixtures::FAKE, Limits::default()).await;
    let hash = lab.registry.get("fake").unwrap().hash.clone();
    let mut cached: Vec<_> = std::fs::read_dir(lab.dir.path().join("compiled"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    cached.sort();
    assert_eq!(cached.len(), 2, "the artifact and its digest: {cached:?}");
    assert!(cached[0].starts_with(&hash) && cached[0].ends_with(".cwasm"));
    assert_eq!(cached[1], format!("{}.sha256", cached[0]));
    // A second registry on the same cache loads from the artifact.
    let driver = load_fake_afresh(&lab).await;
    assert_eq!(driver.hash, hash);
    assert_eq!(driver.description.name, "fake");
    // An artifact whose code was overwritten (int3 over its middle, which run would stop
    // the engine with SIGTRAP) is rejected by its digest, compiled again and rewritten.
    let path = lab.dir.path().join("compiled").join(&cached[0]);
    let mut bytes = std::fs::read(&path).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle..middle + 256].fill(0xCC);
    std::fs::write(&path, &bytes).unwrap();
    let driver = load_fake_afresh(&lab).await;
    assert_eq!(driver.description.name, "fake");
    let rewritten = std::fs::read(&path).unwrap();
    assert!(
        rewritten.len() > 256 && rewritten != bytes,
        "the artifact was compiled again and rewritten"
    );
    // And the rewritten one passes: another registry runs `describe` from it.
    let driver = load_fake_afresh(&lab).await;
    assert_eq!(driver.description.name, "fake");
    assert_eq!(std::fs::read(&path).unwrap(), rewritten, "and is kept");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_driver_that_imports_the_filesystem_loads_but_reaches_no_file() {
    let lab = lab(Duration::from_secs(60)).await;
    let fs_driver = wasm(deployd_fixtures::FS_DRIVER);
    let imports = deployd_engine::driver_host::imports::imports(&fs_driver).unwrap();
    assert!(
        imports
            .iter()
            .any(|i| i.starts_with("wasi:filesystem/preopens@0.2")),
        "{imports:?}"
    );
    lab.load(deployd_fixtures::FS_DRIVER, Limits::default())
        .await;
    let uuid = lab.node("fs_driver", json!({})).await;
    let node = lab.deploy(uuid, ProvisionState::DeployFailed).await;
    let error = node.body.last_error.unwrap();
    // It asked for /etc/passwd; with no preopened directory the read fails in the guest.
    assert!(
        !error.contains("read "),
        "the driver read a host file: {error}"
    );
    assert!(error.contains("No such file"), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_driver_built_against_wit_0_1_still_loads_and_deploys() {
    let lab = lab(Duration::from_secs(60)).await;
    let old = lab
        .load(deployd_fixtures::DRIVER_V0_1, Limits::default())
        .await;
    assert_eq!(old.world(), "0.1");
    lab.load(deployd_fixtures::TEST_DRIVER, Limits::default())
        .await;
    assert_eq!(lab.registry.get("test_driver").unwrap().world(), "0.2");
    let uuid = lab.node("driver_v0_1", json!({})).await;
    let node = lab.deploy(uuid, ProvisionState::WaitCallBack).await;
    assert_eq!(node.body.power_state.as_deref(), Some("power on"));
    lab.heartbeat(uuid).await;
    let node = lab.settle(uuid, ProvisionState::Active).await;
    assert_eq!(scratch(&node, "heard"), "test");
    assert_eq!(scratch(&node, "image"), "none");
    let refusal = scratch(&node, "refusal");
    assert!(
        refusal
            .as_str()
            .unwrap()
            .contains("scratch keys are 1 to 128 bytes"),
        "0.1 gets the text: {refusal}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_0_2_driver_sees_the_agents_status_and_progress_and_typed_errors() {
    let lab = lab(Duration::from_secs(60)).await;
    lab.load(deployd_fixtures::TEST_DRIVER, Limits::default())
        .await;
    let uuid = lab
        .node(
            "test_driver",
            json!({"mode": "wait", "heartbeat_mode": "report"}),
        )
        .await;
    lab.deploy(uuid, ProvisionState::WaitCallBack).await;
    lab.report(
        uuid,
        deployd_engine::agent_sessions::AgentReport {
            status: None,
            message: Some("prepare_image: running, 4096 of 8192 bytes written".into()),
        },
    )
    .await;
    // The driver records `heard`, then `refusal`, in one call.
    for _ in 0..400 {
        if !scratch(&lab.store.node(uuid).await.unwrap(), "refusal").is_null() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let heard = scratch(&lab.store.node(uuid).await.unwrap(), "heard");
    assert_eq!(
        heard,
        json!([
            "test",
            null,
            "prepare_image: running, 4096 of 8192 bytes written",
            ["prepare_image StepStatus::Running", 4096, 8192]
        ])
    );
    let refusal = scratch(&lab.store.node(uuid).await.unwrap(), "refusal");
    assert!(
        refusal.as_str().unwrap().starts_with("Error::Invalid("),
        "{refusal}"
    );
}
