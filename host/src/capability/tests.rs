//! Each capability's `Host` methods called directly, as Spin tests its factors: a real
//! store on sled in a temporary directory, the engine's services, no wasm. What a driver
//! sees is exactly what these return: `Ok(Err(text))` for a refusal it can act on, a trap
//! for a failure of the host.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use uuid::Uuid;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::WasiCtx;

use super::*;
use crate::agents::CallbackUrl;
use crate::bindings::deployd::driver::agent::Host as _;
use crate::bindings::deployd::driver::bmc::{BootDevice, Host as _, PowerState};
use crate::bindings::deployd::driver::image::{Host as _, WriteProgress};
use crate::bindings::deployd::driver::log::{Host as _, Level};
use crate::bindings::deployd::driver::node::Host as _;
use crate::bindings::deployd::driver::provision::Host as _;
use crate::clock::{Clock, Timestamp};
use crate::node::NewNode;
use crate::state_machine::{ENROLL_TO_WAIT_CALL_BACK, Timeouts};
use crate::store::StoreConfig;

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
    let services = Services::new(Arc::new(store), Arc::new(Agents::default()), 4);
    World {
        _dir: dir,
        services,
        clock,
    }
}

impl World {
    fn node(&self, driver_info: Value) -> Uuid {
        let new = NewNode {
            driver: "fake".into(),
            driver_info: serde_json::from_value(driver_info).unwrap(),
            ..Default::default()
        };
        self.services.store.create_node(new).unwrap().uuid()
    }

    fn waiting(&self) -> Uuid {
        let node = self.node(json!({}));
        for event in ENROLL_TO_WAIT_CALL_BACK {
            self.services.store.apply_event(node, event, None).unwrap();
        }
        node
    }

    /// The state of one driver call about `node` through the `power` backend.
    fn call(&self, node: Uuid, power: &str) -> HostState {
        HostState {
            node,
            snapshot: None,
            driver: "under_test".into(),
            power: power.into(),
            services: self.services.clone(),
            wasi: WasiCtx::builder().build(),
            table: ResourceTable::new(),
            limits: Default::default(),
        }
    }
}

#[test]
fn refusals_reach_the_driver_and_host_failures_trap() {
    let refused: Result<(), _> = Err(CapabilityError::Refused("no".into()));
    assert_eq!(outcome(refused).unwrap(), Err("no".to_owned()));
    let failed: Result<(), _> = Err(CapabilityError::Host("disk gone".into()));
    let trap = outcome(failed).unwrap_err();
    assert_eq!(trap.downcast_ref::<HostFailure>().unwrap().0, "disk gone");
    // The store's answers about a node are the driver's; its own failures are the host's.
    let node = Uuid::nil();
    let not_found = CapabilityError::from(StoreError::NodeNotFound(node.to_string()));
    assert!(matches!(not_found, CapabilityError::Refused(_)));
    let corrupt = CapabilityError::from(StoreError::Corrupt("bad record".into()));
    assert_eq!(
        corrupt,
        CapabilityError::Host("stored data is corrupt: bad record".into())
    );
    // Where the WIT has no error case, a refusal traps too.
    assert!(infallible::<(), _>(Err("gone")).is_err());
}

