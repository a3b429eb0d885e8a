//! Operator authentication, as Ironic's standalone mode has it: `noauth` (the default, for
//! an engine listening on loopback) or `http_basic` against an htpasswd file of bcrypt
//! hashes. Discovery and the agent endpoints stay public; agents prove themselves with
//! their per-boot token instead.
//!
//! bcrypt is slow on purpose (about a quarter of a second at cost 12), so it must never
//! run where it can stall the engine:
//! - it runs on one thread of its own ([`Verifier`]), never on the async workers that
//!   answer heartbeats; at most [`QUEUE`] checks wait for it, and past that a request is
//!   refused at once with 503, so a flood of wrong passwords costs one core at most and
//!   cannot queue without bound;
//! - a successful check is remembered for [`REMEMBER`], keyed by a sha256 of the header,
//!   so a real client pays for bcrypt once, not per request, even during such a flood;
//! - an unknown user is checked against a real hash of the same cost, so the time of an
//!   answer does not tell which users exist.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use base64::Engine;
use sha2::{Digest, Sha256};
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::error::ApiError;
use crate::api::App;

/// How long a verified `Authorization` header is trusted without bcrypt.
pub const REMEMBER: Duration = Duration::from_secs(60);
/// How many checks may wait for the bcrypt thread before requests are refused.
pub const QUEUE: usize = 16;
/// How many verified headers are remembered at most (older ones are dropped first).
const REMEMBERED: usize = 1024;

/// A bcrypt hash of cost 12 that no password is checked into: the stand-in hash for
/// unknown users when the htpasswd file has none to borrow.
const STAND_IN: &str = "$2b$12$Mc4JMPDqGJ4Kb2kS6mAjG.oHCtSUC.06gkC6DXIgHKuVu/zlQYoea";

pub enum Auth {
    NoAuth,
    HttpBasic(Basic),
}

/// `http_basic`: the users, the remembered verifications and the bcrypt thread.
pub struct Basic {
    /// user → bcrypt hash, from the htpasswd file.
    users: HashMap<String, String>,
    /// What an unknown user's password is checked against: the costliest user's hash.
    stand_in: String,
    /// sha256 of a verified header → when it stops being trusted.
    verified: Mutex<HashMap<[u8; 32], Instant>>,
    verifier: Verifier,
}

/// Why a request is not let through.
#[derive(Debug, PartialEq, Eq)]
pub enum Refusal {
    Unauthorized,
    /// The bcrypt queue is full: try again shortly.
    Busy,
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
        let stand_in = users
            .values()
            .max_by_key(|h| cost(h))
            .cloned()
            .unwrap_or_else(|| STAND_IN.to_owned());
        Ok(Auth::HttpBasic(Basic {
            users,
            stand_in,
            verified: Mutex::default(),
            verifier: Verifier::start(),
        }))
    }

    /// Whether a request with this `Authorization` header may pass.
    pub async fn check(&self, authorization: Option<&HeaderValue>) -> Result<(), Refusal> {
        match self {
            Auth::NoAuth => Ok(()),
            Auth::HttpBasic(basic) => basic.check(authorization).await,
        }
    }
}

/// The cost field of a bcrypt hash (`$2b$12$…` → 12).
fn cost(hash: &str) -> u32 {
    hash.split('$')
        .nth(2)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

impl Basic {
    async fn check(&self, authorization: Option<&HeaderValue>) -> Result<(), Refusal> {
        // RFC 7235: the scheme is case-insensitive, and any amount of space follows it.
        let credentials = authorization
            .and_then(|h| h.to_str().ok())
            .and_then(|h| h.trim().split_once(' '))
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("basic"))
            .map(|(_, c)| c.trim())
            .ok_or(Refusal::Unauthorized)?;
        let key: [u8; 32] = Sha256::digest(credentials.as_bytes()).into();
        let now = Instant::now();
        if self.remembered(&key, now) {
            return Ok(());
        }
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(credentials)
            .map_err(|_| Refusal::Unauthorized)?;
        let (user, password) = std::str::from_utf8(&decoded)
            .ok()
            .and_then(|s| s.split_once(':'))
            .ok_or(Refusal::Unauthorized)?;
        let (known, hash) = match self.users.get(user) {
            Some(hash) => (true, hash.clone()),
            None => (false, self.stand_in.clone()),
        };
        let matches = self.verifier.verify(password.to_owned(), hash).await?;
        if !(known && matches) {
            return Err(Refusal::Unauthorized);
        }
        self.remember(key, now);
        Ok(())
    }

    fn remembered(&self, key: &[u8; 32], now: Instant) -> bool {
        let verified = self.verified.lock().unwrap_or_else(|p| p.into_inner());
        verified.get(key).is_some_and(|until| *until > now)
    }

    fn remember(&self, key: [u8; 32], now: Instant) {
        let mut verified = self.verified.lock().unwrap_or_else(|p| p.into_inner());
        if verified.len() >= REMEMBERED {
            verified.retain(|_, until| *until > now);
            if verified.len() >= REMEMBERED {
                verified.clear();
            }
        }
        verified.insert(key, now + REMEMBER);
    }
}

/// One thread that runs bcrypt checks, fed by a bounded queue.
struct Verifier {
    queue: std::sync::mpsc::SyncSender<Check>,
}

struct Check {
    password: String,
    hash: String,
    answer: oneshot::Sender<bool>,
}

