//! The seed bug, end to end over real processes on loopback: `deployd serve`, `deployd
//! lab` (a Redfish BMC whose power-on boots a `deployd agent` process per machine), the
//! agents writing real disk files, and the image given as a local path the engine serves.
//!
//! The contract: every heartbeat of a live agent moves `provision_updated_at`, so a write
//! far longer than `deploy_callback_timeout` ends active; a dead agent still times out;
//! a timeout of 0 disables the check; an engine crash loses nothing.

use deployd_test_support::{emulators, processes as support};

use std::path::Path;
use std::time::Duration;

use tokio::time::Instant;

use serde_json::{Value, json};
use support::{
    Engine, Lab, call, image, make_available, make_available_without_cleaning, provision,
    sha256_of, wait_node,
};

/// Engine flags: this deploy timeout, sweeps every second, agents heartbeating every
/// 0.3–0.6 s (30–60 % of a 1 s heartbeat timeout), local images allowed from `dir`.
pub(crate) fn flags(dir: &Path, timeout: u64) -> Vec<String> {
    let allowed = format!("--file-url-allowed-path={}", dir.display());
    [
        "--deploy-callback-timeout",
        &timeout.to_string(),
        "--clean-callback-timeout",
        "30",
        "--check-provision-state-interval",
        "1",
        "--ramdisk-heartbeat-timeout",
        "1",
        &allowed,
    ]
    .map(str::to_owned)
    .to_vec()
}

fn engine(dir: &Path, timeout: u64) -> Engine {
    let flags = flags(dir, timeout);
    Engine::start(
        &dir.join("data"),
        &flags.iter().map(String::as_str).collect::<Vec<_>>(),
    )
}

/// Enrolls a lab machine with `driver`, its port, and the image; walks it to available.
pub(crate) fn enroll(
    url: &str,
    machine: &Value,
    driver: &str,
    image: &Path,
    sha256: &str,
) -> String {
    enroll_with(url, machine, driver, image, sha256, json!({}))
}

/// [`enroll`] with more fields (`more`, an object) in the node's create body.
pub(crate) fn enroll_with(
    url: &str,
    machine: &Value,
    driver: &str,
    image: &Path,
    sha256: &str,
    more: Value,
) -> String {
    let mut body = json!({
        "name": machine["name"],
        "driver": driver,
        "driver_info": {
            "redfish_address": machine["redfish_address"],
            "redfish_system_id": machine["redfish_system_id"],
        },
        "instance_info": {
            "image_source": image.display().to_string(),
            "image_os_hash_algo": "sha256",
            "image_os_hash_value": sha256,
        },
    });
    for (key, value) in more.as_object().into_iter().flatten() {
        body[key] = value.clone();
    }
    let (status, node) = call("POST", &format!("{url}/v1/nodes"), Some(body));
    assert_eq!(status, 201, "{node}");
    let uuid = node["uuid"].as_str().unwrap().to_owned();
    let (status, port) = call(
        "POST",
        &format!("{url}/v1/ports"),
        Some(json!({"node_uuid": uuid, "address": machine["mac"]})),
    );
    assert_eq!(status, 201, "{port}");
    make_available(url, &uuid);
    uuid
}

/// An engine with `flags` and a lab of two machines, each enrolled with `agent_redfish`
/// for an 8 MiB image its agent writes at 1 MiB/s, walked to available: (engine, lab,
/// the two nodes, the image's sha256).
pub(crate) fn two_machines(dir: &Path, flags: &[String]) -> (Engine, Lab, String, String, String) {
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let engine = Engine::start(&dir.join("data"), &flags);
    let lab = Lab::start(&dir.join("lab"), 2, &engine.url, "1M");
    let img = dir.join("image.raw");
    let sha = image(&img, 8 << 20);
    let first = enroll(&engine.url, &lab.machines[0], "agent_redfish", &img, &sha);
    let second = enroll(&engine.url, &lab.machines[1], "agent_redfish", &img, &sha);
    (engine, lab, first, second, sha)
}

/// The words of each event in a node's history, oldest first.
pub(crate) fn history_events(api: &str, node: &str) -> Vec<String> {
    let url = format!("{api}/v1/nodes/{node}/history?detail=true");
    let (_, history) = call("GET", &url, None);
    history["history"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["event"].as_str().map(str::to_owned))
        .collect()
}

pub(crate) fn state(n: &Value) -> &str {
    n["provision_state"].as_str().unwrap_or("?")
}

