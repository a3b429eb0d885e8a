//! What the engine knows about each node's running ramdisk agent, in memory only.
//!
//! The agent token is stored on disk only as a hash (a leaked data dir must not let anyone
//! impersonate the engine to an agent). The engine still has to present the plaintext to
//! the agent's command API, so it keeps it here, learned at lookup and re-learned from
//! every heartbeat (which carries it): after a restart, the first heartbeat restores it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use uuid::Uuid;

use rustls::pki_types::CertificateDer;

use crate::clock::Timestamp;
use crate::store::history::Transfer;
use deployd_wire::agent::Progress;

/// Where an agent's command API is: `scheme://host:port`, and nothing else.
///
/// A heartbeat's `callback_url` decides where the engine sends the agent's token and its
/// commands, so it is held to the shape IPA sends (`http(s)://host:port`, optionally with
/// a trailing `/`): no user info, path, query or fragment. Command urls are built from
/// these parts, never by appending to what the agent said.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallbackUrl(String);

impl CallbackUrl {
    pub fn parse(given: &str) -> Result<CallbackUrl, String> {
        let refuse = |why: &str| {
            Err(format!(
                "Invalid callback_url {given:?}: {why}; expected http(s)://host:port"
            ))
        };
        let Ok(url) = reqwest::Url::parse(given) else {
            return refuse("it is not a url");
        };
        if !matches!(url.scheme(), "http" | "https") {
            return refuse("the scheme must be http or https");
        }
        if !url.username().is_empty() || url.password().is_some() {
            return refuse("user info is not allowed");
        }
        if url.query().is_some() || url.fragment().is_some() || given.contains(['?', '#']) {
            return refuse("a query or fragment is not allowed");
        }
        if url.path() != "/" {
            return refuse("a path is not allowed");
        }
        let (Some(host), Some(port)) = (url.host(), url.port_or_known_default()) else {
            return refuse("it names no host");
        };
        Ok(CallbackUrl(format!("{}://{host}:{port}", url.scheme())))
    }

    /// The agent's command list and command endpoint (Ironic's `agent_client`).
    pub fn commands(&self) -> String {
        format!("{}/v1/commands/", self.0)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A certificate an agent registered (`agent_verify_ca`): the DER that TLS pins, and the
/// PEM text it came as. Agents send the same text with every heartbeat, so a heartbeat is
/// checked by comparing strings, not by parsing PEM again (3 % of a heartbeat's CPU).
#[derive(Debug, PartialEq, Eq)]
pub struct AgentCa {
    pub der: CertificateDer<'static>,
    pub pem: Box<str>,
}

/// One node's agent, as its last heartbeat described it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AgentSession {
    pub token: Option<String>,
    pub url: Option<CallbackUrl>,
    pub version: Option<String>,
    pub last_heartbeat: Option<Timestamp>,
    /// Ironic's `agent_status` of the last heartbeat that had one ("start", "end", "error").
    pub status: Option<String>,
    /// The agent's own account of what it is doing (`agent_status_message`).
    pub status_message: Option<String>,
    /// That account read as deployd's agent's progress report, when it is one: parsed
    /// once when the heartbeat arrives, read by every driver call after it.
    pub progress: Option<Progress>,
    /// The certificate this boot of the agent serves its API with (`agent_verify_ca`):
    /// the only one the engine accepts from it.
    pub ca: Option<Arc<AgentCa>>,
    /// When this boot's image transfer was first seen moving, and whether its end was.
    pub transfer_started: Option<Timestamp>,
    pub transfer_ended: bool,
}

impl AgentSession {
    /// Follows the image transfer through the agent's progress reports, once per boot:
    /// its start (the first report with bytes written) and its end (every byte of a known
    /// length), with the bytes and the rate as the heartbeats saw them. The milestone to
    /// record, if the transfer reached one.
    fn transfer(&mut self, now: Timestamp) -> Option<Transfer> {
        let progress = self.progress.as_ref()?;
        let (written, total, complete) = (progress.written, progress.total, progress.is_complete());
        match self.transfer_started {
            None if written > 0 => {
                self.transfer_started = Some(now);
                Some(Transfer::Started { total })
            }
            Some(_) if complete => self.transfer_end(written, now),
            _ => None,
        }
    }

