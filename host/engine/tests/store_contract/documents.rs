//! The contract on documents (chassis, port groups, allocations, …), both backends: unique
//! values held by one document at a time, refusals that change nothing, lists in uuid
//! order, and what goes with a deleted node.

use serde_json::{Value, json};
use uuid::Uuid;

use super::{CALLBACK, Fixture, Postgres, Sled, walked};
use deployd_engine::node::{InvalidField, MAX_FIELD_BYTES};
use deployd_engine::state_machine::Timeouts;
use deployd_engine::store::StoreError;
use deployd_engine::store::documents::{Cascade, Doc};
use deployd_test_support::store::{TO_WAIT_CALL_BACK, fake_node};

const NAMED: &[&str] = &["name"];
const CONNECTOR: &[&str] = &["type+connector_id"];

fn doc(value: Value) -> Doc {
    serde_json::from_value(value).unwrap()
}

/// A name, or several fields together, is held by one document of a kind at a time; a
/// refused insert, change or rename leaves every document and name as it was; a deleted or
/// renamed document's name is free again.
async fn documents_keep_their_unique_values_and_a_refused_write_changes_nothing<F: Fixture>() {
    let f = F::open(Timeouts::uniform(CALLBACK)).await;
    let store = f.store();
    let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
    store
        .insert_document("Chassis", a, &doc(json!({"name": "rack-1"})), NAMED)
        .await
        .unwrap();
    assert_eq!(
        store.document("Chassis", a).await.unwrap()["name"],
        "rack-1"
    );
    let (found, _) = store
        .find_document("Chassis", "name", "rack-1")
        .await
        .unwrap();
    assert_eq!(found, a);
    let (found, _) = store
        .find_document("Chassis", "name", &a.to_string())
        .await
        .unwrap();
    assert_eq!(found, a);
    // Another kind may use the name.
    store
        .insert_document("Portgroup", b, &doc(json!({"name": "rack-1"})), NAMED)
        .await
        .unwrap();

    let taken = store
        .insert_document("Chassis", b, &doc(json!({"name": "rack-1"})), NAMED)
        .await;
    let Err(StoreError::DocumentTaken {
        field: "name",
        value,
        ..
    }) = taken
    else {
        panic!("a second chassis took a name: {taken:?}");
    };
    assert_eq!(value, "rack-1");
    let Err(StoreError::DocumentNotFound { .. }) = store.document("Chassis", b).await else {
        panic!("a refused insert left its document");
    };
    let again = store
        .insert_document("Chassis", a, &doc(json!({"name": "rack-9"})), NAMED)
        .await;
    assert!(
        matches!(again, Err(StoreError::DocumentTaken { field: "uuid", .. })),
        "{again:?}"
    );
    let Err(StoreError::DocumentNotFound { .. }) =
        store.find_document("Chassis", "name", "rack-9").await
    else {
        panic!("a refused insert took its name");
    };

    // A rename onto a taken name is refused, and the document keeps its own.
    store
        .insert_document("Chassis", b, &doc(json!({"name": "rack-2"})), NAMED)
        .await
        .unwrap();
    let renamed = store
        .update_document("Chassis", b, NAMED, |d| {
            d.insert("name".into(), json!("rack-1"));
            Ok::<_, StoreError>(())
        })
        .await;
    assert!(
        matches!(renamed, Err(StoreError::DocumentTaken { .. })),
        "{renamed:?}"
    );
    assert_eq!(
        store.document("Chassis", b).await.unwrap()["name"],
        "rack-2"
    );
    assert_eq!(
        store
            .find_document("Chassis", "name", "rack-2")
            .await
            .unwrap()
            .0,
        b
    );
    // A change its closure refuses writes nothing.
    let refused = store
        .update_document("Chassis", b, NAMED, |d| {
            d.insert("name".into(), json!("rack-3"));
            Err(StoreError::Changed("refused by the caller".into()))
        })
        .await;
    assert!(matches!(refused, Err(StoreError::Changed(_))));
    assert_eq!(
        store.document("Chassis", b).await.unwrap()["name"],
        "rack-2"
    );
    // A rename frees the old name; a delete frees the new one.
    let renamed = store
        .update_document("Chassis", b, NAMED, |d| {
            d.insert("name".into(), json!("rack-3"));
            d.insert("extra".into(), json!({"row": 4}));
            Ok::<_, StoreError>(())
        })
        .await
        .unwrap();
    assert_eq!(renamed["extra"]["row"], 4);
    store
        .insert_document(
            "Chassis",
            Uuid::new_v4(),
            &doc(json!({"name": "rack-2"})),
            NAMED,
        )
        .await
        .unwrap();
    store.delete_document("Chassis", b, NAMED).await.unwrap();
    let Err(StoreError::DocumentNotFound { .. }) =
        store.find_document("Chassis", "name", "rack-3").await
    else {
        panic!("a deleted document is still found by its name");
    };
    store
        .insert_document(
            "Chassis",
            Uuid::new_v4(),
            &doc(json!({"name": "rack-3"})),
            NAMED,
        )
        .await
        .unwrap();
    let Err(StoreError::DocumentNotFound { .. }) = store.delete_document("Chassis", b, NAMED).await
    else {
        panic!("a document was deleted twice");
    };

    // Several fields held together: the pair is unique, each field alone is not.
    let connector = |kind: &str, id: &str| doc(json!({"type": kind, "connector_id": id}));
    store
        .insert_document(
            "VolumeConnector",
            Uuid::new_v4(),
            &connector("iqn", "x"),
            CONNECTOR,
        )
        .await
        .unwrap();
    store
        .insert_document(
            "VolumeConnector",
            Uuid::new_v4(),
            &connector("wwpn", "x"),
            CONNECTOR,
        )
        .await
        .unwrap();
    let pair = store
        .insert_document(
            "VolumeConnector",
            Uuid::new_v4(),
            &connector("iqn", "x"),
            CONNECTOR,
        )
        .await;
    let Err(StoreError::DocumentTaken { value, .. }) = pair else {
        panic!("a connector pair was taken twice: {pair:?}");
    };
    assert_eq!(value, "iqn x");

    // A field larger than a node's may be is refused by name.
    let big = doc(json!({"name": "big", "extra": {"blob": "x".repeat(MAX_FIELD_BYTES)}}));
    let refused = store
        .insert_document("Chassis", Uuid::new_v4(), &big, NAMED)
        .await;
    assert!(
        matches!(
            refused,
            Err(StoreError::Invalid(
                InvalidField::DocumentFieldTooLarge { .. }
            ))
        ),
        "{refused:?}"
    );
    let Err(StoreError::DocumentNotFound { .. }) =
        store.find_document("Chassis", "name", "big").await
    else {
        panic!("a refused document took its name");
    };
}

