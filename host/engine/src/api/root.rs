//! Discovery: `GET /` and `GET /v1`, read by the CLI, openstacksdk and the agent to learn
//! the version range (note Ironic's quirk: `version` is the maximum).

use axum::Json;
use axum::Router;
use axum::routing::get;
use serde_json::{Value, json};

use super::http::version::{MAX, MIN};
use super::{App, State};

pub fn routes() -> Router<std::sync::Arc<App>> {
    Router::new()
        .route("/", get(root))
        .route("/v1", get(v1))
        .route("/v1/", get(v1))
}

fn version_doc(base: &str) -> Value {
    json!({
        "id": "v1",
        "links": [{"href": format!("{base}/v1/"), "rel": "self"}],
        "status": "CURRENT",
        "min_version": MIN.to_string(),
        "version": MAX.to_string(),
    })
}

async fn root(app: State) -> Json<Value> {
    let base = &app.public_url;
    Json(json!({
        "name": "deployd",
        "description": "deployd is a bare-metal deploy engine speaking Ironic's API; its drivers are WebAssembly components.",
        "default_version": version_doc(base),
        "versions": [version_doc(base)],
    }))
}

async fn v1(app: State) -> Json<Value> {
    let base = &app.public_url;
    let link = |path: &str| json!([{"href": format!("{base}/v1/{path}/"), "rel": "self"}, {"href": format!("{base}/{path}/"), "rel": "bookmark"}]);
    Json(json!({
        "id": "v1",
        "links": [{"href": format!("{base}/v1/"), "rel": "self"}],
        "media_types": [{"base": "application/json", "type": "application/vnd.openstack.ironic.v1+json"}],
        "nodes": link("nodes"),
        "ports": link("ports"),
        "drivers": link("drivers"),
        "lookup": [{"href": format!("{base}/v1/lookup/"), "rel": "self"}],
        "heartbeat": [{"href": format!("{base}/v1/heartbeat/"), "rel": "self"}],
        "version": version_doc(base),
    }))
}
