//! `GET /store/backup`: a backup of the store taken while the engine serves (see
//! [`crate::store::backup`]), streamed as it is written. Behind the API's authentication,
//! like every operator route; `deployd store backup` calls it.

use axum::Router;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::response::Response;
use axum::routing::get;

use super::http::error::ApiError;
use super::http::streamed;
use super::{App, State};

pub fn routes() -> Router<std::sync::Arc<App>> {
    Router::new().route("/store/backup", get(backup))
}

/// The body ends in an error (no trailer, which a restore refuses) if the export fails
/// or the client goes away.
async fn backup(app: State) -> Response {
    let store = std::sync::Arc::clone(app.conductor.store());
    // The shared store is the database's to back up: its own tools do it online.
    if store.path().is_none() {
        return ApiError::new(
            StatusCode::NOT_IMPLEMENTED,
            "this engine's store is PostgreSQL: back it up with PostgreSQL's own tools (pg_dump)",
        )
        .into_response();
    }
    streamed::respond("application/x-ndjson", None, move |out| {
        store.backup(out).map(drop)
    })
}
