//! The store contract of durable-mcp.
//!
//! Every backend (in-memory, SQLite, PostgreSQL, Redis) implements [`Store`]; the engine
//! and the transports know only this trait. Each operation states its guarantee under a
//! `# Durability` heading, naming the guarantee of `docs/guarantees.md` (D1..D15) it implements.
//! Several writes that must land together go in one [`WriteBatch`], committed all or nothing
//! by [`Store::commit`].

mod admin;
mod batch;
mod ci;
mod error;
mod ids;
mod journal;
mod record;
mod redact;
pub mod wake;

#[cfg(feature = "contract-tests")]
pub mod contract;

#[cfg(any(test, feature = "testing"))]
pub mod testing;

use std::time::{SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use futures::stream::BoxStream;

pub use admin::{SchemaVersion, Setting, StoreStatus, StreamInfo, Weakness};
pub use batch::{BatchOp, BatchOutcome, OpOutcome, WriteBatch, op_failed};
pub use ci::in_ci;
pub use error::{StoreError, StoreErrorKind, StoreResult};
pub use ids::{EventId, IdError, Principal, SessionId, StreamId};
pub use journal::{Expect, MAX_PLAIN_KEY_PART, Record, RecordKind, key_part, prefix_end};
pub use record::{
    DELIVERY_EPOCHS, Delivery, DeliveryEpoch, PRUNE_BATCH, PruneReport, Retention, SessionChange,
    SessionRecord, StoredEvent, StreamOwner, StreamRead,
};
pub use redact::{is_key_value, is_secret_name, redact_url};

/// Milliseconds since the Unix epoch, the clock every record uses.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// A stream of wake-ups: each item means "the watched stream may have new events or may
/// have closed; read again". Wake-ups may be spurious or coalesced, never lost after the
/// subscription was created.
pub type WakeUps = BoxStream<'static, ()>;

/// The durable state of a durable-mcp deployment.
///
/// Implementations are shared by every worker of a deployment: anything committed through
/// one handle is visible to every other handle on the same backend once the call returns.
#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// A short name for logs and errors (`memory`, `sqlite`, ...).
    fn backend(&self) -> &'static str;

    // ----- sessions ---------------------------------------------------------------------

    /// Create a session.
    ///
    /// # Durability
    /// The session, and its standalone stream, are committed when this returns (D4): any
    /// worker can load it from then on.
    async fn create_session(&self, record: SessionRecord) -> StoreResult<()>;

    /// Load a live session of `principal`.
    ///
    /// # Durability
    /// Returns the last committed state. Sessions that ended, expired or belong to another
    /// principal are [`StoreError::NotFound`] (D5, D13).
    async fn load_session(
        &self,
        principal: &Principal,
        id: &SessionId,
    ) -> StoreResult<SessionRecord>;

    /// Apply one change to a session and return the new record.
    ///
    /// # Durability
    /// The change is atomic with respect to concurrent changes from any worker: no update
    /// is lost (D4). Ended sessions are [`StoreError::NotFound`].
    async fn update_session(
        &self,
        principal: &Principal,
        id: &SessionId,
        change: SessionChange,
    ) -> StoreResult<SessionRecord>;

    /// End a session; returns whether it was live.
    ///
    /// # Durability
    /// Once this returns, every worker's `load_session` answers `NotFound` (D5), and the
    /// session's streams are closed so live tails end.
    async fn end_session(&self, principal: &Principal, id: &SessionId) -> StoreResult<bool>;

    /// Live sessions, oldest first, at most `limit`; only `principal`'s when given.
    ///
    /// # Durability
    /// A snapshot of committed sessions; for operators and the CLI.
    async fn list_sessions(
        &self,
        principal: Option<&Principal>,
        limit: usize,
    ) -> StoreResult<Vec<SessionRecord>>;

    // ----- streams and events -----------------------------------------------------------

    /// Create an empty stream owned by `owner`.
    ///
    /// # Durability
    /// Committed when this returns.
    async fn create_stream(&self, id: &StreamId, owner: &StreamOwner) -> StoreResult<()>;

    /// Append one event and return its id.
    ///
    /// # Durability
    /// In plain words: when this returns, the event is committed and will be replayed to
    /// anyone who resumes before it. Stated more precisely: the returned id names a
    /// committed event (D1); ids on one stream are strictly increasing with no gaps, and
    /// readers never observe an event with a larger sequence before every smaller one is
    /// visible (D3). Appending to a closed stream is [`StoreError::StreamClosed`]. If
    /// `close` is true the stream is closed in the same commit (the final response).
    async fn append(&self, stream: &StreamId, data: String, close: bool) -> StoreResult<EventId>;

    /// Look up who owns a stream.
    ///
    /// # Durability
    /// Unknown streams (never created, pruned with their session) are `NotFound`.
    async fn stream_owner(&self, stream: &StreamId) -> StoreResult<StreamOwner>;

    /// Read committed events with sequence greater than `after`, at most `limit` of them.
    ///
    /// # Durability
    /// Returns an exact, gap-free, duplicate-free prefix of the suffix after `after` (D3).
    /// If events after `after` were pruned, this is [`StoreError::Pruned`], never a
    /// silently shortened stream (D14).
    async fn read_after(
        &self,
        stream: &StreamId,
        after: u64,
        limit: usize,
    ) -> StoreResult<StreamRead>;

    /// Apply retention (D14): end sessions idle past the TTL (with their streams), and
    /// delete finished streams older than the maximum age. `now_ms` is the clock to judge by.
    ///
    /// # Durability
    /// In plain words: nothing still needed is removed. Precisely: a stream that is not
    /// closed (its request still running, or a session's standalone stream) is only removed
    /// with its session; a session is only removed when idle past the TTL. Each removal is
    /// atomic: afterwards every worker answers `NotFound` for what was removed (D5).
    /// Journal records whose expiry has passed are deleted too. A backend removes at most
    /// [`PRUNE_BATCH`] of each kind per transaction, and goes on until nothing due is left.
    async fn prune(&self, retention: &Retention, now_ms: u64) -> StoreResult<PruneReport>;

    /// What [`prune`](Store::prune) with `retention` at `now_ms` would remove, removing
    /// nothing: the report it would return (`durable-mcp prune --dry-run`).
    ///
    /// # Durability
    /// Reads only, writes nothing (D14): afterwards the store is exactly as it was. Stated
    /// more precisely: each backend counts with its `prune`'s own selection (idle sessions,
    /// finished streams past the age, expired records), and counts a finished stream that
    /// goes with an ended session the way its `prune` does. The counts equal what a `prune`
    /// then reports when nothing is written in between and at most [`PRUNE_BATCH`] of each
    /// kind are due; with more, a prune's later batches may judge a stream of an idle
    /// session differently. Rows a prune would skip because another transaction holds them
    /// (PostgreSQL) are counted.
    async fn prune_preview(&self, retention: &Retention, now_ms: u64) -> StoreResult<PruneReport>;

    // ----- journal records --------------------------------------------------------------

    /// Write a record under a condition and return its new version.
    ///
    /// # Durability
    /// In plain words: the write is committed when this returns, and two writers racing on
    /// one key cannot both succeed. Precisely: with [`Expect::Absent`] the write succeeds
    /// only if no unexpired record has the key (the first commit wins, D8); with
    /// [`Expect::Version`] only if the stored version is exactly that one (a lease or a
    /// task moves on only from the state it was read in, D7, D10). A failed condition is
    /// [`StoreError::Conflict`] (for `Version`, also when the record is gone). Expired
    /// records count as absent.
    async fn put_record(
        &self,
        kind: RecordKind,
        key: &str,
        value: String,
        expires_at_ms: Option<u64>,
        expect: Expect,
    ) -> StoreResult<u64>;

    /// Read one record; `None` if it does not exist or has expired.
    ///
    /// # Durability
    /// Returns the last committed version.
    async fn get_record(&self, kind: RecordKind, key: &str) -> StoreResult<Option<Record>>;

    /// Unexpired records of `kind` whose key starts with `prefix`, in key order, at most
    /// `limit`.
    ///
    /// # Durability
    /// A snapshot of committed records; each record is whole (never half of a write).
    async fn list_records(
        &self,
        kind: RecordKind,
        prefix: &str,
        limit: usize,
    ) -> StoreResult<Vec<Record>>;

    /// Delete every record of `kind` whose key starts with `prefix` (a full key deletes
    /// one record); returns how many unexpired records were deleted.
    ///
    /// # Durability
    /// Committed when this returns, in transactions of at most [`PRUNE_BATCH`] records: a
    /// large prefix never holds the store in one transaction, and a failure may leave part
    /// of it (deleting again finishes the job). Use [`WriteBatch::delete_records`] for a
    /// delete that must be atomic with other writes.
    async fn delete_records(&self, kind: RecordKind, prefix: &str) -> StoreResult<u64>;

    // ----- atomic batches ---------------------------------------------------------------

    /// Commit every op of `batch`, in order, as one store operation, and return what each
    /// produced (event ids, record versions) in the batch's order.
    ///
    /// # Durability
    /// In plain words: all of the batch or none of it. When this returns `Ok`, every op is
    /// committed; when it returns an error, none is, and no reader ever saw part of it.
    ///
    /// Stated more precisely: the ops are applied in order, each seeing the effects of the
    /// ones before it (an append may follow the creation of its stream, a put may follow a
    /// delete of its key), with the same conditions as the single-op methods: an
    /// [`Expect`] that does not hold is a conflict (D7, D8), an append to a closed or
    /// unknown stream is refused (D3). If any op is refused, the call fails with
    /// [`StoreError::BatchOp`] naming the op's index and why, and nothing of the batch is
    /// written; a store failure is [`StoreError::Unavailable`] and also writes nothing
    /// (D15). A successful batch becomes visible to other readers at one instant: a
    /// concurrent reader sees all of it or none of it, and the events it appends get the
    /// next sequences of their streams, gap-free (D1, D3). Tails of the streams it appends
    /// to or closes are woken once per batch, after the commit. An empty batch succeeds
    /// and writes nothing.
    async fn commit(&self, batch: WriteBatch) -> StoreResult<BatchOutcome>;

    // ----- operators ----------------------------------------------------------------------

    /// Streams in id order, after `after` (exclusive) when given, at most `limit`: every
    /// stream the store holds (of live sessions, and sessionless ones), for `dump`, `copy`
    /// and `stats`.
    ///
    /// # Durability
    /// A snapshot of committed streams; each summary is whole.
    async fn list_streams(
        &self,
        after: Option<&StreamId>,
        limit: usize,
    ) -> StoreResult<Vec<StreamInfo>>;

    /// One stream's summary; unknown streams are [`StoreError::NotFound`].
    ///
    /// # Durability
    /// The last committed state of the stream.
    async fn stream_info(&self, stream: &StreamId) -> StoreResult<StreamInfo>;

    /// The store's schema version, its server clock and the settings that matter for
    /// durability (for `/readyz` and `durable-mcp doctor`). One cheap round trip or a few;
    /// a store that does not answer is [`StoreError::Unavailable`].
    ///
    /// # Durability
    /// Reads only.
    async fn status(&self) -> StoreResult<StoreStatus>;

    /// Import events of `stream` with their ids, as `dump`/`load` and `copy` move them
    /// between stores: creates the stream for `owner` if it does not exist, skips the
    /// events it already holds (sequence at most its last one), appends the rest, and
    /// closes the stream with the last of them if `close`. Returns how many were appended.
    ///
    /// # Durability
    /// In plain words: the ids a client saw before a move name the same events after it,
    /// so a resume with `Last-Event-ID` gets exactly the rest (D3). Stated more precisely:
    /// each appended event is committed with the sequence it carries; the new events must
    /// continue the stream without a gap (the first one `last_seq + 1`), or the call is
    /// [`StoreError::Refused`] and appends nothing more. Interrupted and called again with
    /// the same events, it appends only the missing ones (a resumable copy loses and
    /// duplicates nothing). A stream that holds no event yet may start at any sequence (the
    /// first retained event of a trimmed source; reads before it are then
    /// [`StoreError::Pruned`]) on backends that override this (SQLite, PostgreSQL, memory:
    /// one transaction per call); the provided implementation appends one event at a time
    /// and refuses such a stream.
    async fn import_events(
        &self,
        stream: &StreamId,
        owner: &StreamOwner,
        events: &[StoredEvent],
        close: bool,
    ) -> StoreResult<u64> {
        let info = match self.stream_info(stream).await {
            Ok(info) => info,
            Err(StoreError::NotFound { .. }) => {
                self.create_stream(stream, owner).await?;
                self.stream_info(stream).await?
            }
            Err(error) => return Err(error),
        };
        let fresh: Vec<&StoredEvent> = events
            .iter()
            .filter(|event| event.id.seq > info.last_seq)
            .collect();
        let mut appended = 0;
        for (i, event) in fresh.iter().enumerate() {
            let expected = info.last_seq + 1 + appended;
            if event.id.seq != expected {
                return Err(import_gap(stream, expected, event.id.seq));
            }
            let last = i + 1 == fresh.len();
            let id = self
                .append(stream, event.data.clone(), close && last)
                .await?;
            if id.seq != event.id.seq {
                return Err(StoreError::Corrupt(format!(
                    "imported event {} landed as {id}",
                    event.id
                )));
            }
            appended += 1;
        }
        Ok(appended)
    }

    /// Subscribe to wake-ups for `stream`. Subscribe *before* reading, then read after each
    /// wake-up: an append committed after the subscription wakes it (from any worker).
    async fn watch(&self, stream: &StreamId) -> StoreResult<WakeUps>;
}

/// The refusal of [`Store::import_events`] when the events do not continue the stream.
pub fn import_gap(stream: &StreamId, expected: u64, got: u64) -> StoreError {
    StoreError::Refused(format!("importing stream {stream}: event {got} does not continue the stream (expected {expected})").into())
}
