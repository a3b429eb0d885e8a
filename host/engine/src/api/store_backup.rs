//! `GET /store/backup`: a backup of the store taken while the engine serves (see
//! [`crate::store::backup`]), streamed as it is written, from either backend. Behind the API's authentication,
//! like every operator route; `deployd store backup` calls it.

use axum::Router;
use axum::response::Response;
use axum::routing::get;

use super::http::streamed;
use super::{App, State};
use crate::store::backup;

pub fn routes() -> Router<std::sync::Arc<App>> {
    Router::new().route("/store/backup", get(backup))
}

/// The body ends in an error (no trailer, which a restore refuses) if the export fails
/// or the client goes away.
async fn backup(app: State) -> Response {
    let store = std::sync::Arc::clone(app.conductor.store());
    let runtime = tokio::runtime::Handle::current();
    streamed::respond("application/x-ndjson", None, move |out| {
        backup::write(&store, &runtime, out).map(drop)
    })
}