    /// The transfer's end at `now`, after `written` bytes: its milestone, once, and only
    /// after its start was seen.
    fn transfer_end(&mut self, written: u64, now: Timestamp) -> Option<Transfer> {
        let started = self.transfer_started.filter(|_| !self.transfer_ended)?;
        self.transfer_ended = true;
        let seconds = now.since(started).as_secs_f64();
        Some(Transfer::Ended { written, seconds })
    }
}

/// What a heartbeat moved that belongs in the node's history.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Heard {
    /// It is the first heartbeat of this boot of the agent.
    pub first: bool,
    /// The image transfer's start or end, when this heartbeat's report showed it.
    pub transfer: Option<Transfer>,
    /// The certificate this heartbeat pinned, first in this process for this boot: its
    /// digest goes to disk.
    pub pinned: Option<String>,
}

/// What a heartbeat says of the agent's work (API 1.72+): deployd's agent its step and the
/// bytes written ([`Progress`], in the message); an installer that runs its own deploy
/// its status. ironic-python-agent says neither.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AgentReport {
    /// `agent_status`.
    pub status: Option<String>,
    /// `agent_status_message`.
    pub message: Option<String>,
}

impl AgentReport {
    /// The stall check's mark of this report: a different report is progress. `None`
    /// when the heartbeat said nothing of the agent's work.
    pub fn fingerprint(&self) -> Option<u64> {
        if self.status.is_none() && self.message.is_none() {
            return None;
        }
        let status = self.status.as_deref().unwrap_or_default();
        let message = self.message.as_deref().unwrap_or_default();
        Some(crate::store::progress_fingerprint([
            status.as_bytes(),
            b"\n",
            message.as_bytes(),
        ]))
    }

    /// deployd's agent's progress, when the message is one of its reports.
    pub fn progress(&self) -> Option<Progress> {
        self.message.as_deref()?.parse().ok()
    }
}

/// What a node's agent last said of its work: this engine's memory of its heartbeats
/// (newer: a heartbeat does not rewrite the stored node), else what the node's
/// `driver_internal_info` kept (`agent_last_heartbeat`, `agent_status_message`) from an
/// earlier engine or a heartbeat another engine took.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LastReport {
    pub at: Option<Timestamp>,
    pub message: Option<String>,
    pub progress: Option<Progress>,
}

impl LastReport {
    /// This engine's memory of the session.
    pub fn heard(session: &AgentSession) -> LastReport {
        LastReport {
            at: session.last_heartbeat,
            message: session.status_message.clone(),
            progress: session.progress.clone(),
        }
    }

    /// What is missing from memory, taken from the stored `driver_internal_info`.
    pub fn or_stored(self, internal: &serde_json::Map<String, serde_json::Value>) -> LastReport {
        let message = self.message.or_else(|| {
            internal
                .get("agent_status_message")
                .and_then(|m| m.as_str())
                .map(str::to_owned)
        });
        let progress = self
            .progress
            .or_else(|| message.as_deref().and_then(|m| m.parse::<Progress>().ok()));
        let at = self.at.or_else(|| {
            internal
                .get("agent_last_heartbeat")
                .and_then(|t| t.as_str())
                .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
                .map(|t| Timestamp::from_micros(t.timestamp_micros()))
        });
        LastReport {
            at,
            message,
            progress,
        }
    }
}

/// Why a heartbeat's TLS details are refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TlsRefused {
    #[error(transparent)]
    Certificate(#[from] crate::agent_pinning::TlsError),
    #[error(
        "an agent with an https callback_url must send agent_verify_ca: deployd trusts no other certificate for an agent"
    )]
    NoCertificate,
    #[error("agent_verify_ca was sent with an http callback_url; use https")]
    PlainUrl,
    #[error("agent_verify_ca changed within one boot of the agent (same agent token); refused")]
    Changed,
    #[error(
        "this boot of the agent registered a certificate (agent_verify_ca): an http callback_url is refused; use https"
    )]
    Downgrade,
    #[error(
        "the engine restarted since this boot of the agent registered its certificate: send agent_verify_ca again"
    )]
    Resend,
}

/// The sha256 (hex) of a certificate's DER: what a pin is kept as on disk.
pub fn ca_digest(cert: &CertificateDer<'_>) -> String {
    use sha2::{Digest, Sha256};
    hex::encode(Sha256::digest(cert.as_ref()))
}

#[derive(Default)]
pub struct AgentSessions {
    sessions: Mutex<HashMap<Uuid, AgentSession>>,
    /// Heartbeats accepted since start (for `deployd bench fleet`).
    pub heartbeats: AtomicU64,
}

