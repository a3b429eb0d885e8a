//! Operator authentication, as Ironic's standalone mode has it: `noauth` (the default, for
//! an engine listening on loopback) or `http_basic` against an htpasswd file of bcrypt
//! hashes. Discovery and the agent endpoints stay public; agents prove themselves with
//! their per-boot token instead.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::{Arc, Mutex};

use axum::extract::{Request, State};
use axum::http::{HeaderValue, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use base64::Engine;
use sha2::{Digest, Sha256};

use super::App;
use super::error::ApiError;

pub enum Auth {
    NoAuth,
    HttpBasic {
        /// user → bcrypt hash, from the htpasswd file.
        users: HashMap<String, String>,
        /// sha256 of credentials already verified, so bcrypt (slow by design) runs once.
        verified: Mutex<HashSet<[u8; 32]>>,
    },
}

impl Auth {
    /// Reads an htpasswd file (`user:$2y$…` lines, bcrypt only).
    pub fn http_basic(path: &Path) -> Result<Auth, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let mut users = HashMap::new();
        for (n, line) in text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty() && !l.starts_with('#'))
        {
            let (user, hash) = line
                .split_once(':')
                .ok_or_else(|| format!("{}:{}: expected user:hash", path.display(), n + 1))?;
            if !hash.starts_with("$2") {
                return Err(format!(
                    "{}:{}: only bcrypt hashes are accepted (htpasswd -B)",
                    path.display(),
                    n + 1
                ));
            }
            users.insert(user.to_owned(), hash.trim().to_owned());
        }
        Ok(Auth::HttpBasic {
            users,
            verified: Mutex::default(),
        })
    }

    fn allows(&self, authorization: Option<&HeaderValue>) -> bool {
        let Auth::HttpBasic { users, verified } = self else {
            return true;
        };
        let Some(encoded) = authorization
            .and_then(|h| h.to_str().ok())
            .and_then(|h| h.strip_prefix("Basic "))
        else {
            return false;
        };
        let key: [u8; 32] = Sha256::digest(encoded.as_bytes()).into();
        if verified
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(&key)
        {
            return true;
        }
        let Ok(decoded) = base64::engine::general_purpose::STANDARD.decode(encoded.trim()) else {
            return false;
        };
        let Some((user, password)) = std::str::from_utf8(&decoded)
            .ok()
            .and_then(|s| s.split_once(':'))
        else {
            return false;
        };
        let ok = users
            .get(user)
            .is_some_and(|hash| bcrypt::verify(password, hash).unwrap_or(false));
        if ok {
            verified
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(key);
        }
        ok
    }
}

fn public(path: &str) -> bool {
    matches!(path, "/" | "/v1" | "/v1/" | "/v1/lookup" | "/v1/lookup/")
        || path.starts_with("/v1/heartbeat/")
}

pub async fn check(State(app): State<Arc<App>>, request: Request, next: Next) -> Response {
    if public(request.uri().path())
        || app
            .auth
            .allows(request.headers().get(header::AUTHORIZATION))
    {
        return next.run(request).await;
    }
    let mut response = ApiError::unauthorized("The request you have made requires authentication.")
        .into_response();
    response.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static("Basic realm=\"deployd\""),
    );
    response
}
