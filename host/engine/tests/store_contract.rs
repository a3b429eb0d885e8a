//! One suite, both backends: the contract the engine's one handle on its nodes
//! (`store::Store`) keeps, run on the embedded sled store and on the shared store on a real
//! PostgreSQL. Time is
//! the one thing the two move differently: sled's manual clock is advanced, the shared
//! store's rows are aged on the database's clock (an agent silent that long).

use deployd_test_support as common;

use std::sync::Arc;
use std::time::Duration;

use common::postgres::{CLUSTER, database_of};
use common::store::{T0, TO_WAIT_CALL_BACK, fake_node};
use deployd_engine::clock::Clock;
use deployd_engine::config_drive::ConfigDrive;
use deployd_engine::node::NewNode;
use deployd_engine::state_machine::{Event, ProvisionState, Timeouts};
use deployd_engine::store::postgres::SharedStore;
use deployd_engine::store::{FaultStep, Store, StoreError};
use uuid::Uuid;

const CALLBACK: Duration = Duration::from_secs(7200);

/// A backend to run the contract on, and how its nodes are made older.
trait Fixture: Sized {
    async fn open(timeouts: Timeouts) -> Self;
    fn store(&self) -> &Store;
    /// The store, for tasks of its own.
    fn shared(&self) -> Arc<Store>;
    /// Makes `nodes` `by` older: their clocks, deadlines and index entries (on sled, every
    /// node: its clock moves on).
    fn age(&self, nodes: &[Uuid], by: Duration);
    /// Makes `node` due now: its deadline is the store's now (on sled, the clock moves on
    /// to it).
    async fn make_due(&self, node: Uuid);
    /// Makes the store unable to write: a full disk (sled), a database that refuses this
    /// engine's connections and drops the ones it has (PostgreSQL).
    async fn break_writes(&self);
    /// Lets it write again.
    async fn heal(&self);
}

struct Sled {
    store: Arc<Store>,
    clock: Clock,
    _dir: tempfile::TempDir,
}

impl Fixture for Sled {
    async fn open(timeouts: Timeouts) -> Sled {
        let dir = tempfile::tempdir().unwrap();
        let clock = Clock::manual(T0);
        let (store, _) = common::store::open(&dir, timeouts, &clock);
        Sled {
            store: Arc::new(store),
            clock,
            _dir: dir,
        }
    }
    fn store(&self) -> &Store {
        &self.store
    }
    fn shared(&self) -> Arc<Store> {
        self.store.clone()
    }
    fn age(&self, _: &[Uuid], by: Duration) {
        self.clock.advance(by);
    }
    async fn make_due(&self, node: Uuid) {
        let deadline = self.store.node(node).await.unwrap().provision.deadline;
        self.clock
            .advance(deadline.unwrap().since(self.clock.now()));
    }
    async fn break_writes(&self) {
        // What the store's own full-disk detection records (the end-to-end tests fill a
        // real disk).
        self.store
            .health()
            .failed("No space left on device", self.clock.now());
    }
    async fn heal(&self) {
        loop {
            match self.store.leave_fault().unwrap() {
                FaultStep::Writable | FaultStep::Healed(_) => return,
                FaultStep::Reopened => continue,
                FaultStep::Waiting => panic!("a disk with room waits"),
            }
        }
    }
}

struct Postgres {
    store: Arc<Store>,
    url: String,
    /// A connection of the test's own, to move rows in time.
    sql: tokio_postgres::Client,
}

