//! Operator authentication, as Ironic's standalone mode has it: `noauth` (the default, for
//! an engine listening on loopback) or `http_basic` against an htpasswd file of bcrypt
//! hashes. Discovery and the agent endpoints stay public; agents prove themselves with
//! their per-boot token instead.
//!
//! bcrypt is slow on purpose (about a quarter of a second at cost 12), so it must never
//! run where it can stall the engine, and a flood of wrong passwords must not lock a real
//! operator out:
//! - it runs on one thread of its own ([`Verifier`]), never on the async workers that
//!   answer heartbeats, so a flood costs one core at most;
//! - the checks wait in one queue per client address, served in turn: at most
//!   [`QUEUE`] per client and [`CLIENTS`] clients, past which a request is refused at once
//!   with 503. A flooding client fills only its own queue; an operator elsewhere waits
//!   for one check per busy client, not for the flood;
//! - a successful check is remembered for [`REMEMBER`], and a failed one for [`FAILED`],
//!   keyed by a sha256 of the header: a real client pays for bcrypt once, not per request,
//!   and the same wrong header sent again is refused without running bcrypt;
//! - an unknown user is checked against a real hash of the same cost, so the time of an
//!   answer does not tell which users exist;
//! - refusals under overload are logged once per [`LOG_EVERY`] with their count.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
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
/// How long a header that failed is refused without bcrypt.
pub const FAILED: Duration = Duration::from_secs(10);
/// How many checks of one client may wait for the bcrypt thread.
pub const QUEUE: usize = 4;
/// How many clients may have checks waiting.
pub const CLIENTS: usize = 256;
/// How often refusals under overload are logged (with how many there were).
const LOG_EVERY: Duration = Duration::from_secs(10);
/// How many headers each memory holds at most (older ones are dropped first).
const REMEMBERED: usize = 4096;

/// A bcrypt hash of cost 12 that no password is checked into: the stand-in hash for
/// unknown users when the htpasswd file has none to borrow.
const STAND_IN: &str = "$2b$12$Mc4JMPDqGJ4Kb2kS6mAjG.oHCtSUC.06gkC6DXIgHKuVu/zlQYoea";

/// Who a request passed authentication as: the `http_basic` user, none under `noauth`.
/// Put in each operator request's extensions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct User(pub Option<String>);

pub enum Auth {
    NoAuth,
    HttpBasic(Box<Basic>),
}

/// `http_basic`: the users, the remembered verifications and the bcrypt thread.
pub struct Basic {
    /// user → bcrypt hash, from the htpasswd file.
    users: HashMap<String, String>,
    /// What an unknown user's password is checked against: the costliest user's hash.
    stand_in: String,
    /// Headers verified, and headers refused, by sha256, until they are forgotten.
    verified: Memory,
    refused: Memory,
    verifier: Verifier,
}

/// sha256 of a header → until when it is remembered; bounded.
#[derive(Default)]
struct Memory(Mutex<HashMap<[u8; 32], Instant>>);

impl Memory {
    fn holds(&self, key: &[u8; 32], now: Instant) -> bool {
        let map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        map.get(key).is_some_and(|until| *until > now)
    }

    fn insert(&self, key: [u8; 32], until: Instant, now: Instant) {
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if map.len() >= REMEMBERED {
            map.retain(|_, until| *until > now);
            if map.len() >= REMEMBERED {
                map.clear();
            }
        }
        map.insert(key, until);
    }
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
        Ok(Auth::HttpBasic(Box::new(Basic {
            users,
            stand_in,
            verified: Memory::default(),
            refused: Memory::default(),
            verifier: Verifier::start(),
        })))
    }

    /// Whether a request with this `Authorization` header, from `client`, may pass; as
    /// whom (none under `noauth`).
    pub async fn check(
        &self,
        authorization: Option<&HeaderValue>,
        client: Option<IpAddr>,
    ) -> Result<User, Refusal> {
        match self {
            Auth::NoAuth => Ok(User(None)),
            Auth::HttpBasic(basic) => basic.check(authorization, client).await.map(Some).map(User),
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
    async fn check(
        &self,
        authorization: Option<&HeaderValue>,
        client: Option<IpAddr>,
    ) -> Result<String, Refusal> {
        // RFC 7235: the scheme is case-insensitive, and any amount of space follows it.
        let credentials = authorization
            .and_then(|h| h.to_str().ok())
            .and_then(|h| h.trim().split_once(' '))
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("basic"))
            .map(|(_, c)| c.trim())
            .ok_or(Refusal::Unauthorized)?;
        let key: [u8; 32] = Sha256::digest(credentials.as_bytes()).into();
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(credentials)
            .map_err(|_| Refusal::Unauthorized)?;
        let (user, password) = std::str::from_utf8(&decoded)
            .ok()
            .and_then(|s| s.split_once(':'))
            .ok_or(Refusal::Unauthorized)?;
        let now = Instant::now();
        if self.verified.holds(&key, now) {
            return Ok(user.to_owned());
        }
        if self.refused.holds(&key, now) {
            return Err(Refusal::Unauthorized);
        }
        let (known, hash) = match self.users.get(user) {
            Some(hash) => (true, hash.clone()),
            None => (false, self.stand_in.clone()),
        };
        let client = client.unwrap_or(IpAddr::from([0, 0, 0, 0]));
        let matches = self
            .verifier
            .verify(client, password.to_owned(), hash)
            .await?;
        let now = Instant::now();
        if !(known && matches) {
            self.refused.insert(key, now + FAILED, now);
            return Err(Refusal::Unauthorized);
        }
        self.verified.insert(key, now + REMEMBER, now);
        Ok(user.to_owned())
    }
}

