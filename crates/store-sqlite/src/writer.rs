//! The single writer thread and its group commit.
//!
//! Every write is a job on a queue. The writer takes the first job, then every job queued
//! meanwhile (up to `MAX_BATCH`), runs them all in one `BEGIN IMMEDIATE` transaction, commits
//! once, and only then answers each job and wakes the tails of the streams it touched. A job
//! is therefore answered only after its data is committed (D1), and N concurrent appenders
//! cost one commit, not N. With `synchronous=FULL`, a group's `fsync` overlaps the next
//! group's work where the file allows it (see `pipeline.rs`): the group is then answered
//! after its `fsync`, by the syncing thread or, when no next group waits, by the writer.

use std::collections::HashSet;
use std::sync::Arc;

use durable_mcp_store::{
    BatchOp, BatchOutcome, EventId, Expect, OpOutcome, PRUNE_BATCH, Principal, PruneReport,
    RecordKind, Retention, SessionChange, SessionId, SessionRecord, StoreError, StreamId,
    StreamOwner, WriteBatch, now_ms, op_failed,
};
use rusqlite::Connection;
use std::sync::mpsc;
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

use crate::counters::Counters;
use crate::pipeline::{Item, Pipeline, deliver};
use crate::{error::from_sqlite, records, sessions, streams};

const MAX_BATCH: usize = 1024;

/// A write.
pub(crate) enum Op {
    CreateSession(SessionRecord),
    UpdateSession {
        principal: Principal,
        id: SessionId,
        change: SessionChange,
    },
    EndSession {
        principal: Principal,
        id: SessionId,
    },
    CreateStream {
        id: StreamId,
        owner: StreamOwner,
    },
    Append {
        stream: StreamId,
        data: String,
        close: bool,
    },
    /// One batch of a prune: at most `PRUNE_BATCH` of each kind.
    Prune {
        retention: Retention,
        now_ms: u64,
    },
    PutRecord {
        kind: RecordKind,
        key: String,
        value: String,
        expires_at_ms: Option<u64>,
        expect: Expect,
    },
    /// One job of `Store::delete_records`: at most `PRUNE_BATCH` records.
    DeleteRecords {
        kind: RecordKind,
        prefix: String,
    },
    /// A [`WriteBatch`]: one job, so one savepoint: all of it or nothing.
    Batch(WriteBatch),
    /// A point read of the hot path (the session a request names), answered before the
    /// next group's transaction: it reads what was committed, on the connection whose page
    /// cache is the freshest, without a reader connection or a thread of the blocking pool.
    LoadSession {
        principal: Principal,
        id: SessionId,
    },
    /// `Store::import_events`: one job, so all of the events or none.
    Import {
        stream: StreamId,
        owner: StreamOwner,
        events: Vec<durable_mcp_store::StoredEvent>,
        close: bool,
    },
}

impl Op {
    fn is_read(&self) -> bool {
        matches!(self, Op::LoadSession { .. })
    }
}

/// What a write returns.
pub(crate) enum Reply {
    Unit,
    Session(Box<SessionRecord>),
    Bool(bool),
    Event(EventId),
    /// A prune batch's removals, and whether more may be due.
    Pruned(PruneReport, bool),
    /// The new version of a record, or how many records were deleted.
    Count(u64),
    /// How many unexpired records a delete job removed, and whether more may be left.
    Deleted(u64, bool),
    Batch(BatchOutcome),
}

struct Job {
    op: Op,
    reply: oneshot::Sender<Result<Reply, StoreError>>,
}

/// Sends jobs to the writer thread.
#[derive(Clone)]
pub(crate) struct WriterHandle {
    tx: mpsc::Sender<Job>,
}

impl WriterHandle {
    pub(crate) async fn submit(&self, op: Op) -> Result<Reply, StoreError> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(Job { op, reply })
            .map_err(|_| StoreError::Unavailable("the sqlite writer has stopped".into()))?;
        rx.await
            .map_err(|_| StoreError::Unavailable("the sqlite writer has stopped".into()))?
    }
}

