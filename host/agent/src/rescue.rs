//! `rescue.finalize_rescue`, as ironic-python-agent's rescue extension has it: the rescue
//! password's hash (crypt's `$5$`/`$6$`, `hashed: true`, as Ironic sends it) is written
//! where the ramdisk reads it (`--rescue-password-file`), then the agent stops; deployd's
//! ramdisk then sets up a `rescue` login with that hash on the serial console and over
//! the network (`init.sh`).

use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::Path;

use serde_json::Value;

use crate::commands::AgentError;

/// Writes the hash in `params` to `file` (mode 0600), or says why not.
pub fn finalize(file: Option<&Path>, params: &Value) -> Result<(), AgentError> {
    let file = file.ok_or_else(|| {
        AgentError::InvalidParams(
            "this agent was started without --rescue-password-file: it cannot set up a rescue"
                .into(),
        )
    })?;
    let hash = params["rescue_password"].as_str().unwrap_or_default();
    if params["hashed"] != Value::Bool(true) {
        return Err(AgentError::InvalidParams(
            "rescue_password must come hashed (\"hashed\": true), as Ironic sends it".into(),
        ));
    }
    if !is_crypt_hash(hash) {
        return Err(AgentError::InvalidParams(
            "rescue_password is not a SHA-crypt hash ($5$… or $6$…)".into(),
        ));
    }
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(file)
        .and_then(|mut f| f.write_all(hash.as_bytes()).and_then(|()| f.sync_all()));
    written.map_err(|e| AgentError::InvalidParams(format!("writing {}: {e}", file.display())))
}

/// `$5$salt$digest` or `$6$…` (an optional `rounds=N$` after the id), from crypt's
/// alphabet only: nothing that could break a line of `/etc/shadow`.
fn is_crypt_hash(hash: &str) -> bool {
    let fields: Vec<&str> = hash.split('$').collect();
    let allowed = |s: &str| {
        !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'/' || b == b'=')
    };
    matches!(fields.as_slice(), ["", "5" | "6", rest @ ..] if (2..=3).contains(&rest.len()) && rest.iter().all(|f| allowed(f)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn writes_a_hash_and_refuses_anything_else() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("pw");
        let hash = "$5$salt1234$JR6dBKbsnBZUberntG.C1thHq3lbqZS1ZQECPMdkD3/";
        finalize(
            Some(&file),
            &json!({"rescue_password": hash, "hashed": true}),
        )
        .unwrap();
        assert_eq!(std::fs::read_to_string(&file).unwrap(), hash);
        let refused = |params: Value| finalize(Some(&file), &params).unwrap_err().to_string();
        assert!(refused(json!({"rescue_password": "plain", "hashed": false})).contains("hashed"));
        assert!(
            refused(json!({"rescue_password": "x:y\nroot::0", "hashed": true}))
                .contains("SHA-crypt")
        );
        assert!(
            refused(json!({"rescue_password": "$1$a$b", "hashed": true})).contains("SHA-crypt")
        );
        let none = finalize(None, &json!({"rescue_password": hash, "hashed": true}));
        assert!(
            none.unwrap_err()
                .to_string()
                .contains("--rescue-password-file")
        );
    }
}
