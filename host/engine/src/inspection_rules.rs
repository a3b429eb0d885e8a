//! Inspection rules (1.96) run on an inspected node, as Ironic's rule engine runs them:
//! the stored rules of the `main` phase by descending priority; a rule whose conditions
//! all hold applies its actions in order. Arguments are Python format strings over the
//! node, the inventory, the plugin data and a loop's `item` (`"{inventory[cpu][count]}"`,
//! `"{node.driver}"`), formatted only where Ironic formats them (each operator's and
//! action's own arguments, everything inside a loop); a reference that does not resolve
//! leaves the text as it is, as Ironic's does.
//!
//! Every condition and the node, trait, capability and plugin-data actions are run. The
//! port actions and `api-call` are refused when they are reached, which fails the
//! inspection with the reason: never skipped silently.

use serde_json::{Map, Value, json};

use crate::node::NodeBody;
use crate::python_text::{repr, str_of};

/// What the rules change besides the node: the plugin data that will be stored.
pub struct Context<'a> {
    pub inventory: &'a Value,
    pub plugin_data: &'a mut Value,
}

/// Runs `rules` (documents as stored) on the node.
pub fn apply(
    rules: &[Map<String, Value>],
    body: &mut NodeBody,
    cx: &mut Context,
) -> Result<(), String> {
    let mut rules: Vec<&Map<String, Value>> = rules
        .iter()
        .filter(|r| r.get("phase").and_then(Value::as_str).unwrap_or("main") == "main")
        .collect();
    // Python's sort is stable: equal priorities keep their order.
    rules
        .sort_by_key(|r| std::cmp::Reverse(r.get("priority").and_then(Value::as_i64).unwrap_or(0)));
    for rule in rules {
        let list = |k: &str| {
            rule.get(k)
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default()
        };
        let mut holds = true;
        for condition in list("conditions") {
            if !check(&condition, body, cx)? {
                holds = false;
                break;
            }
        }
        if !holds {
            continue;
        }
        for action in list("actions") {
            act_looped(&action, body, cx)?;
        }
    }
    Ok(())
}

/// What `{node…}` reads: the node's fields as the API names them.
fn node_doc(body: &NodeBody) -> Value {
    let mut doc = Value::Object(body.attrs.clone());
    for (k, v) in [
        ("uuid", json!(body.uuid)),
        ("name", json!(body.name)),
        ("driver", json!(body.driver)),
        ("driver_info", Value::Object(body.driver_info.clone())),
        ("instance_info", Value::Object(body.instance_info.clone())),
        ("properties", Value::Object(body.properties.clone())),
        ("extra", Value::Object(body.extra.clone())),
    ] {
        doc[k] = v;
    }
    doc
}

/// An operation's arguments by name (the deprecated list form mapped onto `names`), each
/// formatted if `formatted` names it or a loop item is in scope.
fn args(
    op: &Value,
    names: &[&str],
    formatted: &[&str],
    body: &NodeBody,
    cx: &Context,
    item: Option<&Value>,
) -> Result<Map<String, Value>, String> {
    let given = match op.get("args") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(m)) => m.clone(),
        Some(Value::Array(list)) => names
            .iter()
            .map(|n| n.to_string())
            .zip(list.iter().cloned())
            .collect(),
        Some(_) => return Err("args must be either a list or dictionary".into()),
    };
    let scope = Scope {
        node: node_doc(body),
        inventory: cx.inventory,
        plugin_data: cx.plugin_data,
        item,
        missing_is_none: op.get("op").and_then(Value::as_str) == Some("is-empty"),
    };
    Ok(given
        .into_iter()
        .map(|(k, v)| {
            let v = match formatted.contains(&k.as_str()) || item.is_some() {
                true => scope.interpolate(&v),
                false => v,
            };
            (k, v)
        })
        .collect())
}

