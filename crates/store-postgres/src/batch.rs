//! Write batches ([`Store::commit`](durable_mcp_store::Store::commit)) and their group
//! commit.
//!
//! Every [`PgStore`](crate::PgStore) has one writer task. A batch is queued to it; the writer
//! takes the first batch waiting and every batch queued meanwhile (up to [`MAX_GROUP`]) and
//! runs them in one PostgreSQL transaction, each batch inside its own savepoint, then
//! commits once and only then answers each caller. Concurrent callers therefore share one
//! commit (one WAL flush) instead of paying one each. Up to half the pool's connections
//! commit groups at once, so the next group gathers while one commits.
//!
//! # Durability
//! In plain words: a batch is all or nothing, and it is answered only once committed.
//!
//! Stated more precisely: a refused op (a failed [`Expect`](durable_mcp_store::Expect), an
//! append to a closed or unknown stream, ...) rolls its batch back to the batch's savepoint,
//! undoing the batch's earlier ops and nothing of the other batches of the group; that
//! caller gets [`StoreError::BatchOp`]. Any other failure (the connection broke, the
//! server refused the transaction, the timeout passed) rolls the whole group back and every
//! caller of the group gets [`StoreError::Unavailable`]: nothing of any of them was written
//! (D15). The group's transaction holds the row locks of the streams it appends to until it
//! commits, so appends to one stream still commit in sequence order and readers never see
//! a gap (D3, see the crate docs). Notifications to other workers' tails are sent by
//! PostgreSQL at commit, folded to one per stream per transaction.

use std::sync::{Arc, Weak};

use durable_mcp_store::{
    BatchOp, BatchOutcome, OpOutcome, StoreError, StoreResult, WriteBatch, now_ms, op_failed,
};
use tokio::sync::{Semaphore, mpsc, oneshot};
use tokio_postgres::GenericClient;

use crate::error::{from_pg, unavailable};
use crate::pool::Statements;
use crate::{Shared, records, streams, timed};

/// Most batches one group commit takes (a savepoint each; PostgreSQL keeps up to 64
/// subtransactions of a transaction in shared memory before it spills them).
pub(crate) const MAX_GROUP: usize = 64;

struct Job {
    batch: WriteBatch,
    reply: oneshot::Sender<StoreResult<BatchOutcome>>,
}

/// Queues batches to the writer task.
#[derive(Clone)]
pub(crate) struct Writer {
    tx: mpsc::UnboundedSender<Job>,
}

impl Writer {
    /// Commit `batch` with whatever else is waiting; answered after the commit.
    pub(crate) async fn commit(&self, batch: WriteBatch) -> StoreResult<BatchOutcome> {
        let (reply, rx) = oneshot::channel();
        self.tx.send(Job { batch, reply }).map_err(|_| unavailable("the PostgreSQL batch writer has stopped"))?;
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
    // Groups in flight at once, each on its own pooled connection: while one commits, the
    // next gathers what arrives meanwhile.
    let slots = Arc::new(Semaphore::new(concurrent_groups(&shared)));
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
            finish(&shared, group).await;
        });
    }
}

/// Half the pool (at least one), so single-op calls always find a connection too.
fn concurrent_groups(shared: &Weak<Shared>) -> usize {
    shared.upgrade().map_or(1, |shared| shared.options.pool_size.div_ceil(2).max(1))
}