pub(crate) use durable_mcp_store::wake::Watchers;

/// What the writer counts, and whether its connection is `synchronous=FULL` when its
/// commits do not overlap their `fsync` (then SQLite syncs each commit itself).
pub(crate) struct Counting {
    pub(crate) counters: Arc<Counters>,
    pub(crate) full: bool,
}

/// Start the writer thread on `conn`; `pipeline` overlaps each group's `fsync` with the
/// next group (FULL only).
pub(crate) fn spawn(
    conn: Connection,
    max_events: Option<u64>,
    watchers: Watchers,
    pipeline: Option<Pipeline<Reply>>,
    counting: Counting,
) -> Result<WriterHandle, StoreError> {
    let (tx, rx) = mpsc::channel();
    std::thread::Builder::new()
        .name("durable-mcp-sqlite-writer".into())
        .spawn(move || run(conn, &rx, max_events, &watchers, pipeline, &counting))
        .map_err(|e| StoreError::Unavailable(Box::new(e)))?;
    Ok(WriterHandle { tx })
}

/// The next job; `None` once every handle is gone. A writer that holds the file to itself
/// and has nothing to do gives it back after [`crate::pipeline::HOLD`].
fn next_job(
    rx: &mpsc::Receiver<Job>,
    conn: &Connection,
    pipeline: &mut Option<Pipeline<Reply>>,
) -> Option<Job> {
    if let Some(pipeline) = pipeline.as_mut()
        && let Some(wait) = pipeline.idle_for()
    {
        match rx.recv_timeout(wait) {
            Ok(job) => return Some(job),
            Err(mpsc::RecvTimeoutError::Timeout) => pipeline.give_back(conn),
            Err(mpsc::RecvTimeoutError::Disconnected) => return None,
        }
    }
    rx.recv().ok()
}

/// The WAL size at which the writer checkpoints it whole and empties it (D14).
const WAL_CHECKPOINT_AT: u64 = 32 << 20;

/// How often the writer looks at the WAL's size while it writes.
const WAL_CHECK_EVERY: Duration = Duration::from_millis(100);

/// Keeps the WAL bounded under a load that never pauses. SQLite's own checkpoints (every
/// 1,000 pages, at a commit) copy what no reader still needs, but never start the WAL over
/// while readers come and go without a gap: it then grows with the load. Past
/// [`WAL_CHECKPOINT_AT`], the writer runs a `TRUNCATE` checkpoint between two groups: it
/// waits (up to the busy timeout) for the readers of older snapshots, copies the rest and
/// empties the file. Nothing is lost: the copy is synced before the WAL is cut.
struct WalBound {
    wal: Option<std::path::PathBuf>,
    next_check: Instant,
}

impl WalBound {
    fn new(conn: &Connection) -> Self {
        let wal = conn
            .path()
            .filter(|p| !p.is_empty())
            .map(|p| std::path::PathBuf::from(format!("{p}-wal")));
        Self {
            wal,
            next_check: Instant::now(),
        }
    }

    fn after_group(&mut self, conn: &Connection) {
        let Some(wal) = &self.wal else { return };
        let now = Instant::now();
        if now < self.next_check {
            return;
        }
        self.next_check = now + WAL_CHECK_EVERY;
        let Ok(size) = std::fs::metadata(wal).map(|m| m.len()) else {
            return;
        };
        if size < WAL_CHECKPOINT_AT {
            return;
        }
        match conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |row| {
            Ok((row.get::<_, i64>(0)?, row.get::<_, i64>(1)?))
        }) {
            Ok((0, frames)) => {
                tracing::debug!(size, frames, elapsed = ?now.elapsed(), "sqlite WAL checkpointed and emptied")
            }
            Ok((_, frames)) => tracing::warn!(
                size,
                frames,
                "sqlite WAL checkpoint: readers held it past the busy timeout; trying again"
            ),
            Err(error) => {
                tracing::warn!(%error, size, "sqlite WAL checkpoint failed; trying again")
            }
        }
    }
}

