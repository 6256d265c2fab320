//! Live tails of a stream's log: replay what is committed, then follow new commits, from
//! whichever worker they come.
//!
//! # Write-through
//! Events this worker commits reach its own tails in memory ([`Hub`]): the engine's commit
//! path ([`crate::Engine::commit_batch`]) hands each tail of a stream the events the store
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
use std::sync::{Arc, Mutex, MutexGuard};

use durable_mcp_store::{BatchOp, BatchOutcome, Store, StoreError, StoredEvent, StreamId, WakeUps};
use foldhash::HashMap;
use futures::{Stream, StreamExt};
use tokio::sync::watch;

/// How many events one read fetches.
const BATCH: usize = 256;

/// The most events a stream's local hub keeps for its tails: a tail further behind reads
/// the store instead.
const MAX_RECENT_EVENTS: usize = 64;

/// The most bytes of event data a stream's local hub keeps.
const MAX_RECENT_BYTES: usize = 1 << 20;

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

/// The streams of this worker that have a local writer or tail, with what was committed
/// to them lately. Streams with neither have no entry and cost nothing.
#[derive(Default)]
pub(crate) struct Hub {
    streams: Mutex<HashMap<StreamId, Arc<Local>>>,
}

/// One stream's local hub.
struct Local {
    state: watch::Sender<LocalState>,
}

impl Local {
    /// One more writer or tail: that changes nothing a waiting tail decides on (see
    /// `local_at`), so nobody is woken (a wake-up of a watch costs its eight waiter lists a
    /// look).
    fn join(&self, change: impl FnOnce(&mut LocalState)) {
        self.state.send_if_modified(|state| {
            change(state);
            false
        });
    }
}

#[derive(Default)]
struct LocalState {
    /// Writers of this worker holding the stream ([`Writer`]).
    writers: usize,
    /// Tails following it ([`Follow`]).
    tails: usize,
    /// Events committed here lately, in sequence order, bounded.
    recent: VecDeque<StoredEvent>,
    /// The bytes of data in `recent`.
    bytes: usize,
    /// The stream was closed by a commit of this worker after `recent`'s last event
    /// (`last`): nothing follows it.
    closed_after: Option<u64>,
    /// A commit of this worker closed the stream at a position the hub does not know.
    closed_unknown: bool,
}

impl Hub {
    fn lock(&self) -> MutexGuard<'_, HashMap<StreamId, Arc<Local>>> {
        // Every mutation is one insert or remove: a panic cannot leave it half-done.
        self.streams.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn register(&self, stream: &StreamId, change: impl FnOnce(&mut LocalState)) -> Arc<Local> {
        // The count changes under the map's lock, as in `unregister`: a last unregister
        // cannot remove the entry between this one's lookup and its count.
        let mut map = self.lock();
        let local = map
            .entry(stream.clone())
            .or_insert_with(|| {
                Arc::new(Local {
                    state: watch::channel(LocalState::default()).0,
                })
            })
            .clone();
        local.join(change);
        drop(map);
        local
    }

    fn unregister(
        &self,
        stream: &StreamId,
        local: &Arc<Local>,
        change: impl FnOnce(&mut LocalState),
    ) {
        let mut map = self.lock();
        // A tail waits while a writer of this worker holds the stream (see `local_at`): it is
        // woken when the last writer lets go, and by nothing else here.
        local.state.send_if_modified(|state| {
            let held = state.writers > 0;
            change(state);
            held && state.writers == 0
        });
        let unused = {
            let state = local.state.borrow();
            state.writers == 0 && state.tails == 0
        };
        if unused
            && map
                .get(stream)
                .is_some_and(|entry| Arc::ptr_eq(entry, local))
        {
            map.remove(stream);
        }
    }