impl Fixture for Postgres {
    async fn open(timeouts: Timeouts) -> Postgres {
        let url = CLUSTER.database();
        let shared = SharedStore::connect(&url, timeouts).await.unwrap();
        let store = Store::shared(Arc::new(shared), None, timeouts, Clock::new());
        let (sql, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(connection);
        // The test's own moves need not wait for the disk (the store's writes do).
        sql.batch_execute("SET synchronous_commit = off")
            .await
            .unwrap();
        Postgres {
            store: Arc::new(store),
            url,
            sql,
        }
    }
    fn store(&self) -> &Store {
        &self.store
    }
    fn shared(&self) -> Arc<Store> {
        self.store.clone()
    }
    fn age(&self, nodes: &[Uuid], by: Duration) {
        if nodes.is_empty() {
            return;
        }
        let list: Vec<String> = nodes.iter().map(|u| format!("'{u}'")).collect();
        let by = format!("interval '{} milliseconds'", by.as_millis());
        CLUSTER.psql(
            database_of(&self.url),
            &format!(
                "UPDATE nodes SET updated_at = updated_at - {by},
                     progress_at = progress_at - {by}, deadline = deadline - {by},
                     due = due - {by}
                 WHERE uuid IN ({})",
                list.join(", ")
            ),
        );
    }
    async fn make_due(&self, node: Uuid) {
        // Every expression reads the row as it was: each column moves by one amount.
        self.sql
            .execute(
                "UPDATE nodes SET updated_at = updated_at - (deadline - now()),
                     progress_at = progress_at - (deadline - now()),
                     due = due - (deadline - now()), deadline = now()
                 WHERE uuid = $1",
                &[&node],
            )
            .await
            .unwrap();
    }
    async fn break_writes(&self) {
        let db = database_of(&self.url);
        CLUSTER.psql(
            "postgres",
            &format!(
                "ALTER DATABASE {db} WITH ALLOW_CONNECTIONS false;
                 SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
                 WHERE datname = '{db}'"
            ),
        );
    }
    async fn heal(&self) {
        let db = database_of(&self.url);
        CLUSTER.psql(
            "postgres",
            &format!("ALTER DATABASE {db} WITH ALLOW_CONNECTIONS true"),
        );
    }
}

async fn walked(store: &Store, events: &[Event]) -> Uuid {
    let uuid = store.create_node(fake_node()).await.unwrap().uuid();
    for &event in events {
        store.apply_event(uuid, event, None).await.unwrap();
    }
    uuid
}

/// A dead agent's node times out with Ironic's words; a live one, touched after the same
/// silence, waits on; the dead agent's late heartbeat is refused.
async fn a_dead_agent_times_out_and_a_live_one_does_not<F: Fixture>() {
    let f = F::open(Timeouts::uniform(CALLBACK)).await;
    let store = f.store();
    let dead = walked(store, &TO_WAIT_CALL_BACK).await;
    let live = walked(store, &TO_WAIT_CALL_BACK).await;
    let entered = store.node(live).await.unwrap().provision;
    assert_eq!(entered.deadline, Some(entered.updated_at.plus(CALLBACK)));
    f.age(&[dead, live], CALLBACK + Duration::from_secs(1));
    let touched = store.touch_provisioning(live).await.unwrap();
    assert_eq!(touched.deadline, Some(touched.updated_at.plus(CALLBACK)));
    let read = store.touched_node(&touched).await.unwrap();
    assert_eq!((read.uuid(), read.provision), (live, touched.provision));

    let failed = store.sweep(100, &|_| None).await.unwrap();
    assert_eq!(failed.len(), 1, "{failed:?}");
    let t = &failed[0];
    assert_eq!(
        (t.node, t.waited_in, t.failed_to),
        (
            dead,
            ProvisionState::WaitCallBack,
            ProvisionState::DeployFailed
        )
    );
    assert_eq!(t.timeout, CALLBACK);
    assert!(
        t.last_error.starts_with(&format!(
            "Timeout reached while waiting for callback for node {dead}: no callback for 7201"
        )) && t
            .last_error
            .ends_with("in \"wait call-back\" (deploy_callback_timeout is 7200 s)"),
        "{}",
        t.last_error
    );
    let node = store.node(dead).await.unwrap();
    assert_eq!(node.provision.state, ProvisionState::DeployFailed);
    assert_eq!(node.body.last_error.as_deref(), Some(t.last_error.as_str()));
    let Err(StoreError::NotWaiting { state, .. }) = store.touch(dead, None).await else {
        panic!("the dead agent's heartbeat was taken");
    };
    assert_eq!(state, ProvisionState::DeployFailed);
    // The live node's entry was re-filed at its deadline: nothing more to fail.
    assert!(store.sweep(100, &|_| None).await.unwrap().is_empty());
    let waiting = store.node(live).await.unwrap().provision;
    assert_eq!(waiting.state, ProvisionState::WaitCallBack);
    assert_eq!(waiting.indexed, waiting.deadline);
    assert_eq!(store.next_deadline().await.unwrap(), waiting.deadline);
}

/// `deploy_callback_timeout = 0`: no deadline at all; silence fails nothing.
async fn a_timeout_of_0_disables_the_check<F: Fixture>() {
    let f = F::open(Timeouts {
        deploy_callback: Duration::ZERO,
        ..Timeouts::uniform(CALLBACK)
    })
    .await;
    let store = f.store();
    let node = walked(store, &TO_WAIT_CALL_BACK).await;
    let p = store.touch(node, None).await.unwrap();
    assert_eq!((p.deadline, p.indexed), (None, None));
    f.age(&[node], Duration::from_secs(30 * 86_400));
    assert!(store.sweep(100, &|_| None).await.unwrap().is_empty());
    assert_eq!(store.next_deadline().await.unwrap(), None);
    assert_eq!(
        store.node(node).await.unwrap().provision.state,
        ProvisionState::WaitCallBack
    );
}

/// With a stall timeout, heartbeats that report no new progress keep the agent alive but
/// not the deploy: it fails as stalled. One whose progress moves waits on.
async fn heartbeats_without_progress_stall_and_progress_restarts_the_stall_clock<F: Fixture>() {
    let stall = Duration::from_secs(600);
    let f = F::open(Timeouts {
        deploy_stall: stall,
        ..Timeouts::uniform(CALLBACK)
    })
    .await;
    let store = f.store();
    let stuck = walked(store, &TO_WAIT_CALL_BACK).await;
    let moving = walked(store, &TO_WAIT_CALL_BACK).await;
    store.touch(stuck, Some(1)).await.unwrap();
    store.touch(moving, Some(1)).await.unwrap();
    f.age(&[stuck, moving], stall + Duration::from_secs(1));
    let same = store.touch(stuck, Some(1)).await.unwrap();
    assert_eq!(same.deadline, Some(same.progress_at.plus(stall)));
    let moved = store.touch(moving, Some(2)).await.unwrap();
    assert_eq!((moved.progress, moved.progress_at), (2, moved.updated_at));
    let failed = store.sweep(100, &|_| None).await.unwrap();
    assert_eq!(failed.iter().map(|t| t.node).collect::<Vec<_>>(), [stuck]);
    assert!(
        failed[0]
            .last_error
            .starts_with(&format!("Stalled: node {stuck}'s agent kept calling back")),
        "{}",
        failed[0].last_error
    );
    assert_eq!(
        store.node(moving).await.unwrap().provision.state,
        ProvisionState::WaitCallBack
    );
}

/// Bad calls are refused with their reason and change nothing.
async fn refusals_name_their_reason_and_change_nothing<F: Fixture>() {
    let f = F::open(Timeouts::uniform(CALLBACK)).await;
    let store = f.store();
    let named = NewNode {
        name: Some("rack-1".into()),
        ..fake_node()
    };
    let node = store.create_node(named.clone()).await.unwrap().uuid();
    let Err(StoreError::NameTaken(name)) = store.create_node(named).await else {
        panic!("a second node took the name");
    };
    assert_eq!(name, "rack-1");
    let Err(StoreError::IllegalTransition { .. }) =
        store.apply_event(node, Event::Wait, None).await
    else {
        panic!("enroll went to wait");
    };
    let Err(StoreError::StateChanged { actual, .. }) = store
        .apply_event_from(node, ProvisionState::Manageable, Event::Manage, None)
        .await
    else {
        panic!("acted on a node that was not where the caller thought");
    };
    assert_eq!(actual, ProvisionState::Enroll);
    let Err(StoreError::NodeNotFound(_)) = store.node(Uuid::new_v4()).await else {
        panic!("an unknown node was found");
    };
    let Err(StoreError::NotWaiting { state, .. }) = store.touch(node, None).await else {
        panic!("a node in enroll was touched");
    };
    assert_eq!(state, ProvisionState::Enroll);
    let after = store.node(node).await.unwrap();
    assert_eq!(
        (after.provision.state, after.body.last_error),
        (ProvisionState::Enroll, None)
    );
}

/// Ports: a MAC and a name are one port's each across the fleet, and the refusal names the
/// holder; agent lookup takes the first MAC a port has; a moved MAC frees the old one.
async fn ports_keep_their_macs_and_names_unique<F: Fixture>() {
    let f = F::open(Timeouts::uniform(CALLBACK)).await;
    let store = f.store();
    let a = store.create_node(fake_node()).await.unwrap().uuid();
    let b = store.create_node(fake_node()).await.unwrap().uuid();
    let port = store
        .create_port(a, "52:54:00:00:00:01", Default::default())
        .await
        .unwrap();
    let Err(StoreError::MacTaken { port: holder, .. }) = store
        .create_port(b, "52:54:00:00:00:01", Default::default())
        .await
    else {
        panic!("a second port took the MAC");
    };
    assert_eq!(holder, port.uuid);
    // Another port of the same uuid (even with the same MAC) is refused, the first kept.
    let mut twin = port.clone();
    twin.node_uuid = b;
    let Err(StoreError::DocumentTaken { field: "uuid", .. }) = store.insert_port(twin).await else {
        panic!("a port was overwritten by another of its uuid");
    };
    assert_eq!(store.port(port.uuid).await.unwrap().node_uuid, a);
    let Err(StoreError::NodeNotFound(_)) = store
        .create_port(Uuid::new_v4(), "52:54:00:00:00:09", Default::default())
        .await
    else {
        panic!("a port was added to an unknown node");
    };
    let other = store
        .create_port(b, "52:54:00:00:00:02", Default::default())
        .await
        .unwrap();
    let lookup = store
        .node_by_macs([
            "52:54:00:00:00:07",
            "52:54:00:00:00:02",
            "52:54:00:00:00:01",
        ])
        .await
        .unwrap();
    assert_eq!(lookup, Some(b));
    store
        .update_port::<StoreError>(port.uuid, |p| {
            p.address = "52:54:00:00:00:03".into();
            p.attrs.insert("name".into(), "eth0".into());
            Ok(())
        })
        .await
        .unwrap();
    assert_eq!(store.port_named("eth0").await.unwrap(), Some(port.uuid));
    let found = store.port_with_mac("52:54:00:00:00:03").await.unwrap();
    assert_eq!(found.map(|p| (p.uuid, p.node_uuid)), Some((port.uuid, a)));
    assert!(
        store
            .port_with_mac("52:54:00:00:00:01")
            .await
            .unwrap()
            .is_none()
    );
    let mut listed: Vec<Uuid> = store
        .list_ports()
        .await
        .unwrap()
        .iter()
        .map(|p| p.uuid)
        .collect();
    let mut made = vec![port.uuid, other.uuid];
    listed.sort();
    made.sort();
    assert_eq!(listed, made);
    assert_eq!(
        store.node_by_macs(["52:54:00:00:00:01"]).await.unwrap(),
        None
    );
    let Err(StoreError::PortNameTaken { port: holder, .. }) = store
        .update_port::<StoreError>(other.uuid, |p| {
            p.attrs.insert("name".into(), "eth0".into());
            Ok(())
        })
        .await
    else {
        panic!("a second port took the name");
    };
    assert_eq!(holder, port.uuid);
    let refused: Result<_, StoreError> = store
        .update_port(other.uuid, |p| {
            p.address = "52:54:00:00:00:04".into();
            Err(StoreError::PortNotFound("refused".into()))
        })
        .await;
    assert!(refused.is_err());
    assert_eq!(
        store.port(other.uuid).await.unwrap().address,
        "52:54:00:00:00:02"
    );
    store.delete_port(other.uuid).await.unwrap();
    assert!(store.ports_of(b).await.unwrap().is_empty());
    let ports: Vec<Uuid> = store
        .ports_of(a)
        .await
        .unwrap()
        .iter()
        .map(|p| p.uuid)
        .collect();
    assert_eq!(ports, [port.uuid]);
}

/// A deploy's config drive is kept beside its node, replaced whole, and dropped; a node
/// without one has none.
async fn a_config_drive_is_kept_replaced_and_dropped<F: Fixture>() {
    let f = F::open(Timeouts::uniform(CALLBACK)).await;
    let store = f.store();
    let node = store.create_node(fake_node()).await.unwrap().uuid();
    let other = store.create_node(fake_node()).await.unwrap().uuid();
    assert_eq!(store.config_drive(node).await.unwrap(), None);
    let image = ConfigDrive::Image(vec![0x1f, 0x8b, 1, 2, 3]);
    store.set_config_drive(node, Some(&image)).await.unwrap();
    assert_eq!(store.config_drive(node).await.unwrap(), Some(image));
    let url = ConfigDrive::Url("http://images.example/cd.iso".into());
    store.set_config_drive(node, Some(&url)).await.unwrap();
    assert_eq!(store.config_drive(node).await.unwrap(), Some(url));
    assert_eq!(store.config_drive(other).await.unwrap(), None);
    store.set_config_drive(node, None).await.unwrap();
    assert_eq!(store.config_drive(node).await.unwrap(), None);
    // Dropping one that is not there is no error.
    store.set_config_drive(node, None).await.unwrap();
}

/// An edit sees the node as it is and may refuse (then nothing is written); a name is one
/// node's across the fleet and freed by a rename; the uuid never changes; a node is
/// found by its uuid or its name.
async fn edits_keep_names_unique_and_a_refused_edit_changes_nothing<F: Fixture>() {
    let f = F::open(Timeouts::uniform(CALLBACK)).await;
    let store = f.store();
    let named = |name: &str| NewNode {
        name: Some(name.into()),
        ..fake_node()
    };
    let a = store.create_node(named("a-1")).await.unwrap().uuid();
    let b = store.create_node(fake_node()).await.unwrap().uuid();
    let rename = |name: &'static str| {
        move |_: &deployd_engine::node::Provision, body: &mut deployd_engine::node::NodeBody| {
            body.name = Some(name.into());
            Ok::<(), StoreError>(())
        }
    };
    let Err(StoreError::NameTaken(name)) = store.edit_node(b, rename("a-1")).await else {
        panic!("a second node took the name");
    };
    assert_eq!(name, "a-1");
    let Err(StoreError::Invalid(_)) = store.edit_node(b, rename("not a name")).await else {
        panic!("an invalid name was taken");
    };
    assert_eq!(store.node(b).await.unwrap().body.name, None);
    let edited = store
        .edit_node(a, |p, body| {
            assert_eq!(p.state, ProvisionState::Enroll);
            body.name = Some("a-2".into());
            body.attrs.insert("description".into(), "rack 1".into());
            body.uuid = b;
            Ok::<(), StoreError>(())
        })
        .await
        .unwrap();
    assert_eq!(edited.uuid(), a, "the uuid is the node's own");
    assert!(edited.body.updated_at.is_some());
    let found = store.find_node("a-2").await.unwrap();
    assert_eq!(
        (found.uuid(), &found.body.attrs["description"]),
        (a, &serde_json::json!("rack 1"))
    );
    assert_eq!(store.find_node(&a.to_string()).await.unwrap().uuid(), a);
    let Err(StoreError::NodeNotFound(ident)) = store.find_node("a-1").await else {
        panic!("the old name still finds the node");
    };
    assert_eq!(ident, "a-1");
    store.create_node(named("a-1")).await.unwrap();
    // A refusal of the caller's own kind, after the change was made: nothing is written.
    #[derive(Debug)]
    struct Refused;
    impl From<StoreError> for Refused {
        fn from(_: StoreError) -> Refused {
            Refused
        }
    }
    let refused = store
        .edit_node(a, |_, body| {
            body.attrs.insert("description".into(), "changed".into());
            Err(Refused)
        })
        .await;
    assert!(refused.is_err());
    let kept = store.node(a).await.unwrap();
    assert_eq!(kept.body.attrs["description"], "rack 1");
    assert_eq!(store.provision(a).await.unwrap(), kept.provision);
    let Err(StoreError::NodeNotFound(_)) = store.edit_node(Uuid::new_v4(), rename("x")).await
    else {
        panic!("an unknown node was edited");
    };
    let updated = store
        .update_node(b, |body| {
            body.attrs.insert("description".into(), "updated".into());
            Ok(())
        })
        .await
        .unwrap();
    assert_eq!(updated.body.attrs["description"], "updated");
}

