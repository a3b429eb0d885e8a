//! What only the shared store on a real PostgreSQL has (Debian's server, a database per
//! test): the schema's versions, touches as heap-only updates, the heartbeat-vs-sweeper
//! race with the two on different engines, and engines' leases, fencing and takeover. The
//! contract both stores keep is `store_contract`'s.

use deployd_test_support as common;

use std::time::Duration;

use common::postgres::{CLUSTER, database_of};
use common::store::{TO_WAIT_CALL_BACK, fake_node};
use deployd_engine::clock::Clock;
use deployd_engine::state_machine::{Event, ProvisionState, Timeouts};
use deployd_engine::store::postgres::{EngineId, Renewed, SCHEMA_VERSION, SharedStore};
use deployd_engine::store::{Store, StoreConfig, StoreError};
use uuid::Uuid;

const CALLBACK: Duration = Duration::from_secs(60);

async fn engine(url: &str) -> SharedStore {
    SharedStore::connect(url, Timeouts::uniform(CALLBACK))
        .await
        .unwrap()
}

/// A node walked from enroll through `events` by the store's own transitions.
async fn walked(store: &SharedStore, events: &[Event]) -> Uuid {
    walked_from(store, fake_node(), events).await
}

/// [`walked`], enrolled as `new`.
async fn walked_from(
    store: &SharedStore,
    new: deployd_engine::node::NewNode,
    events: &[Event],
) -> Uuid {
    let uuid = store.create_node(new).await.unwrap().uuid();
    for &event in events {
        store
            .apply_event(uuid, None, event, None, None)
            .await
            .unwrap();
    }
    uuid
}

/// What `deployd serve --store-url` opens: an engine joining the database fails the
/// nodes an engine left busy without a claim, in the words sled's recovery uses, leaves
/// alone the busy node a live engine's step claims, and re-derives the waiting ones'
/// deadlines for the timeouts configured now.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_engine_at_start_fails_unclaimed_busy_nodes_and_rederives_waiting_ones() {
    let url = CLUSTER.database();
    let old = engine(&url).await;
    // A live engine's step holds a busy node of its own.
    let live = std::sync::Arc::new(engine(&url).await);
    let live =
        deployd_engine::store::postgres::Membership::join(live, EngineId::named("live:6385"), &[])
            .await
            .unwrap();
    let held = walked(&old, &TO_WAIT_CALL_BACK[..5]).await;
    live.claim(held).await.unwrap();
    let busy = walked(&old, &TO_WAIT_CALL_BACK[..5]).await;
    let waiting = walked(&old, &TO_WAIT_CALL_BACK).await;
    let idle = walked(&old, &[]).await;
    assert_eq!(
        old.node(busy).await.unwrap().state(),
        ProvisionState::Deploying
    );
    let recorded = old.history_of(busy).await.unwrap().len();
    let longer = Duration::from_secs(600);
    // With `node_history` off, as configured here, the failure is not recorded.
    let quiet = StoreConfig {
        node_history: false,
        ..StoreConfig::default()
    };
    let (store, recovery) = Store::open_shared(
        &url,
        "restarted:6385",
        "",
        &quiet,
        Timeouts::uniform(longer),
        Clock::new(),
    )
    .await
    .unwrap();
    assert_eq!(recovery.nodes, 4);
    assert_eq!(
        store.node(held).await.unwrap().state(),
        ProvisionState::Deploying,
        "a live engine's step was failed"
    );
    assert_eq!(
        recovery.failed,
        [(
            busy,
            ProvisionState::Deploying,
            ProvisionState::DeployFailed
        )]
    );
    assert_eq!((recovery.waiting, recovery.rescheduled), (1, 1));
    let failed = store.node(busy).await.unwrap();
    assert_eq!(failed.state(), ProvisionState::DeployFailed);
    assert_eq!(
        failed.body.last_error.as_deref(),
        Some(
            format!(
                "deployd restarted while node {busy} was in \"deploying\"; that operation cannot be resumed, so the node was moved to \"deploy failed\""
            )
            .as_str()
        )
    );
    assert_eq!(store.history_of(busy).await.unwrap().len(), recorded);
    assert!(recorded > 0, "the first engine recorded the walk");
    store.milestone(busy, "not recorded".into()).await.unwrap();
    assert_eq!(store.history_of(busy).await.unwrap().len(), recorded);
    let p = store.node(waiting).await.unwrap().provision;
    assert_eq!(p.state, ProvisionState::WaitCallBack);
    assert_eq!(p.deadline, Some(p.updated_at.plus(longer)));
    assert!(p.indexed.is_some() && p.indexed <= p.deadline);
    assert_eq!(
        store.node(idle).await.unwrap().state(),
        ProvisionState::Enroll
    );
    // Its lease lives beside the other's, and leaving ends it.
    live.leave().await.unwrap();
    let alive: Vec<String> = old
        .engines()
        .await
        .unwrap()
        .into_iter()
        .filter(|e| e.alive)
        .map(|e| e.hostname)
        .collect();
    assert_eq!(alive, ["restarted:6385"]);
    store.leave().await.unwrap();
    assert!(old.engines().await.unwrap().iter().all(|e| !e.alive));
}

