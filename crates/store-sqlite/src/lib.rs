//! The SQLite store: the embedded default of durable-mcp.
//!
//! - **WAL** journal, `synchronous=FULL` by default (configurable): a commit survives a
//!   process kill and, with FULL, a power loss.
//! - **Group commit**: one writer thread takes every write queued while the previous
//!   transaction committed and commits them together, so concurrent appenders share one
//!   fsync instead of queueing behind each other's.
//! - **Readers never block behind the writer's transactions**: reads use their own
//!   connections and see the last committed snapshot (WAL); while commits overlap their
//!   fsync, a read returns once what it saw is on disk.
//! - **Journal records** (`put_record` and friends) are writer jobs like every other write,
//!   so two conditional writes on one key are ordered and only the first can win; an
//!   expired row counts as absent and `prune` deletes it.
//! - **Write batches** (`Store::commit`) are one writer job in one savepoint: they share the
//!   group's commit, and a refused op rolls back its batch alone.
//! - A versioned schema with forward migrations; a newer database is refused.
//!
//! - **Commit and fsync overlapped** (FULL, Linux): while a store is the file's one user, a
//!   group's `fsync` runs on a thread of its own while the writer runs the next group; the
//!   group is answered, its tails woken and its data returned to readers only after its
//!   `fsync`, so durability is FULL's. Stores sharing a file take turns through an
//!   open-file-description lock on `<db>-durable-mcp.lock` (see `pipeline.rs`).
//!
//! Live tails in this process are woken by the writer after each commit (after its `fsync`);
//! other processes sharing the file are seen by a periodic re-read (`poll_interval`).
//!
//! The writer's group commits and the WAL `fsync`s that make them durable are counted as
//! the metrics [`COMMITS`] and [`SYNCS`] (recorded where a `metrics` recorder is installed).

mod counters;
mod error;
mod migrate;
mod pipeline;
mod records;
mod sessions;
mod streams;
mod writer;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use durable_mcp_store::{
    BatchOutcome, EventId, Expect, Principal, PruneReport, Record, RecordKind, Retention,
    SchemaVersion, SessionChange, SessionId, SessionRecord, Setting, Store, StoreError,
    StoreResult, StoreStatus, StreamId, StreamInfo, StreamOwner, StreamRead, WakeUps, WriteBatch,
    now_ms,
};
use rusqlite::{Connection, OpenFlags};

pub use counters::{COMMITS, SYNCS};
pub use migrate::LATEST as SCHEMA_VERSION;

/// How hard a commit waits for the disk (`PRAGMA synchronous`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Synchronous {
    /// fsync on every commit: survives power loss (default).
    #[default]
    Full,
    /// fsync at checkpoints: survives a process crash, may lose the last commits on power loss.
    Normal,
    /// Never fsync: for tests and benchmarks only.
    Off,
}

impl Synchronous {
    fn pragma(self) -> &'static str {
        match self {
            Synchronous::Full => "FULL",
            Synchronous::Normal => "NORMAL",
            Synchronous::Off => "OFF",
        }
    }
}

/// Settings of the SQLite store.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct SqliteOptions {
    /// The database file.
    pub path: PathBuf,
    /// Durability of each commit.
    pub synchronous: Synchronous,
    /// Keep at most this many events per stream (older ones are pruned, D14).
    pub max_events_per_stream: Option<u64>,
    /// How often live tails re-read, to see commits by other processes on the same file.
    pub poll_interval: Duration,
}

