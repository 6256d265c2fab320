//! Write batches ([`Store::commit`](durable_mcp_store::Store::commit)) and single appends,
//! group-committed.
//!
//! Every [`PgStore`](crate::PgStore) has one writer task. Work (a batch, or one append) is
//! queued to it; the writer takes the first job waiting and every job queued meanwhile (up
//! to [`MAX_GROUP`]) and commits them in one PostgreSQL transaction, then answers each
//! caller. Concurrent callers therefore share one commit (one WAL flush, and one turn at
//! the lock PostgreSQL takes to order the `NOTIFY`s of committing transactions) instead of
//! paying one each. One group commits at a time while the next gathers; the callers just
//! answered get to join the next one (see [`YIELDS`]).
//!
//! A group is one statement, so one round trip and one transaction of its own (no
//! `BEGIN`, no `COMMIT`):
//! - one op alone is its own statement ([`sql`]);
//! - jobs that are one append each are all one statement ([`streams::APPEND_MANY`]),
//!   whatever their number;
//! - anything else is one call of the schema's `dmcp_commit` function ([`COMMIT`], created
//!   by migration 3), which runs every op of every job in order, each through `dmcp_op`.
//!
//! # Durability
//! In plain words: a batch is all or nothing, it stands or falls alone whatever it is
//! grouped with, and it is answered only once committed.
//!
//! Stated more precisely: the statement applies the group's jobs in order, and its commit
//! holds exactly the jobs answered with success. A refused op (a failed
//! [`Expect`](durable_mcp_store::Expect), an append to a closed or unknown stream, a
//! session that does not exist, ...) refuses its job with [`StoreError::BatchOp`] (a
//! single append: with the refusal itself) and takes nothing of it into the commit:
//! - every op checks before it writes, so a refused op wrote nothing, and a job of one op
//!   that is refused leaves nothing behind while the other jobs go on;
//! - the ops of a job of several run in a block of their own (a subtransaction): the first
//!   refusal, or a value the server refuses (SQLSTATE classes 22 and 54), rolls the block
//!   back, which undoes that job alone; the jobs after it run on without its writes.
//!
//! Any other failure (the connection broke, a deadlock, the timeout passed) fails the
//! group: if the server answered with it, the statement was rolled back, nothing of it was
//! written and each job is retried alone, so one cannot fail the others; if not, the
//! outcome is unknown and every caller gets [`StoreError::Unavailable`] (D15). The
//! statement holds the row locks of the streams it appends to until it commits, so appends
//! to one stream still commit in sequence order and readers never see a gap (D3, see the
//! crate docs). A stream created for a session locks the session's row (`FOR KEY SHARE`,
//! as its foreign key does), so the session cannot end before the stream is committed.
//! Notifications to other workers' tails are sent by PostgreSQL at commit, folded to one
//! per stream per transaction; callers are answered after the commit returned (D1).

use std::borrow::Cow;
use std::sync::{Arc, Weak};

use durable_mcp_store::{
    BatchOp, BatchOutcome, EventId, Expect, OpOutcome, StoreError, StoreResult, StreamId,
    WriteBatch, now_ms, op_failed, prefix_end,
};
use tokio::sync::{Semaphore, mpsc, oneshot};
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, Statement};

use crate::error::{StepError, from_pg, from_sqlstate, unavailable};
use crate::pool::Conn;
use crate::{Shared, records, streams, timed_until, to_i64};

/// Most jobs one group commit takes (a job of several ops runs in a subtransaction:
/// PostgreSQL keeps up to 64 of a transaction in shared memory before it spills them).
pub(crate) const MAX_GROUP: usize = 64;

/// Groups committing at once, each on its own pooled connection. One: PostgreSQL
/// serializes the commits of transactions that `NOTIFY` (each holds a database-wide lock
/// from its commit's start to its end, WAL flush included), so a second group in flight
/// only waits for that lock, and the first group takes fewer callers (measured with 32
/// writers: about 23,000 appends/s with one group in flight, 19,500 with two, 2,600 with
/// four, whose groups averaged 6 jobs).
const GROUPS_IN_FLIGHT: usize = 1;

/// How many times the task that answered a group yields before the next group is taken
/// (at most one per caller answered).
const YIELDS: usize = 4;

