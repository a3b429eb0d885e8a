//! The engine's counters and driver-call latencies, rendered in Prometheus' text format at
//! `GET /metrics`.
//!
//! One [`Metrics`] per store (so every engine, and every test's engine, counts its own),
//! reached through [`crate::store::Store::metrics`] by everything that holds the store.
//! Counters are atomics; the labelled families (flows by driver and outcome, call latency
//! by driver and export) are small maps behind a mutex, touched once per flow step.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::state_machine::Expiry;

/// Upper bounds of the call-latency buckets, in seconds.
const BUCKETS: [f64; 14] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0, 30.0,
];

#[derive(Default)]
pub struct Metrics {
    /// Touches of a waiting node's clock (heartbeats, driver touches, image writes).
    pub touches: AtomicU64,
    /// Touches acknowledged while the store could not write them, kept in memory until it
    /// could (see `store::sled::health`).
    pub touches_remembered: AtomicU64,
    /// Passes of the sweeper over the deadline index.
    pub sweeps: AtomicU64,
    timeouts_callback: AtomicU64,
    timeouts_stall: AtomicU64,
    /// Bytes the engine wrote onto agents' disks (the pxe family).
    pub image_bytes: AtomicU64,
    flows: Mutex<BTreeMap<(String, &'static str), u64>>,
    /// By driver, then export: looked up by `&str`, so a call allocates nothing.
    calls: Mutex<BTreeMap<String, BTreeMap<&'static str, Histogram>>>,
}

#[derive(Default)]
struct Histogram {
    buckets: [u64; BUCKETS.len()],
    count: u64,
    sum: f64,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Metrics {
    pub fn count(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    pub fn timed_out(&self, expiry: Expiry) {
        let counter = match expiry {
            Expiry::Callback => &self.timeouts_callback,
            Expiry::Stall => &self.timeouts_stall,
        };
        Metrics::count(counter, 1);
    }

    /// A flow step that ended in `outcome` (the state it left the node in).
    pub fn flow(&self, driver: &str, outcome: &'static str) {
        *lock(&self.flows)
            .entry((driver.to_owned(), outcome))
            .or_default() += 1;
    }

    /// One driver call and how long it took.
    pub fn call(&self, driver: &str, export: &'static str, took: Duration) {
        let seconds = took.as_secs_f64();
        let mut calls = lock(&self.calls);
        if !calls.contains_key(driver) {
            calls.insert(driver.to_owned(), BTreeMap::new());
        }
        let by_export = calls.get_mut(driver).expect("just inserted");
        let h = by_export.entry(export).or_default();
        for (bucket, bound) in h.buckets.iter_mut().zip(BUCKETS) {
            if seconds <= bound {
                *bucket += 1;
            }
        }
        h.count += 1;
        h.sum += seconds;
    }

    /// The text format, with `heartbeats` (counted by the agents' sessions) and whether
    /// the store is degraded (see [`crate::store::health`]) beside ours.
    pub fn render(&self, heartbeats: u64, store_degraded: bool) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "# HELP deployd_store_degraded 1 while the store cannot write (a full or failing disk).\n# TYPE deployd_store_degraded gauge\ndeployd_store_degraded {}",
            u8::from(store_degraded)
        );
        let mut counter = |name: &str, help: &str, value: u64| {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {value}"
            );
        };
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        counter(
            "deployd_heartbeats_total",
            "Agent heartbeats accepted.",
            heartbeats,
        );
        counter(
            "deployd_touches_total",
            "Touches of a waiting node's clock.",
            get(&self.touches),
        );
        counter(
            "deployd_touches_remembered_total",
            "Touches acknowledged while the store could not write, written once it could.",
            get(&self.touches_remembered),
        );
        counter(
            "deployd_sweeps_total",
            "Passes of the timeout sweeper.",
            get(&self.sweeps),
        );
        counter(
            "deployd_image_bytes_written_total",
            "Bytes the engine wrote onto agents' disks.",
            get(&self.image_bytes),
        );
        let _ = writeln!(
            out,
            "# HELP deployd_timeouts_total Nodes failed by the sweeper, by check.\n# TYPE deployd_timeouts_total counter"
        );
        let _ = writeln!(
            out,
            "deployd_timeouts_total{{kind=\"callback\"}} {}",
            get(&self.timeouts_callback)
        );
        let _ = writeln!(
            out,
            "deployd_timeouts_total{{kind=\"stall\"}} {}",
            get(&self.timeouts_stall)
        );
        let _ = writeln!(
            out,
            "# HELP deployd_flows_total Flow steps by driver and the state they ended in.\n# TYPE deployd_flows_total counter"
        );
        for ((driver, outcome), n) in lock(&self.flows).iter() {
            let _ = writeln!(
                out,
                "deployd_flows_total{{driver=\"{}\",outcome=\"{outcome}\"}} {n}",
                escape(driver)
            );
        }
        let name = "deployd_driver_call_seconds";
        let _ = writeln!(
            out,
            "# HELP {name} Driver calls by driver and export, and how long they took.\n# TYPE {name} histogram"
        );
        let calls = lock(&self.calls);
        let flat = calls
            .iter()
            .flat_map(|(driver, by_export)| by_export.iter().map(move |(e, h)| (driver, e, h)));
        for (driver, export, h) in flat {
            let labels = format!("driver=\"{}\",export=\"{export}\"", escape(driver));
            for (bound, n) in BUCKETS.iter().zip(h.buckets) {
                let _ = writeln!(out, "{name}_bucket{{{labels},le=\"{bound}\"}} {n}");
            }
            let _ = writeln!(out, "{name}_bucket{{{labels},le=\"+Inf\"}} {}", h.count);
            let _ = writeln!(out, "{name}_sum{{{labels}}} {}", h.sum);
            let _ = writeln!(out, "{name}_count{{{labels}}} {}", h.count);
        }
        out
    }
}

/// A label value as the text format needs it.
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histograms_are_cumulative_and_labels_escaped() {
        let m = Metrics::default();
        m.call("fake", "deploy", Duration::from_micros(300));
        m.call("fake", "deploy", Duration::from_millis(40));
        m.flow("we\"ird", "active");
        m.timed_out(Expiry::Stall);
        let text = m.render(3, false);
        assert!(text.contains("deployd_heartbeats_total 3\n"), "{text}");
        assert!(
            text.contains("deployd_timeouts_total{kind=\"stall\"} 1\n"),
            "{text}"
        );
        assert!(text.contains("deployd_flows_total{driver=\"we\\\"ird\",outcome=\"active\"} 1\n"));
        let bucket = |le: &str| {
            format!(
                "deployd_driver_call_seconds_bucket{{driver=\"fake\",export=\"deploy\",le=\"{le}\"}}"
            )
        };
        assert!(
            text.contains(&format!("{} 1\n", bucket("0.0005"))),
            "{text}"
        );
        assert!(text.contains(&format!("{} 1\n", bucket("0.025"))), "{text}");
        assert!(text.contains(&format!("{} 2\n", bucket("0.05"))), "{text}");
        assert!(text.contains(&format!("{} 2\n", bucket("+Inf"))), "{text}");
        assert!(
            text.contains(
                "deployd_driver_call_seconds_count{driver=\"fake\",export=\"deploy\"} 2\n"
            )
        );
    }
}
