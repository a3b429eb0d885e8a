//! The sled store's behaviour, through the handle, on a real sled database in a temporary directory.

use std::time::Duration;

use super::*;
use crate::clock::Timestamp;
use crate::node::Port;
use crate::state_machine::{Event, ProvisionState};
use crate::store::Store;

const T0: Timestamp = Timestamp::from_micros(1_800_000_000_000_000);

pub(super) fn open(dir: &tempfile::TempDir, timeout_s: u64) -> (Store, Clock) {
    let (store, _, clock) = open_recovered(dir, timeout_s);
    (store, clock)
}

fn open_recovered(dir: &tempfile::TempDir, timeout_s: u64) -> (Store, Recovery, Clock) {
    let clock = Clock::manual(T0);
    let timeouts = Timeouts::uniform(Duration::from_secs(timeout_s));
    let (store, recovery) = Store::open(
        &dir.path().join("store"),
        &StoreConfig::default(),
        timeouts,
        clock.clone(),
    )
    .unwrap();
    (store, recovery, clock)
}

#[test]
fn a_second_open_of_a_store_in_use_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let (_store, _) = open(&dir, 60);
    let clock = Clock::manual(T0);
    let second = Store::open(
        &dir.path().join("store"),
        &StoreConfig::default(),
        Timeouts::uniform(Duration::from_secs(60)),
        clock,
    );
    let err = second.err().expect("the lock is held");
    assert!(matches!(err, StoreError::Locked(_)), "{err}");
    assert!(
        err.to_string().contains("in use by another process"),
        "{err}"
    );
}

#[tokio::test]
async fn a_store_of_another_format_is_refused_and_left_as_it_is() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store");
    {
        let (store, _) = open(&dir, 60);
        store.create_node(new_node(Some("kept"))).await.unwrap();
        store.flush().unwrap();
    }
    {
        let db = super::open_db(&path, &StoreConfig::default()).unwrap();
        assert_eq!(
            db.get(FORMAT_KEY).unwrap().unwrap().as_ref(),
            FORMAT.to_be_bytes()
        );
        db.insert(FORMAT_KEY, &(FORMAT + 1).to_be_bytes()).unwrap();
        db.flush().unwrap();
    }
    let refused = Store::open(
        &path,
        &StoreConfig::default(),
        Timeouts::uniform(Duration::from_secs(60)),
        Clock::manual(T0),
    )
    .err()
    .expect("a future format is refused");
    assert!(matches!(refused, StoreError::Format { found, .. } if found == FORMAT + 1));
    assert!(
        refused.to_string().contains("reads formats 2 to 4 only"),
        "{refused}"
    );
    let db = super::open_db(&path, &StoreConfig::default()).unwrap();
    assert_eq!(
        db.open_tree("nodes").unwrap().len(),
        1,
        "nothing was touched"
    );
}

pub(super) fn new_node(name: Option<&str>) -> NewNode {
    NewNode {
        name: name.map(str::to_owned),
        driver: "fake".into(),
        ..Default::default()
    }
}

async fn to_wait_call_back(store: &Store, uuid: Uuid) {
    for e in crate::state_machine::ENROLL_TO_WAIT_CALL_BACK {
        store.apply_event(uuid, e, None).await.unwrap();
    }
}

#[tokio::test]
async fn nodes_are_found_by_uuid_and_name_and_names_are_unique() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = open(&dir, 60);
    let a = store.create_node(new_node(Some("rack1-u1"))).await.unwrap();
    assert_eq!(a.state(), ProvisionState::Enroll);
    assert_eq!(a.provision.updated_at, T0);
    assert_eq!(store.find_node("rack1-u1").await.unwrap(), a);
    assert_eq!(store.find_node(&a.uuid().to_string()).await.unwrap(), a);
    assert!(
        matches!(store.create_node(new_node(Some("rack1-u1"))).await, Err(StoreError::NameTaken(n)) if n == "rack1-u1")
    );
    assert!(matches!(
        store.create_node(new_node(Some("bad name"))).await,
        Err(StoreError::Invalid(_))
    ));
    let same_uuid = NewNode {
        uuid: Some(a.uuid()),
        ..new_node(None)
    };
    assert!(matches!(
        store.create_node(same_uuid).await,
        Err(StoreError::UuidTaken(_))
    ));
    assert!(
        matches!(store.find_node("nope").await, Err(StoreError::NodeNotFound(n)) if n == "nope")
    );
    assert_eq!(store.node_count().await.unwrap(), 1);
}