impl Verifier {
    fn start() -> Verifier {
        let (queue, checks) = std::sync::mpsc::sync_channel::<Check>(QUEUE);
        std::thread::Builder::new()
            .name("deployd-bcrypt".into())
            .spawn(move || {
                for check in checks {
                    let ok = bcrypt::verify(&check.password, &check.hash).unwrap_or(false);
                    let _ = check.answer.send(ok);
                }
            })
            .expect("starting the bcrypt thread");
        Verifier { queue }
    }

    async fn verify(&self, password: String, hash: String) -> Result<bool, Refusal> {
        let (answer, answered) = oneshot::channel();
        let check = Check {
            password,
            hash,
            answer,
        };
        self.queue.try_send(check).map_err(|_| Refusal::Busy)?;
        answered.await.map_err(|_| Refusal::Busy)
    }
}

fn public(path: &str) -> bool {
    matches!(path, "/" | "/v1" | "/v1/" | "/v1/lookup" | "/v1/lookup/")
        || path.starts_with("/v1/heartbeat/")
}

pub async fn check(State(app): State<Arc<App>>, request: Request, next: Next) -> Response {
    if public(request.uri().path()) {
        return next.run(request).await;
    }
    match app
        .auth
        .check(request.headers().get(header::AUTHORIZATION))
        .await
    {
        Ok(()) => next.run(request).await,
        Err(Refusal::Unauthorized) => {
            let mut response =
                ApiError::unauthorized("The request you have made requires authentication.")
                    .into_response();
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Basic realm=\"deployd\""),
            );
            response
        }
        Err(Refusal::Busy) => {
            let mut response = ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "Too many authentication checks are in progress; retry shortly.",
            )
            .into_response();
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            response
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn htpasswd(dir: &Path, cost: u32) -> std::path::PathBuf {
        let path = dir.join("htpasswd");
        let hash = bcrypt::hash("secret", cost).unwrap();
        std::fs::write(&path, format!("admin:{hash}\n")).unwrap();
        path
    }

    fn header(scheme: &str, user_password: &str) -> HeaderValue {
        let encoded = base64::engine::general_purpose::STANDARD.encode(user_password);
        HeaderValue::from_str(&format!("{scheme} {encoded}")).unwrap()
    }

    #[tokio::test]
    async fn the_scheme_is_case_insensitive_and_wrong_answers_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let auth = Auth::http_basic(&htpasswd(dir.path(), 4)).unwrap();
        for scheme in ["Basic", "basic", "BASIC", "bAsIc "] {
            let h = header(scheme, "admin:secret");
            assert_eq!(auth.check(Some(&h)).await, Ok(()), "{scheme}");
        }
        for (scheme, creds) in [
            ("Basic", "admin:wrong"),
            ("Basic", "nobody:secret"),
            ("Bearer", "admin:secret"),
            ("Basic", "no-colon"),
        ] {
            let h = header(scheme, creds);
            assert_eq!(auth.check(Some(&h)).await, Err(Refusal::Unauthorized));
        }
        assert_eq!(auth.check(None).await, Err(Refusal::Unauthorized));
        let garbage = HeaderValue::from_static("Basic !!!");
        assert_eq!(auth.check(Some(&garbage)).await, Err(Refusal::Unauthorized));
    }

    #[test]
    fn an_unknown_user_is_checked_against_a_hash_of_the_same_cost() {
        let dir = tempfile::tempdir().unwrap();
        let Auth::HttpBasic(basic) = Auth::http_basic(&htpasswd(dir.path(), 5)).unwrap() else {
            unreachable!()
        };
        assert_eq!(cost(&basic.stand_in), 5);
        assert_eq!(cost(STAND_IN), 12);
        assert!(!bcrypt::verify("", STAND_IN).unwrap());
    }

    #[tokio::test]
    async fn a_verified_header_is_remembered_and_bcrypt_is_not_run_again() {
        let dir = tempfile::tempdir().unwrap();
        let Auth::HttpBasic(basic) = Auth::http_basic(&htpasswd(dir.path(), 4)).unwrap() else {
            unreachable!()
        };
        let h = header("Basic", "admin:secret");
        basic.check(Some(&h)).await.unwrap();
        // With the users gone, only the memory can let the same header through.
        let basic = Basic {
            users: HashMap::new(),
            ..basic
        };
        assert_eq!(basic.check(Some(&h)).await, Ok(()));
        let other = header("Basic", "admin:secret2");
        assert_eq!(basic.check(Some(&other)).await, Err(Refusal::Unauthorized));
    }

    #[tokio::test]
    async fn a_full_queue_refuses_at_once_instead_of_waiting() {
        let dir = tempfile::tempdir().unwrap();
        let Auth::HttpBasic(basic) = Auth::http_basic(&htpasswd(dir.path(), 10)).unwrap() else {
            unreachable!()
        };
        let basic = Arc::new(basic);
        let h = header("Basic", "admin:wrong");
        let tasks: Vec<_> = (0..QUEUE + 8)
            .map(|_| {
                let (basic, h) = (basic.clone(), h.clone());
                tokio::spawn(async move { basic.check(Some(&h)).await })
            })
            .collect();
        let mut busy = 0;
        for t in tasks {
            match t.await.unwrap() {
                Err(Refusal::Busy) => busy += 1,
                other => assert_eq!(other, Err(Refusal::Unauthorized)),
            }
        }
        assert!(
            busy >= 1,
            "more checks than the queue holds must be refused"
        );
    }
}