/// What a caller has the writer commit.
pub(crate) enum Work {
    /// A write batch ([`durable_mcp_store::Store::commit`]).
    Batch(WriteBatch),
    /// One append, closing the stream after it if `close`
    /// ([`durable_mcp_store::Store::append`]).
    Append {
        /// The stream.
        stream: StreamId,
        /// The event.
        data: String,
        /// Whether the stream closes after it.
        close: bool,
    },
}

/// One op of a [`Work`].
#[derive(Clone, Copy)]
enum Step<'a> {
    /// An op of a batch, and whether its stream's tails are woken at commit (not for a
    /// stream the batch creates: nobody can be waiting on it, see
    /// [`WriteBatch::woken_streams`]).
    Op(&'a BatchOp, bool),
    Append {
        stream: &'a StreamId,
        data: &'a str,
        close: bool,
    },
}

impl Work {
    fn steps(&self) -> Vec<Step<'_>> {
        match self {
            Work::Batch(batch) => {
                let woken = batch.woken_streams();
                batch
                    .ops()
                    .iter()
                    .map(|op| Step::Op(op, op.woken_stream().is_some_and(|s| woken.contains(s))))
                    .collect()
            }
            Work::Append {
                stream,
                data,
                close,
            } => vec![Step::Append {
                stream,
                data,
                close: *close,
            }],
        }
    }

    fn woken_streams(&self) -> Vec<StreamId> {
        match self {
            Work::Batch(batch) => batch.woken_streams(),
            Work::Append { stream, .. } => vec![stream.clone()],
        }
    }

    /// The first row the work locks, as far as its first op tells: stream rows (by id)
    /// before records (by kind and key).
    fn lock_key(&self) -> (u8, String) {
        let op = match self {
            Work::Append { stream, .. } => return (0, stream.to_string()),
            Work::Batch(batch) => batch.ops().first(),
        };
        match op {
            Some(
                BatchOp::CreateStream { id: stream, .. }
                | BatchOp::Append { stream, .. }
                | BatchOp::Close { stream },
            ) => (0, stream.to_string()),
            Some(
                BatchOp::PutRecord { kind, key, .. }
                | BatchOp::DeleteRecord { kind, key, .. }
                | BatchOp::DeleteRecords { kind, prefix: key },
            ) => (1, format!("{}/{key}", kind.as_str())),
            None => (2, String::new()),
        }
    }

    /// What the caller gets when op `index` was refused with `refusal`.
    fn refused(&self, index: usize, refusal: StoreError) -> StoreError {
        match self {
            Work::Batch(batch) => match batch.ops().get(index) {
                Some(op) => op_failed(index, op, refusal),
                None => refusal,
            },
            Work::Append { .. } => refusal,
        }
    }
}

struct Job {
    work: Work,
    reply: oneshot::Sender<StoreResult<BatchOutcome>>,
}

/// Queues work to the writer task.
#[derive(Clone)]
pub(crate) struct Writer {
    tx: mpsc::UnboundedSender<Job>,
}

impl Writer {
    /// Commit `work` with whatever else is waiting; answered after the commit.
    pub(crate) async fn commit(&self, work: Work) -> StoreResult<BatchOutcome> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(Job { work, reply })
            .map_err(|_| unavailable("the PostgreSQL batch writer has stopped"))?;
        rx.await
            .map_err(|_| unavailable("the PostgreSQL batch writer has stopped"))?
    }
}

/// Start the writer of the store whose shared state `shared` will point to. It ends when
/// the last handle of the store is dropped (the queue closes).
pub(crate) fn spawn(shared: Weak<Shared>) -> Writer {
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(run(shared, rx));
    Writer { tx }
}

async fn run(shared: Weak<Shared>, mut rx: mpsc::UnboundedReceiver<Job>) {
    // While a group commits, the next gathers what arrives meanwhile.
    let slots = Arc::new(Semaphore::new(GROUPS_IN_FLIGHT));
    loop {
        let Ok(slot) = slots.clone().acquire_owned().await else {
            break;
        };
        let Some(first) = rx.recv().await else { break };
        let mut group = Vec::with_capacity(MAX_GROUP);
        group.push(first);
        while group.len() < MAX_GROUP {
            match rx.try_recv() {
                Ok(job) => group.push(job),
                Err(_) => break,
            }
        }
        let Some(shared) = shared.upgrade() else {
            break;
        };
        tokio::spawn(async move {
            let _slot = slot;
            let answered = group.len();
            finish(&shared, group).await;
            if answered > 1 {
                // Callers under load commit again as soon as they are answered: let them
                // run (microseconds) before the next group is taken, so that they join it
                // instead of waiting a whole commit for the one after. Without this,
                // writers settle into two halves that alternate, each paying its own
                // commit. A lone caller's commit never waits.
                for _ in 0..answered.min(YIELDS) {
                    tokio::task::yield_now().await;
                }
            }
        });
    }
}

