//! The API's open connections, and which of them are idle: at the connection limit a new
//! client is let in by closing the connection idle the longest, rather than refused, so a
//! flood of idle keep-alive connections (1,100 of them made 29 of 40 new operators' calls
//! answer 503) cannot lock out an operator or an agent. A connection with a request in
//! flight is never closed for another.
//!
//! One client address may hold at most `max_per_client` connections: past it, its own
//! idle connection is closed for its new one, or the new one is refused; the others keep
//! the rest of the slots.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;
use tokio::time::Instant;

/// Every open connection of the listener. The registry's lock is taken when a connection
/// opens, closes or is chosen to close; a request only touches its connection's atomics.
pub struct Connections {
    open: Mutex<HashMap<u64, Entry>>,
    next: AtomicU64,
    /// What `idle_since` counts from.
    epoch: Instant,
    /// Set at shutdown: a connection registered later is asked to close at once.
    closing: std::sync::atomic::AtomicBool,
}

struct Entry {
    peer: IpAddr,
    state: Arc<State>,
    /// Asks the connection to close once nothing is in flight.
    close: Arc<Notify>,
}

/// What a connection's requests update.
#[derive(Default)]
struct State {
    /// Requests in flight on it.
    busy: AtomicUsize,
    /// Since when nothing was in flight (its opening, or its last answer), in
    /// microseconds from the registry's epoch.
    idle_since: AtomicU64,
}

/// One open connection; it leaves the registry when dropped.
pub struct Connection {
    id: u64,
    registry: Arc<Connections>,
    state: Arc<State>,
    /// Notified when the connection is asked to close (for a new client).
    pub close: Arc<Notify>,
}

impl Default for Connections {
    fn default() -> Connections {
        Connections {
            open: Mutex::default(),
            next: AtomicU64::new(0),
            epoch: Instant::now(),
            closing: std::sync::atomic::AtomicBool::new(false),
        }
    }
}

impl Connections {
    /// Registers a connection from `peer`.
    pub fn open(self: &Arc<Self>, peer: IpAddr) -> Connection {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let close = Arc::new(Notify::new());
        let state = Arc::new(State::default());
        state.idle_since.store(self.now(), Ordering::Relaxed);
        let entry = Entry {
            peer,
            state: state.clone(),
            close: close.clone(),
        };
        self.lock().insert(id, entry);
        if self.closing.load(Ordering::Acquire) {
            close.notify_one();
        }
        Connection {
            id,
            registry: self.clone(),
            state,
            close,
        }
    }

    /// How many connections `peer` holds.
    pub fn held_by(&self, peer: IpAddr) -> usize {
        self.lock().values().filter(|e| e.peer == peer).count()
    }

    /// Asks the connection idle the longest (of `peer`'s, if given) to close; false when
    /// every one has a request in flight.
    pub fn close_oldest_idle(&self, peer: Option<IpAddr>) -> bool {
        let open = self.lock();
        let oldest = open
            .values()
            .filter(|e| e.state.busy.load(Ordering::Acquire) == 0)
            .filter(|e| peer.is_none_or(|p| p == e.peer))
            .min_by_key(|e| e.state.idle_since.load(Ordering::Relaxed));
        match oldest {
            Some(e) => {
                // Not chosen again while it closes.
                e.state.busy.store(usize::MAX / 2, Ordering::Release);
                e.close.notify_one();
                true
            }
            None => false,
        }
    }

    /// Asks every connection to close once nothing is in flight (the engine stops).
    pub fn close_all(&self) {
        self.closing.store(true, Ordering::Release);
        for e in self.lock().values() {
            e.close.notify_one();
        }
    }

    fn now(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_micros()).unwrap_or(u64::MAX)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Entry>> {
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Connection {
    /// A request began on this connection.
    pub fn started(&self) {
        self.state.busy.fetch_add(1, Ordering::AcqRel);
    }

    /// A request on this connection was answered.
    pub fn answered(&self) {
        let now = self.registry.now();
        if self.state.busy.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.state.idle_since.store(now, Ordering::Relaxed);
        }
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.registry.lock().remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_connection_idle_longest_is_closed_never_a_busy_one() {
        let registry = Arc::new(Connections::default());
        let (a, b): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let first = registry.open(a);
        tokio::time::advance(std::time::Duration::from_secs(1)).await;
        let second = registry.open(b);
        tokio::time::advance(std::time::Duration::from_secs(1)).await;
        let third = registry.open(a);
        first.started();
        assert_eq!(registry.held_by(a), 2);
        // The first is busy: the second, idle longest, is asked to close.
        assert!(registry.close_oldest_idle(None));
        assert!(futures_util::FutureExt::now_or_never(second.close.notified()).is_some());
        // Of a's connections only the third is idle; then none is.
        assert!(registry.close_oldest_idle(Some(a)));
        assert!(!registry.close_oldest_idle(Some(a)));
        first.answered();
        assert!(registry.close_oldest_idle(Some(a)));
        drop((first, third));
        assert_eq!(registry.held_by(a), 0);
    }
}
