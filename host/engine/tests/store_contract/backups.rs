//! The contract on backups, both backends: a backup taken on one restores onto a new sled
//! store and onto an empty PostgreSQL database alike — every node with its provision
//! record and its deadline derived again, ports, config drives, documents, each history
//! event with its uuid — with every index rebuilt; a damaged backup, or a restore into a
//! database that already holds a fleet, is refused and leaves nothing behind.

use std::sync::Arc;

use serde_json::json;
use uuid::Uuid;

use super::{CALLBACK, Fixture, Postgres, Sled, walked};
use deployd_engine::clock::Clock;
use deployd_engine::config_drive::ConfigDrive;
use deployd_engine::node::{NewNode, Node, Port};
use deployd_engine::state_machine::{Event, ProvisionState, Timeouts};
use deployd_engine::store::documents::Doc;
use deployd_engine::store::postgres::SharedStore;
use deployd_engine::store::{Store, StoreConfig, StoreError, backup};
use deployd_test_support::postgres::CLUSTER;
use deployd_test_support::store::{T0, TO_WAIT_CALL_BACK, fake_node};

/// What a fleet holds, read through the handle, for comparing two stores.
#[derive(Debug, PartialEq)]
struct Fleet {
    nodes: Vec<Node>,
    ports: Vec<Port>,
    drives: Vec<Option<ConfigDrive>>,
    chassis: Vec<(Uuid, Doc)>,
    connectors: Vec<(Uuid, Doc)>,
    history: Vec<Vec<deployd_engine::store::history::Event>>,
}

async fn fleet(store: &Store) -> Fleet {
    let nodes = store.list_nodes(None, 1000).await.unwrap();
    let mut ports = store.list_ports().await.unwrap();
    ports.sort_by_key(|p| p.uuid);
    let (mut drives, mut history) = (Vec::new(), Vec::new());
    for node in &nodes {
        drives.push(store.config_drive(node.uuid()).await.unwrap());
        history.push(store.history_of(node.uuid()).await.unwrap());
    }
    Fleet {
        nodes,
        ports,
        drives,
        chassis: store.documents("Chassis").await.unwrap(),
        connectors: store.documents("VolumeConnector").await.unwrap(),
        history,
    }
}

/// The backup of `store`, as `GET /store/backup` writes it (off the async workers), and
/// the digest of its records alone.
async fn backup_of(store: Arc<Store>) -> (Vec<u8>, String) {
    let runtime = tokio::runtime::Handle::current();
    tokio::task::spawn_blocking(move || {
        let mut out = Vec::new();
        let summary = backup::write(&store, &runtime, &mut out).unwrap();
        assert!(summary.nodes > 0 && summary.events > 0, "{summary:?}");
        (out, summary.sha256)
    })
    .await
    .unwrap()
}

/// `bytes` restored onto a new sled store, whose records are read back as they are (they
/// must be the backup's, `records`), then opened as an engine opens it.
async fn restored_on_sled(
    bytes: &[u8],
    records: &str,
    timeouts: Timeouts,
) -> (Store, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store");
    let config = StoreConfig::default();
    backup::restore_to_sled(&path, &config, bytes).unwrap();
    let as_is = Arc::new(Store::open_as_is(&path, &config).unwrap());
    assert_eq!(backup_of(as_is).await.1, records, "sled");
    let (store, _) = Store::open(&path, &config, timeouts, Clock::manual(T0)).unwrap();
    (store, dir)
}

/// The same onto an empty database.
async fn restored_on_postgres(bytes: &[u8], records: &str, timeouts: Timeouts) -> (Store, String) {
    let url = CLUSTER.database();
    backup::restore_to_shared(&url, bytes).await.unwrap();
    let shared = SharedStore::connect(&url, timeouts).await.unwrap();
    let as_is = Arc::new(Store::shared(
        Arc::new(shared),
        None,
        timeouts,
        Clock::new(),
    ));
    assert_eq!(backup_of(as_is).await.1, records, "postgres");
    let (store, _) = Store::open_shared(
        &url,
        "restored",
        "",
        &StoreConfig::default(),
        timeouts,
        Clock::new(),
    )
    .await
    .unwrap();
    (store, url)
}

