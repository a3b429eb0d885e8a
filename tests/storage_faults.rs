//! A full disk under the store, mid-deploy, over real processes: the engine's data
//! directory is a small tmpfs the test mounts and fills. The engine must not hang (a probe
//! of `GET /v1` answers within 1 s throughout), must refuse writes with a 503 naming the
//! cause and keep serving reads, must say so in `/v1/conductors` and `/metrics` and once
//! in its log, must fail no node whose agent heartbeated while it could not record it,
//! must write again by itself once space returns, and must lose no acknowledged write.

use deployd_test_support::processes as support;

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use support::{Engine, Lab, call, image, provision, wait_node};
use tokio::time::Instant;

use crate::seed_end_to_end::{enroll, flags, wait_active};

/// A small filesystem of `mib` MiB mounted at `path`, unmounted when dropped: a tmpfs, or
/// an ext4 on a loop device (where sled once wedged at a full disk).
pub(crate) struct SmallFs(PathBuf);

impl SmallFs {
    pub(crate) fn tmpfs(path: &Path, mib: u64) -> SmallFs {
        std::fs::create_dir_all(path).unwrap();
        support::run(std::process::Command::new("mount").args([
            "-t",
            "tmpfs",
            "-o",
            &format!("size={mib}m"),
            "tmpfs",
            path.to_str().unwrap(),
        ]));
        SmallFs(path.to_owned())
    }

    /// An ext4 in a file beside `path` (no blocks kept for root: the engine runs as root
    /// in CI, and would write into them).
    pub(crate) fn ext4(path: &Path, mib: u64) -> SmallFs {
        std::fs::create_dir_all(path).unwrap();
        let image = path.with_extension("ext4");
        std::fs::File::create(&image)
            .unwrap()
            .set_len(mib << 20)
            .unwrap();
        support::run(
            std::process::Command::new("mkfs.ext4")
                .args(["-q", "-F", "-m", "0"])
                .arg(&image),
        );
        support::run(
            std::process::Command::new("mount")
                .args(["-o", "loop"])
                .arg(&image)
                .arg(path),
        );
        SmallFs(path.to_owned())
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .status();
    }
}

/// Flags for a config file that turns the store's watermark off.
fn no_watermark(dir: &Path) -> [String; 2] {
    let config = dir.join("no-watermark.toml");
    std::fs::write(&config, "[store]\nmin_free_mb = 0\n").unwrap();
    ["--config".into(), config.display().to_string()]
}

/// Fills the filesystem holding `dir` with one file until it is full.
fn fill(dir: &Path) -> PathBuf {
    let path = dir.join("filler");
    let mut file = std::fs::File::create(&path).unwrap();
    let chunk = vec![0x5a_u8; 64 << 10];
    while file.write_all(&chunk).is_ok() {}
    while file.write_all(&chunk[..512]).is_ok() {}
    let _ = file.sync_all();
    path
}

/// How long `GET /v1` took on a new connection (a refusal or a timeout counts as 10 s).
fn probe(url: &str) -> Duration {
    let addr = url.trim_start_matches("http://");
    let started = Instant::now();
    let answered = (|| {
        let mut s = std::net::TcpStream::connect(addr).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
        write!(
            s,
            "GET /v1 HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
        )
        .ok()?;
        let mut answer = Vec::new();
        s.read_to_end(&mut answer).ok()?;
        answer.starts_with(b"HTTP/1.1 200").then_some(())
    })();
    match answered {
        Some(()) => started.elapsed(),
        None => Duration::from_secs(10),
    }
}

/// The store's part of `/v1/conductors`.
fn store_state(url: &str) -> Value {
    let (status, body) = call("GET", &format!("{url}/v1/conductors"), None);
    assert_eq!(status, 200, "{body}");
    body["conductors"][0]["store"].clone()
}

fn degraded_gauge(url: &str) -> String {
    metric(url, "deployd_store_degraded")
}

/// The line of `/metrics` for the unlabelled metric `name`.
fn metric(url: &str, name: &str) -> String {
    let out = std::process::Command::new("curl")
        .args(["-s", &format!("{url}/metrics")])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.lines()
        .find(|l| l.split_once(' ').is_some_and(|(n, _)| n == name))
        .unwrap_or_else(|| panic!("no {name} in {text}"))
        .to_owned()
}

