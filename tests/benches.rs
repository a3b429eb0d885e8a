//! Every `deployd bench` once, at a small size, so a bench cannot silently break again
//! (`bench fleet` did: its image was outside the directories the engine serves). The
//! figures are for people: nothing here asserts on them, only that each bench ran to its
//! report.

use deployd_test_support::processes as support;

use std::process::Command;

#[test]
fn every_bench_runs_to_its_report_at_a_small_size() {
    let dir = tempfile::tempdir().unwrap();
    let agent_dir = dir.path().join("agent");
    std::fs::create_dir_all(&agent_dir).unwrap();
    let agent_dir = agent_dir.display().to_string();
    let bin = support::BIN.display().to_string();
    let store_url = deployd_test_support::postgres::CLUSTER.database();
    let cluster_url = deployd_test_support::postgres::CLUSTER.database();
    let agent = deployd_test_support::vm::musl_agent().display().to_string();
    let cache = deployd_test_support::emulators::repo_root()
        .join("target/ramdisk-cache")
        .display()
        .to_string();
    let benches: [(&[&str], &str); 12] = [
        (
            &[
                "core",
                "--nodes",
                "1000",
                "--expired",
                "10",
                "--touches",
                "5000",
            ],
            "touches: 5000 in",
        ),
        (
            &[
                "api",
                "--nodes",
                "100",
                "--seconds",
                "1",
                "--connections",
                "4",
            ],
            "of the ceiling (medians): GET ",
        ),
        (
            &[
                "agent",
                "--image-mb",
                "8",
                "--rounds",
                "1",
                "--dir",
                &agent_dir,
            ],
            "ratio agent/dd",
        ),
        (
            &[
                "flood",
                "--kind",
                "auth",
                "--seconds",
                "1",
                "--clients",
                "2",
            ],
            "an authenticated GET /v1/nodes during the flood: 200 OK",
        ),
        (
            &[
                "plugins",
                "--calls",
                "200",
                "--concurrency",
                "2",
                "--drivers",
                "2",
            ],
            "heartbeat dispatch throughput: 200 calls",
        ),
        (&["ports", "--ports", "200"], "150-200"),
        (
            &[
                "shared-store",
                "--store-url",
                &store_url,
                "--nodes",
                "2000",
                "--seconds",
                "1",
                "--concurrency",
                "20",
            ],
            "sweep, 1000 expired: 1000 failed",
        ),
        (
            &[
                "cluster",
                "--store-url",
                &cluster_url,
                "--nodes",
                "300",
                "--seconds",
                "1",
                "--connections",
                "6",
            ],
            "its claims taken over after",
        ),
        (
            &["fleet", "--machines", "3", "--image-kb", "64"],
            "3 of 3 active",
        ),
        (
            &["dashboard", "--nodes", "300", "--runs", "1"],
            "search \"\": 300 shown",
        ),
        (
            &[
                "boot",
                "--paths",
                "bios-vmedia",
                "--runs",
                "1",
                "--agent",
                &agent,
                "--ramdisk-cache",
                &cache,
            ],
            "  BiosVmedia: ",
        ),
        (
            &[
                "compare",
                "--engine-bin",
                &bin,
                "--rounds",
                "2",
                "--",
                "core",
                "--nodes",
                "1000",
                "--expired",
                "10",
                "--touches",
                "5000",
            ],
            "touches · = [/s]: ",
        ),
    ];
    for (args, report) in benches {
        let out = Command::new(&*support::BIN)
            .arg("bench")
            .args(args)
            .env("RUST_LOG", "warn")
            .output()
            .expect("running deployd bench");
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        assert!(
            out.status.success() && stdout.contains(report),
            "deployd bench {args:?} ({}):\n{stdout}\n{stderr}",
            out.status
        );
    }
}
