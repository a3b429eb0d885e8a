//! `GET /store/backup`: a backup of the store taken while the engine serves (see
//! [`crate::store::backup`]), streamed as it is written. Behind the API's authentication,
//! like every operator route; `deployd store backup` calls it.

use std::io::Write;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use tokio::sync::mpsc;

use super::{App, State};

pub fn routes() -> Router<std::sync::Arc<App>> {
    Router::new().route("/store/backup", get(backup))
}

/// Chunks of the backup, handed from the blocking export to the response body.
const CHUNK: usize = 256 << 10;

async fn backup(app: State) -> impl IntoResponse {
    let (tx, rx) = mpsc::channel::<std::io::Result<Bytes>>(4);
    let store = std::sync::Arc::clone(app.conductor.store());
    // sled is read on a blocking thread; the body ends in an error (no trailer, which a
    // restore refuses) if the export fails or the client goes away.
    tokio::task::spawn_blocking(move || {
        let mut out = Chunks {
            buf: Vec::with_capacity(CHUNK),
            tx: tx.clone(),
        };
        if let Err(e) = store.backup(&mut out) {
            tracing::warn!("a backup failed: {e}");
            let _ = tx.blocking_send(Err(std::io::Error::other(e.to_string())));
        }
    });
    let body = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|chunk| (chunk, rx))
    });
    (
        [(header::CONTENT_TYPE, "application/x-ndjson")],
        Body::from_stream(body),
    )
}

struct Chunks {
    buf: Vec<u8>,
    tx: mpsc::Sender<std::io::Result<Bytes>>,
}

impl Chunks {
    fn send(&mut self) -> std::io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let chunk = Bytes::from(std::mem::replace(&mut self.buf, Vec::with_capacity(CHUNK)));
        self.tx
            .blocking_send(Ok(chunk))
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::BrokenPipe, "the client left"))
    }
}

impl Write for Chunks {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.buf.extend_from_slice(bytes);
        if self.buf.len() >= CHUNK {
            self.send()?;
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.send()
    }
}
