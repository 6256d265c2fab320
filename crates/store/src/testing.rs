//! Store wrappers for tests of the layers above the store (engine, transports), behind the
//! `testing` feature.
//!
//! [`Wrapped`] puts a [`Hook`] in front of every operation of any [`Store`]; two hooks come
//! with it:
//!
//! - [`Counter`] counts operations by kind ([`Op`]), to assert how many commits a request
//!   costs ([`CountingStore`]).
//! - [`Gate`] holds operations of chosen kinds until released, or fails them, to show what a
//!   client sees while a commit is in flight or after it failed ([`GatedStore`]; D1, D15).
//!
//! ```
//! use std::sync::Arc;
//! use durable_mcp_store::testing::{CountingStore, Op};
//!
//! # async fn demo(inner: Arc<dyn durable_mcp_store::Store>) {
//! let store = Arc::new(CountingStore::counting(inner));
//! // ... drive a request through an engine built on `store` ...
//! assert_eq!(store.hook().count(Op::Append), 2);
//! # }
//! ```

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use tokio::sync::watch;

use crate::{
    BatchOutcome, EventId, Expect, Principal, PruneReport, Record, RecordKind, Retention,
    SessionChange, SessionId, SessionRecord, Store, StoreError, StoreResult, StreamId, StreamOwner,
    StreamRead, WakeUps, WriteBatch,
};

/// One kind of [`Store`] operation: one variant per trait method.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[allow(missing_docs)] // each variant is the `Store` method of the same name
pub enum Op {
    CreateSession,
    LoadSession,
    UpdateSession,
    EndSession,
    ListSessions,
    CreateStream,
    Append,
    StreamOwner,
    ReadAfter,
    Prune,
    PrunePreview,
    PutRecord,
    GetRecord,
    ListRecords,
    DeleteRecords,
    Watch,
    Commit,
}

impl Op {
    /// Every kind, in declaration order.
    pub const ALL: [Op; 17] = [
        Op::CreateSession,
        Op::LoadSession,
        Op::UpdateSession,
        Op::EndSession,
        Op::ListSessions,
        Op::CreateStream,
        Op::Append,
        Op::StreamOwner,
        Op::ReadAfter,
        Op::Prune,
        Op::PrunePreview,
        Op::PutRecord,
        Op::GetRecord,
        Op::ListRecords,
        Op::DeleteRecords,
        Op::Watch,
        Op::Commit,
    ];

    /// Whether the operation commits something (a write), as opposed to reading or watching.
    pub fn is_write(self) -> bool {
        matches!(
            self,
            Op::CreateSession
                | Op::UpdateSession
                | Op::EndSession
                | Op::CreateStream
                | Op::Append
                | Op::Prune
                | Op::PutRecord
                | Op::DeleteRecords
                | Op::Commit
        )
    }
}

/// Code run before each operation of a [`Wrapped`] store reaches the wrapped one.
#[async_trait]
pub trait Hook: Send + Sync + 'static {
    /// Called before `op` is passed on; an error is returned to the caller instead, and the
    /// wrapped store is not called (nothing is committed).
    async fn before(&self, op: Op) -> StoreResult<()>;

    /// Called with each batch of [`Store::commit`] before it is passed on (after
    /// [`before`](Self::before) let it through).
    fn batch(&self, _batch: &WriteBatch) {}
}

/// A [`Store`] that runs a [`Hook`] before passing each operation to the store it wraps.
pub struct Wrapped<H> {
    inner: Arc<dyn Store>,
    hook: H,
}

impl<H: Hook> Wrapped<H> {
    /// Wrap `inner`, running `hook` before each of its operations.
    pub fn new(inner: Arc<dyn Store>, hook: H) -> Self {
        Self { inner, hook }
    }

    /// The hook, to inspect or steer it.
    pub fn hook(&self) -> &H {
        &self.hook
    }

    /// The wrapped store, for reads that must not go through the hook.
    pub fn inner(&self) -> &Arc<dyn Store> {
        &self.inner
    }
}

impl<H> std::fmt::Debug for Wrapped<H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Wrapped")
            .field("inner", &self.inner.backend())
            .finish_non_exhaustive()
    }
}

/// A store that counts its operations by kind.
pub type CountingStore = Wrapped<Counter>;

impl CountingStore {
    /// Count the operations of `inner`.
    pub fn counting(inner: Arc<dyn Store>) -> Self {
        Self::new(inner, Counter::default())
    }
}