/// A fleet of every kind of record, a backup of it, and the backup restored onto each
/// backend: each restored store, read as it is, holds the same records in the same order
/// (their lines hash alike), and through the handle what the first held.
async fn a_backup_restores_onto_either_backend<F: Fixture>() {
    let timeouts = Timeouts::uniform(CALLBACK);
    let f = F::open(timeouts).await;
    let store = f.store();
    let waiting = walked(store, &TO_WAIT_CALL_BACK).await;
    store.touch(waiting, Some(42)).await.unwrap();
    store.milestone(waiting, "Power on".into()).await.unwrap();
    let named = NewNode {
        name: Some("rack-1-node-1".into()),
        ..fake_node()
    };
    let manageable = store.create_node(named).await.unwrap().uuid();
    for event in [Event::Manage, Event::Done] {
        store.apply_event(manageable, event, None).await.unwrap();
    }
    // Busy when the backup is taken: failed when an engine opens the restored store.
    let busy = walked(store, &[Event::Manage]).await;
    store
        .failure(manageable, "the BMC refused".into())
        .await
        .unwrap();
    let port = store
        .create_port(waiting, "52:54:00:00:00:01", Default::default())
        .await
        .unwrap();
    store
        .update_port::<StoreError>(port.uuid, |p| {
            p.attrs.insert("name".into(), "eth0".into());
            Ok(())
        })
        .await
        .unwrap();
    store
        .create_port(manageable, "52:54:00:00:00:02", Default::default())
        .await
        .unwrap();
    let drive = ConfigDrive::Image(vec![0x1f, 0x8b, 0, 1, 2, 255]);
    store.set_config_drive(waiting, Some(&drive)).await.unwrap();
    let doc = |v| serde_json::from_value::<Doc>(v).unwrap();
    let chassis = Uuid::new_v4();
    store
        .insert_document(
            "Chassis",
            chassis,
            &doc(json!({"name": "rack-1", "extra": {"row": 3}})),
            &["name"],
        )
        .await
        .unwrap();
    let connector = Uuid::new_v4();
    store
        .insert_document(
            "VolumeConnector",
            connector,
            &doc(json!({"type": "iqn", "connector_id": "iqn.2026-12.org:n1", "node_uuid": manageable.to_string()})),
            &["type+connector_id"],
        )
        .await
        .unwrap();
    let before = fleet(store).await;
    assert!(before.nodes.iter().any(|n| n.provision.deadline.is_some()));
    let (bytes, records) = backup_of(f.shared()).await;

    let (on_sled, _dir) = restored_on_sled(&bytes, &records, timeouts).await;
    let (on_postgres, _) = restored_on_postgres(&bytes, &records, timeouts).await;
    for (restored, on) in [(&on_sled, "sled"), (&on_postgres, "postgres")] {
        let after = fleet(restored).await;
        for (a, b) in after.nodes.iter().zip(&before.nodes) {
            if a.uuid() == busy {
                assert_eq!(a.provision.state, ProvisionState::Enroll, "{on}");
                let error = a.body.last_error.as_deref().unwrap_or_default();
                assert!(
                    error.starts_with("deployd restarted while node"),
                    "{on}: {error}"
                );
                continue;
            }
            // The deadline is derived again from the same clocks and timeouts; where the
            // sweeper's entry sits is the restored store's own.
            assert_eq!(
                (&a.body, a.provision.deadline),
                (&b.body, b.provision.deadline),
                "{on}"
            );
            assert_eq!(
                (
                    a.provision.state,
                    a.provision.target,
                    a.provision.updated_at
                ),
                (
                    b.provision.state,
                    b.provision.target,
                    b.provision.updated_at
                ),
                "{on}"
            );
            assert_eq!(
                (a.provision.progress_at, a.provision.progress),
                (b.provision.progress_at, b.provision.progress),
                "{on}"
            );
        }
        assert_eq!(after.nodes.len(), before.nodes.len(), "{on}");
        assert_eq!(
            (&after.ports, &after.drives),
            (&before.ports, &before.drives),
            "{on}"
        );
        assert_eq!(
            (&after.chassis, &after.connectors),
            (&before.chassis, &before.connectors),
            "{on}"
        );
        // Each event as it was, the busy node's failure at the start after them.
        for (a, b) in after.history.iter().zip(&before.history) {
            assert_eq!(a[..b.len()], b[..], "{on}");
        }
        // The indexes were rebuilt from the records.
        assert_eq!(
            restored.find_node("rack-1-node-1").await.unwrap().uuid(),
            manageable,
            "{on}"
        );
        assert_eq!(
            restored.port_named("eth0").await.unwrap(),
            Some(port.uuid),
            "{on}"
        );
        let found = restored.port_with_mac("52:54:00:00:00:02").await.unwrap();
        assert_eq!(found.map(|p| p.node_uuid), Some(manageable), "{on}");
        assert_eq!(
            restored
                .find_document("Chassis", "name", "rack-1")
                .await
                .unwrap()
                .0,
            chassis,
            "{on}"
        );
        let Err(StoreError::DocumentTaken { .. }) = restored
            .insert_document(
                "VolumeConnector",
                Uuid::new_v4(),
                &doc(json!({"type": "iqn", "connector_id": "iqn.2026-12.org:n1"})),
                &["type+connector_id"],
            )
            .await
        else {
            panic!("{on}: a restored connector's id was taken again");
        };
        let Err(StoreError::NameTaken(_)) = restored
            .create_node(NewNode {
                name: Some("rack-1-node-1".into()),
                ..fake_node()
            })
            .await
        else {
            panic!("{on}: a restored node's name was taken again");
        };
        // The waiting node waits on: its agent's next heartbeat is taken.
        assert!(restored.touch(waiting, None).await.is_ok(), "{on}");
        assert!(restored.next_deadline().await.unwrap().is_some(), "{on}");
        // New events come after the restored ones, with uuids of their own.
        restored
            .milestone(manageable, "after".into())
            .await
            .unwrap();
        let events = restored.history_of(manageable).await.unwrap();
        let last = events.last().unwrap();
        assert!(
            last.event == "after" && !before.history.iter().flatten().any(|e| e.uuid == last.uuid),
            "{on}"
        );
    }
    on_postgres.leave().await.unwrap();
}

