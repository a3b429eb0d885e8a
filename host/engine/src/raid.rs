//! A node's target RAID configuration, checked against Ironic's RAID schema
//! (`ironic/drivers/raid_config_schema.json`) with the words Python's `jsonschema` uses,
//! which Ironic passes on to clients ("RAID config validation error: …").
//!
//! The schema is fixed and small, so it is checked here rule by rule: a general JSON
//! schema crate would still need its messages rewritten into Python's (`'x'`, `[]`,
//! `True`), which is what clients compare.

use serde_json::{Map, Value, json};

use crate::python_text::repr as py;

/// Each logical disk property, its rule and Ironic's description of it.
const PROPERTIES: &[(&str, Rule, &str)] = &[
    (
        "raid_level",
        Rule::OneOf(&["JBOD", "0", "1", "2", "5", "6", "1+0", "5+0", "6+0"]),
        "RAID level for the logical disk. Valid values are 'JBOD', '0', '1', '2', '5', '6', '1+0', '5+0' and '6+0'. Required.",
    ),
    (
        "size_gb",
        Rule::Size,
        "Size in GiB (Integer) for the logical disk. Use 'MAX' as size_gb if this logical disk is supposed to use the rest of the space available. Required.",
    ),
    (
        "volume_name",
        Rule::Text,
        "Name of the volume to be created. If this is not specified, it will be auto-generated. Optional.",
    ),
    (
        "is_root_volume",
        Rule::Boolean,
        "Specifies whether this disk is a root volume. By default, this is False. Optional.",
    ),
    (
        "share_physical_disks",
        Rule::Boolean,
        "Specifies whether other logical disks can share physical disks with this logical disk. By default, this is False. Optional.",
    ),
    (
        "disk_type",
        Rule::OneOf(&["hdd", "ssd"]),
        "The type of disk preferred. Valid values are 'hdd' and 'ssd'. If this is not specified, disk type will not be a selection criterion for choosing backing physical disks. Optional.",
    ),
    (
        "interface_type",
        Rule::OneOf(&["sata", "scsi", "sas"]),
        "The interface type of disk. Valid values are 'sata', 'scsi' and 'sas'. If this is not specified, interface type will not be a selection criterion for choosing backing physical disks. Optional.",
    ),
    (
        "number_of_physical_disks",
        Rule::Positive,
        "Number of physical disks to use for this logical disk. By default, the driver uses the minimum number of disks required for that RAID level. Optional.",
    ),
    (
        "controller",
        Rule::Text,
        "Controller to use for this logical disk. If not specified, the driver will choose a suitable RAID controller on the bare metal node. Optional.",
    ),
    (
        "physical_disks",
        Rule::PhysicalDisks,
        "The physical disks to use for this logical disk. If not specified, the driver will choose suitable physical disks to use. Optional.",
    ),
];

#[derive(Clone, Copy)]
enum Rule {
    OneOf(&'static [&'static str]),
    Size,
    Text,
    Boolean,
    Positive,
    PhysicalDisks,
}

/// `GET /v1/drivers/{name}/raid/logical_disk_properties`.
pub fn logical_disk_properties() -> Value {
    let map: Map<String, Value> = PROPERTIES
        .iter()
        .map(|(name, _, text)| (name.to_string(), json!(text)))
        .collect();
    Value::Object(map)
}

/// Checks a target RAID configuration; `{}` (which clears it) is not checked, as in Ironic.
pub fn validate(config: &Value) -> Result<(), String> {
    let Some(top) = config.as_object() else {
        return Err(format!(
            "Expected types <class 'dict'> for target_raid_config: {}",
            py(config)
        ));
    };
    if top.is_empty() {
        return Ok(());
    }
    schema(top).map_err(|e| format!("RAID config validation error: {e}"))?;
    let disks = top["logical_disks"]
        .as_array()
        .map_or(&[][..], Vec::as_slice);
    let roots = disks
        .iter()
        .filter(|d| d.get("is_root_volume") == Some(&Value::Bool(true)))
        .count();
    if roots > 1 {
        return Err(format!(
            "Raid config cannot have more than one root volume. {roots} root volumes were specified"
        ));
    }
    Ok(())
}

fn schema(top: &Map<String, Value>) -> Result<(), String> {
    only_known(top, &["logical_disks"])?;
    let disks = top
        .get("logical_disks")
        .ok_or("'logical_disks' is a required property")?;
    let list = disks
        .as_array()
        .ok_or_else(|| format!("{} is not of type 'array'", py(disks)))?;
    if list.is_empty() {
        return Err("[] should be non-empty".into());
    }
    list.iter().try_for_each(logical_disk)
}

fn logical_disk(disk: &Value) -> Result<(), String> {
    let d = disk
        .as_object()
        .ok_or_else(|| format!("{} is not of type 'object'", py(disk)))?;
    for (name, rule, _) in PROPERTIES {
        if let Some(value) = d.get(*name) {
            check(*rule, value)?;
        }
    }
    for required in ["raid_level", "size_gb"] {
        if !d.contains_key(required) {
            return Err(format!("'{required}' is a required property"));
        }
    }
    let names: Vec<&str> = PROPERTIES.iter().map(|(n, _, _)| *n).collect();
    only_known(d, &names)?;
    if d.contains_key("physical_disks") && !d.contains_key("controller") {
        return Err("'controller' is a dependency of 'physical_disks'".into());
    }
    Ok(())
}