fn loop_items(op: &Value) -> Option<Vec<Value>> {
    match op.get("loop") {
        Some(Value::Array(items)) if !items.is_empty() => Some(items.clone()),
        Some(Value::Object(item)) if !item.is_empty() => Some(vec![Value::Object(item.clone())]),
        _ => None,
    }
}

fn check(condition: &Value, body: &NodeBody, cx: &Context) -> Result<bool, String> {
    let Some(items) = loop_items(condition) else {
        return check_once(condition, body, cx, None);
    };
    let multiple = condition
        .get("multiple")
        .and_then(Value::as_str)
        .unwrap_or("any");
    let mut results = Vec::new();
    for item in &items {
        let result = check_once(condition, body, cx, Some(item))?;
        if multiple == "first" && result {
            return Ok(true);
        }
        results.push(result);
    }
    Ok(match multiple {
        "any" => results.iter().any(|r| *r),
        "all" => results.iter().all(|r| *r),
        "last" => results.last().copied().unwrap_or(false),
        _ => results.first().copied().unwrap_or(false),
    })
}

fn check_once(
    condition: &Value,
    body: &NodeBody,
    cx: &Context,
    item: Option<&Value>,
) -> Result<bool, String> {
    let given = condition
        .get("op")
        .and_then(Value::as_str)
        .ok_or("Operation must contain 'op' key")?;
    let (op, inverted) = match given.strip_prefix('!') {
        Some(op) => (op, true),
        None => (given, false),
    };
    let (names, formatted): (&[&str], &[&str]) = match op {
        "eq" | "lt" | "gt" => (&["values"], &["values"]),
        "in-net" => (&["address", "subnet"], &["address", "subnet"]),
        "matches" | "contains" => (&["value", "regex"], &["value"]),
        "one-of" => (&["value", "values"], &["value"]),
        "is-empty" | "is-none" | "is-true" | "is-false" => (&["value"], &["value"]),
        other => return Err(format!("Unsupported operator: '{other}'.")),
    };
    let a = args(condition, names, formatted, body, cx, item)?;
    let arg = |k: &str| {
        a.get(k)
            .cloned()
            .ok_or_else(|| format!("missing required argument(s): {k}"))
    };
    let result = match op {
        "eq" | "lt" | "gt" => compare(op, &arg("values")?, item.is_some())?,
        "in-net" => in_net(&str_of(&arg("address")?), &str_of(&arg("subnet")?))?,
        "matches" | "contains" => {
            let mut pattern = str_of(&arg("regex")?);
            if op == "matches" {
                pattern = format!("^(?:{pattern})$");
            }
            let re = regex_lite::Regex::new(&pattern)
                .map_err(|e| format!("invalid regular expression: {e}"))?;
            re.is_match(&str_of(&arg("value")?))
        }
        "one-of" => {
            let values = a
                .get("values")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            values.contains(&arg("value")?)
        }
        "is-empty" => matches!(str_of(&arg("value")?).as_str(), "" | "None" | "[]" | "{}"),
        "is-none" => arg("value")?.is_null(),
        "is-true" => truth(&arg("value")?, true),
        _ => truth(&arg("value")?, false),
    };
    Ok(result != inverted)
}

/// `is-true` / `is-false`, with Python's readings of numbers and words.
fn truth(v: &Value, want: bool) -> bool {
    match v {
        Value::Bool(b) => *b == want,
        Value::Number(n) => (n.as_f64().unwrap_or(0.0) != 0.0) == want,
        Value::String(s) => {
            let words: &[&str] = if want {
                &["yes", "true"]
            } else {
                &["no", "false"]
            };
            words.contains(&s.to_lowercase().as_str())
        }
        Value::Null => !want,
        _ => false,
    }
}