impl SqliteOptions {
    /// Defaults for the database at `path`.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            synchronous: Synchronous::Full,
            max_events_per_stream: None,
            poll_interval: Duration::from_secs(1),
        }
    }

    /// Parse `sqlite:PATH[?synchronous=full|normal|off&max_events=N]`.
    pub fn from_url(url: &str) -> Result<Self, StoreError> {
        let rest = url
            .strip_prefix("sqlite:")
            .ok_or_else(|| StoreError::Incompatible(format!("not a sqlite URL: {url}")))?;
        let rest = rest.strip_prefix("//").unwrap_or(rest);
        let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
        if path.is_empty() {
            return Err(StoreError::Incompatible("sqlite URL has no path".into()));
        }
        let mut options = Self::new(path);
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            match pair.split_once('=') {
                Some(("synchronous", v)) => {
                    options.synchronous = match v.to_ascii_lowercase().as_str() {
                        "full" => Synchronous::Full,
                        "normal" => Synchronous::Normal,
                        "off" => Synchronous::Off,
                        other => {
                            return Err(StoreError::Incompatible(format!(
                                "unknown synchronous mode {other:?}"
                            )));
                        }
                    }
                }
                Some(("max_events", v)) => {
                    let max: u64 = v
                        .parse()
                        .map_err(|_| StoreError::Incompatible(format!("bad max_events {v:?}")))?;
                    if max == 0 {
                        return Err(StoreError::Incompatible(
                            "max_events must be at least 1".into(),
                        ));
                    }
                    options.max_events_per_stream = Some(max);
                }
                _ => {
                    return Err(StoreError::Incompatible(format!(
                        "unknown sqlite URL option {pair:?}"
                    )));
                }
            }
        }
        Ok(options)
    }
}

/// The most reader connections open at once. Reads beyond wait for one, instead of opening
/// more: every connection costs file handles, and SQLite cannot close the handle of a
/// connection closed while others in the process hold locks on the file (POSIX lock
/// semantics), so a burst of extra connections would leave their handles open for the
/// process's lifetime.
pub const MAX_READERS: usize = 8;

pub(crate) struct Shared {
    options: SqliteOptions,
    readers: Mutex<Vec<Connection>>,
    /// One permit per reader connection that may exist ([`MAX_READERS`]).
    reader_slots: Arc<tokio::sync::Semaphore>,
    watchers: writer::Watchers,
    /// How far commits are synced: a read returns once what it saw is on disk. It holds
    /// the store's counters of commits and syncs too.
    synced: Arc<pipeline::Synced>,
}

/// The SQLite store. Cheap to clone; all clones share one writer thread.
#[derive(Clone)]
pub struct SqliteStore {
    shared: Arc<Shared>,
    writer: writer::WriterHandle,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.shared.options.path)
            .finish_non_exhaustive()
    }
}

/// Prepared statements kept per connection.
const STATEMENT_CACHE: usize = 128;

pub(crate) fn open_connection(
    path: &Path,
    synchronous: Synchronous,
) -> Result<Connection, StoreError> {
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
        | OpenFlags::SQLITE_OPEN_CREATE
        | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(path, flags).map_err(error::from_sqlite)?;
    conn.busy_timeout(Duration::from_secs(5))
        .map_err(error::from_sqlite)?;
    conn.pragma_update(None, "journal_mode", "WAL")
        .map_err(error::from_sqlite)?;
    conn.pragma_update(None, "synchronous", synchronous.pragma())
        .map_err(error::from_sqlite)?;
    conn.pragma_update(None, "foreign_keys", "ON")
        .map_err(error::from_sqlite)?;
    // Statement journals (a statement that may fail half-way inside a savepoint, as every
    // write of a group commit is) in memory, not a temporary file created and removed on
    // every commit; they never outlive their transaction, so nothing durable is lost.
    conn.pragma_update(None, "temp_store", "MEMORY")
        .map_err(error::from_sqlite)?;
    // Room for every statement the store prepares (about 40): rusqlite keeps 16 by default,
    // and the writer, which runs most of them in every group commit, re-parsed the ones
    // evicted each time.
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    Ok(conn)
}

