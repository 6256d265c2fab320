//! An in-memory [`Store`]: everything the contract promises, within one process, until the
//! process exits. Use it for tests and for development; it is not durable across restarts.

mod batch;

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use durable_mcp_store::{
    BatchOutcome, EventId, Expect, Principal, PruneReport, Record, RecordKind, Retention,
    SessionChange, SessionId, SessionRecord, Setting, Store, StoreError, StoreResult, StoreStatus,
    StoredEvent, StreamId, StreamInfo, StreamOwner, StreamRead, WakeUps, WriteBatch, import_gap,
    now_ms,
};
use foldhash::HashMap;
use tokio::sync::watch;

/// Retention settings of the in-memory store.
#[derive(Debug, Clone)]
pub struct MemoryOptions {
    /// Keep at most this many events per stream; older ones are pruned (D14).
    pub max_events_per_stream: usize,
}

impl Default for MemoryOptions {
    fn default() -> Self {
        Self {
            max_events_per_stream: 100_000,
        }
    }
}

struct StreamState {
    owner: StreamOwner,
    /// Retained events; `events[0]` has sequence `first_seq`.
    events: VecDeque<String>,
    first_seq: u64,
    closed: bool,
    last_event_ms: u64,
    notify: watch::Sender<u64>,
}

impl StreamState {
    fn last_seq(&self) -> u64 {
        self.first_seq + self.events.len() as u64 - 1
    }
}

#[derive(Default)]
struct Inner {
    sessions: HashMap<SessionId, SessionRecord>,
    session_streams: HashMap<SessionId, Vec<StreamId>>,
    streams: HashMap<StreamId, StreamState>,
    records: BTreeMap<(RecordKind, String), Record>,
}

/// The in-memory store. Cloning gives another handle to the same data, as a second worker
/// sharing a database would have.
#[derive(Clone, Default)]
pub struct MemoryStore {
    inner: Arc<Mutex<Inner>>,
    options: Arc<MemoryOptions>,
}

