//! The store latency decorator: a [`Store`] that times every call of the store it wraps.

use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use durable_mcp_store::{
    BatchOutcome, EventId, Expect, Principal, PruneReport, Record, RecordKind, Retention,
    SessionChange, SessionId, SessionRecord, Store, StoreResult, StoreStatus, StoredEvent,
    StreamId, StreamInfo, StreamOwner, StreamRead, WakeUps, WriteBatch,
};

use super::{STORE_BATCH_OPS, STORE_COMMITS, STORE_OPERATION_DURATION};

/// A [`Store`] recording the latency of each call of the store it wraps in
/// `durable_mcp.store.operation.duration` (labels `backend`, `operation`: the method's
/// name), and for [`Store::commit`] also `durable_mcp.store.commits` and the batch's op
/// count in `durable_mcp.store.batch.ops`. Failed calls are timed like successful ones.
///
/// With traces on ([`MeteredStore::observing`]), each call made while a request's server
/// span is current gets a child span `store {operation}` (see [`crate::traces`]).
///
/// It changes nothing else: every call goes to the wrapped store with its arguments, and
/// its result comes back as it was, so every guarantee of the wrapped store holds.
pub struct MeteredStore {
    inner: Arc<dyn Store>,
    backend: &'static str,
    metered: bool,
    traced: bool,
}

impl MeteredStore {
    /// Time the calls of `inner`.
    pub fn new(inner: Arc<dyn Store>) -> Self {
        Self::observing(inner, true, false)
    }

    /// Time the calls of `inner` (`metered`), trace them (`traced`), or both.
    pub fn observing(inner: Arc<dyn Store>, metered: bool, traced: bool) -> Self {
        let backend = inner.backend();
        Self {
            inner,
            backend,
            metered,
            traced,
        }
    }

    /// The wrapped store.
    pub fn inner(&self) -> &Arc<dyn Store> {
        &self.inner
    }

    async fn timed<T>(
        &self,
        operation: &'static str,
        call: impl Future<Output = StoreResult<T>>,
    ) -> StoreResult<T> {
        let span = if self.traced {
            crate::traces::store_span(self.backend, operation)
        } else {
            None
        };
        let started = self.metered.then(Instant::now);
        let result = call.await;
        if let Some(started) = started {
            ::metrics::histogram!(STORE_OPERATION_DURATION, "backend" => self.backend, "operation" => operation).record(started.elapsed().as_secs_f64());
        }
        crate::traces::end_store_span(span, &result);
        result
    }
}

