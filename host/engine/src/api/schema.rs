//! Ironic's resource documents as tables of fields: what a client may set at create and by
//! PATCH, from which microversion each field exists, and how values are parsed.
//!
//! One table per resource ([`Schema`]) drives, for every resource alike:
//! - create bodies: unknown fields are a 400, fields newer than the request's version a
//!   406, and values are coerced as Ironic's API types do (`"True"` is a boolean);
//! - JSON PATCH (RFC 6902 `add`/`replace`/`remove` over the whole document, with the
//!   errors of the `jsonpatch` library Ironic uses, which clients match);
//! - what a version sees: a field newer than the request is left out of the answer, and
//!   `?fields=` may only name fields that exist at that version.

use serde_json::{Map, Value};

use super::http::error::ApiError;
use super::http::version::Version;

/// How a field's value is parsed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ty {
    /// A string (at most 255 characters) or null.
    Text,
    /// A boolean; strings such as `"true"`, `"False"`, `"1"`, `"off"` are accepted.
    Bool,
    /// A boolean or null, where null means "unset, the engine decides" (a node's
    /// `automated_clean`): removing it unsets it, where removing a [`Ty::Bool`] makes it
    /// false.
    OptionalBool,
    /// A UUID string or null.
    Uuid,
    /// A JSON object; null means empty.
    Map,
    /// A list of strings; null means empty.
    List,
    /// An integer (or a string of one) or null.
    Int,
    /// Any JSON value.
    Any,
}

/// Who may set a field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Only the engine (shown, never set by a client).
    ReadOnly,
    /// At create only.
    Create,
    /// At create and by PATCH.
    Write,
    /// At create only, and never shown: what a create asks for rather than a field of the
    /// resource (an allocation's `node` to backfill).
    Input,
}

#[derive(Clone, Copy, Debug)]
pub struct Field {
    pub name: &'static str,
    pub ty: Ty,
    /// The first microversion (`1.since`) that has the field.
    pub since: u32,
    pub access: Access,
}

impl Field {
    pub const fn rw(name: &'static str, ty: Ty, since: u32) -> Field {
        Field {
            name,
            ty,
            since,
            access: Access::Write,
        }
    }

    pub const fn ro(name: &'static str, ty: Ty, since: u32) -> Field {
        Field {
            name,
            ty,
            since,
            access: Access::ReadOnly,
        }
    }

    pub const fn input(name: &'static str, ty: Ty, since: u32) -> Field {
        Field {
            name,
            ty,
            since,
            access: Access::Input,
        }
    }

    pub const fn create(name: &'static str, ty: Ty, since: u32) -> Field {
        Field {
            name,
            ty,
            since,
            access: Access::Create,
        }
    }
}

/// A resource's fields.
pub struct Schema {
    /// The resource's name in messages (`Node`, `Chassis`, …).
    pub kind: &'static str,
    pub fields: &'static [Field],
}

impl Schema {
    pub fn field(&self, name: &str) -> Option<&Field> {
        self.fields.iter().find(|f| f.name == name)
    }

    /// A create body, checked and coerced field by field.
    pub fn create(
        &self,
        input: Map<String, Value>,
        version: Version,
    ) -> Result<Map<String, Value>, ApiError> {
        let mut out = Map::new();
        for (key, value) in input {
            let field = self
                .field(&key)
                .filter(|f| f.access != Access::ReadOnly)
                .ok_or_else(|| {
                    ApiError::bad_request(format!(
                        "Additional properties are not allowed ('{key}' was unexpected)"
                    ))
                })?;
            gate(field, version)?;
            out.insert(key, coerce(field, value)?);
        }
        Ok(out)
    }