/// Bytes the agent reported in its last heartbeat.
pub(crate) fn written(n: &Value) -> u64 {
    n["driver_internal_info"]["agent_status_message"]
        .as_str()
        .and_then(|m| m.parse::<deployd_wire::agent::Progress>().ok())
        .map_or(0, |p| p.written)
}

/// Waits until the node is active; a failure on the way stops the test with its
/// `last_error` and the logs (the engine's and these).
pub(crate) fn wait_active(engine: &Engine, node: &str, logs: &[&Path]) -> Value {
    let n = wait_node(&engine.url, node, 90, |n| {
        if matches!(state(n), "deploy failed" | "error") {
            let logs: Vec<String> = logs
                .iter()
                .map(|l| std::fs::read_to_string(l).unwrap_or_default())
                .collect();
            panic!(
                "{}\nlogs:\n{}\nengine log:\n{}",
                n["last_error"],
                logs.join("\n"),
                engine.log_text()
            );
        }
        state(n) == "active"
    });
    assert_eq!(n["last_error"], Value::Null);
    n
}

fn time(n: &Value, field: &str) -> chrono::DateTime<chrono::Utc> {
    let text = n[field]
        .as_str()
        .or_else(|| n["driver_internal_info"][field].as_str())
        .unwrap_or_else(|| panic!("{field} in {n}"));
    chrono::DateTime::parse_from_rfc3339(text).unwrap().to_utc()
}

#[test]
fn a_write_five_times_longer_than_the_timeout_ends_active_for_both_families() {
    let dir = tempfile::tempdir().unwrap();
    let engine = engine(dir.path(), 2);
    let lab = Lab::start(&dir.path().join("lab"), 2, &engine.url, "1M");
    // 11 MiB at 1 MiB/s: about 11 s of writing against a 2 s timeout.
    let img = dir.path().join("image.raw");
    let sha = image(&img, 11 << 20);
    let nodes = [
        enroll(&engine.url, &lab.machines[0], "agent_redfish", &img, &sha),
        enroll(&engine.url, &lab.machines[1], "pxe_redfish", &img, &sha),
    ];
    let started = Instant::now();
    for n in &nodes {
        provision(&engine.url, n, "active");
    }
    for n in &nodes {
        wait_active(&engine, n, &[]);
    }
    let took = started.elapsed();
    assert!(
        took >= Duration::from_secs(10),
        "the premise: the writes lasted 5 × the timeout ({took:?})"
    );
    for m in &lab.machines {
        let disk = Path::new(m["disk"].as_str().unwrap());
        assert_eq!(sha256_of(disk), sha, "{} holds the image", m["name"]);
        let view = lab.machine(m["name"].as_str().unwrap());
        assert_eq!(view["power"], "On", "booted into the instance");
        assert_eq!(view["boot"], "Hdd");
        assert_eq!(view["agent_running"], false);
    }
    // Each deploy's timeline, as `deployd node show` prints it: the phases in order.
    for n in &nodes {
        let out = std::process::Command::new(&*support::BIN)
            .args(["node", "show", n])
            .env("DEPLOYD_URL", &engine.url)
            .output()
            .unwrap();
        assert!(out.status.success());
        let text = String::from_utf8_lossy(&out.stdout);
        let timeline = &text[text.find("\ntimeline:").expect("a timeline")..];
        // The phases in order; a group's entries in either order (the machine's agent may
        // look the node up before the engine has recorded the power-on that started it).
        let phases: [&[&str]; 6] = [
            &["(deploy)"],
            &["Machine is now in power on", "looked the node up"],
            &["First heartbeat from agent deployd-agent"],
            &["Image transfer started (11534336 bytes)"],
            &["Image transfer ended: 11534336 bytes in"],
            &["to \"active\""],
        ];
        let mut from = 0;
        for group in phases {
            let ends = group.iter().map(|phase| {
                let at = timeline[from..]
                    .find(phase)
                    .unwrap_or_else(|| panic!("no {phase:?} after byte {from} of {timeline}"));
                from + at
            });
            from = ends.max().expect("a group has phases");
        }
    }
}

/// An htpasswd file in `dir` with these users and passwords, bcrypt at `cost`; its path.
pub(crate) fn htpasswd(dir: &Path, users: &[(&str, &str)], cost: u32) -> String {
    let path = dir.join("htpasswd");
    let lines: String = users
        .iter()
        .map(|(user, password)| format!("{user}:{}\n", bcrypt::hash(password, cost).unwrap()))
        .collect();
    std::fs::write(&path, lines).unwrap();
    path.display().to_string()
}

