//! Ironic's model as real clients use it: hardware types and interfaces choosing the
//! component, the stored resources (chassis, port groups, deploy templates, volume
//! connectors and targets, allocations), port PATCH and filters, maintenance, traits, VIFs,
//! conductors, and microversion gates (a field absent below its version, present at it).

use deployd_test_support as common;

use common::server::start;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hardware_types_default_validate_and_choose_the_component() {
    let s = start(|_| {}).await;
    let fake = s
        .node(json!({"driver": "fake-hardware", "name": "hw1"}))
        .await;
    let node = s.get(&format!("/v1/nodes/{fake}")).await.body;
    // Ironic 39's defaults, with deployd's fake deploy and boot and Ironic's other fake
    // interfaces first (as an Ironic that enables them orders them); the reference table
    // test checks every field.
    for (field, value) in [
        ("deploy_interface", "fake"),
        ("power_interface", "fake"),
        ("management_interface", "fake"),
        ("boot_interface", "fake"),
        ("network_interface", "flat"),
        ("raid_interface", "fake"),
        ("console_interface", "fake"),
    ] {
        assert_eq!(node[field], value, "{field}");
    }
    // ipmi + autodetect runs agent_ipmitool; iscsi runs pxe_ipmitool; redfish likewise.
    let ipmi = s.node(json!({"driver": "ipmi"})).await;
    let node = s.get(&format!("/v1/nodes/{ipmi}")).await.body;
    assert_eq!(
        (
            node["deploy_interface"].as_str(),
            node["power_interface"].as_str()
        ),
        (Some("autodetect"), Some("ipmitool"))
    );
    let component = async |n: &str| {
        let node = s.engine.conductor.store().find_node(n).await.unwrap();
        s.engine
            .conductor
            .component(&node.body)
            .map(|d| d.description.name.clone())
    };
    assert_eq!(component(&ipmi).await.as_deref(), Some("agent_ipmitool"));
    let patched = s
        .send(
            Method::PATCH,
            &format!("/v1/nodes/{ipmi}"),
            json!([{"op": "replace", "path": "/deploy_interface", "value": "iscsi"}]),
        )
        .await;
    assert_eq!(patched.status, StatusCode::OK, "{:?}", patched.body);
    assert_eq!(component(&ipmi).await.as_deref(), Some("pxe_ipmitool"));
    let redfish = s
        .node(json!({"driver": "redfish", "deploy_interface": "iscsi"}))
        .await;
    assert_eq!(component(&redfish).await.as_deref(), Some("pxe_redfish"));
    // Changing the driver with reset_interfaces takes the new type's defaults (without
    // it the fake interfaces are kept and refused by redfish: `ironic_suite`).
    let moved = s
        .send(
            Method::PATCH,
            &format!("/v1/nodes/{fake}?reset_interfaces=true"),
            json!([{"op": "replace", "path": "/driver", "value": "redfish"}]),
        )
        .await;
    assert_eq!(moved.body["power_interface"], "redfish");
    assert_eq!(component(&fake).await.as_deref(), Some("agent_redfish"));

    // Refused: an interface the type does not support, an unknown type; nothing created.
    let before = s.get("/v1/nodes").await.body["nodes"]
        .as_array()
        .unwrap()
        .len();
    for body in [
        json!({"driver": "ipmi", "power_interface": "redfish"}),
        json!({"driver": "ipmi", "deploy_interface": "fake"}),
        json!({"driver": "no-such-type"}),
        json!({"driver": "fake-hardware", "bogus_field": 1}),
    ] {
        let a = s.send(Method::POST, "/v1/nodes", body.clone()).await;
        assert_eq!(a.status, StatusCode::BAD_REQUEST, "{body}");
        assert!(!a.fault().is_empty());
    }
    assert_eq!(
        s.get("/v1/nodes").await.body["nodes"]
            .as_array()
            .unwrap()
            .len(),
        before
    );
    let a = s
        .send(
            Method::POST,
            "/v1/nodes",
            json!({"driver": "ipmi", "power_interface": "redfish"}),
        )
        .await;
    assert_eq!(
        a.fault(),
        "power interface implementation 'redfish' is not supported by hardware type IPMIHardware."
    );

    // The 1.30 driver fields come from the same table.
    let d = s.get("/v1/drivers/fake-hardware").await.body;
    assert_eq!(d["default_deploy_interface"], "fake");
    assert!(
        d["enabled_power_interfaces"]
            .as_array()
            .unwrap()
            .contains(&json!("fake"))
    );
    let listed = s.get("/v1/drivers?detail=True").await.body;
    let ipmi_doc = listed["drivers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["name"] == "ipmi")
        .unwrap()
        .clone();
    assert_eq!(
        ipmi_doc["enabled_deploy_interfaces"],
        json!(["ramdisk", "direct", "bootc", "autodetect", "iscsi"])
    );
    let old = s
        .at(Method::GET, "/v1/drivers/ipmi", "1.29", None)
        .await
        .body;
    assert!(
        old.get("default_deploy_interface").is_none(),
        "1.30 fields are absent at 1.29"
    );
    assert_eq!(
        s.get("/v1/drivers/nope").await.status,
        StatusCode::NOT_FOUND
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_fields_coerce_gate_by_version_and_patch_as_ironic() {
    let s = start(|_| {}).await;
    let n = s
        .node(json!({"driver": "fake-hardware", "resource_class": "gold", "owner": "team-a"}))
        .await;
    let path = format!("/v1/nodes/{n}");
    // String booleans are coerced, as Ironic's types do.
    let a = s
        .send(Method::PATCH, &path, json!([{"op": "replace", "path": "/maintenance", "value": "True"},
                                           {"op": "add", "path": "/description", "value": "rack 4"}]))
        .await;
    assert_eq!(
        (a.body["maintenance"].clone(), a.body["description"].clone()),
        (json!(true), json!("rack 4"))
    );
    // A field newer than the request is absent in answers and 406 when set.
    let old = s.at(Method::GET, &path, "1.49", None).await.body;
    assert!(old.get("owner").is_none() && old.get("description").is_none());
    assert_eq!(old["resource_class"], "gold");
    let refused = s
        .at(
            Method::PATCH,
            &path,
            "1.49",
            Some(json!([{"op": "replace", "path": "/owner", "value": "x"}])),
        )
        .await;
    assert_eq!(refused.status, StatusCode::NOT_ACCEPTABLE);
    assert_eq!(
        s.at(Method::GET, &format!("{path}?fields=lessee"), "1.64", None)
            .await
            .status,
        StatusCode::NOT_ACCEPTABLE
    );
    assert_eq!(
        s.get(&format!("{path}?fields=bogus")).await.status,
        StatusCode::BAD_REQUEST
    );
    let some = s.get(&format!("{path}?fields=uuid,owner")).await.body;
    assert_eq!(some.as_object().unwrap().len(), 2);
    // jsonpatch's own words, which clients match.
    let bad = s
        .send(
            Method::PATCH,
            &path,
            json!([{"op": "remove", "path": "/extra/prop"}]),
        )
        .await;
    assert!(
        bad.fault()
            .ends_with("Reason: can't remove a non-existent object 'prop'"),
        "{}",
        bad.fault()
    );
    let internal = s
        .send(
            Method::PATCH,
            &path,
            json!([{"op": "replace", "path": "/provision_state", "value": "active"}]),
        )
        .await;
    assert_eq!(
        internal.fault(),
        "'/provision_state' is an internal attribute and can not be updated"
    );
    // Filters: booleans in any case, resource class, owner.
    for (query, hits) in [
        ("maintenance=TRUE", 1),
        ("maintenance=false", 0),
        ("resource_class=gold", 1),
        ("resource_class=silver", 0),
        ("owner=team-a", 1),
        ("associated=True", 0),
        ("description_contains=rack", 1),
    ] {
        let list = s.get(&format!("/v1/nodes?{query}")).await;
        assert_eq!(
            list.body["nodes"].as_array().map(Vec::len),
            Some(hits),
            "{query}: {:?}",
            list.body
        );
    }
    assert_eq!(
        s.get("/v1/nodes?maintenance=perhaps").await.status,
        StatusCode::BAD_REQUEST
    );
    // Retiring is refused in available; unretiring clears the reason.
    let r = s.send(Method::PATCH, &path, json!([{"op": "add", "path": "/retired", "value": true},
                                                {"op": "add", "path": "/retired_reason", "value": "old"}])).await;
    assert_eq!(r.body["retired_reason"], "old");
    let r = s
        .send(
            Method::PATCH,
            &path,
            json!([{"op": "replace", "path": "/retired", "value": false}]),
        )
        .await;
    assert_eq!(r.body["retired_reason"], Value::Null);
    // Unrouted paths and wrong methods answer in Ironic's error shape too.
    let nowhere = s.get("/v1/nowhere").await;
    assert_eq!(nowhere.status, StatusCode::NOT_FOUND);
    assert!(nowhere.fault().contains("/v1/nowhere"));
    let wrong = s.delete("/v1/drivers").await;
    assert_eq!(wrong.status, StatusCode::METHOD_NOT_ALLOWED);
    assert!(!wrong.fault().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn maintenance_traits_vifs_and_conductors() {
    let s = start(|_| {}).await;
    let n = s
        .node(json!({"driver": "fake-hardware", "network_interface": "flat"}))
        .await;
    let path = format!("/v1/nodes/{n}");
    let on = s
        .send(
            Method::PUT,
            &format!("{path}/maintenance"),
            json!({"reason": "fan"}),
        )
        .await;
    assert_eq!(on.status, StatusCode::ACCEPTED);
    let node = s.get(&path).await.body;
    assert_eq!(
        (
            node["maintenance"].clone(),
            node["maintenance_reason"].clone()
        ),
        (json!(true), json!("fan"))
    );
    assert_eq!(
        s.delete(&format!("{path}/maintenance")).await.status,
        StatusCode::ACCEPTED
    );
    assert_eq!(s.get(&path).await.body["maintenance_reason"], Value::Null);

    assert_eq!(
        s.send(
            Method::PUT,
            &format!("{path}/traits"),
            json!({"traits": ["CUSTOM_A", "CUSTOM_B"]})
        )
        .await
        .status,
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        s.send(Method::PUT, &format!("{path}/traits/CUSTOM_C"), json!(null))
            .await
            .status,
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        s.delete(&format!("{path}/traits/CUSTOM_A")).await.status,
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        s.delete(&format!("{path}/traits/CUSTOM_A")).await.status,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        s.get(&format!("{path}/traits")).await.body["traits"],
        json!(["CUSTOM_B", "CUSTOM_C"])
    );
    assert_eq!(
        s.send(
            Method::PUT,
            &format!("{path}/traits/lower_case"),
            json!(null)
        )
        .await
        .status,
        StatusCode::BAD_REQUEST
    );
    // Ironic's traits controller refuses an older read with 406 (its API suite checks it).
    assert_eq!(
        s.at(Method::GET, &format!("{path}/traits"), "1.36", None)
            .await
            .status,
        StatusCode::NOT_ACCEPTABLE
    );

    // A flat network needs a free port per VIF.
    let vif = json!({"id": "200712fc-fdfb-47da-89a6-2d19f76c7618"});
    assert_eq!(
        s.send(Method::POST, &format!("{path}/vifs"), vif.clone())
            .await
            .status,
        StatusCode::BAD_REQUEST
    );
    s.send(
        Method::POST,
        "/v1/ports",
        json!({"node_uuid": n, "address": "52:54:00:12:34:56"}),
    )
    .await;
    assert_eq!(
        s.send(Method::POST, &format!("{path}/vifs"), vif.clone())
            .await
            .status,
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        s.get(&format!("{path}/vifs")).await.body["vifs"],
        json!([vif])
    );
    assert_eq!(
        s.delete(&format!("{path}/vifs/{}", vif["id"].as_str().unwrap()))
            .await
            .status,
        StatusCode::NO_CONTENT
    );
    assert_eq!(s.get(&format!("{path}/vifs")).await.body["vifs"], json!([]));

    let conductors = s.get("/v1/conductors").await.body;
    assert_eq!(conductors["conductors"][0]["hostname"], "deployd");
    assert_eq!(s.get("/v1/conductors/deployd").await.body["alive"], true);
    assert_eq!(s.get(&path).await.body["conductor"], "deployd");
    assert_eq!(
        s.at(Method::GET, "/v1/conductors", "1.48", None)
            .await
            .status,
        StatusCode::NOT_FOUND
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ports_patch_filter_and_project() {
    let s = start(|_| {}).await;
    let a = s
        .node(json!({"driver": "fake-hardware", "name": "a"}))
        .await;
    let b = s
        .node(json!({"driver": "fake-hardware", "name": "b"}))
        .await;
    let p1 = s
        .send(
            Method::POST,
            "/v1/ports",
            json!({"node_uuid": a, "address": "11:22:33:44:55:66", "pxe_enabled": "False"}),
        )
        .await;
    assert_eq!(p1.status, StatusCode::CREATED, "{:?}", p1.body);
    assert_eq!(p1.body["pxe_enabled"], false);
    let p1 = p1.body["uuid"].as_str().unwrap().to_owned();
    s.send(
        Method::POST,
        "/v1/ports",
        json!({"node_uuid": b, "address": "11:22:33:44:55:77"}),
    )
    .await;
    let ids = |v: Value| {
        v["ports"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["uuid"].clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        ids(s.get("/v1/ports?address=11:22:33:44:55:66").await.body),
        [json!(p1)]
    );
    assert_eq!(
        ids(s
            .get("/v1/ports?address=11:22:33:44:55:66&node=a")
            .await
            .body),
        [json!(p1)]
    );
    for other in [
        "/v1/ports?address=11:22:33:44:55:66&node=b",
        "/v1/ports?address=11:22:33:44:55:00",
    ] {
        assert_eq!(ids(s.get(other).await.body), Vec::<Value>::new(), "{other}");
    }
    let not_a_mac = s.get("/v1/ports?address=not-a-mac").await;
    assert_eq!(not_a_mac.status, StatusCode::BAD_REQUEST);
    assert_eq!(
        not_a_mac.fault(),
        "Expected a MAC address but received not-a-mac."
    );
    assert_eq!(ids(s.get("/v1/ports?node=a").await.body), [json!(p1)]);
    let fields = s.get("/v1/ports?fields=uuid,node_uuid").await.body;
    assert!(
        fields["ports"][0].get("address").is_none()
            && fields["ports"][0].get("node_uuid").is_some()
    );
    // PATCH moves the MAC in the lookup index with it.
    let moved = s
        .send(Method::PATCH, &format!("/v1/ports/{p1}"), json!([{"op": "replace", "path": "/address", "value": "66:55:44:33:22:11"},
                                                               {"op": "add", "path": "/extra/answer", "value": 42}]))
        .await;
    assert_eq!(moved.status, StatusCode::OK, "{:?}", moved.body);
    let store = &s.engine.conductor.store();
    assert!(
        store
            .node_by_macs(["11:22:33:44:55:66"])
            .await
            .unwrap()
            .is_none()
    );
    assert_eq!(
        store
            .node_by_macs(["66:55:44:33:22:11"])
            .await
            .unwrap()
            .map(|u| u.to_string()),
        Some(a.clone())
    );
    let taken = s
        .send(
            Method::PATCH,
            &format!("/v1/ports/{p1}"),
            json!([{"op": "replace", "path": "/address", "value": "11:22:33:44:55:77"}]),
        )
        .await;
    assert_eq!(taken.status, StatusCode::CONFLICT);
    assert_eq!(
        s.get(&format!("/v1/ports/{p1}")).await.body["address"],
        "66:55:44:33:22:11",
        "a refused PATCH changes nothing"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stored_resources_create_list_show_patch_delete() {
    let s = start(|_| {}).await;
    let node = s
        .node(json!({"driver": "fake-hardware", "name": "n1"}))
        .await;
    // A node's volume changes only while it is powered off (Ironic's rule).
    let off = json!({"target": "power off"});
    let powered = s.send(Method::PUT, "/v1/nodes/n1/states/power", off).await;
    assert_eq!(powered.status, StatusCode::ACCEPTED);
    while s.get("/v1/nodes/n1").await.body["power_state"] != "power off" {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    // (path, list key, create body, a filter that finds it)
    let cases = [
        ("chassis", "chassis", json!({"description": "rack"}), None),
        (
            "portgroups",
            "portgroups",
            json!({"node_uuid": node, "address": "52:54:00:00:00:09", "name": "bond0"}),
            Some("node=n1"),
        ),
        (
            "deploy_templates",
            "deploy_templates",
            json!({"name": "CUSTOM_HT", "steps": [{"interface": "bios", "step": "apply_configuration", "args": {}, "priority": 150}]}),
            None,
        ),
        (
            "volume/connectors",
            "connectors",
            json!({"node_uuid": node, "type": "iqn", "connector_id": "iqn.2017-07.org.openstack:01"}),
            Some("node=n1"),
        ),
        (
            "volume/targets",
            "targets",
            json!({"node_uuid": node, "volume_type": "iscsi", "boot_index": 0, "volume_id": "v1"}),
            Some("node=n1"),
        ),
    ];
    for (path, key, body, filter) in cases {
        let created = s
            .send(Method::POST, &format!("/v1/{path}"), body.clone())
            .await;
        assert_eq!(
            created.status,
            StatusCode::CREATED,
            "{path}: {:?}",
            created.body
        );
        let uuid = created.body["uuid"].as_str().unwrap().to_owned();
        let list = s.get(&format!("/v1/{path}")).await.body;
        assert_eq!(list[key][0]["uuid"], json!(uuid), "{path}");
        if let Some(f) = filter {
            assert_eq!(
                s.get(&format!("/v1/{path}?{f}")).await.body[key]
                    .as_array()
                    .unwrap()
                    .len(),
                1
            );
        }
        let fields = s
            .get(&format!("/v1/{path}/{uuid}?fields=uuid,extra"))
            .await
            .body;
        assert_eq!(fields.as_object().unwrap().len(), 2, "{path}: {fields}");
        let patched = s
            .send(
                Method::PATCH,
                &format!("/v1/{path}/{uuid}"),
                json!([{"op": "add", "path": "/extra/answer", "value": 42}]),
            )
            .await;
        assert_eq!(patched.body["extra"], json!({"answer": 42}), "{path}");
        assert_eq!(
            s.get(&format!("/v1/{path}/{uuid}")).await.body["extra"],
            json!({"answer": 42})
        );
        // Below the resource's version it does not exist.
        assert_eq!(
            s.at(Method::GET, &format!("/v1/{path}"), "1.22", None)
                .await
                .status
                == StatusCode::NOT_FOUND,
            path != "chassis"
        );
        assert_eq!(
            s.delete(&format!("/v1/{path}/{uuid}")).await.status,
            StatusCode::NO_CONTENT
        );
        assert_eq!(
            s.get(&format!("/v1/{path}/{uuid}")).await.status,
            StatusCode::NOT_FOUND
        );
    }
    // The words clients match in Ironic's refusals.
    for (path, body, words) in [
        (
            "chassis",
            json!({"uuid": "!@#$^*&%^"}),
            "Expected UUID for uuid",
        ),
        (
            "deploy_templates",
            json!({"name": "foo", "steps": [{"interface": "bios", "step": "x", "priority": 1}]}),
            "does not match",
        ),
        (
            "deploy_templates",
            json!({"name": "CUSTOM_Y", "steps": []}),
            "is too short",
        ),
        (
            "allocations",
            json!({"resource_class": "x".repeat(81)}),
            "is too long",
        ),
        (
            "allocations",
            json!({"resource_class": "rc", "candidate_nodes": ["banana?"]}),
            "Nodes cannot be found",
        ),
        (
            "allocations",
            json!({"resource_class": "rc", "name": "not/a/name"}),
            "invalid name",
        ),
    ] {
        let a = s
            .send(Method::POST, &format!("/v1/{path}"), body.clone())
            .await;
        assert_eq!(a.status, StatusCode::BAD_REQUEST, "{body}");
        assert!(a.fault().contains(words), "{body}: {}", a.fault());
    }
    // Unique values, validation, and what a node's deletion takes with it.
    let pg = json!({"node_uuid": node, "name": "bond1"});
    assert_eq!(
        s.send(Method::POST, "/v1/portgroups", pg.clone())
            .await
            .status,
        StatusCode::CREATED
    );
    assert_eq!(
        s.send(Method::POST, "/v1/portgroups", pg).await.status,
        StatusCode::CONFLICT
    );
    assert_eq!(
        s.get("/v1/portgroups/bond1").await.status,
        StatusCode::OK,
        "found by name"
    );
    for (path, body) in [
        (
            "deploy_templates",
            json!({"name": "lower", "steps": [{"interface": "bios", "step": "x", "priority": 1}]}),
        ),
        ("deploy_templates", json!({"name": "CUSTOM_X", "steps": []})),
        (
            "volume/connectors",
            json!({"node_uuid": node, "type": "floppy", "connector_id": "x"}),
        ),
        (
            "volume/targets",
            json!({"node_uuid": node, "volume_type": "iscsi", "volume_id": "v"}),
        ),
        (
            "portgroups",
            json!({"node_uuid": "5c9dcd04-2073-49bc-9618-99ae634d8971"}),
        ),
    ] {
        assert_eq!(
            s.send(Method::POST, &format!("/v1/{path}"), body.clone())
                .await
                .status,
            StatusCode::BAD_REQUEST,
            "{body}"
        );
    }
    let chassis = s.send(Method::POST, "/v1/chassis", json!({})).await.body["uuid"].clone();
    s.send(
        Method::PATCH,
        &format!("/v1/nodes/{node}"),
        json!([{"op": "add", "path": "/chassis_uuid", "value": chassis}]),
    )
    .await;
    assert_eq!(
        s.delete(&format!("/v1/chassis/{}", chassis.as_str().unwrap()))
            .await
            .status,
        StatusCode::BAD_REQUEST,
        "a chassis with nodes stays"
    );
    assert_eq!(
        s.delete(&format!("/v1/nodes/{node}")).await.status,
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        s.get("/v1/portgroups").await.body["portgroups"],
        json!([]),
        "the node's port groups went with it"
    );
}

/// Root device hints are read when they are set, with Ironic's grammar: a hint the agent
/// could not read is refused at once (400, naming it) and changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn root_device_hints_are_validated_when_set() {
    let s = start(|_| {}).await;
    let node = s.node(json!({"driver": "fake-hardware"})).await;
    let path = format!("/v1/nodes/{node}");
    let set =
        |hints: Value| json!([{"op": "add", "path": "/properties/root_device", "value": hints}]);
    for good in [
        json!({"size": ">= 100", "rotational": false}),
        json!({"serial": "s== WD-123", "model": "<in> samsung"}),
        json!({"name": "<or> /dev/sda <or> /dev/vdb", "hctl": "0:0:0:0"}),
        json!({"wwn": "0x5000c500", "by_path": "/dev/disk/by-path/pci-0000:00:05.0"}),
    ] {
        let answer = s.send(Method::PATCH, &path, set(good.clone())).await;
        assert_eq!(answer.status, StatusCode::OK, "{good}: {:?}", answer.body);
        assert_eq!(answer.body["properties"]["root_device"], good);
    }
    let kept = s.get(&path).await.body["properties"].clone();
    for (bad, words) in [
        (json!({"size": "big"}), "\"size\""),
        (json!({"size": 0}), "positive"),
        (
            json!({"colour": "red"}),
            "no such root device hint named \"colour\"",
        ),
        (json!({"rotational": "maybe"}), "boolean"),
        (json!({"model": "== x"}), "s=="),
        (json!("sda"), "object"),
    ] {
        let answer = s.send(Method::PATCH, &path, set(bad.clone())).await;
        assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{bad}");
        let fault = answer.fault();
        assert!(
            fault.contains("Invalid root device hints") && fault.contains(words),
            "{bad}: {fault}"
        );
        assert_eq!(
            s.get(&path).await.body["properties"],
            kept,
            "{bad} changed the node"
        );
    }
    let created = s
        .send(
            Method::POST,
            "/v1/nodes",
            json!({"driver": "fake-hardware", "properties": {"root_device": {"size": "x"}}}),
        )
        .await;
    assert_eq!(created.status, StatusCode::BAD_REQUEST);
}

/// Conductor groups as Ironic keeps them, on one engine (sled): the engine serves its
/// configured group only; a node of no served group is not enrolled (400) and, moved to
/// one by a PATCH, gets no step run (404, Ironic's `NoValidHost`); names are checked and
/// lowercased.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conductor_groups_limit_which_nodes_the_engine_runs_steps_of() {
    let s = start(|c| c.conductor.conductor_group = "rack1".into()).await;
    let me = s.get("/v1/conductors/deployd").await.body;
    assert_eq!(me["conductor_group"], "rack1", "{me}");

    let ungrouped = s
        .send(
            Method::POST,
            "/v1/nodes",
            json!({"driver": "fake-hardware"}),
        )
        .await;
    assert_eq!(
        ungrouped.status,
        StatusCode::BAD_REQUEST,
        "{:?}",
        ungrouped.body
    );
    let said = ungrouped.fault();
    assert!(
        said.contains("No valid host was found") && said.contains(r#"conductor group """#),
        "{said}"
    );
    let spaced = s
        .send(
            Method::POST,
            "/v1/nodes",
            json!({"driver": "fake-hardware", "conductor_group": "rack 1"}),
        )
        .await;
    assert_eq!(spaced.status, StatusCode::BAD_REQUEST, "{:?}", spaced.body);
    assert!(
        spaced.fault().contains("Invalid conductor group"),
        "{}",
        spaced.fault()
    );

    let unknown = s
        .send(
            Method::POST,
            "/v1/nodes",
            json!({"driver": "no-such-driver", "conductor_group": "rack1"}),
        )
        .await;
    assert_eq!(
        unknown.status,
        StatusCode::BAD_REQUEST,
        "{:?}",
        unknown.body
    );
    assert!(
        unknown.fault().contains(
            r#"No conductor service registered which supports driver no-such-driver for conductor group "rack1""#
        ),
        "a driver no engine runs is refused naming the node's group: {}",
        unknown.fault()
    );

    let n = s
        .node(json!({"driver": "fake-hardware", "conductor_group": "RACK1"}))
        .await;
    let path = format!("/v1/nodes/{n}");
    assert_eq!(s.get(&path).await.body["conductor_group"], "rack1");
    let provision = format!("{path}/states/provision");
    let manage = || s.send(Method::PUT, &provision, json!({"target": "manage"}));
    let moved = s
        .send(
            Method::PATCH,
            &path,
            json!([{"op": "replace", "path": "/conductor_group", "value": "Rack2"}]),
        )
        .await;
    assert_eq!(moved.status, StatusCode::OK, "{:?}", moved.body);
    assert_eq!(moved.body["conductor_group"], "rack2");
    assert_eq!(
        moved.body["conductor"],
        Value::Null,
        "no engine serves rack2"
    );
    let refused = manage().await;
    assert_eq!(refused.status, StatusCode::NOT_FOUND, "{:?}", refused.body);
    assert!(
        refused.fault().contains(
            r#"No conductor service registered which supports driver fake-hardware for conductor group "rack2""#
        ),
        "{}",
        refused.fault()
    );
    let power = s
        .send(
            Method::PUT,
            &format!("{path}/states/power"),
            json!({"target": "power on"}),
        )
        .await;
    assert_eq!(power.status, StatusCode::NOT_FOUND, "{:?}", power.body);
    assert_eq!(
        s.get(&path).await.body["provision_state"],
        "enroll",
        "a refused call changes nothing"
    );
    let listed = s.get("/v1/nodes?conductor_group=rack2").await.body;
    assert_eq!(listed["nodes"].as_array().unwrap().len(), 1, "{listed}");

    let back = s
        .send(
            Method::PATCH,
            &path,
            json!([{"op": "replace", "path": "/conductor_group", "value": "rack1"}]),
        )
        .await;
    assert_eq!(back.status, StatusCode::OK, "{:?}", back.body);
    assert_eq!(back.body["conductor"], "deployd");
    assert_eq!(manage().await.status, StatusCode::ACCEPTED);
}
