//! The lab's Redfish BMC over real HTTP: what the `redfish` drivers use, and its refusals.

use deployd_lab::{AgentMode, Lab, LabArgs};
use reqwest::StatusCode;
use serde_json::{Value, json};

async fn lab(dir: &tempfile::TempDir) -> (Lab, String) {
    let args = LabArgs {
        machines: 2,
        dir: dir.path().join("lab"),
        listen: "127.0.0.1:0".parse().unwrap(),
        // Nothing listens there: a booted agent keeps looking for its engine.
        api_url: "http://127.0.0.1:9".into(),
        throttle: None,
        heartbeat_interval: None,
        agent_tasks: true,
        agent_tls: deployd_lab::TlsMode::Auto,
        ipmi_python: None,
        vm: deployd_lab::VmArgs::default(),
    };
    let lab = Lab::start(&args, AgentMode::Task).await.unwrap();
    let base = format!("http://{}/redfish/v1/Systems/machine-000", lab.addr);
    (lab, base)
}

async fn send(method: reqwest::Method, url: &str, body: Value) -> (StatusCode, Value) {
    let r = reqwest::Client::new()
        .request(method, url)
        .json(&body)
        .send()
        .await
        .unwrap();
    (r.status(), r.json().await.unwrap_or(Value::Null))
}

async fn system(url: &str) -> Value {
    reqwest::get(url).await.unwrap().json().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn power_on_from_the_network_boots_the_agent_once() {
    let dir = tempfile::tempdir().unwrap();
    let (lab, base) = lab(&dir).await;
    let reset = format!("{base}/Actions/ComputerSystem.Reset");
    assert_eq!(system(&base).await["PowerState"], "Off");

    // From disk: on, but no agent.
    let (status, _) = send(reqwest::Method::POST, &reset, json!({"ResetType": "On"})).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let view = &lab.machines["machine-000"];
    assert!(!view.view().agent_running);
    assert_eq!(view.view().power, "On");

    // Network boot once, then a power cycle: the agent runs and the override is used up.
    let pxe =
        json!({"Boot": {"BootSourceOverrideTarget": "Pxe", "BootSourceOverrideEnabled": "Once"}});
    let (status, doc) = send(reqwest::Method::PATCH, &base, pxe).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(doc["Boot"]["BootSourceOverrideTarget"], "Pxe");
    let (status, _) = send(
        reqwest::Method::POST,
        &reset,
        json!({"ResetType": "PowerCycle"}),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    assert!(view.view().agent_running);
    assert_eq!(view.view().agent_boots, 1);
    assert_eq!(
        system(&base).await["Boot"]["BootSourceOverrideTarget"],
        "Hdd"
    );

    // Power off pulls the plug on the agent.
    let (status, _) = send(
        reqwest::Method::POST,
        &reset,
        json!({"ResetType": "ForceOff"}),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    assert_eq!(system(&base).await["PowerState"], "Off");
    assert!(!view.view().agent_running);
    assert_eq!(
        lab.machines["machine-001"].view().power,
        "Off",
        "its neighbour untouched"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_are_refused_and_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (lab, base) = lab(&dir).await;
    let reset = format!("{base}/Actions/ComputerSystem.Reset");
    let unknown = base.replace("machine-000", "machine-999");
    let cases = [
        (
            reqwest::Method::GET,
            unknown.clone(),
            json!(null),
            StatusCode::NOT_FOUND,
        ),
        (
            reqwest::Method::POST,
            format!("{unknown}/Actions/ComputerSystem.Reset"),
            json!({"ResetType": "On"}),
            StatusCode::NOT_FOUND,
        ),
        (
            reqwest::Method::POST,
            reset.clone(),
            json!({"ResetType": "Explode"}),
            StatusCode::BAD_REQUEST,
        ),
        (
            reqwest::Method::POST,
            reset.clone(),
            json!({}),
            StatusCode::BAD_REQUEST,
        ),
        (
            reqwest::Method::PATCH,
            base.clone(),
            json!({"Boot": {"BootSourceOverrideTarget": "Floppy"}}),
            StatusCode::BAD_REQUEST,
        ),
        (
            reqwest::Method::PATCH,
            base.clone(),
            json!({"Boot": {"BootSourceOverrideTarget": "Pxe", "BootSourceOverrideEnabled": "Sometimes"}}),
            StatusCode::BAD_REQUEST,
        ),
        (
            reqwest::Method::POST,
            format!("http://{}/lab/machines/machine-000/kill-agent", lab.addr),
            json!(null),
            StatusCode::CONFLICT,
        ),
        (
            reqwest::Method::POST,
            format!("{base}/VirtualMedia/Cd/Actions/VirtualMedia.InsertMedia"),
            json!({"Image": "/etc/passwd", "Inserted": true}),
            StatusCode::BAD_REQUEST,
        ),
        (
            reqwest::Method::GET,
            format!("{unknown}/VirtualMedia/Cd"),
            json!(null),
            StatusCode::NOT_FOUND,
        ),
    ];
    for (method, url, body, expected) in cases {
        let (status, answer) = send(method.clone(), &url, body.clone()).await;
        assert_eq!(status, expected, "{method} {url} {body}: {answer}");
        assert!(answer["error"]["message"].is_string(), "{answer}");
    }
    let doc = system(&base).await;
    assert_eq!(doc["PowerState"], "Off");
    assert_eq!(doc["Boot"]["BootSourceOverrideTarget"], "Hdd");
    assert_eq!(doc["Boot"]["BootSourceOverrideEnabled"], "Disabled");
    assert_eq!(
        system(&format!("{base}/VirtualMedia/Cd")).await["Inserted"],
        false
    );
}