    /// Applies a JSON PATCH to `doc` (the resource as the API shows it, every field present).
    /// Only [`Access::Write`] fields may be touched; removing a top-level field resets it
    /// (null, or empty for maps and lists), as Ironic does.
    pub fn patch(
        &self,
        doc: &mut Map<String, Value>,
        ops: &Value,
        version: Version,
    ) -> Result<(), ApiError> {
        let list = ops.as_array().ok_or_else(|| {
            ApiError::bad_request("Invalid patch: a JSON PATCH is a list of operations")
        })?;
        for op in list {
            let kind = op.get("op").and_then(Value::as_str).unwrap_or_default();
            let path = op.get("path").and_then(Value::as_str).unwrap_or_default();
            if !matches!(kind, "add" | "replace" | "remove") {
                return Err(ApiError::bad_request(format!(
                    "Invalid patch: operation '{kind}' is not supported; use add, replace or remove"
                )));
            }
            let parts = pointer(path).ok_or_else(|| {
                ApiError::bad_request(format!("Invalid patch: '{path}' is not a JSON pointer"))
            })?;
            let top = parts.first().map(String::as_str).unwrap_or_default();
            let field = self.field(top).ok_or_else(|| {
                ApiError::bad_request(format!(
                    "Adding a new attribute (/{top}) to the root of the resource is not allowed"
                ))
            })?;
            if field.access != Access::Write {
                return Err(ApiError::bad_request(format!(
                    "'/{top}' is an internal attribute and can not be updated"
                )));
            }
            gate(field, version)?;
            let value = op.get("value").cloned();
            if kind != "remove" && value.is_none() {
                return Err(ApiError::bad_request(format!(
                    "Invalid patch: '{kind}' of {path} needs a value"
                )));
            }
            let failed = |reason: String| {
                ApiError::bad_request(format!(
                    "Couldn't apply patch '{}'. Reason: {reason}",
                    python_repr(ops)
                ))
            };
            if parts.len() == 1 {
                let value = match value {
                    Some(v) => coerce(field, v)?,
                    None => empty(field.ty),
                };
                doc.insert(top.to_owned(), value);
                continue;
            }
            let (leaf, parents) = parts.split_last().expect("two parts or more");
            let mut target: &mut Value = doc.get_mut(top).expect("every field is in the document");
            for p in &parents[1..] {
                target = match target {
                    Value::Object(m) => m.get_mut(p),
                    Value::Array(a) => p.parse::<usize>().ok().and_then(|i| a.get_mut(i)),
                    _ => None,
                }
                .ok_or_else(|| failed(format!("can't {kind} a non-existent object '{p}'")))?;
            }
            if target.is_null() && kind == "add" {
                *target = Value::Object(Map::new());
            }
            match (target, kind) {
                (Value::Object(m), "add") => {
                    m.insert(leaf.clone(), value.expect("checked"));
                }
                (Value::Object(m), "replace") => match m.get_mut(leaf) {
                    Some(slot) => *slot = value.expect("checked"),
                    None => {
                        return Err(failed(format!(
                            "can't replace a non-existent object '{leaf}'"
                        )));
                    }
                },
                (Value::Object(m), _) => {
                    if m.remove(leaf).is_none() {
                        return Err(failed(format!(
                            "can't remove a non-existent object '{leaf}'"
                        )));
                    }
                }
                (Value::Array(a), _) => array_op(a, leaf, kind, value).map_err(failed)?,
                _ => {
                    return Err(failed(format!(
                        "can't {kind} '{leaf}': its parent is not a container"
                    )));
                }
            }
            let whole = doc.remove(top).expect("present");
            doc.insert(top.to_owned(), coerce(field, whole)?);
        }
        Ok(())
    }

    /// Leaves out of `doc` the fields a request at `version` does not know.
    pub fn show(&self, doc: &mut Map<String, Value>, version: Version) {
        let shown = |f: &Field| f.access != Access::Input && version.at_least(f.since);
        // At a version that shows every field (the usual case) there is nothing to hide.
        if self.fields.iter().all(shown) {
            return;
        }
        doc.retain(|k, _| self.field(k).is_none_or(shown));
    }

    /// The names of `?fields=a,b`: each must be a field of the resource at `version`
    /// (`links` is always allowed).
    pub fn fields<'a>(&self, text: &'a str, version: Version) -> Result<Vec<&'a str>, ApiError> {
        let names: Vec<&str> = text
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .collect();
        let unknown: Vec<&str> = names
            .iter()
            .copied()
            .filter(|n| *n != "links" && self.field(n).is_none())
            .collect();
        if !unknown.is_empty() {
            return Err(ApiError::bad_request(format!(
                "Field(s) \"{}\" are not valid",
                unknown.join(", ")
            )));
        }
        for n in &names {
            if let Some(f) = self.field(n) {
                gate(f, version)?;
            }
        }
        Ok(names)
    }
}

/// A field newer than the request's version: 406, as Ironic answers.
fn gate(field: &Field, version: Version) -> Result<(), ApiError> {
    if version.at_least(field.since) {
        return Ok(());
    }
    Err(ApiError::not_acceptable(format!(
        "The field \"{}\" needs API version 1.{} or newer; the request is at {version}.",
        field.name, field.since
    )))
}

