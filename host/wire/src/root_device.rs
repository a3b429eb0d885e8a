//! Root device hints (`properties.root_device`), as Ironic parses them: which disk of a
//! machine the image goes to. Parsed once by the engine (a node whose hints cannot be
//! read is refused at `PATCH`, not at deploy) and by deployd's agent, which picks the
//! smallest disk that meets every hint.
//!
//! The hints and their types are Ironic's: `size` (GiB, a positive integer), `rotational`
//! (a boolean), and the strings `model`, `vendor`, `serial`, `wwn`,
//! `wwn_with_extension`, `wwn_vendor_extension`, `name`, `hctl` and `by_path`. A value
//! may start with an operator, as oslo's `specs_matcher` reads them: for numbers `==`,
//! `!=`, `>=`, `<=`, `>`, `<` (a bare number is `==`); for strings `s==`, `s!=`, `s>=`,
//! `s<=`, `s>`, `s<` and `<in>` (a substring) (a bare string is `s==`); and for either,
//! `<or>` between alternatives (`<or> sda <or> sdb`). Strings compare without case.

use serde_json::{Map, Value};

/// One hint: the disk's property and what it must be.
#[derive(Clone, Debug, PartialEq)]
pub struct Hint {
    pub field: Field,
    test: Test,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Field {
    Size,
    Rotational,
    Model,
    Vendor,
    Serial,
    Wwn,
    WwnWithExtension,
    WwnVendorExtension,
    Name,
    Hctl,
    ByPath,
}

const FIELDS: [(&str, Field); 11] = [
    ("size", Field::Size),
    ("rotational", Field::Rotational),
    ("model", Field::Model),
    ("vendor", Field::Vendor),
    ("serial", Field::Serial),
    ("wwn", Field::Wwn),
    ("wwn_with_extension", Field::WwnWithExtension),
    ("wwn_vendor_extension", Field::WwnVendorExtension),
    ("name", Field::Name),
    ("hctl", Field::Hctl),
    ("by_path", Field::ByPath),
];

#[derive(Clone, Debug, PartialEq)]
enum Test {
    Bool(bool),
    /// Any of these comparisons of a number of GiB.
    Number(Vec<(NumOp, u64)>),
    /// Any of these comparisons of lowercase text.
    Text(Vec<(TextOp, String)>),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum NumOp {
    Eq,
    Ne,
    Ge,
    Le,
    Gt,
    Lt,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum TextOp {
    Eq,
    Ne,
    Ge,
    Le,
    Gt,
    Lt,
    Contains,
}

/// What a disk is, as the hints look at it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DiskFacts {
    /// The kernel's name (`sda`), without `/dev/`.
    pub name: String,
    pub size: u64,
    pub rotational: bool,
    pub model: String,
    pub vendor: String,
    pub serial: String,
    pub wwn: String,
    pub wwn_with_extension: String,
    pub wwn_vendor_extension: String,
    pub hctl: String,
    /// `/dev/disk/by-path/…` names of the disk.
    pub by_path: Vec<String>,
}

/// The hints of a node, parsed. `None` or `{}`: no hints.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Hints(pub Vec<Hint>);

impl Hints {
    /// Reads `properties.root_device`; the error says which hint is wrong and why.
    pub fn parse(value: Option<&Value>) -> Result<Hints, String> {
        let map = match value {
            None | Some(Value::Null) => return Ok(Hints::default()),
            Some(Value::Object(m)) => m,
            Some(other) => return Err(format!("root device hints must be an object, not {other}")),
        };
        parse_map(map).map(Hints)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether `disk` meets every hint.
    pub fn matches(&self, disk: &DiskFacts) -> bool {
        self.0.iter().all(|hint| hint.matches(disk))
    }
}

fn parse_map(map: &Map<String, Value>) -> Result<Vec<Hint>, String> {
    let mut hints = Vec::new();
    for (name, value) in map {
        let field = FIELDS
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, f)| *f)
            .ok_or_else(|| {
                let names: Vec<&str> = FIELDS.iter().map(|(n, _)| *n).collect();
                format!(
                    "no such root device hint named {name:?}: the hints are {}",
                    names.join(", ")
                )
            })?;
        let bad = |why: &str| format!("root device hint {name:?} ({value}) {why}");
        let test = match (field, value) {
            (Field::Rotational, Value::Bool(b)) => Test::Bool(*b),
            (Field::Rotational, Value::String(s)) => match s.trim().to_lowercase().as_str() {
                "true" | "1" | "yes" | "on" | "y" | "t" => Test::Bool(true),
                "false" | "0" | "no" | "off" | "n" | "f" => Test::Bool(false),
                _ => return Err(bad("is not a boolean")),
            },
            (Field::Rotational, _) => return Err(bad("is not a boolean")),
            (Field::Size, Value::Number(n)) => match n.as_u64() {
                Some(n) if n > 0 => Test::Number(vec![(NumOp::Eq, n)]),
                _ => return Err(bad("must be a positive integer (GiB)")),
            },
            (Field::Size, Value::String(s)) => Test::Number(numbers(s).map_err(|e| bad(&e))?),
            (Field::Size, _) => return Err(bad("must be a positive integer (GiB)")),
            (_, Value::String(s)) => Test::Text(texts(field, s).map_err(|e| bad(&e))?),
            (_, _) => return Err(bad("is not a string")),
        };
        hints.push(Hint { field, test });
    }
    Ok(hints)
}

/// `<or> a <or> b` → [a, b]; anything else → [itself].
fn alternatives(expr: &str) -> Result<Vec<&str>, String> {
    let expr = expr.trim();
    if !expr.starts_with("<or>") {
        return Ok(vec![expr]);
    }
    let parts: Vec<&str> = expr.split("<or>").skip(1).map(str::trim).collect();
    if parts.iter().any(|p| p.is_empty()) {
        return Err("has an empty <or> alternative".into());
    }
    Ok(parts)
}

/// The operator `part` starts with (the first of `ops` that matches; else `bare`) and
/// the operand after it.
fn operator<'a, Op: Copy>(part: &'a str, ops: &[(&str, Op)], bare: Op) -> (Op, &'a str) {
    ops.iter()
        .find_map(|(s, op)| part.strip_prefix(s).map(|rest| (*op, rest.trim())))
        .unwrap_or((bare, part))
}

