use serde_json::{Map, Value, json};

use super::{Context, apply};
use crate::node::NodeBody;

fn rule(v: Value) -> Map<String, Value> {
    v.as_object().unwrap().clone()
}

fn inventory() -> Value {
    json!({"cpu": {"count": 4, "architecture": "x86_64"},
           "memory": {"physical_mb": 8192},
           "interfaces": [{"name": "eth0", "mac_address": "52:54:00:aa:00:01", "ipv4_address": "10.0.0.5"}],
           "disks": [{"name": "/dev/sda", "size": 1000, "rotational": true}],
           "bmc_address": "192.168.1.9"})
}

fn run(rules: &[Value]) -> (Result<(), String>, NodeBody, Value) {
    let mut body: NodeBody = serde_json::from_value(json!({
        "uuid": "5828e4c6-34ac-4838-a302-4d57c4482759", "driver": "ipmi",
        "created_at": "2026-12-04T08:00:00Z"}))
    .unwrap();
    let inv = inventory();
    let mut plugin_data = json!({});
    let rules: Vec<_> = rules.iter().cloned().map(rule).collect();
    let result = apply(
        &rules,
        &mut body,
        &mut Context {
            inventory: &inv,
            plugin_data: &mut plugin_data,
        },
    );
    (result, body, plugin_data)
}

#[test]
fn conditions_gate_actions_and_arguments_are_formatted() {
    let (result, body, data) = run(&[
        json!({"conditions": [{"op": "eq", "args": {"values": ["{inventory[cpu][architecture]}", "x86_64"]}},
                              {"op": "!is-empty", "args": {"value": "{inventory[bmc_address]}"}},
                              {"op": "in-net", "args": {"address": "{inventory[bmc_address]}", "subnet": "192.168.0.0/16"}},
                              {"op": "matches", "args": {"value": "{node.driver}", "regex": "ip.i"}}],
               "actions": [{"op": "set-attribute", "args": {"path": "/driver_info/ipmi_address", "value": "{inventory[bmc_address]}"}},
                           {"op": "add-trait", "args": {"name": "CUSTOM_BIG"}},
                           {"op": "set-capability", "args": {"name": "cpus", "value": "{inventory[cpu][count]}"}},
                           {"op": "set-plugin-data", "args": {"path": "seen.by", "value": "rules"}},
                           {"op": "set-attribute", "args": {"path": "resource_class", "value": "gold"}}]}),
        // Conditions that fail: nothing of this rule is applied.
        json!({"conditions": [{"op": "gt", "args": {"values": [1, 2]}}],
               "actions": [{"op": "add-trait", "args": {"name": "CUSTOM_NEVER"}}]}),
        json!({"conditions": [{"op": "contains", "args": {"value": "{inventory[interfaces]}", "regex": "10\\.0\\."}}],
               "actions": [{"op": "extend-attribute", "args": {"path": "extra.tags", "value": "net10", "unique": true}},
                           {"op": "extend-attribute", "args": {"path": "extra.tags", "value": "net10", "unique": true}}]}),
    ]);
    assert_eq!(result, Ok(()));
    assert_eq!(body.driver_info["ipmi_address"], "192.168.1.9");
    assert_eq!(body.attrs["traits"], json!(["CUSTOM_BIG"]));
    assert_eq!(body.attrs["resource_class"], "gold");
    assert_eq!(body.properties["capabilities"], "cpus:4");
    assert_eq!(body.extra["tags"], json!(["net10"]));
    assert_eq!(data, json!({"seen": {"by": "rules"}}));
}

#[test]
fn priorities_order_rules_loops_and_inversion() {
    let (result, body, _) = run(&[
        json!({"priority": 1, "actions": [{"op": "set-attribute", "args": {"path": "properties.who", "value": "low"}}]}),
        json!({"priority": 9, "actions": [{"op": "set-attribute", "args": {"path": "properties.who", "value": "high"}}]}),
        json!({"conditions": [{"op": "eq", "args": {"values": ["{item}", "b"]}, "loop": ["a", "b"], "multiple": "any"}],
               "actions": [{"op": "add-trait", "args": {"name": "{item}"}, "loop": ["CUSTOM_A", "CUSTOM_B"]}]}),
        json!({"conditions": [{"op": "eq", "args": {"values": ["{item}", "b"]}, "loop": ["a", "b"], "multiple": "all"}],
               "actions": [{"op": "add-trait", "args": {"name": "CUSTOM_ALL"}}]}),
        json!({"conditions": [{"op": "!is-true", "args": {"value": "{inventory[disks][0][rotational]}"}}],
               "actions": [{"op": "add-trait", "args": {"name": "CUSTOM_SSD"}}]}),
    ]);
    assert_eq!(result, Ok(()));
    assert_eq!(
        body.properties["who"], "low",
        "the lower priority runs last"
    );
    assert_eq!(body.attrs["traits"], json!(["CUSTOM_A", "CUSTOM_B"]));
}

#[test]
fn refusals_fail_the_inspection_with_the_reason() {
    for (rule, words) in [
        (
            json!({"actions": [{"op": "fail", "args": {"msg": "no GPU"}}]}),
            "no GPU",
        ),
        (
            json!({"actions": [{"op": "api-call", "args": {"url": "http://x"}}]}),
            "not supported by deployd",
        ),
        (
            json!({"conditions": [{"op": "lt", "args": {"values": [1, "a"]}}]}),
            "not supported between",
        ),
        (
            json!({"conditions": [{"op": "bogus", "args": {}}]}),
            "Unsupported operator: 'bogus'.",
        ),
        (
            json!({"actions": [{"op": "set-attribute", "args": {"path": "driver", "value": "x"}}]}),
            "do not change",
        ),
        (
            json!({"actions": [{"op": "set-attribute", "args": {"path": "traits", "value": "x"}}]}),
            "not a field inspection rules set",
        ),
    ] {
        let (result, _, _) = run(std::slice::from_ref(&rule));
        assert!(
            result.as_ref().unwrap_err().contains(words),
            "{rule}: {result:?}"
        );
    }
    // A reference that does not resolve leaves the text as it is.
    let (result, body, _) = run(&[json!({"actions": [{"op": "set-attribute",
        "args": {"path": "properties.x", "value": "{inventory[nothing]}"}}]})]);
    assert_eq!(result, Ok(()));
    assert_eq!(body.properties["x"], "{inventory[nothing]}");
}