impl std::fmt::Debug for MeteredStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MeteredStore")
            .field("backend", &self.backend)
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl Store for MeteredStore {
    fn backend(&self) -> &'static str {
        self.backend
    }

    async fn create_session(&self, record: SessionRecord) -> StoreResult<()> {
        self.timed("create_session", self.inner.create_session(record))
            .await
    }

    async fn load_session(
        &self,
        principal: &Principal,
        id: &SessionId,
    ) -> StoreResult<SessionRecord> {
        self.timed("load_session", self.inner.load_session(principal, id))
            .await
    }

    async fn update_session(
        &self,
        principal: &Principal,
        id: &SessionId,
        change: SessionChange,
    ) -> StoreResult<SessionRecord> {
        self.timed(
            "update_session",
            self.inner.update_session(principal, id, change),
        )
        .await
    }

    async fn end_session(&self, principal: &Principal, id: &SessionId) -> StoreResult<bool> {
        self.timed("end_session", self.inner.end_session(principal, id))
            .await
    }

    async fn list_sessions(
        &self,
        principal: Option<&Principal>,
        limit: usize,
    ) -> StoreResult<Vec<SessionRecord>> {
        self.timed("list_sessions", self.inner.list_sessions(principal, limit))
            .await
    }

    async fn create_stream(&self, id: &StreamId, owner: &StreamOwner) -> StoreResult<()> {
        self.timed("create_stream", self.inner.create_stream(id, owner))
            .await
    }

    async fn append(&self, stream: &StreamId, data: String, close: bool) -> StoreResult<EventId> {
        self.timed("append", self.inner.append(stream, data, close))
            .await
    }

    async fn stream_owner(&self, stream: &StreamId) -> StoreResult<StreamOwner> {
        self.timed("stream_owner", self.inner.stream_owner(stream))
            .await
    }

    async fn read_after(
        &self,
        stream: &StreamId,
        after: u64,
        limit: usize,
    ) -> StoreResult<StreamRead> {
        self.timed("read_after", self.inner.read_after(stream, after, limit))
            .await
    }

    async fn prune(&self, retention: &Retention, now_ms: u64) -> StoreResult<PruneReport> {
        self.timed("prune", self.inner.prune(retention, now_ms))
            .await
    }

    async fn prune_preview(&self, retention: &Retention, now_ms: u64) -> StoreResult<PruneReport> {
        self.timed("prune_preview", self.inner.prune_preview(retention, now_ms))
            .await
    }

    async fn put_record(
        &self,
        kind: RecordKind,
        key: &str,
        value: String,
        expires_at_ms: Option<u64>,
        expect: Expect,
    ) -> StoreResult<u64> {
        self.timed(
            "put_record",
            self.inner
                .put_record(kind, key, value, expires_at_ms, expect),
        )
        .await
    }

    async fn get_record(&self, kind: RecordKind, key: &str) -> StoreResult<Option<Record>> {
        self.timed("get_record", self.inner.get_record(kind, key))
            .await
    }

    async fn list_records(
        &self,
        kind: RecordKind,
        prefix: &str,
        limit: usize,
    ) -> StoreResult<Vec<Record>> {
        self.timed("list_records", self.inner.list_records(kind, prefix, limit))
            .await
    }

    async fn delete_records(&self, kind: RecordKind, prefix: &str) -> StoreResult<u64> {
        self.timed("delete_records", self.inner.delete_records(kind, prefix))
            .await
    }

    async fn commit(&self, batch: WriteBatch) -> StoreResult<BatchOutcome> {
        let ops = batch.len();
        let outcome = self.timed("commit", self.inner.commit(batch)).await;
        if outcome.is_ok() && self.metered {
            ::metrics::counter!(STORE_COMMITS, "backend" => self.backend).increment(1);
            ::metrics::histogram!(STORE_BATCH_OPS, "backend" => self.backend).record(ops as f64);
        }
        outcome
    }

    async fn list_streams(
        &self,
        after: Option<&StreamId>,
        limit: usize,
    ) -> StoreResult<Vec<StreamInfo>> {
        self.timed("list_streams", self.inner.list_streams(after, limit))
            .await
    }

    async fn stream_info(&self, stream: &StreamId) -> StoreResult<StreamInfo> {
        self.timed("stream_info", self.inner.stream_info(stream))
            .await
    }

    async fn status(&self) -> StoreResult<StoreStatus> {
        self.timed("status", self.inner.status()).await
    }

    /// Forwarded, not left to the provided implementation: the wrapped backend's own
    /// (one transaction, any first sequence) must stay the one that runs.
    async fn import_events(
        &self,
        stream: &StreamId,
        owner: &StreamOwner,
        events: &[StoredEvent],
        close: bool,
    ) -> StoreResult<u64> {
        self.timed(
            "import_events",
            self.inner.import_events(stream, owner, events, close),
        )
        .await
    }

    async fn watch(&self, stream: &StreamId) -> StoreResult<WakeUps> {
        self.timed("watch", self.inner.watch(stream)).await
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // tests: a panic is the failure report

    use super::*;

    /// The decorator passes the wrapped store's contract: the contract suite's own cases,
    /// run through it on the memory store.
    #[tokio::test]
    async fn the_metered_store_keeps_the_contract() {
        let store: Arc<dyn Store> = Arc::new(MeteredStore::new(Arc::new(
            durable_mcp_store_memory::MemoryStore::new(),
        )));
        assert_eq!(store.backend(), "memory");
        durable_mcp_store::contract::d2_append_ids_increase_and_name_stream(store.clone()).await;
        durable_mcp_store::contract::d3_replay_after_every_id_is_exact_suffix(store.clone()).await;
        durable_mcp_store::contract::d1_batch_commits_every_op_and_returns_ids_and_versions(
            store.clone(),
        )
        .await;
        durable_mcp_store::contract::d7_compare_and_set_versions(store).await;
    }
}
