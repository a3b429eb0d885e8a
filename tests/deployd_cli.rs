//! `deployd node|port|driver …` against `deployd serve`, both as real processes.

use deployd_test_support::{emulators, processes as support};

use std::process::Command;

use support::{BIN, Engine};

fn deployd(engine: &Engine, args: &[&str]) -> (bool, String) {
    let out = Command::new(&*BIN)
        .args(args)
        .env("DEPLOYD_URL", &engine.url)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// `deployd node create` of node `t1` with the template driver (`plugins/template`), which
/// deploys at once.
pub(crate) const CREATE_T1: [&str; 8] = [
    "node",
    "create",
    "--driver",
    "template",
    "--name",
    "t1",
    "--instance-info",
    "image_source=http://example.invalid/img",
];

pub(crate) fn ok(engine: &Engine, args: &[&str]) -> String {
    let (success, text) = deployd(engine, args);
    assert!(success, "deployd {args:?} failed: {text}");
    text
}

#[test]
fn the_deployd_cli_drives_a_node_and_manages_drivers_without_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Engine::start(&dir.path().join("data"), &[]);

    let created = ok(
        &engine,
        &[
            "node",
            "create",
            "--driver",
            "fake",
            "--name",
            "c1",
            "--driver-info",
            "rack=4",
        ],
    );
    assert!(created.trim().ends_with("enroll"), "{created}");
    let list = ok(&engine, &["node", "list"]);
    assert!(
        list.contains("c1") && list.contains("fake") && list.contains("enroll"),
        "{list}"
    );
    assert!(ok(&engine, &["node", "show", "c1"]).contains("\"rack\": 4"));

    ok(
        &engine,
        &[
            "port",
            "create",
            "--node",
            "c1",
            "--address",
            "52:54:00:00:00:c1",
        ],
    );
    assert!(ok(&engine, &["port", "list"]).contains("52:54:00:00:00:c1"));

    ok(&engine, &["node", "manage", "c1", "--wait"]);
    ok(&engine, &["node", "provide", "c1", "--wait"]);
    let deployed = ok(&engine, &["node", "deploy", "c1", "--wait"]);
    assert!(
        deployed.contains("c1: active"),
        "progress lines name the states: {deployed}"
    );
    assert!(ok(&engine, &["node", "list"]).contains("power on"));

    // A node whose verification fails settles back in enroll: --wait says so and fails,
    // instead of waiting for manageable for ever.
    ok(
        &engine,
        &[
            "node",
            "create",
            "--driver",
            "agent_redfish",
            "--name",
            "r1",
        ],
    );
    let (success, text) = deployd(&engine, &["node", "manage", "r1", "--wait"]);
    assert!(
        !success
            && text.contains("went to \"enroll\" instead of \"manageable\"")
            && text.contains("redfish_address"),
        "{text}"
    );

    let (success, text) = deployd(&engine, &["node", "provide", "c1"]);
    assert!(
        !success && text.contains("can not be performed on node"),
        "{text}"
    );
    let (success, text) = deployd(&engine, &["node", "show", "nope"]);
    assert!(
        !success && text.contains("Node nope could not be found."),
        "{text}"
    );

    // A new driver, loaded into the running engine, and used at once.
    let drivers = ok(&engine, &["driver", "list"]);
    assert!(
        drivers.contains("agent_redfish") && !drivers.contains("test_driver"),
        "{drivers}"
    );
    let loaded = ok(&engine, &["driver", "load", deployd_fixtures::TEMPLATE]);
    assert!(loaded.starts_with("loaded template 0.1.0"), "{loaded}");
    ok(&engine, &CREATE_T1);
    for step in ["manage", "provide", "deploy"] {
        ok(&engine, &["node", step, "t1", "--wait"]);
    }
    ok(&engine, &["node", "undeploy", "t1", "--wait"]);
    ok(&engine, &["node", "delete", "t1"]);
    ok(&engine, &["driver", "unload", "template"]);
    assert!(!ok(&engine, &["driver", "list"]).contains("template"));
    engine.stop();
}

