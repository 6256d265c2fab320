//! Operators acting on runs (`durable-mcp runs cancel|kill|retry|purge`). Each action is committed as a
//! record (who, when, why: [`ActionRecord`]) before its effect, or with it in one commit,
//! and obeyed by whichever worker runs the run, live or after a restart:
//!
//! - **cancel** is cooperative: the run's cancellation mark carries the action, its worker
//!   cancels the handler at its next heartbeat (a third of the lease), and the client's
//!   outcome is an error that says an operator cancelled it (a client's own cancellation
//!   gets none). A run waiting for a worker is closed by recovery instead of run.
//! - **kill** ends the run at once: one commit appends the error outcome to its stream,
//!   closes it and deletes the journal entry over the version read, so no worker runs it
//!   again. A live worker hears of it at its next heartbeat: it cancels the handler, refuses
//!   its steps and messages from then on, and removes the steps it committed in between.
//!   **purge** is the same for the runs `runs purge` picks (parked ones, say).
//! - **retry** gives a parked run back to the workers in one commit with the action, its
//!   failures counted afresh and its committed steps kept: the next recovery pass (of any
//!   worker) runs it again, replaying them (D8).

use durable_mcp_protocol::jsonrpc::{code, error_response, to_text};
use durable_mcp_store::{Expect, RecordKind, StoreError, StoreErrorKind, WriteBatch, now_ms};
use serde_json::{Value, json};

use crate::EngineError;
use crate::records::{ActionKind, ActionRecord, RunRecord, TaskStatus, key};
use crate::requests::Requests;

/// How many times a kill reads the entry again when its worker renewed the lease in
/// between.
const KILL_ATTEMPTS: usize = 20;

impl Requests {
    /// The work of [`crate::Engine::cancel_run`].
    pub(crate) async fn cancel_run(
        &self,
        run_id: &str,
        by: String,
        reason: Option<String>,
    ) -> Result<ActionRecord, EngineError> {
        if self
            .store()
            .get_record(RecordKind::Run, run_id)
            .await?
            .is_none()
        {
            return Err(EngineError::RunNotFound(run_id.to_owned()));
        }
        let action = self
            .journal()
            .record_action(action(ActionKind::Cancel, run_id, by, reason))
            .await?;
        self.journal().cancel_by_operator(&action).await?;
        tracing::info!(run = %run_id, by = %action.by, "an operator cancelled a run");
        Ok(action)
    }

    /// The work of [`crate::Engine::retry_run`].
    pub(crate) async fn retry_run(
        &self,
        run_id: &str,
        by: String,
        reason: Option<String>,
    ) -> Result<ActionRecord, EngineError> {
        let mut action = action(ActionKind::Retry, run_id, by, reason);
        for _ in 0..KILL_ATTEMPTS {
            let found = self
                .store()
                .get_record(RecordKind::Run, run_id)
                .await?
                .ok_or_else(|| EngineError::RunNotFound(run_id.to_owned()))?;
            let mut record = RunRecord::decode(run_id, &found.value)?;
            if record.parked.take().is_none() {
                return Err(EngineError::RunNotParked(run_id.to_owned()));
            }
            // Given back, for any worker's next recovery pass, with its attempts counted
            // afresh; its steps stay, so the retry replays them (D8).
            record.failures = 0;
            record.owner = String::new();
            record.lease_until_ms = 0;
            let batch = action.put_in(WriteBatch::new())?.put_record(
                RecordKind::Run,
                run_id,
                record.encode()?,
                None,
                Expect::Version(found.version),
            );
            match self.commit_batch(batch).await {
                Ok(_) => {
                    tracing::info!(run = %run_id, by = %action.by, "an operator retried a parked run");
                    return Ok(action);
                }
                // Another action took this millisecond, or the entry changed (another
                // operator's retry, a clean-up): read it again.
                Err(error) if error.kind() == StoreErrorKind::Conflict => {
                    action.at_ms = action.at_ms.max(now_ms()) + 1;
                }
                Err(error) => return Err(error.into()),
            }
        }
        Err(EngineError::Store(StoreError::Conflict {
            what: "the journal entry of the run being retried",
        }))
    }