/// `eq`, `lt`, `gt` over consecutive values: numbers as numbers, text as text; Python
/// refuses to order a number against text, and so does this.
fn compare(op: &str, values: &Value, force_strings: bool) -> Result<bool, String> {
    let Some(list) = values.as_array() else {
        return Err(format!("Expected list for 'values', got: {}", repr(values)));
    };
    let list: Vec<Value> = match force_strings {
        true => list.iter().map(|v| json!(str_of(v))).collect(),
        false => list.clone(),
    };
    let ordered = |a: &Value, b: &Value| -> Result<std::cmp::Ordering, String> {
        match (a, b) {
            (Value::Number(x), Value::Number(y)) => x
                .as_f64()
                .zip(y.as_f64())
                .and_then(|(x, y)| x.partial_cmp(&y))
                .ok_or_else(|| "incomparable numbers".to_owned()),
            (Value::String(x), Value::String(y)) => Ok(x.cmp(y)),
            _ => Err(format!(
                "'<' not supported between {} and {}",
                repr(a),
                repr(b)
            )),
        }
    };
    for pair in list.windows(2) {
        let holds = match op {
            "eq" => pair[0] == pair[1],
            "lt" => ordered(&pair[0], &pair[1])?.is_lt(),
            _ => ordered(&pair[0], &pair[1])?.is_gt(),
        };
        if !holds {
            return Ok(false);
        }
    }
    Ok(true)
}

fn in_net(address: &str, subnet: &str) -> Result<bool, String> {
    use std::net::IpAddr;
    let (net, bits) = subnet.split_once('/').unwrap_or((subnet, ""));
    let net: IpAddr = net
        .parse()
        .map_err(|_| format!("invalid value: {subnet}"))?;
    let address: IpAddr = address
        .parse()
        .map_err(|_| format!("invalid value: {address}"))?;
    let (a, n, width) = match (address, net) {
        (IpAddr::V4(a), IpAddr::V4(n)) => (u32::from(a) as u128, u32::from(n) as u128, 32),
        (IpAddr::V6(a), IpAddr::V6(n)) => (u128::from(a), u128::from(n), 128),
        _ => return Ok(false),
    };
    let bits: u32 = match bits {
        "" => width,
        b => b
            .parse()
            .ok()
            .filter(|b| *b <= width)
            .ok_or_else(|| format!("invalid value: {subnet}"))?,
    };
    let mask = if bits == 0 {
        0
    } else {
        u128::MAX << (128 - bits) >> (128 - width)
    };
    Ok(a & mask == n & mask)
}

fn act_looped(action: &Value, body: &mut NodeBody, cx: &mut Context) -> Result<(), String> {
    match loop_items(action) {
        None => act(action, body, cx, None),
        Some(items) => items
            .iter()
            .try_for_each(|item| act(action, body, cx, Some(item))),
    }
}