fn numbers(expr: &str) -> Result<Vec<(NumOp, u64)>, String> {
    const OPS: [(&str, NumOp); 7] = [
        ("==", NumOp::Eq),
        ("!=", NumOp::Ne),
        (">=", NumOp::Ge),
        ("<=", NumOp::Le),
        (">", NumOp::Gt),
        ("<", NumOp::Lt),
        // specs_matcher's `=` is "at least".
        ("=", NumOp::Ge),
    ];
    alternatives(expr)?
        .into_iter()
        .map(|part| {
            let (op, rest) = operator(part, &OPS, NumOp::Eq);
            match rest.parse::<u64>() {
                Ok(n) if n > 0 => Ok((op, n)),
                _ => Err(format!(
                    "must be a positive integer (GiB), with an operator if any of ==, !=, >=, <=, >, <: not {part:?}"
                )),
            }
        })
        .collect()
}

fn texts(field: Field, expr: &str) -> Result<Vec<(TextOp, String)>, String> {
    const OPS: [(&str, TextOp); 7] = [
        ("s==", TextOp::Eq),
        ("s!=", TextOp::Ne),
        ("s>=", TextOp::Ge),
        ("s<=", TextOp::Le),
        ("s>", TextOp::Gt),
        ("s<", TextOp::Lt),
        ("<in>", TextOp::Contains),
    ];
    alternatives(expr)?
        .into_iter()
        .map(|part| {
            let (op, rest) = operator(part, &OPS, TextOp::Eq);
            if ["==", "!=", ">=", "<=", ">", "<"]
                .iter()
                .any(|o| rest.starts_with(o))
            {
                return Err(format!(
                    "compares text: use s==, s!=, s>=, s<=, s>, s< or <in>, not {part:?}"
                ));
            }
            if rest.is_empty() {
                return Err("is empty".into());
            }
            let mut text = rest.to_lowercase();
            if field == Field::Name && !text.starts_with("/dev/") {
                text = format!("/dev/{text}");
            }
            Ok((op, text))
        })
        .collect()
}

