//! Serves the API over TCP with the bounds a public endpoint needs, which `axum::serve`
//! does not set: without them 1,100 idle connections used every file descriptor and held
//! requests forever, and slowloris connections were never closed.
//!
//! - **At most `max_connections` at once.** One more takes the slot of the connection idle
//!   the longest, which is closed (see [`super::connections`]); when every connection has
//!   a request in flight it is answered at once with a 503 in Ironic's error shape and
//!   closed, so a client is told why instead of hanging. One client address holds at
//!   most `max_per_client` of them.
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
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::connections::{Connection, Connections};
use std::net::IpAddr;

/// Descriptors kept free for everything but API connections (store, compiled drivers,
/// BMC and agent clients, image files).
const RESERVED_FDS: u64 = 256;

/// Connection bounds of the API listener.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectionLimits {
    pub max_connections: usize,
    /// How many of them one client address may hold (see [`super::connections`]).
    pub max_per_client: usize,
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

/// How long a new client waits for the slot of an idle connection closed for it.
const ADMIT_WAIT: Duration = Duration::from_secs(2);

/// Serves `router` on `listener` until `shutdown` resolves, then lets the connections
/// finish their requests.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: ConnectionLimits,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    let registry = Arc::new(Connections::default());
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
        let admission = Admission {
            permits: permits.clone(),
            registry: registry.clone(),
            limits,
        };
        let (router, http) = (router.clone(), http.clone());
        tokio::spawn(async move {
            let Some(permit) = admission.admit(peer.ip()).await else {
                return refuse(stream, &admission.refusal(peer.ip())).await;
            };
            let connection = Arc::new(admission.registry.open(peer.ip()));
            let service = service(router, connection.clone(), peer);
            // With upgrades: the dashboard's consoles are websockets. An upgraded
            // connection leaves this count (its permit is dropped when hyper hands it
            // over); the consoles bound their own number (`dashboard::console`).
            let serving = http
                .serve_connection(TokioIo::new(stream), service)
                .with_upgrades();
            tokio::pin!(serving);
            // Closed for a new client, or at shutdown, once nothing is in flight. Only the
            // connection's own signal is polled with it (a channel shared by every
            // connection, polled at each of their wake-ups, was a contended lock).
            tokio::select! {
                _ = &mut serving => {}
                () = connection.close.notified() => {
                    serving.as_mut().graceful_shutdown();
                    let _ = serving.await;
                }
            }
            drop(permit);
        });
    }
    drop(listener);
    // Requests in flight finish; idle connections close now.
    registry.close_all();
    let all_closed = async {
        while permits.available_permits() < limits.max_connections {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    if tokio::time::timeout(Duration::from_secs(30), all_closed)
        .await
        .is_err()
    {
        tracing::warn!("connections still open 30 s after shutdown began; closing them");
    }
    Ok(())
}

/// The router as one connection's service: each request knows its client's address
/// (authentication is fair per client) and counts as in flight until answered.
fn service(
    router: Router,
    connection: Arc<Connection>,
    peer: std::net::SocketAddr,
) -> impl hyper::service::Service<
    hyper::Request<hyper::body::Incoming>,
    Response = axum::response::Response,
    Error = std::convert::Infallible,
    Future = impl Future<Output = Result<axum::response::Response, std::convert::Infallible>> + Send,
> + Clone {
    hyper::service::service_fn(move |mut request: hyper::Request<hyper::body::Incoming>| {
        request
            .extensions_mut()
            .insert(axum::extract::ConnectInfo(peer));
        super::plumbing::ironic_path(&mut request);
        let in_flight = InFlight::new(connection.clone());
        let router = router.clone();
        async move {
            let answer =
                tower::ServiceExt::oneshot(router, request.map(axum::body::Body::new)).await;
            drop(in_flight);
            answer
        }
    })
}

/// A request in flight on a connection, until dropped (answered, or abandoned).
struct InFlight(Arc<Connection>);

impl InFlight {
    fn new(connection: Arc<Connection>) -> InFlight {
        connection.started();
        InFlight(connection)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.answered();
    }
}

/// Whether a new connection gets a slot.
struct Admission {
    permits: Arc<Semaphore>,
    registry: Arc<Connections>,
    limits: ConnectionLimits,
}

impl Admission {
    /// A slot for a connection from `peer`: free, or made by closing an idle connection
    /// (the client's own, past its share); none when every connection is busy.
    async fn admit(&self, peer: IpAddr) -> Option<OwnedSemaphorePermit> {
        let at_share = self.registry.held_by(peer) >= self.limits.max_per_client;
        if at_share && !self.registry.close_oldest_idle(Some(peer)) {
            return None;
        }
        if !at_share && let Ok(permit) = self.permits.clone().try_acquire_owned() {
            return Some(permit);
        }
        if !at_share && !self.registry.close_oldest_idle(None) {
            return None;
        }
        let freed = self.permits.clone().acquire_owned();
        tokio::time::timeout(ADMIT_WAIT, freed).await.ok()?.ok()
    }

    /// Why a connection from `peer` was refused.
    fn refusal(&self, peer: IpAddr) -> String {
        match self.registry.held_by(peer) >= self.limits.max_per_client {
            true => format!(
                "This client holds its maximum of {} connections, each with a request in flight; retry once one is answered.",
                self.limits.max_per_client
            ),
            false => format!(
                "The engine is serving its maximum of {} connections, each with a request in flight; retry shortly.",
                self.limits.max_connections
            ),
        }
    }
}

/// Tells a connection over the limit why it is closed, in Ironic's error shape.
async fn refuse(mut stream: TcpStream, fault: &str) {
    let body = super::error::error_body(fault);
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
