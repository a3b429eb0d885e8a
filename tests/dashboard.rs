//! The web console in a real browser: Debian's chromium, headless, driven through
//! chromedriver by WebDriver, against `deployd serve` and a lab of machines whose agents
//! write real disk files. What an operator sees is read from the page itself: rows,
//! states, progress bars, errors; what a click did is read back from the API.
//!
//! Screenshots of the fleet view and of a node's page are kept in
//! `target/test-artifacts/dashboard/`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::time::Instant;

use deployd_test_support::browser::Browser;
use deployd_test_support::emulators::free_tcp_port;
use deployd_test_support::processes::{self as support, Engine, call, provision, wait_node};

use crate::seed_end_to_end::{flags, htpasswd, two_machines, written};

/// Where the screenshots are kept: `target/test-artifacts/dashboard/`.
fn artifacts() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/test-artifacts/dashboard");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A row's field in the fleet view, by the node's uuid and a selector inside the row.
fn row_text(node: &str, inner: &str) -> String {
    format!(
        "const r = document.querySelector('.row.node[data-uuid=\"{node}\"]'); \
         return r && r.querySelector('{inner}') ? r.querySelector('{inner}').textContent : null;"
    )
}

fn row_state(node: &str) -> String {
    format!(
        "const r = document.querySelector('.row.node[data-uuid=\"{node}\"]'); \
         return r ? r.dataset.state : null;"
    )
}