/// One thread that runs bcrypt checks, from one bounded queue per client, in turn.
struct Verifier {
    queues: Arc<(Mutex<Queues>, Condvar)>,
    overload: Overload,
}

struct Check {
    password: String,
    hash: String,
    answer: oneshot::Sender<bool>,
}

/// The checks waiting, by client, and the clients in the order they are served.
#[derive(Default)]
struct Queues {
    waiting: HashMap<IpAddr, VecDeque<Check>>,
    turns: VecDeque<IpAddr>,
}

impl Queues {
    fn push(&mut self, client: IpAddr, check: Check) -> Result<(), Check> {
        let full = self.waiting.len() >= CLIENTS;
        match self.waiting.get_mut(&client) {
            Some(queue) if queue.len() >= QUEUE => Err(check),
            Some(queue) => {
                queue.push_back(check);
                Ok(())
            }
            None if full => Err(check),
            None => {
                self.waiting.insert(client, VecDeque::from([check]));
                self.turns.push_back(client);
                Ok(())
            }
        }
    }

    /// The next client's oldest check; the client goes to the back of the line.
    fn pop(&mut self) -> Option<Check> {
        let client = self.turns.pop_front()?;
        let queue = self.waiting.get_mut(&client)?;
        let check = queue.pop_front();
        if queue.is_empty() {
            self.waiting.remove(&client);
        } else {
            self.turns.push_back(client);
        }
        check
    }
}

impl Verifier {
    fn start() -> Verifier {
        let queues = Arc::new((Mutex::new(Queues::default()), Condvar::new()));
        let served = queues.clone();
        std::thread::Builder::new()
            .name("deployd-bcrypt".into())
            .spawn(move || {
                let (lock, ready) = &*served;
                loop {
                    let check = {
                        let mut queues = lock.lock().unwrap_or_else(|p| p.into_inner());
                        loop {
                            if let Some(check) = queues.pop() {
                                break check;
                            }
                            queues = ready.wait(queues).unwrap_or_else(|p| p.into_inner());
                        }
                    };
                    if check.answer.is_closed() {
                        continue; // The client went away while it waited.
                    }
                    let ok = bcrypt::verify(&check.password, &check.hash).unwrap_or(false);
                    let _ = check.answer.send(ok);
                }
            })
            .expect("starting the bcrypt thread");
        Verifier {
            queues,
            overload: Overload::default(),
        }
    }

    async fn verify(
        &self,
        client: IpAddr,
        password: String,
        hash: String,
    ) -> Result<bool, Refusal> {
        let (answer, answered) = oneshot::channel();
        let check = Check {
            password,
            hash,
            answer,
        };
        {
            let (lock, ready) = &*self.queues;
            let mut queues = lock.lock().unwrap_or_else(|p| p.into_inner());
            if queues.push(client, check).is_err() {
                drop(queues);
                self.overload.refused(client);
                return Err(Refusal::Busy);
            }
            ready.notify_one();
        }
        answered.await.map_err(|_| Refusal::Busy)
    }
}

/// Refusals under overload, counted and logged once per [`LOG_EVERY`].
#[derive(Default)]
struct Overload {
    count: AtomicU64,
    logged: Mutex<Option<Instant>>,
}

impl Overload {
    fn refused(&self, client: IpAddr) {
        let count = self.count.fetch_add(1, Ordering::Relaxed) + 1;
        let now = Instant::now();
        let mut logged = self.logged.lock().unwrap_or_else(|p| p.into_inner());
        if logged.is_none_or(|at| now.duration_since(at) >= LOG_EVERY) {
            *logged = Some(now);
            tracing::warn!(
                %client,
                refused_since_start = count,
                "authentication checks refused (503): too many waiting for bcrypt"
            );
        }
    }
}