/// TLS to the database as the URL asks for it: over TLS, the server's certificate checked
/// against the CA in `sslrootcert` and its name against the URL's host; another CA, or
/// another name, is refused, naming the certificate.
#[tokio::test]
async fn a_url_that_asks_for_tls_is_served_over_tls_checked_against_its_ca() {
    let url = CLUSTER.database();
    let db = database_of(&url).to_owned();
    let ca = CLUSTER.ca_file().display().to_string();
    let over_tls = |db: &str| {
        CLUSTER.psql(
            "postgres",
            &format!(
                "SELECT count(*) FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid)
                 WHERE a.datname = '{db}' AND s.ssl"
            ),
        )
    };
    let plain = engine(&url).await;
    plain.create_node(fake_node()).await.unwrap();
    assert_eq!(over_tls(&db).trim(), "0", "a URL without sslmode is plain");
    drop(plain);

    let verified = format!("{url}?sslmode=verify-full&sslrootcert={ca}");
    let store = SharedStore::connect(&verified, Timeouts::uniform(CALLBACK))
        .await
        .unwrap();
    let node = store.create_node(fake_node()).await.unwrap().uuid();
    assert_eq!(store.node(node).await.unwrap().uuid(), node);
    let mut listener = store.listen_deadlines().await.unwrap();
    walked(&store, &TO_WAIT_CALL_BACK).await;
    tokio::time::timeout(Duration::from_secs(10), listener.next())
        .await
        .expect("a deadline notified over TLS")
        .expect("the listener's connection lives");
    assert_ne!(over_tls(&db).trim(), "0", "the store's connections use TLS");

    let dir = tempfile::tempdir().unwrap();
    let wrong = common::postgres::another_ca(dir.path());
    let untrusted = format!("{url}?sslmode=require&sslrootcert={}", wrong.display());
    let Err(e) = SharedStore::connect(&untrusted, Timeouts::uniform(CALLBACK)).await else {
        panic!("a server signed by another CA was trusted");
    };
    assert!(e.to_string().contains("certificate"), "{e}");
    let misnamed = verified.replace("127.0.0.1", "localhost");
    let Err(e) = SharedStore::connect(&misnamed, Timeouts::uniform(CALLBACK)).await else {
        panic!("a certificate for 127.0.0.1 was taken for localhost");
    };
    assert!(e.to_string().contains("certificate"), "{e}");
}

/// The README's least-privilege role: one that may read and write the tables a migration
/// made, and change nothing else, serves an engine — enrolment, a deploy's wait, a touch,
/// a sweep, documents, its lease — and cannot migrate.
#[tokio::test]
async fn a_role_that_can_only_read_and_write_the_tables_serves_an_engine() {
    let url = CLUSTER.database();
    let db = database_of(&url).to_owned();
    drop(engine(&url).await);
    let role = format!("serve_{db}");
    CLUSTER.psql(
        &db,
        &format!(
            "CREATE ROLE {role} LOGIN;
             GRANT CONNECT ON DATABASE {db} TO {role};
             GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {role};
             GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO {role};"
        ),
    );
    let as_role = url.replacen("://deployd@", &format!("://{role}@"), 1);
    assert_ne!(as_role, url);
    let store = SharedStore::connect(&as_role, Timeouts::uniform(CALLBACK))
        .await
        .unwrap();
    let lease = store
        .register(&EngineId::named("least"), &[])
        .await
        .unwrap();
    let node = walked(&store, &TO_WAIT_CALL_BACK).await;
    store.touch(node, Some(3)).await.unwrap();
    assert!(
        store
            .fail_expired(10, Some(&lease))
            .await
            .unwrap()
            .is_empty()
    );
    let doc = serde_json::from_value(serde_json::json!({"name": "rack"})).unwrap();
    store
        .insert_document("Chassis", Uuid::new_v4(), &doc, &["name"])
        .await
        .unwrap();
    store.leave(&lease).await.unwrap();
    let refused = CLUSTER.psql_as(&db, &role, "CREATE TABLE sneaky (x int)");
    assert!(refused.contains("permission denied"), "{refused}");
}

#[tokio::test]
async fn the_schema_is_migrated_once_and_a_newer_one_is_refused_with_its_version() {
    let url = CLUSTER.database();
    let db = database_of(&url);
    assert_eq!(
        deployd_engine::store::postgres::migrate(&url)
            .await
            .unwrap(),
        (0, SCHEMA_VERSION)
    );
    // A second engine finds it done; two more at once do not race.
    let (a, b) = tokio::join!(
        deployd_engine::store::postgres::migrate(&url),
        deployd_engine::store::postgres::migrate(&url)
    );
    assert_eq!(a.unwrap(), (SCHEMA_VERSION, SCHEMA_VERSION));
    assert_eq!(b.unwrap(), (SCHEMA_VERSION, SCHEMA_VERSION));
    CLUSTER.psql(
        db,
        &format!("UPDATE deployd_schema SET version = {}", SCHEMA_VERSION + 1),
    );
    let refused = SharedStore::connect(&url, Timeouts::uniform(CALLBACK)).await;
    let Err(e @ StoreError::Schema { .. }) = refused else {
        panic!("a newer schema was not refused");
    };
    assert!(
        e.to_string().contains(&format!(
            "schema is version {}; this deployd knows versions up to {SCHEMA_VERSION}",
            SCHEMA_VERSION + 1
        )),
        "{e}"
    );
    // Refused, and left as it was.
    assert_eq!(
        CLUSTER.psql(db, "SELECT version FROM deployd_schema"),
        (SCHEMA_VERSION + 1).to_string()
    );
}