impl AgentSessions {
    pub fn get(&self, node: Uuid) -> Option<AgentSession> {
        self.lock().get(&node).cloned()
    }

    /// `read` of the node's agent session, under the lock: a driver call takes the fields
    /// it needs without copying the session (its certificate, its report).
    pub fn read<T>(&self, node: Uuid, read: impl FnOnce(&AgentSession) -> T) -> Option<T> {
        self.lock().get(&node).map(read)
    }

    /// `given` as the callback url of a heartbeat for `node`: the url the node's agent
    /// registered when `given` is exactly it (what a live agent sends every time), else
    /// `given` parsed. A url in its kept form parses to itself (tested), so this answers
    /// as parsing would, without the url parser on every heartbeat (4 % of one in perf).
    pub fn callback_url(&self, node: Option<Uuid>, given: &str) -> Result<CallbackUrl, String> {
        let known = node.and_then(|node| {
            self.read(node, |s| {
                s.url.as_ref().filter(|u| u.as_str() == given).cloned()
            })
        });
        match known.flatten() {
            Some(url) => Ok(url),
            None => CallbackUrl::parse(given),
        }
    }

    /// What each node's agent last said, in this engine's memory, under one lock for the
    /// batch (the lock every heartbeat takes: a reader of many nodes takes it once).
    pub fn last_reports(&self, nodes: impl IntoIterator<Item = Uuid>) -> Vec<LastReport> {
        let sessions = self.lock();
        nodes
            .into_iter()
            .map(|n| sessions.get(&n).map(LastReport::heard).unwrap_or_default())
            .collect()
    }

    /// Whether the node's agent reports its progress in its heartbeats (a status message).
    pub fn reports_status(&self, node: Uuid) -> bool {
        self.read(node, |s| s.status_message.is_some())
            .unwrap_or(false)
    }

    /// Whether `token` is the one the engine knows for the node's agent (no copy made).
    pub fn token_is(&self, node: Uuid, token: &str) -> bool {
        self.lock()
            .get(&node)
            .and_then(|s| s.token.as_deref())
            .is_some_and(|t| t == token)
    }

    /// Records a token the engine just issued (lookup).
    pub fn issued(&self, node: Uuid, token: String) {
        self.lock().insert(
            node,
            AgentSession {
                token: Some(token),
                ..Default::default()
            },
        );
    }

    /// Checks a heartbeat's certificate against its url and what this boot of the agent
    /// registered before (the token names the boot): the first certificate of a boot is
    /// pinned for the rest of it, and once a boot has one, plain http is refused. The pin
    /// is in memory, or after a restart only on disk: `on_disk` reads its digest, called
    /// only when this process has not yet heard this boot (so not on every heartbeat).
    pub async fn check_tls(
        &self,
        node: Uuid,
        token: &str,
        url: &CallbackUrl,
        pem: Option<&str>,
        on_disk: impl AsyncFnOnce() -> Option<String>,
    ) -> Result<Option<Arc<AgentCa>>, TlsRefused> {
        let https = url.as_str().starts_with("https://");
        let heard = self
            .lock()
            .get(&node)
            .filter(|s| s.token.as_deref() == Some(token))
            .map(|s| s.ca.clone());
        let (known, digest) = match heard {
            Some(ca) => (ca, None),
            None => (None, on_disk().await),
        };
        if let (true, Some(pem), Some(k)) = (https, pem, &known)
            && *k.pem == *pem
        {
            return Ok(known);
        }
        let given = match pem {
            Some(pem) => Some(AgentCa {
                der: crate::agent_pinning::parse_pem(pem)?,
                pem: pem.into(),
            }),
            None => None,
        };
        match (https, given, known, digest) {
            (false, Some(_), _, _) => Err(TlsRefused::PlainUrl),
            (false, None, None, None) => Ok(None),
            (false, None, _, _) => Err(TlsRefused::Downgrade),
            (true, None, Some(k), _) => Ok(Some(k)),
            (true, None, None, Some(_)) => Err(TlsRefused::Resend),
            (true, None, None, None) => Err(TlsRefused::NoCertificate),
            (true, Some(g), Some(k), _) if g.der != k.der => Err(TlsRefused::Changed),
            (true, Some(g), None, Some(d)) if ca_digest(&g.der) != d => Err(TlsRefused::Changed),
            (true, Some(g), _, _) => Ok(Some(Arc::new(g))),
        }
    }

