//! Microversions 1.69 to 1.115, as Ironic 39 gates them: runbooks and inspection rules,
//! the later node and port fields, node history, virtual media, boot mode, shards and
//! child nodes, and the provision parameters of later versions. Each feature is absent
//! (or refused) below its version and present at it.

use deployd_test_support as common;

use common::server::{Server, start};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

async fn ok(s: &Server, method: Method, path: &str, version: &str, body: Option<Value>) -> Value {
    let a = s.at(method.clone(), path, version, body).await;
    assert!(
        a.status.is_success(),
        "{method} {path} at {version}: {} {:?}",
        a.status,
        a.body
    );
    a.body
}

fn bios_step() -> Value {
    json!([{"interface": "bios", "step": "apply_configuration", "args": {}, "order": 10}])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runbooks_are_stored_validated_and_run_by_manual_cleaning() {
    let s = start(|_| {}).await;
    let missing = s.at(Method::GET, "/v1/runbooks", "1.91", None).await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
    assert_eq!(
        ok(&s, Method::GET, "/v1/runbooks", "1.92", None).await,
        json!({"runbooks": []})
    );
    // Before 1.112 the name is a trait, and there is no description.
    let steps = json!([{"interface": "deploy", "step": "erase_devices_metadata", "order": "5"}]);
    for (body, version, status) in [
        (json!({"name": "not-a-trait", "steps": steps}), "1.92", 400),
        (json!({"name": "CUSTOM_A", "steps": []}), "1.92", 400),
        (
            json!({"name": "CUSTOM_A", "steps": [{"interface": "deploy", "step": "x"}]}),
            "1.92",
            400,
        ),
        (
            json!({"name": "CUSTOM_A", "steps": [{"interface": "bogus", "step": "x", "order": 1}]}),
            "1.92",
            400,
        ),
        (
            json!({"name": "CUSTOM_A", "steps": steps, "description": "d"}),
            "1.92",
            406,
        ),
    ] {
        let a = s
            .at(Method::POST, "/v1/runbooks", version, Some(body.clone()))
            .await;
        assert_eq!(a.status.as_u16(), status, "{body}: {:?}", a.body);
    }
    let wipe = ok(
        &s,
        Method::POST,
        "/v1/runbooks",
        "1.92",
        Some(json!({"name": "CUSTOM_WIPE", "steps": steps})),
    )
    .await;
    assert_eq!(
        wipe["steps"][0]["order"], 5,
        "a string of digits is an order"
    );
    let again = json!({"name": "CUSTOM_WIPE", "steps": steps});
    let taken = s
        .at(Method::POST, "/v1/runbooks", "1.92", Some(again))
        .await;
    assert_eq!(taken.status, StatusCode::CONFLICT, "names are unique");
    assert_eq!(wipe["steps"][0]["args"], json!({}));
    assert_eq!(
        (wipe["public"].clone(), wipe["owner"].clone()),
        (json!(false), Value::Null)
    );
    assert!(wipe.get("traits").is_none(), "traits come with 1.112");
    // From 1.112: logical names, a description, and traits of the runbook's own.
    let bios = ok(
        &s,
        Method::POST,
        "/v1/runbooks",
        "1.112",
        Some(json!({"name": "enable-ht", "steps": bios_step(), "description": "HT on"})),
    )
    .await;
    assert_eq!(bios["traits"], json!([]));
    assert_eq!(
        ok(&s, Method::GET, "/v1/runbooks/enable-ht", "1.112", None).await["description"],
        "HT on"
    );
    let traits = "/v1/runbooks/enable-ht/traits";
    assert_eq!(
        s.at(Method::GET, traits, "1.111", None).await.status,
        StatusCode::NOT_FOUND
    );
    ok(
        &s,
        Method::PUT,
        &format!("{traits}/CUSTOM_HT"),
        "1.112",
        None,
    )
    .await;
    ok(
        &s,
        Method::PUT,
        traits,
        "1.112",
        Some(json!({"traits": ["CUSTOM_HT", "CUSTOM_B"]})),
    )
    .await;
    ok(
        &s,
        Method::DELETE,
        &format!("{traits}/CUSTOM_NONE"),
        "1.112",
        None,
    )
    .await;
    assert_eq!(
        ok(&s, Method::GET, traits, "1.112", None).await,
        json!({"traits": ["CUSTOM_HT", "CUSTOM_B"]})
    );
    let bad = s
        .at(
            Method::PUT,
            traits,
            "1.112",
            Some(json!({"traits": ["lower"]})),
        )
        .await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
    let patched = ok(
        &s,
        Method::PATCH,
        "/v1/runbooks/enable-ht",
        "1.112",
        Some(json!([{"op": "add", "path": "/extra/answer", "value": 42}])),
    )
    .await;
    assert_eq!(patched["extra"], json!({"answer": 42}));
    let ro = s
        .at(
            Method::PATCH,
            "/v1/runbooks/enable-ht",
            "1.112",
            Some(json!([{"op": "replace", "path": "/traits", "value": []}])),
        )
        .await;
    assert_eq!(
        ro.status,
        StatusCode::BAD_REQUEST,
        "traits change only through /traits"
    );

    // Manual cleaning by runbook: the node needs one of its traits, and its steps must be
    // steps deployd runs.
    let node = s.node(json!({"driver": "fake"})).await;
    s.walk(&node, &[("manage", "manageable")]).await;
    let clean = |runbook: &str| json!({"target": "clean", "runbook": runbook});
    let path = format!("/v1/nodes/{node}/states/provision");
    let refused = s
        .at(Method::PUT, &path, "1.92", Some(clean("CUSTOM_WIPE")))
        .await;
    assert_eq!(refused.status, StatusCode::BAD_REQUEST);
    assert!(
        refused.fault().contains("does not have any of the traits"),
        "{}",
        refused.fault()
    );
    let old = s
        .at(Method::PUT, &path, "1.91", Some(clean("CUSTOM_WIPE")))
        .await;
    assert_eq!(old.status, StatusCode::NOT_ACCEPTABLE);
    let both = json!({"target": "clean", "runbook": "CUSTOM_WIPE", "clean_steps": steps});
    assert_eq!(
        s.at(Method::PUT, &path, "1.92", Some(both)).await.status,
        StatusCode::BAD_REQUEST
    );
    ok(
        &s,
        Method::PUT,
        &format!("/v1/nodes/{node}/traits/CUSTOM_WIPE"),
        "1.92",
        None,
    )
    .await;
    ok(
        &s,
        Method::PUT,
        &format!("/v1/nodes/{node}/traits/CUSTOM_HT"),
        "1.92",
        None,
    )
    .await;
    let unsupported = s
        .at(Method::PUT, &path, "1.112", Some(clean("enable-ht")))
        .await;
    assert!(
        unsupported.fault().contains("is not supported"),
        "{}",
        unsupported.fault()
    );
    ok(&s, Method::PUT, &path, "1.92", Some(clean("CUSTOM_WIPE"))).await;
    assert_eq!(
        s.wait_for(&node, "manageable").await["last_error"],
        Value::Null
    );
    ok(&s, Method::DELETE, "/v1/runbooks/CUSTOM_WIPE", "1.92", None).await;
    assert_eq!(
        s.at(Method::GET, "/v1/runbooks/CUSTOM_WIPE", "1.92", None)
            .await
            .status,
        StatusCode::NOT_FOUND
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspection_rules_are_validated_and_sensitive_ones_stay_hidden() {
    let s = start(|_| {}).await;
    let path = "/v1/inspection_rules";
    assert_eq!(
        s.at(Method::GET, path, "1.95", None).await.status,
        StatusCode::NOT_FOUND
    );
    let actions = json!([{"op": "set-attribute", "args": ["/driver", "ipmi"]}]);
    let conditions = json!([{"op": "!eq", "args": ["node:memory_mb", 4096], "multiple": "all"}]);
    for body in [
        json!({"actions": []}),
        json!({"actions": [{"op": "explode", "args": []}]}),
        json!({"actions": [{"op": "log"}]}),
        json!({"actions": actions, "conditions": [{"op": "!log", "args": []}]}),
        json!({"actions": actions, "phase": "later"}),
        json!({"actions": actions, "priority": -1}),
        json!({"actions": actions, "public": true, "owner": "p1"}),
    ] {
        let a = s.at(Method::POST, path, "1.96", Some(body.clone())).await;
        assert_eq!(a.status, StatusCode::BAD_REQUEST, "{body}: {:?}", a.body);
    }
    let rule = ok(
        &s,
        Method::POST,
        path,
        "1.96",
        Some(json!({"actions": actions, "conditions": conditions, "description": "d", "priority": 100})),
    )
    .await;
    assert_eq!(
        (
            rule["phase"].clone(),
            rule["sensitive"].clone(),
            rule["priority"].clone()
        ),
        (json!("main"), json!(false), json!(100))
    );
    let uuid = rule["uuid"].as_str().unwrap().to_owned();
    let secret = ok(
        &s,
        Method::POST,
        path,
        "1.96",
        Some(json!({"actions": actions, "sensitive": true})),
    )
    .await;
    assert_eq!(
        (secret["actions"].clone(), secret["conditions"].clone()),
        (Value::Null, Value::Null)
    );
    let secret_uuid = secret["uuid"].as_str().unwrap().to_owned();
    let item = format!("{path}/{secret_uuid}");
    let edited = ok(
        &s,
        Method::PATCH,
        &item,
        "1.96",
        Some(json!([{"op": "replace", "path": "/description", "value": "kept"}])),
    )
    .await;
    assert_eq!(edited["description"], "kept");
    let stored = s
        .engine
        .conductor
        .store()
        .document("InspectionRule", secret_uuid.parse().unwrap())
        .await
        .unwrap();
    assert_eq!(stored["actions"], actions, "hidden, not lost, by a PATCH");
    let unset = s
        .at(
            Method::PATCH,
            &item,
            "1.96",
            Some(json!([{"op": "replace", "path": "/sensitive", "value": false}])),
        )
        .await;
    assert_eq!(unset.status, StatusCode::BAD_REQUEST);
    let short = ok(&s, Method::GET, path, "1.96", None).await;
    let keys: Vec<&String> = short["inspection_rules"][0]
        .as_object()
        .unwrap()
        .keys()
        .collect();
    assert_eq!(keys, ["description", "links", "phase", "priority", "uuid"]);
    let only = ok(
        &s,
        Method::GET,
        &format!("{path}?fields=uuid"),
        "1.96",
        None,
    )
    .await;
    assert_eq!(only["inspection_rules"].as_array().unwrap().len(), 2);
    assert!(only["inspection_rules"][0].get("description").is_none());
    let other = ok(
        &s,
        Method::GET,
        &format!("{path}?phase=other"),
        "1.96",
        None,
    )
    .await;
    assert_eq!(other["inspection_rules"], json!([]));
    ok(&s, Method::DELETE, &format!("{path}/{uuid}"), "1.96", None).await;
    assert_eq!(
        s.at(Method::GET, &format!("{path}/{uuid}"), "1.96", None)
            .await
            .status,
        StatusCode::NOT_FOUND
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn later_node_fields_filters_shards_and_children() {
    let s = start(|_| {}).await;
    // instance_name (1.104): absent before, refused when set before, follows
    // instance_info.display_name until set on its own.
    let early = s
        .at(
            Method::POST,
            "/v1/nodes",
            "1.103",
            Some(json!({"driver": "fake-hardware", "instance_name": "x"})),
        )
        .await;
    assert_eq!(early.status, StatusCode::NOT_ACCEPTABLE);
    let a = ok(
        &s,
        Method::POST,
        "/v1/nodes",
        "1.115",
        Some(json!({"driver": "fake-hardware", "name": "a"})),
    )
    .await;
    for (field, value) in [
        ("instance_name", Value::Null),
        ("shard", Value::Null),
        ("parent_node", Value::Null),
        ("firmware_interface", json!("no-firmware")),
        ("disable_power_off", json!(false)),
        ("health", Value::Null),
        ("boot_mode", Value::Null),
        ("service_step", json!({})),
    ] {
        assert_eq!(a[field], value, "{field}");
    }
    let before = ok(&s, Method::GET, "/v1/nodes/a", "1.103", None).await;
    assert!(before.get("instance_name").is_none() && before.get("firmware_interface").is_some());
    let patch = |ops: Value| s.at(Method::PATCH, "/v1/nodes/a", "1.115", Some(ops));
    let synced =
        patch(json!([{"op": "add", "path": "/instance_info", "value": {"display_name": "vm-1"}}]))
            .await;
    assert_eq!(synced.body["instance_name"], "vm-1");
    patch(json!([{"op": "replace", "path": "/instance_name", "value": "mine"}])).await;
    let kept = patch(
        json!([{"op": "replace", "path": "/instance_info", "value": {"display_name": "vm-2"}}]),
    )
    .await;
    assert_eq!(kept.body["instance_name"], "mine");
    let found = ok(
        &s,
        Method::GET,
        "/v1/nodes?instance_name=mine",
        "1.115",
        None,
    )
    .await;
    assert_eq!(found["nodes"].as_array().unwrap().len(), 1);
    let gated = s
        .at(Method::GET, "/v1/nodes?instance_name=mine", "1.103", None)
        .await;
    assert_eq!(gated.status, StatusCode::NOT_ACCEPTABLE);

    // Shards (1.82).
    patch(json!([{"op": "add", "path": "/shard", "value": "rack-1"}])).await;
    ok(
        &s,
        Method::POST,
        "/v1/nodes",
        "1.115",
        Some(json!({"driver": "fake-hardware", "name": "b", "shard": "rack-1"})),
    )
    .await;
    assert_eq!(
        ok(&s, Method::GET, "/v1/shards", "1.82", None).await,
        json!({"shards": [{"name": "rack-1", "count": 2}]})
    );
    assert_eq!(
        s.at(Method::GET, "/v1/shards", "1.81", None).await.status,
        StatusCode::NOT_FOUND
    );
    let unsharded = ok(&s, Method::GET, "/v1/nodes?sharded=false", "1.82", None).await;
    assert_eq!(unsharded["nodes"], json!([]));

    // Child nodes (1.83): named by name, kept by uuid, hidden from lists unless asked.
    let child = ok(
        &s,
        Method::POST,
        "/v1/nodes",
        "1.115",
        Some(json!({"driver": "fake-hardware", "name": "c", "parent_node": "a"})),
    )
    .await;
    assert_eq!(child["parent_node"], a["uuid"]);
    let listed = |q: &'static str| {
        let s = &s;
        async move {
            ok(s, Method::GET, &format!("/v1/nodes{q}"), "1.115", None).await["nodes"]
                .as_array()
                .unwrap()
                .len()
        }
    };
    assert_eq!(listed("").await, 2);
    assert_eq!(listed("?include_children=True").await, 3);
    assert_eq!(listed("?parent_node=a").await, 1);
    assert_eq!(
        ok(&s, Method::GET, "/v1/nodes/a/children", "1.83", None).await,
        json!({"children": [child["uuid"]]})
    );
    let own = s
        .at(
            Method::PATCH,
            "/v1/nodes/c",
            "1.115",
            Some(json!([{"op": "replace", "path": "/parent_node", "value": "c"}])),
        )
        .await;
    assert_eq!(own.status, StatusCode::BAD_REQUEST);
    let ghost = s
        .at(
            Method::POST,
            "/v1/nodes",
            "1.115",
            Some(json!({"driver": "fake-hardware", "parent_node": "ghost"})),
        )
        .await;
    assert_eq!(ghost.status, StatusCode::BAD_REQUEST);

    // Firmware (1.86) has no components; no node was inspected (1.81).
    assert_eq!(
        ok(&s, Method::GET, "/v1/nodes/a/firmware", "1.86", None).await,
        json!({"firmware": []})
    );
    assert_eq!(
        s.at(Method::GET, "/v1/nodes/a/inventory", "1.81", None)
            .await
            .status,
        StatusCode::NOT_FOUND
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn virtual_media_and_boot_mode_on_fake_hardware_and_a_clear_no_elsewhere() {
    let s = start(|_| {}).await;
    let fake = s
        .node(json!({"driver": "fake-hardware", "name": "f"}))
        .await;
    let ipmi = s.node(json!({"driver": "ipmi", "name": "i"})).await;
    let media = json!({"device_type": "cdrom", "image_url": "http://images/boot.iso"});
    assert_eq!(
        s.at(
            Method::POST,
            "/v1/nodes/f/vmedia",
            "1.88",
            Some(media.clone())
        )
        .await
        .status,
        StatusCode::NOT_FOUND
    );
    let bad = json!({"device_type": "tape", "image_url": "http://x"});
    assert_eq!(
        s.at(Method::POST, "/v1/nodes/f/vmedia", "1.89", Some(bad))
            .await
            .status,
        StatusCode::BAD_REQUEST
    );
    ok(
        &s,
        Method::POST,
        "/v1/nodes/f/vmedia",
        "1.89",
        Some(media.clone()),
    )
    .await;
    let listed = ok(&s, Method::GET, "/v1/nodes/f/vmedia", "1.93", None).await;
    assert_eq!(listed["vmedia"][0]["image_url"], "http://images/boot.iso");
    assert_eq!(
        s.at(Method::GET, "/v1/nodes/f/vmedia", "1.92", None)
            .await
            .status,
        StatusCode::NOT_FOUND
    );
    ok(&s, Method::DELETE, "/v1/nodes/f/vmedia", "1.89", None).await;
    assert_eq!(
        ok(&s, Method::GET, "/v1/nodes/f/vmedia", "1.93", None).await,
        json!({"vmedia": []})
    );
    // On a real BMC, accepted and failed where Ironic reports it (see `ironic39`).
    let real = s
        .at(Method::POST, "/v1/nodes/i/vmedia", "1.89", Some(media))
        .await;
    assert_eq!(real.status, StatusCode::NO_CONTENT);
    let node = ok(&s, Method::GET, "/v1/nodes/i", "1.89", None).await;
    assert!(
        node["last_error"]
            .as_str()
            .unwrap()
            .contains("does not support attach_virtual_media"),
        "{node}"
    );

    // Boot mode (1.76); secure boot needs UEFI; /states shows both from 1.75.
    assert_eq!(
        super::ironic39::put_state(&s, &fake, "secure_boot", json!(true))
            .await
            .status,
        StatusCode::BAD_REQUEST
    );
    assert_eq!(
        super::ironic39::put_state(&s, &fake, "boot_mode", json!("uefi"))
            .await
            .status,
        StatusCode::ACCEPTED
    );
    assert_eq!(
        super::ironic39::put_state(&s, &fake, "secure_boot", json!(true))
            .await
            .status,
        StatusCode::ACCEPTED
    );
    assert_eq!(
        super::ironic39::put_state(&s, &fake, "boot_mode", json!("dos"))
            .await
            .status,
        StatusCode::BAD_REQUEST
    );
    let refused = super::ironic39::put_state(&s, &ipmi, "boot_mode", json!("uefi")).await;
    assert_eq!(refused.status, StatusCode::BAD_REQUEST);
    assert!(
        refused
            .fault()
            .contains("IPMI sets a boot mode only with a boot device"),
        "{}",
        refused.fault()
    );
    let states = ok(&s, Method::GET, "/v1/nodes/f/states", "1.75", None).await;
    assert_eq!(
        (states["boot_mode"].clone(), states["secure_boot"].clone()),
        (json!("uefi"), json!(true))
    );
    assert!(
        ok(&s, Method::GET, "/v1/nodes/f/states", "1.74", None)
            .await
            .get("boot_mode")
            .is_none()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_records_each_state_change_with_its_duration() {
    let s = start(|_| {}).await;
    let node = s.node(json!({"driver": "fake"})).await;
    s.walk(&node, &[("manage", "manageable"), ("provide", "available")])
        .await;
    let path = format!("/v1/nodes/{node}/history");
    assert_eq!(
        s.at(Method::GET, &path, "1.77", None).await.status,
        StatusCode::NOT_FOUND
    );
    let short = ok(&s, Method::GET, &path, "1.78", None).await["history"].clone();
    let events = short.as_array().unwrap();
    assert!(events.len() >= 3, "{short}");
    let keys: Vec<&String> = events[0].as_object().unwrap().keys().collect();
    // Ironic's short form, its self link included (`baremetal node history get` reads it).
    assert_eq!(keys, ["created_at", "event", "links", "severity", "uuid"]);
    let first = events[0]["uuid"].as_str().unwrap();
    assert_eq!(events[0]["links"][0]["rel"], "self");
    assert!(
        events[0]["links"][0]["href"]
            .as_str()
            .unwrap()
            .ends_with(&format!("/v1/nodes/{node}/history/{first}")),
        "{}",
        events[0]
    );
    let full = ok(
        &s,
        Method::GET,
        &format!("{path}?detail=true"),
        "1.115",
        None,
    )
    .await["history"]
        .clone();
    let states: Vec<&str> = full
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["state"].as_str().unwrap())
        .collect();
    assert_eq!(states.last(), Some(&"available"), "{states:?}");
    assert!(
        states.contains(&"verifying") && states.contains(&"manageable"),
        "{states:?}"
    );
    assert!(full[0]["duration_seconds"].as_f64().unwrap() >= 0.0);
    assert_eq!(full[0]["severity"], "INFO");
    assert_eq!(full[0]["conductor"], "deployd");
    let one = full[0]["uuid"].as_str().unwrap();
    let shown = ok(&s, Method::GET, &format!("{path}/{one}"), "1.114", None).await;
    assert_eq!(shown["event"], full[0]["event"]);
    assert_eq!(shown["links"], full[0]["links"]);
    // The short form cuts a long event text as Ironic does; the detailed one keeps it.
    let long = "x".repeat(300);
    let uuid: uuid::Uuid = node.parse().unwrap();
    s.engine
        .conductor
        .store()
        .milestone(uuid, long.clone())
        .await
        .unwrap();
    let cut = ok(&s, Method::GET, &path, "1.78", None).await["history"].clone();
    let cut = cut.as_array().unwrap().last().unwrap()["event"].clone();
    assert_eq!(cut, format!("{}...", &long[..251]));
    let whole = ok(&s, Method::GET, &format!("{path}?detail=1"), "1.78", None).await;
    assert_eq!(
        whole["history"].as_array().unwrap().last().unwrap()["event"],
        long
    );
    assert!(
        shown.get("state").is_none(),
        "the state fields came with 1.115"
    );

    // A failed deploy is an ERROR event that carries the error.
    let looping = s.test_driver_node("?deadline_ms=300", "loop").await;
    s.provision(&looping, "active").await;
    let failed = s.wait_for(&looping, "deploy failed").await;
    let events = ok(
        &s,
        Method::GET,
        &format!("/v1/nodes/{looping}/history?detail=1"),
        "1.115",
        None,
    )
    .await;
    let last = events["history"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(last["severity"], "ERROR");
    assert_eq!(last["event"], failed["last_error"]);
    // The events go with the node.
    ok(
        &s,
        Method::PUT,
        &format!("/v1/nodes/{looping}/maintenance"),
        "1.78",
        None,
    )
    .await;
    ok(
        &s,
        Method::DELETE,
        &format!("/v1/nodes/{looping}"),
        "1.78",
        None,
    )
    .await;
    let uuid = looping.parse().unwrap();
    assert_eq!(
        s.engine.conductor.store().history_of(uuid).await.unwrap(),
        vec![]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn provision_parameters_and_verbs_follow_their_versions() {
    let s = start(|_| {}).await;
    let node = s.test_driver_node("", "wait").await;
    let path = format!("/v1/nodes/{node}/states/provision");
    let put = |version: &'static str, body: Value| {
        let (s, path) = (&s, path.clone());
        async move {
            s.at(Method::PUT, &path, version, Some(body))
                .await
                .status
                .as_u16()
        }
    };
    let steps = json!([{"interface": "deploy", "step": "deploy", "args": {}, "priority": 50}]);
    assert_eq!(
        put("1.68", json!({"target": "active", "deploy_steps": []})).await,
        406
    );
    assert_eq!(
        put("1.69", json!({"target": "active", "deploy_steps": steps})).await,
        400
    );
    assert_eq!(
        put("1.69", json!({"target": "provide", "deploy_steps": []})).await,
        400
    );
    assert_eq!(
        put("1.69", json!({"target": "clean", "disable_ramdisk": true})).await,
        406
    );
    assert_eq!(
        put("1.91", json!({"target": "active", "runbook": "CUSTOM_X"})).await,
        406
    );
    assert_eq!(
        put("1.92", json!({"target": "active", "runbook": "CUSTOM_X"})).await,
        400
    );
    assert_eq!(put("1.84", json!({"target": "unhold"})).await, 406);
    assert_eq!(put("1.85", json!({"target": "unhold"})).await, 400);
    assert_eq!(put("1.72", json!({"target": "deploy"})).await, 406);
    // deploy (1.73) and an empty deploy_steps list (1.69) start a deploy.
    assert_eq!(
        put("1.73", json!({"target": "deploy", "deploy_steps": []})).await,
        202
    );
    s.wait_for(&node, "wait call-back").await;
    assert_eq!(put("1.87", json!({"target": "service"})).await, 400);
    // Abort in wait call-back came with 1.110: a failed deploy, not cleaned.
    assert_eq!(put("1.109", json!({"target": "abort"})).await, 400);
    assert_eq!(put("1.110", json!({"target": "abort"})).await, 202);
    let failed = s.wait_for(&node, "deploy failed").await;
    assert!(
        failed["last_error"].as_str().unwrap().contains("aborted"),
        "{failed}"
    );
}

/// Ironic's verify checks power and management only, so the install guide's order works:
/// enroll, manage and provide without an image, set the image later. A node whose BMC is
/// not configured still fails to manage, saying what is missing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn manage_verifies_power_and_management_not_the_image() {
    let s = start(|_| {}).await;
    let node = s
        .node(json!({"driver": "redfish", "driver_info": {
            "redfish_address": "http://127.0.0.1:9", "redfish_system_id": "/redfish/v1/Systems/1"}}))
        .await;
    s.walk(&node, &[("manage", "manageable")]).await;
    let bare = s.node(json!({"driver": "redfish"})).await;
    assert_eq!(s.provision(&bare, "manage").await.status, 202);
    let mut failed = json!(null);
    for _ in 0..200 {
        failed = s.get(&format!("/v1/nodes/{bare}")).await.body;
        if failed["last_error"].is_string() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(failed["provision_state"], "enroll", "{failed}");
    let error = failed["last_error"].as_str().unwrap_or_default();
    assert!(
        error.contains("power and management") && error.contains("driver_info.redfish_address"),
        "{failed}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_config_drive_a_driver_cannot_write_or_a_malformed_one_is_refused_never_dropped() {
    let s = start(|_| {}).await;
    let node = s.test_driver_node("", "wait").await;
    let path = format!("/v1/nodes/{node}/states/provision");
    let put = |version: &'static str, body: Value| {
        let (s, path) = (&s, path.clone());
        async move {
            let a = s.at(Method::PUT, &path, version, Some(body)).await;
            (a.status.as_u16(), a.fault())
        }
    };
    let drive = json!({"meta_data": {"hostname": "web-1"}});
    let (status, fault) = put("1.56", json!({"target": "active", "configdrive": drive})).await;
    assert_eq!(status, 400);
    assert!(
        fault.contains("config drive") && fault.contains("does not write one"),
        "{fault}"
    );
    // Malformed drives are refused whatever the driver, before anything is kept.
    for (bad, words) in [
        (json!("not base64!"), "neither a url nor base64"),
        (json!("QUJD"), "not of a gzipped image"),
        (json!("A".repeat((64 << 20) + 4)), "more than"),
        (
            json!({"meta_data": {}, "user": "x"}),
            "unknown key \"user\"",
        ),
        (json!({"network_data": [1]}), "network_data must be a dict"),
    ] {
        let (status, fault) = put("1.56", json!({"target": "active", "configdrive": bad})).await;
        assert_eq!(status, 400, "{fault}");
        assert!(
            fault.contains("Invalid configdrive") && fault.contains(words),
            "{fault}"
        );
    }
    let (status, _) = put("1.55", json!({"target": "active", "configdrive": drive})).await;
    assert_eq!(status, 406, "the dict form came with 1.56");
    let (status, _) = put("1.34", json!({"target": "rebuild", "configdrive": "H4sI"})).await;
    assert_eq!(status, 406, "a rebuild's config drive came with 1.35");
    let (status, fault) = put("1.56", json!({"target": "provide", "configdrive": "H4sI"})).await;
    assert_eq!(status, 400);
    assert!(
        fault.contains("only valid when setting target provision state to active"),
        "{fault}"
    );
    let (status, fault) = put("1.38", json!({"target": "active", "rescue_password": "x"})).await;
    assert_eq!(status, 400);
    assert!(fault.contains("rescue"), "{fault}");
    // Nothing started: the node is where it was.
    let shown = s.get(&format!("/v1/nodes/{node}")).await.body;
    assert_eq!(shown["provision_state"], "available", "{shown}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn later_port_portgroup_and_driver_fields() {
    let s = start(|_| {}).await;
    let node = s
        .node(json!({"driver": "fake-hardware", "name": "n"}))
        .await;
    ok(
        &s,
        Method::PATCH,
        "/v1/nodes/n",
        "1.115",
        Some(json!([{"op": "add", "path": "/conductor_group", "value": "g1"}])),
    )
    .await;
    let early = s
        .at(
            Method::POST,
            "/v1/ports",
            "1.87",
            Some(json!({"node_uuid": node, "address": "52:54:00:00:00:01", "name": "p"})),
        )
        .await;
    assert_eq!(early.status, StatusCode::NOT_ACCEPTABLE);
    let port = ok(
        &s,
        Method::POST,
        "/v1/ports",
        "1.115",
        Some(json!({"node_name": "n", "address": "52:54:00:00:00:01", "name": "eth0", "vendor": "acme", "category": "data"})),
    )
    .await;
    assert_eq!(port["available_for_dynamic_portgroup"], true);
    assert_eq!(port["description"], Value::Null);
    assert_eq!(
        ok(&s, Method::GET, "/v1/ports/eth0", "1.88", None).await["uuid"],
        port["uuid"]
    );
    let dup = s
        .at(
            Method::POST,
            "/v1/ports",
            "1.115",
            Some(json!({"node_uuid": node, "address": "52:54:00:00:00:02", "name": "eth0"})),
        )
        .await;
    assert_eq!(dup.status, StatusCode::CONFLICT);
    assert_eq!(
        dup.fault(),
        format!(
            "A port with name eth0 already exists (port {}).",
            port["uuid"].as_str().unwrap()
        )
    );
    let in_group = ok(
        &s,
        Method::GET,
        "/v1/ports?conductor_group=g1",
        "1.99",
        None,
    )
    .await;
    assert_eq!(in_group["ports"].as_array().unwrap().len(), 1);
    let elsewhere = ok(
        &s,
        Method::GET,
        "/v1/ports?conductor_group=g2",
        "1.99",
        None,
    )
    .await;
    assert_eq!(elsewhere["ports"], json!([]));
    assert_eq!(
        s.at(Method::GET, "/v1/ports?conductor_group=g1", "1.98", None)
            .await
            .status,
        StatusCode::NOT_ACCEPTABLE
    );

    let group = ok(
        &s,
        Method::POST,
        "/v1/portgroups",
        "1.115",
        Some(json!({"node_uuid": node, "name": "bond0", "category": "storage", "physical_network": "phys1"})),
    )
    .await;
    assert_eq!(group["dynamic_portgroup"], false);
    assert_eq!(group["category"], "storage");
    let groups = ok(
        &s,
        Method::GET,
        "/v1/portgroups?conductor_group=g1&detail=true",
        "1.115",
        None,
    )
    .await;
    assert_eq!(groups["portgroups"][0]["physical_network"], "phys1");
    let old = ok(&s, Method::GET, "/v1/portgroups/bond0", "1.101", None).await;
    assert!(old.get("physical_network").is_none() && old.get("category").is_none());

    // Driver fields (1.77).
    let fields = ok(
        &s,
        Method::GET,
        "/v1/drivers/fake-hardware?fields=name,hosts",
        "1.77",
        None,
    )
    .await;
    assert_eq!(
        fields,
        json!({"name": "fake-hardware", "hosts": ["deployd"]})
    );
    let gated = s
        .at(
            Method::GET,
            "/v1/drivers/fake-hardware?fields=name",
            "1.76",
            None,
        )
        .await;
    assert_eq!(gated.status, StatusCode::NOT_ACCEPTABLE);
    let bad = s
        .at(Method::GET, "/v1/drivers?fields=nope", "1.77", None)
        .await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
}
