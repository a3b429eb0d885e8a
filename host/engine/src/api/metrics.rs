//! `GET /metrics`: the engine's counters in the OpenMetrics text format (see
//! [`crate::metrics`]). Behind the API's authentication, like every operator route.

use axum::Router;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use std::sync::atomic::Ordering;

use super::{App, State};

pub fn routes() -> Router<std::sync::Arc<App>> {
    Router::new().route("/metrics", get(metrics))
}

async fn metrics(app: State) -> impl IntoResponse {
    let heartbeats = app.conductor.agents().heartbeats.load(Ordering::Relaxed);
    let store = app.conductor.store();
    let text = store
        .metrics()
        .render(heartbeats, store.health().is_degraded());
    ([(header::CONTENT_TYPE, crate::metrics::CONTENT_TYPE)], text)
}
