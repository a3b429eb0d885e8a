//! `deployd serve --store-url`: the seed contract end to end with the node store on a real
//! PostgreSQL (the test cluster from Debian's binaries), over real processes on loopback —
//! a live agent's long write ends active, a killed agent times out, an engine killed mid-
//! deploy restarts on the same database and its agents finish, a second engine serves the
//! database beside it, and a fleet moves from sled to the shared
//! store and back through `deployd store backup` and `restore`.

use deployd_test_support::{emulators, postgres::CLUSTER, processes as support};

use std::path::Path;
use std::time::Duration;

use tokio::time::Instant;

use serde_json::Value;
use support::{Engine, Lab, call, image, provision, sha256_of, wait_node};

use crate::deployd_cli::ok;
use crate::seed_end_to_end::{
    enroll, flags, mid_deploy, state, two_machines, wait_active, written,
};

/// The seed flags with the store on a fresh database of the test cluster.
fn shared_flags(dir: &Path, timeout: u64, url: &str) -> Vec<String> {
    let mut flags = flags(dir, timeout);
    flags.extend(["--store-url".to_owned(), url.to_owned()]);
    flags
}

#[test]
fn on_the_shared_store_a_long_write_ends_active_and_a_killed_agent_times_out() {
    let dir = tempfile::tempdir().unwrap();
    // 8 MiB at 1 MiB/s: four times the 2 s timeout.
    let flags = shared_flags(dir.path(), 2, &CLUSTER.database());
    let (engine, lab, live, dead, sha) = two_machines(dir.path(), &flags);
    let started = Instant::now();
    provision(&engine.url, &live, "active");
    provision(&engine.url, &dead, "active");
    wait_node(&engine.url, &dead, 30, |n| written(n) >= 1 << 20);
    lab.kill_agent("machine-001");

    wait_active(&engine, &live, &[]);
    assert!(
        started.elapsed() >= Duration::from_secs(7),
        "the premise: the write outlasted the timeout ({:?})",
        started.elapsed()
    );
    let disk = Path::new(lab.machines[0]["disk"].as_str().unwrap());
    assert_eq!(
        sha256_of(disk),
        sha,
        "the live agent's disk holds the image"
    );

    let failed = wait_node(&engine.url, &dead, 30, |n| state(n) != "wait call-back");
    assert_eq!(state(&failed), "deploy failed", "{failed}");
    let error = failed["last_error"].as_str().unwrap();
    assert!(
        error.contains("Timeout reached while waiting for callback")
            && error.contains("deploy_callback_timeout is 2 s"),
        "{error}"
    );
}

