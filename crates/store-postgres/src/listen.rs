//! Wake-ups for live tails, across workers.
//!
//! Each [`crate::PgStore`] keeps one dedicated connection that `LISTEN`s on the store's
//! channel. Every append (and every deletion of a stream by `end_session` or `prune`) runs
//! `pg_notify(channel, stream_id)` in its own transaction, so PostgreSQL delivers the
//! notification to every listening worker when, and only if, the change commits. The
//! listener turns each notification into a wake-up of the local tails of that stream.
//!
//! No wake-up is lost, only ever delayed:
//! - a tail subscribes (joins the local map) before it reads, so a commit after the
//!   subscription is followed by a notification that finds it;
//! - while the listener is disconnected notifications are lost, so after every
//!   (re)connect it wakes *every* local tail, which then re-reads;
//! - and every tail also wakes on a periodic tick (`poll_interval`), a last resort that
//!   bounds the delay if anything above misbehaves.

use std::time::Duration;

use durable_mcp_store::{StoreError, StoreResult, StreamId};
use futures::StreamExt;
use tokio::sync::{mpsc, oneshot};
use tokio_postgres::AsyncMessage;

use crate::error::{describe, from_pg, unavailable};
use crate::options::{PgOptions, quote_ident};

/// How often the listener checks that its connection still answers: a connection that
/// died silently (no RST) would otherwise go unnoticed until TCP keepalive gives up.
const HEALTH_CHECK: Duration = Duration::from_secs(15);
/// Longest pause between reconnection attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

pub(crate) use durable_mcp_store::wake::Watchers;

/// Wake the local tails of the stream named by a notification's payload.
fn wake_payload(watchers: &Watchers, payload: &str) {
    match payload.parse::<StreamId>() {
        Ok(stream) => watchers.wake(&stream),
        Err(_) => tracing::debug!(payload, "ignoring a notification that names no stream"),
    }
}

/// The running listener; dropping it stops the task and closes its connection.
pub(crate) struct Listener {
    _stop: oneshot::Sender<()>,
}

/// Start listening on `options.channel()`, feeding `watchers`. Returns once the first
/// `LISTEN` is in effect, so wake-ups from other workers are delivered from then on; if the
/// first connection fails, so does this.
pub(crate) async fn start(options: PgOptions, watchers: Watchers) -> StoreResult<Listener> {
    let (ready_tx, ready_rx) = oneshot::channel();
    let (stop_tx, stop_rx) = oneshot::channel();
    tokio::spawn(run(options, watchers, ready_tx, stop_rx));
    match ready_rx.await {
        Ok(Ok(())) => Ok(Listener { _stop: stop_tx }),
        Ok(Err(error)) => Err(error),
        Err(_) => Err(unavailable(
            "the postgres listener stopped before it was ready",
        )),
    }
}