fn run(
    mut conn: Connection,
    rx: &mpsc::Receiver<Job>,
    max_events: Option<u64>,
    watchers: &Watchers,
    mut pipeline: Option<Pipeline<Reply>>,
    counting: &Counting,
) {
    let mut wal_bound = WalBound::new(&conn);
    let mut batch = Vec::with_capacity(MAX_BATCH);
    let mut writes = Vec::with_capacity(MAX_BATCH);
    // A job taken off the queue to see whether any was waiting (after an overlapped commit).
    let mut waiting = None;
    while let Some(first) = waiting
        .take()
        .or_else(|| next_job(rx, &conn, &mut pipeline))
    {
        batch.push(first);
        // The job that woke this thread is rarely alone: the task that sent it is usually
        // in the middle of a burst of requests, and on a busy core the wake-up preempts it
        // before it has sent the rest. Letting it run first (a no-op when nothing else is
        // runnable) puts the burst into this commit instead of one commit each.
        std::thread::yield_now();
        while batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        if let Some(Err(error)) = pipeline.as_ref().map(Pipeline::broken) {
            fail_all(&mut batch, &error);
            continue;
        }
        let overlap = pipeline
            .as_mut()
            .is_some_and(|pipeline| pipeline.before_group(&conn));
        let syncer = pipeline.as_ref().filter(|_| overlap);
        // Reads first, outside the transaction: they see every group committed before
        // them, and none of this one (which a reader may not see before it commits). While
        // groups overlap their fsync, a read may have seen one not yet synced: it is
        // answered after that fsync.
        for job in batch.drain(..) {
            if job.op.is_read() {
                let result = read(&conn, &job.op);
                match syncer {
                    Some(syncer) => syncer.answer_read((job.reply, result)),
                    None => {
                        let _ = job.reply.send(result);
                    }
                }
            } else {
                writes.push(job);
            }
        }
        std::mem::swap(&mut batch, &mut writes);
        if batch.is_empty() {
            continue;
        }
        let mut touched = HashSet::new();
        let mut gone = Vec::new();
        let mut seq = None;
        let outcome = (|| {
            let tx = conn
                .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
                .map_err(from_sqlite)?;
            let mut results = Vec::with_capacity(batch.len());
            for job in &batch {
                // Each job in its own savepoint: a job that fails half-way leaves nothing
                // behind, and the others still commit (D15: nothing half-written).
                let mut job_touched = HashSet::new();
                let mut job_gone = Vec::new();
                run_cached(&tx, "SAVEPOINT job")?;
                let result = apply(&tx, &job.op, max_events, &mut job_touched, &mut job_gone);
                if tx.is_autocommit() {
                    // SQLite aborted the whole transaction (disk full, I/O error): fail the batch.
                    return Err(StoreError::Unavailable(
                        "sqlite rolled the batch back".into(),
                    ));
                }
                if result.is_ok() {
                    run_cached(&tx, "RELEASE job")?;
                    touched.extend(job_touched);
                    gone.extend(job_gone);
                } else {
                    run_cached(&tx, "ROLLBACK TO job")?;
                    run_cached(&tx, "RELEASE job")?;
                }
                results.push(result);
            }
            seq = syncer.map(Pipeline::begin_commit);
            tx.commit().map_err(from_sqlite)?;
            // Overlapped, the connection is NORMAL and the store syncs (counted there).
            counting.counters.committed(counting.full && !overlap);
            Ok::<_, StoreError>(results)
        })();
        match (outcome, syncer.zip(seq)) {
            (Ok(results), Some((syncer, seq))) => {
                // Answered, and its tails woken, once its fsync is done: by the syncing
                // thread while the writer goes on with the next group, or here when there
                // is none to go on with.
                let answers = batch.drain(..).map(|job| job.reply).zip(results).collect();
                waiting = rx.try_recv().ok();
                syncer.finish(seq, waiting.is_none(), watchers, touched, gone, answers);
            }
            (Ok(results), None) => deliver(
                watchers,
                &touched,
                &gone,
                batch.drain(..).map(|job| job.reply).zip(results),
            ),
            (Err(error), numbered) => {
                // Nothing of this batch was committed: every job fails, none half-done (D15).
                tracing::warn!(%error, jobs = batch.len(), "sqlite group commit failed");
                fail_all(&mut batch, &error);
                if let Some((syncer, seq)) = numbered {
                    // Its number was taken: let the synced count pass it.
                    syncer.hand_over(Item::Group {
                        seq,
                        answers: Vec::new(),
                        touched: HashSet::new(),
                        gone: Vec::new(),
                    });
                }
            }
        }
        wal_bound.after_group(&conn);
    }
}