#[tokio::test]
async fn a_touch_moves_the_clock_and_deadline_on_the_databases_clock_and_writes_no_index() {
    let url = CLUSTER.database();
    let store = engine(&url).await;
    let uuid = walked(&store, &TO_WAIT_CALL_BACK).await;
    let before = store.node(uuid).await.unwrap().provision;
    assert_eq!(before.state, ProvisionState::WaitCallBack);
    assert_eq!(before.deadline, Some(before.updated_at.plus(CALLBACK)));
    assert_eq!(before.indexed, before.deadline);
    // What the node's indexes hold before the touches (the transition into wait call-back
    // filed the due entry: that update was not heap-only).
    let db = database_of(&url);
    CLUSTER.psql(db, "CREATE EXTENSION IF NOT EXISTS pageinspect");
    let entries = || {
        ["nodes_pkey", "nodes_due"].map(|index| {
            CLUSTER.psql(
                db,
                &format!("SELECT count(*) FROM bt_page_items(get_raw_page('{index}', 1))"),
            )
        })
    };
    let indexed = entries();
    let mut last = before;
    for _ in 0..20 {
        let touched = store.touch(uuid, None).await.unwrap();
        assert!(touched.updated_at > last.updated_at);
        assert_eq!(touched.deadline, Some(touched.updated_at.plus(CALLBACK)));
        // The sweeper's entry stays where it was: a touch does not move the index.
        assert_eq!(touched.indexed, before.indexed);
        assert_eq!(store.node(uuid).await.unwrap().provision, touched);
        last = touched;
    }
    // No touch wrote an index entry: each was a heap-only update.
    assert_eq!(
        entries(),
        indexed,
        "index entries (primary key, due) after 20 touches"
    );
    // Not waiting: refused with the state, and nothing written.
    let enrolled = store.create_node(fake_node()).await.unwrap().uuid();
    let Err(StoreError::NotWaiting { state, .. }) = store.touch(enrolled, None).await else {
        panic!("a node in enroll was touched");
    };
    assert_eq!(state, ProvisionState::Enroll);
    let Err(StoreError::NodeNotFound(_)) = store.touch(Uuid::new_v4(), None).await else {
        panic!("an unknown node was touched");
    };
}

#[tokio::test]
async fn an_engine_past_its_lease_is_fenced_declared_dead_once_and_its_nodes_taken_over() {
    let url = CLUSTER.database();
    let db = database_of(&url);
    let store = engine(&url).await;
    let mut a = store
        .register(&EngineId::named("engine-a"), &["fake".into()])
        .await
        .unwrap();
    let b = store
        .register(&EngineId::named("engine-b"), &[])
        .await
        .unwrap();
    let c = store
        .register(&EngineId::named("engine-c"), &[])
        .await
        .unwrap();
    // A is busy deploying one node and waits on another's agent.
    let busy = walked(&store, &TO_WAIT_CALL_BACK[..5]).await;
    let waiting = walked(&store, &TO_WAIT_CALL_BACK).await;
    store.claim(busy, &a).await.unwrap();
    store.claim(waiting, &a).await.unwrap();
    let Err(StoreError::NotOwner { owner, .. }) = store.claim(busy, &b).await else {
        panic!("B claimed A's node");
    };
    assert_eq!(owner, "engine-a");
    let Err(StoreError::NotOwner { .. }) =
        store.apply_event(busy, None, Event::Fail, None, None).await
    else {
        panic!("an unclaimed write changed A's node");
    };
    assert!(store.declare_dead(&b).await.unwrap().is_empty());

    // A stops renewing: past its lease, its own writes are fenced.
    CLUSTER.psql(
        db,
        &format!(
            "UPDATE engines SET lease_until = now() - interval '1 second' WHERE id = {}",
            a.id
        ),
    );
    let Err(StoreError::Fenced(_)) = store
        .apply_event(busy, None, Event::Wait, None, Some(&a))
        .await
    else {
        panic!("a lapsed engine's write landed");
    };
    // B and C both try to declare it dead; exactly one does.
    let (by_b, by_c) = tokio::join!(store.declare_dead(&b), store.declare_dead(&c));
    let (by_b, by_c) = (by_b.unwrap(), by_c.unwrap());
    assert_eq!(by_b.len() + by_c.len(), 1, "{by_b:?} {by_c:?}");
    let (winner, dead) = if by_b.is_empty() {
        (c, &by_c[0])
    } else {
        (b, &by_b[0])
    };
    assert_eq!((dead.id, dead.hostname.as_str()), (a.id, "engine-a"));
    let taken = store.take_over(&winner, dead).await.unwrap();
    assert_eq!((taken.failed, taken.released), (vec![busy], vec![waiting]));
    // Settled: the look for orphans reads no node for A any more, nor for B and C, whose
    // epochs never died.
    assert!(store.orphaned().await.unwrap().is_empty());
    let settled = format!("SELECT settled_epoch FROM engines WHERE id = {}", a.id);
    assert_eq!(CLUSTER.psql(db, &settled), a.epoch.to_string());
    let failed = store.node(busy).await.unwrap();
    assert_eq!(failed.provision.state, ProvisionState::DeployFailed);
    let why = failed.body.last_error.unwrap();
    assert!(
        why.starts_with(&format!(
            "engine engine-a (id {}) was working on this node in \"deploying\" and stopped",
            a.id
        )),
        "{why}"
    );
    // The waiting node carries on: any engine's touch lands, any engine may claim it.
    store.touch(waiting, None).await.unwrap();
    store.claim(waiting, &b).await.unwrap();
    store.release(waiting, &b).await.unwrap();

    // A wakes: its renewal finds it dead, and it rejoins under a new epoch.
    let old = a;
    assert_eq!(store.renew(&mut a).await.unwrap(), Renewed::Rejoined);
    assert_eq!(a.epoch, old.epoch + 1);
    assert_eq!(store.renew(&mut a).await.unwrap(), Renewed::Held);
    let Err(StoreError::Fenced(_)) = store.claim(waiting, &old).await else {
        panic!("a claim under the dead epoch landed");
    };
    store.claim(waiting, &a).await.unwrap();
    assert!(
        store.orphaned().await.unwrap().is_empty(),
        "a claim under a live epoch is no orphan"
    );
    let engines = store.engines().await.unwrap();
    let alive: Vec<(&str, bool)> = engines
        .iter()
        .map(|e| (e.hostname.as_str(), e.alive))
        .collect();
    assert_eq!(
        alive,
        [("engine-a", true), ("engine-b", true), ("engine-c", true)]
    );
    assert_eq!(engines[0].drivers, ["fake"]);
}

