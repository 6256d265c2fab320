//! The engine's side of a journaled run's [`Durable`](durable_mcp_handler::Durable)
//! context (D8, D9): steps and answers committed as step records of the journal, questions
//! asked on the run's stream (legacy), as a task's `inputRequests` (2026-07-28 tasks) or as
//! an `input_required` result (2026-07-28 without a task), and the request's turning into
//! a task.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use durable_mcp_handler::context::BoxFuture;
use durable_mcp_handler::{DurableBackend, DurableError, ServerChange};
use durable_mcp_protocol::jsonrpc::to_text;
use durable_mcp_protocol::meta::RELATED_TASK;
use durable_mcp_protocol::tasks::TaskStatus;
use durable_mcp_store::{Expect, RecordKind, StoreError, StreamId, now_ms};
use futures::StreamExt;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::EngineError;
use crate::caller::Caller;
use crate::gate::Gate;
use crate::journal::{Held, STATE_TTL, ms};
use crate::records::{Era, Flavor, key};
use crate::requests::Requests;
use crate::rerun::AlreadySent;

/// A request from the durable context to its pump: become a task, then reply with the
/// task's record key and stream (or why not).
pub(crate) type Detach = tokio::sync::oneshot::Sender<Result<(String, StreamId), EngineError>>;

/// What a durable context is built from: a held run, or a new one not committed yet.
pub(crate) struct RunView<'a> {
    pub run_id: &'a str,
    pub record: &'a crate::records::RunRecord,
    pub steps_written: &'a Arc<std::sync::atomic::AtomicBool>,
    pub already_sent: Option<&'a Arc<AlreadySent>>,
}

impl<'a> RunView<'a> {
    pub(crate) fn held(held: &'a Held) -> Self {
        Self {
            run_id: &held.run_id,
            record: &held.record,
            steps_written: &held.steps_written,
            already_sent: held.already_sent.as_ref(),
        }
    }

    pub(crate) fn unjournaled(run: &'a crate::journal::Unjournaled) -> Self {
        Self {
            run_id: &run.run_id,
            record: &run.record,
            steps_written: &run.steps_written,
            already_sent: None,
        }
    }
}

/// The engine's side of one run's durable context.
pub(crate) struct DurableRun {
    pub engine: Requests,
    pub run_id: String,
    pub attempt: u32,
    pub caller: Caller,
    /// The stream the run's messages go to (the task's own stream once it is a task).
    stream: Mutex<StreamId>,
    pub inbox: StreamId,
    /// The request's `params._meta` and `params.inputResponses`, the parts of its params a
    /// durable context reads (not the arguments: a copy of those per call could be large).
    meta: Option<Value>,
    input_responses: Option<Value>,
    pub cancel: CancellationToken,
    /// The task this run works for: its record key and design.
    task: Mutex<Option<(String, Flavor)>>,
    /// Asks the run's pump to turn the request into a task.
    detach: tokio::sync::mpsc::Sender<Detach>,
    /// Questions asked in this run (legacy era), by index: asked once per run.
    asked: Mutex<std::collections::HashSet<u64>>,
    /// Stateless era: the questions the client must answer before the run can go on.
    pub(crate) pending: Mutex<Vec<(String, Value)>>,
    /// Stateless requests' steps outlive their run (a retry continues it) until this time.
    step_expiry: Mutex<Option<u64>>,
    /// Set when this run writes a step record (the run's clean-up then deletes them).
    steps_written: Arc<std::sync::atomic::AtomicBool>,
    /// A re-run: what earlier runs already sent on the stream (shared with the pump).
    already_sent: Option<Arc<AlreadySent>>,
    /// A durable operation of this run failed because the store was unavailable: its
    /// outcome (which the handler built knowing only that) is not final, and the pump
    /// leaves the run to recovery instead of committing it.
    store_failed: std::sync::atomic::AtomicBool,
    /// A new run's journal entry, until committed: every durable operation waits for it.
    gate: Option<Gate>,
}

