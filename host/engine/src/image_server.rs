//! Serves images over HTTP, so agents can download what they write: the exact
//! `Content-Length`, streamed from disk, and `Range: bytes=N-` (and `N-M`) answered with
//! 206 from offset N, so an agent whose download broke (the engine restarted) resumes
//! where it stopped instead of writing the image again.
//!
//! - `GET /images/<name>`: a regular file placed in the images directory by the operator.
//!   Names are plain file names, and symlinks are not followed.
//! - `GET /images/staged/<node>/<token>`: a node's local `image_source`, only while that
//!   node is in its deploy flow and with the token of that deploy (see [`crate::images`]).
//!   A qcow2 (local, or a url's the engine cached) is served as the raw disk it holds
//!   (see [`crate::deploy_image`]), ranges included.
//!
//! Every refusal is the same 404, so a probe learns nothing about nodes or files.

use std::path::PathBuf;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncSeekExt};
use tokio_util::io::ReaderStream;
use uuid::Uuid;

use crate::images::{Images, STAGED_TOKEN, same_secret};
use crate::state_machine::ProvisionState;
use crate::store::Store;

struct Served {
    images: Images,
    store: Arc<Store>,
}

/// The engine's image routes: the images directory's files and staged images.
pub fn router(images: Images, store: Arc<Store>) -> Router {
    let staged_routes = Router::new()
        .route("/images/staged/{node}/{token}", get(staged).head(staged))
        .route(
            "/images/staged/{node}/{token}/configdrive",
            get(config_drive),
        )
        .with_state(Arc::new(Served {
            images: images.clone(),
            store,
        }));
    files(images.dir).merge(staged_routes)
}

/// Only the regular files of one directory (an image server for tests and the lab).
pub fn files(dir: PathBuf) -> Router {
    Router::new()
        .route("/images/{name}", get(plain).head(plain))
        .with_state(Arc::new(dir))
}

/// The raw disks of the qcow2 files of one directory, at `/images/raw-of/<name>`, as a
/// deploy serves a staged qcow2 (for benches and tests).
pub fn qcow2_files(dir: PathBuf) -> Router {
    Router::new()
        .route("/images/raw-of/{name}", get(raw_of))
        .with_state(Arc::new(dir))
}

async fn raw_of(
    State(dir): State<Arc<PathBuf>>,
    Path(name): Path<String>,
    headers: HeaderMap,
) -> Response {
    match in_dir(&dir, &name) {
        Some(path) => send_raw_view(path, &headers).await,
        None => not_found(),
    }
}

/// The file `name` names in `dir`, if it is a name of the directory itself: no path, no
/// dot file (the engine's own).
fn in_dir(dir: &std::path::Path, name: &str) -> Option<PathBuf> {
    let plain = !(name.contains('/') || name.contains('\\') || name.starts_with('.'));
    plain.then(|| dir.join(name))
}

fn not_found() -> Response {
    (StatusCode::NOT_FOUND, "no such image").into_response()
}

async fn plain(
    State(dir): State<Arc<PathBuf>>,
    Path(name): Path<String>,
    headers: HeaderMap,
) -> Response {
    let Some(path) = in_dir(&dir, &name) else {
        return not_found();
    };
    let nofollow = rustix::fs::OFlags::NOFOLLOW.bits() as i32;
    match tokio::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nofollow)
        .open(&path)
        .await
    {
        Ok(file) => send(file, &headers).await,
        Err(_) => not_found(),
    }
}