/// Two lab machines deploy an 8 MiB image at 1 MiB/s under a 3 s callback timeout; the
/// second one's agent is killed mid-write. The fleet view, pushed by the engine, shows
/// the first one's progress bar move and the node turn `active`, and the second one
/// turn `deploy failed` with its `last_error`; the node's page takes an action (set
/// maintenance, with a reason) that the API then shows.
#[test]
fn the_fleet_view_shows_a_deploy_move_a_dead_agent_fail_and_an_action_land() {
    let dir = tempfile::tempdir().unwrap();
    let (engine, lab, live, dead, _) = two_machines(dir.path(), &flags(dir.path(), 3));

    let browser = Browser::start();
    browser.goto(&format!("{}/dashboard", engine.url));
    browser.wait_for("both nodes available", 20, &format!(
        "return [{:?}, {:?}].every((u) => document.querySelector(`.row.node[data-uuid=\"${{u}}\"][data-state=available]`));",
        live, dead
    ));
    // The first one deployed from its page (the image as enrolled, filled in), the
    // second through the API.
    browser.goto(&format!("{}/dashboard#/nodes/{live}", engine.url));
    browser.click("button[data-action=deploy]");
    let image =
        browser.eval("return document.querySelector('.confirm input[name=image_source]').value;");
    let (_, enrolled) = call("GET", &format!("{}/v1/nodes/{live}", engine.url), None);
    assert_eq!(image, enrolled["instance_info"]["image_source"]);
    browser.click(".confirm .yes");
    provision(&engine.url, &dead, "active");
    wait_node(&engine.url, &live, 10, |n| {
        n["provision_state"] != "available"
    });
    browser.goto(&format!("{}/dashboard#/", engine.url));

    // The bar moves: several distinct percentages below 100 before the node is active.
    let mut seen = std::collections::BTreeSet::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut killed = false;
    loop {
        if !killed
            && written(&call("GET", &format!("{}/v1/nodes/{dead}", engine.url), None).1) >= 1 << 20
        {
            lab.kill_agent("machine-001");
            killed = true;
        }
        let state = browser.eval(&row_state(&live));
        if state == json!("active") {
            break;
        }
        if let Some(pct) = browser.eval(&row_text(&live, ".pct")).as_str() {
            let pct: u32 = pct.trim_end_matches('%').parse().unwrap();
            if pct > 0 && pct < 100 {
                seen.insert(pct);
            }
        }
        assert!(
            Instant::now() < deadline,
            "the node never turned active in the page (it shows {state})"
        );
        std::thread::sleep(Duration::from_millis(150));
    }
    assert!(
        seen.len() >= 3,
        "the progress bar showed only {seen:?} on its way"
    );
    assert_eq!(browser.eval(&row_text(&live, ".pct")), json!("100%"));
    assert!(killed, "the second agent was killed mid-write");

    browser.wait_for("the killed agent's node failed", 30, &format!(
        "return document.querySelector('.row.node[data-uuid=\"{dead}\"][data-state=\"deploy failed\"]');"
    ));
    let error = browser.eval(&row_text(&dead, ".error"));
    let (_, node) = call("GET", &format!("{}/v1/nodes/{dead}", engine.url), None);
    assert_eq!(
        error, node["last_error"],
        "the row shows the node's last_error"
    );
    assert!(
        error
            .as_str()
            .unwrap()
            .contains("Timeout reached while waiting for callback"),
        "{error}"
    );
    // The counts per state and a filter: only the failed node is listed.
    browser.click(".count[data-state=\"deploy failed\"]");
    browser.wait_for(
        "the filtered list",
        5,
        &format!(
            "const rows = [...document.querySelectorAll('.row.node')].map((r) => r.dataset.uuid); \
         return rows.length === 1 && rows[0] === {dead:?};"
        ),
    );
    browser.screenshot(&artifacts().join("fleet.png"));

    // The node's page: its error, its timeline, and an action.
    browser.goto(&format!("{}/dashboard#/nodes/{dead}", engine.url));
    let shown = browser.wait_for(
        "the node's last error",
        10,
        "const e = document.querySelector('.node .last-error'); return e && e.textContent;",
    );
    assert_eq!(shown, node["last_error"]);
    browser.wait_for(
        "its timeline",
        10,
        "return document.querySelectorAll('.timeline li').length >= 2;",
    );
    browser.click("button[data-action=\"maintenance on\"]");
    browser.type_into(".confirm input[name=reason]", "disk check");
    browser.click(".confirm .yes");
    let node = wait_node(&engine.url, &dead, 10, |n| n["maintenance"] == json!(true));
    assert_eq!(node["maintenance_reason"], "disk check");
    browser.wait_for(
        "the maintenance in the fleet",
        10,
        "return document.body.innerText.includes('maintenance');",
    );
    browser.screenshot(&artifacts().join("node.png"));

    // The engines and drivers: this engine alive, and the driver that deployed with the
    // calls it answered (from /metrics), as many as the engine counted.
    browser.goto(&format!("{}/dashboard#/engines", engine.url));
    let calls = browser.wait_for(
        "agent_redfish's calls",
        10,
        "const r = document.querySelector('tr[data-driver=agent_redfish]'); \
         return r && r.querySelector('.call') && r.textContent;",
    );
    assert!(calls.as_str().unwrap().contains("deploy: "), "{calls}");
    browser.wait_for(
        "the engine",
        10,
        "return [...document.querySelectorAll('tr[data-engine]')].some((r) => r.textContent.includes('yes'));",
    );

    // A driver uploaded from the page: a file that is no component is refused in the
    // API's words, and the test driver is loaded and listed.
    let bogus = dir.path().join("not-a-driver.wasm");
    std::fs::write(&bogus, "not a component").unwrap();
    browser.type_into("input[name=component]", &bogus.display().to_string());
    browser.click("form button[type=submit]");
    let refused = browser.wait_for(
        "the refused upload",
        30,
        "const n = document.querySelector('.note'); return n && n.textContent.startsWith('refused') && n.textContent;",
    );
    let answer = reqwest::blocking::Client::new()
        .post(format!("{}/v1/deployd/drivers", engine.url))
        .body("not a component")
        .send()
        .unwrap();
    assert_eq!(answer.status(), 400);
    let body: Value = answer.json().unwrap();
    let words: Value = serde_json::from_str(body["error_message"].as_str().unwrap()).unwrap();
    assert_eq!(
        refused,
        json!(format!(
            "refused: {}",
            words["faultstring"].as_str().unwrap()
        ))
    );
    browser.eval("document.querySelector('input[name=component]').value = ''; return null;");
    browser.type_into("input[name=component]", deployd_fixtures::TEST_DRIVER);
    browser.click("form button[type=submit]");
    browser.wait_for(
        "the uploaded driver listed",
        60,
        "const n = document.querySelector('.note'); \
         return n && n.textContent.startsWith('loaded test_driver') \
           && document.querySelector('tr[data-driver=test_driver]');",
    );
    let (status, _) = call(
        "GET",
        &format!("{}/v1/drivers/test_driver", engine.url),
        None,
    );
    assert_eq!(status, 200, "the engine has it");
    drop(lab);
    drop(engine);
}

