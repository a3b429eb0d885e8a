//! Each capability's `Host` methods called directly, as Spin tests its factors: a real
//! store on sled in a temporary directory, the engine's services, no wasm. What a 0.2
//! driver sees is what these return, through `convert_error`: a [`CapabilityError`] of the
//! kind asserted here becomes the WIT `error` of that kind, and `Host` a trap. The 0.1
//! adapter is tested at the end.

use std::sync::Arc;
use std::time::Duration;

use super::CapabilityError::{Invalid, NotConfigured, NotReady, Remote};
use super::bindings::deployd::driver::agent::Host as _;
use super::bindings::deployd::driver::bmc::{BootDevice, Host as _, PowerState};
use super::bindings::deployd::driver::image::{Host as _, WriteProgress};
use super::bindings::deployd::driver::log::{Host as _, Level};
use super::bindings::deployd::driver::node::Host as _;
use super::bindings::deployd::driver::provision::Host as _;
use super::*;
use crate::agent_sessions::CallbackUrl;
use crate::clock::{Clock, Timestamp};
use crate::node::NewNode;
use crate::state_machine::{ENROLL_TO_WAIT_CALL_BACK, Timeouts};
use crate::store::StoreConfig;
use serde_json::{Value, json};
use uuid::Uuid;

const T0: Timestamp = Timestamp::from_micros(1_800_000_000_000_000);

struct World {
    _dir: tempfile::TempDir,
    services: Arc<Services>,
    clock: Clock,
}

fn world() -> World {
    let dir = tempfile::tempdir().unwrap();
    let clock = Clock::manual(T0);
    let (store, _) = Store::open(
        &dir.path().join("store"),
        &StoreConfig::default(),
        Timeouts::uniform(Duration::from_secs(60)),
        clock.clone(),
    )
    .unwrap();
    let services = Services::new(
        Arc::new(store),
        Arc::new(AgentSessions::default()),
        4,
        super::bmc::Backends::default(),
    );
    World {
        _dir: dir,
        services,
        clock,
    }
}

impl World {
    async fn node(&self, driver_info: Value) -> Uuid {
        let new = NewNode {
            driver: "fake".into(),
            driver_info: serde_json::from_value(driver_info).unwrap(),
            ..Default::default()
        };
        self.services.store.create_node(new).await.unwrap().uuid()
    }

    async fn waiting(&self) -> Uuid {
        let node = self.node(json!({})).await;
        for event in ENROLL_TO_WAIT_CALL_BACK {
            self.services
                .store
                .apply_event(node, event, None)
                .await
                .unwrap();
        }
        node
    }

    /// The agent's last heartbeat as a 0.2 driver of `node` reads it.
    async fn heard(
        &self,
        node: Uuid,
    ) -> Option<super::bindings::deployd::driver::provision::Heartbeat> {
        self.call(node, "fake").last_heartbeat().await.unwrap()
    }

    /// The state of one driver call about `node` through the `power` backend.
    fn call(&self, node: Uuid, power: &str) -> HostState {
        HostState::new(
            node,
            None,
            "under_test".into(),
            power.into(),
            self.services.clone(),
            wasmtime_wasi::p2::pipe::MemoryOutputPipe::new(1024),
            Default::default(),
        )
    }
}

/// The kind of a refusal, or a panic naming what came instead.
fn refused<T: std::fmt::Debug>(result: Result<T, CapabilityError>) -> CapabilityError {
    result.expect_err("a refusal")
}

#[test]
fn refusals_reach_the_driver_with_their_kind_and_host_failures_trap() {
    use super::bindings::deployd::driver::types::{Error, Host as _};
    let w = world();
    let mut call = w.call(Uuid::nil(), "fake");
    let kinds = [
        (Invalid("a".into()), Error::Invalid("a".into())),
        (NotReady("b".into()), Error::NotReady("b".into())),
        (NotConfigured("c".into()), Error::NotConfigured("c".into())),
        (Remote("d".into()), Error::Remote("d".into())),
    ];
    for (ours, theirs) in kinds {
        assert_eq!(
            format!("{:?}", call.convert_error(ours).unwrap()),
            format!("{theirs:?}")
        );
    }
    let trap = call
        .convert_error(CapabilityError::Host("disk gone".into()))
        .unwrap_err();
    assert_eq!(trap.downcast_ref::<HostFailure>().unwrap().0, "disk gone");
    // The store's answers about a node are the driver's; its own failures are the host's.
    let node = Uuid::nil();
    let not_found = CapabilityError::from(StoreError::NodeNotFound(node.to_string()));
    assert!(matches!(not_found, NotReady(_)));
    let corrupt = CapabilityError::from(StoreError::Corrupt("bad record".into()));
    assert_eq!(
        corrupt,
        CapabilityError::Host("stored data is corrupt: bad record".into())
    );
    // Where the WIT has no error case, a refusal traps too.
    assert!(infallible::<(), _>(Err(Invalid("gone".into()))).is_err());
}