/// A store whose operations can be held or failed on demand.
pub type GatedStore = Wrapped<Gate>;

impl GatedStore {
    /// Gate the operations of `inner` (all open until told otherwise).
    pub fn gated(inner: Arc<dyn Store>) -> Self {
        Self::new(inner, Gate::default())
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every mutation is one map update: a panic cannot leave it half-done.
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

/// A [`Hook`] counting operations by kind (every call, whether it then succeeds or not),
/// and the ops of committed batches by kind ([`rows`](Self::take_rows)).
#[derive(Debug, Default)]
pub struct Counter {
    counts: Mutex<BTreeMap<Op, u64>>,
    rows: Mutex<BTreeMap<String, u64>>,
}

impl Counter {
    /// How many `op` operations were called since the start or the last [`take`](Self::take).
    pub fn count(&self, op: Op) -> u64 {
        lock(&self.counts).get(&op).copied().unwrap_or(0)
    }

    /// How many writes ([`Op::is_write`]) were called.
    pub fn writes(&self) -> u64 {
        lock(&self.counts)
            .iter()
            .filter(|(op, _)| op.is_write())
            .map(|(_, n)| n)
            .sum()
    }

    /// The counts so far (kinds never called left out), and start counting from zero.
    pub fn take(&self) -> BTreeMap<Op, u64> {
        std::mem::take(&mut *lock(&self.counts))
    }

    /// The ops of the batches passed to [`Store::commit`] so far, by kind (`append`,
    /// `put_record(Alias)`, ...: a record op names its record kind), and start counting
    /// from zero: the rows a backend writes for them.
    pub fn take_rows(&self) -> BTreeMap<String, u64> {
        std::mem::take(&mut *lock(&self.rows))
    }
}

#[async_trait]
impl Hook for Counter {
    async fn before(&self, op: Op) -> StoreResult<()> {
        *lock(&self.counts).entry(op).or_default() += 1;
        Ok(())
    }

    fn batch(&self, batch: &WriteBatch) {
        let mut rows = lock(&self.rows);
        for op in batch.ops() {
            let kind = match op {
                crate::BatchOp::PutRecord { kind, .. }
                | crate::BatchOp::DeleteRecord { kind, .. }
                | crate::BatchOp::DeleteRecords { kind, .. } => {
                    format!("{}({kind:?})", op.name())
                }
                _ => op.name().to_owned(),
            };
            *rows.entry(kind).or_default() += 1;
        }
    }
}

#[derive(Debug, Default)]
struct GateState {
    held: BTreeMap<Op, bool>,
    failing: BTreeMap<Op, u64>,
    waiting: BTreeMap<Op, u64>,
    failed: BTreeMap<Op, u64>,
}

/// A [`Hook`] that holds or fails operations of chosen kinds.
///
/// A held operation waits *before* it reaches the wrapped store, so while it is held nothing
/// of it is committed or visible to readers; once released it proceeds. A failed operation
/// returns [`StoreError::Unavailable`] without reaching the wrapped store.
#[derive(Debug)]
pub struct Gate {
    state: watch::Sender<GateState>,
}

impl Default for Gate {
    fn default() -> Self {
        Self {
            state: watch::channel(GateState::default()).0,
        }
    }
}

/// The error a [`Gate`] fails an operation with.
#[derive(Debug, thiserror::Error)]
#[error("{0:?} failed on purpose by a test gate")]
pub struct GateFailure(pub Op);

impl Gate {
    /// Hold every later `op` operation (and those arriving now) until [`release`](Self::release).
    pub fn hold(&self, op: Op) {
        self.state.send_modify(|s| {
            s.held.insert(op, true);
        });
    }

    /// Let held and later `op` operations through.
    pub fn release(&self, op: Op) {
        self.state.send_modify(|s| {
            s.held.remove(&op);
        });
    }

    /// Fail the next `times` `op` operations (they reach the wrapped store no more).
    pub fn fail(&self, op: Op, times: u64) {
        self.state
            .send_modify(|s| *s.failing.entry(op).or_default() += times);
    }

    /// How many `op` operations are waiting at the gate now.
    pub fn waiting(&self, op: Op) -> u64 {
        self.state.borrow().waiting.get(&op).copied().unwrap_or(0)
    }

    /// How many `op` operations the gate has failed so far.
    pub fn failed(&self, op: Op) -> u64 {
        self.state.borrow().failed.get(&op).copied().unwrap_or(0)
    }

    /// Wait until at least `n` `op` operations are held at the gate (put a timeout around it).
    pub async fn until_waiting(&self, op: Op, n: u64) {
        let mut rx = self.state.subscribe();
        // The sender lives in `self`: `wait_for` cannot see it dropped while we borrow it.
        let _ = rx
            .wait_for(|s| s.waiting.get(&op).copied().unwrap_or(0) >= n)
            .await;
    }

    /// Wait until the gate has failed at least `n` `op` operations (put a timeout around it).
    pub async fn until_failed(&self, op: Op, n: u64) {
        let mut rx = self.state.subscribe();
        let _ = rx
            .wait_for(|s| s.failed.get(&op).copied().unwrap_or(0) >= n)
            .await;
    }
}

/// Takes a waiting operation off the count when it leaves (or is dropped while held).
struct Waiting<'a> {
    gate: &'a Gate,
    op: Op,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.gate.state.send_modify(|s| {
            if let Some(n) = s.waiting.get_mut(&self.op) {
                *n = n.saturating_sub(1);
            }
        });
    }
}