/// Commit `group` and answer its callers. A group that failed as a whole with an error the
/// server answered (a deadlock with another group, a value it refuses in a job of one op)
/// was rolled back, so each of its jobs is retried alone and one job cannot fail the
/// others; after any other failure its outcome is unknown and every caller gets the error.
async fn finish(shared: &Arc<Shared>, mut group: Vec<Job>) {
    // Rows in one order in every group (of this worker and of others), so that groups in
    // flight at once never wait for each other in a cycle (a deadlock PostgreSQL breaks
    // only after `deadlock_timeout`). The jobs are concurrent callers': any order is
    // theirs; the sort is stable, so appends to one stream keep their queue order.
    group.sort_by_cached_key(|job| job.work.lock_key());
    let works: Vec<&Work> = group.iter().map(|job| &job.work).collect();
    let results = match commit_group(shared, &works).await {
        Ok(results) => results,
        Err(failure) if !failure.commit_sent && works.len() > 1 => {
            tracing::warn!(error = %failure.error, jobs = works.len(), "postgres group commit failed; retrying each job alone");
            // One after another, in the group's order: appends to one stream keep their
            // queue order.
            let mut results = Vec::with_capacity(works.len());
            for work in &works {
                results.push(
                    match commit_group(shared, std::slice::from_ref(work)).await {
                        Ok(mut results) => results
                            .pop()
                            .unwrap_or_else(|| Err(unavailable("a job got no result"))),
                        Err(failure) => Err(failure.error),
                    },
                );
            }
            results
        }
        Err(failure) => {
            tracing::warn!(error = %failure.error, jobs = works.len(), "postgres group commit failed");
            let message = failure.error.to_string();
            works
                .iter()
                .map(|_| Err(unavailable(message.clone())))
                .collect()
        }
    };
    // Local tails need not wait for the notification's round trip.
    for (job, result) in group.iter().zip(&results) {
        if result.is_ok() {
            for stream in job.work.woken_streams() {
                shared.watchers.wake(&stream);
            }
        }
    }
    for (job, result) in group.into_iter().zip(results) {
        let _ = job.reply.send(result);
    }
}

/// A group's statement failed as a whole: nothing of it was committed, unless
/// `commit_sent` (then nobody knows).
struct GroupFailure {
    error: StoreError,
    commit_sent: bool,
}

/// Commit `works` in one statement on a pooled connection; per job, its outcome or
/// refusal. `Err` when the group as a whole failed.
async fn commit_group(
    shared: &Shared,
    works: &[&Work],
) -> Result<Vec<StoreResult<BatchOutcome>>, GroupFailure> {
    let timeout = shared.options.op_timeout;
    let deadline = tokio::time::Instant::now() + timeout;
    let mut guard = match tokio::time::timeout_at(deadline, shared.pool.get()).await {
        Ok(Ok(guard)) => guard,
        Ok(Err(error)) => {
            return Err(GroupFailure {
                error,
                commit_sent: false,
            });
        }
        Err(_) => {
            return Err(GroupFailure {
                error: unavailable(format!(
                    "no PostgreSQL connection answered within {timeout:?}"
                )),
                commit_sent: false,
            });
        }
    };
    let mut commit_sent = false;
    let result = timed_until(
        deadline,
        timeout,
        run_group(guard.conn(), shared, works, &mut commit_sent),
    )
    .await;
    // A failure may leave the connection behind an unanswered statement: `settle` closes
    // it, as every group failure is `Unavailable`.
    guard
        .settle(result.map_err(fatal))
        .map_err(|error| GroupFailure { error, commit_sent })
}

/// A failure that is not a refusal fails the group: said as unavailable (D15).
fn fatal(error: StoreError) -> StoreError {
    match error {
        StoreError::Unavailable(_) => error,
        other => unavailable(format!("batch failed: {other}")),
    }
}

