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

/// A damaged store is refused at start with what it lost, never served with nodes gone:
/// 300 nodes, then the store's file with one byte flipped, a 4 KiB page zeroed, 64 random
/// bytes flipped, emptied, or deleted. Each copy either starts with all 300 nodes (the
/// damage hit nothing sled still reads) or is refused with the reason; the emptied and the
/// deleted file are always refused.
#[test]
fn a_damaged_store_is_refused_at_start_never_served_with_nodes_missing() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let engine = Engine::start(&data, &[]);
    for i in 0..300 {
        let (status, node) = call(
            "POST",
            &format!("{}/v1/nodes", engine.url),
            Some(
                json!({"driver": "fake", "name": format!("n{i}"), "extra": {"pad": "x".repeat(200)}}),
            ),
        );
        assert_eq!(status, 201, "{node}");
    }
    engine.stop();
    let file = |data: &std::path::Path| data.join("store/db");
    let len = std::fs::metadata(file(&data)).unwrap().len() as usize;
    type Damage = Box<dyn Fn(&mut Vec<u8>)>;
    let cases: Vec<(&str, Damage, bool)> = vec![
        (
            "one byte flipped",
            Box::new(|b| {
                let m = b.len() / 2;
                b[m] ^= 0x20
            }),
            false,
        ),
        (
            "a page zeroed",
            Box::new(|b| {
                let m = b.len() / 2;
                b[m..m + 4096].fill(0)
            }),
            false,
        ),
        (
            "64 random bytes flipped",
            Box::new(|b| {
                for _ in 0..64 {
                    let at = rand::random_range(0..b.len());
                    b[at] ^= rand::random_range(1..=255u8);
                }
            }),
            false,
        ),
        ("emptied", Box::new(|b| b.clear()), true),
    ];
    assert!(len > 8192, "{len}");
    let mut refused = 0;
    for (n, (what, damage, must_refuse)) in cases
        .iter()
        .chain(std::iter::once(&(
            "deleted",
            Box::new(|_: &mut Vec<u8>| {}) as Damage,
            true,
        )))
        .enumerate()
    {
        let copy = dir.path().join(format!("copy-{n}"));
        support::run(
            std::process::Command::new("cp")
                .arg("-a")
                .arg(&data)
                .arg(&copy),
        );
        if *what == "deleted" {
            std::fs::remove_file(file(&copy)).unwrap();
        } else {
            let mut bytes = std::fs::read(file(&copy)).unwrap();
            damage(&mut bytes);
            std::fs::write(file(&copy), bytes).unwrap();
        }
        match Engine::try_start(&copy, &[]) {
            Ok(engine) => {
                assert!(!must_refuse, "{what}: the engine started");
                println!("{what}: started with every node");
                let (_, list) = call("GET", &format!("{}/v1/nodes?limit=1000", engine.url), None);
                assert_eq!(
                    list["nodes"].as_array().unwrap().len(),
                    300,
                    "{what}: served with nodes missing"
                );
                engine.stop();
            }
            Err(log) => {
                refused += 1;
                let verified = std::process::Command::new(&*support::BIN)
                    .args(["store", "verify", "--data-dir", copy.to_str().unwrap()])
                    .output()
                    .unwrap();
                assert!(!verified.status.success(), "{what}: store verify passed it");
                let reason = log
                    .lines()
                    .find(|l| l.contains("lost data") || l.contains("could not read"))
                    .unwrap_or_default();
                println!("{what}: refused: {reason}");
                assert!(
                    log.contains("has lost data")
                        || log.contains("could not read the store")
                        || log.contains("stored data is corrupt"),
                    "{what}: refused without saying why: {log}"
                );
                assert!(
                    log.contains("deployd store restore"),
                    "{what}: says how to recover: {log}"
                );
            }
        }
    }
    assert!(refused >= 2);
}

fn deployd(args: &[&str], url: &str) -> std::process::Output {
    std::process::Command::new(&*support::BIN)
        .args(args)
        .env("DEPLOYD_URL", url)
        .output()
        .unwrap()
}