impl Hint {
    fn matches(&self, disk: &DiskFacts) -> bool {
        let values: Vec<String> = match self.field {
            Field::Size | Field::Rotational => Vec::new(),
            Field::Model => vec![disk.model.clone()],
            Field::Vendor => vec![disk.vendor.clone()],
            Field::Serial => vec![disk.serial.clone()],
            Field::Wwn => vec![disk.wwn.clone()],
            Field::WwnWithExtension => vec![disk.wwn_with_extension.clone()],
            Field::WwnVendorExtension => vec![disk.wwn_vendor_extension.clone()],
            Field::Name => vec![format!("/dev/{}", disk.name)],
            Field::Hctl => vec![disk.hctl.clone()],
            Field::ByPath => disk.by_path.clone(),
        };
        match &self.test {
            Test::Bool(b) => *b == disk.rotational,
            Test::Number(any) => {
                let gib = disk.size >> 30;
                any.iter().any(|(op, n)| match op {
                    NumOp::Eq => gib == *n,
                    NumOp::Ne => gib != *n,
                    NumOp::Ge => gib >= *n,
                    NumOp::Le => gib <= *n,
                    NumOp::Gt => gib > *n,
                    NumOp::Lt => gib < *n,
                })
            }
            Test::Text(any) => values.iter().any(|value| {
                let value = value.trim().to_lowercase();
                any.iter().any(|(op, want)| {
                    let v = value.as_str();
                    let w = want.as_str();
                    match op {
                        TextOp::Eq => v == w,
                        TextOp::Ne => v != w,
                        TextOp::Ge => v >= w,
                        TextOp::Le => v <= w,
                        TextOp::Gt => v > w,
                        TextOp::Lt => v < w,
                        TextOp::Contains => v.contains(w),
                    }
                })
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn disk(name: &str, gib: u64, serial: &str, model: &str, rotational: bool) -> DiskFacts {
        DiskFacts {
            name: name.into(),
            size: gib << 30,
            serial: serial.into(),
            model: model.into(),
            rotational,
            hctl: "0:0:0:0".into(),
            by_path: vec!["/dev/disk/by-path/pci-0000:00:05.0".into()],
            ..DiskFacts::default()
        }
    }

    fn meets(hints: Value, d: &DiskFacts) -> bool {
        Hints::parse(Some(&hints)).unwrap().matches(d)
    }

    #[test]
    fn every_operator_of_ironics_grammar_is_read() {
        let d = disk("sda", 100, "SSD-1", "Fast One  ", false);
        for yes in [
            json!({"size": 100}),
            json!({"size": "100"}),
            json!({"size": ">= 100"}),
            json!({"size": "<= 100", "rotational": false}),
            json!({"size": "> 99"}),
            json!({"size": "< 101"}),
            json!({"size": "!= 8"}),
            json!({"size": "<or> 8 <or> 100"}),
            json!({"name": "sda"}),
            json!({"name": "/dev/sda"}),
            json!({"serial": "ssd-1"}),
            json!({"serial": "s== SSD-1"}),
            json!({"serial": "s!= SSD-2"}),
            json!({"model": "<in> fast"}),
            json!({"model": "<or> slow one <or> fast one"}),
            json!({"serial": "s>= SSD-0", "vendor": "s<= z"}),
            json!({"hctl": "0:0:0:0"}),
            json!({"by_path": "/dev/disk/by-path/pci-0000:00:05.0"}),
            json!({"rotational": "false"}),
        ] {
            assert!(meets(yes.clone(), &d), "{yes}");
        }
        for no in [
            json!({"size": 8}),
            json!({"size": "> 100"}),
            json!({"serial": "ssd-2"}),
            json!({"model": "<in> slow"}),
            json!({"rotational": true}),
            json!({"name": "sdb"}),
            json!({"wwn": "0x5000"}),
        ] {
            assert!(!meets(no.clone(), &d), "{no}");
        }
    }

    #[test]
    fn malformed_hints_are_refused_naming_the_hint() {
        for (bad, words) in [
            (
                json!({"colour": "red"}),
                "no such root device hint named \"colour\"",
            ),
            (json!({"size": "big"}), "\"size\""),
            (json!({"size": 0}), "positive"),
            (json!({"size": -5}), "positive"),
            (json!({"size": ">= x"}), "positive"),
            (json!({"size": true}), "positive"),
            (json!({"rotational": "maybe"}), "not a boolean"),
            (json!({"serial": 42}), "not a string"),
            (json!({"model": "== fast"}), "s=="),
            (json!({"model": "<or> a <or>"}), "empty <or>"),
            (json!("sda"), "must be an object"),
        ] {
            let e = Hints::parse(Some(&bad)).unwrap_err();
            assert!(e.contains(words), "{bad}: {e}");
        }
        assert!(Hints::parse(None).unwrap().is_empty());
        assert!(Hints::parse(Some(&json!({}))).unwrap().is_empty());
    }
}