/// With `http_basic`, nothing of the dashboard answers without credentials; logged in,
/// the browser deploys a node from its page (a config drive its driver cannot write is
/// refused first, in the API's own words), an action the API refuses (undeploying a
/// protected node) is refused in the page in its words, and the fleet streams.
#[test]
fn with_http_basic_the_dashboard_asks_for_credentials_and_shows_the_apis_refusals() {
    let dir = tempfile::tempdir().unwrap();
    let htpasswd = htpasswd(dir.path(), &[("admin", "s3cret")], 4);
    let engine = Engine::start(
        &dir.path().join("data"),
        &[
            "--auth-strategy",
            "http_basic",
            "--http-basic-auth-user-file",
            &htpasswd,
        ],
    );
    let http = reqwest::blocking::Client::new();
    for path in [
        "/dashboard",
        "/dashboard/events",
        "/dashboard/assets/app.js",
    ] {
        let answer = http.get(format!("{}{path}", engine.url)).send().unwrap();
        assert_eq!(answer.status(), 401, "{path}");
        assert!(
            answer.headers()["www-authenticate"]
                .to_str()
                .unwrap()
                .starts_with("Basic")
        );
        let answer = http
            .get(format!("{}{path}", engine.url))
            .basic_auth("admin", Some("wrong"))
            .send()
            .unwrap();
        assert_eq!(answer.status(), 401, "{path} with a wrong password");
    }

    support::authenticate_as("admin", "s3cret");
    let (status, node) = call(
        "POST",
        &format!("{}/v1/nodes", engine.url),
        Some(json!({"name": "kept", "driver": "fake"})),
    );
    assert_eq!(status, 201, "{node}");
    let uuid = node["uuid"].as_str().unwrap().to_owned();
    support::make_available(&engine.url, &uuid);

    let browser = Browser::start();
    let authority = engine.url.trim_start_matches("http://");
    // Chromium logs in from the url's credentials and keeps them for the origin; the
    // page itself must be loaded without them (fetch refuses a page url that has them).
    browser.goto(&format!("http://admin:s3cret@{authority}/dashboard"));
    browser.goto(&format!("http://{authority}/dashboard#/nodes/{uuid}"));
    browser.wait_for(
        "the node's page",
        20,
        "return document.querySelector('.node[data-state=available]');",
    );
    // Deployed from the page with an image and a config drive: the fake driver writes no
    // config drive, which the API refuses in words, and the page shows them; without the
    // drive the deploy goes through.
    let refusal = |browser: &Browser| {
        browser.wait_for(
            "the refusal",
            10,
            "const e = document.querySelector('.confirm .refused'); return e && e.textContent;",
        )
    };
    let faultstring = |body: &Value| -> Value {
        serde_json::from_str::<Value>(body["error_message"].as_str().unwrap()).unwrap()
            ["faultstring"]
            .clone()
    };
    browser.click("button[data-action=deploy]");
    browser.type_into(
        ".confirm input[name=image_source]",
        "http://images.invalid/os.img",
    );
    browser.type_into(
        ".confirm textarea[name=configdrive]",
        r#"{"meta_data": {"hostname": "kept"}}"#,
    );
    browser.click(".confirm .yes");
    let refused = refusal(&browser);
    let provision_url = format!("{}/v1/nodes/{uuid}/states/provision", engine.url);
    let drive = json!({"target": "active", "configdrive": {"meta_data": {"hostname": "kept"}}});
    let (status, body) = call("PUT", &provision_url, Some(drive));
    assert_eq!(status, 400, "{body}");
    assert_eq!(
        refused,
        faultstring(&body),
        "the page says what the API says"
    );
    let (_, node) = call("GET", &format!("{}/v1/nodes/{uuid}", engine.url), None);
    assert_eq!(node["provision_state"], "available", "nothing changed");
    browser.replace_text(".confirm textarea[name=configdrive]", "");
    browser.click(".confirm .yes");
    let node = wait_node(&engine.url, &uuid, 30, |n| n["provision_state"] == "active");
    assert_eq!(
        node["instance_info"]["image_source"],
        "http://images.invalid/os.img"
    );

    let patch = json!([{"op": "replace", "path": "/protected", "value": true}]);
    let (status, body) = call(
        "PATCH",
        &format!("{}/v1/nodes/{uuid}", engine.url),
        Some(patch),
    );
    assert_eq!(status, 200, "{body}");
    browser.wait_for(
        "the node active on its page",
        20,
        "return document.querySelector('.node[data-state=active]');",
    );
    browser.click("button[data-action=undeploy]");
    browser.click(".confirm .yes");
    let refused = refusal(&browser);
    let (status, body) = call("PUT", &provision_url, Some(json!({"target": "deleted"})));
    assert_eq!(status, 403, "{body}");
    assert_eq!(
        refused,
        faultstring(&body),
        "the page says what the API says"
    );
    let (_, node) = call("GET", &format!("{}/v1/nodes/{uuid}", engine.url), None);
    assert_eq!(node["provision_state"], "active", "nothing changed");
    // The fleet view streams under the same login.
    browser.goto(&format!("http://{authority}/dashboard#/"));
    browser.wait_for(
        "the fleet",
        20,
        &format!("return document.querySelector('.row.node[data-uuid=\"{uuid}\"]');"),
    );
}