#[async_trait]
impl Hook for Gate {
    async fn before(&self, op: Op) -> StoreResult<()> {
        let mut fail = false;
        let mut held = false;
        self.state.send_modify(|s| {
            if let Some(n) = s.failing.get_mut(&op).filter(|n| **n > 0) {
                *n -= 1;
                *s.failed.entry(op).or_default() += 1;
                fail = true;
            } else if s.held.contains_key(&op) {
                *s.waiting.entry(op).or_default() += 1;
                held = true;
            }
        });
        if fail {
            return Err(StoreError::Unavailable(Box::new(GateFailure(op))));
        }
        if held {
            let _waiting = Waiting { gate: self, op };
            let mut rx = self.state.subscribe();
            let _ = rx.wait_for(|s| !s.held.contains_key(&op)).await;
        }
        Ok(())
    }
}

#[async_trait]
impl<H: Hook> Store for Wrapped<H> {
    fn backend(&self) -> &'static str {
        self.inner.backend()
    }
    async fn create_session(&self, record: SessionRecord) -> StoreResult<()> {
        self.hook.before(Op::CreateSession).await?;
        self.inner.create_session(record).await
    }
    async fn load_session(
        &self,
        principal: &Principal,
        id: &SessionId,
    ) -> StoreResult<SessionRecord> {
        self.hook.before(Op::LoadSession).await?;
        self.inner.load_session(principal, id).await
    }
    async fn update_session(
        &self,
        principal: &Principal,
        id: &SessionId,
        change: SessionChange,
    ) -> StoreResult<SessionRecord> {
        self.hook.before(Op::UpdateSession).await?;
        self.inner.update_session(principal, id, change).await
    }
    async fn end_session(&self, principal: &Principal, id: &SessionId) -> StoreResult<bool> {
        self.hook.before(Op::EndSession).await?;
        self.inner.end_session(principal, id).await
    }
    async fn list_sessions(
        &self,
        principal: Option<&Principal>,
        limit: usize,
    ) -> StoreResult<Vec<SessionRecord>> {
        self.hook.before(Op::ListSessions).await?;
        self.inner.list_sessions(principal, limit).await
    }
    async fn create_stream(&self, id: &StreamId, owner: &StreamOwner) -> StoreResult<()> {
        self.hook.before(Op::CreateStream).await?;
        self.inner.create_stream(id, owner).await
    }
    async fn append(&self, stream: &StreamId, data: String, close: bool) -> StoreResult<EventId> {
        self.hook.before(Op::Append).await?;
        self.inner.append(stream, data, close).await
    }
    async fn stream_owner(&self, stream: &StreamId) -> StoreResult<StreamOwner> {
        self.hook.before(Op::StreamOwner).await?;
        self.inner.stream_owner(stream).await
    }
    async fn read_after(
        &self,
        stream: &StreamId,
        after: u64,
        limit: usize,
    ) -> StoreResult<StreamRead> {
        self.hook.before(Op::ReadAfter).await?;
        self.inner.read_after(stream, after, limit).await
    }
    async fn prune(&self, retention: &Retention, now_ms: u64) -> StoreResult<PruneReport> {
        self.hook.before(Op::Prune).await?;
        self.inner.prune(retention, now_ms).await
    }
    async fn prune_preview(&self, retention: &Retention, now_ms: u64) -> StoreResult<PruneReport> {
        self.hook.before(Op::PrunePreview).await?;
        self.inner.prune_preview(retention, now_ms).await
    }
    async fn put_record(
        &self,
        kind: RecordKind,
        key: &str,
        value: String,
        expires_at_ms: Option<u64>,
        expect: Expect,
    ) -> StoreResult<u64> {
        self.hook.before(Op::PutRecord).await?;
        self.inner
            .put_record(kind, key, value, expires_at_ms, expect)
            .await
    }
    async fn get_record(&self, kind: RecordKind, key: &str) -> StoreResult<Option<Record>> {
        self.hook.before(Op::GetRecord).await?;
        self.inner.get_record(kind, key).await
    }
    async fn list_records(
        &self,
        kind: RecordKind,
        prefix: &str,
        limit: usize,
    ) -> StoreResult<Vec<Record>> {
        self.hook.before(Op::ListRecords).await?;
        self.inner.list_records(kind, prefix, limit).await
    }
    async fn delete_records(&self, kind: RecordKind, prefix: &str) -> StoreResult<u64> {
        self.hook.before(Op::DeleteRecords).await?;
        self.inner.delete_records(kind, prefix).await
    }
    async fn list_streams(
        &self,
        after: Option<&StreamId>,
        limit: usize,
    ) -> StoreResult<Vec<crate::StreamInfo>> {
        self.inner.list_streams(after, limit).await
    }
    async fn stream_info(&self, stream: &StreamId) -> StoreResult<crate::StreamInfo> {
        self.inner.stream_info(stream).await
    }
    async fn status(&self) -> StoreResult<crate::StoreStatus> {
        self.inner.status().await
    }
    async fn import_events(
        &self,
        stream: &StreamId,
        owner: &StreamOwner,
        events: &[crate::StoredEvent],
        close: bool,
    ) -> StoreResult<u64> {
        self.hook.before(Op::Append).await?;
        self.inner.import_events(stream, owner, events, close).await
    }
    async fn watch(&self, stream: &StreamId) -> StoreResult<WakeUps> {
        self.hook.before(Op::Watch).await?;
        self.inner.watch(stream).await
    }
    async fn commit(&self, batch: WriteBatch) -> StoreResult<BatchOutcome> {
        self.hook.before(Op::Commit).await?;
        self.hook.batch(&batch);
        self.inner.commit(batch).await
    }
}