#[tokio::test]
async fn renaming_moves_the_name_index_and_refuses_taken_names() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = open(&dir, 60);
    let a = store.create_node(new_node(Some("a"))).await.unwrap();
    store.create_node(new_node(Some("b"))).await.unwrap();
    let err = store.update_node(a.uuid(), |b| {
        b.name = Some("b".into());
        Ok(())
    });
    assert!(matches!(err.await, Err(StoreError::NameTaken(_))));
    assert_eq!(
        store.find_node("a").await.unwrap().uuid(),
        a.uuid(),
        "a refused rename changes nothing"
    );
    store
        .update_node(a.uuid(), |b| {
            b.name = Some("c".into());
            b.driver_info
                .insert("ipmi_address".into(), "127.0.0.1".into());
            Ok(())
        })
        .await
        .unwrap();
    assert!(store.find_node("a").await.is_err());
    let c = store.find_node("c").await.unwrap();
    assert_eq!(c.body.driver_info["ipmi_address"], "127.0.0.1");
    assert!(c.body.updated_at.is_some());
}

#[tokio::test]
async fn listing_pages_by_marker_in_uuid_order() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = open(&dir, 60);
    let mut uuids: Vec<Uuid> = Vec::new();
    for _ in 0..5 {
        uuids.push(store.create_node(new_node(None)).await.unwrap().uuid());
    }
    uuids.sort();
    let page1 = store.list_nodes(None, 2).await.unwrap();
    let page2 = store.list_nodes(Some(page1[1].uuid()), 2).await.unwrap();
    let page3 = store.list_nodes(Some(page2[1].uuid()), 2).await.unwrap();
    let listed: Vec<Uuid> = page1
        .iter()
        .chain(&page2)
        .chain(&page3)
        .map(Node::uuid)
        .collect();
    assert_eq!(listed, uuids);
}

#[tokio::test]
async fn an_illegal_event_is_refused_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (store, clock) = open(&dir, 60);
    let node = store.create_node(new_node(None)).await.unwrap();
    clock.advance(Duration::from_secs(5));
    let err = store
        .apply_event(node.uuid(), Event::Deploy, None)
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "node {}: event \"deploy\" is not allowed in provision state \"enroll\"",
            node.uuid()
        )
    );
    assert_eq!(store.node(node.uuid()).await.unwrap(), node);
}

#[tokio::test]
async fn a_transition_stamps_the_clock_sets_the_target_and_schedules_the_deadline() {
    let dir = tempfile::tempdir().unwrap();
    let (store, clock) = open(&dir, 60);
    let uuid = store.create_node(new_node(None)).await.unwrap().uuid();
    clock.advance(Duration::from_secs(1));
    to_wait_call_back(&store, uuid).await;
    let node = store.node(uuid).await.unwrap();
    let now = T0.plus(Duration::from_secs(1));
    assert_eq!(node.provision.state, ProvisionState::WaitCallBack);
    assert_eq!(node.provision.target, Some(ProvisionState::Active));
    assert_eq!(node.provision.updated_at, now);
    assert_eq!(
        node.provision.deadline,
        Some(now.plus(Duration::from_secs(60)))
    );
    assert_eq!(node.provision.indexed, node.provision.deadline);
    assert_eq!(
        store.next_deadline().await.unwrap(),
        node.provision.deadline
    );
    let active = store.apply_event(uuid, Event::Resume, None).await.unwrap();
    assert_eq!(active.provision.deadline, None);
    assert_eq!(
        store.next_deadline().await.unwrap(),
        None,
        "leaving the wait state removes the entry"
    );
}

#[tokio::test]
async fn apply_event_from_refuses_a_node_that_moved_on() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = open(&dir, 60);
    let uuid = store.create_node(new_node(None)).await.unwrap().uuid();
    let err = store
        .apply_event_from(uuid, ProvisionState::Available, Event::Deploy, None)
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::StateChanged {
                actual: ProvisionState::Enroll,
                ..
            }
        ),
        "{err}"
    );
}