/// Under `noauth`, the dashboard answers loopback clients only: a client on another
/// network (the test's end of a namespace's veth pair, where the engine listens on all
/// addresses) is refused in words, while the API answers it; the operator can open it.
#[test]
fn without_authentication_the_dashboard_answers_only_on_loopback_unless_opened() {
    let dir = tempfile::tempdir().unwrap();
    let ns = deployd_test_support::netns::Netns::create();
    let http = reqwest::blocking::Client::new();
    let engine = Engine::start_in(&ns, free_tcp_port(), &dir.path().join("data"), &[]);
    let page = http
        .get(format!("{}/dashboard", engine.url))
        .send()
        .unwrap();
    assert_eq!(page.status(), 403);
    let words = page.text().unwrap();
    assert!(words.contains("dashboard_open_to_remote"), "{words}");
    let events = http
        .get(format!("{}/dashboard/events", engine.url))
        .send()
        .unwrap();
    assert_eq!(events.status(), 403);
    let api = http.get(format!("{}/v1/nodes", engine.url)).send().unwrap();
    assert_eq!(
        api.status(),
        200,
        "the API itself is not the dashboard's to close"
    );
    engine.stop();

    let config = dir.path().join("deployd.toml");
    std::fs::write(&config, "[api]\ndashboard_open_to_remote = true\n").unwrap();
    let config = config.display().to_string();
    let engine = Engine::start_in(
        &ns,
        free_tcp_port(),
        &dir.path().join("data"),
        &["--config", &config],
    );
    let page = http
        .get(format!("{}/dashboard", engine.url))
        .send()
        .unwrap();
    assert_eq!(page.status(), 200);
    assert!(page.text().unwrap().contains("/dashboard/assets/app.js"));
    engine.stop();
}

