//! The sweeper's rule: what happens to a node whose deadline came due ([`judge`]), and
//! what the sweeper reports of the nodes it failed. Every backend applies it.

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use tokio::sync::Notify;
use uuid::Uuid;

use super::last_error;
use crate::clock::Timestamp;
use crate::node::Provision;
use crate::state_machine::{Expiry, ProvisionState, Timeouts};

/// A node the sweeper failed because its agent went silent, or made no progress.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TimedOut {
    pub node: Uuid,
    /// The wait state it was in.
    pub waited_in: ProvisionState,
    /// The failed state it is in now.
    pub failed_to: ProvisionState,
    /// Which check failed it: no callback, or no progress.
    pub expiry: Expiry,
    /// The timeout that was in force.
    pub timeout: Duration,
    /// How long since its clock last moved.
    pub silent_for: Duration,
    pub last_error: String,
}

/// How writers tell a sleeping sweeper that a deadline earlier than the one it sleeps
/// towards has appeared. The sweeper publishes its wake-up time, then re-reads the index;
/// a writer inserts its entry, then compares. One of the two always sees the other.
pub struct SweeperWaker {
    sleeping_until: AtomicI64,
    notify: Notify,
}

impl Default for SweeperWaker {
    fn default() -> Self {
        SweeperWaker {
            sleeping_until: AtomicI64::new(i64::MIN),
            notify: Notify::new(),
        }
    }
}

impl SweeperWaker {
    pub(crate) fn sleep_until(&self, t: Timestamp) {
        self.sleeping_until.store(t.as_micros(), Ordering::SeqCst);
    }

    pub(crate) async fn woken(&self) {
        self.notify.notified().await
    }

    pub(crate) fn deadline_added(&self, d: Timestamp) {
        if d.as_micros() < self.sleeping_until.load(Ordering::SeqCst) {
            self.notify.notify_one();
        }
    }
}

/// What the sweeper does with a node whose index entry came due.
pub(crate) enum Verdict {
    /// A touch moved the deadline on (or off): file the entry there.
    Refile(Option<Timestamp>),
    /// The deadline passed in a wait state: fail the node, with these words.
    Fail(Failure),
}

/// Why a node is failed by the sweeper.
pub(crate) struct Failure {
    pub expiry: Expiry,
    pub timeout: Duration,
    pub silent_for: Duration,
    pub last_error: String,
}

impl Failure {
    pub(crate) fn timed_out(
        self,
        node: Uuid,
        waited_in: ProvisionState,
        failed_to: ProvisionState,
    ) -> TimedOut {
        TimedOut {
            node,
            waited_in,
            failed_to,
            expiry: self.expiry,
            timeout: self.timeout,
            silent_for: self.silent_for,
            last_error: self.last_error,
        }
    }
}

/// The sweeper's rule, the same for every backend: a node in a wait state whose own
/// deadline has passed at `now` fails, by the check that set that deadline; any other is
/// re-filed at the deadline its record has.
pub(crate) fn judge(
    uuid: Uuid,
    p: &Provision,
    now: Timestamp,
    timeouts: &Timeouts,
    describe: &dyn Fn(Uuid) -> Option<String>,
) -> Verdict {
    let (deadline, kind) = match (p.deadline, p.state.wait_kind()) {
        (Some(d), Some(kind)) if d <= now => (d, kind),
        (later, _) => return Verdict::Refile(later),
    };
    let silent_for = now.since(p.updated_at);
    let expiry = timeouts
        .deadline(p.state, p.updated_at, p.progress_at)
        .map_or(Expiry::Callback, |(_, e)| e);
    let (timeout, last_error) = match expiry {
        Expiry::Callback => {
            let timeout = deadline.since(p.updated_at);
            let last_error = last_error::callback_timeout(uuid, p.state, kind, silent_for, timeout);
            (timeout, last_error)
        }
        Expiry::Stall => {
            let timeout = deadline.since(p.progress_at);
            let last_error = last_error::stall(
                uuid,
                p.state,
                kind,
                now.since(p.progress_at),
                timeout,
                describe(uuid),
            );
            (timeout, last_error)
        }
    };
    Verdict::Fail(Failure {
        expiry,
        timeout,
        silent_for,
        last_error,
    })
}