fn act(
    action: &Value,
    body: &mut NodeBody,
    cx: &mut Context,
    item: Option<&Value>,
) -> Result<(), String> {
    let op = action
        .get("op")
        .and_then(Value::as_str)
        .ok_or("Operation must contain 'op' key")?;
    let (names, formatted): (&[&str], &[&str]) = match op {
        "fail" => (&["msg"], &[]),
        "log" => (&["msg", "level"], &["msg"]),
        "set-attribute" | "extend-attribute" => (&["path", "value", "unique"], &["value"]),
        "del-attribute" => (&["path"], &[]),
        "add-trait" | "remove-trait" | "unset-capability" => (&["name"], &[]),
        "set-capability" => (&["name", "value"], &["value"]),
        "set-plugin-data" | "extend-plugin-data" => (&["path", "value", "unique"], &["value"]),
        "unset-plugin-data" => (&["path"], &[]),
        "set-port-attribute" | "extend-port-attribute" | "del-port-attribute" | "api-call" => {
            return Err(format!(
                "the inspection rule action '{op}' is not supported by deployd"
            ));
        }
        other => return Err(format!("Unsupported action: '{other}'.")),
    };
    let a = args(action, names, formatted, body, cx, item)?;
    let text = |k: &str| {
        a.get(k)
            .map(str_of)
            .ok_or_else(|| format!("missing required argument(s): {k}"))
    };
    let value = || {
        a.get("value")
            .cloned()
            .ok_or("missing required argument(s): value")
    };
    let unique = a.get("unique").is_some_and(|u| truth(u, true));
    match op {
        "fail" => return Err(text("msg")?),
        "log" => tracing::info!(node = %body.uuid, "inspection rule: {}", text("msg")?),
        "set-attribute" => set_path(body, &text("path")?, Edit::Set(value()?))?,
        "extend-attribute" => set_path(body, &text("path")?, Edit::Extend(value()?, unique))?,
        "del-attribute" => set_path(body, &text("path")?, Edit::Delete)?,
        "add-trait" | "remove-trait" => {
            let name = text("name")?;
            let mut traits: Vec<Value> = body
                .attrs
                .get("traits")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            traits.retain(|t| t.as_str() != Some(&name));
            if op == "add-trait" {
                traits.push(json!(name));
            }
            body.attrs.insert("traits".into(), Value::Array(traits));
        }
        "set-capability" | "unset-capability" => {
            let name = text("name")?;
            let caps = body
                .properties
                .get("capabilities")
                .and_then(Value::as_str)
                .unwrap_or("");
            let mut kept: Vec<String> = caps
                .split(',')
                .filter(|c| !c.is_empty() && c.split(':').next() != Some(name.as_str()))
                .map(str::to_owned)
                .collect();
            if op == "set-capability" {
                kept.push(format!("{name}:{}", text("value")?));
            }
            body.properties
                .insert("capabilities".into(), json!(kept.join(",")));
        }
        _ => {
            let path = text("path")?;
            let parts: Vec<&str> = path.split('.').collect();
            let edit = match op {
                "set-plugin-data" => Edit::Set(value()?),
                "extend-plugin-data" => Edit::Extend(value()?, unique),
                _ => Edit::Delete,
            };
            edit_nested(cx.plugin_data, &parts, edit)?;
        }
    }
    Ok(())
}

enum Edit {
    Set(Value),
    Extend(Value, bool),
    Delete,
}

/// The node's own fields a rule may set whole (its documents are set by key: properties,
/// extra, driver_info, instance_info; traits and capabilities by their actions).
const SETTABLE: &[&str] = &[
    "resource_class",
    "description",
    "owner",
    "lessee",
    "conductor_group",
    "shard",
    "automated_clean",
];

/// A node field by Ironic's path (`/properties/cpu_arch` or `properties.cpu_arch`).
fn set_path(body: &mut NodeBody, path: &str, edit: Edit) -> Result<(), String> {
    let parts: Vec<&str> = match path.contains('/') {
        true => path.trim_matches('/').split('/').collect(),
        false => path.split('.').collect(),
    };
    let (first, rest) = parts.split_first().ok_or("an empty path")?;
    let (map, within) = match *first {
        "properties" => (&mut body.properties, rest),
        "extra" => (&mut body.extra, rest),
        "driver_info" => (&mut body.driver_info, rest),
        "instance_info" => (&mut body.instance_info, rest),
        "uuid" | "driver" | "provision_state" | "power_state" | "maintenance" | "name" => {
            return Err(format!(
                "Failed to set attribute {path}: deployd's rules do not change the node's {first}"
            ));
        }
        // The node's other text fields.
        f if SETTABLE.contains(&f) && rest.is_empty() => (&mut body.attrs, &parts[..]),
        _ => {
            return Err(format!(
                "Failed to set attribute {path}: not a field inspection rules set ({})",
                SETTABLE.join(", ")
            ));
        }
    };
    if within.is_empty() {
        return Err(format!(
            "Failed to set attribute {path}: {first} is a whole document"
        ));
    }
    let mut doc = Value::Object(std::mem::take(map));
    let result = edit_nested(&mut doc, within, edit);
    if let Value::Object(m) = doc {
        *map = m;
    }
    result
}

