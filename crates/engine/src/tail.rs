//! Live tails of a stream's log: replay what is committed, then follow new commits, from
//! whichever worker they come.
//!
//! # Write-through
//! Events this worker commits reach its own tails in memory ([`crate::hub::Hub`]): the door
//! out ([`crate::events::Events`]) hands each tail of a stream the events the store
//! returned for it, once the commit returned. A tail reads the store only to resume (a
//! position before what it was handed), to fill a gap (the first event it is handed does
//! not follow its position: it lagged, or another worker wrote in between), or once no
//! writer of this worker holds the stream any more (then another worker may write to it:
//! the store's wake-ups and reads take over).
//!
//! # Durability
//! In plain words: a tail never yields an event that is not committed (D1), and never
//! skips one (D3). Stated more precisely: an event reaches the hub only after the
//! [`durable_mcp_store::Store::commit`] that wrote it returned `Ok`, with the id the store
//! gave it; a tail yields sequences `after + 1, after + 2, ...` with no gap, taking what
//! the hub does not hold from the store.

use std::collections::VecDeque;
use std::sync::Arc;

use durable_mcp_store::{Store, StoreError, StoredEvent, StreamId, WakeUps};
use futures::{Stream, StreamExt};
use tokio::sync::watch;

pub use crate::hub::Follow;
use crate::hub::{LocalState, Next, local_at};

/// How many events one read fetches.
const BATCH: usize = 256;

/// Events of `stream` after sequence `after`, in order, ending when the stream is finished
/// (its final event delivered) or gone, read from the store. Every item was committed
/// before it is yielded (D1).
pub fn tail(
    store: Arc<dyn Store>,
    stream: StreamId,
    after: u64,
) -> impl Stream<Item = Result<StoredEvent, StoreError>> + Send + 'static {
    follow(store, stream, after, None)
}

/// Where a tail takes its next events from.
enum Source {
    /// The local hub, while a writer of this worker holds the stream.
    Local(Follow, watch::Receiver<LocalState>),
    /// The store: subscribe to its wake-ups first, then read.
    StoreStart,
    /// The store, subscribed.
    Store(WakeUps),
    /// Nothing follows.
    Done,
}

/// How a tail registered with a local hub starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Start {
    /// Registered before anything after its position was committed: the hub has it all.
    Registered,
    /// Registered late (a resume, an attach): what was committed before is in the store
    /// only, so the tail reads it once before it follows the hub.
    CatchUp,
}