impl DurableRun {
    pub(crate) fn new(
        engine: &Requests,
        run: RunView<'_>,
        caller: Caller,
        cancel: CancellationToken,
        detach: tokio::sync::mpsc::Sender<Detach>,
        gate: Option<Gate>,
    ) -> Self {
        let (run_id, record) = (run.run_id, run.record);
        Self {
            engine: engine.clone(),
            run_id: run_id.to_owned(),
            attempt: record.attempt,
            caller,
            stream: Mutex::new(record.stream.clone()),
            inbox: record.inbox.clone(),
            meta: record.request.param("_meta").cloned(),
            input_responses: record.request.param("inputResponses").cloned(),
            cancel,
            task: Mutex::new(record.task.clone().zip(record.task_flavor)),
            detach,
            asked: Mutex::default(),
            pending: Mutex::default(),
            step_expiry: Mutex::new(record.stateless().then(|| now_ms() + ms(STATE_TTL) * 2)),
            steps_written: run.steps_written.clone(),
            already_sent: run.already_sent.cloned(),
            store_failed: std::sync::atomic::AtomicBool::new(false),
            gate,
        }
    }

    /// Wait until the run's journal entry is committed (D6: before its first effect).
    async fn journaled(&self) -> Result<(), DurableError> {
        match &self.gate {
            Some(gate) => gate.journaled().await.map_err(|e| self.journal_error(e)),
            None => Ok(()),
        }
    }

    /// A durable operation failed in the engine: the error, kept as the source. A store
    /// that is unavailable (a full disk, a failover) marks the run (see [`Self::store_failed`]).
    fn journal_error(&self, error: impl Into<EngineError>) -> DurableError {
        let error = error.into();
        if matches!(&error, EngineError::Store(store) if store.kind() == durable_mcp_store::StoreErrorKind::Unavailable)
        {
            self.store_failed
                .store(true, std::sync::atomic::Ordering::Relaxed);
        }
        DurableError::Journal(Box::new(error))
    }