/// `len` printable bytes that do not compress. PostgreSQL compresses long index entries, so
/// a repetitive key would fit its index where a client's real id of the same length does
/// not: tests of long client input use this.
pub fn incompressible(len: usize) -> String {
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15 ^ len as u64;
    (0..len)
        .map(|_| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            char::from(b'!' + ((state >> 33) % 94) as u8)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// A minimal in-crate store is not available here (backends depend on this crate), so
    /// the hooks are tested directly; the wrapper is exercised by the engine and HTTP tests.
    #[tokio::test]
    async fn counter_counts_by_kind_and_take_resets() {
        let counter = Counter::default();
        for op in [Op::Append, Op::Append, Op::ReadAfter, Op::PutRecord] {
            counter.before(op).await.expect("counting never fails");
        }
        assert_eq!(
            (
                counter.count(Op::Append),
                counter.count(Op::ReadAfter),
                counter.writes()
            ),
            (2, 1, 3)
        );
        let taken = counter.take();
        assert_eq!(
            taken,
            BTreeMap::from([(Op::Append, 2), (Op::ReadAfter, 1), (Op::PutRecord, 1)])
        );
        assert_eq!(counter.writes(), 0);
    }

    #[tokio::test]
    async fn gate_holds_until_released_and_fails_exactly_as_told() {
        let gate = Arc::new(Gate::default());
        gate.hold(Op::Append);
        let held = tokio::spawn({
            let gate = gate.clone();
            async move { gate.before(Op::Append).await }
        });
        tokio::time::timeout(Duration::from_secs(5), gate.until_waiting(Op::Append, 1))
            .await
            .expect("held");
        assert!(!held.is_finished(), "a held operation does not pass");
        gate.before(Op::ReadAfter).await.expect("other kinds pass");
        gate.release(Op::Append);
        held.await.expect("join").expect("released");
        assert_eq!(gate.waiting(Op::Append), 0);
        gate.fail(Op::PutRecord, 1);
        let err = gate.before(Op::PutRecord).await.expect_err("failed");
        assert!(matches!(err, StoreError::Unavailable(_)), "{err}");
        gate.before(Op::PutRecord).await.expect("only once");
        assert_eq!(gate.failed(Op::PutRecord), 1);
    }
}