fn check(rule: Rule, v: &Value) -> Result<(), String> {
    let not_type = |ty: &str| Err(format!("{} is not of type '{ty}'", py(v)));
    match rule {
        Rule::OneOf(values) => match v.as_str() {
            None => not_type("string"),
            Some(s) if values.contains(&s) => Ok(()),
            Some(_) => {
                let all: Vec<String> = values.iter().map(|x| format!("'{x}'")).collect();
                Err(format!("{} is not one of [{}]", py(v), all.join(", ")))
            }
        },
        Rule::Text if v.is_string() => Ok(()),
        Rule::Text => not_type("string"),
        Rule::Boolean if v.is_boolean() => Ok(()),
        Rule::Boolean => not_type("boolean"),
        Rule::Size => match (v.as_i64(), v.as_str()) {
            (Some(n), _) if n >= 0 => Ok(()),
            (Some(_), _) => Err(format!("{} is less than the minimum of 0", py(v))),
            (_, Some("MAX")) => Ok(()),
            (_, Some(_)) => Err(format!("{} is not one of ['MAX']", py(v))),
            _ if v.is_u64() => Ok(()),
            _ => Err(format!(
                "{} is not valid under any of the given schemas",
                py(v)
            )),
        },
        Rule::Positive => match v.as_i64() {
            Some(n) if n > 0 => Ok(()),
            Some(_) => Err(format!(
                "{} is less than or equal to the minimum of 0",
                py(v)
            )),
            None if v.is_u64() => Ok(()),
            None => not_type("integer"),
        },
        Rule::PhysicalDisks => {
            let list = v.as_array();
            let strings = list.is_some_and(|l| l.iter().all(Value::is_string));
            let objects = list.is_some_and(|l| l.len() >= 2 && l.iter().all(Value::is_object));
            match strings || objects {
                true => Ok(()),
                false => Err(format!(
                    "{} is not valid under any of the given schemas",
                    py(v)
                )),
            }
        }
    }
}

fn only_known(map: &Map<String, Value>, known: &[&str]) -> Result<(), String> {
    let extra: Vec<String> = map
        .keys()
        .filter(|k| !known.contains(&k.as_str()))
        .map(|k| format!("'{k}'"))
        .collect();
    match extra.len() {
        0 => Ok(()),
        1 => Err(format!(
            "Additional properties are not allowed ({} was unexpected)",
            extra[0]
        )),
        _ => Err(format!(
            "Additional properties are not allowed ({} were unexpected)",
            extra.join(", ")
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ironic 39's answers, recorded in `../shared/reference/ironic39-drivers.json`.
    #[test]
    fn refusals_have_ironics_words() {
        for (config, words) in [
            (
                json!([1, 2]),
                "Expected types <class 'dict'> for target_raid_config: [1, 2]",
            ),
            (
                json!({"logical_disks": "x"}),
                "RAID config validation error: 'x' is not of type 'array'",
            ),
            (
                json!({"logical_disks": [{"size_gb": 10}]}),
                "RAID config validation error: 'raid_level' is a required property",
            ),
            (
                json!({"logical_disks": [{"size_gb": 10, "raid_level": "7"}]}),
                "RAID config validation error: '7' is not one of ['JBOD', '0', '1', '2', '5', '6', '1+0', '5+0', '6+0']",
            ),
            (
                json!({"logical_disks": [{"size_gb": "ten", "raid_level": "1"}]}),
                "RAID config validation error: 'ten' is not one of ['MAX']",
            ),
            (
                json!({"logical_disks": [{"size_gb": 10, "raid_level": "1", "bogus": 1}]}),
                "RAID config validation error: Additional properties are not allowed ('bogus' was unexpected)",
            ),
            (
                json!({"logical_disks": []}),
                "RAID config validation error: [] should be non-empty",
            ),
            (
                json!({"other": 1}),
                "RAID config validation error: Additional properties are not allowed ('other' was unexpected)",
            ),
            (
                json!({"logical_disks": [{"size_gb": 1, "raid_level": "1", "number_of_physical_disks": 0}]}),
                "RAID config validation error: 0 is less than or equal to the minimum of 0",
            ),
            (
                json!({"logical_disks": [{"size_gb": 1, "raid_level": "1", "physical_disks": ["a"]}]}),
                "RAID config validation error: 'controller' is a dependency of 'physical_disks'",
            ),
            (
                json!({"logical_disks": [{"size_gb": 1, "raid_level": "1", "physical_disks": [{"a": 1}], "controller": "c"}]}),
                "RAID config validation error: [{'a': 1}] is not valid under any of the given schemas",
            ),
            (
                json!({"logical_disks": [
                    {"size_gb": 1, "raid_level": "1", "is_root_volume": true},
                    {"size_gb": 1, "raid_level": "1", "is_root_volume": true}]}),
                "Raid config cannot have more than one root volume. 2 root volumes were specified",
            ),
        ] {
            assert_eq!(validate(&config).unwrap_err(), words, "{config}");
        }
    }

    /// What gophercloud's acceptance suite sets, and Ironic's own valid example.
    #[test]
    fn valid_configurations_pass() {
        for config in [
            json!({}),
            json!({"logical_disks": [{"size_gb": 10, "raid_level": "1", "is_root_volume": true}]}),
            json!({"logical_disks": [{"size_gb": 100, "is_root_volume": true, "raid_level": "5",
                "controller": "software", "physical_disks": [{"size": "> 100"}, {"size": "> 100"}]}]}),
            json!({"logical_disks": [{"size_gb": 100, "is_root_volume": true, "raid_level": "5",
                "disk_type": "hdd", "number_of_physical_disks": 5}]}),
            json!({"logical_disks": [{"size_gb": "MAX", "raid_level": "JBOD", "controller": "c",
                "physical_disks": ["disk1"], "volume_name": "v", "interface_type": "sas",
                "share_physical_disks": false}]}),
        ] {
            assert_eq!(validate(&config), Ok(()), "{config}");
        }
    }
}