impl SqliteStore {
    /// Open (creating and migrating if needed) the database described by `options`.
    pub async fn open(options: SqliteOptions) -> Result<Self, StoreError> {
        let opts = options.clone();
        let watchers = writer::Watchers::default();
        let counters = Arc::new(counters::Counters::default());
        let synced = Arc::new(pipeline::Synced::new(Arc::clone(&counters)));
        let (for_pipeline, watched) = (Arc::clone(&synced), watchers.clone());
        let (conn, pipeline) = tokio::task::spawn_blocking(move || {
            let real = pipeline::real_path(&opts.path).map_err(|e| {
                StoreError::Unavailable(format!("sqlite: {}: {e}", opts.path.display()).into())
            })?;
            // Before anything is read: waits (within `pipeline::HOLD`, unless the holder is
            // stuck) for a store overlapping its fsyncs on this file to give it back.
            let joined = pipeline::Joined::join(&real)?;
            let mut conn = open_connection(&opts.path, opts.synchronous)?;
            migrate::migrate(&mut conn)?;
            let pipeline = pipeline::Pipeline::start(
                joined,
                &real,
                opts.synchronous == Synchronous::Full,
                for_pipeline,
                watched,
            )?;
            Ok::<_, StoreError>((conn, pipeline))
        })
        .await
        .map_err(|e| StoreError::Unavailable(Box::new(e)))??;
        let counting = writer::Counting {
            counters: Arc::clone(&counters),
            full: options.synchronous == Synchronous::Full,
        };
        let writer = writer::spawn(
            conn,
            options.max_events_per_stream,
            watchers.clone(),
            pipeline,
            counting,
        )?;
        let reader_slots = Arc::new(tokio::sync::Semaphore::new(MAX_READERS));
        let shared = Arc::new(Shared {
            options,
            readers: Mutex::new(Vec::new()),
            reader_slots,
            watchers,
            synced,
        });
        Ok(Self { shared, writer })
    }

    /// Open the store named by a `sqlite:` URL.
    pub async fn open_url(url: &str) -> Result<Self, StoreError> {
        Self::open(SqliteOptions::from_url(url)?).await
    }

    /// Whether this store's last group commit overlapped its `fsync` with the next group's
    /// work (`synchronous=FULL`, and no other store has the file open; see the crate docs).
    pub fn fsync_overlapped(&self) -> bool {
        self.shared.synced.overlapping()
    }

    /// Tests: the group commits and syncs counted so far.
    #[cfg(test)]
    pub(crate) fn counted(&self) -> (u64, u64) {
        self.shared.synced.counters().read()
    }

    /// Run `f` on a reader connection (a snapshot of the last commit; never waits for the
    /// writer's transaction, only, while commits overlap their fsync, for the fsync of what
    /// it saw). At most [`MAX_READERS`] run at once, each on a pooled connection (opened on
    /// first use and kept). It returns once every commit it may have seen is on disk.
    pub(crate) async fn read<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> Result<T, StoreError> + Send + 'static,
    {
        let shared = self.shared.clone();
        let slot = shared
            .reader_slots
            .clone()
            .acquire_owned()
            .await
            .map_err(|e| StoreError::Unavailable(Box::new(e)))?;
        let synced = Arc::clone(&shared.synced);
        let result = tokio::task::spawn_blocking(move || {
            let _slot = slot;
            let pooled = shared
                .readers
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .pop();
            let mut conn = match pooled {
                Some(conn) => conn,
                None => open_connection(&shared.options.path, shared.options.synchronous)?,
            };
            let result = f(&mut conn);
            // A slot holder either took a pooled connection or opened one while fewer than
            // MAX_READERS existed, so the pool never exceeds it.
            shared
                .readers
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(conn);
            result
        })
        .await
        .map_err(|e| StoreError::Unavailable(Box::new(e)))?;
        // What it read, or what its error says (a stream pruned, a session ended), may come
        // from a commit whose fsync is still running (pipeline.rs).
        synced.settle().await?;
        result
    }
}