/// Short leases, so that a takeover happens within the test.
const TIMES: deployd_engine::store::postgres::LeaseTimes =
    deployd_engine::store::postgres::LeaseTimes {
        lease: Duration::from_millis(1500),
        renew_every: Duration::from_millis(200),
    };

/// Polls `check` every 50 ms for up to `limit`; whether it came true.
async fn eventually<F: Future<Output = bool>>(
    limit: Duration,
    mut check: impl FnMut() -> F,
) -> bool {
    let until = tokio::time::Instant::now() + limit;
    while tokio::time::Instant::now() < until {
        if check().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_engines_lease_lapses_and_a_survivor_takes_its_nodes_over() {
    use deployd_engine::store::postgres::Membership;
    use std::sync::Arc;
    let url = CLUSTER.database();
    let store = Arc::new(engine(&url).await.with_lease_times(TIMES));
    let a = Membership::join(store.clone(), EngineId::named("engine-a"), &[])
        .await
        .unwrap();
    let b = Membership::join(store.clone(), EngineId::named("engine-b"), &[])
        .await
        .unwrap();
    let busy = walked(&store, &TO_WAIT_CALL_BACK[..5]).await;
    let lease_a = a.current().expect("a fresh lease is held");
    store.claim(busy, &lease_a).await.unwrap();
    // Both renew: after several lease lengths both still hold theirs.
    tokio::time::sleep(TIMES.lease * 2).await;
    assert!(a.current().is_some() && b.current().is_some());
    assert_eq!(
        store.node(busy).await.unwrap().provision.state,
        ProvisionState::Deploying
    );

    // A stops (its process gone): it stops renewing, knows its lease is no longer sure,
    // and B takes its node over once the lease has expired.
    drop(a);
    let failed = eventually(TIMES.lease * 4, || async {
        store.node(busy).await.unwrap().provision.state == ProvisionState::DeployFailed
    })
    .await;
    assert!(failed, "B did not take A's node over");
    let why = store.node(busy).await.unwrap().body.last_error.unwrap();
    assert!(why.starts_with("engine engine-a"), "{why}");
    assert!(b.current().is_some());
    let engines = store.engines().await.unwrap();
    let alive: Vec<(&str, bool)> = engines
        .iter()
        .map(|e| (e.hostname.as_str(), e.alive))
        .collect();
    assert_eq!(alive, [("engine-a", false), ("engine-b", true)]);
}

/// An engine's handle on the database, joined as `name` with short leases.
async fn joined(shared: &std::sync::Arc<SharedStore>, name: &str) -> std::sync::Arc<Store> {
    use deployd_engine::store::postgres::Membership;
    let membership = Membership::join(shared.clone(), EngineId::named(name), &[])
        .await
        .unwrap();
    std::sync::Arc::new(Store::shared(
        shared.clone(),
        Some(std::sync::Arc::new(membership)),
        Timeouts::uniform(CALLBACK),
        Clock::new(),
    ))
}

/// Two engines' conductors claim one node as two tasks of one engine do, in the
/// database: one is refused naming the other, waits for it within its lock wait, and
/// gets it once the other let go. The holder's writes are fenced by its claim: another
/// engine's write is refused naming it, and its own after it was declared dead are
/// refused, even an edit's. Many claims and releases in a row by one engine never lose
/// one to a release still on its way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_engines_claim_a_node_in_turn_and_the_holders_writes_are_fenced() {
    use deployd_engine::reservations::{Refused, Reservations};
    use std::sync::Arc;
    let url = CLUSTER.database();
    let shared = Arc::new(engine(&url).await.with_lease_times(TIMES));
    let (a, b) = (
        joined(&shared, "engine-a:6385").await,
        joined(&shared, "engine-b:6385").await,
    );
    let (at_a, at_b) = (
        Arc::new(Reservations::backed_by(a.clone())),
        Arc::new(Reservations::backed_by(b.clone())),
    );
    let node = walked(&shared, &TO_WAIT_CALL_BACK[..5]).await;

    let held = at_a.try_claim(node, "deploy").await.unwrap();
    a.may_act(node).unwrap();
    match at_b.try_claim(node, "update").await {
        Err(Refused::Held(h)) => {
            assert_eq!((h.host.as_str(), h.task), ("engine-a:6385", None))
        }
        other => panic!("B claimed A's node: {:?}", other.is_ok()),
    }
    let Err(StoreError::NotOwner { owner, .. }) = b.apply_event(node, Event::Fail, None).await
    else {
        panic!("B's write changed the node A holds");
    };
    assert_eq!(owner, "engine-a:6385");
    // A's own write, fenced by its claim, lands.
    a.apply_event(node, Event::Wait, None).await.unwrap();

    // B waits for A within its lock wait, and gets the node once A lets go.
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        drop(held);
    });
    let by_b = at_b
        .claim_within(node, "update", Duration::from_secs(2))
        .await
        .unwrap_or_else(|_| panic!("B did not get the node A let go"));
    let Err(Refused::Held(h)) = at_a.try_claim(node, "heartbeat").await else {
        panic!("A claimed the node B holds");
    };
    assert_eq!(h.host, "engine-b:6385");
    b.update_node(node, |body| {
        body.extra.insert("by".into(), "b".into());
        Ok(())
    })
    .await
    .unwrap();
    drop(by_b);

    // One engine's claims and releases in a row: each claim is had, none lost to the
    // release before it (its writes would be refused as fenced if it were).
    for round in 0..50 {
        let claim = at_a
            .claim_within(node, "heartbeat", Duration::from_secs(2))
            .await;
        let claim = claim.unwrap_or_else(|_| panic!("round {round}: A did not get the node"));
        a.update_node(node, |body| {
            body.extra.insert("round".into(), round.into());
            Ok(())
        })
        .await
        .unwrap_or_else(|e| panic!("round {round}: {e}"));
        drop(claim);
    }

    // A is declared dead while it holds the node: its writes are refused from then on.
    // (The last round's release may still be on its way: the reservation waits for it.)
    let claim = at_a
        .claim_within(node, "deploy", Duration::from_secs(2))
        .await;
    let claim = claim.unwrap_or_else(|_| panic!("A did not get the node back"));
    let db = database_of(&url);
    let epoch_of_a = || async {
        let engines = shared.engines().await.unwrap();
        let a = engines.iter().find(|e| e.hostname == "engine-a:6385");
        a.filter(|e| e.alive).map(|e| e.epoch)
    };
    let before = epoch_of_a().await.expect("A is alive");
    CLUSTER.psql(
        db,
        "UPDATE engines SET dead_at = now(), dead_by = id WHERE hostname = 'engine-a:6385'",
    );
    // A's next renewal finds it dead and rejoins under a new epoch: alive again, but the
    // claim it holds is of the epoch that died.
    let rejoined = eventually(TIMES.lease * 2, || async {
        epoch_of_a().await.is_some_and(|epoch| epoch > before)
    })
    .await;
    assert!(rejoined, "A did not rejoin");
    // Nor does A act on the node's machine any more (its BMC, its agent), though it may
    // act on a node it claims afresh under its new epoch.
    let Err(StoreError::Fenced(why)) = a.may_act(node) else {
        panic!("a step of the epoch that died may still act");
    };
    assert!(why.contains("declared dead"), "{why}");
    let other = walked(&shared, &TO_WAIT_CALL_BACK).await;
    a.may_act(other).unwrap();
    let Err(StoreError::Fenced(_)) = a.apply_event(node, Event::Fail, None).await else {
        panic!("a dead engine's transition landed");
    };
    let Err(StoreError::Fenced(_)) = a
        .update_node(node, |body| {
            body.extra.insert("by".into(), "dead a".into());
            Ok(())
        })
        .await
    else {
        panic!("a dead engine's edit landed");
    };
    drop(claim);
    // B is not kept waiting by a dead engine's claim.
    let by_b = at_b.try_claim(node, "update").await;
    assert!(by_b.is_ok(), "a dead engine's claim kept B out");
    let body = b.node(node).await.unwrap().body;
    assert_eq!(body.extra["by"], "b");
    assert_eq!(body.extra["round"], 49);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sweepers_on_two_engines_fail_an_expired_node_once_woken_by_the_deadline_it_filed() {
    use deployd_engine::store::TimedOut;
    use deployd_engine::store::postgres::Membership;
    use deployd_engine::sweeper::{Sweeper, SweeperConfig, TimeoutHook};
    use std::sync::{Arc, Mutex};

    #[derive(Default)]
    struct Seen(Mutex<Vec<TimedOut>>);
    impl TimeoutHook for Seen {
        fn timed_out(&self, event: TimedOut) {
            self.0.lock().unwrap().push(event);
        }
    }
    let url = CLUSTER.database();
    let timeouts = Timeouts::uniform(Duration::from_secs(1));
    let seen = Arc::new(Seen::default());
    let mut sweepers = Vec::new();
    let mut stores = Vec::new();
    for name in ["engine-a", "engine-b"] {
        let store = Arc::new(
            SharedStore::connect(&url, timeouts)
                .await
                .unwrap()
                .with_lease_times(TIMES),
        );
        let member = Arc::new(
            Membership::join(store.clone(), EngineId::named(name), &[])
                .await
                .unwrap(),
        );
        // A check interval far past the test: only a notification can wake them in time.
        let config = SweeperConfig {
            check_interval: Duration::from_secs(600),
            batch: 100,
        };
        // Each engine's sweeper is the one every engine runs, over its handle.
        let handle = Store::shared(store.clone(), Some(member), timeouts, Clock::new());
        sweepers.push(Sweeper::spawn(Arc::new(handle), config, seen.clone()));
        stores.push(store);
    }
    // Both sweepers asleep on an empty index; then a node enters wait call-back with a
    // 1 s timeout, and no agent calls back.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let node = walked(&stores[0], &TO_WAIT_CALL_BACK).await;
    let failed = eventually(Duration::from_secs(20), || async {
        !seen.0.lock().unwrap().is_empty()
    })
    .await;
    assert!(failed, "no sweeper failed the node");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let seen = seen.0.lock().unwrap().clone();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(
        (seen[0].node, seen[0].failed_to),
        (node, ProvisionState::DeployFailed)
    );
    assert_eq!(
        stores[1].node(node).await.unwrap().provision.state,
        ProvisionState::DeployFailed
    );
    for sweeper in sweepers {
        sweeper.shutdown().await;
    }
}