/// Whether `error` refuses an op (its job fails alone) rather than failing the group.
fn is_refusal(error: &StoreError) -> bool {
    matches!(
        error,
        StoreError::Conflict { .. }
            | StoreError::NotFound { .. }
            | StoreError::StreamClosed { .. }
            | StoreError::Refused(_)
    )
}

/// The statement that runs `step`.
fn sql(step: Step<'_>) -> &'static str {
    match step {
        Step::Append { .. } | Step::Op(BatchOp::Append { .. }, _) => streams::APPEND,
        Step::Op(BatchOp::CreateStream { .. }, _) => streams::CREATE,
        Step::Op(BatchOp::Close { .. }, _) => streams::CLOSE,
        Step::Op(BatchOp::PutRecord { expect, .. }, _) => records::put_sql(*expect),
        Step::Op(BatchOp::DeleteRecord { .. }, _) => records::DELETE_ONE,
        Step::Op(BatchOp::DeleteRecords { prefix, .. }, _) => records::delete_sql(prefix),
    }
}

/// Run `step`, alone in its group, with its prepared `statement`: one statement, so one
/// transaction of its own.
async fn run_step(
    client: &Client,
    statement: Statement,
    step: Step<'_>,
    shared: &Shared,
) -> Result<OpOutcome, StepError> {
    let channel = shared.channel.as_str();
    let max = shared.options.max_events_per_stream;
    match step {
        Step::Append {
            stream,
            data,
            close,
        } => streams::append_step(client, &statement, stream, data, close, max, Some(channel))
            .await
            .map(OpOutcome::Appended),
        Step::Op(BatchOp::Append { stream, data }, wake) => streams::append_step(
            client,
            &statement,
            stream,
            data,
            false,
            max,
            wake.then_some(channel),
        )
        .await
        .map(OpOutcome::Appended),
        Step::Op(BatchOp::CreateStream { id, owner }, _) => {
            streams::create_step(client, &statement, id, owner)
                .await
                .map(|()| OpOutcome::Created)
        }
        Step::Op(BatchOp::Close { stream }, wake) => {
            streams::close_step(client, &statement, stream, wake.then_some(channel))
                .await
                .map(|()| OpOutcome::Closed)
        }
        Step::Op(
            BatchOp::PutRecord {
                kind,
                key,
                value,
                expires_at_ms,
                expect,
            },
            _,
        ) => records::put_step(
            client,
            &statement,
            *kind,
            key,
            value,
            *expires_at_ms,
            *expect,
        )
        .await
        .map(OpOutcome::Put),
        Step::Op(BatchOp::DeleteRecord { kind, key, version }, _) => {
            records::delete_version_step(client, &statement, *kind, key, *version, now_ms())
                .await
                .map(|()| OpOutcome::Deleted(1))
        }
        Step::Op(BatchOp::DeleteRecords { kind, prefix }, _) => {
            records::delete_step(client, &statement, *kind, prefix, now_ms())
                .await
                .map(OpOutcome::Deleted)
        }
    }
}

/// A group of jobs as one statement (see the `dmcp_commit` function of the schema's
/// migration 3): per op, in order, the job it belongs to, what it does and its arguments.
const COMMIT: &str =
    "SELECT result, failure FROM dmcp_commit($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)";

/// The ops `dmcp_op` knows, as numbered there.
#[derive(Clone, Copy)]
#[repr(i16)]
enum OpCode {
    CreateStream = 1,
    Append = 2,
    Close = 3,
    PutAbsent = 4,
    PutVersion = 5,
    DeleteRecord = 6,
    DeleteRecords = 7,
    /// A close the append before it did (see [`Columns::push`]).
    ClosedByAppend = 8,
}

/// How `dmcp_op` refuses an op (having written nothing), as numbered there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refusal {
    StreamExists = -1,
    NoStream = -2,
    StreamClosed = -3,
    /// The append found its stream open but did not write: retryable.
    AppendRaced = -4,
    NoSession = -5,
    RecordConflict = -6,
}

impl Refusal {
    fn from_code(code: i64) -> Option<Self> {
        [
            Self::StreamExists,
            Self::NoStream,
            Self::StreamClosed,
            Self::AppendRaced,
            Self::NoSession,
            Self::RecordConflict,
        ]
        .into_iter()
        .find(|refusal| *refusal as i64 == code)
    }