#[tokio::test]
async fn node_shows_its_fields_and_keeps_scratch_within_limits() {
    let w = world();
    let node = w.node(json!({"redfish_address": "http://bmc"})).await;
    let mut call = w.call(node, "fake");
    let view: Value = serde_json::from_str(&call.get().await.unwrap()).unwrap();
    assert_eq!(view["uuid"], node.to_string());
    assert_eq!(view["provision_state"], "enroll");
    assert_eq!(view["driver_info"]["redfish_address"], "http://bmc");

    call.set_scratch("step".into(), Some("3".into()))
        .await
        .unwrap();
    assert_eq!(
        call.get_scratch("step".into()).await.unwrap().as_deref(),
        Some("3")
    );
    // A new call reads the record the last one wrote.
    let mut next = w.call(node, "fake");
    assert_eq!(
        next.get_scratch("step".into()).await.unwrap().as_deref(),
        Some("3")
    );
    next.set_scratch("step".into(), None).await.unwrap();
    assert_eq!(next.get_scratch("step".into()).await.unwrap(), None);

    // Just inside each limit, and just past it.
    let key = "k".repeat(128);
    next.set_scratch(key.clone(), Some("1".into()))
        .await
        .unwrap();
    let long_key = refused(next.set_scratch(key + "k", Some("1".into())).await);
    assert!(
        matches!(&long_key, Invalid(m) if m.contains("1 to 128 bytes")),
        "{long_key:?}"
    );
    let value = format!("\"{}\"", "v".repeat((64 << 10) - 2));
    next.set_scratch("big".into(), Some(value.clone()))
        .await
        .unwrap();
    let too_big = refused(next.set_scratch("big".into(), Some(value + " ")).await);
    assert!(
        matches!(&too_big, Invalid(m) if m.contains("at most")),
        "{too_big:?}"
    );
    let not_json = refused(next.set_scratch("x".into(), Some("{".into())).await);
    assert!(
        matches!(&not_json, Invalid(m) if m.contains("not JSON")),
        "{not_json:?}"
    );
    let empty = refused(next.set_scratch(String::new(), None).await);
    assert!(matches!(empty, Invalid(_)));

    // A node deleted under the call: a write is refused (not ready: no such node), a
    // read traps.
    w.services.store.delete_node(node).await.unwrap();
    let mut late = w.call(node, "fake");
    let gone = refused(late.set_scratch("a".into(), Some("1".into())).await);
    assert!(matches!(gone, NotReady(_)), "{gone:?}");
    assert!(late.get().await.is_err());
}

#[tokio::test]
async fn touch_moves_the_clock_of_a_waiting_node_only() {
    let w = world();
    let enrolled = w.node(json!({})).await;
    let enrolled = refused(w.call(enrolled, "fake").touch().await);
    assert!(
        matches!(&enrolled, NotReady(m) if m.contains("\"enroll\"")),
        "{enrolled:?}"
    );

    let node = w.waiting().await;
    let before = w.services.store.node(node).await.unwrap().provision;
    w.clock.advance(Duration::from_secs(30));
    w.call(node, "fake").touch().await.unwrap();
    let after = w.services.store.node(node).await.unwrap().provision;
    assert_eq!(
        after.updated_at,
        before.updated_at.plus(Duration::from_secs(30))
    );
    assert!(after.deadline > before.deadline);
}