/// Answer every job of `batch` with `error` (as `Unavailable`: none of it was done).
fn fail_all(batch: &mut Vec<Job>, error: &StoreError) {
    // The cause alone: `Unavailable` says "store unavailable" itself.
    let message = match error {
        StoreError::Unavailable(cause) => cause.to_string(),
        other => other.to_string(),
    };
    for job in batch.drain(..) {
        let _ = job
            .reply
            .send(Err(StoreError::Unavailable(message.clone().into())));
    }
}

fn read(conn: &Connection, op: &Op) -> Result<Reply, StoreError> {
    match op {
        Op::LoadSession { principal, id } => {
            sessions::load(conn, principal, id).map(|r| Reply::Session(Box::new(r)))
        }
        _ => Err(StoreError::Corrupt("not a read".into())),
    }
}

/// Run a statement without parameters from the connection's statement cache (a savepoint
/// command of every job: parsed once, not once per job).
fn run_cached(conn: &Connection, sql: &str) -> Result<(), StoreError> {
    conn.prepare_cached(sql)
        .and_then(|mut statement| statement.execute([]))
        .map(drop)
        .map_err(from_sqlite)
}

fn apply(
    tx: &Connection,
    op: &Op,
    max_events: Option<u64>,
    touched: &mut HashSet<StreamId>,
    gone: &mut Vec<StreamId>,
) -> Result<Reply, StoreError> {
    match op {
        Op::CreateSession(record) => {
            sessions::insert(tx, record)?;
            let owner = StreamOwner {
                principal: record.principal.clone(),
                session: Some(record.id.clone()),
            };
            streams::insert(tx, &record.standalone_stream, &owner)?;
            Ok(Reply::Unit)
        }
        Op::UpdateSession {
            principal,
            id,
            change,
        } => sessions::update(tx, principal, id, change).map(|r| Reply::Session(Box::new(r))),
        Op::EndSession { principal, id } => {
            let (ended, streams) = sessions::end(tx, principal, id)?;
            gone.extend(streams);
            Ok(Reply::Bool(ended))
        }
        Op::CreateStream { id, owner } => {
            if let Some(session) = &owner.session
                && !sessions::exists(tx, session)?
            {
                return Err(StoreError::not_found("session"));
            }
            streams::insert(tx, id, owner).map(|()| Reply::Unit)
        }
        Op::Prune { retention, now_ms } => {
            let mut report = PruneReport::default();
            let mut more = false;
            if let Some(ttl) = retention.session_idle_ttl_ms {
                let idle = sessions::idle(tx, now_ms.saturating_sub(ttl), PRUNE_BATCH)?;
                more |= idle.len() == PRUNE_BATCH;
                for (principal, id) in idle {
                    let (ended, streams) = sessions::end(tx, &principal, &id)?;
                    report.sessions_ended += u64::from(ended);
                    gone.extend(streams);
                }
            }
            if let Some(age) = retention.max_stream_age_ms {
                let deleted = streams::prune_finished(tx, now_ms.saturating_sub(age), PRUNE_BATCH)?;
                more |= deleted.len() == PRUNE_BATCH;
                report.streams_deleted += deleted.len() as u64;
                gone.extend(deleted);
            }
            // Streams of sessions ended earlier (counted with their sessions, not here).
            let dropped = streams::drop_ended(tx, PRUNE_BATCH)?;
            more |= dropped.len() == PRUNE_BATCH;
            gone.extend(dropped);
            report.records_expired = records::prune_expired(tx, *now_ms, PRUNE_BATCH)?;
            more |= report.records_expired == PRUNE_BATCH as u64;
            Ok(Reply::Pruned(report, more))
        }
        Op::Append {
            stream,
            data,
            close,
        } => {
            let id = streams::append(tx, stream, data, *close, max_events)?;
            touched.insert(stream.clone());
            Ok(Reply::Event(id))
        }
        // Expiry is judged at the write itself: the writer orders every write, so the
        // first commit on a key wins (D8) and a version moves on only once (D7).
        Op::PutRecord {
            kind,
            key,
            value,
            expires_at_ms,
            expect,
        } => {
            records::put(tx, *kind, key, value, *expires_at_ms, *expect, now_ms()).map(Reply::Count)
        }
        Op::DeleteRecords { kind, prefix } => {
            records::delete_some(tx, *kind, prefix, PRUNE_BATCH, now_ms())
                .map(|(deleted, more)| Reply::Deleted(deleted, more))
        }
        Op::LoadSession { .. } => read(tx, op),
        Op::Import {
            stream,
            owner,
            events,
            close,
        } => {
            if !streams::exists(tx, stream)? {
                if let Some(session) = &owner.session
                    && !sessions::exists(tx, session)?
                {
                    return Err(StoreError::not_found("session"));
                }
                streams::insert(tx, stream, owner)?;
            }
            let appended = streams::import(tx, stream, events, *close)?;
            if appended > 0 {
                touched.insert(stream.clone());
            }
            Ok(Reply::Count(appended))
        }
        Op::Batch(batch) => {
            // The job's savepoint makes the batch all or nothing: a refused op returns an
            // error and `run` rolls back to the savepoint, undoing the ops before it.
            let mut outcome = BatchOutcome {
                ops: Vec::with_capacity(batch.len()),
            };
            for (index, op) in batch.ops().iter().enumerate() {
                let result = apply_batch_op(tx, op, max_events).map_err(|e| match e {
                    StoreError::Unavailable(_)
                    | StoreError::Corrupt(_)
                    | StoreError::Incompatible(_) => e,
                    refusal => op_failed(index, op, refusal),
                })?;
                outcome.ops.push(result);
            }
            touched.extend(batch.woken_streams());
            Ok(Reply::Batch(outcome))
        }
    }
}