    fn into_error(self, step: Step<'_>) -> StoreError {
        match self {
            Self::StreamExists => StoreError::Conflict { what: "stream" },
            Self::NoStream => StoreError::not_found("stream"),
            Self::StreamClosed => StoreError::StreamClosed {
                stream: step.stream().map(ToString::to_string).unwrap_or_default(),
            },
            Self::AppendRaced => {
                unavailable("append found its stream open but did not write; retry")
            }
            Self::NoSession => StoreError::not_found("session"),
            Self::RecordConflict => StoreError::Conflict { what: "record" },
        }
    }
}

impl Step<'_> {
    /// The stream the step writes to, if it writes to one.
    fn stream(&self) -> Option<&StreamId> {
        match *self {
            Step::Append { stream, .. } => Some(stream),
            Step::Op(BatchOp::CreateStream { id, .. }, _) => Some(id),
            Step::Op(BatchOp::Append { stream, .. } | BatchOp::Close { stream }, _) => Some(stream),
            Step::Op(..) => None,
        }
    }

    /// What the step did, from `dmcp_op`'s result `value` (>= 0).
    fn outcome(&self, value: i64) -> OpOutcome {
        let count = value.unsigned_abs();
        match *self {
            Step::Append { stream, .. } | Step::Op(BatchOp::Append { stream, .. }, _) => {
                OpOutcome::Appended(EventId::new(stream.clone(), count))
            }
            Step::Op(BatchOp::CreateStream { .. }, _) => OpOutcome::Created,
            Step::Op(BatchOp::Close { .. }, _) => OpOutcome::Closed,
            Step::Op(BatchOp::PutRecord { .. }, _) => OpOutcome::Put(count),
            Step::Op(BatchOp::DeleteRecord { .. }, _) => OpOutcome::Deleted(1),
            Step::Op(BatchOp::DeleteRecords { .. }, _) => OpOutcome::Deleted(count),
        }
    }
}

/// The arguments of [`COMMIT`], one entry per op (see `dmcp_op` for what each column
/// holds for each op).
struct Columns<'a> {
    job: Vec<i32>,
    op: Vec<i16>,
    a: Vec<&'a str>,
    b: Vec<&'a str>,
    c: Vec<Option<Cow<'a, str>>>,
    n: Vec<Option<i64>>,
    m: Vec<Option<i64>>,
    f: Vec<bool>,
    w: Vec<bool>,
}