/// The hardening issue's stall: with `http_basic` at bcrypt cost 12, eight clients
/// sending wrong passwords made `GET /v1` take 5 s and all three healthy lab deploys time
/// out (5 s timeout). Now bcrypt runs on its own thread behind a queue per client, so the
/// engine answers agents and operators through a 32-thread flood, every deploy ends
/// active, an operator the engine has not yet verified gets in from another address, and
/// the refusals are not logged one by one.
#[test]
fn a_wrong_password_flood_during_deploys_times_nothing_out_nor_locks_an_operator_out() {
    let dir = tempfile::tempdir().unwrap();
    let htpasswd = htpasswd(
        dir.path(),
        &[("admin", "s3cret"), ("operator", "0perator")],
        12,
    );
    let mut flags = flags(dir.path(), 5);
    // Ironic's spelling of the strategy, which the flag now takes too.
    flags.extend(
        [
            "--auth-strategy",
            "http_basic",
            "--http-basic-auth-user-file",
        ]
        .map(str::to_owned),
    );
    flags.push(htpasswd);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let engine = Engine::start(&dir.path().join("data"), &flags);
    support::authenticate_as("admin", "s3cret");
    let lab = Lab::start(&dir.path().join("lab"), 3, &engine.url, "1M");
    let img = dir.path().join("image.raw");
    let sha = image(&img, 8 << 20);
    let nodes: Vec<String> = lab
        .machines
        .iter()
        .map(|m| enroll(&engine.url, m, "agent_redfish", &img, &sha))
        .collect();
    let probe = |n: usize| -> Vec<Duration> {
        let http = reqwest::blocking::Client::new();
        let mut latencies: Vec<Duration> = (0..n)
            .map(|_| {
                let t = Instant::now();
                assert!(
                    http.get(format!("{}/v1", engine.url))
                        .send()
                        .unwrap()
                        .status()
                        .is_success()
                );
                std::thread::sleep(Duration::from_millis(50));
                t.elapsed() - Duration::from_millis(50)
            })
            .collect();
        latencies.sort();
        latencies
    };
    let quiet = probe(20);

    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flooders: Vec<_> = (0..32)
        .map(|i| {
            let (url, stop) = (format!("{}/v1/nodes", engine.url), stop.clone());
            std::thread::spawn(move || {
                let http = reqwest::blocking::Client::new();
                let mut answers = std::collections::BTreeMap::<u16, u32>::new();
                let mut n = 0;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let status = http
                        .get(&url)
                        .basic_auth("admin", Some(format!("guess-{i}-{n}")))
                        .send()
                        .map_or(0, |r| r.status().as_u16());
                    *answers.entry(status).or_default() += 1;
                    n += 1;
                }
                answers
            })
        })
        .collect();
    for n in &nodes {
        provision(&engine.url, n, "active");
    }
    let flooded = probe(40);
    // An operator not yet verified, from another address than the flood's.
    let operator = reqwest::blocking::Client::builder()
        .local_address(std::net::IpAddr::from([127, 0, 0, 2]))
        .build()
        .unwrap();
    let started = Instant::now();
    let answer = operator
        .get(format!("{}/v1/nodes", engine.url))
        .basic_auth("operator", Some("0perator"))
        .send()
        .unwrap();
    let operator_took = started.elapsed();
    assert_eq!(answer.status(), 200, "the operator got in during the flood");
    for n in &nodes {
        wait_active(&engine, n, &[]);
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut answers = std::collections::BTreeMap::<u16, u32>::new();
    for f in flooders {
        for (status, count) in f.join().unwrap() {
            *answers.entry(status).or_default() += count;
        }
    }
    for m in &lab.machines {
        let disk = Path::new(m["disk"].as_str().unwrap());
        assert_eq!(sha256_of(disk), sha, "{} holds the image", m["name"]);
    }
    assert!(answers.get(&401).copied().unwrap_or(0) > 0, "{answers:?}");
    assert!(
        answers.keys().all(|s| matches!(s, 401 | 503)),
        "only refusals: {answers:?}"
    );
    let log = engine.log_text();
    let refusals = log.matches("authentication checks refused").count();
    assert!(
        !log.contains("response failed") && refusals <= 20,
        "{refusals} refusal lines, or refusals as errors:\n{}",
        &log[log.len().saturating_sub(4000)..]
    );
    // Reported, not asserted (timing is for the benches): GET /v1 through the flood.
    println!(
        "GET /v1 p50 {:?} before, {:?} during a wrong-password flood ({answers:?}); the operator's first request took {operator_took:?}",
        quiet[quiet.len() / 2],
        flooded[flooded.len() / 2]
    );
}