/// The value a top-level field is reset to by `remove`.
fn empty(ty: Ty) -> Value {
    match ty {
        Ty::Map => Value::Object(Map::new()),
        Ty::List => Value::Array(Vec::new()),
        Ty::Bool => Value::Bool(false),
        _ => Value::Null,
    }
}

/// Parses `value` as `field`'s type, as Ironic's API types do.
pub fn coerce(field: &Field, value: Value) -> Result<Value, ApiError> {
    let invalid = |what: &str, v: &Value| {
        ApiError::bad_request(format!(
            "Invalid input for field/attribute {}. Value: {v}. {what}",
            field.name
        ))
    };
    Ok(match (field.ty, value) {
        (Ty::Any, v) => v,
        (Ty::Map | Ty::List, Value::Null) => empty(field.ty),
        (_, Value::Null) => Value::Null,
        (Ty::Text, Value::String(s)) if s.chars().count() <= 255 => Value::String(s),
        (Ty::Text, v) => return Err(invalid("Expected a string of at most 255 characters", &v)),
        (Ty::Bool | Ty::OptionalBool, Value::Bool(b)) => Value::Bool(b),
        (Ty::Bool | Ty::OptionalBool, v) => {
            Value::Bool(parse_bool(&v).ok_or_else(|| invalid("Expected a boolean", &v))?)
        }
        (Ty::Uuid, Value::String(s)) => match uuid::Uuid::parse_str(&s) {
            Ok(u) => Value::String(u.to_string()),
            Err(_) => {
                return Err(ApiError::bad_request(format!(
                    "Expected UUID for {}: {s}",
                    field.name
                )));
            }
        },
        (Ty::Uuid, v) => return Err(invalid("Expected a UUID", &v)),
        (Ty::Map, Value::Object(m)) => Value::Object(m),
        (Ty::Map, v) => return Err(invalid("Expected an object", &v)),
        (Ty::List, Value::Array(a)) if a.iter().all(Value::is_string) => Value::Array(a),
        (Ty::List, v) => return Err(invalid("Expected a list of strings", &v)),
        (Ty::Int, Value::Number(n)) if n.is_i64() => Value::Number(n),
        (Ty::Int, Value::String(s)) if s.trim().parse::<i64>().is_ok() => {
            Value::from(s.trim().parse::<i64>().expect("checked"))
        }
        (Ty::Int, v) => return Err(invalid("Expected an integer", &v)),
    })
}

/// Ironic's (oslo's) strict boolean strings, in any case.
pub fn parse_bool(v: &Value) -> Option<bool> {
    match v {
        Value::Bool(b) => Some(*b),
        Value::String(s) => match s.trim().to_ascii_lowercase().as_str() {
            "1" | "t" | "true" | "on" | "y" | "yes" => Some(true),
            "0" | "f" | "false" | "off" | "n" | "no" => Some(false),
            _ => None,
        },
        Value::Number(n) => match n.as_i64() {
            Some(1) => Some(true),
            Some(0) => Some(false),
            _ => None,
        },
        _ => None,
    }
}

/// A JSON pointer's parts (`/a/b~1c` → `a`, `b/c`); None if it does not start with `/`.
fn pointer(path: &str) -> Option<Vec<String>> {
    let rest = path.strip_prefix('/')?;
    Some(
        rest.split('/')
            .map(|p| p.replace("~1", "/").replace("~0", "~"))
            .collect(),
    )
}

fn array_op(
    a: &mut Vec<Value>,
    leaf: &str,
    kind: &str,
    value: Option<Value>,
) -> Result<(), String> {
    let index = if leaf == "-" && kind == "add" {
        a.len()
    } else {
        leaf.parse::<usize>()
            .map_err(|_| format!("'{leaf}' is not a valid index"))?
    };
    match kind {
        "add" if index <= a.len() => a.insert(index, value.expect("checked")),
        "replace" if index < a.len() => a[index] = value.expect("checked"),
        "remove" if index < a.len() => {
            a.remove(index);
        }
        _ => return Err("can't replace outside of list".to_owned()),
    }
    Ok(())
}

