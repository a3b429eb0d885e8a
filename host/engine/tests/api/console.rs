//! Serial consoles through `ipmitool-socat` (enabled by `[interfaces]`), on a lab machine
//! whose IPMI BMC is the lab's pyghmi one (`--ipmi-python`): the test plays the machine's
//! serial port (the Unix socket a VM's QEMU would serve), and what it writes there comes
//! out of the console's TCP port through socat, the real `ipmitool sol activate` and the
//! BMC's Serial-over-LAN, and what is typed there reaches it. Disabled, deleted or with the
//! engine stopped, the port closes; a restarted engine opens it again; a full port range
//! is refused with nothing left running.

use deployd_test_support as common;

use std::time::Duration;

use common::server::start;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Reads from `from` until what was read contains `want`; all of it.
async fn read_until<R: AsyncReadExt + Unpin>(from: &mut R, want: &str) -> String {
    let mut seen = Vec::new();
    let mut buf = [0u8; 1024];
    let read = async {
        while !String::from_utf8_lossy(&seen).contains(want) {
            let n = from.read(&mut buf).await.unwrap();
            assert!(
                n > 0,
                "closed before {want:?}: {:?}",
                String::from_utf8_lossy(&seen)
            );
            seen.extend_from_slice(&buf[..n]);
        }
    };
    if tokio::time::timeout(Duration::from_secs(30), read)
        .await
        .is_err()
    {
        panic!("no {want:?} in {:?}", String::from_utf8_lossy(&seen));
    }
    String::from_utf8_lossy(&seen).into_owned()
}

/// The console's port, from its `console_info` url.
fn port_of(states: &Value) -> u16 {
    let url = states["console_info"]["url"].as_str().unwrap();
    url.rsplit(':').next().unwrap().parse().unwrap()
}

/// Waits until the node shows `power` and no task holds it.
async fn power_is(s: &common::server::Server, node: &str, power: &str) {
    for _ in 0..300 {
        let n = s.get(&format!("/v1/nodes/{node}")).await.body;
        if n["power_state"] == power
            && n["target_power_state"].is_null()
            && n["reservation"].is_null()
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let n = s.get(&format!("/v1/nodes/{node}")).await.body;
    panic!("node {node} never reached {power}: {n}");
}

/// Whether something listens on `port` (it refuses a bind: a connection would open a
/// console session).
fn listens(port: u16) -> bool {
    std::net::TcpListener::bind(("127.0.0.1", port)).is_err()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ipmitool_socat_console_reaches_the_machines_serial_port_through_sol() {
    // A range of one port: the second console finds it full.
    let port = common::emulators::free_tcp_port();
    let s = start(|c| {
        c.interfaces.enabled_console_interfaces =
            vec!["no-console".into(), "ipmitool-socat".into()];
        c.console.port_range = format!("{port}:{port}");
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let mut args = super::inspection::lab_args(&dir, &s.base, 1 << 20, 512);
    args.machines = 2;
    args.ipmi_python = Some(common::emulators::venv_bin("python"));
    let lab = deployd_lab::Lab::start(&args, deployd_lab::AgentMode::Task)
        .await
        .unwrap();
    let machines = lab.enrollments();
    // The machine's serial port: the BMC connects to it, as to a VM's.
    let serial = tokio::net::UnixListener::bind(&lab.machines["machine-000"].serial_port).unwrap();
    let node_of = |i: usize| {
        let ipmi = serde_json::to_value(machines[i].ipmi.as_ref().unwrap()).unwrap();
        json!({"driver": "ipmi", "driver_info": ipmi, "name": format!("n{i}")})
    };
    let node = s.node(node_of(0)).await;
    let shown = s
        .at(Method::GET, &format!("/v1/nodes/{node}"), "1.31", None)
        .await
        .body;
    assert_eq!(
        shown["console_interface"], "ipmitool-socat",
        "Ironic's default once enabled"
    );
    let power = format!("/v1/nodes/{node}/states/power");
    let on = s
        .send(Method::PUT, &power, json!({"target": "power on"}))
        .await;
    assert_eq!(on.status, StatusCode::ACCEPTED);
    power_is(&s, &node, "power on").await;
    let console = format!("/v1/nodes/{node}/states/console");
    let a = s
        .send(Method::PUT, &console, json!({"enabled": true}))
        .await;
    assert_eq!(a.status, StatusCode::ACCEPTED, "{:?}", a.body);
    let states = s.get(&console).await.body;
    assert_eq!(states["console_enabled"], true);
    assert_eq!(states["console_info"]["type"], "socat");
    assert_eq!(port_of(&states), port);

    let (mut machine, _) = tokio::time::timeout(Duration::from_secs(30), serial.accept())
        .await
        .expect("the BMC connects to the serial port")
        .unwrap();
    let mut operator = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    read_until(&mut operator, "SOL Session operational").await;
    machine
        .write_all(b"\r\nDebian GNU/Linux 12 deployed ttyS0\r\n\r\ndeployed login: ")
        .await
        .unwrap();
    read_until(&mut operator, "deployed login: ").await;
    operator.write_all(b"root\r").await.unwrap();
    read_until(&mut machine, "root\r").await;
    drop(operator);

    // The port range is full: a clear refusal, the node unchanged, nothing started.
    let other = s.node(node_of(1)).await;
    let a = s
        .send(
            Method::PUT,
            &format!("/v1/nodes/{other}/states/console"),
            json!({"enabled": true}),
        )
        .await;
    assert_eq!(a.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert!(
        a.fault().contains(&format!(
            "every port of [console] port_range {port}:{port} is taken"
        )),
        "{}",
        a.fault()
    );
    let states = s
        .get(&format!("/v1/nodes/{other}/states/console"))
        .await
        .body;
    assert_eq!(
        states,
        json!({"console_enabled": false, "console_info": null})
    );

    // Disabled: the port closes. Enabled again, it survives a restart of the engine.
    let a = s
        .send(Method::PUT, &console, json!({"enabled": false}))
        .await;
    assert_eq!(a.status, StatusCode::ACCEPTED);
    assert!(!listens(port), "disabled, the console's port is closed");
    assert_eq!(s.get(&console).await.body["console_info"], Value::Null);
    s.send(Method::PUT, &console, json!({"enabled": true}))
        .await;
    assert!(listens(port));
    let s = s.restart().await;
    let mut restored = false;
    for _ in 0..100 {
        if s.get(&console).await.body["console_info"]["url"].is_string() {
            restored = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        restored && listens(port),
        "the restarted engine runs the console again"
    );
    // Deleted with its node.
    let off = s
        .send(Method::PUT, &power, json!({"target": "power off"}))
        .await;
    assert_eq!(off.status, StatusCode::ACCEPTED);
    power_is(&s, &node, "power off").await;
    assert_eq!(
        s.delete(&format!("/v1/nodes/{node}")).await.status,
        StatusCode::NO_CONTENT
    );
    assert!(!listens(port), "deleted, its console is closed");
}
