//! `LISTEN` on the store's notification channels ([`crate::EVENTS_CHANNEL`],
//! [`crate::CONTROL_CHANNEL`], [`crate::QUEUE_CHANNEL`]) over one dedicated connection per
//! process, fanned out to any number of receivers.
//!
//! Notifications only say "look again": every receiver re-reads the rows they point at. A
//! notification sent while the connection was down is lost, so after every (re)connection
//! the listener sends [`Notice::Listening`], and receivers re-read everything they wait on
//! (and poll as a fallback anyway).
//!
//! Source: issue 15 (live delivery through LISTEN/NOTIFY, replay from the table).

use std::str::FromStr;
use std::time::Duration;

use awf_domain::AwfError;
use awf_domain::ErrorCode;
use tokio::sync::broadcast;
use tokio_postgres::AsyncMessage;

use crate::PgStore;
use crate::redacted;

/// What the listener tells its receivers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Notice {
    /// A `NOTIFY` on one of the channels.
    Notify {
        /// The channel (`awf_events`, `awf_control`, `awf_queue`).
        channel: String,
        /// Its payload (an id, or the control JSON).
        payload: String,
    },
    /// The listener (re)connected and listens: what was sent meanwhile may be lost; re-read.
    Listening,
}

/// The process's listener: cheap to clone; the connection lives on the store's runtime and
/// reconnects (every 500 ms while the server is unreachable) for as long as the process runs.
#[derive(Clone, Debug)]
pub struct Listener {
    tx: broadcast::Sender<Notice>,
}

/// How long to wait before connecting again after the connection was lost or refused.
const RECONNECT_DELAY: Duration = Duration::from_millis(500);

impl Listener {
    /// Starts listening on the three channels of the database at `url` (the URL `store` was
    /// opened with), on `store`'s runtime. Returns at once; the first connection is made in
    /// the background.
    ///
    /// # Errors
    /// `USER.INPUT.VALIDATION_FAILED` for a URL that does not parse.
    pub fn start(store: &PgStore, url: &str) -> Result<Self, AwfError> {
        let config = tokio_postgres::Config::from_str(url.trim()).map_err(|e| {
            AwfError::new(
                ErrorCode::UserInputValidationFailed,
                format!("--store {:?} is not a PostgreSQL URL: {e}", redacted(url)),
            )
            .with_hint("use postgresql://USER[:PASSWORD]@HOST[:PORT]/DATABASE")
        })?;
        let (tx, _) = broadcast::channel(4096);
        let sender = tx.clone();
        store.runtime().spawn(listen_forever(config, sender));
        Ok(Self { tx })
    }

    /// A new receiver of every notice from now on. A receiver that falls more than 4096
    /// notices behind gets `Lagged` from tokio: take that as "re-read".
    pub fn subscribe(&self) -> broadcast::Receiver<Notice> {
        self.tx.subscribe()
    }
}

async fn listen_forever(config: tokio_postgres::Config, tx: broadcast::Sender<Notice>) {
    loop {
        match config.connect(tokio_postgres::NoTls).await {
            Ok((client, mut conn)) => {
                let forward = tx.clone();
                let driver = tokio::spawn(async move {
                    loop {
                        match std::future::poll_fn(|cx| conn.poll_message(cx)).await {
                            Some(Ok(AsyncMessage::Notification(n))) => {
                                let _ = forward.send(Notice::Notify {
                                    channel: n.channel().to_owned(),
                                    payload: n.payload().to_owned(),
                                });
                            }
                            Some(Ok(_)) => {}
                            Some(Err(_)) | None => break,
                        }
                    }
                });
                let sql = format!(
                    "LISTEN {}; LISTEN {}; LISTEN {}",
                    crate::EVENTS_CHANNEL,
                    crate::CONTROL_CHANNEL,
                    crate::QUEUE_CHANNEL
                );
                match client.batch_execute(&sql).await {
                    Ok(()) => {
                        let _ = tx.send(Notice::Listening);
                    }
                    Err(e) => tracing::debug!("LISTEN failed: {e}"),
                }
                let _ = driver.await;
                drop(client);
                tracing::debug!("the listener's connection ended; reconnecting");
            }
            Err(e) => tracing::debug!("the listener cannot connect: {e}"),
        }
        tokio::time::sleep(RECONNECT_DELAY).await;
    }
}