#[tokio::test]
async fn touch_moves_the_clock_and_deadline_but_never_the_state() {
    let dir = tempfile::tempdir().unwrap();
    let (store, clock) = open(&dir, 60);
    let uuid = store.create_node(new_node(None)).await.unwrap().uuid();
    to_wait_call_back(&store, uuid).await;
    let entered = store.node(uuid).await.unwrap().provision;
    clock.advance(Duration::from_secs(30));
    let touched = store.touch_provisioning(uuid).await.unwrap();
    let now = T0.plus(Duration::from_secs(30));
    assert_eq!(touched.state, ProvisionState::WaitCallBack);
    assert_eq!(touched.updated_at, now);
    assert_eq!(touched.deadline, Some(now.plus(Duration::from_secs(60))));
    assert_eq!(store.node(uuid).await.unwrap().provision, *touched);
    // The index entry stays where it was, at or before the deadline...
    assert_eq!(touched.indexed, entered.deadline);
    assert_eq!(
        store.deadline_index().await.unwrap(),
        vec![(entered.deadline.unwrap(), uuid)]
    );
    // ...and when it comes due, the sweep re-files it at the real deadline.
    clock.advance(Duration::from_secs(30));
    assert!(
        store
            .fail_expired(clock.now(), 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        store.deadline_index().await.unwrap(),
        vec![(touched.deadline.unwrap(), uuid)]
    );
    assert_eq!(
        store.node(uuid).await.unwrap().provision.indexed,
        touched.deadline
    );
    assert_eq!(
        store.node(uuid).await.unwrap().state(),
        ProvisionState::WaitCallBack
    );
}

#[tokio::test]
async fn touch_outside_a_wait_state_is_refused_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (store, clock) = open(&dir, 60);
    let node = store.create_node(new_node(None)).await.unwrap();
    clock.advance(Duration::from_secs(3));
    let err = store.touch_provisioning(node.uuid()).await.unwrap_err();
    assert!(
        err.to_string().contains("is in provision state \"enroll\""),
        "{err}"
    );
    assert_eq!(store.node(node.uuid()).await.unwrap(), node);
    assert!(matches!(
        store.touch_provisioning(Uuid::new_v4()).await,
        Err(StoreError::NodeNotFound(_))
    ));
}

#[tokio::test]
async fn expiry_fails_only_nodes_past_their_deadline_with_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let (store, clock) = open(&dir, 60);
    let late = store.create_node(new_node(None)).await.unwrap().uuid();
    let alive = store.create_node(new_node(None)).await.unwrap().uuid();
    to_wait_call_back(&store, late).await;
    to_wait_call_back(&store, alive).await;
    clock.advance(Duration::from_secs(45));
    store.touch_provisioning(alive).await.unwrap();
    clock.advance(Duration::from_secs(15));
    let failed = store.fail_expired(clock.now(), 100).await.unwrap();
    assert_eq!(failed.len(), 1);
    let t = &failed[0];
    assert_eq!(
        (t.node, t.waited_in, t.failed_to),
        (
            late,
            ProvisionState::WaitCallBack,
            ProvisionState::DeployFailed
        )
    );
    assert_eq!(
        (t.timeout, t.silent_for),
        (Duration::from_secs(60), Duration::from_secs(60))
    );
    let node = store.node(late).await.unwrap();
    assert_eq!(node.state(), ProvisionState::DeployFailed);
    assert_eq!(node.provision.target, Some(ProvisionState::Active));
    let err = node.body.last_error.unwrap();
    assert!(
        err.contains(&late.to_string())
            && err.contains("deploy_callback_timeout is 60 s")
            && err.contains("60.0 s"),
        "{err}"
    );
    assert_eq!(
        store.node(alive).await.unwrap().state(),
        ProvisionState::WaitCallBack
    );
    assert!(
        store
            .fail_expired(clock.now(), 100)
            .await
            .unwrap()
            .is_empty(),
        "never failed twice"
    );
}

#[tokio::test]
async fn clean_wait_times_out_to_clean_failed() {
    let dir = tempfile::tempdir().unwrap();
    let (store, clock) = open(&dir, 10);
    let uuid = store.create_node(new_node(None)).await.unwrap().uuid();
    for e in [Event::Manage, Event::Done, Event::Provide, Event::Wait] {
        store.apply_event(uuid, e, None).await.unwrap();
    }
    clock.advance(Duration::from_secs(10));
    let failed = store.fail_expired(clock.now(), 100).await.unwrap();
    assert_eq!(failed[0].failed_to, ProvisionState::CleanFailed);
    assert!(failed[0].last_error.contains("clean_callback_timeout"));
}

#[tokio::test]
async fn deleting_follows_ironic_state_rules_and_frees_name_and_macs() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = open(&dir, 60);
    let uuid = store
        .create_node(new_node(Some("gone")))
        .await
        .unwrap()
        .uuid();
    store
        .create_port(uuid, "52:54:00:00:00:01", Default::default())
        .await
        .unwrap();
    to_wait_call_back(&store, uuid).await;
    let err = store.delete_node(uuid).await.unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::DeleteRefused {
                state: ProvisionState::WaitCallBack,
                ..
            }
        ),
        "{err}"
    );
    store
        .update_node(uuid, |b| {
            b.maintenance = true;
            Ok(())
        })
        .await
        .unwrap();
    store.delete_node(uuid).await.unwrap();
    assert!(matches!(
        store.node(uuid).await,
        Err(StoreError::NodeNotFound(_))
    ));
    assert_eq!(store.next_deadline().await.unwrap(), None);
    let again = store
        .create_node(new_node(Some("gone")))
        .await
        .unwrap()
        .uuid();
    store
        .create_port(again, "52:54:00:00:00:01", Default::default())
        .await
        .unwrap();
}