/// One lab machine deploying an 8 MiB image at 1 MiB/s under this timeout, its agent
/// SIGKILLed once it reported 1 MiB written: (dir, engine, lab, node, image sha256).
fn kill_an_agent_mid_write(timeout: u64) -> (tempfile::TempDir, Engine, Lab, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let engine = engine(dir.path(), timeout);
    let lab = Lab::start(&dir.path().join("lab"), 1, &engine.url, "1M");
    let img = dir.path().join("image.raw");
    let sha = image(&img, 8 << 20);
    let node = enroll(&engine.url, &lab.machines[0], "agent_redfish", &img, &sha);
    provision(&engine.url, &node, "active");
    wait_node(&engine.url, &node, 30, |n| written(n) >= 1 << 20);
    lab.kill_agent("machine-000");
    (dir, engine, lab, node, sha)
}

#[test]
fn a_killed_agent_fails_its_deploy_within_the_timeout_and_one_sweep() {
    let (_dir, engine, lab, node, sha) = kill_an_agent_mid_write(2);
    // A heartbeat in flight at the kill still lands; then there are no more.
    std::thread::sleep(Duration::from_millis(500));
    let (_, before) = call("GET", &format!("{}/v1/nodes/{node}", engine.url), None);
    let last_heartbeat = time(&before, "agent_last_heartbeat");
    let failed = wait_node(&engine.url, &node, 30, |n| state(n) != "wait call-back");
    assert_eq!(state(&failed), "deploy failed");
    let error = failed["last_error"].as_str().unwrap();
    assert!(
        error.contains("Timeout reached while waiting for callback")
            && error.contains("deploy_callback_timeout is 2 s"),
        "{error}"
    );
    // Failed at timeout + at most one sweep interval (1 s) after the last heartbeat, on
    // the engine's own clock.
    let silent = (time(&failed, "provision_updated_at") - last_heartbeat)
        .to_std()
        .unwrap();
    assert!(
        silent >= Duration::from_secs(2) && silent <= Duration::from_millis(3_300),
        "failed {silent:?} after the last heartbeat"
    );
    let disk = Path::new(lab.machines[0]["disk"].as_str().unwrap());
    assert_ne!(sha256_of(disk), sha, "the disk does not hold the image");
    // The driver's clean-up runs after the failure: it powers the machine off.
    let deadline = Instant::now() + Duration::from_secs(20);
    while lab.machine("machine-000")["power"] != "Off" {
        assert!(
            Instant::now() < deadline,
            "the clean-up never powered it off"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn with_a_timeout_of_zero_a_dead_agent_leaves_its_node_waiting() {
    let (_dir, engine, lab, node, _) = kill_an_agent_mid_write(0);
    // Five sweeps later (one a second) the node still waits, untouched.
    std::thread::sleep(Duration::from_secs(5));
    let (_, n) = call("GET", &format!("{}/v1/nodes/{node}", engine.url), None);
    assert_eq!(state(&n), "wait call-back");
    assert_eq!(n["last_error"], Value::Null);
    assert_eq!(lab.machine("machine-000")["power"], "On");
}

#[test]
fn an_engine_killed_mid_deploy_restarts_and_the_agents_finish_their_deploys() {
    let dir = tempfile::tempdir().unwrap();
    let port = emulators::free_tcp_port();
    let data = dir.path().join("data");
    let flags = flags(dir.path(), 20);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let engine = Engine::start_on(port, &data, &flags);
    let (lab, mid) = mid_deploy(dir.path(), &engine);
    engine.kill();
    std::thread::sleep(Duration::from_secs(1));
    let engine = Engine::start_on(port, &data, &flags);
    mid.finished(&engine, &lab);
    let agent_log = std::fs::read_to_string(dir.path().join("lab/machine-000.agent.log")).unwrap();
    assert!(
        agent_log.contains("heartbeat failed"),
        "the agent outlived the engine, retrying its heartbeats: {agent_log}"
    );
    let (_, list) = call("GET", &format!("{}/v1/nodes", engine.url), None);
    assert_eq!(list["nodes"].as_array().unwrap().len(), 3);
}

/// Two lab machines mid-deploy (one of each family, 6 MiB at 1 MiB/s, each past its first
/// MiB), and a bystander at rest: what an engine crash is tested against.
pub(crate) struct MidDeploy {
    nodes: [String; 2],
    sha: String,
    bystander: Value,
}

/// Starts [`MidDeploy`] on `engine` with a lab of its own in `dir`.
pub(crate) fn mid_deploy(dir: &Path, engine: &Engine) -> (Lab, MidDeploy) {
    let lab = Lab::start(&dir.join("lab"), 2, &engine.url, "1M");
    let img = dir.join("image.raw");
    let sha = image(&img, 6 << 20);
    let nodes = [
        enroll(&engine.url, &lab.machines[0], "agent_redfish", &img, &sha),
        enroll(&engine.url, &lab.machines[1], "pxe_redfish", &img, &sha),
    ];
    // A bystander in available, to check no record is lost or changed.
    let (_, bystander) = call(
        "POST",
        &format!("{}/v1/nodes", engine.url),
        Some(json!({"name": "bystander", "driver": "fake", "extra": {"rack": 7}})),
    );
    let bystander_uuid = bystander["uuid"].as_str().unwrap().to_owned();
    make_available(&engine.url, &bystander_uuid);
    // The flow's driver pin goes in its last write, just after the node shows available.
    wait_node(&engine.url, &bystander_uuid, 10, |n| {
        n["driver_internal_info"].get("driver_hash").is_none()
    });
    let (_, bystander) = call("GET", &format!("{}/v1/nodes/bystander", engine.url), None);
    for n in &nodes {
        provision(&engine.url, n, "active");
    }
    for n in &nodes {
        wait_node(&engine.url, n, 30, |n| written(n) >= 1 << 20);
    }
    let mid = MidDeploy {
        nodes,
        sha,
        bystander,
    };
    (lab, mid)
}

impl MidDeploy {
    /// Both deploys end active on `engine` with their disks holding the image, and the
    /// bystander's record is as it was.
    pub(crate) fn finished(&self, engine: &Engine, lab: &Lab) {
        for n in &self.nodes {
            wait_active(engine, n, &[]);
        }
        for m in &lab.machines {
            let disk = Path::new(m["disk"].as_str().unwrap());
            assert_eq!(sha256_of(disk), self.sha, "{} holds the image", m["name"]);
        }
        let (_, after) = call("GET", &format!("{}/v1/nodes/bystander", engine.url), None);
        assert_eq!(after, self.bystander, "the bystander's record is intact");
    }
}

#[test]
fn undeploy_wipes_the_disk_through_the_agent_and_returns_the_node_to_available() {
    let dir = tempfile::tempdir().unwrap();
    let engine = engine(dir.path(), 10);
    let lab = Lab::start(&dir.path().join("lab"), 1, &engine.url, "8M");
    let img = dir.path().join("image.raw");
    let sha = image(&img, 4 << 20);
    let node = enroll(&engine.url, &lab.machines[0], "agent_redfish", &img, &sha);
    provision(&engine.url, &node, "active");
    wait_node(&engine.url, &node, 60, |n| state(n) == "active");
    let disk = Path::new(lab.machines[0]["disk"].as_str().unwrap()).to_path_buf();
    assert_eq!(sha256_of(&disk), sha);

    provision(&engine.url, &node, "deleted");
    let n = wait_node(&engine.url, &node, 60, |n| state(n) == "available");
    assert_eq!(n["last_error"], Value::Null);
    let bytes = std::fs::read(&disk).unwrap();
    assert_eq!(bytes.len(), 4 << 20);
    assert!(
        bytes[..1 << 20].iter().all(|&b| b == 0),
        "the first MiB is wiped"
    );
    assert!(
        bytes[(3 << 20)..].iter().all(|&b| b == 0),
        "the last MiB is wiped"
    );
    assert_ne!(sha256_of(&disk), sha);
    let machine = lab.machine("machine-000");
    assert_eq!(machine["power"], "Off");
    assert_eq!(
        machine["agent_boots"], 3,
        "one boot to clean at provide (automated_clean), one to deploy, one to clean"
    );
}

#[test]
fn deployd_demo_tells_the_whole_story_and_exits_zero() {
    let out = std::process::Command::new(&*support::BIN)
        .args([
            "demo",
            "--machines",
            "3",
            "--image-mb",
            "6",
            "--throttle",
            "2M",
            "--timeout",
            "1",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("the demo ended as expected"), "{stdout}");
    assert!(
        stdout.contains("killed the agent of machine-002"),
        "{stdout}"
    );
    assert_eq!(stdout.matches("= image").count(), 2, "{stdout}");
}

/// Deploys with a hardware driver against an emulated BMC, with a `deployd agent` process
/// started by hand (the emulator's power-on boots nothing) looking up by MAC. The 5 s
/// timeout covers the boot (BMC calls, the first lookup) as well as the silences.
fn deploy_with_real_bmc(driver: &str, mut driver_info: Value) {
    // The emulated machine never powers itself off (the agent process only exits), so
    // the driver waits the whole soft power-off time before forcing it: keep that short,
    // so the step's BMC calls have room within its deadline on a loaded machine.
    driver_info["soft_power_off_timeout"] = json!(3);
    let dir = tempfile::tempdir().unwrap();
    let engine = engine(dir.path(), 5);
    let img = dir.path().join("image.raw");
    let sha = image(&img, 6 << 20);
    let mac = "52:54:00:ee:00:01";
    let (status, node) = call(
        "POST",
        &format!("{}/v1/nodes", engine.url),
        Some(json!({
            "driver": driver,
            "driver_info": driver_info,
            "instance_info": {
                "image_source": format!("file://{}", img.display()),
                "image_checksum": sha,
            },
        })),
    );
    assert_eq!(status, 201, "{node}");
    let uuid = node["uuid"].as_str().unwrap().to_owned();
    let port = json!({"node_uuid": uuid, "address": mac});
    assert_eq!(
        call("POST", &format!("{}/v1/ports", engine.url), Some(port)).0,
        201
    );
    make_available_without_cleaning(&engine.url, &uuid);
    let disk = dir.path().join("disk.img");
    let mut agent = std::process::Command::new(&*support::BIN)
        .args([
            "agent",
            "--api-url",
            &engine.url,
            "--mac",
            mac,
            "--listen",
            "127.0.0.1:0",
        ])
        .arg("--disk")
        .arg(&disk)
        .args(["--throttle", "1M"])
        .stderr(std::fs::File::create(dir.path().join("agent.log")).unwrap())
        .spawn()
        .unwrap();
    let started = Instant::now();
    provision(&engine.url, &uuid, "active");
    let node = wait_active(&engine, &uuid, &[&dir.path().join("agent.log")]);
    assert!(
        started.elapsed() >= Duration::from_secs(5),
        "the write outlasted the timeout"
    );
    assert_eq!(node["power_state"], "power on");
    assert_eq!(sha256_of(&disk), sha, "the disk holds the image");
    // The agent powered the machine off when asked, and exited.
    for _ in 0..100 {
        if let Some(status) = agent.try_wait().unwrap() {
            assert!(status.success(), "{status}");
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = agent.kill();
    panic!("the agent did not exit after standby.power_off");
}

#[test]
fn the_ipmitool_path_deploys_against_pyghmi_fakebmc_with_a_real_agent() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (_bmc, port) = runtime.block_on(emulators::fakebmc());
    deploy_with_real_bmc(
        "agent_ipmitool",
        json!({"ipmi_address": "127.0.0.1", "ipmi_port": port, "ipmi_username": "admin", "ipmi_password": "password"}),
    );
}

#[test]
fn the_redfish_path_deploys_against_sushy_tools_with_a_real_agent() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (_sushy, base, system) = runtime.block_on(emulators::sushy());
    deploy_with_real_bmc(
        "agent_redfish",
        json!({"redfish_address": base, "redfish_system_id": system}),
    );
}

/// An image server whose download hangs: it answers with the headers of a `total`-byte
/// image, sends `served` bytes, then holds the connection open and sends nothing more.
fn hanging_image_server(served: usize, total: usize) -> String {
    use std::io::{BufRead, BufReader, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/image.raw", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut line = String::new();
                while reader.read_line(&mut line).is_ok_and(|n| n > 2) {
                    line.clear();
                }
                let mut stream = stream;
                let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {total}\r\n\r\n");
                let _ = stream.write_all(head.as_bytes());
                let _ = stream.write_all(&vec![7u8; served]);
                std::thread::sleep(Duration::from_secs(600));
            });
        }
    });
    url
}

