//! Serves the files of one directory over HTTP, so `image_source` can be a url the agents
//! download from: `GET /images/<name>` with the exact `Content-Length`, streamed from disk.
//! Names are plain file names; anything with a path separator or `..` is refused.
//!
//! `Range: bytes=N-` (and `N-M`) answers 206 from offset N: an agent whose download broke
//! (the engine restarted) resumes where it stopped instead of writing the image again.

use std::path::PathBuf;

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio::io::{AsyncReadExt, AsyncSeekExt};
use tokio_util::io::ReaderStream;

pub fn router(dir: PathBuf) -> Router {
    Router::new()
        .route("/images/{name}", get(image).head(image))
        .with_state(dir)
}

/// `bytes=N-` or `bytes=N-M` (inclusive) within `len`: (start, end exclusive).
fn range(value: &str, len: u64) -> Option<(u64, u64)> {
    let (start, end) = value.strip_prefix("bytes=")?.split_once('-')?;
    let start: u64 = start.trim().parse().ok()?;
    let end = match end.trim() {
        "" => len,
        e => e.parse::<u64>().ok()?.saturating_add(1).min(len),
    };
    (start < end).then_some((start, end))
}

async fn image(
    State(dir): State<PathBuf>,
    Path(name): Path<String>,
    headers: axum::http::HeaderMap,
) -> Response {
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
    let asked = headers
        .get(header::RANGE)
        .and_then(|v| v.to_str().ok())
        .map(|v| range(v, len));
    let (status, start, end) = match asked {
        None => (StatusCode::OK, 0, len),
        Some(Some((start, end))) => (StatusCode::PARTIAL_CONTENT, start, end),
        Some(None) => {
            let unsatisfiable = [(header::CONTENT_RANGE, format!("bytes */{len}"))];
            return (StatusCode::RANGE_NOT_SATISFIABLE, unsatisfiable).into_response();
        }
    };
    let mut file = file;
    if start > 0
        && let Err(e) = file.seek(std::io::SeekFrom::Start(start)).await
    {
        return (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response();
    }
    let mut response = (
        status,
        [
            (header::CONTENT_LENGTH, (end - start).to_string()),
            (header::CONTENT_TYPE, "application/octet-stream".into()),
            (header::ACCEPT_RANGES, "bytes".into()),
        ],
        Body::from_stream(ReaderStream::with_capacity(file.take(end - start), 1 << 20)),
    )
        .into_response();
    if status == StatusCode::PARTIAL_CONTENT {
        let value = format!("bytes {start}-{}/{len}", end - 1);
        response.headers_mut().insert(
            header::CONTENT_RANGE,
            value.parse().expect("a valid header"),
        );
    }
    response
}

#[cfg(test)]
mod tests {
    use super::range;

    #[test]
    fn ranges_are_read_within_the_file() {
        assert_eq!(range("bytes=0-", 10), Some((0, 10)));
        assert_eq!(range("bytes=4-", 10), Some((4, 10)));
        assert_eq!(range("bytes=2-5", 10), Some((2, 6)));
        assert_eq!(range("bytes=2-50", 10), Some((2, 10)));
        assert_eq!(range("bytes=10-", 10), None);
        assert_eq!(range("bytes=-5", 10), None);
        assert_eq!(range("lines=1-", 10), None);
    }
}