#[tokio::test]
async fn ports_are_unique_by_mac_and_find_their_node() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = open(&dir, 60);
    let a = store.create_node(new_node(None)).await.unwrap().uuid();
    let b = store.create_node(new_node(None)).await.unwrap().uuid();
    let port = store
        .create_port(a, "52-54-00-AA-BB-CC", Default::default())
        .await
        .unwrap();
    assert_eq!(port.address, "52:54:00:aa:bb:cc");
    let err = store
        .create_port(b, "52:54:00:aa:bb:cc", Default::default())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, StoreError::MacTaken { port: p, .. } if *p == port.uuid),
        "{err}"
    );
    assert!(matches!(
        store
            .create_port(Uuid::new_v4(), "52:54:00:aa:bb:cd", Default::default())
            .await,
        Err(StoreError::NodeNotFound(_))
    ));
    assert!(matches!(
        store.create_port(a, "not-a-mac", Default::default()).await,
        Err(StoreError::Invalid(_))
    ));
    assert_eq!(
        store
            .node_by_macs(["junk", "52:54:00:AA:BB:CC"])
            .await
            .unwrap(),
        Some(a)
    );
    assert_eq!(
        store.node_by_macs(["52:54:00:aa:bb:00"]).await.unwrap(),
        None
    );
    assert_eq!(store.ports_of(a).await.unwrap(), vec![port.clone()]);
    store.delete_port(port.uuid).await.unwrap();
    assert_eq!(
        store.node_by_macs(["52:54:00:aa:bb:cc"]).await.unwrap(),
        None
    );
    assert!(store.ports_of(a).await.unwrap().is_empty());
}

async fn named_port(store: &Store, node: Uuid, mac: &str, name: &str) -> Result<Port, StoreError> {
    store
        .insert_port(Port {
            uuid: Uuid::new_v4(),
            address: mac.into(),
            node_uuid: node,
            extra: Default::default(),
            pxe_enabled: true,
            attrs: [("name".to_owned(), serde_json::json!(name))]
                .into_iter()
                .collect(),
            created_at: T0,
            updated_at: None,
        })
        .await
}

#[tokio::test]
async fn port_names_are_unique_follow_renames_and_deletes_and_are_rebuilt_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let (a, first) = {
        let (store, _) = open(&dir, 60);
        let a = store.create_node(new_node(None)).await.unwrap().uuid();
        let b = store.create_node(new_node(None)).await.unwrap().uuid();
        let first = named_port(&store, a, "52:54:00:00:00:01", "eth0")
            .await
            .unwrap();
        assert_eq!(store.port_named("eth0").await.unwrap(), Some(first.uuid));
        let err = named_port(&store, b, "52:54:00:00:00:02", "eth0")
            .await
            .unwrap_err();
        assert!(
            matches!(&err, StoreError::PortNameTaken { port, .. } if *port == first.uuid),
            "{err}"
        );
        assert_eq!(
            store.list_ports().await.unwrap().len(),
            1,
            "the refusal wrote nothing"
        );
        // A rename frees the old name and takes the new one; a taken one is refused.
        let rename = async |uuid, name: &str| {
            store
                .update_port(uuid, |p: &mut Port| {
                    p.attrs.insert("name".into(), serde_json::json!(name));
                    Ok::<_, StoreError>(())
                })
                .await
        };
        rename(first.uuid, "eth1").await.unwrap();
        assert_eq!(store.port_named("eth0").await.unwrap(), None);
        let second = named_port(&store, b, "52:54:00:00:00:02", "eth0")
            .await
            .unwrap();
        assert!(matches!(
            rename(second.uuid, "eth1").await,
            Err(StoreError::PortNameTaken { .. })
        ));
        assert_eq!(store.port(second.uuid).await.unwrap().attrs["name"], "eth0");
        // Deleting a node frees its ports' names.
        store.delete_node(b).await.unwrap();
        assert_eq!(store.port_named("eth0").await.unwrap(), None);
        // An index lost (a store from before it existed) comes back at open.
        store.sled().t().unwrap().port_names.clear().unwrap();
        store
            .sled()
            .t()
            .unwrap()
            .port_names
            .insert("stale", Uuid::new_v4().as_bytes())
            .unwrap();
        (a, first)
    };
    let (store, _) = open(&dir, 60);
    assert_eq!(store.port_named("eth1").await.unwrap(), Some(first.uuid));
    assert_eq!(store.port_named("stale").await.unwrap(), None);
    assert!(
        named_port(&store, a, "52:54:00:00:00:03", "eth1")
            .await
            .is_err()
    );
}