    /// Whether a durable operation of this run failed on an unavailable store: then a
    /// transient failure, not the handler, decided its outcome, and a later attempt (from
    /// the journal, with the same step keys) must decide it instead.
    pub(crate) fn store_failed(&self) -> bool {
        self.store_failed.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn stream(&self) -> StreamId {
        self.stream
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn task(&self) -> Option<(String, Flavor)> {
        self.task.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn step_expiry(&self) -> Option<u64> {
        *self.step_expiry.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The committed value of step record `key`, if any.
    async fn stored(&self, key: &str) -> Result<Option<Value>, DurableError> {
        let record = self
            .engine
            .store()
            .get_record(RecordKind::Step, key)
            .await
            .map_err(|e| self.journal_error(e))?;
        record
            .map(|r| {
                crate::records::decode_step(key, &r.value)
                    .map(|(value, _)| value)
                    .map_err(|e| self.journal_error(e))
            })
            .transpose()
    }

    async fn ensure_inbox(&self) -> Result<(), DurableError> {
        let store = self.engine.store();
        match store.stream_owner(&self.inbox).await {
            Ok(_) => Ok(()),
            Err(StoreError::NotFound { .. }) => store
                .create_stream(&self.inbox, &self.caller.stream_owner())
                .await
                .map_err(|e| self.journal_error(e)),
            Err(error) => Err(self.journal_error(error)),
        }
    }

    /// The client's response with JSON-RPC id `wire` in the inbox after `after`, and the
    /// sequence read up to.
    async fn find_answer(
        &self,
        wire: &str,
        mut after: u64,
    ) -> Result<(Option<Value>, u64), DurableError> {
        loop {
            let read = self
                .engine
                .store()
                .read_after(&self.inbox, after, 256)
                .await
                .map_err(|e| self.journal_error(e))?;
            let n = read.events.len();
            for event in read.events {
                after = event.id.seq;
                if let Ok(message) = serde_json::from_str::<Value>(&event.data)
                    && message.get("id").and_then(Value::as_str) == Some(wire)
                {
                    return Ok((Some(message), after));
                }
            }
            if n < 256 {
                return Ok((None, after));
            }
        }
    }

    async fn ask_legacy(
        &self,
        index: u64,
        method: &str,
        params: Value,
    ) -> Result<Value, DurableError> {
        let answer_key = key::answer(&self.run_id, index);
        self.ensure_inbox().await?;
        let wire = key::inbox_question(&self.inbox, index);
        let store = self.engine.store().clone();
        // Subscribe first, then read: an answer committed in between still wakes us.
        let mut wake = store
            .watch(&self.inbox)
            .await
            .map_err(|e| self.journal_error(e))?;
        let (found, mut after) = self.find_answer(&wire, 0).await?;
        let answer = match found {
            Some(answer) => answer,
            None => {
                let first_time = self
                    .asked
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(index);
                if first_time {
                    let mut params = params;
                    if let Some((key, _)) = &self.task() {
                        // 2025-11-25 task: the task waits for input; the question, tied to
                        // the task, reaches the client through `tasks/result`.
                        self.set_task_status(key, TaskStatus::InputRequired).await?;
                        let task_id = key::task_id(key);
                        if let Some(obj) = params.as_object_mut() {
                            let meta = obj.entry("_meta").or_insert_with(|| json!({}));
                            if let Some(meta) = meta.as_object_mut() {
                                meta.insert(RELATED_TASK.into(), json!({"taskId": task_id}));
                            }
                        }
                    }
                    let message =
                        json!({"jsonrpc": "2.0", "id": wire, "method": method, "params": params});
                    self.engine
                        .append(&self.stream(), to_text(&message), false)
                        .await
                        .map_err(|e| self.journal_error(e))?;
                }
                loop {
                    tokio::select! {
                        woke = wake.next() => if woke.is_none() {
                            // The watch ended (the stream is gone, or the store reconnects):
                            // subscribe again after a pause.
                            tokio::time::sleep(Duration::from_millis(200)).await;
                            wake = store.watch(&self.inbox).await.map_err(|e| self.journal_error(e))?;
                        },
                        () = self.cancel.cancelled() => return Err(DurableError::Cancelled),
                        () = tokio::time::sleep(Duration::from_secs(1)) => {}
                    }
                    let (found, reached) = self.find_answer(&wire, after).await?;
                    after = reached;
                    if let Some(answer) = found {
                        break answer;
                    }
                }
            }
        };
        if let Some((key, _)) = &self.task() {
            self.set_task_status(key, TaskStatus::Working).await?;
        }
        self.commit_value(&answer_key, answer, None).await
    }

    async fn set_task_status(&self, key: &str, status: TaskStatus) -> Result<(), DurableError> {
        self.engine
            .tasks()
            .update_task(key, |task| {
                if task.status.is_terminal() || task.status == status {
                    return false;
                }
                task.status = status;
                task.status_message = Some(
                    if status == TaskStatus::InputRequired {
                        "The task waits for input."
                    } else {
                        "The task is running."
                    }
                    .into(),
                );
                true
            })
            .await
            .map_err(|e| self.journal_error(e))?;
        Ok(())
    }

    /// 2026-07-28 task: the question becomes one of the task's `inputRequests`; the answer
    /// arrives with `tasks/update`, at any worker, into the task record.
    async fn ask_extension_task(
        &self,
        key: &str,
        index: u64,
        method: &str,
        params: Value,
    ) -> Result<Value, DurableError> {
        let question = key::question(index);
        loop {
            let task = self
                .engine
                .tasks()
                .update_task(key, |task| {
                    if task.status.is_terminal()
                        || task.input_responses.contains_key(&question)
                        || task.input_requests.contains_key(&question)
                    {
                        return false;
                    }
                    task.input_requests.insert(
                        question.clone(),
                        json!({"method": method, "params": params}),
                    );
                    task.status = TaskStatus::InputRequired;
                    task.status_message = Some("The task waits for input.".into());
                    true
                })
                .await
                .map_err(|e| self.journal_error(e))?;
            let Some(task) = task else {
                return Err(DurableError::Cancelled);
            };
            if let Some(response) = task.input_responses.get(&question) {
                let answer = self
                    .commit_value(
                        &key::answer(&self.run_id, index),
                        json!({"result": response}),
                        None,
                    )
                    .await?;
                self.engine
                    .tasks()
                    .update_task(key, |task| task.input_responses.remove(&question).is_some())
                    .await
                    .map_err(|e| self.journal_error(e))?;
                return Ok(answer);
            }
            if task.status.is_terminal() {
                return Err(DurableError::Cancelled);
            }
            tokio::select! {
                () = self.cancel.cancelled() => return Err(DurableError::Cancelled),
                () = tokio::time::sleep(Duration::from_millis(100)) => {}
            }
        }
    }

    fn ask_stateless(&self, index: u64) -> Result<Value, DurableError> {
        // 2026-07-28 without a task: the answer arrives in a retry's `inputResponses`.
        let key = key::question(index);
        match self.input_responses.as_ref().and_then(|r| r.get(&key)) {
            Some(response) => Ok(json!({"result": response})),
            None => Err(DurableError::InputRequired),
        }
    }

    /// Commit `value` as step record `key` (a step whose body took `ran`, or an answer),
    /// unless one is there: the first commit wins and is returned (D8, D9).
    async fn commit_value(
        &self,
        key: &str,
        value: Value,
        ran: Option<Duration>,
    ) -> Result<Value, DurableError> {
        // A run an operator killed commits no more (its worker learns of it at its next
        // heartbeat, which cancels the run). Any other cancelled run keeps what its step
        // did: the first commit wins and a run that goes on elsewhere reuses it (D8).
        if self.cancel.is_cancelled()
            && let Ok(true) = self.engine.journal().killed(&self.run_id).await
        {
            return Err(DurableError::Cancelled);
        }
        self.steps_written.store(true, Ordering::SeqCst);
        let meta = crate::records::StepMeta {
            at_ms: durable_mcp_store::now_ms(),
            ms: ran.map(|ran| u64::try_from(ran.as_millis()).unwrap_or(u64::MAX)),
            attempt: self.attempt,
            worker: self.engine.journal().worker_id().to_owned(),
        };
        let stored =
            crate::records::encode_step(&value, &meta).map_err(|e| self.journal_error(e))?;
        let store = self.engine.store();
        match store
            .put_record(
                RecordKind::Step,
                key,
                stored,
                self.step_expiry(),
                Expect::Absent,
            )
            .await
        {
            Ok(_) => Ok(value),
            Err(StoreError::Conflict { .. }) => {
                // Another run committed it first: its value stands.
                self.stored(key).await?.ok_or_else(|| {
                    self.journal_error(crate::records::RecordError::Missing {
                        kind: RecordKind::Step,
                        key: key.to_owned(),
                    })
                })
            }
            Err(error) => Err(self.journal_error(error)),
        }
    }
}

impl DurableBackend for DurableRun {
    fn run_id(&self) -> &str {
        &self.run_id
    }

    fn attempt(&self) -> u32 {
        self.attempt
    }

    fn load_step<'a>(
        &'a self,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<Value>, DurableError>> {
        Box::pin(async move {
            self.journaled().await?;
            self.stored(&key::step(&self.run_id, key::StepKind::Step, name))
                .await
        })
    }

    fn commit_step<'a>(
        &'a self,
        name: &'a str,
        value: Value,
        ran: Duration,
    ) -> BoxFuture<'a, Result<Value, DurableError>> {
        Box::pin(async move {
            self.journaled().await?;
            self.commit_value(
                &key::step(&self.run_id, key::StepKind::Step, name),
                value,
                Some(ran),
            )
            .await
        })
    }

    fn ask<'a>(
        &'a self,
        index: u64,
        method: &'a str,
        params: Value,
    ) -> BoxFuture<'a, Result<Value, DurableError>> {
        Box::pin(async move {
            self.journaled().await?;
            let answer_key = key::answer(&self.run_id, index);
            if let Some(stored) = self.stored(&answer_key).await? {
                crate::metrics::answer_reused(method);
                return Ok(stored);
            }
            match (&self.task(), self.caller.era) {
                (Some((key, Flavor::Extension)), _) => {
                    self.ask_extension_task(key, index, method, params).await
                }
                (_, Era::Legacy) => self.ask_legacy(index, method, params).await,
                (None | Some((_, Flavor::V2025)), Era::Modern) => match self.ask_stateless(index) {
                    Ok(answer) => self.commit_value(&answer_key, answer, None).await,
                    Err(error) => {
                        self.pending
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .push((
                                key::question(index),
                                json!({"method": method, "params": params}),
                            ));
                        Err(error)
                    }
                },
            }
        })
    }

    fn emit<'a>(
        &'a self,
        index: u64,
        method: &'a str,
        params: Value,
    ) -> BoxFuture<'a, Result<(), DurableError>> {
        Box::pin(async move {
            self.journaled().await?;
            let key = key::emitted(&self.run_id, index);
            self.steps_written.store(true, Ordering::SeqCst);
            // Marked before it is sent: a crash in between loses one progress or log
            // message, and a re-run never sends it twice.
            match self
                .engine
                .store()
                .put_record(
                    RecordKind::Step,
                    &key,
                    crate::records::MARK.into(),
                    self.step_expiry(),
                    Expect::Absent,
                )
                .await
            {
                Ok(_) => {}
                Err(StoreError::Conflict { .. }) => return Ok(()),
                Err(error) => return Err(self.journal_error(error)),
            }
            let message = json!({"jsonrpc": "2.0", "method": method, "params": params});
            self.engine
                .route_notification(
                    &self.caller,
                    &self.stream(),
                    method,
                    message,
                    self.already_sent.as_deref(),
                )
                .await
                .map_err(|e| self.journal_error(e))
        })
    }

    fn start_task(&self) -> BoxFuture<'_, Result<bool, DurableError>> {
        Box::pin(async move {
            if self.task().is_some() {
                return Ok(true);
            }
            let declared =
                crate::tasks::declares_extension(self.meta.as_ref().and_then(Value::as_object));
            if self.caller.era != Era::Modern || !declared {
                return Ok(false);
            }
            self.journaled().await?;
            let (reply, answer) = tokio::sync::oneshot::channel();
            self.detach
                .send(reply)
                .await
                .map_err(|_| self.journal_error(EngineError::RunEnded))?;
            let (key, stream) = answer
                .await
                .map_err(|_| self.journal_error(EngineError::RunEnded))?
                .map_err(|e| self.journal_error(e))?;
            *self.task.lock().unwrap_or_else(|p| p.into_inner()) = Some((key, Flavor::Extension));
            *self.stream.lock().unwrap_or_else(|p| p.into_inner()) = stream;
            // A task's steps live as long as the task.
            *self.step_expiry.lock().unwrap_or_else(|p| p.into_inner()) = None;
            Ok(true)
        })
    }

    fn cancellation(&self) -> CancellationToken {
        self.cancel.clone()
    }

    fn progress_token(&self) -> Option<Value> {
        self.meta
            .as_ref()
            .and_then(|m| m.get("progressToken"))
            .cloned()
    }

    fn journaled(&self) -> BoxFuture<'_, Result<(), DurableError>> {
        Box::pin(self.journaled())
    }

    fn announce(&self, change: ServerChange) -> BoxFuture<'_, Result<(), DurableError>> {
        Box::pin(async move {
            self.journaled().await?;
            self.engine
                .changes()
                .announce(&change)
                .await
                .map_err(|e| self.journal_error(e))
        })
    }
}