#[test]
fn an_engine_on_the_shared_store_killed_mid_deploy_restarts_and_the_agents_finish() {
    let dir = tempfile::tempdir().unwrap();
    let url = CLUSTER.database();
    let port = emulators::free_tcp_port();
    let data = dir.path().join("data");
    // The restarted engine starts at once, beside the killed one's lease (10 s): what that
    // one still held is taken over once the lease lapses.
    let flags = shared_flags(dir.path(), 40, &url);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let engine = Engine::start_on(port, &data, &flags);
    let (lab, mid) = mid_deploy(dir.path(), &engine);
    engine.kill();
    let engine = Engine::start_on(port, &data, &flags);
    mid.finished(&engine, &lab);

    // A second engine serves the same database beside it: it sees the fleet, and each
    // lists the other alive. Stopped cleanly, it ends its lease: at once not alive.
    let second = Engine::start(&dir.path().join("second"), &flags);
    let (_, seen) = call("GET", &format!("{}/v1/nodes", second.url), None);
    assert_eq!(seen["nodes"].as_array().unwrap().len(), 3, "{seen}");
    let alive = |engine: &Engine| -> Vec<(String, bool)> {
        let (_, all) = call("GET", &format!("{}/v1/conductors", engine.url), None);
        let all = all["conductors"].as_array().unwrap().clone();
        all.iter()
            .map(|c| {
                (
                    c["hostname"].as_str().unwrap().to_owned(),
                    c["alive"] == true,
                )
            })
            .collect()
    };
    let second_port = second.url.rsplit(':').next().unwrap().to_owned();
    let both = alive(&engine);
    assert_eq!(both.len(), 2, "{both:?}");
    assert!(both.iter().all(|(_, up)| *up), "{both:?}");
    assert!(both[1].0.ends_with(&format!(":{second_port}")), "{both:?}");
    // Each engine lists itself first.
    let mut from_second = alive(&second);
    assert!(from_second[0].0.ends_with(&format!(":{second_port}")));
    from_second.swap(0, 1);
    assert_eq!(from_second, both);
    second.stop();
    let after = alive(&engine);
    assert_eq!((after[0].1, after[1].1), (true, false), "{after:?}");
    let (_, list) = call("GET", &format!("{}/v1/nodes", engine.url), None);
    let states: Vec<&Value> = list["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| &n["provision_state"])
        .collect();
    assert_eq!(states.len(), 3, "{list}");

    // The engines as Ironic's conductors: this one alive, named by its host and port (its
    // earlier lives on this port are the same host), and the second, not alive.
    let (status, conductors) = call("GET", &format!("{}/v1/conductors", engine.url), None);
    assert_eq!(status, 200, "{conductors}");
    let all = conductors["conductors"].as_array().unwrap();
    assert_eq!(all.len(), 2, "{conductors}");
    let me = all[0]["hostname"].as_str().unwrap();
    assert!(
        me.ends_with(&format!(":{port}")) && all[0]["alive"] == true,
        "{conductors}"
    );
    assert_eq!(all[1]["alive"], false, "{conductors}");
    let other = all[1]["hostname"].as_str().unwrap();
    let (status, shown) = call(
        "GET",
        &format!("{}/v1/conductors/{other}", engine.url),
        None,
    );
    assert_eq!(
        (status, &shown["hostname"]),
        (200, &all[1]["hostname"]),
        "{shown}"
    );
    let (_, mine) = call("GET", &format!("{}/v1/conductors/{me}", engine.url), None);
    let drivers = mine["drivers"].as_array().unwrap();
    assert!(drivers.iter().any(|d| d == "agent_redfish"), "{mine}");
    let node = list["nodes"][0]["uuid"].as_str().unwrap();
    let (_, node) = call("GET", &format!("{}/v1/nodes/{node}", engine.url), None);
    assert_eq!(node["conductor"], me, "{node}");
}

/// A driver uploaded to an engine on the shared store is the store's: an engine started on
/// the database with an empty data directory loads it, and an unload is the store's too.
#[test]
fn a_driver_uploaded_on_the_shared_store_loads_in_an_engine_with_an_empty_data_directory() {
    let dir = tempfile::tempdir().unwrap();
    let url = CLUSTER.database();
    let flags = ["--store-url", url.as_str()];
    let listed = |engine: &Engine| ok(engine, &["driver", "list"]).contains("template");
    let first = Engine::start(&dir.path().join("first"), &flags);
    ok(&first, &["driver", "load", deployd_fixtures::TEMPLATE]);
    assert!(listed(&first));
    assert!(
        !dir.path().join("first/plugins/template.wasm").exists(),
        "kept in the store, not in a directory"
    );
    first.stop();

    let second = Engine::start(&dir.path().join("second"), &flags);
    assert!(listed(&second), "{}", second.log_text());
    assert!(
        second
            .log_text()
            .contains("loaded driver from the shared store"),
        "{}",
        second.log_text()
    );
    ok(&second, &["driver", "unload", "template"]);
    second.stop();

    let third = Engine::start(&dir.path().join("third"), &flags);
    assert!(!listed(&third), "the unload was kept");
    // A kept component whose bytes changed in the database is refused by name.
    ok(&third, &["driver", "load", deployd_fixtures::TEMPLATE]);
    third.stop();
    CLUSTER.psql(
        deployd_test_support::postgres::database_of(&url),
        "UPDATE driver_versions SET body = body || '\\x00'::bytea",
    );
    let fourth = Engine::start(&dir.path().join("fourth"), &flags);
    let log = fourth.log_text();
    assert!(
        log.contains("the shared store's copy has sha256") && log.contains("recorded at upload"),
        "{log}"
    );
    assert!(!listed(&fourth));
    fourth.stop();
}

/// Engines on one database follow each other's driver uploads as they run: a driver
/// loaded through one is listed by the other within moments and deploys a node through
/// it, and an unload through the second is the first's too. A node's flow pinned to an
/// uploaded version carries on through an engine that never loaded that version: the
/// engine running the flow is killed after a newer version was uploaded, and an engine
/// started in its place (an empty data directory) fetches the pinned one from the store.
#[test]
fn a_driver_uploaded_through_one_engine_deploys_through_another_and_a_pinned_version_follows() {
    let dir = tempfile::tempdir().unwrap();
    let url = CLUSTER.database();
    let flags = shared_flags(dir.path(), 40, &url);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let port = emulators::free_tcp_port();
    let first = Engine::start_on(port, &dir.path().join("first"), &flags);
    let second = Engine::start(&dir.path().join("second"), &flags);
    let lists = |engine: &Engine, name: &str| ok(engine, &["driver", "list"]).contains(name);
    let soon = |check: &dyn Fn() -> bool| {
        (0..100).any(|_| {
            std::thread::sleep(Duration::from_millis(50));
            check()
        })
    };
    ok(&first, &["driver", "load", deployd_fixtures::TEMPLATE]);
    assert!(
        soon(&|| lists(&second, "template")),
        "{}",
        second.log_text()
    );
    ok(&second, &crate::deployd_cli::CREATE_T1);
    for step in ["manage", "provide", "deploy", "undeploy"] {
        ok(&second, &["node", step, "t1", "--wait"]);
    }
    ok(&second, &["node", "delete", "t1"]);
    ok(&second, &["driver", "unload", "template"]);
    assert!(soon(&|| !lists(&first, "template")), "{}", first.log_text());
    second.stop();

    // A version of agent_redfish of the store's own (its limits make it one), pinned by a
    // deploy on the first engine; then a newer one uploaded.
    let upload = |deadline: &str| {
        let loaded = ok(
            &first,
            &[
                "driver",
                "load",
                deployd_fixtures::AGENT_REDFISH,
                "--deadline-ms",
                deadline,
            ],
        );
        assert!(loaded.starts_with("loaded agent_redfish"), "{loaded}");
    };
    upload("20000");
    let lab = Lab::start(&dir.path().join("lab"), 1, &first.url, "1M");
    let img = dir.path().join("image.raw");
    let sha = image(&img, 8 << 20);
    let node = enroll(&first.url, &lab.machines[0], "agent_redfish", &img, &sha);
    provision(&first.url, &node, "active");
    let pinned = wait_node(&first.url, &node, 30, |n| written(n) >= 1 << 20);
    let version = pinned["driver_internal_info"]["driver_hash"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(version.contains("+20000ms"), "{version}");
    upload("25000");
    first.kill();
    let standin = Engine::start_on(port, &dir.path().join("standin"), &flags);
    wait_active(&standin, &node, &[]);
    let disk = Path::new(lab.machines[0]["disk"].as_str().unwrap());
    assert_eq!(sha256_of(disk), sha);
    let log = standin.log_text();
    assert!(
        log.contains("loaded a pinned driver version from the shared store")
            && log.contains(&version),
        "{log}"
    );
}

/// A fleet moves between the backends through a backup: taken from an engine on sled,
/// restored into an empty database and served there; taken again from that engine,
/// restored into a new data directory and served on sled. And through `store copy`, sled
/// to PostgreSQL to sled, each copy read back and checked. Each time every node keeps its
/// state, name, port and chassis, and its history.
#[test]
fn a_fleet_moves_from_sled_to_the_shared_store_and_back_through_a_backup() {
    let dir = tempfile::tempdir().unwrap();
    let url = CLUSTER.database();
    let engine = Engine::start(&dir.path().join("sled"), &[]);
    let (status, chassis) = call(
        "POST",
        &format!("{}/v1/chassis", engine.url),
        Some(serde_json::json!({"description": "rack 1"})),
    );
    assert_eq!(status, 201, "{chassis}");
    for i in 0..12 {
        let body = serde_json::json!({"driver": "fake", "name": format!("n{i}"), "chassis_uuid": chassis["uuid"]});
        let (status, node) = call("POST", &format!("{}/v1/nodes", engine.url), Some(body));
        assert_eq!(status, 201, "{node}");
        let port = serde_json::json!({"node_uuid": node["uuid"], "address": format!("52:54:00:00:01:{i:02x}")});
        assert_eq!(
            call("POST", &format!("{}/v1/ports", engine.url), Some(port)).0,
            201
        );
    }
    provision(&engine.url, "n0", "manage");
    wait_node(&engine.url, "n0", 30, |n| state(n) == "manageable");
    let fleet = |engine: &Engine| {
        let (_, list) = call("GET", &format!("{}/v1/nodes/detail", engine.url), None);
        let mut nodes: Vec<(String, String, String)> = list["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| {
                let s = |k: &str| n[k].as_str().unwrap_or_default().to_owned();
                (s("name"), s("provision_state"), s("chassis_uuid"))
            })
            .collect();
        nodes.sort();
        let (_, mut history) = call("GET", &format!("{}/v1/nodes/n0/history", engine.url), None);
        // Each event's link names the engine that shows it.
        for event in history["history"].as_array_mut().unwrap() {
            event.as_object_mut().unwrap().remove("links");
        }
        let (_, port) = call(
            "GET",
            &format!("{}/v1/ports?address=52:54:00:00:01:0b", engine.url),
            None,
        );
        (
            nodes,
            history["history"].clone(),
            port["ports"].as_array().unwrap().len(),
        )
    };
    let on_sled = fleet(&engine);
    assert_eq!((on_sled.0.len(), on_sled.2), (12, 1), "{on_sled:?}");
    assert!(on_sled.1.as_array().unwrap().len() >= 2, "{on_sled:?}");

    let file = dir.path().join("from-sled.backup");
    ok(
        &engine,
        &["store", "backup", "--to", file.to_str().unwrap()],
    );
    engine.stop();
    // The stopped engine's store copied into a database of its own, and from there into
    // a new data directory: checked by the copy, served at the end.
    let copied = CLUSTER.database();
    let sled_dir = dir.path().join("sled");
    let copy = |from: &str, to: &str| cli(&["store", "copy", "--from", from, "--to", to]);
    let said = copy(sled_dir.to_str().unwrap(), &copied).unwrap();
    assert!(
        said.contains("copied 12 nodes, 12 ports, 1 documents") && said.contains("equal (sha256"),
        "{said}"
    );
    let round_trip = dir.path().join("round-trip");
    let said = copy(&copied, round_trip.to_str().unwrap()).unwrap();
    assert!(said.contains("copied 12 nodes"), "{said}");
    let refused = copy(sled_dir.to_str().unwrap(), &copied).unwrap_err();
    assert!(refused.contains("already holds nodes"), "{refused}");
    let restore = || {
        cli(&[
            "store",
            "restore",
            "--from",
            file.to_str().unwrap(),
            "--store-url",
            &url,
        ])
    };
    let said = restore().unwrap();
    assert!(
        said.contains("restored 12 nodes, 12 ports, 1 documents"),
        "{said}"
    );
    let shared = Engine::start(&dir.path().join("shared"), &["--store-url", &url]);
    assert_eq!(fleet(&shared), on_sled);
    // Restored once, the database is not restored into again.
    let refused = restore().unwrap_err();
    assert!(
        refused.contains("engines are serving this database"),
        "{refused}"
    );

    let back = dir.path().join("from-shared.backup");
    ok(
        &shared,
        &["store", "backup", "--to", back.to_str().unwrap()],
    );
    shared.stop();
    let data = dir.path().join("back-on-sled");
    cli(&[
        "store",
        "restore",
        "--from",
        back.to_str().unwrap(),
        "--data-dir",
        data.to_str().unwrap(),
    ])
    .unwrap();
    let engine = Engine::start(&data, &[]);
    assert_eq!(fleet(&engine), on_sled);
    engine.stop();
    let engine = Engine::start(&round_trip, &[]);
    assert_eq!(fleet(&engine), on_sled);
    engine.stop();
}

/// `deployd` run with `args` and no engine: what it said, or why it failed.
fn cli(args: &[&str]) -> Result<String, String> {
    let out = std::process::Command::new(&*support::BIN)
        .args(args)
        .output()
        .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    match out.status.success() {
        true => Ok(said),
        false => Err(said),
    }
}