    /// The work of [`crate::Engine::kill_run`] (`kind` [`ActionKind::Kill`]) and of
    /// [`crate::Engine::purge_run`] ([`ActionKind::Purge`]).
    pub(crate) async fn end_run(
        &self,
        kind: ActionKind,
        run_id: &str,
        by: String,
        reason: Option<String>,
    ) -> Result<ActionRecord, EngineError> {
        let not_found = || EngineError::RunNotFound(run_id.to_owned());
        let mut found = self
            .store()
            .get_record(RecordKind::Run, run_id)
            .await?
            .ok_or_else(not_found)?;
        let mut action = action(kind, run_id, by, reason);
        for _ in 0..KILL_ATTEMPTS {
            let record = RunRecord::decode(run_id, &found.value)?;
            let outcome = outcome(record.request.id(), &action);
            // The action is committed with the kill, so a kill that loses to the run's
            // own end leaves no record of a kill that did not happen.
            let batch = action
                .put_in(WriteBatch::new())?
                .append(record.stream.clone(), to_text(&outcome))
                .close(record.stream.clone())
                .delete_record(RecordKind::Run, run_id, found.version)
                .delete_records(RecordKind::Step, key::steps(run_id));
            match self.commit_batch(batch).await {
                Ok(_) => {
                    if let Some(task) = &record.task
                        && let Err(error) = self.tasks().settle_task(task, &outcome).await
                    {
                        // The kill stands; only the task's status lags.
                        tracing::warn!(%error, %task, "a killed run's task could not be marked failed");
                    }
                    tracing::info!(run = %run_id, by = %action.by, action = kind.as_str(), "an operator ended a run");
                    return Ok(action);
                }
                // The run answered in the meantime: it has finished, not been killed.
                Err(error) if error.kind() == StoreErrorKind::StreamClosed => {
                    return Err(not_found());
                }
                // Its worker renewed the lease (or the run ended), or another action took
                // this millisecond: read it again.
                Err(error) if error.kind() == StoreErrorKind::Conflict => {
                    action.at_ms = action.at_ms.max(now_ms()) + 1;
                    found = self
                        .store()
                        .get_record(RecordKind::Run, run_id)
                        .await?
                        .ok_or_else(not_found)?;
                }
                Err(error) => return Err(error.into()),
            }
        }
        Err(EngineError::Store(StoreError::Conflict {
            what: "the journal entry of the run being killed",
        }))
    }

    /// The work of [`crate::Engine::cancel_task`].
    pub(crate) async fn cancel_task(
        &self,
        task_id: &str,
        by: String,
        reason: Option<String>,
    ) -> Result<ActionRecord, EngineError> {
        let not_found = || EngineError::TaskNotFound(task_id.to_owned());
        let (key, task) = crate::inspect::task(self.store().as_ref(), task_id)
            .await?
            .ok_or_else(not_found)?;
        let terminal = |status: TaskStatus| EngineError::TaskTerminal {
            task_id: task_id.to_owned(),
            status,
        };
        let (record, _) = self.tasks().load_task(&key).await?.ok_or_else(not_found)?;
        if record.status.is_terminal() {
            return Err(terminal(record.status));
        }
        // Kept against the task's run (its id, for tasks from before tasks kept it, is
        // its stream's: the run's actions are then not found under it).
        let run_id = task.run_id.clone().unwrap_or_else(|| task.stream.clone());
        let action = self
            .journal()
            .record_action(action(ActionKind::Cancel, &run_id, by, reason))
            .await?;
        let message = action.message();
        let mut was_terminal = None;
        let updated = self
            .tasks()
            .update_task(&key, |task| {
                if task.status.is_terminal() {
                    was_terminal = Some(task.status);
                    return false;
                }
                task.status = TaskStatus::Cancelled;
                task.status_message = Some(message.clone());
                task.input_requests.clear();
                true
            })
            .await?;
        match (was_terminal, updated) {
            (Some(status), _) => return Err(terminal(status)),
            (None, None) => return Err(not_found()),
            (None, Some(_)) => {}
        }
        // Its run, wherever it runs, sees the cancelled task; the mark also closes it with
        // the operator's words if it waits for a worker.
        if self
            .store()
            .get_record(RecordKind::Run, &run_id)
            .await?
            .is_some()
        {
            self.journal().cancel_by_operator(&action).await?;
        }
        tracing::info!(task = %task_id, by = %action.by, "an operator cancelled a task");
        Ok(action)
    }

    /// Close the stream of cancelled run `run_id` (as [`Requests::close_unanswered`]): with
    /// no response after its client's cancellation, with an error outcome that says so
    /// after an operator's; and end the `task` it worked for, if any, `cancelled`, with
    /// the same words. Whether the stream is closed.
    pub(crate) async fn close_cancelled(
        &self,
        run_id: &str,
        stream: &durable_mcp_store::StreamId,
        id: &durable_mcp_protocol::jsonrpc::RequestId,
        task: Option<&str>,
    ) -> bool {
        let action = match self.journal().cancelled_by_operator(run_id).await {
            Ok(action) => action,
            Err(error) => {
                tracing::warn!(%error, run = %run_id, "could not read a run's cancellation mark; it ends without an outcome");
                None
            }
        };
        let closed = match &action {
            Some(action) => {
                let data = to_text(&outcome(id, action));
                self.close_with(stream, &mut None, data).await
            }
            None => self.close_unanswered(stream, id, true).await,
        };
        if closed && let Some(task) = task {
            let message = action.map_or_else(
                || "The request was cancelled.".to_owned(),
                |action| action.message(),
            );
            if let Err(error) = self
                .tasks()
                .end_task(task, TaskStatus::Cancelled, &message)
                .await
            {
                tracing::warn!(%error, %task, "could not mark a task cancelled");
            }
        }
        closed
    }
}

/// The error outcome a client reads for an operator's `action` on its request `id` (the
/// reason goes to the client; who acted stays in the action record).
fn outcome(id: &durable_mcp_protocol::jsonrpc::RequestId, action: &ActionRecord) -> Value {
    error_response(
        id.clone(),
        code::ENDED_BY_OPERATOR,
        &action.message(),
        Some(json!({"action": action.action})),
    )
}

/// A new action of `kind` on `run_id`, taken now.
fn action(kind: ActionKind, run_id: &str, by: String, reason: Option<String>) -> ActionRecord {
    ActionRecord {
        action: kind,
        run_id: run_id.to_owned(),
        by,
        reason,
        at_ms: now_ms(),
    }
}