/// A JSON value as Python prints it, for the patch in Ironic's PatchError message.
fn python_repr(v: &Value) -> String {
    match v {
        Value::Null => "None".into(),
        Value::Bool(true) => "True".into(),
        Value::Bool(false) => "False".into(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => format!("'{s}'"),
        Value::Array(a) => format!(
            "[{}]",
            a.iter().map(python_repr).collect::<Vec<_>>().join(", ")
        ),
        Value::Object(m) => format!(
            "{{{}}}",
            m.iter()
                .map(|(k, v)| format!("'{k}': {}", python_repr(v)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const FIELDS: &[Field] = &[
        Field::ro("uuid", Ty::Uuid, 1),
        Field::rw("name", Ty::Text, 1),
        Field::rw("extra", Ty::Map, 1),
        Field::rw("protected", Ty::Bool, 48),
        Field::create("node_uuid", Ty::Uuid, 1),
    ];
    const SCHEMA: Schema = Schema {
        kind: "Thing",
        fields: FIELDS,
    };

    fn doc() -> Map<String, Value> {
        json!({"uuid": "1be26c0b-03f2-4d2e-ae87-c02d7f33c123", "name": null, "extra": {"a": 1},
               "protected": false, "node_uuid": null})
        .as_object()
        .unwrap()
        .clone()
    }

    #[test]
    fn create_coerces_and_refuses_unknown_read_only_and_newer_fields() {
        let input = json!({"name": "x", "protected": "True"})
            .as_object()
            .unwrap()
            .clone();
        let out = SCHEMA.create(input, Version(48)).unwrap();
        assert_eq!(out["protected"], json!(true));
        for (body, status) in [
            (json!({"bogus": 1}), 400),
            (json!({"uuid": "1be26c0b-03f2-4d2e-ae87-c02d7f33c123"}), 400),
            (json!({"protected": true}), 406),
            (json!({"name": 5}), 400),
            (json!({"node_uuid": "not-a-uuid"}), 400),
        ] {
            let err = SCHEMA
                .create(body.as_object().unwrap().clone(), Version(47))
                .unwrap_err();
            assert_eq!(err.status.as_u16(), status, "{body}");
        }
    }

    #[test]
    fn patch_follows_jsonpatch_and_ironic() {
        let mut d = doc();
        let ops = json!([
            {"op": "add", "path": "/extra/b", "value": 2},
            {"op": "replace", "path": "/name", "value": "n"},
            {"op": "replace", "path": "/protected", "value": "true"},
        ]);
        SCHEMA.patch(&mut d, &ops, Version(60)).unwrap();
        assert_eq!(d["extra"], json!({"a": 1, "b": 2}));
        assert_eq!(
            (d["name"].clone(), d["protected"].clone()),
            (json!("n"), json!(true))
        );
        SCHEMA
            .patch(
                &mut d,
                &json!([{"op": "remove", "path": "/extra"}, {"op": "remove", "path": "/name"}]),
                Version(60),
            )
            .unwrap();
        assert_eq!(
            (d["extra"].clone(), d["name"].clone()),
            (json!({}), Value::Null)
        );

        let err = SCHEMA
            .patch(
                &mut d,
                &json!([{"op": "remove", "path": "/extra/prop"}]),
                Version(60),
            )
            .unwrap_err();
        assert!(
            err.message
                .ends_with("Reason: can't remove a non-existent object 'prop'"),
            "{}",
            err.message
        );
        for (ops, status) in [
            (
                json!([{"op": "replace", "path": "/uuid", "value": "x"}]),
                400,
            ),
            (json!([{"op": "add", "path": "/new", "value": 1}]), 400),
            (json!([{"op": "move", "path": "/name"}]), 400),
            (
                json!([{"op": "replace", "path": "/protected", "value": true}]),
                406,
            ),
        ] {
            let err = SCHEMA.patch(&mut doc(), &ops, Version(47)).unwrap_err();
            assert_eq!(err.status.as_u16(), status, "{ops}");
        }
    }

    #[test]
    fn versions_hide_newer_fields() {
        let mut d = doc();
        SCHEMA.show(&mut d, Version(47));
        assert!(!d.contains_key("protected") && d.contains_key("extra"));
        assert_eq!(
            SCHEMA.fields("uuid, name", Version(1)).unwrap(),
            ["uuid", "name"]
        );
        assert_eq!(
            SCHEMA
                .fields("protected", Version(47))
                .unwrap_err()
                .status
                .as_u16(),
            406
        );
        assert_eq!(
            SCHEMA
                .fields("nope", Version(47))
                .unwrap_err()
                .status
                .as_u16(),
            400
        );
    }
}