/// Files of drivers that changed on disk while the engine was stopped: an uploaded
/// component no longer matching the sha256 recorded at upload is refused by name; compiled
/// artifacts overwritten with `int3` are rejected by their digests and compiled again, so
/// the engine starts, and the drivers they held work.
#[test]
fn driver_files_changed_on_disk_are_refused_or_compiled_again_never_run() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let engine = Engine::start(&data, &[]);
    ok(&engine, &["driver", "load", deployd_fixtures::TEMPLATE]);
    let port = engine.url.rsplit(':').next().unwrap().parse().unwrap();
    engine.stop();
    let wasm = data.join("plugins/template.wasm");
    let recorded = std::fs::read_to_string(data.join("plugins/template.wasm.sha256")).unwrap();
    assert_eq!(
        recorded,
        format!("{}  template.wasm\n", support::sha256_of(&wasm))
    );
    let mut bytes = std::fs::read(&wasm).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x40;
    std::fs::write(&wasm, &bytes).unwrap();
    let mut artifacts = 0;
    for entry in std::fs::read_dir(data.join("compiled")).unwrap().flatten() {
        if entry.path().extension().is_none_or(|e| e != "cwasm") {
            continue;
        }
        let mut code = std::fs::read(entry.path()).unwrap();
        let middle = code.len() / 2;
        code[middle..middle + 4096].fill(0xCC);
        std::fs::write(entry.path(), code).unwrap();
        artifacts += 1;
    }
    assert!(
        artifacts > 1,
        "the bundled drivers and the upload were cached"
    );

    let engine = Engine::start_on(port, &data, &[]);
    let log = engine.log_text();
    assert!(
        log.contains("template.wasm has sha256") && log.contains("changed on disk"),
        "{log}"
    );
    assert_eq!(
        log.matches("compiled driver artifact rejected").count(),
        artifacts - 1,
        "every bundled driver's artifact, checked before it ran: {log}"
    );
    assert!(!ok(&engine, &["driver", "list"]).contains("template"));
    ok(
        &engine,
        &["node", "create", "--driver", "fake", "--name", "f1"],
    );
    for step in ["manage", "provide", "deploy"] {
        ok(&engine, &["node", step, "f1", "--wait"]);
    }
    engine.stop();
}

/// `deployd driver test`: a driver author's check, with nothing but the binary. The
/// bundled agent-family Redfish driver goes through its whole flow on a lab machine; one
/// whose deploy fails is reported at once; a component of another world is refused with
/// the reason.
#[test]
fn driver_test_runs_a_component_through_its_flow_on_a_simulated_machine() {
    let run = |file: &str| {
        let out = Command::new(&*BIN)
            .args(["driver", "test", file])
            .env("RUST_LOG", "error")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        (out.status.success(), text)
    };
    let (success, text) = run(deployd_fixtures::AGENT_REDFISH);
    assert!(success, "{text}");
    for line in [
        "loaded agent_redfish 0.1.0 (agent family, redfish power",
        "manage → manageable",
        "provide → available",
        "active → active",
        "the disk holds the image",
        "deleted → available",
        "Image transfer started (8388608 bytes)",
    ] {
        assert!(text.contains(line), "no {line:?} in\n{text}");
    }
    // A driver whose deploy fails is reported at once, with its last_error: here one that
    // reads a file, which no driver can (no preopened directory).
    let (success, text) = run(deployd_fixtures::FS_DRIVER);
    assert!(
        !success && text.contains("active → deploy failed in") && text.contains("No such file"),
        "{text}"
    );
    let (success, text) = run(deployd_fixtures::WRONG_WORLD);
    assert!(
        !success && text.contains("is not a deployd driver"),
        "{text}"
    );
}

/// Runs `deployd driver test` on `wasm`, an example driver named `name` that logs the
/// agent's progress from the 0.2 heartbeat record: it must deploy and undeploy.
fn example_deploys(name: &str, wasm: &std::path::Path) {
    let out = Command::new(&*BIN)
        .args(["driver", "test"])
        .arg(wasm)
        .env("RUST_LOG", "info")
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}");
    for line in [
        &format!("loaded {name} 0.2.0 (agent family, redfish power"),
        "active → active",
        "the disk holds the image",
        "deleted → available",
        "8388608 of 8388608 bytes written",
    ] {
        assert!(text.contains(line), "no {line:?} in\n{text}");
    }
}