/// Many creates racing for one port name on different nodes: exactly one wins, each time.
#[tokio::test]
async fn racing_creates_of_one_port_name_leave_exactly_one_port() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = open(&dir, 60);
    let mut nodes: Vec<Uuid> = Vec::new();
    for _ in 0..8 {
        nodes.push(store.create_node(new_node(None)).await.unwrap().uuid());
    }
    for round in 0..40u32 {
        let name = format!("race-{round}");
        let won = std::thread::scope(|scope| {
            let tries: Vec<_> = nodes
                .iter()
                .enumerate()
                .map(|(i, &node)| {
                    let (store, name) = (&store, &name);
                    let mac = format!("52:54:{:02x}:{:02x}:00:{i:02x}", round >> 8, round & 0xff);
                    scope.spawn(move || at_once(named_port(store, node, &mac, name)).is_ok())
                })
                .collect();
            tries
                .into_iter()
                .filter_map(|t| t.join().unwrap().then_some(()))
                .count()
        });
        assert_eq!(won, 1, "round {round}");
    }
    assert_eq!(store.list_ports().await.unwrap().len(), 40);
}

#[tokio::test]
async fn recovery_drops_stale_index_entries_and_restores_missing_ones() {
    let dir = tempfile::tempdir().unwrap();
    let uuid = {
        let (store, _) = open(&dir, 60);
        let uuid = store.create_node(new_node(None)).await.unwrap().uuid();
        to_wait_call_back(&store, uuid).await;
        // What a crash between a touch's writes can leave: the old entry, and none for the
        // record's real deadline.
        let real = store.node(uuid).await.unwrap().provision.indexed.unwrap();
        store
            .sled()
            .t()
            .unwrap()
            .deadlines
            .remove(record::deadline_key(real, uuid))
            .unwrap();
        store
            .sled()
            .t()
            .unwrap()
            .deadlines
            .insert(record::deadline_key(T0, uuid), &[])
            .unwrap();
        store
            .sled()
            .t()
            .unwrap()
            .deadlines
            .insert(record::deadline_key(T0, Uuid::new_v4()), &[])
            .unwrap();
        store.flush().unwrap();
        uuid
    };
    let (store, recovery, _) = open_recovered(&dir, 60);
    assert_eq!(recovery.stale_entries, 2);
    let node = store.node(uuid).await.unwrap();
    assert_eq!(
        store.deadline_index().await.unwrap(),
        vec![(node.provision.deadline.unwrap(), uuid)]
    );
}

