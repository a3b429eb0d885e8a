//! Answers written on a blocking thread and sent while they are written: lists and the
//! store's backup.
//!
//! sled is read synchronously, and a whole answer built before it is sent costs its size
//! in memory (150 chassis with a 900 KiB `extra` each took 1.47 GB to list, and stalled
//! the async workers for seconds). Here the producer writes into [`Chunks`], an
//! [`std::io::Write`] that hands each [`CHUNK`] to the response body over a small bounded
//! channel: a slow client slows the producer, never grows the buffer.
//!
//! The status is sent before the producer finishes, so a producer that fails cuts the
//! body short (the client sees a broken answer, never a truncated one that parses).

use std::io::Write;

use axum::body::{Body, Bytes};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use tokio::sync::{OwnedSemaphorePermit, mpsc};

/// How much is written before it is sent on.
pub const CHUNK: usize = 64 << 10;
/// Chunks in flight between the producer and the body.
const IN_FLIGHT: usize = 2;

/// The writer a producer writes the answer into.
pub struct Chunks {
    buf: Vec<u8>,
    tx: mpsc::Sender<std::io::Result<Bytes>>,
}

impl Chunks {
    fn send(&mut self) -> std::io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let chunk = Bytes::from(std::mem::replace(
            &mut self.buf,
            Vec::with_capacity(CHUNK + CHUNK / 4),
        ));
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

/// A `200` whose body `produce` writes on a blocking thread, holding `permit` (if any)
/// until it is done. An error `produce` returns is logged and cuts the body.
pub fn respond<F, E>(
    content_type: &'static str,
    permit: Option<OwnedSemaphorePermit>,
    produce: F,
) -> Response
where
    F: FnOnce(&mut Chunks) -> Result<(), E> + Send + 'static,
    E: std::fmt::Display,
{
    let (tx, mut rx) = mpsc::channel::<std::io::Result<Bytes>>(IN_FLIGHT);
    let base = super::base::current();
    tokio::task::spawn_blocking(move || {
        let _permit = permit;
        let mut out = Chunks {
            buf: Vec::with_capacity(CHUNK + CHUNK / 4),
            tx: tx.clone(),
        };
        let done = super::base::within(base, || produce(&mut out))
            .map_err(|e| e.to_string())
            .and_then(|()| out.flush().map_err(|e| format!("sending the answer: {e}")));
        if let Err(e) = done {
            if !tx.is_closed() {
                tracing::warn!("an answer was cut short: {e}");
            }
            let _ = tx.blocking_send(Err(std::io::Error::other(e)));
        }
    });
    let body = futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx));
    (
        [(header::CONTENT_TYPE, content_type)],
        Body::from_stream(body),
    )
        .into_response()
}