fn public(path: &str) -> bool {
    matches!(
        path,
        "/" | "/v1" | "/v1/" | "/v1/lookup" | "/v1/lookup/" | "/v1/continue_inspection"
    ) || path.starts_with("/v1/heartbeat/")
}

pub async fn check(State(app): State<Arc<App>>, mut request: Request, next: Next) -> Response {
    if public(request.uri().path()) {
        return next.run(request).await;
    }
    let client = request
        .extensions()
        .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
        .map(|c| c.0.ip());
    match app
        .auth
        .check(request.headers().get(header::AUTHORIZATION), client)
        .await
    {
        Ok(user) => {
            request.extensions_mut().insert(user);
            next.run(request).await
        }
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
            let user = User(Some("admin".into()));
            assert_eq!(auth.check(Some(&h), None).await, Ok(user), "{scheme}");
        }
        for (scheme, creds) in [
            ("Basic", "admin:wrong"),
            ("Basic", "nobody:secret"),
            ("Bearer", "admin:secret"),
            ("Basic", "no-colon"),
        ] {
            let h = header(scheme, creds);
            assert_eq!(auth.check(Some(&h), None).await, Err(Refusal::Unauthorized));
        }
        assert_eq!(auth.check(None, None).await, Err(Refusal::Unauthorized));
        let garbage = HeaderValue::from_static("Basic !!!");
        assert_eq!(
            auth.check(Some(&garbage), None).await,
            Err(Refusal::Unauthorized)
        );
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
        basic.check(Some(&h), None).await.unwrap();
        // With the users gone, only the memory can let the same header through.
        let basic = Basic {
            users: HashMap::new(),
            ..*basic
        };
        assert_eq!(basic.check(Some(&h), None).await, Ok("admin".into()));
        let other = header("Basic", "admin:secret2");
        assert_eq!(
            basic.check(Some(&other), None).await,
            Err(Refusal::Unauthorized)
        );
    }

    #[tokio::test]
    async fn a_header_that_failed_is_refused_again_without_bcrypt() {
        let dir = tempfile::tempdir().unwrap();
        let Auth::HttpBasic(basic) = Auth::http_basic(&htpasswd(dir.path(), 4)).unwrap() else {
            unreachable!()
        };
        let wrong = header("Basic", "admin:wrong");
        assert_eq!(
            basic.check(Some(&wrong), None).await,
            Err(Refusal::Unauthorized)
        );
        // With the right hash for "wrong" in place, only the memory can still refuse it.
        let basic = Basic {
            users: HashMap::from([("admin".into(), bcrypt::hash("wrong", 4).unwrap())]),
            ..*basic
        };
        assert_eq!(
            basic.check(Some(&wrong), None).await,
            Err(Refusal::Unauthorized)
        );
        let right = header("Basic", "admin:wrong ");
        assert_eq!(
            basic.check(Some(&right), None).await,
            Err(Refusal::Unauthorized)
        );
    }

    /// A client that floods fills its own queue only: another client's check is run
    /// after at most one of the flood's, not after all of them.
    #[tokio::test]
    async fn each_client_waits_in_its_own_queue_served_in_turn() {
        let mut queues = Queues::default();
        let (a, b) = (IpAddr::from([10, 0, 0, 1]), IpAddr::from([10, 0, 0, 2]));
        let check = |password: &str| {
            let (answer, _) = oneshot::channel();
            Check {
                password: password.into(),
                hash: String::new(),
                answer,
            }
        };
        for i in 0..QUEUE {
            assert!(queues.push(a, check(&format!("a{i}"))).is_ok());
        }
        assert!(
            queues.push(a, check("a-over")).is_err(),
            "a's queue is full"
        );
        assert!(queues.push(b, check("b0")).is_ok(), "b has its own");
        let order: Vec<String> = std::iter::from_fn(|| queues.pop().map(|c| c.password)).collect();
        assert_eq!(order[..3], ["a0", "b0", "a1"]);
        assert_eq!(order.len(), QUEUE + 1);
        assert!(queues.waiting.is_empty() && queues.turns.is_empty());
        for n in 0..CLIENTS {
            let client = IpAddr::from([10, 1, (n >> 8) as u8, n as u8]);
            assert!(queues.push(client, check("x")).is_ok());
        }
        assert!(
            queues.push(a, check("a")).is_err(),
            "bounded in clients too"
        );
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
                tokio::spawn(async move { basic.check(Some(&h), None).await })
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