#[tokio::test]
async fn a_stale_entry_at_the_front_is_dropped_by_the_sweep_without_failing_anyone() {
    let dir = tempfile::tempdir().unwrap();
    let (store, clock) = open(&dir, 60);
    let uuid = store.create_node(new_node(None)).await.unwrap().uuid();
    to_wait_call_back(&store, uuid).await;
    store
        .sled()
        .t()
        .unwrap()
        .deadlines
        .insert(record::deadline_key(T0, uuid), &[])
        .unwrap();
    clock.advance(Duration::from_secs(1));
    assert!(
        store
            .fail_expired(clock.now(), 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(store.deadline_index().await.unwrap().len(), 1);
    assert_eq!(
        store.node(uuid).await.unwrap().state(),
        ProvisionState::WaitCallBack
    );
}

#[tokio::test]
async fn manual_cleaning_heads_for_manageable_through_its_waits_and_undeploy_for_available() {
    use ProvisionState as S;
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = open(&dir, 60);
    let uuid = store.create_node(new_node(None)).await.unwrap().uuid();
    let step = async |e: Event| {
        let p = store.apply_event(uuid, e, None).await.unwrap().provision;
        (p.state, p.target)
    };
    assert_eq!(
        step(Event::Manage).await,
        (S::Verifying, Some(S::Manageable))
    );
    assert_eq!(step(Event::Done).await, (S::Manageable, None));
    assert_eq!(step(Event::Clean).await, (S::Cleaning, Some(S::Manageable)));
    assert_eq!(step(Event::Wait).await, (S::CleanWait, Some(S::Manageable)));
    assert_eq!(
        step(Event::Resume).await,
        (S::Cleaning, Some(S::Manageable))
    );
    assert_eq!(step(Event::Wait).await, (S::CleanWait, Some(S::Manageable)));
    assert_eq!(
        step(Event::Fail).await,
        (S::CleanFailed, Some(S::Manageable))
    );
    assert_eq!(step(Event::Manage).await, (S::Manageable, None));
    // Provide's cleaning and an undeploy's head for available.
    assert_eq!(
        step(Event::Provide).await,
        (S::Cleaning, Some(S::Available))
    );
    assert_eq!(step(Event::Wait).await, (S::CleanWait, Some(S::Available)));
    assert_eq!(step(Event::Resume).await, (S::Cleaning, Some(S::Available)));
    assert_eq!(step(Event::Done).await, (S::Available, None));
    let reopened = store.node(uuid).await.unwrap().provision;
    assert_eq!((reopened.state, reopened.target), (S::Available, None));
}

/// A store with a stall timeout (100 s) shorter than what the callback timeout (600 s)
/// would allow a heartbeating node.
fn open_stalling(dir: &tempfile::TempDir, clock: &Clock) -> Store {
    let timeouts = Timeouts {
        deploy_stall: Duration::from_secs(100),
        ..Timeouts::uniform(Duration::from_secs(600))
    };
    let path = dir.path().join("store");
    Store::open(&path, &StoreConfig::default(), timeouts, clock.clone())
        .unwrap()
        .0
}

#[tokio::test]
async fn progress_survives_a_restart_and_its_stall_deadline_does_not_move() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Clock::manual(T0);
    let uuid = {
        let store = open_stalling(&dir, &clock);
        let uuid = store.create_node(new_node(None)).await.unwrap().uuid();
        to_wait_call_back(&store, uuid).await;
        clock.advance(Duration::from_secs(50));
        store.touch(uuid, Some(7)).await.unwrap();
        clock.advance(Duration::from_secs(30));
        // The same report again: alive, not progress.
        let touched = store.touch(uuid, Some(7)).await.unwrap();
        assert_eq!(touched.progress_at, T0.plus(Duration::from_secs(50)));
        assert_eq!(touched.deadline, Some(T0.plus(Duration::from_secs(150))));
        // Nor is the same report seen in the agent's command list.
        assert!(!store.report_progress(uuid, 7).await.unwrap());
        store.flush().unwrap();
        uuid
    };
    clock.advance(Duration::from_secs(10));
    let store = open_stalling(&dir, &clock);
    let p = store.node(uuid).await.unwrap().provision;
    assert_eq!(p.progress_at, T0.plus(Duration::from_secs(50)));
    assert_eq!(p.deadline, Some(T0.plus(Duration::from_secs(150))));
    clock.advance(Duration::from_secs(59));
    assert!(
        store
            .fail_expired(clock.now(), 10)
            .await
            .unwrap()
            .is_empty()
    );
    clock.advance(Duration::from_secs(1));
    let failed = store
        .sweep(10, &|_| Some("deploy: 3 bytes written".into()))
        .await
        .unwrap();
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0].expiry, crate::state_machine::Expiry::Stall);
    assert!(
        failed[0]
            .last_error
            .ends_with("; last progress: deploy: 3 bytes written"),
        "{}",
        failed[0].last_error
    );
}

