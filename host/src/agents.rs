//! What the engine knows about each node's running ramdisk agent, in memory only.
//!
//! The agent token is stored on disk only as a hash (a leaked data dir must not let anyone
//! impersonate the engine to an agent). The engine still has to present the plaintext to
//! the agent's command API, so it keeps it here, learned at lookup and re-learned from
//! every heartbeat (which carries it): after a restart, the first heartbeat restores it.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use uuid::Uuid;

use crate::clock::Timestamp;

/// One node's agent, as its last heartbeat described it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AgentSession {
    pub token: Option<String>,
    pub url: Option<String>,
    pub version: Option<String>,
    pub last_heartbeat: Option<Timestamp>,
    /// The agent's own account of what it is doing (`agent_status_message`).
    pub status_message: Option<String>,
}

#[derive(Default)]
pub struct Agents {
    sessions: Mutex<HashMap<Uuid, AgentSession>>,
    /// Heartbeats accepted since start (for `deployd bench fleet`).
    pub heartbeats: AtomicU64,
}

impl Agents {
    pub fn get(&self, node: Uuid) -> Option<AgentSession> {
        self.lock().get(&node).cloned()
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

    /// Records a heartbeat whose token was already verified.
    pub fn heartbeat(&self, node: Uuid, token: &str, url: &str, version: &str, at: Timestamp) {
        self.heartbeats.fetch_add(1, Ordering::Relaxed);
        let mut sessions = self.lock();
        let s = sessions.entry(node).or_default();
        if s.token.as_deref() != Some(token) {
            s.token = Some(token.to_owned());
        }
        if s.url.as_deref() != Some(url) {
            s.url = Some(url.to_owned());
        }
        if s.version.as_deref() != Some(version) {
            s.version = Some(version.to_owned());
        }
        s.last_heartbeat = Some(at);
    }

    /// Records the `agent_status_message` of a heartbeat that was accepted.
    pub fn status(&self, node: Uuid, message: String) {
        if let Some(s) = self.lock().get_mut(&node) {
            s.status_message = Some(message);
        }
    }

    /// Forgets a node's agent (its flow ended, or the node is gone).
    pub fn forget(&self, node: Uuid) {
        self.lock().remove(&node);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Uuid, AgentSession>> {
        self.sessions.lock().unwrap_or_else(|p| p.into_inner())
    }
}
