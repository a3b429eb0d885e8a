//! The engine's counters and driver-call latencies, rendered in the OpenMetrics text
//! format at `GET /metrics` by `prometheus-client`.
//!
//! One [`Metrics`] per store (so every engine, and every test's engine, counts its own),
//! reached through [`crate::store::Store::metrics`] by everything that holds the store.
//! Counters are atomics; the labelled families (flows by driver and outcome, call latency
//! by driver and export) are maps behind a lock, touched once per flow step. The heartbeat
//! count (kept by the agents' sessions) and whether the store is degraded are read when
//! the metrics are rendered.

use std::collections::BTreeMap;
use std::sync::RwLock;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::state_machine::Expiry;

/// Upper bounds of the call-latency buckets, in seconds.
const BUCKETS: [f64; 14] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0, 30.0,
];

/// The text's content type.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TimeoutLabels {
    kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FlowLabels {
    driver: String,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CallLabels {
    driver: String,
    export: &'static str,
}

type Calls = Family<CallLabels, Histogram, fn() -> Histogram>;

pub struct Metrics {
    /// Touches of a waiting node's clock (heartbeats, driver touches, image writes).
    pub touches: Counter,
    /// Touches acknowledged while the store could not write them, kept in memory until it
    /// could (see `store::sled::health`).
    pub touches_remembered: Counter,
    /// Passes of the sweeper over the deadline index.
    pub sweeps: Counter,
    /// Bytes the engine wrote onto agents' disks (the pxe family).
    pub image_bytes: Counter,
    timeouts: Family<TimeoutLabels, Counter>,
    flows: Family<FlowLabels, Counter>,
    calls: Calls,
    /// The family's histograms (shared with it), found by `&str`: a driver call, one per
    /// heartbeat, allocates nothing to be counted.
    by_call: RwLock<BTreeMap<String, BTreeMap<&'static str, Histogram>>>,
}

impl Default for Metrics {
    fn default() -> Self {
        let timeouts = Family::<TimeoutLabels, Counter>::default();
        // Both checks are shown from the start, at 0.
        for kind in ["callback", "stall"] {
            timeouts.get_or_create(&TimeoutLabels { kind }).get();
        }
        Metrics {
            touches: Counter::default(),
            touches_remembered: Counter::default(),
            sweeps: Counter::default(),
            image_bytes: Counter::default(),
            timeouts,
            flows: Family::default(),
            calls: Family::new_with_constructor(|| Histogram::new(BUCKETS)),
            by_call: RwLock::default(),
        }
    }
}

impl Metrics {
    pub fn timed_out(&self, expiry: Expiry) {
        let kind = match expiry {
            Expiry::Callback => "callback",
            Expiry::Stall => "stall",
        };
        self.timeouts.get_or_create(&TimeoutLabels { kind }).inc();
    }

    /// A flow step that ended in `outcome` (the state it left the node in).
    pub fn flow(&self, driver: &str, outcome: &'static str) {
        let labels = FlowLabels {
            driver: driver.to_owned(),
            outcome,
        };
        self.flows.get_or_create(&labels).inc();
    }

    /// One driver call and how long it took.
    pub fn call(&self, driver: &str, export: &'static str, took: Duration) {
        let seconds = took.as_secs_f64();
        let known = self.by_call.read().unwrap_or_else(|p| p.into_inner());
        if let Some(h) = known.get(driver).and_then(|e| e.get(export)) {
            h.observe(seconds);
            return;
        }
        drop(known);
        let labels = CallLabels {
            driver: driver.to_owned(),
            export,
        };
        let h = self.calls.get_or_create(&labels).clone();
        h.observe(seconds);
        let mut known = self.by_call.write().unwrap_or_else(|p| p.into_inner());
        known.entry(labels.driver).or_default().insert(export, h);
    }

    /// The text, with `heartbeats` (counted by the agents' sessions) and whether the store
    /// is degraded (see [`crate::store::health`]) beside ours.
    pub fn render(&self, heartbeats: u64, store_degraded: bool) -> String {
        let mut registry = Registry::default();
        registry.register(
            "deployd_store_degraded",
            "1 while the store cannot write (a full or failing disk)",
            ConstGauge::new(i64::from(store_degraded)),
        );
        registry.register(
            "deployd_heartbeats",
            "Agent heartbeats accepted",
            ConstCounter::new(heartbeats),
        );
        let counters = [
            (
                "deployd_touches",
                "Touches of a waiting node's clock",
                &self.touches,
            ),
            (
                "deployd_touches_remembered",
                "Touches acknowledged while the store could not write, written once it could",
                &self.touches_remembered,
            ),
            (
                "deployd_sweeps",
                "Passes of the timeout sweeper",
                &self.sweeps,
            ),
            (
                "deployd_image_bytes_written",
                "Bytes the engine wrote onto agents' disks",
                &self.image_bytes,
            ),
        ];
        for (name, help, counter) in counters {
            registry.register(name, help, counter.clone());
        }
        registry.register(
            "deployd_timeouts",
            "Nodes failed by the sweeper, by check",
            self.timeouts.clone(),
        );
        registry.register(
            "deployd_flows",
            "Flow steps by driver and the state they ended in",
            self.flows.clone(),
        );
        registry.register(
            "deployd_driver_call_seconds",
            "Driver calls by driver and export, and how long they took",
            self.calls.clone(),
        );
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &registry)
            .expect("writing into a String does not fail");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histograms_are_cumulative_labels_escaped_and_the_text_is_openmetrics() {
        let m = Metrics::default();
        m.call("fake", "deploy", Duration::from_micros(300));
        m.call("fake", "deploy", Duration::from_millis(40));
        m.flow("we\"ird", "active");
        m.timed_out(Expiry::Stall);
        let text = m.render(3, false);
        assert!(text.contains("deployd_heartbeats_total 3\n"), "{text}");
        assert!(
            text.contains("# TYPE deployd_heartbeats counter\n"),
            "{text}"
        );
        assert!(text.ends_with("# EOF\n"), "{text}");
        assert!(
            text.contains("deployd_timeouts_total{kind=\"stall\"} 1\n"),
            "{text}"
        );
        assert!(text.contains("deployd_flows_total{driver=\"we\\\"ird\",outcome=\"active\"} 1\n"));
        let bucket = |le: &str| {
            format!(
                "deployd_driver_call_seconds_bucket{{le=\"{le}\",driver=\"fake\",export=\"deploy\"}}"
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
