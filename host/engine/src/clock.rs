//! Wall-clock time for the engine, driven by tokio's clock.
//!
//! `provision_updated_at` and deadlines must survive restarts, so they are wall-clock
//! timestamps. But tests must be able to pause and advance time instead of sleeping. A
//! [`Clock`] reads the wall clock once, when it is made, and from then on adds the
//! [`tokio::time::Instant`] elapsed since: under `tokio::time::pause()` the engine's
//! wall clock stops and advances with tokio's. It also means a wall-clock jump (NTP step)
//! while the engine runs cannot fail a fleet of nodes at once.
//!
//! A manual clock is there for tests that run on plain threads, outside any runtime.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::time::Instant;

/// Microseconds since the Unix epoch, UTC. Compact (it is stored in 8 bytes) and ordered.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Timestamp(i64);

impl Timestamp {
    pub const fn from_micros(micros: i64) -> Self {
        Timestamp(micros)
    }

    pub const fn as_micros(self) -> i64 {
        self.0
    }

    /// `self + d`, saturating (a timeout of years must not wrap).
    pub fn plus(self, d: Duration) -> Self {
        let micros = i64::try_from(d.as_micros()).unwrap_or(i64::MAX);
        Timestamp(self.0.saturating_add(micros))
    }

    /// How long from `earlier` to `self`; zero if `earlier` is later.
    pub fn since(self, earlier: Timestamp) -> Duration {
        Duration::from_micros(self.0.saturating_sub(earlier.0).max(0) as u64)
    }

    pub fn to_datetime(self) -> DateTime<Utc> {
        DateTime::from_timestamp_micros(self.0).unwrap_or_default()
    }

    pub fn from_datetime(t: DateTime<Utc>) -> Self {
        Timestamp(t.timestamp_micros())
    }
}

impl fmt::Debug for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.to_datetime().to_rfc3339())
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// The engine's source of "now". Cheap to clone; clones share one time line.
#[derive(Clone)]
pub struct Clock(Arc<Source>);

enum Source {
    Tokio { wall: Timestamp, at: Instant },
    Manual(AtomicI64),
}

impl Clock {
    /// The production clock: the wall clock now, advanced by tokio's monotonic clock.
    pub fn new() -> Self {
        Clock(Arc::new(Source::Tokio {
            wall: Timestamp::from_datetime(Utc::now()),
            at: Instant::now(),
        }))
    }

    /// A clock that moves only when told to ([`Clock::advance`]); for thread-level tests.
    pub fn manual(start: Timestamp) -> Self {
        Clock(Arc::new(Source::Manual(AtomicI64::new(start.as_micros()))))
    }

    pub fn now(&self) -> Timestamp {
        match &*self.0 {
            Source::Tokio { wall, at } => wall.plus(at.elapsed()),
            Source::Manual(micros) => Timestamp(micros.load(Ordering::SeqCst)),
        }
    }

    /// Moves a manual clock forward; a tokio clock is advanced with `tokio::time::advance`.
    pub fn advance(&self, d: Duration) {
        match &*self.0 {
            Source::Manual(micros) => {
                micros.fetch_add(d.as_micros() as i64, Ordering::SeqCst);
            }
            Source::Tokio { .. } => panic!("advance a tokio clock with tokio::time::advance"),
        }
    }
}

impl Default for Clock {
    fn default() -> Self {
        Clock::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn tokio_clock_follows_paused_time() {
        let clock = Clock::new();
        let t0 = clock.now();
        tokio::time::advance(Duration::from_secs(90)).await;
        assert_eq!(clock.now().since(t0), Duration::from_secs(90));
    }

    #[test]
    fn timestamps_round_trip_through_rfc3339_datetimes() {
        let t = Timestamp::from_micros(1_764_000_000_123_456);
        assert_eq!(Timestamp::from_datetime(t.to_datetime()), t);
        assert_eq!(t.to_string(), "2025-11-24T16:00:00.123456+00:00");
    }

    #[test]
    fn since_and_add_saturate() {
        let t = Timestamp::from_micros(10);
        assert_eq!(t.since(Timestamp::from_micros(20)), Duration::ZERO);
        assert_eq!(t.plus(Duration::MAX), Timestamp::from_micros(i64::MAX));
    }
}