fn built(mut command: Command) {
    let out = command.output().unwrap();
    assert!(
        out.status.success(),
        "{:?}: {}{}",
        command,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A driver in Python (`plugins/examples/python`), built with componentize-py (installed
/// into `target/test-venv` by `.ci/run`), deploys a lab machine: its runtime imports the
/// filesystem and sockets, which the host links without any capability.
#[test]
fn a_python_driver_built_with_componentize_py_deploys_a_lab_machine() {
    let dir = tempfile::tempdir().unwrap();
    let wasm = emulators::python_driver(dir.path());
    example_deploys("py_redfish", &wasm);
}

/// A driver in JavaScript (`plugins/examples/javascript`), built with componentize-js
/// (installed into `target/componentize-js` by `.ci/run`) with all its features: its
/// runtime imports `wasi:http`, linked with every request denied.
#[test]
fn a_javascript_driver_built_with_componentize_js_deploys_a_lab_machine() {
    let root = emulators::repo_root();
    let componentize = root.join("target/componentize-js/node_modules/.bin/componentize-js");
    assert!(
        componentize.exists(),
        "{} is missing: run .ci/run once (npm install --prefix target/componentize-js @bytecodealliance/componentize-js@0.23.0)",
        componentize.display()
    );
    // componentize-js reads its inputs from inside a sandbox rooted at its working
    // directory: the source and the WIT go there.
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(
        root.join("plugins/examples/javascript/driver.js"),
        dir.path().join("driver.js"),
    )
    .unwrap();
    std::fs::create_dir(dir.path().join("wit")).unwrap();
    for file in ["driver.wit", "v0.1/driver.wit"] {
        let to = dir.path().join("wit").join(file);
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(root.join("wit").join(file), to).unwrap();
    }
    let mut build = Command::new(componentize);
    build.current_dir(dir.path()).args([
        "--wit",
        "wit",
        "--world-name",
        "driver",
        "-o",
        "js_redfish.wasm",
        "driver.js",
    ]);
    built(build);
    example_deploys("js_redfish", &dir.path().join("js_redfish.wasm"));
}

/// `deployd store migrate` on a real PostgreSQL: once it migrates, then it has nothing to
/// do; a database a newer deployd migrated, and a URL with no server, are refused with
/// words that say so.
#[test]
fn deployd_store_migrate_brings_a_shared_store_to_its_schema_and_refuses_a_newer_one() {
    use deployd_test_support::postgres::{CLUSTER, database_of};
    let url = CLUSTER.database();
    let migrate = |url: &str| {
        let out = Command::new(&*BIN)
            .args(["store", "migrate", "--store-url", url])
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.success(), text)
    };
    let newest = deployd_engine::store::postgres::SCHEMA_VERSION;
    let (done, text) = migrate(&url);
    assert!(
        done && text.contains(&format!("from version 0 to {newest}")),
        "{text}"
    );
    let (done, text) = migrate(&url);
    assert!(
        done && text.contains(&format!("at version {newest}: nothing to do")),
        "{text}"
    );
    CLUSTER.psql(
        database_of(&url),
        "UPDATE deployd_schema SET version = 1000",
    );
    let (done, text) = migrate(&url);
    assert!(
        !done
            && text.contains(&format!(
                "schema is version 1000; this deployd knows versions up to {newest}"
            )),
        "{text}"
    );
    let port = emulators::free_tcp_port();
    let (done, text) = migrate(&format!("postgres://deployd@127.0.0.1:{port}/none"));
    assert!(!done && text.contains("the shared store"), "{text}");
}

/// Reads `from` on a thread of its own; each chunk through the channel.
pub(crate) fn chunks(
    mut from: impl std::io::Read + Send + 'static,
) -> std::sync::mpsc::Receiver<Vec<u8>> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = from.read(&mut buf) {
            if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                break;
            }
        }
    });
    rx
}

/// Waits (30 s at most) until what `rx` gave contains `want`; all of it.
pub(crate) fn until(rx: &std::sync::mpsc::Receiver<Vec<u8>>, seen: &mut String, want: &str) {
    while !seen.contains(want) {
        match rx.recv_timeout(std::time::Duration::from_secs(30)) {
            Ok(chunk) => seen.push_str(&String::from_utf8_lossy(&chunk)),
            Err(_) => panic!("no {want:?} in {seen:?}"),
        }
    }
}