async fn run(
    options: PgOptions,
    watchers: Watchers,
    ready: oneshot::Sender<StoreResult<()>>,
    mut stop: oneshot::Receiver<()>,
) {
    let mut ready = Some(ready);
    let mut backoff = Duration::from_millis(100);
    loop {
        let mut listened = false;
        let error = tokio::select! {
            _ = &mut stop => return,
            error = session(&options, &watchers, &mut ready, &mut listened) => error,
        };
        if let Some(ready) = ready.take() {
            // The first connection failed: `start` reports it and the task ends.
            let _ = ready.send(Err(error));
            return;
        }
        if listened {
            backoff = Duration::from_millis(100);
        }
        tracing::warn!(%error, retry_in = ?backoff, "postgres listener lost its connection; reconnecting");
        tokio::select! {
            _ = &mut stop => return,
            _ = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// Longest the first listener waits for its own probe notification.
const PROBE_WAIT: Duration = Duration::from_secs(2);

/// Send a notification from another connection and wait for it here: a pooler in
/// transaction mode (PgBouncer's `pool_mode=transaction`, Supabase's port 6543, Neon's
/// `-pooler` endpoint) hands the LISTEN's server connection to other clients between
/// transactions, so it never delivers one, and it would also lose each connection's
/// session settings (`search_path`) and prepared statements. Refuse it at open, naming the
/// cause and the fix, rather than run with tails that only the poll wakes.
async fn check_delivery(
    options: &PgOptions,
    notifications: &mut mpsc::UnboundedReceiver<String>,
    watchers: &Watchers,
) -> StoreResult<()> {
    let probe = format!("probe:{}", StreamId::random());
    let send = async {
        let sender = crate::pool::connect(options).await?;
        sender
            .execute("SELECT pg_notify($1, $2)", &[&options.channel(), &probe])
            .await
            .map_err(from_pg)
    };
    let bound = options.connect_timeout + options.op_timeout;
    tokio::time::timeout(bound, send)
        .await
        .map_err(|_| unavailable(format!("the LISTEN probe was not sent within {bound:?}")))??;
    let deadline = tokio::time::Instant::now() + PROBE_WAIT;
    loop {
        match tokio::time::timeout_at(deadline, notifications.recv()).await {
            Ok(Some(payload)) if payload == probe => return Ok(()),
            Ok(Some(payload)) => wake_payload(watchers, &payload),
            Ok(None) => return Err(unavailable("the listener connection closed")),
            Err(_) => {
                return Err(StoreError::Incompatible(format!(
                    "PostgreSQL at {} did not deliver a notification to this store's LISTEN connection within {PROBE_WAIT:?}: a connection pooler in transaction mode (PgBouncer pool_mode=transaction, Supabase's port 6543, Neon's -pooler host) breaks LISTEN and session settings. Connect to the database directly or to a session-mode pooler endpoint",
                    options.target()
                )));
            }
        }
    }
}

/// Aborts the connection's driver task when the session ends.
struct AbortOnDrop(tokio::task::JoinHandle<Result<(), tokio_postgres::Error>>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// One listening connection: connect, LISTEN, wake everyone, then forward notifications
/// until the connection fails; returns why it ended. Sets `listened` once LISTEN is in
/// effect.
async fn session(
    options: &PgOptions,
    watchers: &Watchers,
    ready: &mut Option<oneshot::Sender<StoreResult<()>>>,
    listened: &mut bool,
) -> StoreError {
    match listen(options, watchers, ready, listened).await {
        Ok(never) => match never {},
        Err(error) => error,
    }
}

async fn listen(
    options: &PgOptions,
    watchers: &Watchers,
    ready: &mut Option<oneshot::Sender<StoreResult<()>>>,
    listened: &mut bool,
) -> StoreResult<std::convert::Infallible> {
    let (client, mut connection) = crate::pool::connect_raw(options).await?;
    let (tx, mut notifications) = mpsc::unbounded_channel::<String>();
    // The connection is driven by `poll_message`, which yields the notifications.
    let mut driver = AbortOnDrop(tokio::spawn(async move {
        let mut messages = futures::stream::poll_fn(move |cx| connection.poll_message(cx));
        while let Some(message) = messages.next().await {
            match message? {
                AsyncMessage::Notification(n) => {
                    // The session ended and dropped the receiver: stop.
                    let Ok(()) = tx.send(n.payload().to_owned()) else {
                        break;
                    };
                }
                AsyncMessage::Notice(notice) => tracing::debug!(%notice, "postgres notice"),
                _ => {}
            }
        }
        Ok(())
    }));
    let check_timeout = options.op_timeout.min(HEALTH_CHECK);
    tokio::time::timeout(
        check_timeout,
        client.batch_execute(&format!("LISTEN {}", quote_ident(&options.channel()))),
    )
    .await
    .map_err(|_| unavailable("LISTEN was not answered in time"))?
    .map_err(from_pg)?;
    if ready.is_some() {
        check_delivery(options, &mut notifications, watchers).await?;
    }
    tracing::debug!(channel = options.channel(), "postgres listener ready");
    *listened = true;
    if let Some(ready) = ready.take() {
        let _ = ready.send(Ok(()));
    }
    // Notifications sent while no listener was connected are lost: re-read everything.
    watchers.wake_all();
    let mut health =
        tokio::time::interval_at(tokio::time::Instant::now() + HEALTH_CHECK, HEALTH_CHECK);
    loop {
        tokio::select! {
            payload = notifications.recv() => match payload {
                Some(payload) => wake_payload(watchers, &payload),
                None => break,
            },
            _ = health.tick() => {
                match tokio::time::timeout(check_timeout, client.simple_query("SELECT 1")).await {
                    Ok(Ok(_)) => {}
                    Ok(Err(error)) => return Err(from_pg(error)),
                    Err(_) => return Err(unavailable("the listener connection stopped answering")),
                }
            }
        }
    }
    // The driver ended: say why.
    match (&mut driver.0).await {
        Ok(Ok(())) => Err(unavailable("the listener connection closed")),
        Ok(Err(error)) => Err(unavailable(describe(&error))),
        Err(join) => Err(StoreError::Unavailable(Box::new(join))),
    }
}