#[tokio::test]
async fn node_shows_its_fields_and_keeps_scratch_within_limits() {
    let w = world();
    let node = w.node(json!({"redfish_address": "http://bmc"}));
    let mut call = w.call(node, "fake");
    let view: Value = serde_json::from_str(&call.get().await.unwrap()).unwrap();
    assert_eq!(view["uuid"], node.to_string());
    assert_eq!(view["provision_state"], "enroll");
    assert_eq!(view["driver_info"]["redfish_address"], "http://bmc");

    assert_eq!(
        call.set_scratch("step".into(), Some("3".into()))
            .await
            .unwrap(),
        Ok(())
    );
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
    assert_eq!(next.set_scratch("step".into(), None).await.unwrap(), Ok(()));
    assert_eq!(next.get_scratch("step".into()).await.unwrap(), None);

    // Just inside each limit, and just past it.
    let key = "k".repeat(128);
    assert_eq!(
        next.set_scratch(key.clone(), Some("1".into()))
            .await
            .unwrap(),
        Ok(())
    );
    let long_key = next.set_scratch(key + "k", Some("1".into())).await.unwrap();
    assert!(long_key.unwrap_err().contains("1 to 128 bytes"));
    let value = format!("\"{}\"", "v".repeat((64 << 10) - 2));
    assert_eq!(
        next.set_scratch("big".into(), Some(value.clone()))
            .await
            .unwrap(),
        Ok(())
    );
    let too_big = next
        .set_scratch("big".into(), Some(value + " "))
        .await
        .unwrap();
    assert!(too_big.unwrap_err().contains("at most"));
    let not_json = next
        .set_scratch("x".into(), Some("{".into()))
        .await
        .unwrap();
    assert!(not_json.unwrap_err().contains("not JSON"));
    assert!(
        next.set_scratch(String::new(), None)
            .await
            .unwrap()
            .is_err()
    );

    // A node deleted under the call: a write is refused, a read traps.
    w.services.store.delete_node(node).unwrap();
    let mut late = w.call(node, "fake");
    assert!(
        late.set_scratch("a".into(), Some("1".into()))
            .await
            .unwrap()
            .is_err()
    );
    assert!(late.get().await.is_err());
}

#[tokio::test]
async fn touch_moves_the_clock_of_a_waiting_node_only() {
    let w = world();
    let enrolled = w.node(json!({}));
    let refused = w.call(enrolled, "fake").touch().await.unwrap().unwrap_err();
    assert!(refused.contains("\"enroll\""), "{refused}");

    let node = w.waiting();
    let before = w.services.store.node(node).unwrap().provision;
    w.clock.advance(Duration::from_secs(30));
    assert_eq!(w.call(node, "fake").touch().await.unwrap(), Ok(()));
    let after = w.services.store.node(node).unwrap().provision;
    assert_eq!(
        after.updated_at,
        before.updated_at.plus(Duration::from_secs(30))
    );
    assert!(after.deadline > before.deadline);
}

#[tokio::test]
async fn last_heartbeat_is_the_agents_own() {
    let w = world();
    let node = w.waiting();
    assert!(
        w.call(node, "fake")
            .last_heartbeat()
            .await
            .unwrap()
            .is_none()
    );
    let url = CallbackUrl::parse("http://10.0.0.5:9999").unwrap();
    w.services
        .agents
        .heartbeat(node, "tok", &url, "13.0.0", None, T0);
    let heartbeat = w
        .call(node, "fake")
        .last_heartbeat()
        .await
        .unwrap()
        .unwrap();
    assert_eq!(heartbeat.agent_url, "http://10.0.0.5:9999");
    assert_eq!(heartbeat.agent_version, "13.0.0");
    assert_eq!(heartbeat.at, T0.to_string());
    // Another node's driver sees nothing of it.
    let other = w.waiting();
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
    let node = w.node(json!({}));
    let mut call = w.call(node, "fake");
    assert_eq!(call.set_power(PowerState::On).await.unwrap(), Ok(()));
    assert_eq!(call.get_power().await.unwrap(), Ok(PowerState::On));
    let record = w.services.store.node(node).unwrap();
    assert_eq!(record.body.power_state.as_deref(), Some("power on"));
    assert_eq!(call.set_power(PowerState::Off).await.unwrap(), Ok(()));
    assert_eq!(call.get_power().await.unwrap(), Ok(PowerState::Off));
    assert_eq!(call.reboot().await.unwrap(), Ok(()));
    assert_eq!(call.get_power().await.unwrap(), Ok(PowerState::On));
    let boot = call.set_boot_device(BootDevice::Pxe, false).await.unwrap();
    assert_eq!(boot, Ok(()));

    let missing = w
        .call(node, "redfish")
        .set_power(PowerState::On)
        .await
        .unwrap();
    assert!(
        missing
            .unwrap_err()
            .contains("driver_info.redfish_address is required")
    );
    let missing = w.call(node, "ipmitool").get_power().await.unwrap();
    assert!(
        missing
            .unwrap_err()
            .contains("driver_info.ipmi_address is required")
    );
    let unknown = w.call(node, "snmp").reboot().await.unwrap();
    assert!(unknown.unwrap_err().contains("unknown power backend"));
    // The operator's path through the same service.
    assert_eq!(
        bmc::check(&w.services, node, "redfish").map_err(|e| e.contains("redfish_address")),
        Err(true)
    );
    bmc::act(&w.services, node, "fake", bmc::PowerAction::Off)
        .await
        .unwrap();
    let record = w.services.store.node(node).unwrap();
    assert_eq!(record.body.power_state.as_deref(), Some("power off"));
}

