//! The PostgreSQL store: one database shared by many durable-mcp workers.
//!
//! - **Commits are durable when a call returns**: every write is a PostgreSQL transaction
//!   (or a single atomic statement), committed before the call answers (D1); nothing
//!   half-written is ever visible (D15).
//! - **Gap-free event logs**: appends to one stream serialize on the stream's row lock and
//!   commit in sequence order, so readers never skip an event (D3; see [`Store::append`]).
//! - **Live tails across workers** with `LISTEN`/`NOTIFY`: each [`PgStore`] keeps one
//!   listening connection; appends notify in their transaction (see [`Store::watch`]).
//! - **Fail fast, heal by itself** (D15): connections come from a small pool, every
//!   operation is bounded by a timeout, a broken connection is replaced on next use, and
//!   connection failures are [`Unavailable`](durable_mcp_store::StoreError::Unavailable).
//! - **Writes are group-committed** (`Store::commit`, `Store::append`): a writer task runs
//!   what concurrent callers commit as one statement (a function of the schema runs their
//!   ops), so they share one commit and one round trip.
//! - A versioned schema with forward migrations under an advisory lock; a database written
//!   by a newer durable-mcp is refused ([`Incompatible`](durable_mcp_store::StoreError::Incompatible)).
//!
//! ```no_run
//! # async fn demo() -> Result<(), durable_mcp_store::StoreError> {
//! use durable_mcp_store_postgres::PgStore;
//! let store = PgStore::open_url("postgres://postgres@127.0.0.1:5432/app?schema=mcp").await?;
//! # drop(store); Ok(()) }
//! ```
//!
//! # Durability
//! Event logs, in plain words: a reader never skips an event, not even one that commits
//! after the reader already saw a later one, because no later one can be visible first.
//!
//! Stated more precisely: an append is a single statement that takes the next sequence
//! from its stream row (`UPDATE streams SET last_seq = last_seq + 1 ... RETURNING`) and
//! inserts the event. The `UPDATE` holds the row lock until the append commits, so a
//! second append to the same stream waits for the first to commit and then reads the
//! incremented `last_seq`: appends to one stream commit one at a time, in sequence order.
//! (Appends committed together by the group commit are one statement that locks their
//! streams' rows, `FOR UPDATE` in id order, before it numbers and inserts their events:
//! the same row locks, held the same way until the commit.) PostgreSQL makes a transaction visible before it releases its locks, so by the time
//! append *n+1* can even take its sequence, append *n* is visible to every new snapshot. A
//! read is one statement, so one snapshot: if it sees event *n+1* it sees every event up to
//! *n* as well. `events WHERE stream = $1 AND seq > $2 ORDER BY seq` is therefore always a
//! gap-free prefix of the suffix after `$2` (D3), and a failed append (rolled back) leaves
//! no trace and consumes no sequence (D1, D15).
//!
//! Live tails: see the `watch` method of [`PgStore`]'s `Store` implementation. Sessions:
//! each change is one transaction, and `update_session` locks the row (`FOR UPDATE`), so
//! concurrent changes from any worker never lose one (D4). Journal records: each write is
//! one conditional statement (`INSERT ... ON CONFLICT DO UPDATE ... WHERE` expired, or
//! `UPDATE ... WHERE version = $n`), so of racing writers exactly one writes and the others
//! are refused with `Conflict` (D7, D8).

mod batch;
mod error;
mod listen;
mod migrate;
mod options;
mod pool;
mod records;
mod sessions;
mod streams;
mod tls;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use durable_mcp_store::{
    BatchOutcome, EventId, Expect, Principal, PruneReport, Record, RecordKind, Retention,
    SessionChange, SessionId, SessionRecord, Store, StoreError, StoreResult, StreamId, StreamOwner,
    StreamRead, WakeUps, WriteBatch, now_ms,
};

pub use error::PgFailure;
pub use migrate::LATEST as SCHEMA_VERSION;
pub use options::{DEFAULT_CHANNEL, PgOptions, is_key_value};
pub use tls::SslMode;

