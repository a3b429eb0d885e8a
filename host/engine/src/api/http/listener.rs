//! Serves the API over TCP with the bounds a public endpoint needs, which `axum::serve`
//! does not set: without them 1,100 idle connections used every file descriptor and held
//! requests forever, and slowloris connections were never closed.
//!
//! - **At most `max_connections` at once.** One more is answered at once with a 503 in
//!   Ironic's error shape and closed, so a client is told why instead of hanging.
//! - **`header_read_timeout`.** A connection that does not finish sending a request's
//!   headers in time is closed. hyper starts this timer when a connection opens and again
//!   when a response has been sent, so it is also the idle limit of a kept-alive
//!   connection.
//! - **The descriptor limit.** The soft `RLIMIT_NOFILE` is raised to the hard one at start,
//!   and `max_connections` is lowered (with a warning) if it would not leave room for the
//!   store's and the drivers' files.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

/// Descriptors kept free for everything but API connections (store, compiled drivers,
/// BMC and agent clients, image files).
const RESERVED_FDS: u64 = 256;

/// Connection bounds of the API listener.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectionLimits {
    pub max_connections: usize,
    pub header_read_timeout: Duration,
}

/// Raises the soft descriptor limit to the hard one and returns the connections that fit
/// under it: `wanted`, or fewer if the limit is too low.
pub fn fit_to_descriptor_limit(wanted: usize) -> usize {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let mut limit = getrlimit(Resource::Nofile);
    if limit.current < limit.maximum {
        let raised = rustix::process::Rlimit {
            current: limit.maximum,
            ..limit
        };
        if setrlimit(Resource::Nofile, raised).is_ok() {
            limit = getrlimit(Resource::Nofile);
        }
    }
    let Some(soft) = limit.current else {
        return wanted;
    };
    let room = soft.saturating_sub(RESERVED_FDS) as usize;
    if room < wanted {
        tracing::warn!(
            wanted,
            allowed = room,
            "max_connections lowered to fit the descriptor limit ({soft}); raise `ulimit -n` for more"
        );
    }
    wanted.min(room).max(1)
}

/// Serves `router` on `listener` until `shutdown` resolves, then lets the connections
/// finish their requests.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: ConnectionLimits,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    let graceful = GracefulShutdown::new();
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout);
    tokio::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of descriptors (or a connection reset before accept): wait for
                    // some to close instead of spinning.
                    tracing::warn!("accepting a connection failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let (stream, peer) = stream;
        let _ = stream.set_nodelay(true);
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            tokio::spawn(refuse(stream, limits.max_connections));
            continue;
        };
        // Each request knows its client's address (authentication is fair per client).
        let service = TowerToHyperService::new(tower::ServiceExt::map_request(
            router.clone(),
            move |mut request: hyper::Request<hyper::body::Incoming>| {
                request
                    .extensions_mut()
                    .insert(axum::extract::ConnectInfo(peer));
                request
            },
        ));
        let connection = graceful.watch(http.serve_connection(TokioIo::new(stream), service));
        tokio::spawn(async move {
            let _ = connection.await;
            drop(permit);
        });
    }
    drop(listener);
    // Requests in flight finish; idle connections close now.
    if tokio::time::timeout(Duration::from_secs(30), graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("connections still open 30 s after shutdown began; closing them");
    }
    Ok(())
}

/// Tells a connection over the limit why it is closed, in Ironic's error shape.
async fn refuse(mut stream: TcpStream, max: usize) {
    let fault = format!(
        "The engine is serving its maximum of {max} connections; close idle ones or retry shortly."
    );
    let body = super::error::error_body(&fault);
    let head = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: {}\r\nretry-after: 1\r\nconnection: close\r\n\r\n",
        body.len()
    );
    let write = async {
        stream.write_all(head.as_bytes()).await?;
        stream.write_all(body.as_bytes()).await?;
        stream.shutdown().await
    };
    let _ = tokio::time::timeout(Duration::from_secs(1), write).await;
}