    /// Records a heartbeat whose token (and certificate, [`AgentSessions::check_tls`]) was
    /// already verified, with what it said of the agent's work, under one lock: the
    /// session, the report (its message read as a progress report once, here), and the
    /// image transfer it moved. What the caller must record in the node's history.
    #[allow(clippy::too_many_arguments)]
    pub fn heartbeat(
        &self,
        node: Uuid,
        token: &str,
        url: &CallbackUrl,
        version: &str,
        ca: Option<Arc<AgentCa>>,
        report: AgentReport,
        at: Timestamp,
    ) -> Heard {
        self.heartbeats.fetch_add(1, Ordering::Relaxed);
        let progress = report.progress();
        let mut sessions = self.lock();
        let s = sessions.entry(node).or_default();
        let first = s.token.as_deref() != Some(token) || s.last_heartbeat.is_none();
        if s.token.as_deref() != Some(token) {
            *s = AgentSession {
                token: Some(token.to_owned()),
                ..Default::default()
            };
        }
        let mut pinned = None;
        if let Some(ca) = ca {
            if s.ca.as_ref().map(|k| &k.der) != Some(&ca.der) {
                pinned = Some(ca_digest(&ca.der));
            }
            // The same certificate in other text is kept as sent, for the next comparison.
            s.ca = Some(ca);
        }
        if s.url.as_ref() != Some(url) {
            s.url = Some(url.clone());
        }
        if s.version.as_deref() != Some(version) {
            s.version = Some(version.to_owned());
        }
        s.last_heartbeat = Some(at);
        if report.status.is_some() {
            s.status = report.status;
        }
        // Only a new progress report can move the transfer.
        let transfer = match report.message {
            Some(message) => {
                s.status_message = Some(message);
                s.progress = progress;
                s.transfer(at)
            }
            None => None,
        };
        Heard {
            first,
            transfer,
            pinned,
        }
    }

    /// The image write's end as the agent's command list told a driver (`bytes`: the
    /// image's length): the milestone to record, if no heartbeat has (with heartbeats a
    /// minute apart, the deploy may go on before the next one reports it).
    pub fn image_written(&self, node: Uuid, bytes: u64, at: Timestamp) -> Option<Transfer> {
        self.lock().get_mut(&node)?.transfer_end(bytes, at)
    }

