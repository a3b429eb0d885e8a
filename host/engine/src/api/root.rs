//! Discovery: `GET /` and `GET /v1`, read by the CLI, openstacksdk and the agent to learn
//! the version range (note Ironic's quirk: `version` is the maximum).

use axum::Json;
use axum::Router;
use axum::extract::Extension;
use axum::routing::get;
use serde_json::{Value, json};

use super::http::version::{MAX, MIN, Version};
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
    let base = &app.base();
    Json(json!({
        "name": "deployd",
        "description": "deployd is a bare-metal deploy engine speaking Ironic's API; its drivers are WebAssembly components.",
        "default_version": version_doc(base),
        "versions": [version_doc(base)],
    }))
}

/// The resources `/v1` links to from the version each came with, as Ironic lists them.
const V1_RESOURCES: &[(&str, u32)] = &[
    ("chassis", 1),
    ("nodes", 1),
    ("ports", 1),
    ("drivers", 1),
    ("portgroups", 24),
    ("volume", 32),
    ("conductors", 49),
    ("allocations", 52),
    ("deploy_templates", 55),
    ("shards", 82),
    ("runbooks", 92),
    ("inspection_rules", 96),
];

async fn v1(app: State, Extension(version): Extension<Version>) -> Json<Value> {
    let base = &app.base();
    let link = |path: &str| json!([{"href": format!("{base}/v1/{path}/"), "rel": "self"}, {"href": format!("{base}/{path}/"), "rel": "bookmark"}]);
    let mut doc = json!({
        "id": "v1",
        "links": [{"href": format!("{base}/v1/"), "rel": "self"}],
        "media_types": [{"base": "application/json", "type": "application/vnd.openstack.ironic.v1+json"}],
        "version": version_doc(base),
    });
    for (resource, since) in V1_RESOURCES {
        if version.at_least(*since) {
            doc[*resource] = link(resource);
        }
    }
    if version.at_least(22) {
        for ramdisk in ["lookup", "heartbeat"] {
            doc[ramdisk] = json!([{"href": format!("{base}/v1/{ramdisk}/"), "rel": "self"}]);
        }
    }
    Json(doc)
}
