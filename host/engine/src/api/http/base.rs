//! The base of the links a request is answered with (`http://host:port`), as Ironic builds
//! them: from the request's `Host`, unless the operator configured `api.public_url`
//! (Ironic's `public_endpoint`), which then always wins. A client that reached the
//! engine through another name than the listen address (a DNS name, a forwarded port)
//! is given links it can follow.
//!
//! The base is set for the request's task (a task-local), so every handler reads it
//! through [`crate::api::App::base`]; an answer written on a blocking thread
//! ([`super::streamed`]) carries it there.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;

use crate::api::App;

tokio::task_local! {
    static BASE: Arc<str>;
}

/// The current request's base, if one was set.
pub fn current() -> Option<String> {
    BASE.try_with(|b| b.to_string()).ok()
}

/// Runs `f` with the base `base` (a blocking thread's part of a request).
pub fn within<T>(base: Option<String>, f: impl FnOnce() -> T) -> T {
    match base {
        Some(base) => BASE.sync_scope(Arc::from(base), f),
        None => f(),
    }
}

/// A `Host` that names a host (and a port) and nothing else; anything else is ignored.
fn host_of(request: &Request) -> Option<&str> {
    let host = request
        .headers()
        .get(axum::http::header::HOST)?
        .to_str()
        .ok()?;
    let plain = host
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b".-:[]".contains(&b));
    (plain && !host.is_empty() && host.len() <= 255).then_some(host)
}

/// Middleware: the request's base, from its `Host` when `public_url` is not configured.
pub async fn from_host(State(app): State<Arc<App>>, request: Request, next: Next) -> Response {
    if app.public_url_fixed {
        return next.run(request).await;
    }
    let (scheme, default) = app.public_url.split_once("://").unwrap_or(("http", ""));
    // The usual request names the engine as its default does: nothing to set.
    let Some(host) = host_of(&request).filter(|h| *h != default) else {
        return next.run(request).await;
    };
    let base: Arc<str> = Arc::from(format!("{scheme}://{host}"));
    BASE.scope(base, next.run(request)).await
}
