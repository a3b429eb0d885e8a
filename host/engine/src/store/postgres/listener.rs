//! Listeners, each a connection of its own that `LISTEN`s on one channel. The deadline
//! listener hears `deployd_deadlines`, where every transition that files a deadline
//! notifies at its commit (`nodes`): a sweeper sleeping towards a later deadline, or its
//! check interval, wakes for it; a notification that comes while the sweeper is busy is
//! kept until it next waits. The drivers' listener hears every engine's uploads and
//! unloads (`drivers`).

use std::time::Duration;

use futures_util::StreamExt;
use tokio::sync::mpsc;
use tokio_postgres::{AsyncMessage, NoTls};

use super::tls::Tls;
use super::{SharedStore, db_error};
use crate::clock::Timestamp;
use crate::store::StoreError;

/// Notifications on one channel, from a connection of their own: each one's payload.
pub struct Notifications {
    payloads: mpsc::UnboundedReceiver<String>,
    /// Kept for the connection's life: dropping the client ends it.
    _client: tokio_postgres::Client,
}

impl Notifications {
    /// The next notification's payload; `None` once the connection is gone.
    pub async fn next(&mut self) -> Option<String> {
        self.payloads.recv().await
    }
}

/// Notifications of deadlines filed by any engine.
pub struct DeadlineListener(Notifications);

impl DeadlineListener {
    /// The next deadline filed; `None` once the connection is gone.
    pub async fn next(&mut self) -> Option<Timestamp> {
        loop {
            if let Ok(micros) = self.0.next().await?.parse::<i64>() {
                return Some(Timestamp::from_micros(micros));
            }
        }
    }
}

impl SharedStore {
    /// Listens for deadlines filed by every engine's transitions.
    pub async fn listen_deadlines(&self) -> Result<DeadlineListener, StoreError> {
        Ok(DeadlineListener(self.listen("deployd_deadlines").await?))
    }

    /// Listens for driver uploads and unloads on every engine: each notification is the
    /// driver's name (see `drivers`).
    pub async fn listen_drivers(&self) -> Result<Notifications, StoreError> {
        self.listen(super::drivers::CHANNEL).await
    }

    /// `LISTEN`s on `channel` on a connection of its own.
    async fn listen(&self, channel: &str) -> Result<Notifications, StoreError> {
        let (tx, payloads) = mpsc::unbounded_channel();
        let client = match &self.tls {
            Tls::Plain => {
                let (client, connection) = self.config.connect(NoTls).await.map_err(db_error)?;
                tokio::spawn(forward(connection, tx));
                client
            }
            Tls::Verified(connector) => {
                let (client, connection) = self
                    .config
                    .connect(connector.clone())
                    .await
                    .map_err(db_error)?;
                tokio::spawn(forward(connection, tx));
                client
            }
        };
        client
            .batch_execute(&format!("LISTEN {channel}"))
            .await
            .map_err(db_error)?;
        Ok(Notifications {
            payloads,
            _client: client,
        })
    }

    /// The earliest due entry, and how long until it on the database's clock (zero if
    /// it is due now); `None` when no node waits with a deadline.
    pub async fn next_due(&self) -> Result<Option<(Timestamp, Duration)>, StoreError> {
        let client = self.client().await?;
        let row = client
            .query_one(
                "SELECT min(due), extract(epoch FROM min(due) - now())::float8
                 FROM nodes WHERE due IS NOT NULL",
                &[],
            )
            .await
            .map_err(db_error)?;
        let due = row.get::<_, Option<chrono::DateTime<chrono::Utc>>>(0);
        let seconds = row.get::<_, Option<f64>>(1);
        Ok(due.zip(seconds).map(|(due, seconds)| {
            (
                super::rows::stamp(due),
                Duration::from_secs_f64(seconds.max(0.0)),
            )
        }))
    }
}

/// Passes the payloads notified on `connection` to the listener until either ends.
async fn forward<S, T>(
    mut connection: tokio_postgres::Connection<S, T>,
    tx: mpsc::UnboundedSender<String>,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let mut messages = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
    while let Some(Ok(message)) = messages.next().await {
        if let AsyncMessage::Notification(n) = message
            && tx.send(n.payload().to_owned()).is_err()
        {
            return;
        }
    }
}