/// `deployd store backup` while the engine serves writes, then `restore` into a new data
/// directory and `verify`: every node, port and chassis acknowledged before the backup
/// comes back, with its indexes (names and MACs stay unique); a backup altered or cut
/// short is refused and leaves nothing behind.
#[test]
fn a_backup_taken_while_serving_restores_whole_and_a_damaged_one_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let engine = Engine::start(&data, &[]);
    let url = engine.url.clone();
    let (status, chassis) = call(
        "POST",
        &format!("{url}/v1/chassis"),
        Some(json!({"description": "rack 1"})),
    );
    assert_eq!(status, 201, "{chassis}");
    for i in 0..40 {
        let (status, node) = call(
            "POST",
            &format!("{url}/v1/nodes"),
            Some(
                json!({"driver": "fake", "name": format!("n{i}"), "chassis_uuid": chassis["uuid"]}),
            ),
        );
        assert_eq!(status, 201, "{node}");
        let mac = format!("52:54:00:00:00:{i:02x}");
        let (status, port) = call(
            "POST",
            &format!("{url}/v1/ports"),
            Some(json!({"node_uuid": node["uuid"], "address": mac})),
        );
        assert_eq!(status, 201, "{port}");
    }
    assert_eq!(
        call(
            "PUT",
            &format!("{url}/v1/nodes/n0/states/provision"),
            Some(json!({"target": "manage"}))
        )
        .0,
        202
    );
    // Writes go on during the backup.
    let writer = {
        let url = url.clone();
        std::thread::spawn(move || {
            for i in 0..100 {
                let body = json!({"driver": "fake", "name": format!("during-{i}")});
                assert_eq!(call("POST", &format!("{url}/v1/nodes"), Some(body)).0, 201);
            }
        })
    };
    let file = dir.path().join("store.backup");
    let out = deployd(&["store", "backup", "--to", file.to_str().unwrap()], &url);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    writer.join().unwrap();
    engine.stop();

    let out = deployd(
        &["store", "verify", "--data-dir", data.to_str().unwrap()],
        &url,
    );
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && said.contains(": 0 problems"),
        "{said}"
    );

    let restored = dir.path().join("restored");
    let out = deployd(
        &[
            "store",
            "restore",
            "--from",
            file.to_str().unwrap(),
            "--data-dir",
            restored.to_str().unwrap(),
        ],
        &url,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let engine = Engine::start(&restored, &[]);
    let url = engine.url.clone();
    for i in 0..40 {
        let (status, node) = call("GET", &format!("{url}/v1/nodes/n{i}"), None);
        assert_eq!(status, 200, "{node}");
        assert_eq!(node["chassis_uuid"], chassis["uuid"]);
        let mac = format!("52:54:00:00:00:{i:02x}");
        let (_, ports) = call("GET", &format!("{url}/v1/ports?address={mac}"), None);
        assert_eq!(ports["ports"].as_array().unwrap().len(), 1, "{ports}");
    }
    assert_eq!(
        call("GET", &format!("{url}/v1/nodes/n0"), None).1["provision_state"],
        "manageable"
    );
    let (_, history) = call("GET", &format!("{url}/v1/nodes/n0/history"), None);
    assert!(
        !history["history"].as_array().unwrap().is_empty(),
        "{history}"
    );
    assert_eq!(
        call(
            "GET",
            &format!("{url}/v1/chassis/{}", chassis["uuid"].as_str().unwrap()),
            None
        )
        .0,
        200
    );
    // The rebuilt indexes hold: a taken name and a taken MAC are refused.
    let (status, _) = call(
        "POST",
        &format!("{url}/v1/nodes"),
        Some(json!({"driver": "fake", "name": "n3"})),
    );
    assert_eq!(status, 409);
    let (_, n1) = call("GET", &format!("{url}/v1/nodes/n1"), None);
    let (status, _) = call(
        "POST",
        &format!("{url}/v1/ports"),
        Some(json!({"node_uuid": n1["uuid"], "address": "52:54:00:00:00:05"})),
    );
    assert_eq!(status, 409);
    engine.stop();

    // Altered or cut short: refused, and nothing is left in the data directory.
    let bytes = std::fs::read(&file).unwrap();
    let mut altered = bytes.clone();
    let middle = altered.len() / 2;
    let at = middle + altered[middle..].iter().position(|&b| b == b'"').unwrap() + 1;
    altered[at] = if altered[at] == b'a' { b'b' } else { b'a' };
    let cut = bytes[..bytes.len() * 2 / 3].to_vec();
    for (what, damaged) in [("altered", altered), ("cut short", cut)] {
        let path = dir.path().join("damaged.backup");
        std::fs::write(&path, damaged).unwrap();
        let target = dir.path().join(format!("from-{}", what.replace(' ', "-")));
        let out = deployd(
            &[
                "store",
                "restore",
                "--from",
                path.to_str().unwrap(),
                "--data-dir",
                target.to_str().unwrap(),
            ],
            &url,
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{what}: restored anyway");
        assert!(stderr.contains("the backup"), "{what}: {stderr}");
        assert!(
            !target.join("store").exists(),
            "{what}: a store was left behind"
        );
    }
}

/// 1,100 idle kept-alive connections (more than the engine's 1,000) held open: a new
/// client still gets its answer, since the connection idle the longest makes room.
#[test]
fn a_flood_of_idle_connections_never_locks_out_a_new_client() {
    use std::io::{Read, Write};
    // This process holds 1,100 connections of its own.
    let mut limit = rustix::process::getrlimit(rustix::process::Resource::Nofile);
    limit.current = limit.maximum;
    let _ = rustix::process::setrlimit(rustix::process::Resource::Nofile, limit);
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::start(&dir.path().join("data"), &[]);
    let addr = engine.url.trim_start_matches("http://").to_owned();
    let mut idle = Vec::new();
    for i in 0..1100 {
        let Ok(mut c) = std::net::TcpStream::connect(&addr) else {
            panic!("connection {i} could not be opened");
        };
        c.write_all(b"GET /v1 HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        // Read the answer's head so the connection is idle, kept alive.
        c.set_read_timeout(Some(std::time::Duration::from_secs(10)))
            .unwrap();
        let mut head = [0u8; 12];
        let _ = c.read(&mut head);
        idle.push(c);
    }
    for round in 0..10 {
        let (status, body) = call("GET", &format!("{}/v1", engine.url), None);
        assert_eq!(status, 200, "round {round}: {body}");
    }
    drop(idle);
    engine.stop();
}