/// A streamed answer (the node list) reads the fleet on a blocking thread, as the engine's
/// list does: each page is queried on the runtime meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocking_thread_reads_the_fleet_page_by_page() {
    let url = CLUSTER.database();
    let shared = std::sync::Arc::new(engine(&url).await);
    let timeouts = Timeouts::uniform(CALLBACK);
    let store = std::sync::Arc::new(Store::shared(shared, None, timeouts, Clock::new()));
    let all = common::store::enrolled(&store, 600).await;
    let reader = store.clone();
    let seen = tokio::task::spawn_blocking(move || {
        let mut nodes = reader.nodes_after(None);
        std::iter::from_fn(|| nodes.next_blocking())
            .map(|n| n.unwrap().uuid())
            .collect::<Vec<_>>()
    })
    .await
    .unwrap();
    assert_eq!(seen, all);
}

/// Two engines (two connections each, as their own handles) claim the same 200 nodes at
/// once, many times over: the claims go in groups, and each node is had by exactly one
/// engine in each round, the other told who holds it; every release then frees them all
/// for the next round.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grouped_claims_by_two_engines_at_once_give_each_node_to_exactly_one() {
    let url = CLUSTER.database();
    let (one, two) = (engine(&url).await, engine(&url).await);
    let a = one
        .register(&EngineId::named("engine-a"), &[])
        .await
        .unwrap();
    let b = two
        .register(&EngineId::named("engine-b"), &[])
        .await
        .unwrap();
    let mut nodes = Vec::new();
    for _ in 0..200 {
        nodes.push(one.create_node(fake_node()).await.unwrap().uuid());
    }
    let (one, two) = (std::sync::Arc::new(one), std::sync::Arc::new(two));
    for round in 0..25 {
        let claims = nodes.iter().flat_map(|&node| {
            let (one, two) = (one.clone(), two.clone());
            [
                tokio::spawn(async move { (node, "engine-a", one.claim(node, &a).await) }),
                tokio::spawn(async move { (node, "engine-b", two.claim(node, &b).await) }),
            ]
        });
        let mut had = std::collections::HashMap::new();
        for claim in futures_util::future::join_all(claims.collect::<Vec<_>>()).await {
            let (node, by, got) = claim.unwrap();
            match got {
                Ok(()) => assert!(
                    had.insert(node, by).is_none(),
                    "round {round}: both had {node}"
                ),
                Err(StoreError::NotOwner { .. }) => {}
                Err(e) => panic!("round {round}: {e}"),
            }
        }
        assert_eq!(had.len(), nodes.len(), "round {round}: a node no one had");
        let releases = had.iter().map(|(&node, &by)| {
            let (store, lease) = match by {
                "engine-a" => (one.clone(), a),
                _ => (two.clone(), b),
            };
            tokio::spawn(async move { store.release(node, &lease).await })
        });
        for released in futures_util::future::join_all(releases.collect::<Vec<_>>()).await {
            released.unwrap().unwrap();
        }
    }
}