#[async_trait]
impl Store for SqliteStore {
    fn backend(&self) -> &'static str {
        "sqlite"
    }

    async fn create_session(&self, record: SessionRecord) -> StoreResult<()> {
        self.writer
            .submit(writer::Op::CreateSession(record))
            .await
            .map(drop)
    }

    async fn load_session(
        &self,
        principal: &Principal,
        id: &SessionId,
    ) -> StoreResult<SessionRecord> {
        // Every request of a session reads it first: the writer answers it between two
        // group commits (see `writer::Op::LoadSession`).
        match self
            .writer
            .submit(writer::Op::LoadSession {
                principal: principal.clone(),
                id: id.clone(),
            })
            .await?
        {
            writer::Reply::Session(record) => Ok(*record),
            _ => Err(StoreError::Corrupt("unexpected writer reply".into())),
        }
    }

    async fn update_session(
        &self,
        principal: &Principal,
        id: &SessionId,
        change: SessionChange,
    ) -> StoreResult<SessionRecord> {
        let op = writer::Op::UpdateSession {
            principal: principal.clone(),
            id: id.clone(),
            change,
        };
        match self.writer.submit(op).await? {
            writer::Reply::Session(record) => Ok(*record),
            _ => Err(StoreError::Corrupt("unexpected writer reply".into())),
        }
    }

    async fn end_session(&self, principal: &Principal, id: &SessionId) -> StoreResult<bool> {
        match self
            .writer
            .submit(writer::Op::EndSession {
                principal: principal.clone(),
                id: id.clone(),
            })
            .await?
        {
            writer::Reply::Bool(ended) => Ok(ended),
            _ => Err(StoreError::Corrupt("unexpected writer reply".into())),
        }
    }

    async fn list_sessions(
        &self,
        principal: Option<&Principal>,
        limit: usize,
    ) -> StoreResult<Vec<SessionRecord>> {
        let principal = principal.cloned();
        self.read(move |conn| sessions::list(conn, principal.as_ref(), limit))
            .await
    }

    /// A sequence of writer jobs of at most [`durable_mcp_store::PRUNE_BATCH`] removals of
    /// each kind: the single writer serves the request path's writes between them.
    async fn prune(&self, retention: &Retention, now_ms: u64) -> StoreResult<PruneReport> {
        let mut report = PruneReport::default();
        loop {
            match self
                .writer
                .submit(writer::Op::Prune {
                    retention: retention.clone(),
                    now_ms,
                })
                .await?
            {
                writer::Reply::Pruned(batch, more) => {
                    report.add(batch);
                    if !more {
                        return Ok(report);
                    }
                }
                _ => return Err(StoreError::Corrupt("unexpected writer reply".into())),
            }
        }
    }

    /// One read transaction on a reader connection (one snapshot), with the prune's own
    /// conditions. Counted as the writer's prune counts: a finished stream of a session the
    /// prune ends is deleted by age in the same transaction, so it counts as deleted.
    async fn prune_preview(&self, retention: &Retention, now_ms: u64) -> StoreResult<PruneReport> {
        let retention = retention.clone();
        self.read(move |conn| {
            let tx = conn.transaction().map_err(error::from_sqlite)?;
            let report = PruneReport {
                sessions_ended: match retention.session_idle_ttl_ms {
                    Some(ttl) => sessions::count_idle(&tx, now_ms.saturating_sub(ttl))?,
                    None => 0,
                },
                streams_deleted: match retention.max_stream_age_ms {
                    Some(age) => streams::count_finished(&tx, now_ms.saturating_sub(age))?,
                    None => 0,
                },
                records_expired: records::count_expired(&tx, now_ms)?,
            };
            tx.commit().map_err(error::from_sqlite)?;
            Ok(report)
        })
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
        let op = writer::Op::PutRecord {
            kind,
            key: key.to_owned(),
            value,
            expires_at_ms,
            expect,
        };
        match self.writer.submit(op).await? {
            writer::Reply::Count(version) => Ok(version),
            _ => Err(StoreError::Corrupt("unexpected writer reply".into())),
        }
    }

    async fn get_record(&self, kind: RecordKind, key: &str) -> StoreResult<Option<Record>> {
        let key = key.to_owned();
        self.read(move |conn| records::get(conn, kind, &key, now_ms()))
            .await
    }

    async fn list_records(
        &self,
        kind: RecordKind,
        prefix: &str,
        limit: usize,
    ) -> StoreResult<Vec<Record>> {
        let prefix = prefix.to_owned();
        self.read(move |conn| records::list(conn, kind, &prefix, limit, now_ms()))
            .await
    }

    /// A sequence of writer jobs of at most [`durable_mcp_store::PRUNE_BATCH`] records, as
    /// for `prune`: a session's thousands of aliases never make one transaction.
    async fn delete_records(&self, kind: RecordKind, prefix: &str) -> StoreResult<u64> {
        let mut total = 0;
        loop {
            match self
                .writer
                .submit(writer::Op::DeleteRecords {
                    kind,
                    prefix: prefix.to_owned(),
                })
                .await?
            {
                writer::Reply::Deleted(deleted, more) => {
                    total += deleted;
                    if !more {
                        return Ok(total);
                    }
                }
                _ => return Err(StoreError::Corrupt("unexpected writer reply".into())),
            }
        }
    }

    async fn create_stream(&self, id: &StreamId, owner: &StreamOwner) -> StoreResult<()> {
        self.writer
            .submit(writer::Op::CreateStream {
                id: id.clone(),
                owner: owner.clone(),
            })
            .await
            .map(drop)
    }

    async fn append(&self, stream: &StreamId, data: String, close: bool) -> StoreResult<EventId> {
        match self
            .writer
            .submit(writer::Op::Append {
                stream: stream.clone(),
                data,
                close,
            })
            .await?
        {
            writer::Reply::Event(id) => Ok(id),
            _ => Err(StoreError::Corrupt("unexpected writer reply".into())),
        }
    }

    async fn stream_owner(&self, stream: &StreamId) -> StoreResult<StreamOwner> {
        let stream = stream.clone();
        self.read(move |conn| streams::owner(conn, &stream)).await
    }

    async fn read_after(
        &self,
        stream: &StreamId,
        after: u64,
        limit: usize,
    ) -> StoreResult<StreamRead> {
        let stream = stream.clone();
        self.read(move |conn| streams::read_after(conn, &stream, after, limit))
            .await
    }

    /// # Durability
    /// One writer job, so one savepoint inside the writer's group commit: the batch shares
    /// the fsync of every write queued with it, and a refused op rolls back to the
    /// savepoint, taking the batch's earlier ops with it and leaving the other jobs alone.
    async fn commit(&self, batch: WriteBatch) -> StoreResult<BatchOutcome> {
        if batch.is_empty() {
            return Ok(BatchOutcome::default());
        }
        match self.writer.submit(writer::Op::Batch(batch)).await? {
            writer::Reply::Batch(outcome) => Ok(outcome),
            _ => Err(StoreError::Corrupt("unexpected writer reply".into())),
        }
    }

    async fn list_streams(
        &self,
        after: Option<&StreamId>,
        limit: usize,
    ) -> StoreResult<Vec<StreamInfo>> {
        let after = after.cloned();
        self.read(move |conn| streams::list(conn, after.as_ref(), limit))
            .await
    }

    async fn stream_info(&self, stream: &StreamId) -> StoreResult<StreamInfo> {
        let stream = stream.clone();
        self.read(move |conn| streams::info(conn, &stream)).await
    }

    async fn status(&self) -> StoreResult<StoreStatus> {
        self.read(|conn| {
            let pragma = |name: &str| {
                conn.query_row(&format!("PRAGMA {name}"), [], |row| {
                    row.get::<_, rusqlite::types::Value>(0)
                })
                .map_err(error::from_sqlite)
            };
            let found = match pragma("user_version")? {
                rusqlite::types::Value::Integer(v) => v,
                other => {
                    return Err(StoreError::Corrupt(format!(
                        "PRAGMA user_version: {other:?}"
                    )));
                }
            };
            let synchronous = match pragma("synchronous")? {
                rusqlite::types::Value::Integer(0) => "OFF",
                rusqlite::types::Value::Integer(1) => "NORMAL",
                rusqlite::types::Value::Integer(2) => "FULL",
                rusqlite::types::Value::Integer(3) => "EXTRA",
                _ => "unknown",
            };
            let journal = match pragma("journal_mode")? {
                rusqlite::types::Value::Text(mode) => mode,
                other => format!("{other:?}"),
            };
            Ok(StoreStatus {
                schema: Some(SchemaVersion {
                    found,
                    expected: SCHEMA_VERSION,
                }),
                server_time_ms: None,
                settings: judge_settings(synchronous, journal),
            })
        })
        .await
    }

    async fn import_events(
        &self,
        stream: &StreamId,
        owner: &StreamOwner,
        events: &[durable_mcp_store::StoredEvent],
        close: bool,
    ) -> StoreResult<u64> {
        let op = writer::Op::Import {
            stream: stream.clone(),
            owner: owner.clone(),
            events: events.to_vec(),
            close,
        };
        match self.writer.submit(op).await? {
            writer::Reply::Count(appended) => Ok(appended),
            _ => Err(StoreError::Corrupt("unexpected writer reply".into())),
        }
    }

    async fn watch(&self, stream: &StreamId) -> StoreResult<WakeUps> {
        Ok(self
            .shared
            .watchers
            .watch(stream, self.shared.options.poll_interval))
    }
}

