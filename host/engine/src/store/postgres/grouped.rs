//! Requests of one kind grouped into one statement, so that many share a round trip and
//! a commit: a request joins whatever requests are waiting while the previous statement
//! runs. There is no wait window: a lone request goes at once; under load, a group is as
//! large as the load makes it (up to a bound). Each request carries its own reply, sent
//! once its group committed (synchronous commit), never before.
//!
//! Heartbeats' touches, and the claims and releases of the nodes their steps run on, go
//! this way: one engine under 100,000 agents would otherwise commit each on its own.

use std::future::Future;
use std::sync::Arc;

use deadpool_postgres::Pool;
use tokio::sync::{Mutex, mpsc, oneshot};

use crate::store::StoreError;

/// The queue of one kind of request and the workers that write its groups.
pub(super) struct Grouped<T> {
    queue: mpsc::UnboundedSender<T>,
}

impl<T: Send + 'static> Grouped<T> {
    /// Starts `workers` workers, each writing one group at a time of at most `most`
    /// requests with `write` on a connection of `pool`; they end when the queue is
    /// dropped.
    pub(super) fn start<F, Fut>(pool: Pool, workers: usize, most: usize, write: F) -> Grouped<T>
    where
        F: Fn(Pool, Vec<T>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send,
    {
        let (queue, rx) = mpsc::unbounded_channel();
        let (rx, write) = (Arc::new(Mutex::new(rx)), Arc::new(write));
        for _ in 0..workers {
            let (pool, rx, write) = (pool.clone(), rx.clone(), write.clone());
            tokio::spawn(async move {
                while let Some(group) = next_group(&rx, most).await {
                    write(pool.clone(), group).await;
                }
            });
        }
        Grouped { queue }
    }

    /// Sends the request `ask` makes around its reply channel, and waits for the reply.
    pub(super) async fn ask<R>(
        &self,
        ask: impl FnOnce(oneshot::Sender<R>) -> T,
    ) -> Result<R, StoreError> {
        let closing = || StoreError::Unavailable("the shared store is closing".into());
        let (reply, answer) = oneshot::channel();
        self.queue.send(ask(reply)).map_err(|_| closing())?;
        answer.await.map_err(|_| closing())
    }
}

/// The next group: the first request waited for, then every one already queued.
async fn next_group<T>(rx: &Mutex<mpsc::UnboundedReceiver<T>>, most: usize) -> Option<Vec<T>> {
    let mut rx = rx.lock().await;
    let mut group = vec![rx.recv().await?];
    while group.len() < most {
        match rx.try_recv() {
            Ok(t) => group.push(t),
            Err(_) => break,
        }
    }
    Some(group)
}

/// The error each request of a group that failed gets: the database's absence stays
/// what it is (a 503), anything else is the shared store's.
pub(super) fn for_each(e: &StoreError) -> StoreError {
    match e {
        StoreError::Unavailable(why) => StoreError::Unavailable(why.clone()),
        other => StoreError::Shared(other.to_string()),
    }
}