async fn staged(
    State(served): State<Arc<Served>>,
    Path((node, token)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    let Some((path, qcow2)) = staged_path(&served, &node, &token).await else {
        return not_found();
    };
    if qcow2 {
        return send_raw_view(path, &headers).await;
    }
    match tokio::fs::File::open(&path).await {
        Ok(file) => send(file, &headers).await,
        Err(_) => not_found(),
    }
}

/// A deploy's config drive, as Ironic serves one: base64 text of the gzipped image.
async fn config_drive(
    State(served): State<Arc<Served>>,
    Path((node, token)): Path<(String, String)>,
) -> Response {
    use crate::config_drive::ConfigDrive;
    let Some(node) = staged_node(&served, &node, &token).await else {
        return not_found();
    };
    match served.store.config_drive(node.uuid()).await {
        Ok(Some(ConfigDrive::Image(gz))) => ConfigDrive::served_text(&gz).into_response(),
        _ => not_found(),
    }
}

/// The node a staging url names, if that url may be served now: the node is in its
/// deploy flow, and the token is that deploy's.
async fn staged_node(served: &Served, node: &str, token: &str) -> Option<crate::node::Node> {
    let node = served.store.node(Uuid::parse_str(node).ok()?).await.ok()?;
    if !matches!(
        node.state(),
        ProvisionState::Deploying | ProvisionState::WaitCallBack
    ) {
        return None;
    }
    let internal = &node.body.driver_internal_info;
    let staged = internal.get(STAGED_TOKEN).and_then(Value::as_str)?;
    if !same_secret(staged, token) {
        return None;
    }
    Some(node)
}

/// The file a staging url may serve now, if any, and whether it is a qcow2 to serve as
/// its raw disk.
async fn staged_path(served: &Served, node: &str, token: &str) -> Option<(PathBuf, bool)> {
    let node = staged_node(served, node, token).await?;
    crate::deploy_image::served_file(&served.images, &node)
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

/// The status and byte range to answer `headers` with, for a body of `len` bytes; `None`
/// for a range outside it (see [`unsatisfiable`]).
fn answer_range(headers: &HeaderMap, len: u64) -> Option<(StatusCode, u64, u64)> {
    let asked = headers
        .get(header::RANGE)
        .and_then(|v| v.to_str().ok())
        .map(|v| range(v, len));
    match asked {
        None => Some((StatusCode::OK, 0, len)),
        Some(Some((start, end))) => Some((StatusCode::PARTIAL_CONTENT, start, end)),
        Some(None) => None,
    }
}

/// The 416 answer to a range outside a body of `len` bytes.
fn unsatisfiable(len: u64) -> Response {
    let range = [(header::CONTENT_RANGE, format!("bytes */{len}"))];
    (StatusCode::RANGE_NOT_SATISFIABLE, range).into_response()
}

/// A response of `body`, the bytes `[start, end)` of `len`.
fn respond(status: StatusCode, (start, end, len): (u64, u64, u64), body: Body) -> Response {
    let mut response = (
        status,
        [
            (header::CONTENT_LENGTH, (end - start).to_string()),
            (header::CONTENT_TYPE, "application/octet-stream".into()),
            (header::ACCEPT_RANGES, "bytes".into()),
        ],
        body,
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

/// Streams a regular file, whole or the asked range.
pub(crate) async fn send(mut file: tokio::fs::File, headers: &HeaderMap) -> Response {
    let len = match file.metadata().await {
        Ok(m) if m.is_file() => m.len(),
        _ => return not_found(),
    };
    let Some((status, start, end)) = answer_range(headers, len) else {
        return unsatisfiable(len);
    };
    if start > 0
        && let Err(e) = file.seek(std::io::SeekFrom::Start(start)).await
    {
        return (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response();
    }
    let body = Body::from_stream(ReaderStream::with_capacity(file.take(end - start), 1 << 20));
    respond(status, (start, end, len), body)
}

/// Streams the raw disk a qcow2 holds, whole or the asked range: a thread reads it
/// through qcow2-core a chunk ahead of the network. A read error (the file changed
/// under the deploy) ends the body early, which the agent sees as a failed download.
async fn send_raw_view(path: PathBuf, headers: &HeaderMap) -> Response {
    use crate::deploy_image::raw_view::RawView;
    let opened = tokio::task::spawn_blocking(move || RawView::open(&path)).await;
    let Ok(Ok(mut view)) = opened else {
        return not_found();
    };
    let len = view.size();
    let Some((status, start, end)) = answer_range(headers, len) else {
        return unsatisfiable(len);
    };
    let (chunks, receive) = tokio::sync::mpsc::channel::<Result<bytes::Bytes, String>>(2);
    tokio::task::spawn_blocking(move || {
        let sent = view.chunks(start, end, |chunk| {
            chunks
                .blocking_send(Ok(chunk))
                .map_err(|_| "the client left".to_owned())
        });
        if let Err(e) = sent {
            let _ = chunks.blocking_send(Err(e));
        }
    });
    let stream = futures_util::stream::unfold(receive, |mut receive| async move {
        let item = receive.recv().await?;
        Some((item.map_err(std::io::Error::other), receive))
    });
    respond(status, (start, end, len), Body::from_stream(stream))
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
