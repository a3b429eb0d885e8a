//! The real `baremetal` CLI (python-ironicclient, from PyPI) against `deployd serve`: the
//! commands an operator types, each exiting 0 and printing what it prints against Ironic.

use deployd_test_support::{emulators, processes as support};

use std::process::Command;

use emulators::venv_bin;
use support::Engine;

pub(crate) fn baremetal(engine: &Engine, args: &[&str]) -> String {
    let out = Command::new(venv_bin("baremetal"))
        .args(args)
        .env("OS_ENDPOINT", &engine.url)
        .env("OS_AUTH_TYPE", "none")
        .env_remove("OS_BAREMETAL_API_VERSION")
        .output()
        .expect("running baremetal");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "baremetal {args:?} failed: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// `baremetal node show NODE -f value -c …`: the values, sorted (the CLI prints them in
/// the server's field order, not the order of the -c flags).
fn show(engine: &Engine, node: &str, columns: &[&str]) -> Vec<String> {
    let mut args = vec!["node", "show", node, "-f", "value"];
    for c in columns {
        args.extend(["-c", c]);
    }
    let mut values: Vec<String> = baremetal(engine, &args)
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect();
    values.sort();
    values
}

#[test]
fn the_baremetal_cli_enrolls_deploys_undeploys_and_deletes_a_node() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::start(&dir.path().join("data"), &[]);

    let created = baremetal(
        &engine,
        &[
            "node", "create", "--driver", "fake", "--name", "cli-1", "-f", "json",
        ],
    );
    let node: serde_json::Value = serde_json::from_str(&created).unwrap();
    assert_eq!(node["provision_state"], "enroll");
    assert_eq!(node["name"], "cli-1");
    let uuid = node["uuid"].as_str().unwrap().to_owned();

    let list = baremetal(&engine, &["node", "list"]);
    assert!(
        list.contains("| UUID") || list.contains("| uuid") || list.contains("UUID"),
        "{list}"
    );
    assert!(
        list.contains(&uuid) && list.contains("cli-1") && list.contains("enroll"),
        "{list}"
    );

    let mut expected = vec![uuid.clone(), "fake".to_owned()];
    expected.sort();
    assert_eq!(show(&engine, "cli-1", &["uuid", "driver"]), expected);

    baremetal(&engine, &["node", "manage", "cli-1", "--wait", "60"]);
    baremetal(&engine, &["node", "provide", "cli-1", "--wait", "60"]);
    let waited = baremetal(&engine, &["node", "deploy", "cli-1", "--wait", "60"]);
    assert!(waited.is_empty() || !waited.contains("error"), "{waited}");
    assert_eq!(
        show(&engine, "cli-1", &["provision_state", "power_state"]),
        ["active", "power on"]
    );

    baremetal(&engine, &["node", "undeploy", "cli-1", "--wait", "60"]);
    assert_eq!(show(&engine, "cli-1", &["provision_state"]), ["available"]);

    let drivers = baremetal(&engine, &["driver", "list", "-f", "value", "-c", "name"]);
    for d in [
        "fake",
        "agent_ipmitool",
        "agent_redfish",
        "pxe_ipmitool",
        "pxe_redfish",
    ] {
        assert!(
            drivers.lines().any(|l| l.trim() == d),
            "{d} missing from {drivers}"
        );
    }

    let deleted = baremetal(&engine, &["node", "delete", "cli-1"]);
    assert!(deleted.contains("Deleted node cli-1"), "{deleted}");
    assert!(!baremetal(&engine, &["node", "list"]).contains(&uuid));
    engine.stop();
}

/// The install guide's order, with the real CLI and a lab machine behind its Redfish
/// BMC: enroll with the BMC and the port, manage and provide (cleaning through the agent)
/// with no image, then set the image and deploy. The disk ends holding the image.
#[test]
fn the_install_guides_order_enroll_manage_provide_then_set_the_image_and_deploy() {
    let dir = tempfile::tempdir().unwrap();
    let allowed = format!("--file-url-allowed-path={}", dir.path().display());
    let engine = Engine::start(
        &dir.path().join("data"),
        &[&allowed, "--ramdisk-heartbeat-timeout", "1"],
    );
    let lab = support::Lab::start(&dir.path().join("lab"), 1, &engine.url, "100M");
    let m = &lab.machines[0];
    let info = |k: &str| format!("{k}={}", m[k].as_str().unwrap());
    baremetal(
        &engine,
        &[
            "node",
            "create",
            "--driver",
            "redfish",
            "--deploy-interface",
            "direct",
            "--name",
            "guide-1",
            "--driver-info",
            &info("redfish_address"),
            "--driver-info",
            &info("redfish_system_id"),
        ],
    );
    let uuid = show(&engine, "guide-1", &["uuid"]).remove(0);
    baremetal(
        &engine,
        &[
            "port",
            "create",
            m["mac"].as_str().unwrap(),
            "--node",
            &uuid,
        ],
    );
    baremetal(&engine, &["node", "manage", "guide-1", "--wait", "60"]);
    baremetal(&engine, &["node", "provide", "guide-1", "--wait", "120"]);
    assert_eq!(
        show(&engine, "guide-1", &["provision_state"]),
        ["available"]
    );

    let image = dir.path().join("os.img");
    let sha = support::image(&image, 3 << 20);
    baremetal(
        &engine,
        &[
            "node",
            "set",
            "guide-1",
            "--instance-info",
            &format!("image_source={}", image.display()),
            "--instance-info",
            "image_os_hash_algo=sha256",
            "--instance-info",
            &format!("image_os_hash_value={sha}"),
        ],
    );
    baremetal(&engine, &["node", "deploy", "guide-1", "--wait", "120"]);
    assert_eq!(show(&engine, "guide-1", &["provision_state"]), ["active"]);
    let disk = std::path::Path::new(m["disk"].as_str().unwrap());
    assert_eq!(
        support::sha256_of(disk),
        sha,
        "the machine's disk holds the image"
    );
}