#[tokio::test]
async fn a_format_2_store_is_read_as_it_is_and_marked_current() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store");
    let uuid = {
        let (store, _) = open(&dir, 60);
        let uuid = store
            .create_node(new_node(Some("old")))
            .await
            .unwrap()
            .uuid();
        to_wait_call_back(&store, uuid).await;
        store.flush().unwrap();
        uuid
    };
    let written = {
        // Rewrite the node as a format 2 deployd wrote it: a 27-byte version 2 record.
        let db = super::open_db(&path, &StoreConfig::default()).unwrap();
        let nodes = db.open_tree("nodes").unwrap();
        let value = nodes.get(uuid.as_bytes()).unwrap().unwrap();
        let mut old = value[..27].to_vec();
        old[0] = 2;
        old.extend_from_slice(&value[43..]);
        nodes.insert(uuid.as_bytes(), old).unwrap();
        // And a history event as deployd wrote them before format 4: JSON.
        let mut key = uuid.as_bytes().to_vec();
        key.extend_from_slice(&1_700_000_000_000_000u64.to_be_bytes());
        key.extend_from_slice(&7u64.to_be_bytes());
        let json = br#"{"from":"deploying","to":"deploy failed","event":"fail","target":"active","error":"disk gone","seconds":2.5}"#;
        db.open_tree("history")
            .unwrap()
            .insert(key, &json[..])
            .unwrap();
        db.insert(FORMAT_KEY, &2u32.to_be_bytes()).unwrap();
        db.flush().unwrap();
        value
    };
    let (store, _) = open(&dir, 60);
    let node = store.node(uuid).await.unwrap();
    assert_eq!(node.body.name.as_deref(), Some("old"));
    assert_eq!(node.state(), ProvisionState::WaitCallBack);
    assert_eq!(node.provision.progress_at, node.provision.updated_at);
    let events = store.history_of(uuid).await.unwrap();
    let old = &events[0];
    assert_eq!(
        (old.event.as_str(), old.severity, old.state.as_str()),
        ("disk gone", "ERROR", "deploy failed")
    );
    assert_eq!(old.target_provision_state.as_deref(), Some("active"));
    assert_eq!(old.duration_seconds, 2.5);
    assert_eq!(
        events.last().unwrap().state,
        "wait call-back",
        "the new events read too"
    );
    // A touch writes it back in the current layout.
    store.touch_provisioning(uuid).await.unwrap();
    let now = store
        .sled()
        .t()
        .unwrap()
        .nodes
        .get(uuid.as_bytes())
        .unwrap()
        .unwrap();
    assert_eq!((now[0], now.len()), (3, written.len()));
    drop(store);
    let db = super::open_db(&path, &StoreConfig::default()).unwrap();
    assert_eq!(
        db.get(FORMAT_KEY).unwrap().unwrap().as_ref(),
        FORMAT.to_be_bytes()
    );
}