impl MemoryStore {
    /// An empty store with default retention.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty store with the given retention.
    pub fn with_options(options: MemoryOptions) -> Self {
        Self {
            inner: Arc::default(),
            options: Arc::new(options),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock cannot leave `Inner` half-updated in a way that
        // breaks the contract (every mutation is a single insert/remove/push), so recover.
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[async_trait]
impl Store for MemoryStore {
    fn backend(&self) -> &'static str {
        "memory"
    }

    async fn create_session(&self, record: SessionRecord) -> StoreResult<()> {
        let mut inner = self.lock();
        let owner = StreamOwner {
            principal: record.principal.clone(),
            session: Some(record.id.clone()),
        };
        insert_stream(&mut inner, &record.standalone_stream, &owner);
        inner.sessions.insert(record.id.clone(), record);
        Ok(())
    }

    async fn load_session(
        &self,
        principal: &Principal,
        id: &SessionId,
    ) -> StoreResult<SessionRecord> {
        let inner = self.lock();
        match inner.sessions.get(id) {
            Some(record) if &record.principal == principal => Ok(record.clone()),
            _ => Err(StoreError::not_found("session")),
        }
    }

    async fn update_session(
        &self,
        principal: &Principal,
        id: &SessionId,
        change: SessionChange,
    ) -> StoreResult<SessionRecord> {
        let mut inner = self.lock();
        match inner.sessions.get_mut(id) {
            Some(record) if &record.principal == principal => {
                record.apply(&change, now_ms())?;
                Ok(record.clone())
            }
            _ => Err(StoreError::not_found("session")),
        }
    }

    async fn end_session(&self, principal: &Principal, id: &SessionId) -> StoreResult<bool> {
        let mut inner = self.lock();
        if inner
            .sessions
            .get(id)
            .is_none_or(|r| &r.principal != principal)
        {
            return Ok(false);
        }
        remove_session(&mut inner, id);
        Ok(true)
    }

    async fn list_sessions(
        &self,
        principal: Option<&Principal>,
        limit: usize,
    ) -> StoreResult<Vec<SessionRecord>> {
        let inner = self.lock();
        let mut sessions: Vec<SessionRecord> = inner
            .sessions
            .values()
            .filter(|s| principal.is_none_or(|p| &s.principal == p))
            .cloned()
            .collect();
        sessions.sort_by_key(|s| (s.created_at_ms, s.id.clone()));
        sessions.truncate(limit);
        Ok(sessions)
    }

    async fn prune(&self, retention: &Retention, now_ms: u64) -> StoreResult<PruneReport> {
        let mut inner = self.lock();
        let due = Due::select(&inner, retention, now_ms);
        for id in &due.sessions {
            remove_session(&mut inner, id);
        }
        for id in &due.streams {
            inner.streams.remove(id);
        }
        for key in &due.records {
            inner.records.remove(key);
        }
        Ok(due.report())
    }

    async fn prune_preview(&self, retention: &Retention, now_ms: u64) -> StoreResult<PruneReport> {
        Ok(Due::select(&self.lock(), retention, now_ms).report())
    }

    async fn put_record(
        &self,
        kind: RecordKind,
        key: &str,
        value: String,
        expires_at_ms: Option<u64>,
        expect: Expect,
    ) -> StoreResult<u64> {
        let now = now_ms();
        let mut inner = self.lock();
        let slot = (kind, key.to_owned());
        let current = inner
            .records
            .get(&slot)
            .filter(|r| !r.expired(now))
            .map(|r| r.version);
        let version = match (expect, current) {
            (Expect::Absent, None) => 1,
            (Expect::Version(expected), Some(found)) if expected == found => found + 1,
            _ => return Err(StoreError::Conflict { what: "record" }),
        };
        inner.records.insert(
            slot,
            Record {
                key: key.to_owned(),
                version,
                value,
                expires_at_ms,
            },
        );
        Ok(version)
    }

    async fn get_record(&self, kind: RecordKind, key: &str) -> StoreResult<Option<Record>> {
        let now = now_ms();
        Ok(self
            .lock()
            .records
            .get(&(kind, key.to_owned()))
            .filter(|r| !r.expired(now))
            .cloned())
    }

    async fn list_records(
        &self,
        kind: RecordKind,
        prefix: &str,
        limit: usize,
    ) -> StoreResult<Vec<Record>> {
        let now = now_ms();
        let inner = self.lock();
        Ok(inner
            .records
            .range((kind, prefix.to_owned())..)
            .take_while(|((k, key), _)| *k == kind && key.starts_with(prefix))
            .map(|(_, r)| r)
            .filter(|r| !r.expired(now))
            .take(limit)
            .cloned()
            .collect())
    }

    async fn delete_records(&self, kind: RecordKind, prefix: &str) -> StoreResult<u64> {
        let now = now_ms();
        let mut inner = self.lock();
        let keys = keys_with_prefix(&inner, kind, prefix);
        let mut deleted = 0;
        for key in keys {
            if inner.records.remove(&key).is_some_and(|r| !r.expired(now)) {
                deleted += 1;
            }
        }
        Ok(deleted)
    }

    async fn create_stream(&self, id: &StreamId, owner: &StreamOwner) -> StoreResult<()> {
        let mut inner = self.lock();
        if let Some(session) = &owner.session
            && !inner.sessions.contains_key(session)
        {
            return Err(StoreError::not_found("session"));
        }
        insert_stream(&mut inner, id, owner);
        Ok(())
    }

    async fn append(&self, stream: &StreamId, data: String, close: bool) -> StoreResult<EventId> {
        let max = self.options.max_events_per_stream.max(1);
        let mut inner = self.lock();
        let state = inner
            .streams
            .get_mut(stream)
            .ok_or(StoreError::not_found("stream"))?;
        if state.closed {
            return Err(StoreError::StreamClosed {
                stream: stream.to_string(),
            });
        }
        state.events.push_back(data);
        while state.events.len() > max {
            state.events.pop_front();
            state.first_seq += 1;
        }
        state.closed = close;
        state.last_event_ms = now_ms();
        let seq = state.last_seq();
        state.notify.send_replace(seq);
        Ok(EventId::new(stream.clone(), seq))
    }

    async fn stream_owner(&self, stream: &StreamId) -> StoreResult<StreamOwner> {
        let inner = self.lock();
        inner
            .streams
            .get(stream)
            .map(|s| s.owner.clone())
            .ok_or(StoreError::not_found("stream"))
    }

    async fn read_after(
        &self,
        stream: &StreamId,
        after: u64,
        limit: usize,
    ) -> StoreResult<StreamRead> {
        let inner = self.lock();
        let state = inner
            .streams
            .get(stream)
            .ok_or(StoreError::not_found("stream"))?;
        // Events 1..first_seq were pruned. Reading after `first_seq - 1` or later is exact.
        if after + 1 < state.first_seq {
            return Err(StoreError::Pruned {
                event: EventId::new(stream.clone(), after).to_string(),
                oldest_retained: state.first_seq,
            });
        }
        let skip = usize::try_from(after + 1 - state.first_seq).unwrap_or(usize::MAX);
        let events: Vec<StoredEvent> = state
            .events
            .iter()
            .enumerate()
            .skip(skip)
            .take(limit)
            .map(|(i, data)| StoredEvent {
                id: EventId::new(stream.clone(), state.first_seq + i as u64),
                data: data.clone(),
            })
            .collect();
        let reached = events.last().map_or(after, |e| e.id.seq);
        let last = if state.events.is_empty() {
            0
        } else {
            state.last_seq()
        };
        Ok(StreamRead {
            finished: state.closed && reached >= last,
            events,
        })
    }

    async fn commit(&self, batch: WriteBatch) -> StoreResult<BatchOutcome> {
        let max = self.options.max_events_per_stream.max(1);
        batch::commit(&mut self.lock(), batch, max)
    }

    async fn list_streams(
        &self,
        after: Option<&StreamId>,
        limit: usize,
    ) -> StoreResult<Vec<StreamInfo>> {
        let inner = self.lock();
        let mut ids: Vec<&StreamId> = inner
            .streams
            .keys()
            .filter(|id| after.is_none_or(|after| id.as_str() > after.as_str()))
            .collect();
        ids.sort_unstable_by(|a, b| a.as_str().cmp(b.as_str()));
        Ok(ids
            .into_iter()
            .take(limit)
            .filter_map(|id| info(&inner, id))
            .collect())
    }

    async fn stream_info(&self, stream: &StreamId) -> StoreResult<StreamInfo> {
        info(&self.lock(), stream).ok_or(StoreError::not_found("stream"))
    }

    async fn status(&self) -> StoreResult<StoreStatus> {
        Ok(StoreStatus {
            schema: None,
            server_time_ms: None,
            settings: vec![Setting::weak(
                "backend",
                "memory",
                "everything is lost when the process exits, and no other worker sees it",
                "use a durable store: --store sqlite:PATH, postgres://... or redis://...",
            )],
        })
    }

    async fn import_events(
        &self,
        stream: &StreamId,
        owner: &StreamOwner,
        events: &[StoredEvent],
        close: bool,
    ) -> StoreResult<u64> {
        let mut inner = self.lock();
        if !inner.streams.contains_key(stream) {
            if let Some(session) = &owner.session
                && !inner.sessions.contains_key(session)
            {
                return Err(StoreError::not_found("session"));
            }
            insert_stream(&mut inner, stream, owner);
        }
        let state = inner
            .streams
            .get_mut(stream)
            .ok_or(StoreError::not_found("stream"))?;
        let last = if state.events.is_empty() {
            0
        } else {
            state.last_seq()
        };
        let fresh: Vec<&StoredEvent> = events.iter().filter(|e| e.id.seq > last).collect();
        let Some(first) = fresh.first() else {
            return Ok(0);
        };
        // An empty stream may start where its source's retained events start.
        let start = if last == 0 { first.id.seq } else { last + 1 };
        for (i, event) in fresh.iter().enumerate() {
            if event.id.seq != start + i as u64 {
                return Err(import_gap(stream, start + i as u64, event.id.seq));
            }
        }
        if state.closed {
            return Err(StoreError::StreamClosed {
                stream: stream.to_string(),
            });
        }
        if last == 0 {
            state.first_seq = start;
        }
        state.events.extend(fresh.iter().map(|e| e.data.clone()));
        state.closed = close;
        state.last_event_ms = now_ms();
        let seq = state.last_seq();
        state.notify.send_replace(seq);
        Ok(fresh.len() as u64)
    }

    async fn watch(&self, stream: &StreamId) -> StoreResult<WakeUps> {
        let inner = self.lock();
        let state = inner
            .streams
            .get(stream)
            .ok_or(StoreError::not_found("stream"))?;
        let rx = state.notify.subscribe();
        Ok(Box::pin(futures::stream::unfold(rx, |mut rx| async move {
            rx.changed().await.ok().map(|()| ((), rx))
        })))
    }
}

/// A stream's summary.
fn info(inner: &Inner, id: &StreamId) -> Option<StreamInfo> {
    let state = inner.streams.get(id)?;
    let last_seq = if state.events.is_empty() {
        state.first_seq.saturating_sub(1)
    } else {
        state.last_seq()
    };
    Some(StreamInfo {
        id: id.clone(),
        owner: state.owner.clone(),
        first_seq: state.first_seq,
        last_seq,
        closed: state.closed,
    })
}

/// The keys of `kind` starting with `prefix` (expired ones included), in key order.
fn keys_with_prefix(inner: &Inner, kind: RecordKind, prefix: &str) -> Vec<(RecordKind, String)> {
    inner
        .records
        .range((kind, prefix.to_owned())..)
        .take_while(|((k, key), _)| *k == kind && key.starts_with(prefix))
        .map(|(k, _)| k.clone())
        .collect()
}

/// What a prune at `now_ms` removes, selected under the lock it removes them under.
struct Due {
    /// Sessions idle past the TTL; their streams go with them, uncounted.
    sessions: Vec<SessionId>,
    /// Finished streams past the age limit, other than those of `sessions`.
    streams: Vec<StreamId>,
    /// Expired records.
    records: Vec<(RecordKind, String)>,
}

impl Due {
    fn select(inner: &Inner, retention: &Retention, now_ms: u64) -> Self {
        let sessions: Vec<SessionId> = match retention.session_idle_ttl_ms {
            Some(ttl) => inner
                .sessions
                .values()
                .filter(|s| s.last_seen_ms.saturating_add(ttl) < now_ms)
                .map(|s| s.id.clone())
                .collect(),
            None => Vec::new(),
        };
        let with_sessions: HashSet<&StreamId> = sessions
            .iter()
            .filter_map(|id| inner.session_streams.get(id))
            .flatten()
            .collect();
        let streams = match retention.max_stream_age_ms {
            Some(age) => inner
                .streams
                .iter()
                .filter(|(id, s)| {
                    s.closed
                        && s.last_event_ms.saturating_add(age) < now_ms
                        && !with_sessions.contains(id)
                })
                .map(|(id, _)| id.clone())
                .collect(),
            None => Vec::new(),
        };
        let records = inner
            .records
            .iter()
            .filter(|(_, r)| r.expired(now_ms))
            .map(|(k, _)| k.clone())
            .collect();
        Self {
            sessions,
            streams,
            records,
        }
    }

    fn report(&self) -> PruneReport {
        PruneReport {
            sessions_ended: self.sessions.len() as u64,
            streams_deleted: self.streams.len() as u64,
            records_expired: self.records.len() as u64,
        }
    }
}

fn remove_session(inner: &mut Inner, id: &SessionId) {
    inner.sessions.remove(id);
    for stream in inner.session_streams.remove(id).unwrap_or_default() {
        // Dropping the stream's sender ends every watcher; they read NotFound and stop.
        inner.streams.remove(&stream);
    }
}

fn insert_stream(inner: &mut Inner, id: &StreamId, owner: &StreamOwner) {
    insert_stream_owned(inner, id.clone(), owner.clone(), now_ms());
}

/// [`insert_stream`] of an id and owner the caller gives away (a batch's), at `now`.
fn insert_stream_owned(inner: &mut Inner, id: StreamId, owner: StreamOwner, now: u64) {
    let (notify, _) = watch::channel(0);
    if let Some(session) = &owner.session {
        match inner.session_streams.get_mut(session) {
            Some(list) => list.push(id.clone()),
            None => {
                inner
                    .session_streams
                    .insert(session.clone(), vec![id.clone()]);
            }
        }
    }
    inner.streams.insert(
        id,
        StreamState {
            owner,
            events: VecDeque::new(),
            first_seq: 1,
            closed: false,
            last_event_ms: now,
            notify,
        },
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fresh() -> Option<std::sync::Arc<dyn durable_mcp_store::Store>> {
        Some(std::sync::Arc::new(MemoryStore::new()))
    }

    /// One process, one handle: the memory store has no periodic re-read at all.
    fn pair() -> Option<(
        std::sync::Arc<dyn durable_mcp_store::Store>,
        std::sync::Arc<dyn durable_mcp_store::Store>,
    )> {
        fresh().map(|store| (store.clone(), store))
    }

    durable_mcp_store::store_contract_tests!(async { fresh() }, pair = async { pair() });

    #[tokio::test]
    async fn d14_resume_from_pruned_event_is_a_named_error() {
        let store = MemoryStore::with_options(MemoryOptions {
            max_events_per_stream: 2,
        });
        let stream = StreamId::random();
        let owner = StreamOwner {
            principal: Principal::anonymous(),
            session: None,
        };
        store.create_stream(&stream, &owner).await.unwrap();
        for i in 0..5 {
            store.append(&stream, format!("{i}"), false).await.unwrap();
        }
        let err = store.read_after(&stream, 1, 10).await.unwrap_err();
        assert!(
            matches!(
                err,
                StoreError::Pruned {
                    oldest_retained: 4,
                    ..
                }
            ),
            "{err}"
        );
        let read = store.read_after(&stream, 3, 10).await.unwrap();
        assert_eq!(
            read.events
                .iter()
                .map(|e| e.data.as_str())
                .collect::<Vec<_>>(),
            ["3", "4"]
        );
    }
}