/// The node list is every node in uuid order, in pages after a marker.
async fn nodes_are_listed_in_uuid_order_page_by_page<F: Fixture>() {
    let f = F::open(Timeouts::uniform(CALLBACK)).await;
    let store = f.store();
    let mut all = Vec::new();
    for _ in 0..5 {
        all.push(store.create_node(fake_node()).await.unwrap().uuid());
    }
    all.sort();
    assert_eq!(store.node_count().await.unwrap(), 5);
    let mut listed = Vec::new();
    let mut marker = None;
    loop {
        let page = store.list_nodes(marker, 2).await.unwrap();
        assert!(page.len() <= 2);
        let Some(last) = page.last() else { break };
        marker = Some(last.uuid());
        listed.extend(page.iter().map(|n| n.uuid()));
    }
    assert_eq!(listed, all);
    let after_first = store.list_nodes(Some(all[0]), 100).await.unwrap();
    assert_eq!(after_first.len(), 4);
    assert_eq!(after_first[0].uuid(), all[1]);
}

/// A node is deleted, with its ports and config drive, where Ironic allows it: in a stable
/// state or in maintenance; a node just enrolled may go straight to available.
async fn a_node_goes_with_its_ports_only_where_ironic_allows_it<F: Fixture>() {
    let f = F::open(Timeouts::uniform(CALLBACK)).await;
    let store = f.store();
    let waiting = walked(store, &TO_WAIT_CALL_BACK).await;
    let port = store
        .create_port(waiting, "52:54:00:00:01:01", Default::default())
        .await
        .unwrap();
    let drive = ConfigDrive::Image(vec![0x1f, 0x8b, 9]);
    store.set_config_drive(waiting, Some(&drive)).await.unwrap();
    let Err(StoreError::DeleteRefused { state, .. }) = store.delete_node(waiting).await else {
        panic!("a deploying node was deleted");
    };
    assert_eq!(state, ProvisionState::WaitCallBack);
    assert_eq!(store.port(port.uuid).await.unwrap().node_uuid, waiting);
    store
        .update_node(waiting, |body| {
            body.maintenance = true;
            Ok(())
        })
        .await
        .unwrap();
    store.delete_node(waiting).await.unwrap();
    let Err(StoreError::NodeNotFound(_)) = store.node(waiting).await else {
        panic!("the deleted node is still there");
    };
    let Err(StoreError::PortNotFound(_)) = store.port(port.uuid).await else {
        panic!("the deleted node's port is still there");
    };
    assert_eq!(store.config_drive(waiting).await.unwrap(), None);
    assert_eq!(store.next_deadline().await.unwrap(), None);
    // Its MAC is free for another node.
    let fresh = store.create_node(fake_node()).await.unwrap().uuid();
    store
        .create_port(fresh, "52:54:00:00:01:01", Default::default())
        .await
        .unwrap();
    let available = store.set_initial_available(fresh).await.unwrap();
    assert_eq!(available.provision.state, ProvisionState::Available);
    let Err(StoreError::StateChanged { actual, .. }) = store.set_initial_available(fresh).await
    else {
        panic!("an available node was made available again");
    };
    assert_eq!(actual, ProvisionState::Available);
    store.delete_node(fresh).await.unwrap();
    assert_eq!(store.node_count().await.unwrap(), 0);
}