    /// This worker writes to `stream` until the returned guard drops: meanwhile no other
    /// worker does (a request's stream, written by its run here), so its local tails need
    /// no store wake-ups.
    pub(crate) fn writer(self: &Arc<Self>, stream: &StreamId) -> Writer {
        let local = self.register(stream, |s| s.writers += 1);
        Writer {
            hub: self.clone(),
            stream: stream.clone(),
            local,
        }
    }

    /// Follow `stream` from now on: what this worker commits to it from now on is kept for
    /// the returned handle until its tail took it (within the bounds).
    pub(crate) fn follow(self: &Arc<Self>, stream: &StreamId) -> Follow {
        let local = self.register(stream, |s| s.tails += 1);
        Follow {
            hub: self.clone(),
            stream: stream.clone(),
            local,
        }
    }

    /// [`Hub::follow`], if a writer of this worker holds `stream` now.
    pub(crate) fn follow_if_written(self: &Arc<Self>, stream: &StreamId) -> Option<Follow> {
        let local = {
            let map = self.lock();
            let local = map.get(stream)?.clone();
            let mut written = false;
            local.state.send_if_modified(|s| {
                written = s.writers > 0;
                if written {
                    s.tails += 1;
                }
                false
            });
            if !written {
                return None;
            }
            local
        };
        Some(Follow {
            hub: self.clone(),
            stream: stream.clone(),
            local,
        })
    }

    /// The local hub of `stream` if a tail of this worker follows it: the commit path keeps
    /// what it writes to it.
    fn followed(&self, stream: &StreamId) -> Option<Arc<Local>> {
        let map = self.lock();
        let local = map.get(stream)?;
        (local.state.borrow().tails > 0).then(|| local.clone())
    }

    /// What a commit of `batch` must hand to local tails once it is committed: the data
    /// of its appends to followed streams (copied before the batch goes to the store).
    pub(crate) fn capture(&self, batch: &durable_mcp_store::WriteBatch) -> Captured {
        let mut captured = Captured::default();
        let mut last: Option<(&StreamId, Option<Arc<Local>>)> = None;
        for (index, op) in batch.ops().iter().enumerate() {
            let Some(stream) = op.woken_stream() else {
                continue;
            };
            let local = match &last {
                Some((seen, local)) if *seen == stream => local.clone(),
                _ => {
                    let local = self.followed(stream);
                    last = Some((stream, local.clone()));
                    local
                }
            };
            let Some(local) = local else { continue };
            let item = match op {
                BatchOp::Append { data, .. } => Capture::Event(index, data.clone()),
                _ => Capture::Close,
            };
            match captured
                .streams
                .iter_mut()
                .find(|(l, _)| Arc::ptr_eq(l, &local))
            {
                Some((_, items)) => items.push(item),
                None => captured.streams.push((local, vec![item])),
            }
        }
        captured
    }
}

/// What one commit hands to the local tails of the streams it writes ([`Hub::capture`]).
#[derive(Default)]
pub(crate) struct Captured {
    streams: Vec<(Arc<Local>, Vec<Capture>)>,
}

enum Capture {
    /// An append, at its op index, with its data.
    Event(usize, String),
    /// A close.
    Close,
}

impl Captured {
    /// Whether nothing is to be handed on (no followed stream in the batch).
    pub(crate) fn is_empty(&self) -> bool {
        self.streams.is_empty()
    }

    /// A captured single append (not a batch): its event id is `id`.
    pub(crate) fn published_one(self, id: &durable_mcp_store::EventId) {
        let mut outcome = BatchOutcome::default();
        outcome
            .ops
            .push(durable_mcp_store::OpOutcome::Appended(id.clone()));
        self.published(&outcome);
    }