#[tokio::test]
async fn last_heartbeat_is_the_agents_own() {
    let w = world();
    let node = w.waiting().await;
    assert!(w.heard(node).await.is_none());
    let url = CallbackUrl::parse("http://10.0.0.5:9999").unwrap();
    w.services
        .agents
        .heartbeat(node, "tok", &url, "13.0.0", None, Default::default(), T0);
    let heartbeat = w.heard(node).await.unwrap();
    assert_eq!(heartbeat.agent_url, "http://10.0.0.5:9999");
    assert_eq!(heartbeat.agent_version, "13.0.0");
    assert_eq!(heartbeat.at, T0.to_string());
    assert_eq!((heartbeat.status, heartbeat.status_message), (None, None));
    assert!(
        heartbeat.progress.is_none(),
        "ironic-python-agent reports none"
    );
    // deployd's agent's report, structured; an installer's status, as it sent it.
    let report = |status: Option<&str>, message: &str| crate::agent_sessions::AgentReport {
        status: status.map(str::to_owned),
        message: Some(message.to_owned()),
    };
    let heard = w.services.agents.heartbeat(
        node,
        "tok",
        &url,
        "13.0.0",
        None,
        report(
            None,
            "prepare_image: running, 1048576 of 8388608 bytes written",
        ),
        T0,
    );
    assert_eq!(
        heard.transfer.map(|t| t.to_string()).as_deref(),
        Some("Image transfer started (8388608 bytes)")
    );
    let heartbeat = w.heard(node).await.unwrap();
    let progress = heartbeat.progress.unwrap();
    let step = progress.step.unwrap();
    assert_eq!(step.name, "prepare_image");
    assert!(matches!(
        step.status,
        super::bindings::deployd::driver::provision::StepStatus::Running
    ));
    assert_eq!(
        (progress.bytes_done, progress.bytes_total),
        (1 << 20, Some(8 << 20))
    );
    let report = report(Some("end"), "installed");
    w.services
        .agents
        .heartbeat(node, "tok", &url, "13.0.0", None, report, T0);
    let heartbeat = w.heard(node).await.unwrap();
    assert_eq!(heartbeat.status.as_deref(), Some("end"));
    assert_eq!(heartbeat.status_message.as_deref(), Some("installed"));
    assert!(heartbeat.progress.is_none(), "not a progress report");
    // Another node's driver sees nothing of it.
    let other = w.waiting().await;
    assert!(
        w.call(other, "fake")
            .last_heartbeat()
            .await
            .unwrap()
            .is_none()
    );
}

#[tokio::test]
async fn the_fake_bmc_records_power_and_real_backends_need_their_driver_info() {
    let w = world();
    let node = w.node(json!({})).await;
    let mut call = w.call(node, "fake");
    call.set_power(PowerState::On).await.unwrap();
    assert_eq!(call.get_power().await.unwrap(), PowerState::On);
    let record = w.services.store.node(node).await.unwrap();
    assert_eq!(record.body.power_state.as_deref(), Some("power on"));
    call.set_power(PowerState::Off).await.unwrap();
    assert_eq!(call.get_power().await.unwrap(), PowerState::Off);
    call.reboot().await.unwrap();
    assert_eq!(call.get_power().await.unwrap(), PowerState::On);
    call.set_boot_device(BootDevice::Pxe, false).await.unwrap();

    let missing = refused(w.call(node, "redfish").set_power(PowerState::On).await);
    assert!(
        matches!(&missing, NotConfigured(m) if m.contains("driver_info.redfish_address is required")),
        "{missing:?}"
    );
    let missing = refused(w.call(node, "ipmitool").get_power().await);
    assert!(
        matches!(&missing, NotConfigured(m) if m.contains("driver_info.ipmi_address is required")),
        "{missing:?}"
    );
    let unknown = refused(w.call(node, "snmp").reboot().await);
    assert!(matches!(&unknown, NotConfigured(m) if m.contains("unknown power backend")));
    // A BMC that cannot be reached is remote.
    let dead = w.node(json!({"redfish_address": "http://127.0.0.1:9", "redfish_system_id": "/redfish/v1/Systems/1"})).await;
    let unreachable = refused(w.call(dead, "redfish").get_power().await);
    assert!(matches!(unreachable, Remote(_)), "{unreachable:?}");
    // The operator's path through the same service.
    assert_eq!(
        bmc::check(&w.services, node, "redfish")
            .await
            .map_err(|e| e.contains("redfish_address")),
        Err(true)
    );
    bmc::act(&w.services, node, "fake", bmc::PowerAction::Off)
        .await
        .unwrap();
    let record = w.services.store.node(node).await.unwrap();
    assert_eq!(record.body.power_state.as_deref(), Some("power off"));
}

/// A loopback agent command API that accepts one token.
async fn agent_api() -> CallbackUrl {
    agent_api_on(tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap()).await
}

