//! Three engines serving one fleet on the shared store (the test cluster's PostgreSQL),
//! behind Debian's haproxy, the lab's agents and every call pointed at the balancer, as an
//! operator runs them: one engine killed mid-deploy while every node keeps deploying, and
//! the database itself crashing mid-deploy.

use deployd_test_support::{
    balancer::Balancer,
    emulators,
    postgres::{CLUSTER, Cluster},
    processes as support,
};

use std::path::Path;

use serde_json::Value;
use support::{Engine, Lab, call, image, provision, sha256_of, wait_node};

use crate::seed_end_to_end::{enroll, enroll_with, flags, history_events, state, written};

/// Three engines on the database at `url`, each with a data directory of its own and the
/// balancer's url as their public one, and the balancer in front of them.
fn three_engines(dir: &Path, timeout: u64, url: String) -> (Vec<Engine>, Balancer) {
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

/// Machines of the lab at `api` (through the balancer), both families in turn, each
/// deploying an image of `mib` MiB at 1 MiB/s; returns once every agent wrote its first
/// MiB: the lab, the nodes and the image's sha256.
fn deploying(dir: &Path, api: &str, machines: usize, mib: usize) -> (Lab, Vec<String>, String) {
    let lab = Lab::start(&dir.join("lab"), machines, api, "1M");
    let img = dir.join("image.raw");
    let sha = image(&img, mib << 20);
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
    (lab, nodes, sha)
}

/// Every node ends active with no `last_error`, none failed on the way (else the engines'
/// logs), and every disk holds the image.
fn all_active(api: &str, nodes: &[String], lab: &Lab, sha: &str, engines: &[Engine], dir: &Path) {
    for n in nodes {
        let done = wait_node(api, n, 120, |n| {
            let s = state(n);
            if matches!(s, "deploy failed" | "error") {
                panic!("{}\n{}", n["last_error"], logs(engines, dir));
            }
            s == "active"
        });
        assert_eq!(done["last_error"], Value::Null, "{done}");
    }
    for m in &lab.machines {
        let disk = Path::new(m["disk"].as_str().unwrap());
        assert_eq!(sha256_of(disk), sha, "{} holds the image", m["name"]);
    }
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
    let url = CLUSTER.database();
    let (mut engines, balancer) = three_engines(dir.path(), 10, url.clone());
    let api = balancer.url.as_str();
    let (lab, nodes, sha) = deploying(dir.path(), api, 4, 12);
    // An engine that heard no agent (outside the balancer) shows each node's agent as it
    // last reported to whichever engine heard it.
    let reader = Engine::start(&dir.path().join("reader"), &["--store-url", &url]);
    for n in &nodes {
        let (_, node) = call("GET", &format!("{}/v1/nodes/{n}", reader.url), None);
        assert!(written(&node) >= 1 << 20, "{node}");
        let info = &node["driver_internal_info"];
        assert!(info["agent_last_heartbeat"].is_string(), "{node}");
        assert!(
            info["agent_url"]
                .as_str()
                .is_some_and(|u| u.starts_with("http")),
            "{node}"
        );
    }
    // The pxe family's image writes each started once, by one engine, though the nodes'
    // heartbeats reached all three: the others saw the write going on in the store.
    for engine in &engines {
        let log = engine.log_text();
        assert!(
            !log.contains("no image write is known"),
            "an engine started a pxe node's image write again: {log}"
        );
    }
    reader.stop();
    let killed = engines.remove(0);
    let killed_url = killed.url.clone();
    killed.kill();
    all_active(api, &nodes, &lab, &sha, &engines, dir.path());
    // Each agent's image transfer is in its node's history once, though three engines
    // heard its heartbeats (each saw it start and end).
    for n in &nodes {
        let events = history_events(api, n);
        for milestone in ["Image transfer started", "Image transfer ended"] {
            let seen = events.iter().filter(|e| e.starts_with(milestone)).count();
            assert!(seen <= 1, "{milestone} {seen} times: {events:?}");
        }
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
    // The survivors alive; the killed engine and the reader (stopped) not.
    let survivors: Vec<String> = engines.iter().map(|e| port_of(&e.url)).collect();
    let expected = |all: &[(String, bool)]| {
        all.len() == 4
            && all.iter().any(|(port, _)| *port == port_of(&killed_url))
            && all.iter().all(|(port, up)| *up == survivors.contains(port))
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

/// Conductor groups: an engine of the default group and one of `rack2` on one store. Every
/// call and every agent goes to the default group's engine; the `rack2` node's steps are
/// still run by the `rack2` engine alone (its driver's words about the node are in that
/// engine's log only), the default group's by the other, and both deploy. With the `rack2`
/// engine gone, a call for its node is refused as Ironic refuses it and changes nothing.
#[test]
fn a_node_of_a_conductor_group_is_run_by_its_engine_whichever_engine_a_call_reaches() {
    let dir = tempfile::tempdir().unwrap();
    let url = CLUSTER.database();
    let flags = flags(dir.path(), 30);
    let mut flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    flags.extend(["--store-url", &url]);
    let plain = Engine::start(&dir.path().join("plain"), &flags);
    flags.extend(["--conductor-group", "Rack2"]);
    let rack = Engine::start(&dir.path().join("rack"), &flags);
    let (_, me) = call("GET", &format!("{}/v1/conductors", rack.url), None);
    let mut groups: Vec<&str> = me["conductors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["conductor_group"].as_str().unwrap())
        .collect();
    groups.sort();
    assert_eq!(groups, ["", "rack2"], "{me}");

    let api = plain.url.clone();
    let api = api.as_str();
    let lab = Lab::start(&dir.path().join("lab"), 2, api, "4M");
    let img = dir.path().join("image.raw");
    let sha = image(&img, 8 << 20);
    let [grouped, ungrouped] = [&lab.machines[0], &lab.machines[1]];
    let rack2 = serde_json::json!({"conductor_group": "rack2"});
    let grouped = enroll_with(api, grouped, "agent_redfish", &img, &sha, rack2);
    let ungrouped = enroll(api, ungrouped, "agent_redfish", &img, &sha);
    for n in [&grouped, &ungrouped] {
        provision(api, n, "active");
    }
    let engines = [plain, rack];
    all_active(
        api,
        &[grouped.clone(), ungrouped.clone()],
        &lab,
        &sha,
        &engines,
        dir.path(),
    );
    let [plain, rack] = engines;
    let acted_on = |engine: &Engine, node: &str| {
        engine
            .log_text()
            .lines()
            .any(|l| l.contains(node) && l.contains("the agent is writing image"))
    };
    let logs = || {
        format!(
            "== plain\n{}\n== rack\n{}",
            plain.log_text(),
            rack.log_text()
        )
    };
    assert!(
        acted_on(&rack, &grouped) && !acted_on(&plain, &grouped),
        "{}",
        logs()
    );
    assert!(
        acted_on(&plain, &ungrouped) && !acted_on(&rack, &ungrouped),
        "{}",
        logs()
    );
    // Each node names the engine its calls go to, whichever engine shows it.
    let port_of = |url: &str| url.rsplit(':').next().unwrap().to_owned();
    let (_, listed) = call(
        "GET",
        &format!("{api}/v1/nodes?fields=uuid,conductor"),
        None,
    );
    let conductor = |node: &str| {
        let nodes = listed["nodes"].as_array().unwrap();
        let entry = nodes.iter().find(|n| n["uuid"] == node).unwrap();
        port_of(entry["conductor"].as_str().unwrap_or_default())
    };
    assert_eq!(conductor(&grouped), port_of(&rack.url), "{listed}");
    assert_eq!(conductor(&ungrouped), port_of(&plain.url), "{listed}");

    rack.kill();
    let power = || {
        call(
            "PUT",
            &format!("{api}/v1/nodes/{grouped}/states/power"),
            Some(serde_json::json!({"target": "power off"})),
        )
    };
    // Refused at once (its engine cannot be reached), then as Ironic words it once its
    // lease lapsed (10 s).
    let mut answer = power();
    for _ in 0..200 {
        if answer.0 == 404 {
            break;
        }
        assert_eq!(answer.0, 503, "{}", answer.1);
        std::thread::sleep(std::time::Duration::from_millis(100));
        answer = power();
    }
    assert_eq!(answer.0, 404, "{}", answer.1);
    assert!(
        answer.1.to_string().contains("No valid host was found"),
        "{}",
        answer.1
    );
    let (_, node) = call("GET", &format!("{api}/v1/nodes/{grouped}"), None);
    assert_eq!(node["power_state"], "power on", "{node}");
    plain.stop();
}

/// A BMC that takes every request and never answers, and remembers each one's head (its
/// request line and headers): a machine whose BMC hangs mid-step.
struct SilentBmc {
    url: String,
    heard: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl SilentBmc {
    fn start() -> SilentBmc {
        use std::io::Read;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let heard = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let kept = heard.clone();
        std::thread::spawn(move || {
            for mut stream in listener.incoming().flatten() {
                let kept = kept.clone();
                std::thread::spawn(move || {
                    let mut head = Vec::new();
                    let mut byte = [0u8; 1];
                    while !head.ends_with(b"\r\n\r\n")
                        && stream.read(&mut byte).is_ok_and(|n| n == 1)
                    {
                        head.push(byte[0]);
                    }
                    kept.lock()
                        .unwrap()
                        .push(String::from_utf8_lossy(&head).into_owned());
                    // Held open, unanswered, until the caller gives up.
                    let _ = stream.read_to_end(&mut head);
                });
            }
        });
        SilentBmc { url, heard }
    }

    /// Whether a request came from the engine at `engine_url` (its `User-Agent` names it).
    fn heard_from(&self, engine_url: &str) -> bool {
        let port = engine_url.rsplit(':').next().unwrap();
        let name = format!(":{port})");
        self.heard.lock().unwrap().iter().any(|head| {
            head.lines()
                .any(|l| l.to_ascii_lowercase().starts_with("user-agent:") && l.ends_with(&name))
        })
    }
}

/// An engine is SIGKILLed while its step holds a node in `deploying` (waiting on a BMC
/// that stopped answering): a survivor takes the node over, fails it naming the killed
/// engine, and runs the driver's clean-up the killed engine never ran (its power-off
/// reaches the BMC from the survivor).
#[test]
fn a_survivor_fails_a_dead_engines_busy_node_and_runs_its_clean_up() {
    let dir = tempfile::tempdir().unwrap();
    let (mut engines, balancer) = three_engines(dir.path(), 60, CLUSTER.database());
    let api = balancer.url.as_str();
    let lab = Lab::start(&dir.path().join("lab"), 1, api, "1M");
    let img = dir.path().join("image.raw");
    let sha = image(&img, 1 << 20);
    let node = enroll(api, &lab.machines[0], "agent_redfish", &img, &sha);
    let bmc = SilentBmc::start();
    let patch = serde_json::json!([
        {"op": "replace", "path": "/driver_info/redfish_address", "value": bmc.url}
    ]);
    let (status, body) = call("PATCH", &format!("{api}/v1/nodes/{node}"), Some(patch));
    assert_eq!(status, 200, "{body}");
    // The deploy through one engine, whose step then waits on the BMC.
    let doomed = engines.remove(0);
    let doomed_url = doomed.url.clone();
    provision(&doomed_url, &node, "active");
    let waiting = (0..300).any(|_| {
        std::thread::sleep(std::time::Duration::from_millis(100));
        bmc.heard_from(&doomed_url)
    });
    assert!(
        waiting,
        "the deploy never called the BMC: {}",
        doomed.log_text()
    );
    let (_, busy) = call("GET", &format!("{api}/v1/nodes/{node}"), None);
    assert_eq!(state(&busy), "deploying", "{busy}");
    doomed.kill();
    let failed = wait_node(api, &node, 60, |n| state(n) == "deploy failed");
    let why = failed["last_error"].as_str().unwrap_or_default();
    let port = doomed_url.rsplit(':').next().unwrap();
    assert!(why.contains(&format!(":{port}")), "{failed}");
    let cleaned = (0..300).any(|_| {
        std::thread::sleep(std::time::Duration::from_millis(100));
        engines.iter().any(|e| bmc.heard_from(&e.url))
    });
    assert!(
        cleaned,
        "no survivor ran the clean-up: {}",
        logs(&engines, dir.path())
    );
    drop(balancer);
}

/// The database crashes mid-deploy under three engines (PostgreSQL stopped in immediate
/// mode, its connections cut, and started again from its write-ahead log): the nodes
/// enrolled (acknowledged) just before are there after, every node of both
/// families ends active with the image, none failed on the way (a 10 s deploy timeout:
/// the agents' heartbeats meet a database that is down, and carry on once it is back).
#[test]
fn the_database_crashing_mid_deploy_loses_no_acknowledged_write_and_fails_no_node() {
    let dir = tempfile::tempdir().unwrap();
    let own = Cluster::own();
    let (engines, balancer) = three_engines(dir.path(), 10, own.database());
    let api = balancer.url.as_str();
    let (lab, nodes, sha) = deploying(dir.path(), api, 2, 12);
    // Writes acknowledged just before the crash, through each engine in turn.
    for i in 0..3 {
        let body = serde_json::json!({"name": format!("acknowledged-{i}"), "driver": "fake", "extra": {"i": i}});
        let (status, node) = call("POST", &format!("{api}/v1/nodes"), Some(body));
        assert_eq!(status, 201, "{node}");
    }
    own.crash_and_restart();
    all_active(api, &nodes, &lab, &sha, &engines, dir.path());
    for i in 0..3 {
        let (status, node) = call("GET", &format!("{api}/v1/nodes/acknowledged-{i}"), None);
        assert_eq!(
            (status, &node["extra"]["i"]),
            (200, &serde_json::json!(i)),
            "{node}"
        );
    }
    let met_it = engines.iter().any(|e| {
        let log = e.log_text();
        log.contains("listening again") || log.contains("could not renew")
    });
    assert!(
        met_it,
        "no engine met the crash: {}",
        logs(&engines, dir.path())
    );
    drop(balancer);
}

/// One of three engines paused (SIGSTOP) past its lease while the nodes deploy: the
/// survivors declare it dead and carry every node on. Resumed (SIGCONT), it finds it was
/// declared dead and rejoins under a new epoch; from the moment it was declared dead until
/// it rejoined, no BMC heard from it (the lab's BMC records who called, by `User-Agent`).
/// Every node ends active with the image, none failed.
#[test]
fn an_engine_paused_past_its_lease_acts_on_no_machine_once_declared_dead_and_rejoins() {
    let dir = tempfile::tempdir().unwrap();
    let (engines, balancer) = three_engines(dir.path(), 30, CLUSTER.database());
    let api = balancer.url.as_str();
    let (lab, nodes, sha) = deploying(dir.path(), api, 4, 24);
    let (paused, survivor) = (&engines[0], &engines[1]);
    let port = paused.url.rsplit(':').next().unwrap().to_owned();
    // Whether the survivor lists the paused engine alive.
    let alive = || -> bool {
        let (_, all) = call("GET", &format!("{}/v1/conductors", survivor.url), None);
        let all = all["conductors"].as_array().cloned().unwrap_or_default();
        all.iter().any(|c| {
            c["hostname"]
                .as_str()
                .unwrap()
                .ends_with(&format!(":{port}"))
                && c["alive"] == true
        })
    };
    let now_ms = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64
    };
    paused.pause();
    let declared = (0..300).any(|_| {
        std::thread::sleep(std::time::Duration::from_millis(100));
        !alive()
    });
    assert!(declared, "the paused engine was not declared dead");
    let dead_from = now_ms();
    std::thread::sleep(std::time::Duration::from_secs(3));
    paused.resume();
    let mut dead_until = now_ms();
    let rejoined = (0..300).any(|_| {
        std::thread::sleep(std::time::Duration::from_millis(100));
        if alive() {
            return true;
        }
        dead_until = now_ms();
        false
    });
    assert!(rejoined, "{}", paused.log_text());
    assert!(
        paused.log_text().contains("rejoined under a new epoch"),
        "{}",
        paused.log_text()
    );

    all_active(api, &nodes, &lab, &sha, &engines, dir.path());
    let requests: Vec<Value> = reqwest::blocking::get(format!("{}/lab/requests", lab.bmc))
        .unwrap()
        .json()
        .unwrap();
    let mine = format!(":{port})");
    assert!(
        requests
            .iter()
            .any(|r| r["user_agent"].as_str().unwrap().starts_with("deployd/")),
        "the BMC names its callers: {requests:?}"
    );
    let while_dead: Vec<&Value> = requests
        .iter()
        .filter(|r| r["user_agent"].as_str().unwrap().ends_with(&mine))
        .filter(|r| (dead_from..dead_until).contains(&r["at_ms"].as_u64().unwrap()))
        .collect();
    assert!(while_dead.is_empty(), "{while_dead:?}");
    drop(balancer);
}

/// `deployd demo --engines 3`: the demo's story told by three engines sharing a PostgreSQL
/// cluster the demo starts from Debian's binaries, behind its own balancer; one engine is
/// killed midway, the others carry every node on, and the killed agent's node times out
/// as on one engine. It exits 0, listing the killed engine dead.
#[test]
fn deployd_demo_with_three_engines_tells_the_story_through_a_killed_engine() {
    let out = std::process::Command::new(&*support::BIN)
        .args([
            "demo",
            "--engines",
            "3",
            "--machines",
            "3",
            "--image-mb",
            "16",
            "--throttle",
            "2M",
            "--timeout",
            "3",
        ])
        .env("RUST_LOG", "warn")
        .output()
        .expect("running deployd demo");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for said in [
        "3 engines",
        "killed the engine at",
        "killed the agent of",
        "the demo ended as expected",
    ] {
        assert!(stdout.contains(said), "{said:?} not in:\n{stdout}");
    }
    let listed: Vec<&str> = stdout
        .lines()
        .skip_while(|l| !l.contains("GET /v1/conductors"))
        .skip(1)
        .collect();
    assert_eq!(listed.len(), 3, "{stdout}");
    assert_eq!(
        listed.iter().filter(|l| l.ends_with("dead")).count(),
        1,
        "{stdout}"
    );
}

/// openstacksdk's own functional baremetal suite, unmodified, through the balancer in front
/// of three engines on one shared store: every test passes, none skipped, as against one
/// engine on sled.
#[test]
fn openstacksdk_functional_baremetal_suite_passes_through_three_engines() {
    let dir = tempfile::tempdir().unwrap();
    let (engines, balancer) = three_engines(dir.path(), 1800, CLUSTER.database());
    crate::client_suites::openstacksdk_suite_passes(dir.path(), &balancer.url);
    drop(balancer);
    drop(engines);
}

/// python-ironicclient's own functional suite, unmodified but for its noauth setup guard,
/// through the balancer in front of three engines on one shared store: each of its CLI
/// calls may reach another engine than the last, and every test passes.
#[test]
fn python_ironicclient_functional_suite_passes_through_three_engines() {
    let dir = tempfile::tempdir().unwrap();
    let (engines, balancer) = three_engines(dir.path(), 1800, CLUSTER.database());
    crate::client_suites::ironicclient_suite_passes(&balancer.url);
    drop(balancer);
    drop(engines);
}