/// Copies the store's files (sled's directory), as a backup taken at this point would.
fn copy_store(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap().flatten() {
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_store(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

#[tokio::test]
async fn a_store_that_lost_writes_or_its_files_is_refused_naming_what_its_manifest_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store");
    let early = dir.path().join("early");
    {
        let (store, _) = open(&dir, 60);
        for i in 0..3 {
            store
                .create_node(new_node(Some(&format!("n{i}"))))
                .await
                .unwrap();
        }
        store.checkpoint().unwrap();
        drop(store);
    }
    // The files as they were with 3 nodes; then 5 more and a checkpoint.
    copy_store(&path, &early);
    {
        let (store, _) = open(&dir, 60);
        for i in 3..8 {
            store
                .create_node(new_node(Some(&format!("n{i}"))))
                .await
                .unwrap();
        }
        store.checkpoint().unwrap();
    }
    // Deleting nodes is no loss: a store may hold fewer nodes than its manifest says.
    {
        let (store, _) = open(&dir, 60);
        let first = store.find_node("n0").await.unwrap().uuid();
        store.delete_node(first).await.unwrap();
        store.checkpoint().unwrap();
    }
    let (store, _) = open(&dir, 60);
    assert_eq!(store.node_count().await.unwrap(), 7);
    drop(store);

    // The older files back in place: sled opens them, the manifest does not.
    std::fs::remove_dir_all(&path).unwrap();
    copy_store(&early, &path);
    let refused = |what: &str| {
        let error = Store::open(
            &path,
            &StoreConfig::default(),
            Timeouts::uniform(Duration::from_secs(60)),
            Clock::manual(T0),
        )
        .err()
        .unwrap_or_else(|| panic!("{what}: the store opened"))
        .to_string();
        assert!(
            error.contains("has lost data")
                && error.contains("with 7 nodes")
                && error.contains("store.manifest"),
            "{what}: {error}"
        );
        error
    };
    let error = refused("older files");
    assert!(error.contains("and 3 nodes"), "{error}");
    // An emptied or a missing store: sled would start a new one.
    std::fs::remove_dir_all(&path).unwrap();
    refused("a missing store");
    std::fs::remove_dir_all(&path).unwrap();
    std::fs::create_dir_all(&path).unwrap();
    refused("an empty directory");
    // Without the manifest, the operator chose to go on with what is left.
    std::fs::remove_file(manifest::path_of(&path)).unwrap();
    let (store, _) = open(&dir, 60);
    assert_eq!(store.node_count().await.unwrap(), 0);
}

/// A degraded store refuses every write before sled sees it, serves reads from the
/// database opened again on its reserve, remembers the heartbeats it refused, and writes
/// them once it has room for its reserve again.
#[tokio::test]
async fn a_degraded_store_reopens_for_reads_refuses_writes_and_heals_with_its_reserve() {
    let dir = tempfile::tempdir().unwrap();
    let (store, clock) = open(&dir, 60);
    let reserve = reserve::path(&dir.path().join("store"));
    assert_eq!(std::fs::metadata(&reserve).unwrap().len(), reserve::RESERVE);
    let waiting = store
        .create_node(new_node(Some("waiting")))
        .await
        .unwrap()
        .uuid();
    to_wait_call_back(&store, waiting).await;
    let idle = store.create_node(new_node(None)).await.unwrap().uuid();
    assert_eq!(store.leave_fault().unwrap(), FaultStep::Writable);

    store.health().failed("disk full", clock.now());
    let refused = |r: Result<(), StoreError>| match r {
        Err(StoreError::Unavailable(cause)) => assert_eq!(cause, "disk full"),
        other => panic!("a write while degraded: {other:?}"),
    };
    let writes = async |store: &Store| {
        refused(store.create_node(new_node(Some("new"))).await.map(drop));
        refused(
            store
                .edit_node(waiting, |_, b| {
                    b.attrs.insert("description".into(), "x".into());
                    Ok::<(), StoreError>(())
                })
                .await
                .map(drop),
        );
        refused(
            store
                .insert_document("Chassis", uuid::Uuid::new_v4(), &Default::default(), &[])
                .await,
        );
        refused(store.milestone(waiting, "m".into()).await);
    };
    writes(&store).await;
    clock.advance(Duration::from_secs(30));
    let heartbeat = clock.now();
    // A waiting node's heartbeat is acknowledged from memory, not written; a node that
    // does not wait gets the refusal.
    let remembered = store.touch(waiting, Some(9)).await.unwrap();
    assert!(!remembered.recorded);
    assert_eq!(remembered.provision.updated_at, heartbeat);
    assert_eq!(store.node(waiting).await.unwrap().provision.updated_at, T0);
    assert!(matches!(
        store.touch(idle, None).await,
        Err(StoreError::NotWaiting { .. })
    ));
    assert!(matches!(
        store.touch(Uuid::new_v4(), None).await,
        Err(StoreError::NodeNotFound(_))
    ));
    assert_eq!(store.metrics().touches_remembered.get(), 1);

    assert_eq!(store.leave_fault().unwrap(), FaultStep::Reopened);
    assert!(!reserve.exists(), "the reserve made room for the reopen");
    assert!(store.health().degraded().unwrap().reopened);
    // Reads are served by the database opened again; writes are still refused.
    assert_eq!(store.find_node("waiting").await.unwrap().uuid(), waiting);
    assert_eq!(store.node_count().await.unwrap(), 2);
    writes(&store).await;
    assert_eq!(store.node(waiting).await.unwrap().provision.updated_at, T0);

    assert_eq!(store.leave_fault().unwrap(), FaultStep::Healed(1));
    assert!(store.health().degraded().is_none());
    assert_eq!(std::fs::metadata(&reserve).unwrap().len(), reserve::RESERVE);
    let node = store.node(waiting).await.unwrap();
    assert_eq!(
        node.provision.updated_at, heartbeat,
        "the refused heartbeat"
    );
    assert_eq!(node.provision.progress, 9);
    store.create_node(new_node(Some("new"))).await.unwrap();
    assert_eq!(store.node_count().await.unwrap(), 3);
}

/// A write that reached the database before a fault, and whose flush comes after the
/// fault's reopen, is refused, not acknowledged: the reopen dropped that database
/// unflushed, and a flush of the one opened since would not hold the write.
#[tokio::test]
async fn a_write_from_before_a_fault_is_not_acknowledged_by_a_flush_after_the_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let (store, clock) = open(&dir, 60);
    let sled = store.sled();
    let node = sled.insert_node(new_node(Some("in-flight"))).unwrap();
    store.health().failed("disk full", clock.now());
    assert_eq!(store.leave_fault().unwrap(), FaultStep::Reopened);
    match sled.flush() {
        Err(StoreError::Unavailable(cause)) => assert_eq!(cause, "disk full"),
        other => panic!("the flush after the reopen: {other:?}"),
    }
    // Once the store writes again, a new write is flushed and kept.
    assert_eq!(store.leave_fault().unwrap(), FaultStep::Healed(0));
    let again = store.create_node(new_node(None)).await.unwrap();
    drop(store);
    let (store, _) = open(&dir, 60);
    assert!(store.node(again.uuid()).await.is_ok());
    let _ = node;
}

/// A store call made on a thread of a test's own: sled answers at once, without waiting on
/// a runtime (a call that had to wait would fail the test here).
pub(super) fn at_once<T>(call: impl std::future::Future<Output = T>) -> T {
    futures_util::FutureExt::now_or_never(call).expect("a sled store answers at once")
}