/// A node's history: each transition in Ironic's words, milestones and failures in the
/// state the node is in, each found again by its uuid; the last 300 shown, oldest first;
/// gone with the node.
async fn a_node_s_history_tells_each_change_in_ironic_s_words<F: Fixture>() {
    let f = F::open(Timeouts::uniform(CALLBACK)).await;
    let store = f.store();
    let node = store.create_node(fake_node()).await.unwrap().uuid();
    let mut expected = Vec::new();
    let mut state = ProvisionState::Enroll;
    for event in TO_WAIT_CALL_BACK {
        let to = store.apply_event(node, event, None).await.unwrap().state();
        expected.push((
            format!(
                "Provision state changed from \"{state}\" to \"{to}\" ({})",
                event.as_str()
            ),
            "INFO",
            to.to_string(),
        ));
        state = to;
    }
    store.milestone(node, "Power on".into()).await.unwrap();
    store.failure(node, "the BMC refused".into()).await.unwrap();
    expected.push(("Power on".into(), "INFO", state.to_string()));
    expected.push(("the BMC refused".into(), "ERROR", state.to_string()));
    let events = store.history_of(node).await.unwrap();
    let told: Vec<_> = events
        .iter()
        .map(|e| (e.event.clone(), e.severity, e.state.clone()))
        .collect();
    assert_eq!(told, expected);
    for event in &events {
        assert_eq!(&store.history_event(node, event.uuid).await.unwrap(), event);
    }
    let Err(StoreError::DocumentNotFound { .. }) =
        store.history_event(node, Uuid::from_u64_pair(1, 1)).await
    else {
        panic!("an event that never was was found");
    };
    let Err(StoreError::NodeNotFound(_)) = store.milestone(Uuid::new_v4(), "x".into()).await else {
        panic!("a milestone of an unknown node was recorded");
    };
    for i in 0..310 {
        store.milestone(node, format!("m{i}")).await.unwrap();
    }
    let events = store.history_of(node).await.unwrap();
    assert_eq!(events.len(), 300);
    assert_eq!(events[0].event, "m10");
    assert_eq!(events[299].event, "m309");
    store
        .update_node(node, |body| {
            body.maintenance = true;
            Ok(())
        })
        .await
        .unwrap();
    store.delete_node(node).await.unwrap();
    assert!(store.history_of(node).await.unwrap().is_empty());
}