use crate::error::{from_pg, unavailable};

/// A `u64` (milliseconds, sequences) as PostgreSQL's `BIGINT`, saturating.
pub(crate) fn to_i64(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// Run `operation`, failing it as unavailable after `timeout` (D15: fail fast).
async fn timed<T>(
    timeout: Duration,
    operation: impl Future<Output = StoreResult<T>>,
) -> StoreResult<T> {
    timed_until(tokio::time::Instant::now() + timeout, timeout, operation).await
}

/// Run `operation`, failing it as unavailable at `deadline`, the end of `timeout`.
async fn timed_until<T>(
    deadline: tokio::time::Instant,
    timeout: Duration,
    operation: impl Future<Output = StoreResult<T>>,
) -> StoreResult<T> {
    tokio::time::timeout_at(deadline, operation)
        .await
        .unwrap_or_else(|_| {
            Err(unavailable(format!(
                "PostgreSQL did not answer within {timeout:?}"
            )))
        })
}

struct Shared {
    options: PgOptions,
    channel: String,
    pool: pool::Pool,
    watchers: listen::Watchers,
    _listener: listen::Listener,
    writer: batch::Writer,
}

/// The PostgreSQL store. Cheap to clone; clones share one pool and one listener.
///
/// Each `PgStore` opened (typically one per worker process) has its own pool and its own
/// listening connection; all of them see each other's commits and wake each other's tails.
#[derive(Clone)]
pub struct PgStore {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore")
            .field("target", &self.shared.options.target())
            .field("schema", &self.shared.options.schema)
            .finish_non_exhaustive()
    }
}

impl PgStore {
    /// Connect, migrate the schema to [`SCHEMA_VERSION`] and start listening.
    ///
    /// Fails with [`Unavailable`](durable_mcp_store::StoreError::Unavailable) within the
    /// connect timeout if the server cannot be reached, and with
    /// [`Incompatible`](durable_mcp_store::StoreError::Incompatible) if the database was written
    /// by a newer durable-mcp or the options are invalid.
    pub async fn open(options: PgOptions) -> StoreResult<Self> {
        options.validate()?;
        let pool = pool::Pool::new(options.clone());
        {
            let mut guard = pool.get().await?;
            let result = timed(
                options.admin_timeout,
                migrate::migrate(&mut guard.conn().client, options.schema.as_deref()),
            )
            .await;
            guard.settle(result)?;
        }
        let watchers = listen::Watchers::default();
        let listener = listen::start(options.clone(), watchers.clone()).await?;
        tracing::info!(target_db = %options.target(), schema = options.schema.as_deref().unwrap_or(""), "postgres store open");
        let channel = options.channel();
        let shared = Arc::new_cyclic(|weak| {
            let writer = batch::spawn(weak.clone());
            Shared {
                options,
                channel,
                pool,
                watchers,
                _listener: listener,
                writer,
            }
        });
        Ok(Self { shared })
    }

    /// Open the store named by a `postgres://` URL (see [`PgOptions::from_url`]).
    pub async fn open_url(url: &str) -> StoreResult<Self> {
        Self::open(PgOptions::from_url(url)?).await
    }

    /// Bring the schema up to [`SCHEMA_VERSION`] (done by [`Self::open`]; safe to run
    /// again, and from many workers at once) and return the version.
    pub async fn migrate(&self) -> StoreResult<i64> {
        let schema = self.shared.options.schema.as_deref();
        let mut guard = self.shared.pool.get().await?;
        let result = timed(
            self.shared.options.admin_timeout,
            migrate::migrate(&mut guard.conn().client, schema),
        )
        .await;
        guard.settle(result)
    }

    /// The options this store was opened with.
    pub fn options(&self) -> &PgOptions {
        &self.shared.options
    }
}