fn wait_for(what: &str, secs: u64, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !done() {
        assert!(
            Instant::now() < deadline,
            "{what} did not happen in {secs} s"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_disk_filled_mid_deploy_degrades_the_store_without_a_hang_a_timeout_or_a_lost_write() {
    filled_mid_deploy(SmallFs::tmpfs);
}

/// The same on ext4, where sled's flusher and writers once waited on each other for good.
#[test]
fn an_ext4_disk_filled_mid_deploy_degrades_the_store_the_same_way() {
    filled_mid_deploy(SmallFs::ext4);
}

fn filled_mid_deploy(mount: fn(&Path, u64) -> SmallFs) {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let _fs = mount(&data, 48);
    // A deploy timeout of 4 s, and the disk kept full for 8 s: only heartbeats recorded
    // after the fault can keep the deploys alive. The watermark is off: this is the disk
    // filled by someone else to its last byte, under sled (the watermark's own test is
    // below).
    let mut flags = flags(dir.path(), 4);
    flags.extend(no_watermark(dir.path()));
    let engine = Engine::start(&data, &flags.iter().map(String::as_str).collect::<Vec<_>>());
    let lab = Lab::start(&dir.path().join("lab"), 2, &engine.url, "1M");
    let img = dir.path().join("image.raw");
    let sha = image(&img, 16 << 20);
    let nodes: Vec<String> = ["agent_redfish", "pxe_redfish"]
        .iter()
        .zip(&lab.machines)
        .map(|(driver, m)| enroll(&engine.url, m, driver, &img, &sha))
        .collect();

    // Load while it happens: a writer enrolling nodes, and a probe of `GET /v1`.
    let writer = Writer::start(&engine.url, "load", Duration::from_millis(50));
    let (stop, acked, refusals) = (
        writer.stop.clone(),
        writer.acked.clone(),
        writer.refusals.clone(),
    );
    let prober = {
        let (url, stop) = (engine.url.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut slowest = Duration::ZERO;
            let mut probes = 0;
            while !stop.load(Ordering::Relaxed) {
                slowest = slowest.max(probe(&url));
                probes += 1;
                std::thread::sleep(Duration::from_millis(100));
            }
            (slowest, probes)
        })
    };

    for n in &nodes {
        provision(&engine.url, n, "active");
    }
    for n in &nodes {
        wait_node(&engine.url, n, 30, |n| {
            n["provision_state"] == "wait call-back"
        });
    }
    std::thread::sleep(Duration::from_secs(2));
    let filler = fill(&data);
    // The keeper tries each second. On a loaded 2-core CI machine the reopen took longer
    // than 10 s in two runs of about twenty, for a reason not known yet (the engine's log
    // now says at warn why each try failed): the bound is one of liveness, not speed.
    wait_for(
        "the store reporting itself degraded, opened again for reads",
        30,
        || {
            let state = store_state(&engine.url);
            state["writable"] == false && state["reopened"] == true
        },
    );
    let degraded = store_state(&engine.url);
    assert!(
        degraded["cause"]
            .as_str()
            .unwrap()
            .contains("No space left on device"),
        "{degraded}"
    );
    assert_eq!(degraded_gauge(&engine.url), "deployd_store_degraded 1");
    // A write is refused with the cause, in Ironic's shape; a read of a node is served.
    let (status, body) = call(
        "POST",
        &format!("{}/v1/nodes", engine.url),
        Some(json!({"driver": "fake", "name": "refused"})),
    );
    assert_eq!(status, 503, "{body}");
    let fault = body["error_message"].as_str().unwrap();
    assert!(fault.contains("No space left on device"), "{fault}");
    assert!(fault.contains("\"faultcode\""), "{fault}");
    let (status, node) = call(
        "GET",
        &format!("{}/v1/nodes/{}", engine.url, nodes[0]),
        None,
    );
    assert_eq!(status, 200, "{node}");
    // Twice the deploy timeout with a full disk; the agents go on heartbeating, and every
    // read is served (sled's own error would refuse some: see `store::reserve`).
    let full_until = Instant::now() + Duration::from_secs(8);
    let mut reads = 0;
    while Instant::now() < full_until {
        for n in &nodes {
            let (status, node) = call("GET", &format!("{}/v1/nodes/{n}", engine.url), None);
            assert_eq!(status, 200, "{node}");
            assert_eq!(node["provision_state"], "wait call-back", "{node}");
        }
        let (status, list) = call("GET", &format!("{}/v1/nodes", engine.url), None);
        assert_eq!(status, 200, "{list}");
        assert!(
            list["nodes"].as_array().unwrap().len() >= nodes.len(),
            "{list}"
        );
        reads += 3;
        std::thread::sleep(Duration::from_millis(200));
    }

    // The agents' heartbeats were acknowledged from memory meanwhile, not refused.
    let remembered = metric(&engine.url, "deployd_touches_remembered_total");
    let count: u64 = remembered.rsplit(' ').next().unwrap().parse().unwrap();
    assert!(count > 0, "{remembered}");

    std::fs::remove_file(&filler).unwrap();
    let freed = Instant::now();
    wait_for("the store writing again", 10, || {
        store_state(&engine.url)["writable"] == true
    });
    let recovered_in = freed.elapsed();
    assert_eq!(degraded_gauge(&engine.url), "deployd_store_degraded 0");
    let (status, body) = call(
        "POST",
        &format!("{}/v1/nodes", engine.url),
        Some(json!({"driver": "fake", "name": "after"})),
    );
    assert_eq!(status, 201, "{body}");
    for n in &nodes {
        wait_active(&engine, n, &[]);
    }
    writer.finish();
    let (slowest, probes) = prober.join().unwrap();
    assert!(
        slowest < Duration::from_secs(1),
        "GET /v1 took {slowest:?} at worst over {probes} probes"
    );
    let refusals = refusals.lock().unwrap();
    assert!(!refusals.is_empty(), "the writer met the full disk");
    for (status, body) in refusals.iter() {
        assert_eq!(*status, 503, "{body}");
    }
    let log = engine.log_text();
    assert_eq!(log.matches("the store cannot write (").count(), 1, "{log}");
    assert_eq!(log.matches("the store writes again").count(), 1, "{log}");
    assert_eq!(
        log.matches("opened again on its space reserve").count(),
        1,
        "{log}"
    );
    // Both waiting nodes' clocks, as the faulty database last held them or as heartbeats
    // refused meanwhile set them, were written at the reopen.
    assert!(
        log.contains("2 heartbeats received meanwhile were recorded"),
        "{log}"
    );

    // Every acknowledged write is there after a restart.
    let acked = acked.lock().unwrap().clone();
    engine.stop();
    let engine = Engine::start(&data, &flags.iter().map(String::as_str).collect::<Vec<_>>());
    assert_none_lost(&engine.url, &acked);
    eprintln!(
        "full disk: {} acked writes, {} refused (503), 0 lost; {reads} reads served while full; GET /v1 at worst {slowest:?} over {probes} probes; writes back {recovered_in:?} after space returned",
        acked.len(),
        refusals.len()
    );
    engine.stop();
}

/// A disk that filled while the engine was stopped: the engine opens its store on the
/// space reserve it keeps beside it, serves what it holds, and takes writes once there is
/// room.
#[test]
fn an_engine_whose_disk_filled_while_it_was_stopped_opens_on_its_reserve() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let _fs = SmallFs::ext4(&data, 48);
    let flags = no_watermark(dir.path());
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let engine = Engine::start(&data, &flags);
    let (status, node) = call(
        "POST",
        &format!("{}/v1/nodes", engine.url),
        Some(json!({"driver": "fake", "name": "kept"})),
    );
    assert_eq!(status, 201, "{node}");
    engine.stop();
    let filler = fill(&data);
    let engine = Engine::start(&data, &flags);
    let (status, node) = call("GET", &format!("{}/v1/nodes/kept", engine.url), None);
    assert_eq!(status, 200, "{node}");
    assert!(
        engine
            .log_text()
            .contains("its space reserve was released to open it"),
        "{}",
        engine.log_text()
    );
    std::fs::remove_file(&filler).unwrap();
    let (status, body) = call(
        "POST",
        &format!("{}/v1/nodes", engine.url),
        Some(json!({"driver": "fake", "name": "after"})),
    );
    assert_eq!(status, 201, "{body}");
    engine.stop();
}

/// A thread enrolling nodes (`{prefix}-{i}`, 1.5 KB each) as fast as they are taken: the
/// acknowledged names, and the refusals (after each it waits `pause`).
struct Writer {
    stop: Arc<AtomicBool>,
    acked: Arc<Mutex<Vec<String>>>,
    refusals: Arc<Mutex<Vec<(u16, Value)>>>,
    thread: std::thread::JoinHandle<()>,
}

impl Writer {
    fn start(url: &str, prefix: &str, pause: Duration) -> Writer {
        let stop = Arc::new(AtomicBool::new(false));
        let acked = Arc::new(Mutex::new(Vec::<String>::new()));
        let refusals = Arc::new(Mutex::new(Vec::<(u16, Value)>::new()));
        let (url, prefix) = (url.to_owned(), prefix.to_owned());
        let (s, a, r) = (stop.clone(), acked.clone(), refusals.clone());
        let thread = std::thread::spawn(move || {
            for i in 0.. {
                if s.load(Ordering::Relaxed) {
                    break;
                }
                let name = format!("{prefix}-{i}");
                let body =
                    json!({"driver": "fake", "name": name, "extra": {"pad": "x".repeat(1500)}});
                match call("POST", &format!("{url}/v1/nodes"), Some(body)) {
                    (201, _) => a.lock().unwrap().push(name),
                    refused => {
                        r.lock().unwrap().push(refused);
                        std::thread::sleep(pause);
                    }
                }
            }
        });
        Writer {
            stop,
            acked,
            refusals,
            thread,
        }
    }

    fn finish(self) {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap();
    }
}

/// Every acknowledged node is there (after a restart).
fn assert_none_lost(url: &str, acked: &[String]) {
    let lost: Vec<_> = acked
        .iter()
        .filter(|n| call("GET", &format!("{url}/v1/nodes/{n}"), None).0 != 200)
        .collect();
    assert!(
        lost.is_empty(),
        "{} of {} acked nodes lost: {lost:?}",
        lost.len(),
        acked.len()
    );
}

/// Fills the filesystem holding `dir` until `keep` bytes are left free.
fn fill_to(dir: &Path, keep: u64) -> PathBuf {
    let path = dir.join("filler");
    let free = rustix::fs::statvfs(dir)
        .map(|s| s.f_bavail * s.f_frsize)
        .unwrap();
    let mut file = std::fs::File::create(&path).unwrap();
    let chunk = vec![0x5a_u8; 1 << 20];
    let mut left = free.saturating_sub(keep);
    while left > 0 {
        let n = left.min(chunk.len() as u64) as usize;
        file.write_all(&chunk[..n]).unwrap();
        left -= n as u64;
    }
    file.sync_all().unwrap();
    path
}

/// Another program fills the store's disk to a few MiB short of full, twenty times, while
/// the engine takes writes: each time the store stops writing at its watermark (a 503
/// naming the free space) before sled meets a full disk, serves every read meanwhile,
/// and writes again by itself once the room is back; no acknowledged write is lost.
#[test]
fn at_its_watermark_the_store_stops_writing_serves_reads_and_writes_again_with_room() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let _tmpfs = SmallFs::tmpfs(&data, 200);
    let config = dir.path().join("watermark.toml");
    std::fs::write(&config, "[store]\nmin_free_mb = 16\nresume_free_mb = 24\n").unwrap();
    let flags = ["--config", config.to_str().unwrap()];
    let engine = Engine::start(&data, &flags);
    let writer = Writer::start(&engine.url, "w", Duration::from_millis(20));
    let (acked, refusals) = (writer.acked.clone(), writer.refusals.clone());
    let mut probes = Vec::new();
    for round in 0..20 {
        let filler = fill_to(&data, 8 << 20);
        let before = refusals.lock().unwrap().len();
        wait_for("a write refused at the watermark", 10, || {
            refusals.lock().unwrap().len() > before
        });
        assert_eq!(store_state(&engine.url)["writable"], false, "round {round}");
        for _ in 0..3 {
            probes.push(probe(&engine.url));
            let (status, list) = call("GET", &format!("{}/v1/nodes?limit=5", engine.url), None);
            assert_eq!(status, 200, "round {round}: {list}");
        }
        std::fs::remove_file(&filler).unwrap();
        wait_for("the store writing again", 10, || {
            store_state(&engine.url)["writable"] == true
        });
        let acked_now = acked.lock().unwrap().len();
        wait_for("a write taken again", 10, || {
            acked.lock().unwrap().len() > acked_now
        });
    }
    writer.finish();
    for (status, body) in refusals.lock().unwrap().iter() {
        assert_eq!(*status, 503, "{body}");
        let fault = body["error_message"].as_str().unwrap_or_default();
        assert!(fault.contains("below the 16 MiB it keeps free"), "{fault}");
    }
    let log = engine.log_text();
    assert!(
        !log.contains("No space left on device"),
        "sled met a full disk:\n{log}"
    );
    assert_eq!(
        log.matches("the store stops writing (").count(),
        20,
        "{log}"
    );
    probes.sort();
    let p99 = probes[probes.len() * 99 / 100];
    let acked = acked.lock().unwrap().clone();
    engine.stop();
    let engine = Engine::start(&data, &flags);
    assert_none_lost(&engine.url, &acked);
    eprintln!(
        "watermark: 20 rounds, {} acked writes, {} refused (503), 0 lost; GET /v1 while refusing: p99 {p99:?} over {} probes",
        acked.len(),
        refusals.lock().map(|r| r.len()).unwrap_or(0),
        probes.len()
    );
    engine.stop();
}
