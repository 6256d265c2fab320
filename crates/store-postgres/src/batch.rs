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
//! Every op is one statement that answers what it did (a refusal included), so a group's
//! statements are sent together without waiting for each other's answers (tokio-postgres
//! pipelines requests issued concurrently on one connection): `BEGIN`, every op of every
//! job, and, when no job has more than one op, the `COMMIT` too. The jobs that are one
//! append each go first, all in one statement ([`streams::APPEND_MANY`]): a group of them
//! is one round trip and one statement, whatever its size. A job of several ops gets a savepoint before its ops (when it is not
//! alone), and the `COMMIT` follows once their answers are in.
//!
//! # Durability
//! In plain words: a batch is all or nothing, it stands or falls alone whatever it is
//! grouped with, and it is answered only once committed.
//!
//! Stated more precisely: the transaction applies the group's jobs in order, and its commit
//! holds exactly the jobs answered with success. A refused op (a failed
//! [`Expect`](durable_mcp_store::Expect), an append to a closed or unknown stream, ...)
//! refuses its job with [`StoreError::BatchOp`] (a single append: with the refusal itself)
//! and takes nothing of it into the commit:
//! - a refused op of a one-op job wrote nothing, so the other jobs of the transaction go on;
//! - a job of several ops is rolled back to its savepoint, which also undoes the jobs sent
//!   after it (they may have seen its writes); those are sent again;
//! - an op whose statement failed on the server (a missing session, a value the server
//!   refuses) aborts the transaction: if its job has no savepoint, the transaction is rolled
//!   back and the group's other jobs are run again in a new one, without it.
//!
//! So every job's answer comes from the transaction that commits, in the order of the
//! group, or from a refusal that holds whatever else commits. Any other failure (the
//! connection broke, the server refused the transaction, the timeout passed) fails the
//! group: if its `COMMIT` was not sent, nothing of it was written and each job is retried
//! alone, so one cannot fail the others; if it was, the outcome is unknown and every caller
//! gets [`StoreError::Unavailable`] (D15). The group's transaction holds the row locks of
//! the streams it appends to until it commits, so appends to one stream still commit in
//! sequence order and readers never see a gap (D3, see the crate docs). Notifications to
//! other workers' tails are sent by PostgreSQL at commit, folded to one per stream per
//! transaction; callers are answered after the commit returned (D1).

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Weak};

use durable_mcp_store::{BatchOp, BatchOutcome, OpOutcome, StoreError, StoreResult, StreamId, WriteBatch, now_ms, op_failed};
use tokio::sync::{Semaphore, mpsc, oneshot};
use tokio_postgres::{Client, Statement};

use crate::error::{StepError, from_pg, unavailable};
use crate::pool::Conn;
use crate::{Shared, records, streams, timed};

/// Most jobs one group commit takes (a job of several ops takes a savepoint: PostgreSQL
/// keeps up to 64 subtransactions of a transaction in shared memory before it spills them).
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
                batch.ops().iter().map(|op| Step::Op(op, op.woken_stream().is_some_and(|s| woken.contains(s)))).collect()
            }
            Work::Append { stream, data, close } => vec![Step::Append { stream, data, close: *close }],
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
            Some(BatchOp::CreateStream { id: stream, .. } | BatchOp::Append { stream, .. } | BatchOp::Close { stream }) => (0, stream.to_string()),
            Some(BatchOp::PutRecord { kind, key, .. } | BatchOp::DeleteRecord { kind, key, .. } | BatchOp::DeleteRecords { kind, prefix: key }) => {
                (1, format!("{}/{key}", kind.as_str()))
            }
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
        self.tx.send(Job { work, reply }).map_err(|_| unavailable("the PostgreSQL batch writer has stopped"))?;
        rx.await.map_err(|_| unavailable("the PostgreSQL batch writer has stopped"))?
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
        let Ok(slot) = slots.clone().acquire_owned().await else { break };
        let Some(first) = rx.recv().await else { break };
        let mut group = Vec::with_capacity(MAX_GROUP);
        group.push(first);
        while group.len() < MAX_GROUP {
            match rx.try_recv() {
                Ok(job) => group.push(job),
                Err(_) => break,
            }
        }
        let Some(shared) = shared.upgrade() else { break };
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