/// Two writers taking one name at once: exactly one wins, every time.
async fn two_writers_never_both_take_one_name<F: Fixture>() {
    let f = F::open(Timeouts::uniform(CALLBACK)).await;
    let store = f.store();
    for round in 0..50 {
        let name = format!("pg-{round}");
        let (one, two) = (Uuid::new_v4(), Uuid::new_v4());
        let named = doc(json!({"name": name}));
        let (first, second) = tokio::join!(
            store.insert_document("Portgroup", one, &named, NAMED),
            store.insert_document("Portgroup", two, &named, NAMED),
        );
        assert!(
            first.is_ok() != second.is_ok(),
            "round {round}: {first:?} {second:?}"
        );
        let (holder, _) = store
            .find_document("Portgroup", "name", &name)
            .await
            .unwrap();
        assert_eq!(holder, if first.is_ok() { one } else { two });
    }
}

/// A kind's documents in uuid order, all of them or after a marker, without another
/// kind's.
async fn documents_are_listed_in_uuid_order_after_a_marker<F: Fixture>() {
    let f = F::open(Timeouts::uniform(CALLBACK)).await;
    let store = f.store();
    let mut all: Vec<Uuid> = (0..300).map(|_| Uuid::new_v4()).collect();
    for (i, uuid) in all.iter().enumerate() {
        store
            .insert_document(
                "Runbook",
                *uuid,
                &doc(json!({"name": format!("rb-{i}")})),
                NAMED,
            )
            .await
            .unwrap();
    }
    store
        .insert_document("Chassis", Uuid::new_v4(), &doc(json!({})), NAMED)
        .await
        .unwrap();
    all.sort();
    let listed: Vec<Uuid> = store
        .documents("Runbook")
        .await
        .unwrap()
        .into_iter()
        .map(|(uuid, _)| uuid)
        .collect();
    assert_eq!(listed, all);
    let mut rest = Vec::new();
    let mut pages = store.documents_after("Runbook", Some(all[99]));
    while let Some(item) = pages.next().await {
        rest.push(item.unwrap().0);
    }
    assert_eq!(rest, all[100..]);
    assert!(store.documents("Allocation").await.unwrap().is_empty());
}

