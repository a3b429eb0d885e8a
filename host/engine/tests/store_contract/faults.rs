//! The contract when the store cannot write, both backends: a full disk on sled, a
//! database that drops this engine's connections and refuses new ones on PostgreSQL. Every
//! write is refused as transient (a 503, the same call may work later) and changes
//! nothing; once the store can write again, the same calls work.

use serde_json::json;
use uuid::Uuid;

use super::{CALLBACK, Fixture, Postgres, Sled};
use deployd_engine::node::InvalidField;
use deployd_engine::state_machine::{Event, ProvisionState, Timeouts};
use deployd_engine::store::{ErrorClass, StoreError};
use deployd_test_support::store::fake_node;

async fn a_store_that_cannot_write_refuses_as_transient_and_changes_nothing<F: Fixture>() {
    let f = F::open(Timeouts::uniform(CALLBACK)).await;
    let store = f.store();
    let node = store.create_node(fake_node()).await.unwrap().uuid();
    let doc = serde_json::from_value(json!({"name": "rack"})).unwrap();
    f.break_writes().await;

    let transient = |what: &str, r: Result<(), StoreError>| match r {
        Err(e) => assert_eq!(e.class(), ErrorClass::Transient, "{what}: {e}"),
        Ok(()) => panic!("{what} was written by a store that cannot write"),
    };
    transient(
        "an enrollment",
        store.create_node(fake_node()).await.map(drop),
    );
    transient(
        "a transition",
        store.apply_event(node, Event::Manage, None).await.map(drop),
    );
    transient(
        "an edit",
        store
            .update_node(node, |b| {
                b.extra.insert("k".into(), json!(1));
                Ok(())
            })
            .await
            .map(drop),
    );
    transient(
        "a port",
        store
            .create_port(node, "52:54:00:00:0f:01", Default::default())
            .await
            .map(drop),
    );
    transient(
        "a document",
        store
            .insert_document("Chassis", Uuid::new_v4(), &doc, &["name"])
            .await,
    );

    f.heal().await;
    let after = store.node(node).await.unwrap();
    assert_eq!(after.provision.state, ProvisionState::Enroll);
    assert!(after.body.extra.is_empty(), "{:?}", after.body.extra);
    assert_eq!(store.node_count().await.unwrap(), 1);
    assert!(store.ports_of(node).await.unwrap().is_empty());
    assert!(store.documents("Chassis").await.unwrap().is_empty());
    // The same calls work again.
    store.apply_event(node, Event::Manage, None).await.unwrap();
    store
        .insert_document("Chassis", Uuid::new_v4(), &doc, &["name"])
        .await
        .unwrap();
    store.create_node(fake_node()).await.unwrap();
}

/// A string or key holding the NUL character is refused the same on both backends (no
/// PostgreSQL text can hold it) and changes nothing; the six characters `\u0000` written
/// out are only text.
async fn a_string_holding_nul_is_refused_on_every_backend_and_changes_nothing<F: Fixture>() {
    let f = F::open(Timeouts::uniform(CALLBACK)).await;
    let store = f.store();
    let nul = |r: Result<(), StoreError>| match r {
        Err(StoreError::Invalid(InvalidField::Nul(what))) => what,
        other => panic!("a NUL was taken: {other:?}"),
    };
    let mut new = fake_node();
    new.extra.insert("k".into(), json!("a\u{0}b"));
    assert_eq!(nul(store.create_node(new).await.map(drop)), "the node");
    assert_eq!(store.node_count().await.unwrap(), 0);
    let mut written_out = fake_node();
    written_out
        .extra
        .insert("k".into(), json!("\\u0000 is text"));
    let node = store.create_node(written_out).await.unwrap().uuid();
    assert_eq!(
        store.node(node).await.unwrap().body.extra["k"],
        "\\u0000 is text"
    );
    nul(store
        .update_node(node, |b| {
            b.extra.insert("a\u{0}".into(), json!(1));
            Ok(())
        })
        .await
        .map(drop));
    assert_eq!(store.node(node).await.unwrap().body.extra.len(), 1);
    let mut extra = serde_json::Map::new();
    extra.insert("k".into(), json!(["\u{0}"]));
    nul(store
        .create_port(node, "52:54:00:00:0e:01", extra)
        .await
        .map(drop));
    let port = store
        .create_port(node, "52:54:00:00:0e:01", Default::default())
        .await
        .unwrap();
    nul(store
        .update_port::<StoreError>(port.uuid, |p| {
            p.extra.insert("k".into(), json!("\u{0}"));
            Ok(())
        })
        .await
        .map(drop));
    assert!(store.port(port.uuid).await.unwrap().extra.is_empty());
    let doc = serde_json::from_value(json!({"name": "rack\u{0}"})).unwrap();
    let what = nul(store
        .insert_document("Chassis", Uuid::new_v4(), &doc, &["name"])
        .await);
    assert_eq!(what, "the Chassis");
    assert!(store.documents("Chassis").await.unwrap().is_empty());
}

on_both_backends!(
    a_store_that_cannot_write_refuses_as_transient_and_changes_nothing,
    a_string_holding_nul_is_refused_on_every_backend_and_changes_nothing,
);