/// Commit `group` and answer its callers. A group that failed as a whole before its
/// `COMMIT` was sent (a deadlock with another group, a statement error) wrote nothing, so
/// each of its batches is retried alone and one batch cannot fail the others; if the
/// `COMMIT` was sent, its outcome is unknown and every caller gets the error.
async fn finish(shared: &Arc<Shared>, group: Vec<Job>) {
    let batches: Vec<&WriteBatch> = group.iter().map(|job| &job.batch).collect();
    let results = match commit_group(shared, &batches).await {
        Ok(results) => results,
        Err(failure) if !failure.commit_sent && batches.len() > 1 => {
            tracing::warn!(error = %failure.error, batches = batches.len(), "postgres group commit failed; retrying each batch alone");
            let alone = batches.iter().map(|batch| async move {
                match commit_group(shared, std::slice::from_ref(batch)).await {
                    Ok(mut results) => results.pop().unwrap_or_else(|| Err(unavailable("a batch got no result"))),
                    Err(failure) => Err(failure.error),
                }
            });
            futures::future::join_all(alone).await
        }
        Err(failure) => {
            tracing::warn!(error = %failure.error, batches = batches.len(), "postgres group commit failed");
            let message = failure.error.to_string();
            batches.iter().map(|_| Err(unavailable(message.clone()))).collect()
        }
    };
    // Local tails need not wait for the notification's round trip.
    for (job, result) in group.iter().zip(&results) {
        if result.is_ok() {
            for stream in job.batch.woken_streams() {
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

/// Run `batches` in one transaction; per batch, its outcome or refusal. `Err` when the
/// transaction as a whole failed (nothing committed).
async fn commit_group(shared: &Shared, batches: &[&WriteBatch]) -> Result<Vec<StoreResult<BatchOutcome>>, GroupFailure> {
    let mut guard = shared.pool.get().await.map_err(|error| GroupFailure { error, commit_sent: false })?;
    let mut commit_sent = false;
    let result = {
        let commit_sent = &mut commit_sent;
        let conn = guard.conn();
        timed(shared.options.op_timeout, async {
            if let [batch] = batches
                && batch.len() == 1
            {
                // One op alone is one atomic statement, as the single-op methods run it:
                // no transaction, one round trip. (A stream's creation reads first to tell
                // a duplicate apart; the read writes nothing.)
                *commit_sent = true;
                return match apply(&conn.client, &mut conn.statements, batch, shared).await {
                    Err(refusal @ StoreError::BatchOp { .. }) => Ok(vec![Err(refusal)]),
                    other => Ok(vec![Ok(other.map_err(fatal)?)]),
                };
            }
            let tx = conn.client.transaction().await.map_err(from_pg)?;
            let statements = &mut conn.statements;
            let mut results = Vec::with_capacity(batches.len());
            if let [batch] = batches {
                // One batch alone needs no savepoint: a refusal rolls the transaction back.
                let result = apply(&tx, statements, batch, shared).await;
                if matches!(result, Err(StoreError::BatchOp { .. })) {
                    tx.rollback().await.map_err(from_pg)?;
                    return Ok(vec![result]);
                }
                results.push(Ok(result.map_err(fatal)?));
            } else {
                for (i, batch) in batches.iter().enumerate() {
                    let mark = if i == 0 { "SAVEPOINT batch" } else { "RELEASE SAVEPOINT batch; SAVEPOINT batch" };
                    // Pipelined: the savepoint goes out first, the batch's first statement
                    // right behind it without waiting for its answer (`join` polls the
                    // savepoint first, so it is sent first; one round trip saved
                    // per batch); the server runs them in order.
                    let (marked, result) = futures::future::join(tx.batch_execute(mark), apply(&tx, statements, batch, shared)).await;
                    marked.map_err(from_pg)?;
                    if matches!(result, Err(StoreError::BatchOp { .. })) {
                        tx.batch_execute("ROLLBACK TO SAVEPOINT batch").await.map_err(from_pg)?;
                        results.push(result);
                    } else {
                        results.push(Ok(result.map_err(fatal)?));
                    }
                }
            }
            *commit_sent = true;
            tx.commit().await.map_err(from_pg)?;
            Ok(results)
        })
        .await
    };
    guard.settle(result).map_err(|error| GroupFailure { error, commit_sent })
}

/// A failure that is not a refusal fails the group: said as unavailable (D15).
fn fatal(error: StoreError) -> StoreError {
    match error {
        StoreError::Unavailable(_) => error,
        other => unavailable(format!("batch failed: {other}")),
    }
}

/// Apply every op of `batch` in `tx`; the first refusal is [`StoreError::BatchOp`].
async fn apply<C: GenericClient + Sync>(tx: &C, statements: &mut Statements, batch: &WriteBatch, shared: &Shared) -> StoreResult<BatchOutcome> {
    let mut outcome = BatchOutcome { ops: Vec::with_capacity(batch.len()) };
    for (index, op) in batch.ops().iter().enumerate() {
        match apply_op(tx, statements, op, shared).await {
            Ok(result) => outcome.ops.push(result),
            Err(refusal @ (StoreError::Conflict { .. } | StoreError::NotFound { .. } | StoreError::StreamClosed { .. } | StoreError::Refused(_))) => {
                return Err(op_failed(index, op, refusal));
            }
            Err(other) => return Err(other),
        }
    }
    Ok(outcome)
}

async fn apply_op<C: GenericClient + Sync>(tx: &C, statements: &mut Statements, op: &BatchOp, shared: &Shared) -> StoreResult<OpOutcome> {
    let channel = shared.channel.as_str();
    match op {
        BatchOp::CreateStream { id, owner } => {
            // Checked first so that a duplicate is a refusal, not a failed transaction.
            if streams::exists(tx, statements, id).await? {
                return Err(StoreError::Conflict { what: "stream" });
            }
            streams::insert(tx, statements, id, owner).await.map(|()| OpOutcome::Created)
        }
        BatchOp::Append { stream, data } => {
            let max = shared.options.max_events_per_stream;
            streams::append(tx, statements, stream, data, false, max, channel).await.map(OpOutcome::Appended)
        }
        BatchOp::Close { stream } => streams::close(tx, statements, stream, channel).await.map(|()| OpOutcome::Closed),
        BatchOp::PutRecord { kind, key, value, expires_at_ms, expect } => {
            records::put(tx, statements, *kind, key, value, *expires_at_ms, *expect).await.map(OpOutcome::Put)
        }
        BatchOp::DeleteRecord { kind, key, version } => {
            records::delete_version(tx, statements, *kind, key, *version, now_ms()).await.map(|()| OpOutcome::Deleted(1))
        }
        BatchOp::DeleteRecords { kind, prefix } => {
            records::delete(tx, statements, *kind, prefix, now_ms()).await.map(OpOutcome::Deleted)
        }
    }
}
