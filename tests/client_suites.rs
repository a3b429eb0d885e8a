//! The real clients' own functional test suites, run unmodified against `deployd serve`:
//! compatibility is what they say, not our reading of the API reference.
//!
//! - openstacksdk's `openstack/tests/functional/baremetal` (the pinned sdist that
//!   `tests/clients/prepare.sh` unpacks into `target/client-suites/`), through a
//!   `clouds.yaml` with `auth_type: none` and the engine as the baremetal endpoint.
//! - python-ironicclient's `ironicclient/tests/functional` (the real `openstack baremetal`
//!   CLI), through `tests/clients/ironicclient-suite.sh`.
//! - Ironic's own API suite (ironic-tempest-plugin's `tests/api`), through
//!   `tests/clients/ironic-api-suite.sh`.

use deployd_test_support::{emulators, processes as support};

use std::path::PathBuf;
use std::process::Command;

use emulators::venv_bin;
use support::Engine;

/// The pinned openstacksdk release whose suite runs (README, "Compatibility").
const OPENSTACKSDK: &str = "openstacksdk-4.22.0";

fn suite_dir(name: &str) -> PathBuf {
    let dir = emulators::repo_root()
        .join("target/client-suites")
        .join(name);
    assert!(
        dir.is_dir(),
        "{} is missing: run .ci/run once, or tests/clients/prepare.sh",
        dir.display()
    );
    dir
}

/// stestr's totals line, e.g. ` - Passed: 72`.
fn total(output: &str, what: &str) -> usize {
    output
        .lines()
        .find_map(|l| l.trim().strip_prefix(&format!("- {what}: ")))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {what} count in the suite's output:\n{output}"))
}

#[test]
fn openstacksdk_functional_baremetal_suite_passes() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::start(&dir.path().join("data"), &[]);
    openstacksdk_suite_passes(dir.path(), &engine.url);
    engine.stop();
}

/// openstacksdk's functional baremetal suite against the API at `url`: every test passes
/// and none is skipped (deployd serves Ironic 39's microversions, 1.115: README,
/// "Compatibility").
pub(crate) fn openstacksdk_suite_passes(dir: &std::path::Path, url: &str) {
    // One run at a time: stestr keeps its state in the suite's directory.
    static ONE_RUN: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _turn = ONE_RUN.lock().unwrap_or_else(|p| p.into_inner());
    let suite = suite_dir(OPENSTACKSDK);
    // Four clouds of the same endpoint: the suite's user, alt, operator and admin.
    let clouds = dir.join("clouds.yaml");
    let cloud = format!(
        "    auth_type: none\n    auth:\n      endpoint: {url}\n    baremetal_endpoint_override: {url}\n    region_name: RegionOne\n    has_compute: false\n    has_image: false\n    has_network: false\n"
    );
    let names = [
        "devstack",
        "devstack-alt",
        "devstack-admin",
        "devstack-system-admin",
    ];
    let yaml: String = names.iter().map(|n| format!("  {n}:\n{cloud}")).collect();
    std::fs::write(&clouds, format!("clouds:\n{yaml}")).unwrap();
    let _ = std::fs::remove_dir_all(suite.join(".stestr"));
    let out = Command::new(venv_bin("stestr"))
        .current_dir(&suite)
        .args([
            "--test-path",
            "./openstack/tests/functional/baremetal",
            "run",
            "--serial",
        ])
        .env("OS_CLIENT_CONFIG_FILE", &clouds)
        .env("OS_CLOUD", "devstack-admin")
        .env("OS_TEST_TIMEOUT", "120")
        .env("OPENSTACKSDK_FUNC_TEST_TIMEOUT", "60")
        .output()
        .expect("running stestr");
    let output = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let (passed, failed, skipped) = (
        total(&output, "Passed"),
        total(&output, "Failed"),
        total(&output, "Skipped"),
    );
    eprintln!(
        "openstacksdk functional baremetal at {url}: {passed} passed, {failed} failed, {skipped} skipped"
    );
    assert_eq!((failed, skipped), (0, 0), "{output}");
    assert!(passed >= 96, "{output}");
}

/// python-ironicclient 5.8.0's functional suite (109 tests, each starting the real
/// `openstack baremetal` CLI several times) against the API at `url`: every test passes and
/// none is skipped, as against Ironic 39.
pub(crate) fn ironicclient_suite_passes(url: &str) {
    let root = emulators::repo_root();
    let out = Command::new(root.join("tests/clients/ironicclient-suite.sh"))
        .env("DEPLOYD_SUITE_URL", url)
        .output()
        .expect("running the suite");
    // The script prints the totals and the failed tests; stestr's whole report stays in
    // the file it names.
    let report = root.join("target/client-suites/ironicclient/last-run.txt");
    let output = format!(
        "{}{}\n(stestr's report: {})",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        report.display()
    );
    assert!(out.status.success(), "{output}");
    let (passed, failed, skipped) = (
        total(&output, "Passed"),
        total(&output, "Failed"),
        total(&output, "Skipped"),
    );
    eprintln!(
        "python-ironicclient functional at {url}: {passed} passed, {failed} failed, {skipped} skipped"
    );
    assert_eq!((passed, failed, skipped), (109, 0, 0), "{output}");
}

/// Ironic's own API tests pass on deployd at least this often (of 392; Ironic 39 passes
/// 386 and skips 6 under the same configuration: README, "Compatibility").
const IRONIC_API_SUITE_FLOOR: usize = 386;

/// Ironic's own API suite (ironic-tempest-plugin 3.2.0's `tests/api`, through tempest
/// 47.0.0), run by `tests/clients/ironic-api-suite.sh` against a fresh engine; its totals
/// and failed tests are printed by `.ci/run` from the summary the script leaves.
#[test]
fn ironic_own_api_suite_passes_at_least_its_floor() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::start(&dir.path().join("data"), &[]);
    let script = emulators::repo_root().join("tests/clients/ironic-api-suite.sh");
    let out = Command::new(script)
        .args([engine.url.as_str(), "--concurrency", "2"])
        .output()
        .expect("running the suite");
    let output = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let (passed, failed) = (total(&output, "Passed"), total(&output, "Failed"));
    eprintln!("Ironic's API suite: {passed} passed, {failed} failed");
    assert!(out.status.success(), "{output}");
    assert!(
        passed >= IRONIC_API_SUITE_FLOOR,
        "{passed} passed, fewer than the {IRONIC_API_SUITE_FLOOR} it passed before:\n{output}"
    );
    engine.stop();
}