/// [`agent_api`] on `listener`.
async fn agent_api_on(listener: tokio::net::TcpListener) -> CallbackUrl {
    use axum::extract::Query;
    use axum::http::StatusCode;
    use axum::routing::post;
    use std::collections::HashMap;
    let commands = post(
        |q: Query<HashMap<String, String>>, body: axum::Json<Value>| async move {
            if q.get("agent_token").map(String::as_str) != Some("tok") {
                let fault = json!({"faultstring": "Unauthorized: invalid token"});
                return (StatusCode::UNAUTHORIZED, axum::Json(fault));
            }
            let result = json!({"command_name": body["name"], "command_status": "SUCCEEDED"});
            (StatusCode::OK, axum::Json(result))
        },
    )
    .get(|| async { axum::Json(json!({"commands": [{"command_name": "get_clean_steps"}]})) });
    let app = axum::Router::new().route("/v1/commands/", commands);
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    CallbackUrl::parse(&format!("http://{addr}")).unwrap()
}

#[tokio::test]
async fn agent_commands_go_to_the_nodes_own_agent_with_its_token() {
    let w = world();
    let node = w.waiting().await;
    let early = refused(
        w.call(node, "fake")
            .run("sync".into(), "{}".into(), true)
            .await,
    );
    assert!(matches!(&early, NotReady(m) if m.contains("has not called back yet")));

    let url = agent_api().await;
    w.services
        .agents
        .heartbeat(node, "tok", &url, "1", None, Default::default(), T0);
    let mut call = w.call(node, "fake");
    let done = call
        .run("standby.sync".into(), "{}".into(), true)
        .await
        .unwrap();
    let done: Value = serde_json::from_str(&done).unwrap();
    assert_eq!(done["command_status"], "SUCCEEDED");
    assert_eq!(done["command_name"], "standby.sync");
    let list: Value = serde_json::from_str(&call.commands().await.unwrap()).unwrap();
    assert_eq!(list[0]["command_name"], "get_clean_steps");
    // The command list is the real IPA's progress: reading it records a fingerprint, and
    // restarts the stall timeout from now.
    let p = w.services.store.node(node).await.unwrap().provision;
    assert_ne!(p.progress, 0);
    w.clock.advance(Duration::from_secs(5));
    assert!(
        w.services
            .store
            .report_progress(node, p.progress ^ 1)
            .await
            .unwrap()
    );
    let moved = w.services.store.node(node).await.unwrap().provision;
    assert_eq!(
        moved.progress_at,
        p.progress_at.plus(Duration::from_secs(5))
    );
    assert_eq!(moved.updated_at, p.updated_at, "not a touch");
    let bad = refused(call.run("x".into(), "not json".into(), true).await);
    assert!(
        matches!(&bad, Invalid(m) if m.contains("not JSON")),
        "{bad:?}"
    );

    // A token the agent does not know: its own words come back to the driver.
    w.services
        .agents
        .heartbeat(node, "stale", &url, "1", None, Default::default(), T0);
    let stale = refused(
        w.call(node, "fake")
            .run("x".into(), "{}".into(), true)
            .await,
    );
    assert!(
        matches!(&stale, Remote(m) if m.contains("401 Unauthorized: Unauthorized: invalid token")),
        "{stale:?}"
    );
}

/// An agent whose API is not up yet is tried again for a few seconds; one that never
/// answers fails with an error that names its url but not its token (the request's query
/// holds it, and the error goes to `last_error`, history and the log).
#[tokio::test]
async fn an_agent_not_listening_yet_is_tried_again_and_errors_never_carry_the_token() {
    let w = world();
    let node = w.waiting().await;
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = free.local_addr().unwrap();
    drop(free);
    let url = CallbackUrl::parse(&format!("http://{addr}")).unwrap();
    w.services
        .agents
        .heartbeat(node, "tok", &url, "1", None, Default::default(), T0);
    let late = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(800)).await;
        agent_api_on(tokio::net::TcpListener::bind(addr).await.unwrap()).await
    });
    let done = w
        .call(node, "fake")
        .run("standby.sync".into(), "{}".into(), true)
        .await
        .unwrap();
    assert!(done.contains("SUCCEEDED"), "{done}");
    late.await.unwrap();

    let never = CallbackUrl::parse("http://127.0.0.1:9").unwrap();
    w.services
        .agents
        .heartbeat(node, "tok", &never, "1", None, Default::default(), T0);
    let started = tokio::time::Instant::now();
    let error = refused(
        w.call(node, "fake")
            .run("standby.sync".into(), "{}".into(), true)
            .await,
    );
    assert!(
        started.elapsed() >= Duration::from_secs(3),
        "it was tried again"
    );
    let Remote(text) = &error else {
        panic!("{error:?}")
    };
    assert!(
        text.starts_with("cannot reach the agent at http://127.0.0.1:9/v1/commands/: ")
            && text.contains("refused")
            && !text.contains("tok"),
        "{text}"
    );
}