/// The flip side of the seed fix, end to end: an agent whose download hangs keeps
/// heartbeating, so only the stall timeout can tell it from a slow one.
#[test]
fn an_agent_whose_download_hangs_while_it_heartbeats_fails_at_the_stall_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let mut flags = flags(dir.path(), 60);
    flags.extend(["--deploy-stall-timeout".into(), "3".into()]);
    let engine = Engine::start(
        &dir.path().join("data"),
        &flags.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    let lab = Lab::start(&dir.path().join("lab"), 1, &engine.url, "64M");
    let img = dir.path().join("image.raw");
    let sha = image(&img, 1 << 20);
    let node = enroll(&engine.url, &lab.machines[0], "agent_redfish", &img, &sha);
    let source = hanging_image_server(1 << 20, 8 << 20);
    let patch = json!([{"op": "replace", "path": "/instance_info/image_source", "value": source}]);
    let (status, body) = call(
        "PATCH",
        &format!("{}/v1/nodes/{node}", engine.url),
        Some(patch),
    );
    assert_eq!(status, 200, "{body}");
    provision(&engine.url, &node, "active");

    let hung = wait_node(&engine.url, &node, 30, |n| written(n) >= 1 << 20);
    let hung_at = time(&hung, "agent_last_heartbeat");
    let last_seen = std::sync::Mutex::new(hung_at);
    let failed = wait_node(&engine.url, &node, 30, |n| {
        if let Some(t) = n["driver_internal_info"]["agent_last_heartbeat"].as_str() {
            *last_seen.lock().unwrap() = chrono::DateTime::parse_from_rfc3339(t).unwrap().to_utc();
        }
        state(n) != "wait call-back"
    });
    assert_eq!(state(&failed), "deploy failed", "{}", failed["last_error"]);
    let error = failed["last_error"].as_str().unwrap();
    assert!(
        error.starts_with("Stalled:") && error.contains("deploy_stall_timeout is 3 s"),
        "{error}"
    );
    // It names the bytes the agent reached.
    assert!(
        error.contains("1048576 of 8388608 bytes written"),
        "{error}"
    );
    // The agent went on heartbeating after its download hung: only the stall check could
    // fail it (the callback timeout is 60 s).
    let heartbeating = *last_seen.lock().unwrap() - hung_at;
    assert!(heartbeating.num_milliseconds() >= 2_000, "{heartbeating:?}");
    let detected = time(&failed, "provision_updated_at") - hung_at;
    eprintln!(
        "stall detection: failed {:.2} s after the first heartbeat at the final byte count (stall timeout 3 s, sweeps 1 s)",
        detected.num_milliseconds() as f64 / 1000.0
    );
}

