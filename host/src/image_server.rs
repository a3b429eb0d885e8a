//! Serves the files of one directory over HTTP, so `image_source` can be a url the agents
//! download from: `GET /images/<name>` with the exact `Content-Length`, streamed from disk.
//! Names are plain file names; anything with a path separator or `..` is refused.

use std::path::PathBuf;

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio_util::io::ReaderStream;

pub fn router(dir: PathBuf) -> Router {
    Router::new()
        .route("/images/{name}", get(image).head(image))
        .with_state(dir)
}

async fn image(State(dir): State<PathBuf>, Path(name): Path<String>) -> Response {
    if name.contains('/') || name.contains('\\') || name.starts_with('.') {
        return (StatusCode::BAD_REQUEST, "invalid image name").into_response();
    }
    let path = dir.join(&name);
    let file = match tokio::fs::File::open(&path).await {
        Ok(f) => f,
        Err(_) => return (StatusCode::NOT_FOUND, format!("no image {name}")).into_response(),
    };
    let len = match file.metadata().await {
        Ok(m) if m.is_file() => m.len(),
        _ => return (StatusCode::NOT_FOUND, format!("no image {name}")).into_response(),
    };
    let headers = [
        (header::CONTENT_LENGTH, len.to_string()),
        (header::CONTENT_TYPE, "application/octet-stream".into()),
    ];
    (
        headers,
        Body::from_stream(ReaderStream::with_capacity(file, 1 << 20)),
    )
        .into_response()
}