/// A loopback agent command API that accepts one token.
async fn agent_api() -> CallbackUrl {
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
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    CallbackUrl::parse(&format!("http://{addr}")).unwrap()
}

#[tokio::test]
async fn agent_commands_go_to_the_nodes_own_agent_with_its_token() {
    let w = world();
    let node = w.waiting();
    let early = w
        .call(node, "fake")
        .run("sync".into(), "{}".into(), true)
        .await
        .unwrap();
    assert!(early.unwrap_err().contains("has not called back yet"));

    let url = agent_api().await;
    w.services
        .agents
        .heartbeat(node, "tok", &url, "1", None, T0);
    let mut call = w.call(node, "fake");
    let done = call
        .run("standby.sync".into(), "{}".into(), true)
        .await
        .unwrap();
    let done: Value = serde_json::from_str(&done.unwrap()).unwrap();
    assert_eq!(done["command_status"], "SUCCEEDED");
    assert_eq!(done["command_name"], "standby.sync");
    let list: Value = serde_json::from_str(&call.commands().await.unwrap().unwrap()).unwrap();
    assert_eq!(list[0]["command_name"], "get_clean_steps");
    // The command list is the real IPA's progress: reading it records a fingerprint, and
    // restarts the stall timeout from now.
    let p = w.services.store.node(node).unwrap().provision;
    assert_ne!(p.progress, 0);
    w.clock.advance(Duration::from_secs(5));
    assert!(
        w.services
            .store
            .report_progress(node, p.progress ^ 1)
            .unwrap()
    );
    let moved = w.services.store.node(node).unwrap().provision;
    assert_eq!(
        moved.progress_at,
        p.progress_at.plus(Duration::from_secs(5))
    );
    assert_eq!(moved.updated_at, p.updated_at, "not a touch");
    let bad = call.run("x".into(), "not json".into(), true).await.unwrap();
    assert!(bad.unwrap_err().contains("not JSON"));

    // A token the agent does not know: its own words come back to the driver.
    w.services
        .agents
        .heartbeat(node, "stale", &url, "1", None, T0);
    let refused = w
        .call(node, "fake")
        .run("x".into(), "{}".into(), true)
        .await
        .unwrap();
    assert!(
        refused
            .unwrap_err()
            .contains("401 Unauthorized: Unauthorized: invalid token")
    );
}

#[tokio::test]
async fn image_writes_go_only_to_the_nodes_agent_host() {
    let w = world();
    let node = w.waiting();
    let mut call = w.call(node, "fake");
    let bad = "0".repeat(64);
    let target = "http://10.0.0.5:9999/v1/disk";
    let early = call
        .start_write(
            "http://images/i.raw".into(),
            "sha256".into(),
            bad.clone(),
            target.into(),
        )
        .await
        .unwrap();
    assert!(early.unwrap_err().contains("has not called back"));
    let url = CallbackUrl::parse("http://10.0.0.5:9999").unwrap();
    w.services
        .agents
        .heartbeat(node, "tok", &url, "1", None, T0);
    let elsewhere = "http://10.9.9.9:9999/v1/disk".to_owned();
    let elsewhere = call
        .start_write(
            "http://images/i.raw".into(),
            "sha256".into(),
            bad.clone(),
            elsewhere,
        )
        .await
        .unwrap();
    assert!(
        elsewhere
            .unwrap_err()
            .contains("not on the node's agent host")
    );
    let algo = call
        .start_write(
            "http://images/i.raw".into(),
            "crc7".into(),
            bad,
            target.into(),
        )
        .await
        .unwrap();
    assert!(algo.is_err());
    assert!(matches!(
        call.progress().await.unwrap(),
        WriteProgress::None
    ));
}

#[tokio::test]
async fn long_log_messages_are_cut_on_a_character_boundary() {
    let w = world();
    let mut call = w.call(w.node(json!({})), "fake");
    call.log(Level::Info, "é".repeat(5000)).await.unwrap();
}