fn edit_nested(doc: &mut Value, parts: &[&str], edit: Edit) -> Result<(), String> {
    let (last, parents) = parts.split_last().ok_or("an empty path")?;
    let mut here = doc;
    for part in parents {
        if !here.is_object() {
            return Err(format!("{} is not a dictionary", repr(here)));
        }
        here = here
            .as_object_mut()
            .expect("checked")
            .entry(part.to_string())
            .or_insert_with(|| json!({}));
    }
    if !here.is_object() {
        return Err(format!("{} is not a dictionary", repr(here)));
    }
    let map = here.as_object_mut().expect("checked");
    match edit {
        Edit::Set(v) => {
            map.insert(last.to_string(), v);
        }
        Edit::Delete => {
            map.remove(*last);
        }
        Edit::Extend(v, unique) => {
            let list = map.entry(last.to_string()).or_insert_with(|| json!([]));
            let Some(items) = list.as_array_mut() else {
                return Err(format!("Cannot extend non-list attribute {last}"));
            };
            if !unique || !items.contains(&v) {
                items.push(v);
            }
        }
    }
    Ok(())
}

/// What format strings can reach.
struct Scope<'a> {
    node: Value,
    inventory: &'a Value,
    plugin_data: &'a Value,
    item: Option<&'a Value>,
    missing_is_none: bool,
}

impl Scope<'_> {
    fn interpolate(&self, v: &Value) -> Value {
        match v {
            Value::String(s) => self.format(s),
            Value::Array(items) => {
                Value::Array(items.iter().map(|i| self.interpolate(i)).collect())
            }
            Value::Object(m) => Value::Object(
                m.iter()
                    .map(|(k, v)| (str_of(&self.format(k)), self.interpolate(v)))
                    .collect(),
            ),
            other => other.clone(),
        }
    }

    /// Python's `str.format` for `{name[key].attr}` fields; unresolved, the text as is.
    fn format(&self, text: &str) -> Value {
        let mut out = String::new();
        let mut chars = text.char_indices().peekable();
        while let Some((i, c)) = chars.next() {
            match c {
                '{' if chars.peek().map(|(_, c)| *c) == Some('{') => {
                    chars.next();
                    out.push('{');
                }
                '}' if chars.peek().map(|(_, c)| *c) == Some('}') => {
                    chars.next();
                    out.push('}');
                }
                '{' => {
                    let Some(end) = text[i..].find('}') else {
                        return json!(text);
                    };
                    match self.field(&text[i + 1..i + end]) {
                        Some(v) => out.push_str(&str_of(v)),
                        None if self.missing_is_none => return Value::Null,
                        None => return json!(text),
                    }
                    while chars.peek().is_some_and(|(j, _)| *j <= i + end) {
                        chars.next();
                    }
                }
                c => out.push(c),
            }
        }
        json!(out)
    }

    fn field(&self, spec: &str) -> Option<&Value> {
        let name_end = spec.find(['[', '.']).unwrap_or(spec.len());
        let mut here = match &spec[..name_end] {
            "node" => &self.node,
            "inventory" => self.inventory,
            "plugin_data" => self.plugin_data,
            "item" => self.item?,
            _ => return None,
        };
        let mut rest = &spec[name_end..];
        while !rest.is_empty() {
            if let Some(r) = rest.strip_prefix('[') {
                let close = r.find(']')?;
                let key = &r[..close];
                here = match key.parse::<usize>() {
                    Ok(i) if here.is_array() => here.get(i)?,
                    _ => here.get(key)?,
                };
                rest = &r[close + 1..];
            } else if let Some(r) = rest.strip_prefix('.') {
                let end = r.find(['[', '.']).unwrap_or(r.len());
                here = here.get(&r[..end])?;
                rest = &r[end..];
            } else {
                return None;
            }
        }
        Some(here)
    }
}

#[cfg(test)]
mod tests;