    /// The batch was committed with `outcome`: hand its events to the tails (D1: only now).
    pub(crate) fn published(self, outcome: &BatchOutcome) {
        for (local, items) in self.streams {
            local.state.send_modify(|state| {
                let mut last = state.recent.back().map(|e| e.id.seq);
                for item in items {
                    match item {
                        Capture::Event(index, data) => {
                            let Some(id) = outcome.event(index) else {
                                continue;
                            };
                            last = Some(id.seq);
                            state.bytes += data.len();
                            state.recent.push_back(StoredEvent {
                                id: id.clone(),
                                data,
                            });
                        }
                        Capture::Close => match last {
                            Some(seq) => state.closed_after = Some(seq),
                            None => state.closed_unknown = true,
                        },
                    }
                }
                while state.recent.len() > MAX_RECENT_EVENTS
                    || (state.bytes > MAX_RECENT_BYTES && state.recent.len() > 1)
                {
                    if let Some(evicted) = state.recent.pop_front() {
                        state.bytes -= evicted.data.len();
                    }
                }
            });
        }
    }
}

impl Captured {
    /// Capture the data of a single append to `stream` (with its close, if it closes it).
    pub(crate) fn one(hub: &Hub, stream: &StreamId, data: &str, close: bool) -> Self {
        let Some(local) = hub.followed(stream) else {
            return Self::default();
        };
        let mut items = vec![Capture::Event(0, data.to_owned())];
        if close {
            items.push(Capture::Close);
        }
        Self {
            streams: vec![(local, items)],
        }
    }
}

/// A writer of this worker holds a stream ([`Hub::writer`]) until this drops.
pub(crate) struct Writer {
    hub: Arc<Hub>,
    stream: StreamId,
    local: Arc<Local>,
}

impl Drop for Writer {
    fn drop(&mut self) {
        self.hub
            .unregister(&self.stream, &self.local, |s| s.writers -= 1);
    }
}

/// A tail's registration with a stream's local hub ([`Hub::follow`]): what this worker
/// commits to the stream is kept for it. Its tail is [`crate::Engine::follow`].
pub struct Follow {
    hub: Arc<Hub>,
    stream: StreamId,
    local: Arc<Local>,
}

impl std::fmt::Debug for Follow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Follow")
            .field("stream", &self.stream)
            .finish_non_exhaustive()
    }
}

impl Clone for Follow {
    fn clone(&self) -> Self {
        self.local.join(|s| s.tails += 1);
        Self {
            hub: self.hub.clone(),
            stream: self.stream.clone(),
            local: self.local.clone(),
        }
    }
}

impl Drop for Follow {
    fn drop(&mut self) {
        self.hub
            .unregister(&self.stream, &self.local, |s| s.tails -= 1);
    }
}

impl Follow {
    /// The stream followed.
    pub fn stream(&self) -> &StreamId {
        &self.stream
    }
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

/// What the local hub holds for a tail at `after`.
enum Next {
    /// Events after `after`, from `after + 1` on; `true` if the last one ends the stream.
    Events(Vec<StoredEvent>, bool),
    /// The next event is not in the hub (evicted, or another worker's): read the store.
    Gap,
    /// Nothing yet; a writer holds the stream.
    Wait,
    /// Everything up to the close was taken.
    Finished,
    /// No writer holds the stream any more (or its close position is unknown): the store
    /// takes over.
    Unheld,
}

fn local_at(state: &LocalState, after: u64) -> Next {
    let start = state.recent.partition_point(|e| e.id.seq <= after);
    if let Some(first) = state.recent.get(start) {
        if first.id.seq != after + 1 {
            return Next::Gap;
        }
        let events: Vec<StoredEvent> = state.recent.iter().skip(start).cloned().collect();
        let last = events.last().map_or(after, |e| e.id.seq);
        return Next::Events(events, state.closed_after == Some(last));
    }
    if state.closed_after == Some(after) {
        return Next::Finished;
    }
    if state.closed_after.is_some_and(|closed| closed > after) {
        // Closed after events this tail never saw (evicted): the store has them.
        return Next::Gap;
    }
    if state.writers == 0 || state.closed_unknown {
        Next::Unheld
    } else {
        Next::Wait
    }
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
            let rx = follow.local.state.subscribe();
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
            hub.lock().is_empty(),
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