/// A survivor that takes a dead engine's busy node over hands it on for its driver's
/// clean-up (the conductor runs it, as after a timeout), the node failed naming the dead
/// engine; a node the dead engine only waited on is not handed on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_survivor_hands_on_the_busy_nodes_it_failed_taking_over_for_their_clean_up() {
    use deployd_engine::store::postgres::Membership;
    let url = CLUSTER.database();
    let shared = || async { std::sync::Arc::new(engine(&url).await.with_lease_times(TIMES)) };
    let store = shared().await;
    let dying = Membership::join(store.clone(), EngineId::named("dying:6385"), &[])
        .await
        .unwrap();
    let survivor = Membership::join(shared().await, EngineId::named("survivor:6385"), &[])
        .await
        .unwrap();
    let mut failures = survivor.failures().expect("the first caller gets them");
    assert!(survivor.failures().is_none(), "later callers get nothing");
    let busy = walked(&store, &TO_WAIT_CALL_BACK[..5]).await;
    let waiting = walked(&store, &TO_WAIT_CALL_BACK).await;
    dying.claim(busy).await.unwrap();
    dying.claim(waiting).await.unwrap();
    // It stops renewing, as a killed engine does.
    drop(dying);
    let handed = tokio::time::timeout(Duration::from_secs(15), failures.recv())
        .await
        .expect("the busy node handed on within a lease and a renewal");
    assert_eq!(handed, Some(busy));
    let node = store.node(busy).await.unwrap();
    assert_eq!(node.state(), ProvisionState::DeployFailed);
    let why = node.body.last_error.unwrap_or_default();
    assert!(why.contains("dying:6385"), "{why}");
    assert!(
        tokio::time::timeout(Duration::from_secs(2), failures.recv())
            .await
            .is_err(),
        "the waiting node was handed on too"
    );
}

