//! `deployd serve` as a process: it starts on the embedded default, keeps every node
//! across a clean restart and across SIGKILL, and fails a node left mid-operation.

use deployd_test_support::processes as support;

use serde_json::json;
use support::{Engine, call};

#[test]
fn nodes_survive_a_clean_restart_and_a_kill() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let engine = Engine::start(&data, &[]);
    let mut uuids = Vec::new();
    for i in 0..5 {
        let (status, node) = call(
            "POST",
            &format!("{}/v1/nodes", engine.url),
            Some(json!({"driver": "fake", "name": format!("n{i}"), "driver_info": {"k": i}})),
        );
        assert_eq!(status, 201, "{node}");
        uuids.push(node["uuid"].as_str().unwrap().to_owned());
    }
    let (status, _) = call(
        "PUT",
        &format!("{}/v1/nodes/n0/states/provision", engine.url),
        Some(json!({"target": "manage"})),
    );
    assert_eq!(status, 202);
    assert!(engine.log_text().contains("deployd is running"));
    engine.stop();

    let engine = Engine::start(&data, &[]);
    let (_, list) = call(
        "GET",
        &format!(
            "{}/v1/nodes?fields=uuid,name,driver_info,provision_state",
            engine.url
        ),
        None,
    );
    let nodes = list["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 5, "{list}");
    for (i, uuid) in uuids.iter().enumerate() {
        let (_, node) = call("GET", &format!("{}/v1/nodes/n{i}", engine.url), None);
        assert_eq!(node["uuid"], uuid.as_str());
        assert_eq!(node["driver_info"]["k"], i);
    }
    assert_eq!(
        call("GET", &format!("{}/v1/nodes/n0", engine.url), None).1["provision_state"],
        "manageable"
    );
    engine.kill();

    let engine = Engine::start(&data, &[]);
    let (_, list) = call("GET", &format!("{}/v1/nodes", engine.url), None);
    assert_eq!(
        list["nodes"].as_array().unwrap().len(),
        5,
        "a SIGKILL loses no acknowledged node"
    );
    engine.stop();
}

#[test]
fn config_file_flags_and_environment_apply_in_that_order() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("deployd.toml");
    std::fs::write(
        &config,
        "[conductor]\ndeploy_callback_timeout = 7\n[api]\nramdisk_heartbeat_timeout = 42\n",
    )
    .unwrap();
    let data = dir.path().join("data");
    let engine = Engine::start(&data, &["--config", config.to_str().unwrap()]);
    engine.stop();
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "[conductor]\ndeploy_callback_timout = 7\n").unwrap();
    let out = std::process::Command::new(&*support::BIN)
        .args(["serve", "--config", bad.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("unknown field `deploy_callback_timout`"),
        "{stderr}"
    );
}