/// Batches: each node enrolled and each event applied on its own, all or nothing, with
/// its own answer; the deadline index holds each waiting node at its deadline.
async fn batches_answer_for_each_item_and_the_index_holds_each_deadline<F: Fixture>() {
    let f = F::open(Timeouts::uniform(CALLBACK)).await;
    let store = f.store();
    let named = NewNode {
        name: Some("batch-1".into()),
        ..fake_node()
    };
    let created = store
        .create_nodes(vec![named.clone(), named, fake_node()])
        .await
        .unwrap();
    assert!(created[0].is_ok() && created[2].is_ok(), "{created:?}");
    let Err(StoreError::NameTaken(_)) = &created[1] else {
        panic!("a second node took the name: {created:?}");
    };
    let (a, b) = (
        created[0].as_ref().unwrap().uuid(),
        created[2].as_ref().unwrap().uuid(),
    );
    let applied = store
        .apply_events([
            (a, Event::Manage),
            (b, Event::Wait),
            (Uuid::new_v4(), Event::Manage),
        ])
        .await
        .unwrap();
    assert_ne!(applied[0].as_ref().unwrap().state(), ProvisionState::Enroll);
    assert!(matches!(
        applied[1],
        Err(StoreError::IllegalTransition { .. })
    ));
    assert!(matches!(applied[2], Err(StoreError::NodeNotFound(_))));
    assert_eq!(store.node(b).await.unwrap().state(), ProvisionState::Enroll);
    assert!(store.deadline_index().await.unwrap().is_empty());
    let waiting = [
        walked(store, &TO_WAIT_CALL_BACK).await,
        walked(store, &TO_WAIT_CALL_BACK).await,
    ];
    let mut expected = Vec::new();
    for node in waiting {
        let p = store.node(node).await.unwrap().provision;
        expected.push((p.indexed.unwrap(), node));
    }
    expected.sort();
    assert_eq!(store.deadline_index().await.unwrap(), expected);
}

