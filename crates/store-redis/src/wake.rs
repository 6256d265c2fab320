//! Wake-ups across workers.
//!
//! Every append script `PUBLISH`es `a:<stream>` on the prefix's channel, and every deletion
//! `g:<stream>,<stream>...`. Each [`RedisStore`](crate::RedisStore) keeps one dedicated
//! pub/sub connection subscribed to that channel (the listener task below), dispatching to a
//! local map of per-stream `watch` channels: `a:` wakes the stream's tails, `g:` drops its
//! sender so they end. Appends made through this handle also wake local tails directly.
//!
//! Pub/sub is at-most-once: a message published while the listener is reconnecting is lost.
//! So every tail also wakes on a periodic tick (`wake_tick`), and every (re)subscription
//! wakes all local tails once; a lost wake-up only delays a tail, it never stalls it.

use std::time::Duration;

use durable_mcp_store::{StoreError, StreamId};
use futures::StreamExt;
use tokio::sync::oneshot;

use crate::error::from_redis;

/// How often the listener checks its connection with a `PING`.
const PING_EVERY: Duration = Duration::from_secs(5);
/// Longest pause between reconnection attempts of the listener.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

pub(crate) use durable_mcp_store::wake::Watchers;

/// Apply one pub/sub message: `a:<stream>` wakes a stream's tails, `g:<id>,<id>...` ends the
/// tails of deleted streams.
pub(crate) fn dispatch(watchers: &Watchers, payload: &[u8]) {
    let Ok(text) = std::str::from_utf8(payload) else {
        return;
    };
    if let Some(id) = text.strip_prefix("a:") {
        if let Ok(stream) = id.parse::<StreamId>() {
            watchers.wake(&stream);
        }
    } else if let Some(ids) = text.strip_prefix("g:") {
        let gone: Vec<StreamId> = ids.split(',').filter_map(|id| id.parse().ok()).collect();
        watchers.forget(&gone);
    } else {
        tracing::debug!(message = text, "ignoring unknown wake-up message");
    }
}

pub(crate) struct Listener(tokio::task::JoinHandle<()>);

impl Drop for Listener {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Bounds on the listener's connection.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timeouts {
    /// Connecting and subscribing.
    pub(crate) connect: Duration,
    /// The reply to a health-check `PING`.
    pub(crate) response: Duration,
}

/// Start the listener on the first of `clients` that subscribes (a cluster's seed nodes:
/// `PUBLISH` reaches every node, so any one serves; a lost subscription moves on to the
/// next); returns once its first subscription is confirmed, or every client failed.
pub(crate) async fn listen(
    clients: Vec<redis::Client>,
    channel: String,
    watchers: Watchers,
    timeouts: Timeouts,
) -> Result<Listener, StoreError> {
    let (ready_tx, ready_rx) = oneshot::channel();
    let listener = Listener(tokio::spawn(run(
        clients, channel, watchers, timeouts, ready_tx,
    )));
    match ready_rx.await {
        Ok(Ok(())) => Ok(listener),
        Ok(Err(error)) => Err(error),
        Err(_) => Err(StoreError::Unavailable(
            "the redis wake-up listener stopped".into(),
        )),
    }
}

async fn subscribe(
    client: &redis::Client,
    channel: &str,
    timeout: Duration,
) -> Result<redis::aio::PubSub, StoreError> {
    let connect = async {
        let mut pubsub = client.get_async_pubsub().await?;
        // The marker channel says "a worker of this release" to the layout check
        // (`layout::marker_channel`); one SUBSCRIBE for both, one round trip.
        pubsub
            .subscribe(&[channel.to_owned(), crate::layout::marker_channel(channel)])
            .await?;
        Ok::<_, redis::RedisError>(pubsub)
    };
    match tokio::time::timeout(timeout, connect).await {
        Ok(result) => result.map_err(from_redis),
        Err(_) => Err(StoreError::Unavailable(
            format!("subscribing to {channel} timed out after {timeout:?}").into(),
        )),
    }
}

async fn run(
    clients: Vec<redis::Client>,
    channel: String,
    watchers: Watchers,
    timeouts: Timeouts,
    ready: oneshot::Sender<Result<(), StoreError>>,
) {
    let mut ready = Some(ready);
    let mut backoff = Duration::from_millis(100);
    // Which client subscribes next, and how many failed in a row.
    let (mut next, mut failed) = (0, 0);
    loop {
        let Some(client) = clients.get(next % clients.len().max(1)) else {
            if let Some(ready) = ready.take() {
                let _ = ready.send(Err(StoreError::Incompatible(
                    "no redis node to subscribe to".into(),
                )));
            }
            return;
        };
        next += 1;
        match subscribe(client, &channel, timeouts.connect).await {
            Ok(pubsub) => {
                match ready.take() {
                    Some(ready) => {
                        let _ = ready.send(Ok(()));
                    }
                    None => tracing::info!(%channel, "redis wake-up subscription restored"),
                }
                backoff = Duration::from_millis(100);
                failed = 0;
                // Anything published while we were not subscribed is lost: re-read everywhere.
                watchers.wake_all();
                let reason = receive(pubsub, &watchers, timeouts.response).await;
                tracing::warn!(%channel, %reason, "redis wake-up subscription lost; reconnecting");
                watchers.wake_all();
            }
            Err(error) => {
                failed += 1;
                if failed < clients.len() {
                    // Another node may answer: try it at once.
                    continue;
                }
                failed = 0;
                if let Some(ready) = ready.take() {
                    let _ = ready.send(Err(error));
                    return;
                }
                tracing::warn!(%channel, %error, ?backoff, "redis wake-up subscription failed; retrying");
            }
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// Dispatch messages until the connection fails; returns why.
async fn receive(pubsub: redis::aio::PubSub, watchers: &Watchers, timeout: Duration) -> String {
    let (mut sink, mut messages) = pubsub.split();
    let mut ping = tokio::time::interval_at(tokio::time::Instant::now() + PING_EVERY, PING_EVERY);
    ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            message = messages.next() => match message {
                Some(message) => dispatch(watchers, message.get_payload_bytes()),
                None => return "connection closed".into(),
            },
            _ = ping.tick() => {
                // A silent peer (a partition, a paused server) never closes the socket.
                match tokio::time::timeout(timeout, sink.ping::<redis::Value>()).await {
                    Ok(Ok(_)) => {}
                    Ok(Err(error)) => return error.to_string(),
                    Err(_) => return format!("no PING reply within {timeout:?}"),
                }
            }
        }
    }
}