impl<'a> Columns<'a> {
    /// The columns of every op of `steps`.
    fn new(steps: &[Vec<Step<'a>>]) -> Result<Self, StoreError> {
        let ops = steps.iter().map(Vec::len).sum();
        let mut columns = Self {
            job: Vec::with_capacity(ops),
            op: Vec::with_capacity(ops),
            a: Vec::with_capacity(ops),
            b: Vec::with_capacity(ops),
            c: Vec::with_capacity(ops),
            n: Vec::with_capacity(ops),
            m: Vec::with_capacity(ops),
            f: Vec::with_capacity(ops),
            w: Vec::with_capacity(ops),
        };
        for (job, steps) in steps.iter().enumerate() {
            let job = i32::try_from(job).map_err(|_| unavailable("too many jobs in one group"))?;
            for step in steps {
                let args = match *step {
                    Step::Append {
                        stream,
                        data,
                        close,
                    } => OpArgs {
                        b: data,
                        f: close,
                        w: true,
                        ..OpArgs::new(OpCode::Append, stream.as_str())
                    },
                    Step::Op(BatchOp::Append { stream, data }, wake) => OpArgs {
                        b: data,
                        w: wake,
                        ..OpArgs::new(OpCode::Append, stream.as_str())
                    },
                    Step::Op(BatchOp::CreateStream { id, owner }, _) => OpArgs {
                        b: owner.principal.as_str(),
                        c: owner.session.as_ref().map(|s| Cow::Borrowed(s.as_str())),
                        ..OpArgs::new(OpCode::CreateStream, id.as_str())
                    },
                    Step::Op(BatchOp::Close { stream }, wake) => OpArgs {
                        w: wake,
                        ..OpArgs::new(OpCode::Close, stream.as_str())
                    },
                    Step::Op(
                        BatchOp::PutRecord {
                            kind,
                            key,
                            value,
                            expires_at_ms,
                            expect,
                        },
                        _,
                    ) => {
                        let (op, expected) = match expect {
                            Expect::Absent => (OpCode::PutAbsent, None),
                            // No stored version is above `i64::MAX`: `NULL` matches none.
                            Expect::Version(version) => {
                                (OpCode::PutVersion, i64::try_from(*version).ok())
                            }
                        };
                        OpArgs {
                            b: key,
                            c: Some(Cow::Borrowed(value)),
                            n: expires_at_ms.map(to_i64),
                            m: expected,
                            ..OpArgs::new(op, kind.as_str())
                        }
                    }
                    Step::Op(BatchOp::DeleteRecord { kind, key, version }, _) => OpArgs {
                        b: key,
                        m: i64::try_from(*version).ok(),
                        ..OpArgs::new(OpCode::DeleteRecord, kind.as_str())
                    },
                    Step::Op(BatchOp::DeleteRecords { kind, prefix }, _) => OpArgs {
                        b: prefix,
                        c: prefix_end(prefix).map(Cow::Owned),
                        ..OpArgs::new(OpCode::DeleteRecords, kind.as_str())
                    },
                };
                columns.push(job, args);
            }
        }
        Ok(columns)
    }

    /// The first op with a text that holds a NUL, which PostgreSQL's text cannot.
    fn first_nul(&self) -> Option<usize> {
        let nul = |text: &str| text.contains('\0');
        (0..self.op.len())
            .find(|&i| nul(self.a[i]) || nul(self.b[i]) || self.c[i].as_deref().is_some_and(nul))
    }

    /// One more op, of job `job`. A close right after an append to its stream, in one job
    /// (every call's response is appended, then its stream closed), is done by that
    /// append: one `UPDATE` of the stream's row instead of two.
    fn push(&mut self, job: i32, mut args: OpArgs<'a>) {
        let last = self.op.len().wrapping_sub(1);
        if matches!(args.op, OpCode::Close)
            && self.job.last() == Some(&job)
            && self.op.get(last) == Some(&(OpCode::Append as i16))
            && self.a.get(last) == Some(&args.a)
        {
            self.f[last] = true;
            self.w[last] |= args.w;
            args.op = OpCode::ClosedByAppend;
        }
        self.job.push(job);
        self.op.push(args.op as i16);
        self.a.push(args.a);
        self.b.push(args.b);
        self.c.push(args.c);
        self.n.push(args.n);
        self.m.push(args.m);
        self.f.push(args.f);
        self.w.push(args.w);
    }
}

/// The arguments of one op: one entry of each of [`Columns`]' columns.
struct OpArgs<'a> {
    op: OpCode,
    a: &'a str,
    b: &'a str,
    c: Option<Cow<'a, str>>,
    n: Option<i64>,
    m: Option<i64>,
    f: bool,
    w: bool,
}

impl<'a> OpArgs<'a> {
    /// Op `op` on `a` (a stream id or a record kind), every other argument empty.
    fn new(op: OpCode, a: &'a str) -> Self {
        Self {
            op,
            a,
            b: "",
            c: None,
            n: None,
            m: None,
            f: false,
            w: false,
        }
    }
}