/// Run one operation on a pooled connection within the operation timeout, waiting for
/// the connection (and checking or opening it) included: `op!(self, conn => body)`, where
/// `body` is a future using `conn: &mut pool::Conn`. `op!(self, admin, conn => body)` uses
/// the maintenance timeout instead (prune, listings, imports).
macro_rules! op {
    ($store:expr, $conn:ident => $body:expr) => {
        op!(@within $store, $store.shared.options.op_timeout, $conn => $body)
    };
    ($store:expr, admin, $conn:ident => $body:expr) => {
        op!(@within $store, $store.shared.options.admin_timeout, $conn => $body)
    };
    (@within $store:expr, $timeout:expr, $conn:ident => $body:expr) => {{
        let shared = &$store.shared;
        let timeout = $timeout;
        let deadline = tokio::time::Instant::now() + timeout;
        let mut guard = tokio::time::timeout_at(deadline, shared.pool.get())
            .await
            .map_err(|_| unavailable(format!("no PostgreSQL connection answered within {timeout:?}")))??;
        let result = {
            let $conn = guard.conn();
            timed_until(deadline, timeout, $body).await
        };
        guard.settle(result)
    }};
}

#[async_trait]
impl Store for PgStore {
    fn backend(&self) -> &'static str {
        "postgres"
    }

    async fn create_session(&self, record: SessionRecord) -> StoreResult<()> {
        op!(self, conn => sessions::create(conn, &record))
    }

    async fn load_session(
        &self,
        principal: &Principal,
        id: &SessionId,
    ) -> StoreResult<SessionRecord> {
        op!(self, conn => sessions::load(conn, principal, id))
    }

    async fn update_session(
        &self,
        principal: &Principal,
        id: &SessionId,
        change: SessionChange,
    ) -> StoreResult<SessionRecord> {
        op!(self, conn => sessions::update(conn, principal, id, &change, now_ms()))
    }

    /// # Durability
    /// The session, its streams and their events go in one transaction (D5). Tails of
    /// those streams in this process end at once; tails on other workers are woken by the
    /// notification sent at commit, and their next read answers `NotFound`.
    /// A transaction per [`durable_mcp_store::PRUNE_BATCH`] streams of the session, the
    /// session row with the last: none holds locks (or the notification queue) long,
    /// however many streams the session made. All are gone when this returns.
    async fn end_session(&self, principal: &Principal, id: &SessionId) -> StoreResult<bool> {
        const LIMIT: i64 = durable_mcp_store::PRUNE_BATCH as i64;
        let mut going_on = false;
        loop {
            match op!(self, conn => sessions::end(conn, principal, id, &self.shared.channel, LIMIT))?
            {
                sessions::Ending::NotFound => return Ok(going_on),
                sessions::Ending::Ended(gone) => {
                    self.shared.watchers.forget(&gone);
                    return Ok(true);
                }
                sessions::Ending::More(gone) => {
                    self.shared.watchers.forget(&gone);
                    going_on = true;
                }
            }
        }
    }

    async fn list_sessions(
        &self,
        principal: Option<&Principal>,
        limit: usize,
    ) -> StoreResult<Vec<SessionRecord>> {
        op!(self, admin, conn => sessions::list(conn, principal, limit))
    }

    async fn create_stream(&self, id: &StreamId, owner: &StreamOwner) -> StoreResult<()> {
        op!(self, conn => streams::insert(&conn.client, &mut conn.statements, id, owner))
    }

    /// # Durability
    /// One atomic statement, group-committed with what other callers commit at the same
    /// time (see the `batch` module) and answered after the commit (D1). Appends to one
    /// stream take their sequence under the stream's row lock and so commit in sequence
    /// order: no reader on any worker can see event *n+1* before event *n* (D3). The
    /// notification that wakes other workers' tails is part of the same commit.
    async fn append(&self, stream: &StreamId, data: String, close: bool) -> StoreResult<EventId> {
        let outcome = self
            .shared
            .writer
            .commit(batch::Work::Append {
                stream: stream.clone(),
                data,
                close,
            })
            .await?;
        outcome
            .event(0)
            .cloned()
            .ok_or_else(|| StoreError::Corrupt("an append without its event id".into()))
    }

    async fn stream_owner(&self, stream: &StreamId) -> StoreResult<StreamOwner> {
        op!(self, conn => streams::owner(conn, stream))
    }

    /// # Durability
    /// The stream row and its events come from one snapshot: the answer is an exact,
    /// gap-free prefix of the suffix after `after` (D3), or `StoreError::Pruned` if part
    /// of that suffix was trimmed by `max_events` (D14).
    async fn read_after(
        &self,
        stream: &StreamId,
        after: u64,
        limit: usize,
    ) -> StoreResult<StreamRead> {
        op!(self, conn => streams::read_after(conn, stream, after, limit))
    }

    /// # Durability
    /// A sequence of transactions, each of at most [`durable_mcp_store::PRUNE_BATCH`] idle
    /// sessions with their streams, finished streams past the age limit and expired journal
    /// records: none holds locks (or the notification queue) long. Rows another
    /// transaction holds at that moment (a session being changed, a stream being appended
    /// to, a record being written, a concurrent prune's) are skipped and left for the next
    /// prune. Tails of deleted streams are woken everywhere and then read `NotFound`.
    async fn prune(&self, retention: &Retention, now_ms: u64) -> StoreResult<PruneReport> {
        const LIMIT: i64 = durable_mcp_store::PRUNE_BATCH as i64;
        let channel = &self.shared.channel;
        let mut report = PruneReport::default();
        loop {
            let (batch, gone, more) = op!(self, admin, conn => async {
                let pool::Conn { client, statements, .. } = conn;
                let tx = client.transaction().await.map_err(from_pg)?;
                let mut batch = PruneReport::default();
                let mut gone = Vec::new();
                let mut more = false;
                if let Some(ttl) = retention.session_idle_ttl_ms {
                    let (ended, streams, left) = sessions::prune_idle(&tx, statements, now_ms.saturating_sub(ttl), LIMIT).await?;
                    more |= left;
                    batch.sessions_ended = ended;
                    gone.extend(streams);
                }
                if let Some(age) = retention.max_stream_age_ms {
                    let deleted = streams::prune_finished(&tx, statements, now_ms.saturating_sub(age), LIMIT).await?;
                    more |= deleted.len() as i64 == LIMIT;
                    batch.streams_deleted = deleted.len() as u64;
                    gone.extend(deleted);
                }
                streams::removed(&tx, statements, channel, &gone).await?;
                batch.records_expired = records::prune_expired(&tx, statements, now_ms, LIMIT).await?;
                more |= batch.records_expired as i64 == LIMIT;
                tx.commit().await.map_err(from_pg)?;
                Ok((batch, gone, more))
            })?;
            self.shared.watchers.forget(&gone);
            report.add(batch);
            if !more {
                return Ok(report);
            }
        }
    }

    /// # Durability
    /// One read-only transaction at `REPEATABLE READ` (one snapshot), with the prune's own
    /// conditions; it takes no row lock, so it counts the rows a prune would skip as locked.
    async fn prune_preview(&self, retention: &Retention, now_ms: u64) -> StoreResult<PruneReport> {
        op!(self, admin, conn => async {
            let pool::Conn { client, statements, .. } = conn;
            let tx = client
                .build_transaction()
                .read_only(true)
                .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
                .start()
                .await
                .map_err(from_pg)?;
            let idle_cutoff = retention.session_idle_ttl_ms.map(|ttl| now_ms.saturating_sub(ttl));
            let sessions_ended = match idle_cutoff {
                Some(cutoff) => sessions::count_idle(&tx, statements, cutoff).await?,
                None => 0,
            };
            let streams_deleted = match retention.max_stream_age_ms {
                Some(age) => {
                    streams::count_finished(&tx, statements, now_ms.saturating_sub(age), idle_cutoff).await?
                }
                None => 0,
            };
            let records_expired = records::count_expired(&tx, statements, now_ms).await?;
            tx.commit().await.map_err(from_pg)?;
            Ok(PruneReport { sessions_ended, streams_deleted, records_expired })
        })
    }

    /// # Durability
    /// One statement whose condition is part of it: of writers racing on one key exactly one
    /// commits (D8), a version moves on only from the version the writer read (D7), and a
    /// failed condition writes nothing and is `StoreError::Conflict`.
    async fn put_record(
        &self,
        kind: RecordKind,
        key: &str,
        value: String,
        expires_at_ms: Option<u64>,
        expect: Expect,
    ) -> StoreResult<u64> {
        op!(self, conn => records::put(conn, kind, key, &value, expires_at_ms, expect))
    }

    async fn get_record(&self, kind: RecordKind, key: &str) -> StoreResult<Option<Record>> {
        op!(self, conn => records::get(conn, kind, key, now_ms()))
    }

    async fn list_records(
        &self,
        kind: RecordKind,
        prefix: &str,
        limit: usize,
    ) -> StoreResult<Vec<Record>> {
        op!(self, admin, conn => records::list(conn, kind, prefix, limit, now_ms()))
    }

    /// A sequence of statements of at most [`durable_mcp_store::PRUNE_BATCH`] records, each
    /// its own transaction: a session's thousands of aliases never make one transaction.
    async fn delete_records(&self, kind: RecordKind, prefix: &str) -> StoreResult<u64> {
        const LIMIT: i64 = durable_mcp_store::PRUNE_BATCH as i64;
        let mut total = 0;
        loop {
            let (deleted, more) =
                op!(self, conn => records::delete_some(conn, kind, prefix, LIMIT, now_ms()))?;
            total += deleted;
            if !more {
                return Ok(total);
            }
        }
    }

    /// # Durability
    /// Group-committed with what concurrent callers commit: one transaction (see the
    /// `batch` module). A refused op refuses its own batch only, and nothing of that batch
    /// is written; answered after the commit (D1, D15).
    async fn commit(&self, batch: WriteBatch) -> StoreResult<BatchOutcome> {
        if batch.is_empty() {
            return Ok(BatchOutcome::default());
        }
        self.shared.writer.commit(batch::Work::Batch(batch)).await
    }

    /// # Durability
    /// Wake-ups come from appends by any worker (via `NOTIFY`), from this process's own
    /// appends at once, after the listener reconnects, and at least every `poll_interval`:
    /// an append committed after this returns always wakes the subscription, at worst one
    /// `poll_interval` late. The wake-ups end when this process ends the stream's session.
    async fn list_streams(
        &self,
        after: Option<&durable_mcp_store::StreamId>,
        limit: usize,
    ) -> StoreResult<Vec<durable_mcp_store::StreamInfo>> {
        op!(self, admin, conn => streams::list(conn, after, limit))
    }

    async fn stream_info(
        &self,
        stream: &durable_mcp_store::StreamId,
    ) -> StoreResult<durable_mcp_store::StreamInfo> {
        op!(self, conn => streams::info(conn, stream))
    }

    async fn status(&self) -> StoreResult<durable_mcp_store::StoreStatus> {
        op!(self, conn => migrate::status(conn))
    }

    async fn import_events(
        &self,
        stream: &StreamId,
        owner: &StreamOwner,
        events: &[durable_mcp_store::StoredEvent],
        close: bool,
    ) -> StoreResult<u64> {
        let channel = &self.shared.channel;
        let appended =
            op!(self, admin, conn => streams::import(conn, channel, stream, owner, events, close))?;
        if appended > 0 {
            // Local tails need not wait for the notification's round trip.
            self.shared.watchers.wake(stream);
        }
        Ok(appended)
    }

    async fn watch(&self, stream: &StreamId) -> StoreResult<WakeUps> {
        Ok(self
            .shared
            .watchers
            .watch(stream, self.shared.options.poll_interval))
    }
}

#[cfg(test)]
mod tests;