/// Commit `group` and answer its callers. A group that failed as a whole before its
/// `COMMIT` was sent (a deadlock with another group, a statement error) wrote nothing, so
/// each of its jobs is retried alone and one job cannot fail the others; if the `COMMIT`
/// was sent, its outcome is unknown and every caller gets the error.
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
            let alone = works.iter().map(|work| async move {
                match commit_group(shared, std::slice::from_ref(work)).await {
                    Ok(mut results) => results.pop().unwrap_or_else(|| Err(unavailable("a job got no result"))),
                    Err(failure) => Err(failure.error),
                }
            });
            futures::future::join_all(alone).await
        }
        Err(failure) => {
            tracing::warn!(error = %failure.error, jobs = works.len(), "postgres group commit failed");
            let message = failure.error.to_string();
            works.iter().map(|_| Err(unavailable(message.clone()))).collect()
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

/// A group's transaction failed as a whole: nothing of it was committed, unless
/// `commit_sent` (then nobody knows).
struct GroupFailure {
    error: StoreError,
    commit_sent: bool,
}

/// Commit `works` in one transaction on a pooled connection; per job, its outcome or
/// refusal. `Err` when the group as a whole failed.
async fn commit_group(shared: &Shared, works: &[&Work]) -> Result<Vec<StoreResult<BatchOutcome>>, GroupFailure> {
    let mut guard = shared.pool.get().await.map_err(|error| GroupFailure { error, commit_sent: false })?;
    let mut commit_sent = false;
    let result = timed(shared.options.op_timeout, run_group(guard.conn(), shared, works, &mut commit_sent)).await;
    // A failure leaves the connection inside the transaction: `settle` closes it, as every
    // group failure is `Unavailable`, and the server rolls the transaction back.
    guard.settle(result.map_err(fatal)).map_err(|error| GroupFailure { error, commit_sent })
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
    matches!(error, StoreError::Conflict { .. } | StoreError::NotFound { .. } | StoreError::StreamClosed { .. } | StoreError::Refused(_))
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

/// Run `step` with its prepared `statement`. The request goes out when the future is
/// first polled (nothing is awaited before it), which is what lets a group pipeline.
async fn run_step(client: &Client, statement: Statement, step: Step<'_>, shared: &Shared) -> Result<OpOutcome, StepError> {
    let channel = shared.channel.as_str();
    let max = shared.options.max_events_per_stream;
    match step {
        Step::Append { stream, data, close } => {
            streams::append_step(client, &statement, stream, data, close, max, Some(channel)).await.map(OpOutcome::Appended)
        }
        Step::Op(BatchOp::Append { stream, data }, wake) => {
            streams::append_step(client, &statement, stream, data, false, max, wake.then_some(channel)).await.map(OpOutcome::Appended)
        }
        Step::Op(BatchOp::CreateStream { id, owner }, _) => streams::create_step(client, &statement, id, owner).await.map(|()| OpOutcome::Created),
        Step::Op(BatchOp::Close { stream }, wake) => streams::close_step(client, &statement, stream, wake.then_some(channel)).await.map(|()| OpOutcome::Closed),
        Step::Op(BatchOp::PutRecord { kind, key, value, expires_at_ms, expect }, _) => {
            records::put_step(client, &statement, *kind, key, value, *expires_at_ms, *expect).await.map(OpOutcome::Put)
        }
        Step::Op(BatchOp::DeleteRecord { kind, key, version }, _) => {
            records::delete_version_step(client, &statement, *kind, key, *version, now_ms()).await.map(|()| OpOutcome::Deleted(1))
        }
        Step::Op(BatchOp::DeleteRecords { kind, prefix }, _) => records::delete_step(client, &statement, *kind, prefix, now_ms()).await.map(OpOutcome::Deleted),
    }
}

/// What a request of a pipelined round answered.
enum Reply {
    /// A transaction-control command ran.
    Done,
    /// An op ran.
    Op(OpOutcome),
    /// A statement of many appends ran: per append, its id or refusal.
    Appends(Vec<StoreResult<durable_mcp_store::EventId>>),
}

/// A request's answer.
type Answer = Result<Reply, StepError>;

/// A request of a pipelined round, answered in the order sent.
type Request<'a> = Pin<Box<dyn Future<Output = Answer> + Send + 'a>>;

/// Send `requests` in order, each as soon as the one before it is sent (not answered),
/// and wait for every answer; the answers come back in the same order.
async fn pipeline(requests: Vec<Request<'_>>) -> Vec<Answer> {
    // Polled in order, every time: a request goes out on its future's first poll.
    let mut requests: Vec<_> = requests.into_iter().map(futures::future::maybe_done).collect();
    futures::future::poll_fn(|cx| {
        let mut done = true;
        for request in &mut requests {
            done &= Pin::new(request).poll(cx).is_ready();
        }
        if done { std::task::Poll::Ready(()) } else { std::task::Poll::Pending }
    })
    .await;
    requests
        .iter_mut()
        .map(|request| Pin::new(request).take_output().unwrap_or_else(|| Err(StepError::Broken(unavailable("a pipelined request got no answer")))))
        .collect()
}

/// A transaction-control command as a pipelined request.
fn command<'a>(client: &'a Client, sql: String) -> Request<'a> {
    Box::pin(async move { client.batch_execute(&sql).await.map(|()| Reply::Done).map_err(StepError::statement) })
}

