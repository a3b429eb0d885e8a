//! The agent's command API over real HTTP, as the engine's drivers call it: tokens, busy,
//! bad requests, verified image writes, resumed downloads, and the metadata wipe.

use deployd_test_support as common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use common::emulators;
use deployd_agent::{CommandApi, DiskTarget};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

const TOKEN: &str = "agent-token-agent-token-agent-token-0123456";

struct Agent {
    api: Arc<CommandApi>,
    url: String,
    _dir: tempfile::TempDir,
    http: reqwest::Client,
}

async fn agent(throttle: Option<u64>) -> Agent {
    let dir = tempfile::tempdir().unwrap();
    let disk = DiskTarget::new(dir.path().join("disk.img"), throttle);
    let api = CommandApi::new(disk, "http://agent".into());
    api.set_token(TOKEN.into());
    let addr = emulators::serve(deployd_agent::server::router(api.clone())).await;
    Agent {
        api,
        url: format!("http://{addr}"),
        _dir: dir,
        http: reqwest::Client::new(),
    }
}

impl Agent {
    async fn run(
        &self,
        token: Option<&str>,
        name: &str,
        params: Value,
        wait: bool,
    ) -> (StatusCode, Value) {
        let mut query = vec![("wait", wait.to_string())];
        if let Some(t) = token {
            query.push(("agent_token", t.to_owned()));
        }
        let r = self
            .http
            .post(format!("{}/v1/commands/", self.url))
            .query(&query)
            .json(&json!({"name": name, "params": params}))
            .send()
            .await
            .unwrap();
        (r.status(), r.json().await.unwrap_or(Value::Null))
    }
}

fn bytes(n: usize) -> Vec<u8> {
    (0..n)
        .map(|i| (i.wrapping_mul(2654435761) >> 11) as u8)
        .collect()
}

fn sha256(data: &[u8]) -> String {
    hex::encode(Sha256::digest(data))
}

/// An image server (the engine's) for `data`; its url.
async fn served(data: &[u8]) -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("os.raw"), data).unwrap();
    let addr = emulators::serve(deployd_engine::image_server::files(
        dir.path().to_path_buf(),
    ))
    .await;
    (dir, format!("http://{addr}/images/os.raw"))
}