/// With heartbeats a minute apart (Ironic's default cadence), the history still says when
/// the image transfer happened: the agent heartbeats as its write takes its first bytes,
/// so the transfer's start and end are recorded seconds apart (its real duration), not
/// both at the heartbeat after it ended.
#[test]
fn the_history_times_an_image_transfer_when_heartbeats_are_far_apart() {
    let dir = tempfile::tempdir().unwrap();
    let mut flags = flags(dir.path(), 600);
    let at = flags
        .iter()
        .position(|f| f == "--ramdisk-heartbeat-timeout")
        .unwrap();
    flags[at + 1] = "200".into();
    let engine = Engine::start(
        &dir.path().join("data"),
        &flags.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    // 8 MiB at 2 MiB/s: a four-second write, between heartbeats 60 to 120 s apart.
    let lab = Lab::start(&dir.path().join("lab"), 1, &engine.url, "2M");
    let img = dir.path().join("image.raw");
    let sha = image(&img, 8 << 20);
    let node = enroll(&engine.url, &lab.machines[0], "agent_redfish", &img, &sha);
    provision(&engine.url, &node, "active");
    wait_active(&engine, &node, &[]);
    let events = history_events(&engine.url, &node);
    let ended = events
        .iter()
        .find(|e| e.starts_with("Image transfer ended"))
        .unwrap_or_else(|| panic!("no transfer end in {events:?}"));
    let seconds: f64 = ended
        .split(" bytes in ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("the transfer was timed: {ended}"));
    assert!(seconds >= 2.0, "the start was recorded late: {ended}");
    engine.stop();
}
