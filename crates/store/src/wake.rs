//! Per-stream wake-up channels for the tails in one process, shared by the backends: a
//! backend calls [`Watchers::wake`] when it learns of an append (its own, or another
//! worker's through its notification channel), [`Watchers::wake_all`] after its channel
//! was interrupted, and [`Watchers::forget`] when streams are deleted.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use foldhash::HashMap;
use tokio::sync::watch;

use crate::{StreamId, WakeUps};

type Map = HashMap<StreamId, watch::Sender<u64>>;

/// The wake-up channels of one store handle.
#[derive(Clone, Default)]
pub struct Watchers {
    inner: Arc<Mutex<Map>>,
}

impl std::fmt::Debug for Watchers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watchers")
            .field("streams", &self.len())
            .finish()
    }
}

struct Subscription {
    rx: watch::Receiver<u64>,
    stream: StreamId,
    watchers: Watchers,
}

impl Drop for Subscription {
    fn drop(&mut self) {
        // The last tail of a stream removes its channel, so the map holds only live tails.
        let mut map = self.watchers.lock();
        if let Some(tx) = map.get(&self.stream)
            && tx.receiver_count() <= 1
            && self.rx.same_channel(&tx.subscribe())
        {
            map.remove(&self.stream);
        }
    }
}

impl Watchers {
    fn lock(&self) -> MutexGuard<'_, Map> {
        // Every mutation is one insert, remove or send: a panic cannot leave it half-done.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Wake-ups for `stream`: after each later [`wake`](Self::wake) of it or
    /// [`wake_all`](Self::wake_all), and on every `tick` (the first one a tick from now), so
    /// that a lost notification only delays a tail. Ends when the stream is
    /// [`forget`](Self::forget)-ten.
    pub fn watch(&self, stream: &StreamId, tick: Duration) -> WakeUps {
        let rx = self
            .lock()
            .entry(stream.clone())
            .or_insert_with(|| watch::channel(0).0)
            .subscribe();
        let subscription = Subscription {
            rx,
            stream: stream.clone(),
            watchers: self.clone(),
        };
        let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + tick, tick);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        Box::pin(futures::stream::unfold(
            (subscription, ticker),
            |(mut sub, mut ticker)| async move {
                tokio::select! {
                    changed = sub.rx.changed() => changed.ok().map(|()| ((), (sub, ticker))),
                    _ = ticker.tick() => Some(((), (sub, ticker))),
                }
            },
        ))
    }

    /// Wake the tails of `stream`.
    pub fn wake(&self, stream: &StreamId) {
        if let Some(tx) = self.lock().get(stream) {
            tx.send_modify(|n| *n = n.wrapping_add(1));
        }
    }

    /// Wake every tail (after notifications may have been lost).
    pub fn wake_all(&self) {
        for tx in self.lock().values() {
            tx.send_modify(|n| *n = n.wrapping_add(1));
        }
    }

    /// End the tails of streams that no longer exist.
    pub fn forget<'a>(&self, gone: impl IntoIterator<Item = &'a StreamId>) {
        let mut map = self.lock();
        for stream in gone {
            // Dropping the sender ends the watchers' wake-up streams.
            map.remove(stream);
        }
    }

    /// How many streams have live tails.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no stream has a live tail.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use futures::StreamExt;

    use super::*;

    async fn woken(wake: &mut WakeUps) -> bool {
        matches!(
            tokio::time::timeout(Duration::from_secs(5), wake.next()).await,
            Ok(Some(()))
        )
    }

    #[tokio::test]
    async fn subscriptions_clean_up_after_themselves() {
        let watchers = Watchers::default();
        let stream = StreamId::random();
        let first = watchers.watch(&stream, Duration::from_secs(60));
        let mut second = watchers.watch(&stream, Duration::from_secs(60));
        assert_eq!(watchers.len(), 1);
        drop(first);
        assert_eq!(watchers.len(), 1, "one tail is left");
        watchers.wake(&stream);
        assert!(woken(&mut second).await);
        drop(second);
        assert!(watchers.is_empty());
        let mut ended = watchers.watch(&stream, Duration::from_secs(60));
        watchers.forget([&stream]);
        let after_forget = tokio::time::timeout(Duration::from_secs(5), ended.next()).await;
        assert!(
            matches!(after_forget, Ok(None)),
            "forget ends the wake-ups (a silent stream is not an end): {after_forget:?}"
        );
    }

    #[tokio::test]
    async fn ticks_wake_without_any_notification() {
        let watchers = Watchers::default();
        let mut wake = watchers.watch(&StreamId::random(), Duration::from_millis(100));
        let started = Instant::now();
        for _ in 0..2 {
            assert!(woken(&mut wake).await, "the fallback tick wakes");
        }
        assert!(
            started.elapsed() >= Duration::from_millis(200),
            "the first tick is not immediate"
        );
    }

    #[tokio::test]
    async fn wake_all_wakes_every_stream() {
        let watchers = Watchers::default();
        let mut a = watchers.watch(&StreamId::random(), Duration::from_secs(60));
        let mut b = watchers.watch(&StreamId::random(), Duration::from_secs(60));
        watchers.wake_all();
        assert!(woken(&mut a).await && woken(&mut b).await);
    }
}