/// The savepoint before job `job`'s ops.
fn savepoint_name(job: usize) -> String {
    format!("job_{job}")
}

/// How a job of a round came out.
enum JobResult {
    /// Every op ran: the outcomes, if the transaction commits.
    Done(BatchOutcome),
    /// Op `index` was refused by what it found; nothing of the job remains (a one-op job
    /// wrote nothing, a longer one is rolled back to its savepoint).
    Refused(usize, StoreError),
    /// Op `index`'s statement failed with a refusal: the transaction is aborted.
    Aborted(usize, StoreError),
}

/// The per-job answers of a group: `None` until decided.
type Answers = Vec<Option<StoreResult<BatchOutcome>>>;

/// Commit `works` on `conn`; see the module's `# Durability`. `Err` fails the group
/// (classified; `commit_sent` says whether the `COMMIT` may have run).
async fn run_group(conn: &mut Conn, shared: &Shared, works: &[&Work], commit_sent: &mut bool) -> StoreResult<Vec<StoreResult<BatchOutcome>>> {
    let steps: Vec<Vec<Step<'_>>> = works.iter().map(|work| work.steps()).collect();
    let mut sqls: Vec<&'static str> = steps.iter().flatten().map(|step| sql(*step)).collect();
    if steps.iter().filter(|steps| is_one_append(steps)).count() >= 2 {
        sqls.push(streams::APPEND_MANY);
    }
    conn.statements.prepare_all(&conn.client, &sqls).await?;
    let mut answers: Answers = works.iter().map(|_| None).collect();
    if let [only] = steps.as_slice()
        && let [step] = only.as_slice()
    {
        // One op alone is one atomic statement: no transaction, one round trip.
        *commit_sent = true;
        let statement = prepared(conn, *step)?;
        return Ok(vec![match run_step(&conn.client, statement, *step, shared).await {
            Ok(outcome) => Ok(BatchOutcome { ops: vec![outcome] }),
            Err(StepError::Refused(refusal)) => Err(works[0].refused(0, refusal)),
            Err(StepError::Failed(error)) if is_refusal(&error) => Err(works[0].refused(0, error)),
            Err(failed) => return Err(failed.into_error()),
        }]);
    }
    // Jobs not refused for good yet, in the group's order. Each pass is one transaction;
    // a pass ends early only when a job without a savepoint aborts it, and that job is
    // then refused for good (its statement failed on its own value, whatever else ran).
    let mut pending: Vec<usize> = (0..works.len()).collect();
    while !pending.is_empty() {
        match transaction(conn, shared, works, &steps, &pending, commit_sent).await? {
            Pass::Ended(decided) => {
                for (job, answer) in decided {
                    answers[job] = Some(answer);
                }
                break;
            }
            Pass::Aborted(job, refusal) => {
                answers[job] = Some(Err(refusal));
                pending.retain(|&other| other != job);
            }
        }
    }
    Ok(answers.into_iter().map(|answer| answer.unwrap_or_else(|| Err(unavailable("a job got no result")))).collect())
}

/// How one transaction of a group ended.
enum Pass {
    /// Ended (committed, unless it ran one job and refused it): the answer of every job.
    Ended(Vec<(usize, StoreResult<BatchOutcome>)>),
    /// Rolled back because job `.0`, which had no savepoint, failed with refusal `.1`.
    Aborted(usize, StoreError),
}