/// A pass over the fleet reads every node once, in uuid order, after its marker, across
/// the shared store's pages.
async fn a_pass_over_the_fleet_reads_every_node_once_in_order<F: Fixture>() {
    let f = F::open(Timeouts::uniform(CALLBACK)).await;
    let store = f.store();
    let all = common::store::enrolled(store, 300).await;
    let mut seen = Vec::new();
    let mut nodes = store.nodes_after(None);
    while let Some(node) = nodes.next().await {
        seen.push(node.unwrap().uuid());
    }
    assert_eq!(seen, all);
    let mut rest = Vec::new();
    let mut nodes = store.nodes_after(Some(all[149]));
    while let Some(node) = nodes.next().await {
        rest.push(node.unwrap().uuid());
    }
    assert_eq!(rest, all[150..]);
    assert!(store.size_on_disk().await.unwrap() > 0);
}

/// A rescue's password hash lives only while the rescue runs: the write that ends it
/// (its timeout, its end) drops the hash, so no reader sees it on a node no longer rescued.
async fn a_rescue_s_password_hash_goes_with_the_write_that_ends_the_rescue<F: Fixture>() {
    use deployd_engine::rescue_password::HASHED;
    let f = F::open(Timeouts::uniform(CALLBACK)).await;
    let store = f.store();
    let mut to_active = TO_WAIT_CALL_BACK.to_vec();
    to_active.extend([Event::Resume, Event::Done]);
    let node = walked(store, &to_active).await;
    let hashed = |n: &deployd_engine::node::Node| n.body.instance_info.contains_key(HASHED);
    let rescue = async |events: &[Event]| {
        store
            .update_node(node, |b| {
                b.instance_info.insert(HASHED.into(), "$5$salt$hash".into());
                Ok(())
            })
            .await
            .unwrap();
        for &event in events {
            let n = store.apply_event(node, event, None).await.unwrap();
            assert!(hashed(&n), "kept in {}", n.provision.state.as_str());
        }
    };
    rescue(&[Event::Rescue, Event::Wait]).await;
    f.age(&[node], CALLBACK + Duration::from_secs(1));
    let failed = store.sweep(100, &|_| None).await.unwrap();
    assert_eq!(failed.len(), 1, "{failed:?}");
    let n = store.node(node).await.unwrap();
    assert_eq!(n.provision.state, ProvisionState::RescueFailed);
    assert!(!hashed(&n), "dropped by the timeout's write");
    assert!(n.body.last_error.is_some());

    rescue(&[Event::Rescue, Event::Wait, Event::Resume]).await;
    let n = store.apply_event(node, Event::Done, None).await.unwrap();
    assert_eq!(n.provision.state, ProvisionState::Rescue);
    assert!(!hashed(&n), "dropped by the rescue's end");
    assert!(!hashed(&store.node(node).await.unwrap()), "as stored");
}

macro_rules! on_both_backends {
    ($($contract:ident),* $(,)?) => {$(
        mod $contract {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn on_sled() {
                super::$contract::<super::Sled>().await
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn on_postgres() {
                super::$contract::<super::Postgres>().await
            }
        }
    )*};
}

on_both_backends!(
    a_dead_agent_times_out_and_a_live_one_does_not,
    a_timeout_of_0_disables_the_check,
    heartbeats_without_progress_stall_and_progress_restarts_the_stall_clock,
    refusals_name_their_reason_and_change_nothing,
    ports_keep_their_macs_and_names_unique,
    a_config_drive_is_kept_replaced_and_dropped,
    edits_keep_names_unique_and_a_refused_edit_changes_nothing,
    nodes_are_listed_in_uuid_order_page_by_page,
    a_node_goes_with_its_ports_only_where_ironic_allows_it,
    a_node_s_history_tells_each_change_in_ironic_s_words,
    batches_answer_for_each_item_and_the_index_holds_each_deadline,
    a_pass_over_the_fleet_reads_every_node_once_in_order,
    a_rescue_s_password_hash_goes_with_the_write_that_ends_the_rescue,
);

mod backups;
mod documents;
mod faults;
mod sweeps;