#[tokio::test]
async fn image_writes_go_only_to_the_nodes_agent_host() {
    let w = world();
    let node = w.waiting().await;
    let mut call = w.call(node, "fake");
    let bad = "0".repeat(64);
    let target = "http://10.0.0.5:9999/v1/disk";
    let early = refused(
        call.start_write(
            "http://images/i.raw".into(),
            "sha256".into(),
            bad.clone(),
            target.into(),
        )
        .await,
    );
    assert!(matches!(&early, NotReady(m) if m.contains("has not called back")));
    let url = CallbackUrl::parse("http://10.0.0.5:9999").unwrap();
    w.services
        .agents
        .heartbeat(node, "tok", &url, "1", None, Default::default(), T0);
    let elsewhere = "http://10.9.9.9:9999/v1/disk".to_owned();
    let elsewhere = refused(
        call.start_write(
            "http://images/i.raw".into(),
            "sha256".into(),
            bad.clone(),
            elsewhere,
        )
        .await,
    );
    assert!(matches!(&elsewhere, Invalid(m) if m.contains("not on the node's agent host")));
    let algo = refused(
        call.start_write(
            "http://images/i.raw".into(),
            "crc7".into(),
            bad,
            target.into(),
        )
        .await,
    );
    assert!(matches!(algo, Invalid(_)), "{algo:?}");
    assert!(matches!(
        call.progress().await.unwrap(),
        WriteProgress::None
    ));
}

#[tokio::test]
async fn long_log_messages_are_cut_on_a_character_boundary() {
    let w = world();
    let mut call = w.call(w.node(json!({})).await, "fake");
    call.log(Level::Info, "é".repeat(5000)).await.unwrap();
}

/// A 0.1 driver gets the same capabilities with 0.1's shapes: errors as their text, a
/// failure of the host as a trap, a heartbeat without status or progress.
#[tokio::test]
async fn the_0_1_line_sees_text_errors_and_its_own_heartbeat_record() {
    use super::bindings::v0_1::deployd::driver as old;
    let w = world();
    let enrolled = w.node(json!({})).await;
    let mut call = w.call(enrolled, "fake");
    let touch = old::provision::Host::touch(&mut call).await.unwrap();
    assert!(touch.unwrap_err().contains("\"enroll\""));
    let key = old::node::Host::set_scratch(&mut call, String::new(), None)
        .await
        .unwrap();
    assert!(key.unwrap_err().contains("1 to 128 bytes"));
    let power = old::bmc::Host::get_power(&mut w.call(enrolled, "redfish"))
        .await
        .unwrap();
    assert!(power.unwrap_err().contains("redfish_address is required"));
    old::bmc::Host::set_power(&mut call, old::bmc::PowerState::On)
        .await
        .unwrap()
        .unwrap();
    let on = old::bmc::Host::get_power(&mut call).await.unwrap().unwrap();
    assert!(matches!(on, old::bmc::PowerState::On));

    let node = w.waiting().await;
    let url = CallbackUrl::parse("http://10.0.0.5:9999").unwrap();
    let ready = crate::agent_sessions::AgentReport {
        status: None,
        message: Some("ready".into()),
    };
    w.services
        .agents
        .heartbeat(node, "tok", &url, "13.0.0", None, ready, T0);
    let mut call = w.call(node, "fake");
    let heartbeat = old::provision::Host::last_heartbeat(&mut call)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (
            heartbeat.agent_url.as_str(),
            heartbeat.agent_version.as_str()
        ),
        ("http://10.0.0.5:9999", "13.0.0")
    );
    // A read of a node that is gone traps, as in 0.2.
    w.services.store.delete_node(enrolled).await.unwrap();
    assert!(
        old::node::Host::get(&mut w.call(enrolled, "fake"))
            .await
            .is_err()
    );
}
