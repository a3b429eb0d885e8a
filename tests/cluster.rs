//! Three engines serving one fleet on the shared store (the test cluster's PostgreSQL),
//! behind Debian's haproxy, the lab's agents and every call pointed at the balancer, as an
//! operator runs them: one engine killed mid-deploy while every node keeps deploying.

use deployd_test_support::{
    balancer::Balancer, emulators, postgres::CLUSTER, processes as support,
};

use std::path::Path;

use serde_json::Value;
use support::{Engine, Lab, call, image, provision, sha256_of, wait_node};

use crate::seed_end_to_end::{enroll, flags, state, written};

/// Three engines on one new database, each with a data directory of its own and the
/// balancer's url as their public one, and the balancer in front of them.
fn three_engines(dir: &Path, timeout: u64) -> (Vec<Engine>, Balancer) {
    let url = CLUSTER.database();
    let ports: Vec<u16> = (0..3).map(|_| emulators::free_tcp_port()).collect();
    let addrs: Vec<String> = ports
        .iter()
        .map(|p| format!("http://127.0.0.1:{p}"))
        .collect();
    let balancer = Balancer::start(
        &dir.join("balancer"),
        &addrs.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    let mut flags = flags(dir, timeout);
    flags.extend([
        "--store-url".to_owned(),
        url,
        "--public-url".to_owned(),
        balancer.url.clone(),
    ]);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let engines = ports
        .iter()
        .enumerate()
        .map(|(i, &port)| Engine::start_on(port, &dir.join(format!("engine{i}")), &flags))
        .collect();
    (engines, balancer)
}

/// Every engine's log and the lab's (`dir/lab`'s), for a failure's message.
fn logs(engines: &[Engine], dir: &Path) -> String {
    let mut all: Vec<String> = engines
        .iter()
        .map(|e| format!("== {}\n{}", e.url, e.log_text()))
        .collect();
    let lab = std::fs::read_to_string(dir.join("lab.lab.log")).unwrap_or_default();
    all.push(format!("== lab\n{lab}"));
    all.join("\n")
}

/// Four machines deploy, two of each family, 12 MiB each at 1 MiB/s through the
/// balancer; once every agent has written its first MiB, one engine is SIGKILLed. Every
/// node ends active with the image on its disk, none failed on the way (no false
/// timeout: a 10 s deploy timeout, shorter than what is left of each write), and the
/// survivors list the killed engine dead once its lease lapsed.
#[test]
fn three_engines_behind_a_balancer_deploy_every_node_through_one_killed_mid_deploy() {
    let dir = tempfile::tempdir().unwrap();
    let (mut engines, balancer) = three_engines(dir.path(), 10);
    let api = balancer.url.as_str();
    let lab = Lab::start(&dir.path().join("lab"), 4, api, "1M");
    let img = dir.path().join("image.raw");
    let sha = image(&img, 12 << 20);
    let families = ["agent_redfish", "pxe_redfish"];
    let nodes: Vec<String> = lab
        .machines
        .iter()
        .enumerate()
        .map(|(i, m)| enroll(api, m, families[i % 2], &img, &sha))
        .collect();
    for n in &nodes {
        provision(api, n, "active");
    }
    for n in &nodes {
        wait_node(api, n, 60, |n| written(n) >= 1 << 20);
    }
    let killed = engines.remove(0);
    let killed_url = killed.url.clone();
    killed.kill();

    let mut seen = Vec::new();
    for n in &nodes {
        let done = wait_node(api, n, 120, |n| {
            let s = state(n);
            if matches!(s, "deploy failed" | "error") {
                panic!("{}\n{}", n["last_error"], logs(&engines, dir.path()));
            }
            s == "active"
        });
        assert_eq!(done["last_error"], Value::Null, "{done}");
        seen.push(done);
    }
    for m in &lab.machines {
        let disk = Path::new(m["disk"].as_str().unwrap());
        assert_eq!(sha256_of(disk), sha, "{} holds the image", m["name"]);
    }
    // The survivors name the killed engine dead once its lease (10 s) lapsed, and
    // themselves alive.
    let port_of = |url: &str| url.rsplit(':').next().unwrap().to_owned();
    let listed = || -> Vec<(String, bool)> {
        let (_, conductors) = call("GET", &format!("{api}/v1/conductors"), None);
        conductors["conductors"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| (port_of(c["hostname"].as_str().unwrap()), c["alive"] == true))
            .collect()
    };
    let expected = |all: &[(String, bool)]| {
        all.len() == 3
            && all
                .iter()
                .all(|(port, up)| *up == (*port != port_of(&killed_url)))
    };
    let mut all = listed();
    for _ in 0..300 {
        if expected(&all) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
        all = listed();
    }
    assert!(expected(&all), "{all:?}");
    drop(balancer);
}