/// A node's deletion takes the documents that name it (of the kinds asked) and the one
/// its body names, all in one with the node, and frees their names; a refused deletion
/// takes nothing.
async fn a_node_delete_takes_its_documents_and_leaves_others_alone<F: Fixture>() {
    let f = F::open(Timeouts::uniform(CALLBACK)).await;
    let store = f.store();
    let node = store.create_node(fake_node()).await.unwrap().uuid();
    let other = store.create_node(fake_node()).await.unwrap().uuid();
    let named = |name: &str, of: Uuid| doc(json!({"name": name, "node_uuid": of.to_string()}));
    let (mine, theirs, allocation) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
    for (kind, uuid, d) in [
        ("Portgroup", mine, named("pg-mine", node)),
        ("Portgroup", theirs, named("pg-theirs", other)),
        ("Allocation", allocation, named("alloc", node)),
    ] {
        store.insert_document(kind, uuid, &d, NAMED).await.unwrap();
    }
    store
        .update_node(node, |b| {
            b.attrs.insert("allocation_uuid".into(), json!(allocation));
            Ok(())
        })
        .await
        .unwrap();
    let cascade = Cascade {
        of_node: vec![("Portgroup", NAMED)],
        named_by: vec![("allocation_uuid", "Allocation", NAMED)],
    };
    store.delete_node_with(node, &cascade).await.unwrap();
    assert!(matches!(
        store.node(node).await,
        Err(StoreError::NodeNotFound(_))
    ));
    for (kind, gone) in [("Portgroup", mine), ("Allocation", allocation)] {
        let err = store.document(kind, gone).await.unwrap_err();
        assert!(matches!(err, StoreError::DocumentNotFound { .. }), "{err}");
    }
    assert_eq!(
        store.document("Portgroup", theirs).await.unwrap()["name"],
        "pg-theirs"
    );
    // Their names are free again.
    for (kind, name) in [("Portgroup", "pg-mine"), ("Allocation", "alloc")] {
        store
            .insert_document(kind, Uuid::new_v4(), &named(name, other), NAMED)
            .await
            .unwrap();
    }

    // A refused delete takes nothing with it.
    let busy = walked(store, &TO_WAIT_CALL_BACK).await;
    let kept = Uuid::new_v4();
    store
        .insert_document("Portgroup", kept, &named("pg-busy", busy), NAMED)
        .await
        .unwrap();
    assert!(store.delete_node_with(busy, &cascade).await.is_err());
    assert!(store.document("Portgroup", kept).await.is_ok());
}

/// Uploaded driver components: the store that keeps them (the shared store) keeps every
/// version by its id, with its sha256 and limits as given, and one active version per
/// name, a new upload replacing the active one while the old stays fetchable by id (a
/// flow pinned to it); a forgotten name goes with every version of it. The store that
/// does not (sled: its engine keeps them in the plugins directory) says so when asked to
/// keep one, and has none.
async fn driver_components_are_kept_by_version_where_the_store_keeps_them<F: Fixture>() {
    use deployd_engine::store::postgres::KeptDriver;
    let f = F::open(Timeouts::uniform(CALLBACK)).await;
    let store = f.store();
    let upload = |name: &str, version: &str, limits: serde_json::Value| KeptDriver {
        name: name.to_owned(),
        version: version.to_owned(),
        sha256: version.split('+').next().unwrap().to_owned(),
        limits,
        body: format!("\0asm {version}").into_bytes(),
    };
    let kept = || async {
        let all = store.kept_drivers().await.unwrap();
        all.into_iter()
            .map(|d| (d.name, d.version))
            .collect::<Vec<_>>()
    };
    if !store.keeps_drivers() {
        let Err(StoreError::Unsupported { .. }) = store
            .keep_driver(&upload("t", "00", serde_json::json!({})))
            .await
        else {
            panic!("a store that keeps no driver kept one");
        };
        assert!(kept().await.is_empty());
        assert_eq!(store.kept_driver("t").await.unwrap(), None);
        assert_eq!(store.driver_version("00").await.unwrap(), None);
        store.forget_driver("t").await.unwrap();
        return;
    }
    let first = upload("b", "bb", serde_json::json!({}));
    let limited = upload(
        "b",
        "b2+1048576b+5000ms+16384e",
        serde_json::json!({"deadline_ms": 5000}),
    );
    store.keep_driver(&first).await.unwrap();
    store
        .keep_driver(&upload("a", "aa", serde_json::json!({})))
        .await
        .unwrap();
    store.keep_driver(&limited).await.unwrap();
    let ours = |s: &str| s.to_owned();
    assert_eq!(
        kept().await,
        [
            (ours("a"), ours("aa")),
            (ours("b"), limited.version.clone())
        ]
    );
    assert_eq!(store.kept_driver("b").await.unwrap(), Some(limited.clone()));
    assert_eq!(store.driver_version("bb").await.unwrap(), Some(first));
    // The same version uploaded again is one row, active again.
    store.keep_driver(&limited).await.unwrap();
    assert_eq!(kept().await.len(), 2);
    store.forget_driver("b").await.unwrap();
    store.forget_driver("b").await.unwrap();
    assert_eq!(kept().await, [(ours("a"), ours("aa"))]);
    assert_eq!(store.driver_version("bb").await.unwrap(), None);
    assert_eq!(store.kept_driver("b").await.unwrap(), None);
}

on_both_backends!(
    driver_components_are_kept_by_version_where_the_store_keeps_them,
    documents_keep_their_unique_values_and_a_refused_write_changes_nothing,
    two_writers_never_both_take_one_name,
    documents_are_listed_in_uuid_order_after_a_marker,
    a_node_delete_takes_its_documents_and_leaves_others_alone,
);