/// A backup altered or cut short is refused by both restores, which leave nothing: no
/// sled store at the path, no row in the database; a database that holds a fleet, or one
/// an engine serves, is not restored into.
async fn a_damaged_backup_or_a_held_database_is_refused_and_leaves_nothing<F: Fixture>() {
    let timeouts = Timeouts::uniform(CALLBACK);
    let f = F::open(timeouts).await;
    for _ in 0..3 {
        walked(f.store(), &TO_WAIT_CALL_BACK).await;
    }
    let (bytes, _) = backup_of(f.shared()).await;
    let mut altered = bytes.clone();
    let at = altered.len() / 2
        + altered[altered.len() / 2..]
            .iter()
            .position(|&b| b == b'"')
            .unwrap()
        + 1;
    altered[at] = if altered[at] == b'a' { b'b' } else { b'a' };
    let cut = bytes[..bytes.len() * 2 / 3].to_vec();
    let no_trailer = bytes[..bytes.len()
        - 1
        - bytes[..bytes.len() - 1]
            .iter()
            .rev()
            .position(|&b| b == b'\n')
            .unwrap()]
        .to_vec();
    for (what, damaged) in [
        ("altered", &altered),
        ("cut short", &cut),
        ("without its trailer", &no_trailer),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("store");
        let Err(StoreError::Corrupt(why)) =
            backup::restore_to_sled(&path, &StoreConfig::default(), &damaged[..])
        else {
            panic!("{what}: restored on sled");
        };
        assert!(why.starts_with("the backup"), "{what}: {why}");
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            0,
            "{what}: sled left files"
        );
        let url = CLUSTER.database();
        let Err(StoreError::Corrupt(why)) = backup::restore_to_shared(&url, &damaged[..]).await
        else {
            panic!("{what}: restored on postgres");
        };
        assert!(why.starts_with("the backup"), "{what}: {why}");
        let shared = SharedStore::connect(&url, timeouts).await.unwrap();
        let store = Store::shared(Arc::new(shared), None, timeouts, Clock::new());
        assert_eq!(
            store.node_count().await.unwrap(),
            0,
            "{what}: rows were left"
        );
    }
    // Restored once, the database holds a fleet: a second restore is refused whole.
    let url = CLUSTER.database();
    backup::restore_to_shared(&url, &bytes[..]).await.unwrap();
    let Err(StoreError::Manifest(why)) = backup::restore_to_shared(&url, &bytes[..]).await else {
        panic!("restored over a fleet");
    };
    assert!(why.contains("already holds nodes"), "{why}");
    // A database an engine serves is not restored into, even empty.
    let url = CLUSTER.database();
    let (serving, _) = Store::open_shared(
        &url,
        "serving",
        "",
        &StoreConfig::default(),
        timeouts,
        Clock::new(),
    )
    .await
    .unwrap();
    let Err(StoreError::Manifest(why)) = backup::restore_to_shared(&url, &bytes[..]).await else {
        panic!("restored under a serving engine");
    };
    assert!(
        why.contains("engines are serving this database (serving (id"),
        "{why}"
    );
    serving.leave().await.unwrap();
}

on_both_backends!(
    a_backup_restores_onto_either_backend,
    a_damaged_backup_or_a_held_database_is_refused_and_leaves_nothing,
);