/// The tail of `stream` after `after`: from the local hub while `follow` holds a writer's
/// events, from the store otherwise.
pub(crate) fn follow(
    store: Arc<dyn Store>,
    stream: StreamId,
    after: u64,
    follow: Option<(Follow, Start)>,
) -> impl Stream<Item = Result<StoredEvent, StoreError>> + Send + 'static {
    struct Cursor {
        store: Arc<dyn Store>,
        stream: StreamId,
        after: u64,
        buffered: VecDeque<StoredEvent>,
        source: Source,
        catch_up: bool,
    }
    let (source, catch_up) = match follow {
        Some((follow, start)) => {
            let rx = follow.subscribe();
            (Source::Local(follow, rx), start == Start::CatchUp)
        }
        None => (Source::StoreStart, false),
    };
    let cursor = Cursor {
        store,
        stream,
        after,
        buffered: VecDeque::new(),
        source,
        catch_up,
    };
    futures::stream::unfold(cursor, |mut c| async move {
        loop {
            if let Some(event) = c.buffered.pop_front() {
                if event.id.seq <= c.after {
                    continue;
                }
                c.after = event.id.seq;
                return Some((Ok(event), c));
            }
            match std::mem::replace(&mut c.source, Source::Done) {
                Source::Done => return None,
                Source::Local(follow, mut rx) => {
                    let catching_up = std::mem::take(&mut c.catch_up);
                    let next = if catching_up {
                        Next::Gap
                    } else {
                        local_at(&rx.borrow_and_update(), c.after)
                    };
                    match next {
                        Next::Events(events, finished) => {
                            c.buffered.extend(events);
                            c.source = if finished {
                                Source::Done
                            } else {
                                Source::Local(follow, rx)
                            };
                        }
                        Next::Gap => {
                            // Fill the gap from the store, then go on from the hub.
                            match c.store.read_after(&c.stream, c.after, BATCH).await {
                                Ok(read) if read.finished => c.buffered.extend(read.events),
                                // A gap the store cannot fill either: the store's own tail decides.
                                Ok(read) if read.events.is_empty() && !catching_up => {
                                    c.source = Source::StoreStart
                                }
                                Ok(read) => {
                                    c.buffered.extend(read.events);
                                    c.source = Source::Local(follow, rx);
                                }
                                Err(e) => return Some((Err(e), c)),
                            }
                        }
                        Next::Finished => {}
                        Next::Unheld => c.source = Source::StoreStart,
                        Next::Wait => {
                            if rx.changed().await.is_err() {
                                c.source = Source::StoreStart;
                            } else {
                                c.source = Source::Local(follow, rx);
                            }
                        }
                    }
                }
                Source::StoreStart => match c.store.watch(&c.stream).await {
                    Ok(wake) => c.source = Source::Store(wake),
                    Err(e) => return Some((Err(e), c)),
                },
                Source::Store(mut wake) => loop {
                    match c.store.read_after(&c.stream, c.after, BATCH).await {
                        Ok(read) => {
                            let (finished, empty) = (read.finished, read.events.is_empty());
                            c.buffered.extend(read.events);
                            if finished {
                                break;
                            }
                            if !empty {
                                c.source = Source::Store(wake);
                                break;
                            }
                        }
                        Err(e) => return Some((Err(e), c)),
                    }
                    if wake.next().await.is_none() {
                        // The watch ended (stream gone): one last read decides.
                        match c.store.read_after(&c.stream, c.after, BATCH).await {
                            Ok(read) => c.buffered.extend(read.events),
                            Err(StoreError::NotFound { .. }) => {}
                            Err(e) => return Some((Err(e), c)),
                        }
                        break;
                    }
                },
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use durable_mcp_store::testing::{CountingStore, Op};
    use durable_mcp_store::{Principal, StreamOwner, WriteBatch};
    use durable_mcp_store_memory::MemoryStore;

    use super::*;
    use crate::hub::{Hub, MAX_RECENT_EVENTS};

    fn owner() -> StreamOwner {
        StreamOwner {
            principal: Principal::anonymous(),
            session: None,
        }
    }

    /// Commit `batch` through the hub, as the engine's commit path does.
    async fn commit(hub: &Hub, store: &dyn Store, batch: WriteBatch) {
        let captured = hub.capture(&batch);
        let outcome = store.commit(batch).await.unwrap();
        captured.published(&outcome);
    }

    async fn next(
        events: &mut (impl Stream<Item = Result<StoredEvent, StoreError>> + Unpin),
    ) -> Option<StoredEvent> {
        tokio::time::timeout(Duration::from_secs(5), events.next())
            .await
            .expect("an event in time")
            .map(Result::unwrap)
    }

    #[tokio::test]
    async fn a_written_stream_is_followed_from_memory_to_its_close() {
        let counting = Arc::new(CountingStore::counting(Arc::new(MemoryStore::new())));
        let store: Arc<dyn Store> = counting.clone();
        let hub = Arc::new(Hub::default());
        let stream = StreamId::random();
        let tail_reg = hub.follow(&stream);
        let writer = hub.writer(&stream);
        let mut events = Box::pin(follow(
            store.clone(),
            stream.clone(),
            0,
            Some((tail_reg, Start::Registered)),
        ));
        commit(
            &hub,
            &*store,
            WriteBatch::new()
                .create_stream(stream.clone(), owner())
                .append(stream.clone(), "a"),
        )
        .await;
        assert_eq!(next(&mut events).await.unwrap().data, "a");
        commit(
            &hub,
            &*store,
            WriteBatch::new()
                .append(stream.clone(), "b")
                .close(stream.clone()),
        )
        .await;
        assert_eq!(next(&mut events).await.unwrap().data, "b");
        assert!(next(&mut events).await.is_none(), "the close ends the tail");
        drop(writer);
        assert_eq!(counting.hook().count(Op::ReadAfter), 0);
        assert_eq!(counting.hook().count(Op::Watch), 0);
        assert!(
            hub.streams() == 0,
            "nothing is kept once writer and tail are gone"
        );
    }

    #[tokio::test]
    async fn a_gap_is_filled_from_the_store() {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        let hub = Arc::new(Hub::default());
        let stream = StreamId::random();
        let _writer = hub.writer(&stream);
        // Committed before any tail followed: not in the hub.
        commit(
            &hub,
            &*store,
            WriteBatch::new()
                .create_stream(stream.clone(), owner())
                .append(stream.clone(), "1"),
        )
        .await;
        let mut events = Box::pin(follow(
            store.clone(),
            stream.clone(),
            0,
            hub.follow_if_written(&stream).map(|f| (f, Start::CatchUp)),
        ));
        commit(&hub, &*store, WriteBatch::new().append(stream.clone(), "2")).await;
        assert_eq!(
            next(&mut events).await.unwrap().data,
            "1",
            "read from the store"
        );
        assert_eq!(next(&mut events).await.unwrap().data, "2");
        // A tail far behind: the hub evicted what it did not take.
        let mut late = Box::pin(follow(
            store.clone(),
            stream.clone(),
            2,
            hub.follow_if_written(&stream).map(|f| (f, Start::CatchUp)),
        ));
        for i in 0..(MAX_RECENT_EVENTS + 10) {
            commit(
                &hub,
                &*store,
                WriteBatch::new().append(stream.clone(), i.to_string()),
            )
            .await;
        }
        for i in 0..(MAX_RECENT_EVENTS + 10) {
            let event = next(&mut late).await.unwrap();
            assert_eq!((event.id.seq, event.data), (i as u64 + 3, i.to_string()));
        }
    }

    #[tokio::test]
    async fn without_a_local_writer_the_store_takes_over() {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        let hub = Arc::new(Hub::default());
        let stream = StreamId::random();
        store.create_stream(&stream, &owner()).await.unwrap();
        let writer = hub.writer(&stream);
        let mut events = Box::pin(follow(
            store.clone(),
            stream.clone(),
            0,
            hub.follow_if_written(&stream).map(|f| (f, Start::CatchUp)),
        ));
        drop(writer);
        // Another worker's append (not through this hub): the store's wake-up brings it.
        store
            .append(&stream, "elsewhere".into(), true)
            .await
            .unwrap();
        assert_eq!(next(&mut events).await.unwrap().data, "elsewhere");
        assert!(next(&mut events).await.is_none());
        assert!(
            hub.follow_if_written(&stream).is_none(),
            "no writer, no local follow"
        );
    }

    /// A tail waiting on the hub is woken when the last local writer lets go (and by
    /// nothing else there): the store takes over.
    #[tokio::test]
    async fn a_waiting_tail_is_woken_when_the_last_local_writer_lets_go() {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        let hub = Arc::new(Hub::default());
        let stream = StreamId::random();
        store.create_stream(&stream, &owner()).await.unwrap();
        let (first, second) = (hub.writer(&stream), hub.writer(&stream));
        let mut events = Box::pin(follow(
            store.clone(),
            stream.clone(),
            0,
            hub.follow_if_written(&stream).map(|f| (f, Start::CatchUp)),
        ));
        let quiet = Duration::from_millis(50);
        assert!(
            tokio::time::timeout(quiet, events.next()).await.is_err(),
            "nothing committed yet"
        );
        drop(first);
        assert!(
            tokio::time::timeout(quiet, events.next()).await.is_err(),
            "a writer still holds the stream"
        );
        drop(second);
        store
            .append(&stream, "elsewhere".into(), true)
            .await
            .unwrap();
        assert_eq!(next(&mut events).await.unwrap().data, "elsewhere");
        assert!(next(&mut events).await.is_none());
    }
}