/// The settings that decide whether a commit survives a crash, judged: `synchronous`
/// below FULL loses acknowledged commits on a power loss, a journal mode other than WAL
/// (a file system without shared memory) blocks readers behind the writer.
fn judge_settings(synchronous: &str, journal: String) -> Vec<Setting> {
    let synchronous = match synchronous {
        "OFF" => Setting::weak(
            "synchronous",
            synchronous,
            "commits are not flushed to disk: an operating system crash or power loss can lose acknowledged events and corrupt the database",
            "remove `synchronous=off` from the sqlite: URL (FULL is the default)",
        ),
        "NORMAL" => Setting::weak(
            "synchronous",
            synchronous,
            "in WAL mode the last commits before a power loss or operating system crash can be lost (a process crash loses nothing)",
            "remove `synchronous=normal` from the sqlite: URL (FULL is the default)",
        ),
        _ => Setting::fine("synchronous", synchronous),
    };
    let journal = if journal.eq_ignore_ascii_case("wal") {
        Setting::fine("journal_mode", journal)
    } else {
        Setting::weak(
            "journal_mode",
            journal,
            "readers block the writer and group commit is lost",
            "let durable-mcp open the file (it sets WAL)",
        )
    };
    vec![synchronous, journal]
}

#[cfg(test)]
mod judged {
    fn weak(synchronous: &str, journal: &str) -> Vec<String> {
        super::judge_settings(synchronous, journal.into())
            .into_iter()
            .filter(|s| s.weakness.is_some())
            .map(|s| s.name)
            .collect()
    }

    #[test]
    fn synchronous_below_full_and_a_journal_other_than_wal_are_flagged() {
        assert!(weak("FULL", "wal").is_empty());
        assert!(weak("EXTRA", "wal").is_empty());
        assert_eq!(weak("NORMAL", "wal"), ["synchronous"]);
        assert_eq!(weak("OFF", "wal"), ["synchronous"]);
        assert_eq!(weak("FULL", "delete"), ["journal_mode"]);
    }
}

#[cfg(test)]
mod tests;