/// A node's serial console in the browser (xterm.js over the engine's websocket, bridged
/// to the console's socat, ipmitool's Serial-over-LAN and the lab's pyghmi BMC): enabled
/// from the node's page, it shows what the machine printed, and what a writer types
/// reaches the machine; a user `dashboard_console_writers` does not name watches it
/// read-only.
#[test]
fn a_serial_console_in_the_browser_is_typed_into_by_a_writer_and_watched_by_others() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let htpasswd = htpasswd(dir.path(), &[("admin", "s3cret"), ("viewer", "v1ew")], 4);
    let config = dir.path().join("deployd.toml");
    std::fs::write(&config, "[api]\ndashboard_console_writers = [\"admin\"]\n").unwrap();
    let config = config.display().to_string();
    let (engine, lab, serial, _) = crate::deployd_cli::console_lab(
        dir.path(),
        &[
            "--auth-strategy",
            "http_basic",
            "--http-basic-auth-user-file",
            &htpasswd,
            "--config",
            &config,
        ],
    );
    support::authenticate_as("admin", "s3cret");
    let (status, node) = call(
        "POST",
        &format!("{}/v1/nodes", engine.url),
        Some(json!({"name": "c1", "driver": "ipmi", "driver_info": lab.machines[0]["ipmi"]})),
    );
    assert_eq!(status, 201, "{node}");
    let uuid = node["uuid"].as_str().unwrap().to_owned();
    let power = format!("{}/v1/nodes/{uuid}/states/power", engine.url);
    let (status, body) = call("PUT", &power, Some(json!({"target": "power on"})));
    assert_eq!(status, 202, "{body}");
    wait_node(&engine.url, &uuid, 30, |n| n["power_state"] == "power on");

    let authority = engine.url.trim_start_matches("http://").to_owned();
    let login = |user: &str, password: &str| {
        let browser = Browser::start();
        browser.goto(&format!("http://{user}:{password}@{authority}/dashboard"));
        browser.goto(&format!("http://{authority}/dashboard#/nodes/{uuid}"));
        browser.wait_for(
            "the node's page",
            20,
            "return document.querySelector('.node');",
        );
        browser
    };
    let admin = login("admin", "s3cret");
    admin.click("button[data-action=\"console on\"]");
    admin.click(".confirm .yes");
    wait_node(&engine.url, &uuid, 30, |n| n["console_enabled"] == true);
    // The machine prints its prompt before anyone is attached (the BMC keeps it).
    let (mut machine, _) = serial.accept().unwrap();
    machine.write_all(b"\r\ndeployed login: ").unwrap();
    admin.click("button[data-action=attach]");
    let screen = "const r = document.querySelector('.xterm-rows'); return r && r.textContent;";
    admin.wait_for(
        "the machine's prompt in the terminal",
        30,
        &format!(
            "const t = (() => {{ {screen} }})(); return t && t.includes('deployed login:') && t;"
        ),
    );
    assert_eq!(
        admin.eval("return document.querySelector('.console-status').textContent;"),
        "attached"
    );
    let typed = crate::deployd_cli::chunks(machine.try_clone().unwrap());
    admin.type_into(".xterm-helper-textarea", "root\u{E007}");
    let mut reached = String::new();
    crate::deployd_cli::until(&typed, &mut reached, "root\r");
    admin.screenshot(&artifacts().join("console.png"));
    admin.click("button[data-action=attach]");
    drop(admin);

    // socat serves one session at a time: the viewer's starts once the admin's ended.
    let viewer = login("viewer", "v1ew");
    viewer.click("button[data-action=attach]");
    viewer.wait_for(
        "the read-only console",
        30,
        "const s = document.querySelector('.console-status'); return s && s.textContent === 'attached, read-only';",
    );
    viewer.type_into(".xterm-helper-textarea", "reboot\u{E007}");
    machine.write_all(b"\r\nstill here\r\n").unwrap();
    viewer.wait_for(
        "what the machine printed since",
        30,
        &format!("const t = (() => {{ {screen} }})(); return t && t.includes('still here');"),
    );
    // What the viewer typed went nowhere: the machine got nothing more than the admin's.
    std::thread::sleep(Duration::from_millis(500));
    while let Ok(chunk) = typed.try_recv() {
        reached.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert!(!reached.contains("reboot"), "{reached:?}");
}