    /// Forgets a node's agent (its flow ended, or the node is gone).
    pub fn forget(&self, node: Uuid) {
        self.lock().remove(&node);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Uuid, AgentSession>> {
        self.sessions.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The dashboard's line of a node: this engine's memory of its agent where it has one,
    /// else what the node stored (an earlier engine's heartbeats), the bytes read from the
    /// message either way.
    #[test]
    fn the_last_report_is_the_memorys_else_the_stored_one() {
        let sessions = AgentSessions::default();
        let (heard, silent) = (Uuid::new_v4(), Uuid::new_v4());
        let url = CallbackUrl::parse("http://10.0.0.5:9999").unwrap();
        let report = AgentReport {
            status: None,
            message: Some("prepare_image: running, 3 of 8 bytes written".into()),
        };
        let at = Timestamp::from_micros(7_000_000);
        sessions.heartbeat(heard, "t", &url, "1", None, report, at);
        let stored: serde_json::Map<String, serde_json::Value> =
            serde_json::from_value(serde_json::json!({
                "agent_status_message": "prepare_image: running, 1 of 8 bytes written",
                "agent_last_heartbeat": "1970-01-01T00:00:02+00:00",
            }))
            .unwrap();
        let [memory, none] = sessions.last_reports([heard, silent]).try_into().unwrap();
        let memory = memory.or_stored(&stored);
        assert_eq!((memory.at, memory.progress.unwrap().written), (Some(at), 3));
        assert_eq!(none, LastReport::default());
        let none = none.or_stored(&stored);
        assert_eq!(none.at, Some(Timestamp::from_micros(2_000_000)));
        assert_eq!(
            none.progress.map(|p| (p.written, p.total)),
            Some((1, Some(8)))
        );
        assert_eq!(
            LastReport::default().or_stored(&Default::default()),
            LastReport::default()
        );
    }

    /// With heartbeats far apart, the command list may tell of the image's end first: its
    /// milestone is recorded once, from whichever source comes first, and only after the
    /// transfer's start.
    #[test]
    fn an_image_transfer_ends_once_from_the_heartbeats_or_the_command_list() {
        let sessions = AgentSessions::default();
        let node = Uuid::new_v4();
        let url = CallbackUrl::parse("http://10.0.0.5:9999").unwrap();
        let at = |s: i64| Timestamp::from_micros(s * 1_000_000);
        assert_eq!(
            sessions.image_written(node, 8 << 20, at(1)),
            None,
            "no agent"
        );
        sessions.heartbeat(node, "t", &url, "1", None, Default::default(), at(1));
        assert_eq!(
            sessions.image_written(node, 8 << 20, at(2)),
            None,
            "no start"
        );
        let report = AgentReport {
            status: None,
            message: Some("prepare_image: running, 1048576 of 8388608 bytes written".into()),
        };
        let heard = sessions.heartbeat(node, "t", &url, "1", None, report, at(3));
        assert!(heard.transfer.is_some());
        assert_eq!(
            sessions
                .image_written(node, 8 << 20, at(7))
                .map(|t| t.to_string())
                .as_deref(),
            Some("Image transfer ended: 8388608 bytes in 4.0 s (2.0 MiB/s)")
        );
        assert_eq!(sessions.image_written(node, 8 << 20, at(9)), None, "once");
        let done = AgentReport {
            status: None,
            message: Some("prepare_image: succeeded, 8388608 of 8388608 bytes written".into()),
        };
        let heard = sessions.heartbeat(node, "t", &url, "1", None, done, at(60));
        assert_eq!(
            heard.transfer, None,
            "the heartbeat after it records no second end"
        );
    }

    #[test]
    fn a_heartbeat_s_url_is_the_registered_one_only_when_it_is_exactly_it() {
        let sessions = AgentSessions::default();
        let node = Uuid::new_v4();
        let registered = CallbackUrl::parse("http://10.0.0.5:9999").unwrap();
        sessions.heartbeat(
            node,
            "t",
            &registered,
            "13.0.0",
            None,
            Default::default(),
            Timestamp::from_micros(1),
        );
        let url = |given: &str| sessions.callback_url(Some(node), given);
        assert_eq!(url("http://10.0.0.5:9999"), Ok(registered.clone()));
        // Any other text is parsed: kept the same way, or refused.
        assert_eq!(url("http://10.0.0.5:9999/"), Ok(registered));
        assert_eq!(
            url("http://10.0.0.6").unwrap().as_str(),
            "http://10.0.0.6:80"
        );
        assert!(url("http://10.0.0.5:9999/v1").is_err());
        assert!(url("").is_err());
        let unknown = sessions.callback_url(Some(Uuid::new_v4()), "http://10.0.0.7:1");
        assert_eq!(unknown.unwrap().as_str(), "http://10.0.0.7:1");
        assert!(sessions.callback_url(None, "ftp://x").is_err());
    }

    #[test]
    fn a_callback_url_is_scheme_host_and_port_only() {
        for (given, kept) in [
            ("http://127.0.0.1:9999", "http://127.0.0.1:9999"),
            ("http://127.0.0.1:9999/", "http://127.0.0.1:9999"),
            ("https://agent.example:8443", "https://agent.example:8443"),
            ("http://[fd00::1]:9999", "http://[fd00::1]:9999"),
            ("http://10.0.0.5", "http://10.0.0.5:80"),
        ] {
            let url = CallbackUrl::parse(given).unwrap();
            assert_eq!(url.as_str(), kept, "{given}");
            assert_eq!(url.commands(), format!("{kept}/v1/commands/"));
            // What `AgentSessions::callback_url` relies on to skip the parser.
            assert_eq!(
                CallbackUrl::parse(kept).unwrap(),
                url,
                "{kept} parses to itself"
            );
        }
        for bad in [
            "http://127.0.0.1:9999/arbitrary/path?x=1#",
            "http://127.0.0.1:9999/v1",
            "http://127.0.0.1:9999/?",
            "http://127.0.0.1:9999/#",
            "http://127.0.0.1:9999?x=1",
            "http://user:pw@127.0.0.1:9999",
            "http://user@127.0.0.1:9999",
            "ftp://127.0.0.1:9999",
            "file:///etc/passwd",
            "127.0.0.1:9999",
            "",
        ] {
            let e = CallbackUrl::parse(bad).unwrap_err();
            assert!(e.starts_with("Invalid callback_url"), "{bad}: {e}");
        }
    }
}