/// Whether a job of `steps` is one append.
fn is_one_append(steps: &[Step<'_>]) -> bool {
    one_append(steps).is_some()
}

/// The append a job of `steps` consists of, if it is one append: stream, event, close.
fn one_append<'a>(steps: &[Step<'a>]) -> Option<(&'a StreamId, &'a str, bool)> {
    match steps {
        [Step::Append { stream, data, close }] => Some((stream, data, *close)),
        [Step::Op(BatchOp::Append { stream, data }, _)] => Some((stream, data.as_str(), false)),
        _ => None,
    }
}

/// The prepared statement of `step` on `conn` (prepared by `run_group`).
fn prepared(conn: &Conn, step: Step<'_>) -> StoreResult<Statement> {
    conn.statements.prepared(sql(step)).cloned().ok_or_else(|| unavailable("a batch statement was not prepared"))
}

/// One transaction running `jobs` (indices into `works`) in order, in pipelined rounds.
async fn transaction(conn: &mut Conn, shared: &Shared, works: &[&Work], steps: &[Vec<Step<'_>>], jobs: &[usize], commit_sent: &mut bool) -> StoreResult<Pass> {
    let alone = jobs.len() == 1;
    let has_savepoint = |job: usize| !alone && steps[job].len() > 1;
    let mut decided: Vec<(usize, StoreResult<BatchOutcome>)> = Vec::with_capacity(jobs.len());
    // Jobs that are one append each go first, all in one statement (they are concurrent
    // callers' jobs: any order is theirs); they are decided by the first round.
    let (mut many, mut queue): (Vec<usize>, Vec<usize>) = jobs.iter().partition(|&&job| is_one_append(&steps[job]));
    if many.len() < 2 {
        queue = jobs.to_vec();
        many.clear();
    }
    let mut lead: Vec<String> = vec!["BEGIN".into()];
    conn.in_raw_transaction = true;
    *commit_sent = false;
    loop {
        // Nothing to undo once sent (every job one op, refused ops write nothing): the
        // COMMIT goes with the statements.
        let commit_with = queue.iter().all(|&job| steps[job].len() == 1);
        let client = &conn.client;
        let mut requests: Vec<Request<'_>> = lead.drain(..).map(|sql| command(client, sql)).collect();
        let leading = requests.len();
        let appends: Vec<(&StreamId, &str, bool)> = many.iter().filter_map(|&job| one_append(&steps[job])).collect();
        if !appends.is_empty() {
            let statement = conn.statements.prepared(streams::APPEND_MANY).cloned().ok_or_else(|| unavailable("a batch statement was not prepared"))?;
            let (max, channel) = (shared.options.max_events_per_stream, shared.channel.as_str());
            requests.push(Box::pin(async move { streams::append_many_step(client, &statement, &appends, max, channel).await.map(Reply::Appends) }));
        }
        for &job in &queue {
            if has_savepoint(job) {
                requests.push(command(client, format!("SAVEPOINT {}", savepoint_name(job))));
            }
            for step in &steps[job] {
                let statement = prepared(conn, *step)?;
                let step = *step;
                requests.push(Box::pin(async move { run_step(client, statement, step, shared).await.map(Reply::Op) }));
            }
        }
        if commit_with {
            requests.push(command(client, "COMMIT".into()));
            *commit_sent = true;
        }
        let mut answers = pipeline(requests).await.into_iter();
        for answer in answers.by_ref().take(leading) {
            answer.map_err(|error| failure(error, commit_sent))?;
        }
        if !many.is_empty() {
            let Reply::Appends(results) = answers.next().unwrap_or(Ok(Reply::Done)).map_err(|error| failure(error, commit_sent))? else {
                return Err(unavailable("many appends answered like a command"));
            };
            if results.len() != many.len() {
                return Err(unavailable("many appends got the wrong number of answers"));
            }
            for (job, result) in many.drain(..).zip(results) {
                decided.push((
                    job,
                    match result {
                        Ok(id) => Ok(BatchOutcome { ops: vec![OpOutcome::Appended(id)] }),
                        Err(refusal) => Err(works[job].refused(0, refusal)),
                    },
                ));
            }
        }
        // The jobs of this round, in order, until one must be sent again with those after it.
        let mut resend: Option<(usize, Vec<usize>)> = None;
        let mut aborted: Option<(usize, StoreError)> = None;
        for (position, &job) in queue.iter().enumerate() {
            if resend.is_some() || aborted.is_some() {
                // Sent after a job that is undone (or into an aborted transaction): the
                // answers are discarded, the job is sent again.
                answers.by_ref().take(steps[job].len() + usize::from(has_savepoint(job))).for_each(drop);
                continue;
            }
            if has_savepoint(job) {
                answers.next().unwrap_or(Ok(Reply::Done)).map_err(|error| failure(error, commit_sent))?;
            }
            match job_result(steps[job].len(), &mut answers).map_err(|error| failure(error, commit_sent))? {
                JobResult::Done(outcome) => decided.push((job, Ok(outcome))),
                JobResult::Refused(index, refusal) if !has_savepoint(job) && steps[job].len() == 1 => {
                    decided.push((job, Err(works[job].refused(index, refusal))));
                }
                JobResult::Refused(index, refusal) | JobResult::Aborted(index, refusal) if has_savepoint(job) => {
                    decided.push((job, Err(works[job].refused(index, refusal))));
                    resend = Some((job, queue[position + 1..].to_vec()));
                }
                JobResult::Refused(index, refusal) => {
                    // A job of several ops alone: its transaction is rolled back.
                    aborted = Some((job, works[job].refused(index, refusal)));
                }
                JobResult::Aborted(index, refusal) => aborted = Some((job, works[job].refused(index, refusal))),
            }
        }
        let commit_answer = if commit_with { Some(answers.next().unwrap_or(Ok(Reply::Done))) } else { None };
        if let Some((job, refusal)) = aborted {
            match commit_answer {
                // The COMMIT of an aborted transaction rolls it back.
                Some(answer) => answer.map(drop).map_err(|error| failure(error, commit_sent))?,
                None => conn.client.batch_execute("ROLLBACK").await.map_err(from_pg)?,
            }
            conn.in_raw_transaction = false;
            *commit_sent = false;
            if alone {
                return Ok(Pass::Ended(vec![(job, Err(refusal))]));
            }
            return Ok(Pass::Aborted(job, refusal));
        }
        if let Some((job, rest)) = resend {
            lead.push(format!("ROLLBACK TO SAVEPOINT {}", savepoint_name(job)));
            queue = rest;
            continue;
        }
        match commit_answer {
            Some(answer) => answer.map(drop).map_err(|error| failure(error, commit_sent))?,
            None => {
                *commit_sent = true;
                conn.client.batch_execute("COMMIT").await.map_err(|error| failure(StepError::statement(error), commit_sent))?;
            }
        }
        conn.in_raw_transaction = false;
        return Ok(Pass::Ended(decided));
    }
}

/// A failure of the group's transaction: one the server answered with (a deadlock, say)
/// aborted the transaction, so its `COMMIT` cannot have committed anything.
fn failure(error: StepError, commit_sent: &mut bool) -> StoreError {
    if matches!(error, StepError::Failed(_)) {
        *commit_sent = false;
    }
    error.into_error()
}

/// Read the answers of a job's `ops` ops from `answers`: every one is consumed, the first
/// that did not happen decides.
/// `Err` is a failure of the group.
fn job_result(ops: usize, answers: &mut impl Iterator<Item = Answer>) -> Result<JobResult, StepError> {
    let mut outcomes = Vec::with_capacity(ops);
    let mut first: Option<JobResult> = None;
    for index in 0..ops {
        let answer = answers.next().unwrap_or_else(|| Err(StepError::Broken(unavailable("a pipelined request got no answer"))));
        if first.is_some() {
            continue;
        }
        match answer {
            Ok(Reply::Op(outcome)) => outcomes.push(outcome),
            Ok(_) => return Err(StepError::Broken(unavailable("a batch op answered like a command"))),
            Err(StepError::Refused(refusal)) => first = Some(JobResult::Refused(index, refusal)),
            Err(StepError::Failed(error)) if is_refusal(&error) => first = Some(JobResult::Aborted(index, error)),
            Err(failure) => return Err(failure),
        }
    }
    Ok(first.unwrap_or(JobResult::Done(BatchOutcome { ops: outcomes })))
}