/// An engine declared dead that rejoins before any survivor took its nodes over leaves
/// its old epoch's claims behind: they are found (though it lives again), taken over, and
/// the epoch settled; its new epoch's claims are left to it.
#[tokio::test]
async fn claims_left_under_an_epoch_an_engine_rejoined_past_are_found_and_taken_over() {
    let url = CLUSTER.database();
    let db = database_of(&url);
    let store = engine(&url).await;
    let mut a = store
        .register(&EngineId::named("engine-a"), &[])
        .await
        .unwrap();
    let b = store
        .register(&EngineId::named("engine-b"), &[])
        .await
        .unwrap();
    let left = walked(&store, &TO_WAIT_CALL_BACK).await;
    let kept = walked(&store, &TO_WAIT_CALL_BACK).await;
    store.claim(left, &a).await.unwrap();
    CLUSTER.psql(
        db,
        &format!(
            "UPDATE engines SET lease_until = now() - interval '1 second' WHERE id = {}",
            a.id
        ),
    );
    assert_eq!(store.declare_dead(&b).await.unwrap().len(), 1);
    let old = a;
    assert_eq!(store.renew(&mut a).await.unwrap(), Renewed::Rejoined);
    store.claim(kept, &a).await.unwrap();
    let orphaned = store.orphaned().await.unwrap();
    assert_eq!(
        orphaned.iter().map(|d| (d.id, d.epoch)).collect::<Vec<_>>(),
        [(a.id, old.epoch)]
    );
    let taken = store.take_over(&b, &orphaned[0]).await.unwrap();
    assert_eq!((taken.failed, taken.released), (vec![], vec![left]));
    assert!(store.orphaned().await.unwrap().is_empty());
    let Err(StoreError::NotOwner { owner, .. }) = store.claim(kept, &b).await else {
        panic!("the rejoined engine's new claim was taken over");
    };
    assert_eq!(owner, "engine-a");
}

/// A node of conductor group `group`, walked to `wait call-back`.
async fn waiting_in_group(store: &SharedStore, group: &str) -> Uuid {
    let mut new = fake_node();
    new.attrs
        .insert("conductor_group".into(), serde_json::json!(group));
    walked_from(store, new, &TO_WAIT_CALL_BACK).await
}