fn apply_batch_op(
    tx: &Connection,
    op: &BatchOp,
    max_events: Option<u64>,
) -> Result<OpOutcome, StoreError> {
    match op {
        BatchOp::CreateStream { id, owner } => {
            if let Some(session) = &owner.session
                && !sessions::exists(tx, session)?
            {
                return Err(StoreError::not_found("session"));
            }
            streams::insert(tx, id, owner).map(|()| OpOutcome::Created)
        }
        BatchOp::Append { stream, data } => {
            streams::append(tx, stream, data, false, max_events).map(OpOutcome::Appended)
        }
        BatchOp::Close { stream } => streams::close(tx, stream).map(|()| OpOutcome::Closed),
        BatchOp::PutRecord {
            kind,
            key,
            value,
            expires_at_ms,
            expect,
        } => records::put(tx, *kind, key, value, *expires_at_ms, *expect, now_ms())
            .map(OpOutcome::Put),
        BatchOp::DeleteRecord { kind, key, version } => {
            records::delete_version(tx, *kind, key, *version, now_ms())
                .map(|()| OpOutcome::Deleted(1))
        }
        BatchOp::DeleteRecords { kind, prefix } => {
            records::delete(tx, *kind, prefix, now_ms()).map(OpOutcome::Deleted)
        }
    }
}