/// An engine with the `ipmitool-socat` console enabled on one free port and `more`
/// flags, a lab machine behind the lab's pyghmi IPMI BMC, and the machine's serial port,
/// played by the test (a VM's QEMU serves it so): (engine, lab, the serial port, the
/// console's TCP port).
pub(crate) fn console_lab(
    dir: &std::path::Path,
    more: &[&str],
) -> (Engine, support::Lab, std::os::unix::net::UnixListener, u16) {
    let port = emulators::free_tcp_port();
    let range = format!("{port}:{port}");
    let mut flags = vec![
        "--enabled-console-interfaces",
        "no-console,ipmitool-socat",
        "--console-port-range",
        &range,
    ];
    flags.extend_from_slice(more);
    let engine = Engine::start(&dir.join("data"), &flags);
    let python = emulators::venv_bin("python").display().to_string();
    let lab_dir = dir.join("lab");
    let lab = support::Lab::start_with(&lab_dir, 1, &engine.url, &["--ipmi-python", &python]);
    let serial =
        std::os::unix::net::UnixListener::bind(lab_dir.join("machine-000.serial.sock")).unwrap();
    (engine, lab, serial, port)
}

/// A node's serial console from the terminal: the real `baremetal node console enable` and
/// `show` as with Ironic, then `deployd node console` attached to it (stdin a pipe, not a
/// terminal): what the machine's serial port printed comes out (through socat, ipmitool's
/// Serial-over-LAN and the lab's pyghmi BMC, which keeps what was printed before the
/// session), what is typed reaches it, Ctrl-] leaves.
#[test]
fn a_console_enabled_by_baremetal_is_attached_by_deployd_node_console() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let (engine, lab, serial, port) = console_lab(dir.path(), &[]);
    let ipmi = &lab.machines[0]["ipmi"];
    let info = |k: &str| format!("{k}={}", ipmi[k].to_string().trim_matches('"'));
    let (address, bmc_port, user, password) = (
        info("ipmi_address"),
        info("ipmi_port"),
        info("ipmi_username"),
        info("ipmi_password"),
    );
    ok(
        &engine,
        &[
            "node",
            "create",
            "--driver",
            "ipmi",
            "--name",
            "c1",
            "--driver-info",
            &address,
            "--driver-info",
            &bmc_port,
            "--driver-info",
            &user,
            "--driver-info",
            &password,
        ],
    );
    ok(&engine, &["node", "power", "c1", "power on"]);
    support::wait_node(&engine.url, "c1", 30, |n| n["power_state"] == "power on");

    crate::baremetal_cli::baremetal(&engine, &["node", "console", "enable", "c1"]);
    let shown =
        crate::baremetal_cli::baremetal(&engine, &["node", "console", "show", "c1", "-f", "json"]);
    let shown: serde_json::Value = serde_json::from_str(&shown).unwrap();
    assert_eq!(shown["console_enabled"], true, "{shown}");
    assert_eq!(
        shown["console_info"]["url"],
        format!("tcp://127.0.0.1:{port}")
    );

    // The machine prints its prompt before anyone is attached: the BMC keeps what its
    // serial port printed for the next session, as a console server does.
    let (mut machine, _) = serial.accept().unwrap();
    machine.write_all(b"\r\ndeployed login: ").unwrap();
    let mut attached = Command::new(&*BIN)
        .args(["node", "console", "c1"])
        .env("DEPLOYD_URL", &engine.url)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let out = chunks(attached.stdout.take().unwrap());
    let typed = chunks(machine.try_clone().unwrap());
    let mut seen = String::new();
    until(&out, &mut seen, "SOL Session operational");
    until(&out, &mut seen, "deployed login: ");
    let mut keys = attached.stdin.take().unwrap();
    keys.write_all(b"root\r").unwrap();
    let mut reached = String::new();
    until(&typed, &mut reached, "root\r");
    // Ctrl-] leaves; the console stays enabled.
    keys.write_all(&[0x1d]).unwrap();
    let status = attached.wait().unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(&mut attached.stderr.take().unwrap(), &mut err).unwrap();
    assert!(status.success(), "{err}");
    assert!(
        err.contains("Ctrl-] leaves") && err.contains("Left node c1's console"),
        "{err}"
    );
    let (_, states) = support::call(
        "GET",
        &format!("{}/v1/nodes/c1/states/console", engine.url),
        None,
    );
    assert_eq!(states["console_enabled"], true);
    // A disabled console is not attached to.
    crate::baremetal_cli::baremetal(&engine, &["node", "console", "disable", "c1"]);
    let (success, text) = deployd(&engine, &["node", "console", "c1"]);
    assert!(
        !success && text.contains("the console of node c1 is disabled"),
        "{text}"
    );
}