/// Conductor groups on the shared store: an engine claims only its group's nodes (in a
/// claim of its own and in a heartbeat's touch, which tells the node's group), sweeps only
/// theirs, and a dead engine's nodes are taken over by its group's survivors alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_engine_claims_sweeps_and_takes_over_only_the_nodes_of_its_conductor_group() {
    use deployd_engine::store::postgres::Membership;
    let url = CLUSTER.database();
    let store = std::sync::Arc::new(engine(&url).await.with_lease_times(TIMES));
    let in_group = |hostname: &str, group: &str| EngineId {
        hostname: hostname.into(),
        conductor_group: group.into(),
        url: String::new(),
    };
    let plain = store.register(&in_group("plain", ""), &[]).await.unwrap();
    let rack = store
        .register(&in_group("rack", "rack2"), &[])
        .await
        .unwrap();
    let ours = waiting_in_group(&store, "").await;
    let theirs = waiting_in_group(&store, "rack2").await;

    let Err(StoreError::Fenced(why)) = store.claim(theirs, &plain).await else {
        panic!("an engine of the default group claimed a rack2 node");
    };
    assert!(why.contains(r#"conductor group "rack2""#), "{why}");
    assert!(store.claim(ours, &rack).await.is_err());
    let touched = store
        .touch_heard(theirs, Some(1), None, Some(plain))
        .await
        .unwrap();
    assert_eq!(touched.conductor_group, "rack2");
    assert!(
        matches!(touched.claimed, Some(Err(_))),
        "the touch claimed it"
    );
    let touched = store
        .touch_heard(theirs, Some(2), None, Some(rack))
        .await
        .unwrap();
    assert!(matches!(touched.claimed, Some(Ok(()))));
    store.release(theirs, &rack).await.unwrap();

    let later = Some(deployd_engine::clock::Timestamp::from_micros(i64::MAX / 2));
    let swept = store
        .fail_expired_at(later, 10, Some(&plain))
        .await
        .unwrap();
    assert_eq!(swept.iter().map(|t| t.node).collect::<Vec<_>>(), [ours]);
    let swept = store.fail_expired_at(later, 10, Some(&rack)).await.unwrap();
    assert_eq!(swept.iter().map(|t| t.node).collect::<Vec<_>>(), [theirs]);

    // A rack2 engine dies holding a rack2 node: an engine of the default group leaves it
    // as it is; one of rack2 takes it over.
    let held = waiting_in_group(&store, "rack2").await;
    let dying = Membership::join(store.clone(), in_group("dying", "rack2"), &[])
        .await
        .unwrap();
    dying.claim(held).await.unwrap();
    let other = Membership::join(store.clone(), in_group("other", ""), &[])
        .await
        .unwrap();
    drop(dying);
    tokio::time::sleep(TIMES.lease * 3).await;
    let dead = store.orphaned().await.unwrap();
    assert_eq!(
        dead.iter()
            .map(|d| (d.hostname.as_str(), d.conductor_group.as_str()))
            .collect::<Vec<_>>(),
        [("dying", "rack2")],
        "declared dead, its claim not taken over by the other group's engine"
    );
    let mate = Membership::join(store.clone(), in_group("mate", "rack2"), &[])
        .await
        .unwrap();
    let deadline = tokio::time::Instant::now() + TIMES.lease * 4;
    while !store.orphaned().await.unwrap().is_empty() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "rack2's survivor took nothing over"
        );
        tokio::time::sleep(TIMES.renew_every).await;
    }
    mate.claim(held).await.unwrap();
    drop(other);
}

/// Each engine that hears an agent sees its image transfer start and end in its own
/// memory; the node's history records each once per boot, whichever engines saw them, and
/// a new boot's transfer is recorded again.
#[tokio::test]
async fn an_image_transfer_is_recorded_once_per_boot_by_whichever_engine_sees_it_first() {
    use deployd_engine::store::AgentHeard;
    use deployd_engine::store::history::Transfer;
    let url = CLUSTER.database();
    let engines = [engine(&url).await, engine(&url).await];
    let node = walked(&engines[0], &TO_WAIT_CALL_BACK).await;
    let notes = || async {
        let events = engines[0].history_of(node).await.unwrap();
        let notes: Vec<String> = events
            .iter()
            .map(|e| e.event.clone())
            .filter(|e| e.contains("Image transfer"))
            .collect();
        notes
    };
    let boot = |id: &str| AgentHeard {
        boot: Some(id.into()),
        ..AgentHeard::default()
    };
    let started = Transfer::Started {
        total: Some(8 << 20),
    };
    let ended = Transfer::Ended {
        written: 8 << 20,
        seconds: 0.0,
    };
    engines[0]
        .touch_heard(node, None, Some(&boot("one")), None)
        .await
        .unwrap();
    for engine in &engines {
        engine.transfer_milestone(node, &started).await.unwrap();
    }
    for engine in &engines {
        engine.transfer_milestone(node, &ended).await.unwrap();
    }
    let once = notes().await;
    assert_eq!(once.len(), 2, "{once:?}");
    assert!(
        once[0].contains("Image transfer started (8388608 bytes)"),
        "{once:?}"
    );
    assert!(
        once[1].contains("Image transfer ended: 8388608 bytes"),
        "{once:?}"
    );
    // The same boot heard again records nothing more; a new boot's transfer is its own.
    engines[1]
        .touch_heard(node, None, Some(&boot("one")), None)
        .await
        .unwrap();
    engines[1].transfer_milestone(node, &started).await.unwrap();
    assert_eq!(notes().await.len(), 2);
    engines[1]
        .touch_heard(node, None, Some(&boot("two")), None)
        .await
        .unwrap();
    engines[1].transfer_milestone(node, &started).await.unwrap();
    engines[0].transfer_milestone(node, &started).await.unwrap();
    assert_eq!(notes().await.len(), 3, "{:?}", notes().await);
}
