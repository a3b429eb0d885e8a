//! JSON values as Python shows them, for the messages Ironic's clients compare: Ironic
//! formats them with Python's `repr` (`'x'`, `True`, `None`) and `str` (text as it is).

use serde_json::{Value, json};

/// A JSON value as Python's `repr` shows it after `json.loads`.
pub fn repr(v: &Value) -> String {
    match v {
        Value::Null => "None".into(),
        Value::Bool(true) => "True".into(),
        Value::Bool(false) => "False".into(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => format!("'{}'", s.replace('\\', "\\\\").replace('\'', "\\'")),
        Value::Array(items) => {
            let inner: Vec<String> = items.iter().map(repr).collect();
            format!("[{}]", inner.join(", "))
        }
        Value::Object(map) => {
            let inner: Vec<String> = map
                .iter()
                .map(|(k, v)| format!("{}: {}", repr(&json!(k)), repr(v)))
                .collect();
            format!("{{{}}}", inner.join(", "))
        }
    }
}

/// Python's `str`: text as it is, anything else as its `repr`.
pub fn str_of(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => repr(other),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[test]
    fn values_read_as_python_prints_them() {
        let v = json!({"a": [1, true, null, "it's"], "b": 1.5});
        assert_eq!(
            super::repr(&v),
            "{'a': [1, True, None, 'it\\'s'], 'b': 1.5}"
        );
        assert_eq!(super::str_of(&json!("x")), "x");
        assert_eq!(super::str_of(&json!(2)), "2");
    }
}
