//! Ironic's error envelope: `{"error_message": "<JSON text of {faultcode, faultstring,
//! debuginfo}>"}`, as python-ironicclient, openstacksdk and ironic-python-agent parse it.
//! The ramdisk agent's own errors are the inner object, unwrapped.

use serde_json::{Value, json};

/// `Client` for a 4xx, `Server` for a 5xx.
pub fn faultcode(status: u16) -> &'static str {
    if status >= 500 { "Server" } else { "Client" }
}

/// The envelope the engine answers errors with.
pub fn envelope(faultcode: &str, faultstring: &str) -> Value {
    let inner = json!({"faultcode": faultcode, "faultstring": faultstring, "debuginfo": null});
    json!({"error_message": inner.to_string()})
}

/// The `faultstring` of an error body: Ironic's envelope or an agent's bare fault. `None`
/// if the body is neither.
pub fn faultstring(body: &[u8]) -> Option<String> {
    let body: Value = serde_json::from_slice(body).ok()?;
    let inner = match body.get("error_message") {
        Some(Value::String(text)) => serde_json::from_str(text).ok()?,
        Some(other) => other.clone(),
        None => body,
    };
    inner.get("faultstring")?.as_str().map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_envelope_round_trips_and_bare_faults_are_read_too() {
        let body = envelope("Client", "Node x could not be found.").to_string();
        assert_eq!(
            faultstring(body.as_bytes()).as_deref(),
            Some("Node x could not be found.")
        );
        let inner: Value =
            serde_json::from_str(envelope("Server", "e")["error_message"].as_str().unwrap())
                .unwrap();
        assert_eq!(inner["faultcode"], "Server");
        assert!(inner["debuginfo"].is_null());
        let agent = br#"{"faultcode": "Client", "faultstring": "Agent is busy"}"#;
        assert_eq!(faultstring(agent).as_deref(), Some("Agent is busy"));
        assert_eq!(faultstring(b"not json"), None);
        assert_eq!(faultstring(b"{\"x\": 1}"), None);
        assert_eq!(faultcode(404), "Client");
        assert_eq!(faultcode(503), "Server");
    }
}