/// Commit `works` on `conn`; see the module's `# Durability`. `Err` fails the group
/// (classified; `commit_sent` says whether the group may have committed).
async fn run_group(
    conn: &mut Conn,
    shared: &Shared,
    works: &[&Work],
    commit_sent: &mut bool,
) -> StoreResult<Vec<StoreResult<BatchOutcome>>> {
    let steps: Vec<Vec<Step<'_>>> = works.iter().map(|work| work.steps()).collect();
    let appends: Option<Vec<(&StreamId, &str, bool)>> =
        steps.iter().map(|steps| one_append(steps)).collect();
    let sql = match (steps.as_slice(), &appends) {
        ([only], _) if only.len() == 1 => sql(only[0]),
        (_, Some(_)) => streams::APPEND_MANY,
        _ => COMMIT,
    };
    conn.statements.prepare_all(&conn.client, &[sql]).await?;
    let statement = conn
        .statements
        .prepared(sql)
        .cloned()
        .ok_or_else(|| unavailable("a batch statement was not prepared"))?;
    // Whatever runs below is one statement, so one transaction of its own: a failure the
    // server answered with rolled it back; any other leaves its outcome unknown.
    *commit_sent = true;
    if let [only] = steps.as_slice()
        && let [step] = only.as_slice()
    {
        return Ok(vec![
            match run_step(&conn.client, statement, *step, shared).await {
                Ok(outcome) => Ok(BatchOutcome { ops: vec![outcome] }),
                Err(StepError::Refused(refusal)) => Err(works[0].refused(0, refusal)),
                Err(StepError::Failed(error)) if is_refusal(&error) => {
                    Err(works[0].refused(0, error))
                }
                Err(failed) => return Err(failure(failed, commit_sent)),
            },
        ]);
    }
    let (max, channel) = (
        shared.options.max_events_per_stream,
        shared.channel.as_str(),
    );
    if let Some(appends) = appends {
        // Jobs that are one append each: one statement that numbers them all.
        let results = streams::append_many_step(&conn.client, &statement, &appends, max, channel)
            .await
            .map_err(|error| failure(error, commit_sent))?;
        return Ok(works
            .iter()
            .zip(results)
            .map(|(work, result)| {
                result
                    .map(|id| BatchOutcome {
                        ops: vec![OpOutcome::Appended(id)],
                    })
                    .map_err(|refusal| work.refused(0, refusal))
            })
            .collect());
    }
    let columns = Columns::new(&steps)?;
    let params: [&(dyn ToSql + Sync); 12] = [
        &columns.job,
        &columns.op,
        &columns.a,
        &columns.b,
        &columns.c,
        &columns.n,
        &columns.m,
        &columns.f,
        &columns.w,
        &to_i64(now_ms()),
        &max.map(to_i64),
        &channel,
    ];
    let rows = match conn
        .client
        .query(&statement, &params)
        .await
        .map_err(StepError::statement)
    {
        Ok(rows) => rows,
        // A value the server refuses before the function runs (a NUL in a text): a job
        // alone is refused at its op that holds it; in a group, each job is retried alone.
        Err(StepError::Failed(error)) if is_refusal(&error) && works.len() == 1 => {
            // One job: its ops are the columns' ops, in order.
            let index = columns.first_nul().unwrap_or(0);
            return Ok(vec![Err(works[0].refused(index, error))]);
        }
        Err(error) => return Err(failure(error, commit_sent)),
    };
    if rows.len() != columns.op.len() {
        return Err(unavailable(format!(
            "{} ops answered with {} rows",
            columns.op.len(),
            rows.len()
        )));
    }
    let mut rows = rows.iter();
    let mut results = Vec::with_capacity(works.len());
    for (work, steps) in works.iter().zip(&steps) {
        let mut outcome = Ok(BatchOutcome {
            ops: Vec::with_capacity(steps.len()),
        });
        for (index, (step, row)) in steps.iter().zip(rows.by_ref()).enumerate() {
            let Ok(done) = outcome.as_mut() else { continue };
            let value: Option<i64> = row.try_get(0).map_err(from_pg)?;
            let refusal = match value {
                Some(value) if value >= 0 => {
                    done.ops.push(step.outcome(value));
                    continue;
                }
                Some(code) => Refusal::from_code(code)
                    .map(|refusal| refusal.into_error(*step))
                    .unwrap_or_else(|| unavailable(format!("unknown refusal {code}"))),
                None => {
                    let failure: Option<String> = row.try_get(1).map_err(from_pg)?;
                    let failure = failure.ok_or_else(|| {
                        unavailable("an op answered with neither a result nor a failure")
                    })?;
                    let (code, message) = failure.split_once(' ').unwrap_or((failure.as_str(), ""));
                    from_sqlstate(code, message.to_owned())
                }
            };
            outcome = Err(work.refused(index, refusal));
        }
        results.push(outcome);
    }
    Ok(results)
}

/// The append a job of `steps` consists of, if it is one append: stream, event, close.
fn one_append<'a>(steps: &[Step<'a>]) -> Option<(&'a StreamId, &'a str, bool)> {
    match steps {
        [
            Step::Append {
                stream,
                data,
                close,
            },
        ] => Some((stream, data, *close)),
        [Step::Op(BatchOp::Append { stream, data }, _)] => Some((stream, data.as_str(), false)),
        _ => None,
    }
}

/// A failure of the group's statement: one the server answered with rolled it back, so
/// nothing of it was committed.
fn failure(error: StepError, commit_sent: &mut bool) -> StoreError {
    if matches!(error, StepError::Failed(_)) {
        *commit_sent = false;
    }
    error.into_error()
}
