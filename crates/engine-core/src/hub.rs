//! This worker's hand-off of what it commits to its own tails (write-through): the [`Hub`]
//! holds, per stream a writer or tail of this worker holds, the events committed here
//! lately; the door out (`events.rs`) hands them over once the store returned, and the
//! tails (`tail.rs`) read them.
//!
//! # Durability
//! An event reaches the hub only after the [`durable_mcp_store::Store::commit`] that wrote
//! it returned `Ok`, with the id the store gave it (D1).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

use durable_mcp_store::{BatchOp, BatchOutcome, StoredEvent, StreamId};
use foldhash::HashMap;
use tokio::sync::watch;

/// The most events a stream's local hub keeps for its tails: a tail further behind reads
/// the store instead.
pub const MAX_RECENT_EVENTS: usize = 64;

/// The most bytes of event data a stream's local hub keeps.
const MAX_RECENT_BYTES: usize = 1 << 20;

/// The streams of this worker that have a local writer or tail, with what was committed
/// to them lately. Streams with neither have no entry and cost nothing.
#[derive(Default)]
pub struct Hub {
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

/// What one stream's local hub holds, watched by its tails.
#[derive(Default)]
pub struct LocalState {
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
    /// How many streams have an entry (tests: nothing is kept for streams nobody holds).
    pub fn streams(&self) -> usize {
        self.lock().len()
    }

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
    pub fn writer(self: &Arc<Self>, stream: &StreamId) -> Writer {
        let local = self.register(stream, |s| s.writers += 1);
        Writer {
            hub: self.clone(),
            stream: stream.clone(),
            local,
        }
    }

    /// Follow `stream` from now on: what this worker commits to it from now on is kept for
    /// the returned handle until its tail took it (within the bounds).
    pub fn follow(self: &Arc<Self>, stream: &StreamId) -> Follow {
        let local = self.register(stream, |s| s.tails += 1);
        Follow {
            hub: self.clone(),
            stream: stream.clone(),
            local,
        }
    }

    /// [`Hub::follow`], if a writer of this worker holds `stream` now.
    pub fn follow_if_written(self: &Arc<Self>, stream: &StreamId) -> Option<Follow> {
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
    pub fn capture(&self, batch: &durable_mcp_store::WriteBatch) -> Captured {
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
pub struct Captured {
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
    pub fn is_empty(&self) -> bool {
        self.streams.is_empty()
    }

    /// A captured single append (not a batch): its event id is `id`.
    pub fn published_one(self, id: &durable_mcp_store::EventId) {
        let mut outcome = BatchOutcome::default();
        outcome
            .ops
            .push(durable_mcp_store::OpOutcome::Appended(id.clone()));
        self.published(&outcome);
    }

    /// The batch was committed with `outcome`: hand its events to the tails (D1: only now).
    pub fn published(self, outcome: &BatchOutcome) {
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
    pub fn one(hub: &Hub, stream: &StreamId, data: &str, close: bool) -> Self {
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
pub struct Writer {
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
/// commits to the stream is kept for it. Its tail is the engine's `Engine::tail`.
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

    /// What the stream's local hub holds, watched.
    pub fn subscribe(&self) -> watch::Receiver<LocalState> {
        self.local.state.subscribe()
    }
}

/// What the local hub holds for a tail at `after`.
pub enum Next {
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

/// What `state` holds for a tail at sequence `after`.
pub fn local_at(state: &LocalState, after: u64) -> Next {
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
