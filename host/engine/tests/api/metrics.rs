//! `GET /metrics`, scraped as Prometheus would: the counters move with what the engine
//! did, and parse as the text format.

use deployd_test_support as common;

use std::collections::HashMap;

use common::server::start;
use serde_json::json;

/// Every sample of a scrape, by its name and labels as written.
fn samples(text: &str) -> HashMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (name, value) = l.rsplit_once(' ').expect("a sample is a name and a value");
            (name.to_owned(), value.parse().expect("a number"))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scrape_counts_flows_timeouts_touches_sweeps_and_driver_calls() {
    let s = start(|c| c.conductor.deploy_callback_timeout = 1).await;
    let deployed = s.node(json!({"driver": "fake"})).await;
    let steps = [
        ("manage", "manageable"),
        ("provide", "available"),
        ("active", "active"),
    ];
    s.walk(&deployed, &steps).await;
    let waits = s
        .node(json!({"driver": "test_driver", "instance_info": {"mode": "wait"}}))
        .await;
    s.walk(&waits, common::server::Server::TO_WAIT_CALL_BACK)
        .await;
    let uuid = waits.parse().unwrap();
    s.engine
        .conductor
        .store()
        .touch_provisioning(uuid)
        .await
        .unwrap();
    s.wait_for(&waits, "deploy failed").await;

    let scrape = s
        .http
        .get(format!("{}/metrics", s.base))
        .send()
        .await
        .unwrap();
    assert_eq!(scrape.status(), 200);
    assert_eq!(
        scrape.headers()["content-type"],
        "application/openmetrics-text; version=1.0.0; charset=utf-8"
    );
    let text = scrape.text().await.unwrap();
    let m = samples(&text);
    let at = |k: &str| *m.get(k).unwrap_or_else(|| panic!("no {k} in\n{text}"));
    assert_eq!(
        at(r#"deployd_flows_total{driver="fake",outcome="active"}"#),
        1.0
    );
    assert_eq!(
        at(r#"deployd_flows_total{driver="test_driver",outcome="deploy failed"}"#),
        1.0
    );
    assert_eq!(at(r#"deployd_timeouts_total{kind="callback"}"#), 1.0);
    assert_eq!(at(r#"deployd_timeouts_total{kind="stall"}"#), 0.0);
    assert!(at("deployd_touches_total") >= 1.0);
    assert!(at("deployd_sweeps_total") >= 1.0);
    assert_eq!(at("deployd_heartbeats_total"), 0.0);
    let calls = r#"deployd_driver_call_seconds_count{driver="fake",export="deploy"}"#;
    assert_eq!(at(calls), 1.0);
    let all = r#"deployd_driver_call_seconds_bucket{le="+Inf",driver="fake",export="deploy"}"#;
    assert_eq!(at(all), 1.0);
}