fn prepare(url: &str, sha: &str) -> Value {
    json!({"image_info": {"id": "os", "urls": [url], "os_hash_algo": "sha256", "os_hash_value": sha}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_need_the_token_and_name_a_known_extension_and_command() {
    let a = agent(None).await;
    for token in [None, Some("wrong")] {
        let (status, body) = a.run(token, "standby.sync", json!({}), true).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    }
    let (status, body) = a.run(Some(TOKEN), "bios.apply", json!({}), true).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    let (status, body) = a.run(Some(TOKEN), "standby.fly", json!({}), true).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let (status, body) = a
        .run(
            Some(TOKEN),
            "standby.prepare_image",
            json!({"image_info": {}}),
            true,
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let broken = a
        .http
        .post(format!("{}/v1/commands/?agent_token={TOKEN}", a.url))
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(broken.status(), StatusCode::BAD_REQUEST);
    assert!(a.api.list().is_empty(), "nothing ran");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_is_written_verified_and_a_second_command_meanwhile_is_busy() {
    let a = agent(Some(4 << 20)).await;
    let data = bytes(3 << 20);
    let (_dir, url) = served(&data).await;
    let (status, started) = a
        .run(
            Some(TOKEN),
            "standby.prepare_image",
            prepare(&url, &sha256(&data)),
            false,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{started}");
    assert_eq!(started["command_status"], "RUNNING");
    let (status, busy) = a.run(Some(TOKEN), "standby.sync", json!({}), false).await;
    assert_eq!(status, StatusCode::CONFLICT, "{busy}");
    let id = started["id"].as_str().unwrap();
    let done: Value = a
        .http
        .get(format!(
            "{}/v1/commands/{id}?wait=true&agent_token={TOKEN}",
            a.url
        ))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(done["command_status"], "SUCCEEDED", "{done}");
    assert_eq!(std::fs::read(a.api.disk.path()).unwrap(), data);
    assert_eq!(
        a.api.status_message(),
        format!(
            "prepare_image: succeeded, {0} of {0} bytes written",
            3 << 20
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checksum_mismatch_fails_the_write() {
    let a = agent(None).await;
    let data = bytes(1 << 20);
    let (_dir, url) = served(&data).await;
    let (_, result) = a
        .run(
            Some(TOKEN),
            "standby.prepare_image",
            prepare(&url, &"0".repeat(64)),
            true,
        )
        .await;
    assert_eq!(result["command_status"], "FAILED", "{result}");
    let details = result["command_error"]["details"].as_str().unwrap();
    assert!(details.contains("image checksum mismatch"), "{details}");
}

/// Serves `data`, but breaks the first download after 1 MiB; later ones honour `Range`.
async fn flaky(
    State((data, hits)): State<(Arc<Vec<u8>>, Arc<AtomicUsize>)>,
    headers: HeaderMap,
) -> Response {
    let hit = hits.fetch_add(1, Ordering::SeqCst);
    if hit == 0 {
        let head = bytes::Bytes::copy_from_slice(&data[..1 << 20]);
        let chunks: Vec<Result<bytes::Bytes, std::io::Error>> =
            vec![Ok(head), Err(std::io::Error::other("the engine went away"))];
        let body = Body::from_stream(futures_util::stream::iter(chunks));
        return ([("content-length", data.len().to_string())], body).into_response();
    }
    let start: usize = headers
        .get("range")
        .and_then(|v| {
            v.to_str()
                .ok()?
                .strip_prefix("bytes=")?
                .strip_suffix('-')?
                .parse()
                .ok()
        })
        .expect("a resumed download asks for the rest");
    let rest = data[start..].to_vec();
    let range = format!("bytes {start}-{}/{}", data.len() - 1, data.len());
    (
        StatusCode::PARTIAL_CONTENT,
        [("content-range", range)],
        rest,
    )
        .into_response()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_download_resumes_where_it_stopped() {
    let a = agent(None).await;
    let data = Arc::new(bytes(3 << 20));
    let hits = Arc::new(AtomicUsize::new(0));
    let router = axum::Router::new()
        .route("/os.raw", axum::routing::get(flaky))
        .with_state((data.clone(), hits.clone()));
    let addr = emulators::serve(router).await;
    let url = format!("http://{addr}/os.raw");
    let (_, result) = a
        .run(
            Some(TOKEN),
            "standby.prepare_image",
            prepare(&url, &sha256(&data)),
            true,
        )
        .await;
    assert_eq!(result["command_status"], "SUCCEEDED", "{result}");
    assert_eq!(hits.load(Ordering::SeqCst), 2, "one break, one resume");
    assert_eq!(std::fs::read(a.api.disk.path()).unwrap(), *data);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn erasing_metadata_zeroes_both_ends_of_the_disk() {
    let a = agent(None).await;
    let data = bytes(5 << 20);
    std::fs::write(a.api.disk.path(), &data).unwrap();
    let (status, result) = a
        .run(
            Some(TOKEN),
            "deploy.erase_devices_metadata",
            json!({}),
            true,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{result}");
    assert_eq!(result["command_status"], "SUCCEEDED");
    let disk = std::fs::read(a.api.disk.path()).unwrap();
    assert_eq!(disk.len(), data.len());
    assert!(disk[..1 << 20].iter().all(|&b| b == 0));
    assert!(disk[4 << 20..].iter().all(|&b| b == 0));
    assert_eq!(
        disk[1 << 20..4 << 20],
        data[1 << 20..4 << 20],
        "the middle is left"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clean_steps_are_listed_and_run_as_ironic_python_agent_runs_them() {
    let a = agent(None).await;
    let data = bytes(5 << 20);
    std::fs::write(a.api.disk.path(), &data).unwrap();
    let (status, listed) = a
        .run(
            Some(TOKEN),
            "clean.get_clean_steps",
            json!({"node": {}, "ports": []}),
            true,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{listed}");
    let result = &listed["command_result"];
    let steps: Vec<&str> = result["clean_steps"]
        .as_object()
        .unwrap()
        .values()
        .flat_map(|s| s.as_array().unwrap())
        .map(|s| s["step"].as_str().unwrap())
        .collect();
    assert_eq!(steps, ["erase_devices_metadata", "erase_devices"]);
    // erase_devices erases the whole disk only when asked to, in the background.
    let full = json!({"step": {"interface": "deploy", "step": "erase_devices", "priority": 10, "args": {"full": true}},
                      "node": {}, "ports": [], "clean_version": result["hardware_manager_version"]});
    let (status, run) = a
        .run(Some(TOKEN), "clean.execute_clean_step", full, true)
        .await;
    assert_eq!(status, StatusCode::OK, "{run}");
    assert_eq!(run["command_status"], "SUCCEEDED", "{run}");
    assert!(
        std::fs::read(a.api.disk.path())
            .unwrap()
            .iter()
            .all(|&b| b == 0)
    );
    let stale = json!({"step": {"interface": "deploy", "step": "erase_devices_metadata"},
                       "clean_version": {"DeploydHardwareManager": "0.1"}});
    let (status, refused) = a
        .run(Some(TOKEN), "clean.execute_clean_step", stale, true)
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{refused}");
}
