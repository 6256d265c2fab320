//! Durable execution: the journal (D6), leases and recovery (D7), and the engine's side of
//! the handler's [`Durable`] context (D8, D9).
//!
//! A journaled request is a [`RecordKind::Run`] record, committed before its handler
//! starts, keyed by the run id (the id of its response stream). The record holds what is
//! needed to run the request again (the request, the caller) and a lease: the worker that
//! runs it and until when. The owner renews the lease while the handler runs; any worker's
//! recovery loop takes over a run whose lease expired, and a worker resumes at start-up
//! the runs it owned before it stopped. The record is deleted once the outcome is
//! committed to the stream, so the stream's closing event is the single outcome (D7).
//!
//! Step results, answers and "already emitted" marks are [`RecordKind::Step`] records
//! under `<run>/`, written with "first commit wins" (D8).

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use durable_mcp_protocol::context::BoxFuture;
use durable_mcp_protocol::jsonrpc::RequestId;
use durable_mcp_protocol::{DurableBackend, DurableError, McpVersion, ServerChange, StateKeys, StateSealer};
use durable_mcp_store::{Expect, Principal, RecordKind, SessionId, StoreError, StreamId, WriteBatch, key_part, now_ms};
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;

use crate::rerun::AlreadySent;
use crate::tasks::{Flavor, RELATED_TASK, is_terminal};
use crate::{Caller, Engine, EngineError, Era};

/// The methods whose requests are journaled (D6): those whose handlers may take time or
/// have effects.
pub const JOURNALED_METHODS: [&str; 4] = ["tools/call", "prompts/get", "resources/read", "completion/complete"];

/// The journal entry of one request, with its lease.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct RunRecord {
    pub principal: String,
    pub session: Option<String>,
    pub modern: bool,
    pub protocol_version: McpVersion,
    pub log_level: Option<String>,
    pub request: Map<String, Value>,
    pub stream: String,
    /// Where the client's answers to durable questions are committed (created lazily).
    pub inbox: String,
    pub owner: String,
    pub lease_until_ms: u64,
    pub attempt: u32,
    /// The task this run does the work of (its record key), if any.
    #[serde(default)]
    pub task: Option<String>,
    /// That task's design.
    #[serde(default)]
    pub task_flavor: Option<Flavor>,
    /// Runs that ended without an outcome (a panic, a store failure). Hand-overs
    /// (shutdown, lease takeover) do not count.
    #[serde(default)]
    pub failures: u32,
    /// A task's request stream, where its create result goes (2025-11-25 tasks).
    #[serde(default)]
    pub reply: Option<String>,
    /// A 2025-11-25 `tasks/result`: the task whose stream is relayed onto `stream`. Such a
    /// run has no handler: recovery restarts the relay where it stopped.
    #[serde(default)]
    pub relay: Option<Relay>,
}

/// What a journaled `tasks/result` relays.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Relay {
    /// The task's record key.
    pub task: String,
    /// The task's id.
    pub task_id: String,
    /// The task's own stream (its questions, then its outcome).
    pub source: String,
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn journal_error(error: impl std::fmt::Display) -> DurableError {
    DurableError::Journal(error.to_string())
}

impl RunRecord {
    pub(crate) fn new(engine: &Engine, caller: &Caller, request: Map<String, Value>, stream: &StreamId) -> Self {
        Self {
            principal: caller.principal.as_str().to_owned(),
            session: caller.session.as_ref().map(|s| s.id.to_string()),
            modern: caller.era == Era::Modern,
            protocol_version: caller.protocol_version,
            log_level: caller.log_level.clone(),
            request,
            stream: stream.to_string(),
            inbox: StreamId::random().to_string(),
            owner: engine.options().worker_id.clone(),
            lease_until_ms: now_ms() + ms(engine.options().lease),
            attempt: 1,
            task: None,
            task_flavor: None,
            failures: 0,
            reply: None,
            relay: None,
        }
    }

    pub(crate) fn encode(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    fn decode(value: &str) -> Result<Self, StoreError> {
        serde_json::from_str(value).map_err(|e| StoreError::Corrupt(format!("run record: {e}")))
    }

    pub(crate) fn id(&self) -> RequestId {
        self.request.get("id").cloned().unwrap_or(Value::Null)
    }
}

/// A journaled run held by this worker: its record's current version, renewed by a
/// heartbeat until the run ends.
pub(crate) struct Held {
    pub run_id: String,
    /// The record as this worker last wrote it.
    pub record: RunRecord,
    /// The same record and its version, shared with the heartbeat: every write of the
    /// record (lease renewal, becoming a task) holds the lock, so they never conflict with
    /// each other, only with another worker.
    shared: Arc<tokio::sync::Mutex<(RunRecord, u64)>>,
    /// Fires if another worker took the run over (our lease was lost).
    pub lost: CancellationToken,
    /// Fires when the client cancelled the request (on any worker; a child of `lost`).
    pub cancelled: CancellationToken,
    /// Whether an earlier run or this one may have written step records.
    pub(crate) steps_written: Arc<std::sync::atomic::AtomicBool>,
    /// Until when the lease is surely ours: the last successful renewal plus the lease.
    valid_until_ms: Arc<std::sync::atomic::AtomicU64>,
    /// A re-run: the notifications earlier runs already committed to its stream, which it
    /// does not send again (read once when the run is taken over; `None` for a first run).
    pub(crate) already_sent: Option<Arc<AlreadySent>>,
    heartbeat: tokio::task::JoinHandle<()>,
    /// Set once the run's record went with its outcome ([`Held::commit_outcome`]).
    ended: bool,
}

impl Drop for Held {
    fn drop(&mut self) {
        // However the run ends (an early return, an error), its heartbeat ends with it:
        // a lease nobody renews expires and the run is recovered.
        self.heartbeat.abort();
    }
}

impl Held {
    pub(crate) fn start(engine: &Engine, run_id: String, record: RunRecord, version: u64) -> Self {
        let shared = Arc::new(tokio::sync::Mutex::new((record.clone(), version)));
        let lost = CancellationToken::new();
        let cancelled = lost.child_token();
        let valid_until_ms = Arc::new(std::sync::atomic::AtomicU64::new(record.lease_until_ms));
        let beat = Beat { shared: shared.clone(), lost: lost.clone(), cancelled: cancelled.clone(), valid_until_ms: valid_until_ms.clone() };
        let heartbeat = tokio::spawn(heartbeat(engine.clone(), run_id.clone(), beat));
        let steps_written = Arc::new(std::sync::atomic::AtomicBool::new(record.attempt > 1 || record.modern));
        Self { run_id, record, shared, lost, cancelled, steps_written, valid_until_ms, already_sent: None, heartbeat, ended: false }
    }

    /// Whether the lease is still surely ours (fencing: a worker that could not renew it
    /// for a whole lease must not commit an outcome another worker may also commit).
    pub(crate) fn lease_valid(&self) -> bool {
        now_ms() < self.valid_until_ms.load(Ordering::SeqCst)
    }

    /// Stop renewing the lease (the run is about to end).
    pub(crate) fn stop_heartbeat(&self) {
        self.heartbeat.abort();
    }

    /// Change the run's record (compare-and-set against the version this worker holds).
    pub(crate) async fn update(&mut self, engine: &Engine, change: impl FnOnce(&mut RunRecord)) -> Result<(), EngineError> {
        let mut guard = self.shared.lock().await;
        let mut record = guard.0.clone();
        change(&mut record);
        let version = engine
            .store()
            .put_record(RecordKind::Run, &self.run_id, record.encode(), None, Expect::Version(guard.1))
            .await?;
        *guard = (record.clone(), version);
        self.record = record;
        Ok(())
    }

    /// The run has its outcome (or was cancelled): forget it. A stateless request's steps
    /// stay until they expire: a sealed `requestState` naming the run may still come back
    /// (a retry after a crash, a replay), and must find its committed steps (D8).
    pub(crate) async fn finish(self, engine: &Engine) {
        self.heartbeat.abort();
        if self.ended {
            return;
        }
        let store = engine.store();
        let steps = format!("{}/", self.run_id);
        let stateless = self.record.modern && self.record.task.is_none();
        if !stateless
            && self.steps_written.load(Ordering::SeqCst)
            && let Err(error) = store.delete_records(RecordKind::Step, &steps).await
        {
            tracing::warn!(%error, run = %self.run_id, "could not delete a finished run's steps; retention will");
        }
        if let Err(error) = store.delete_records(RecordKind::Run, &self.run_id).await {
            tracing::warn!(%error, run = %self.run_id, "could not delete a finished run's journal entry; recovery will");
        }
    }

    /// Commit the run's outcome as the last event of `stream` and end its journal entry,
    /// in one batch: the outcome, the close, the run record's removal at the version this
    /// worker holds, and the steps of a run that wrote some (a stateless request's stay, see
    /// [`Held::finish`]).
    ///
    /// # Durability
    /// All or nothing (D7): either the client's one outcome is committed and the run is no
    /// longer journaled, or neither. The removal is fenced by the version: if another
    /// worker took the run over (or renewed it), nothing is written and the error says so.
    pub(crate) async fn commit_outcome(&mut self, engine: &Engine, stream: &StreamId, outcome: &Value) -> Result<(), EngineError> {
        // Held while committing: no heartbeat moves the version in between.
        let guard = self.shared.lock().await;
        let mut batch = WriteBatch::new()
            .append(stream.clone(), outcome.to_string())
            .close(stream.clone())
            .delete_record(RecordKind::Run, self.run_id.clone(), guard.1);
        let stateless = self.record.modern && self.record.task.is_none();
        if !stateless && self.steps_written.load(Ordering::SeqCst) {
            batch = batch.delete_records(RecordKind::Step, format!("{}/", self.run_id));
        }
        engine.commit_batch(batch).await?;
        drop(guard);
        self.heartbeat.abort();
        self.ended = true;
        Ok(())
    }

    /// Give the run back: another worker (or our own recovery loop) picks it up at
    /// `retry_at_ms`.
    pub(crate) async fn release(self, engine: &Engine, retry_at_ms: u64, failed: bool) {
        self.heartbeat.abort();
        let guard = self.shared.lock().await;
        let (mut record, version) = guard.clone();
        record.lease_until_ms = retry_at_ms;
        record.owner = String::new();
        if failed {
            record.failures += 1;
        }
        match engine.store().put_record(RecordKind::Run, &self.run_id, record.encode(), None, Expect::Version(version)).await {
            Ok(_) => tracing::info!(run = %self.run_id, "released a run's lease"),
            Err(error) => tracing::warn!(%error, run = %self.run_id, "could not release a lease; it expires by itself"),
        }
    }
}

/// What a run's heartbeat shares with its [`Held`].
struct Beat {
    shared: Arc<tokio::sync::Mutex<(RunRecord, u64)>>,
    lost: CancellationToken,
    cancelled: CancellationToken,
    valid_until_ms: Arc<std::sync::atomic::AtomicU64>,
}

/// Renew the lease every third of it; stop the run if another worker took it over, if it
/// could not be renewed for a whole lease, or if a client's cancellation was recorded for
/// it (from any worker).
async fn heartbeat(engine: Engine, run_id: String, beat: Beat) {
    let lease = engine.options().lease;
    let mut ticker = tokio::time::interval(lease / 3);
    ticker.tick().await;
    loop {
        ticker.tick().await;
        let renewed = {
            let mut guard = beat.shared.lock().await;
            let mut record = guard.0.clone();
            record.lease_until_ms = now_ms() + ms(lease);
            let put = engine.store().put_record(RecordKind::Run, &run_id, record.encode(), None, Expect::Version(guard.1)).await;
            if let Ok(version) = put {
                beat.valid_until_ms.store(record.lease_until_ms, Ordering::SeqCst);
                *guard = (record, version);
            }
            put
        };
        match renewed {
            Ok(_) => {}
            Err(StoreError::Conflict { .. }) => {
                tracing::warn!(run = %run_id, "lease lost: another worker took this run over; stopping it here");
                beat.lost.cancel();
                return;
            }
            Err(error) if now_ms() >= beat.valid_until_ms.load(Ordering::SeqCst) => {
                tracing::warn!(%error, run = %run_id, "lease expired without renewal; stopping the run here");
                beat.lost.cancel();
                return;
            }
            Err(error) => tracing::warn!(%error, run = %run_id, "could not renew a lease; retrying"),
        }
        if let Ok(Some(_)) = engine.store().get_record(RecordKind::Step, &cancel_key(&run_id)).await {
            tracing::debug!(run = %run_id, "cancelled by the client through another worker");
            beat.cancelled.cancel();
        }
    }
}

/// The mark a client's `notifications/cancelled` leaves for a run running elsewhere.
fn cancel_key(run_id: &str) -> String {
    format!("{run_id}/cancel")
}

/// What a taken-over run needs.
enum Resume {
    /// Run it again, for this caller, on this stream, which already holds these
    /// notifications.
    Launch(Box<Caller>, RequestId, StreamId, AlreadySent),
    /// Go on relaying a task's result (a journaled `tasks/result`).
    Relay,
    /// Nothing more than cleaning up.
    Done,
}

/// A request from the durable context to its pump: become a task, then reply with the
/// task's record key and stream (or why not).
pub(crate) type Detach = tokio::sync::oneshot::Sender<Result<(String, StreamId), String>>;

/// The engine's side of one run's durable context.
pub(crate) struct DurableRun {
    pub engine: Engine,
    pub run_id: String,
    pub attempt: u32,
    pub caller: Caller,
    /// The stream the run's messages go to (the task's own stream once it is a task).
    stream: Mutex<StreamId>,
    pub inbox: StreamId,
    pub params: Value,
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
}

impl DurableRun {
    pub(crate) fn new(
        engine: &Engine,
        held: &Held,
        caller: Caller,
        cancel: CancellationToken,
        detach: tokio::sync::mpsc::Sender<Detach>,
    ) -> Self {
        let (run_id, record) = (&held.run_id, &held.record);
        Self {
            engine: engine.clone(),
            run_id: run_id.to_owned(),
            attempt: record.attempt,
            caller,
            stream: Mutex::new(record.stream.parse().unwrap_or_else(|_| StreamId::random())),
            inbox: record.inbox.parse().unwrap_or_else(|_| StreamId::random()),
            params: record.request.get("params").cloned().unwrap_or(Value::Null),
            cancel,
            task: Mutex::new(record.task.clone().zip(record.task_flavor)),
            detach,
            asked: Mutex::default(),
            pending: Mutex::default(),
            step_expiry: Mutex::new((record.modern && record.task.is_none()).then(|| now_ms() + ms(STATE_TTL) * 2)),
            steps_written: held.steps_written.clone(),
            already_sent: held.already_sent.clone(),
        }
    }

    fn stream(&self) -> StreamId {
        self.stream.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn task(&self) -> Option<(String, Flavor)> {
        self.task.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn step_expiry(&self) -> Option<u64> {
        *self.step_expiry.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A step record's key: `<run>/<kind>/<name>`, the name (a handler's step name, maybe
    /// built from input) bounded by [`key_part`].
    fn key(&self, kind: &str, name: &str) -> String {
        format!("{}/{kind}/{}", self.run_id, key_part(name))
    }

    async fn ensure_inbox(&self) -> Result<(), DurableError> {
        let store = self.engine.store();
        match store.stream_owner(&self.inbox).await {
            Ok(_) => Ok(()),
            Err(StoreError::NotFound { .. }) => {
                store.create_stream(&self.inbox, &self.caller.stream_owner()).await.map_err(journal_error)
            }
            Err(error) => Err(journal_error(error)),
        }
    }

    /// The client's response with JSON-RPC id `wire` in the inbox after `after`, and the
    /// sequence read up to.
    async fn find_answer(&self, wire: &str, mut after: u64) -> Result<(Option<Value>, u64), DurableError> {
        loop {
            let read = self.engine.store().read_after(&self.inbox, after, 256).await.map_err(journal_error)?;
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

    async fn ask_legacy(&self, index: u64, method: &str, params: Value) -> Result<Value, DurableError> {
        let answer_key = self.key("a", &index.to_string());
        self.ensure_inbox().await?;
        let wire = format!("{}-d{index}", self.inbox);
        let store = self.engine.store().clone();
        // Subscribe first, then read: an answer committed in between still wakes us.
        let mut wake = store.watch(&self.inbox).await.map_err(journal_error)?;
        let (found, mut after) = self.find_answer(&wire, 0).await?;
        let answer = match found {
            Some(answer) => answer,
            None => {
                let first_time = self.asked.lock().unwrap_or_else(|p| p.into_inner()).insert(index);
                if first_time {
                    let mut params = params;
                    if let Some((key, _)) = &self.task() {
                        // 2025-11-25 task: the task waits for input; the question, tied to
                        // the task, reaches the client through `tasks/result`.
                        self.set_task_status(key, "input_required").await?;
                        let task_id = key.rsplit('/').next().unwrap_or_default();
                        if let Some(obj) = params.as_object_mut() {
                            let meta = obj.entry("_meta").or_insert_with(|| json!({}));
                            if let Some(meta) = meta.as_object_mut() {
                                meta.insert(RELATED_TASK.into(), json!({"taskId": task_id}));
                            }
                        }
                    }
                    let message = json!({"jsonrpc": "2.0", "id": wire, "method": method, "params": params});
                    self.engine.commit(&self.stream(), &message, false).await.map_err(journal_error)?;
                }
                loop {
                    tokio::select! {
                        woke = wake.next() => if woke.is_none() {
                            // The watch ended (the stream is gone, or the store reconnects):
                            // subscribe again after a pause.
                            tokio::time::sleep(Duration::from_millis(200)).await;
                            wake = store.watch(&self.inbox).await.map_err(journal_error)?;
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
            self.set_task_status(key, "working").await?;
        }
        self.commit_value(&answer_key, answer).await
    }

    async fn set_task_status(&self, key: &str, status: &str) -> Result<(), DurableError> {
        self.engine
            .update_task(key, |task| {
                if is_terminal(&task.status) || task.status == status {
                    return false;
                }
                task.status = status.to_owned();
                task.status_message = Some(if status == "input_required" { "The task waits for input." } else { "The task is running." }.into());
                true
            })
            .await
            .map_err(journal_error)?;
        Ok(())
    }

    /// 2026-07-28 task: the question becomes one of the task's `inputRequests`; the answer
    /// arrives with `tasks/update`, at any worker, into the task record.
    async fn ask_extension_task(&self, key: &str, index: u64, method: &str, params: Value) -> Result<Value, DurableError> {
        let question = format!("q{index}");
        loop {
            let task = self
                .engine
                .update_task(key, |task| {
                    if is_terminal(&task.status)
                        || task.input_responses.contains_key(&question)
                        || task.input_requests.contains_key(&question)
                    {
                        return false;
                    }
                    task.input_requests.insert(question.clone(), json!({"method": method, "params": params}));
                    task.status = "input_required".into();
                    task.status_message = Some("The task waits for input.".into());
                    true
                })
                .await
                .map_err(journal_error)?;
            let Some(task) = task else { return Err(DurableError::Cancelled) };
            if let Some(response) = task.input_responses.get(&question) {
                let answer = self.commit_value(&self.key("a", &index.to_string()), json!({"result": response})).await?;
                self.engine
                    .update_task(key, |task| task.input_responses.remove(&question).is_some())
                    .await
                    .map_err(journal_error)?;
                return Ok(answer);
            }
            if is_terminal(&task.status) {
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
        let key = format!("q{index}");
        match self.params.get("inputResponses").and_then(|r| r.get(&key)) {
            Some(response) => Ok(json!({"result": response})),
            None => Err(DurableError::InputRequired),
        }
    }

    async fn commit_value(&self, key: &str, value: Value) -> Result<Value, DurableError> {
        self.steps_written.store(true, Ordering::SeqCst);
        let store = self.engine.store();
        match store.put_record(RecordKind::Step, key, value.to_string(), self.step_expiry(), Expect::Absent).await {
            Ok(_) => Ok(value),
            Err(StoreError::Conflict { .. }) => {
                let stored = store.get_record(RecordKind::Step, key).await.map_err(journal_error)?;
                let stored = stored.ok_or_else(|| DurableError::Journal(format!("step {key} vanished")))?;
                serde_json::from_str(&stored.value).map_err(journal_error)
            }
            Err(error) => Err(journal_error(error)),
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

    fn load_step<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Option<Value>, DurableError>> {
        Box::pin(async move {
            let record = self.engine.store().get_record(RecordKind::Step, &self.key("s", name)).await.map_err(journal_error)?;
            record.map(|r| serde_json::from_str(&r.value).map_err(journal_error)).transpose()
        })
    }

    fn commit_step<'a>(&'a self, name: &'a str, value: Value) -> BoxFuture<'a, Result<Value, DurableError>> {
        Box::pin(async move { self.commit_value(&self.key("s", name), value).await })
    }

    fn ask<'a>(&'a self, index: u64, method: &'a str, params: Value) -> BoxFuture<'a, Result<Value, DurableError>> {
        Box::pin(async move {
            let answer_key = self.key("a", &index.to_string());
            if let Some(stored) = self.engine.store().get_record(RecordKind::Step, &answer_key).await.map_err(journal_error)? {
                return serde_json::from_str(&stored.value).map_err(journal_error);
            }
            match (&self.task(), self.caller.era) {
                (Some((key, Flavor::Extension)), _) => self.ask_extension_task(key, index, method, params).await,
                (_, Era::Legacy) => self.ask_legacy(index, method, params).await,
                (None | Some((_, Flavor::V2025)), Era::Modern) => match self.ask_stateless(index) {
                    Ok(answer) => self.commit_value(&answer_key, answer).await,
                    Err(error) => {
                        self.pending.lock().unwrap_or_else(|p| p.into_inner()).push((format!("q{index}"), json!({"method": method, "params": params})));
                        Err(error)
                    }
                },
            }
        })
    }

    fn emit<'a>(&'a self, index: u64, method: &'a str, params: Value) -> BoxFuture<'a, Result<(), DurableError>> {
        Box::pin(async move {
            let key = self.key("e", &index.to_string());
            self.steps_written.store(true, Ordering::SeqCst);
            // Marked before it is sent: a crash in between loses one progress or log
            // message, and a re-run never sends it twice.
            match self.engine.store().put_record(RecordKind::Step, &key, "1".into(), self.step_expiry(), Expect::Absent).await {
                Ok(_) => {}
                Err(StoreError::Conflict { .. }) => return Ok(()),
                Err(error) => return Err(journal_error(error)),
            }
            let message = json!({"jsonrpc": "2.0", "method": method, "params": params});
            self.engine
                .route_notification(&self.caller, &self.stream(), method, message, self.already_sent.as_deref())
                .await
                .map_err(journal_error)
        })
    }

    fn start_task(&self) -> BoxFuture<'_, Result<bool, DurableError>> {
        Box::pin(async move {
            if self.task().is_some() {
                return Ok(true);
            }
            let declared = self.params.get("_meta").is_some_and(|meta| {
                let mut request = Map::new();
                request.insert("params".into(), json!({"_meta": meta}));
                crate::tasks::declares_extension(&request)
            });
            if self.caller.era != Era::Modern || !declared {
                return Ok(false);
            }
            let (reply, answer) = tokio::sync::oneshot::channel();
            self.detach.send(reply).await.map_err(|_| DurableError::Journal("the run has ended".into()))?;
            let (key, stream) = answer
                .await
                .map_err(|_| DurableError::Journal("the run has ended".into()))?
                .map_err(DurableError::Journal)?;
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
        self.params.get("_meta").and_then(|m| m.get("progressToken")).cloned()
    }

    fn announce(&self, change: ServerChange) -> BoxFuture<'_, Result<(), DurableError>> {
        Box::pin(async move { self.engine.announce(&change).await.map_err(journal_error) })
    }
}

/// How long the marks about a request outlive it: a session's request id pointing at its run
/// (re-sent requests attach), a cancellation recorded for a run elsewhere.
pub(crate) const MARK_TTL_MS: u64 = 24 * 3_600_000;

/// How long a stateless request waiting for input may be continued.
pub(crate) const STATE_TTL: Duration = Duration::from_secs(600);

/// JSON with object keys in sorted order, whatever the map type: the same parameters
/// always give the same bytes.
pub(crate) fn canonical(value: &Value) -> String {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            let fields: Vec<String> =
                keys.into_iter().map(|k| format!("{}:{}", Value::String(k.clone()), canonical(&map[k]))).collect();
            format!("{{{}}}", fields.join(","))
        }
        Value::Array(items) => format!("[{}]", items.iter().map(canonical).collect::<Vec<_>>().join(",")),
        other => other.to_string(),
    }
}

/// What a sealed run state is bound to (D12): the principal, the method and the
/// request's parameters (without the state, the answers and `_meta`).
fn state_binding(principal: &Principal, request: &Map<String, Value>) -> Vec<u8> {
    let method = request.get("method").and_then(Value::as_str).unwrap_or_default();
    let mut params = request.get("params").and_then(Value::as_object).cloned().unwrap_or_default();
    for key in ["requestState", "inputResponses", "_meta"] {
        params.remove(key);
    }
    format!("durable-mcp/run\n{}\n{method}\n{}", principal.as_str(), canonical(&Value::Object(params))).into_bytes()
}

/// The sealed `requestState` that lets a retry continue run `run_id`.
pub(crate) fn seal_run(keys: &StateKeys, run_id: &str, principal: &Principal, request: &Map<String, Value>) -> String {
    StateSealer::new(keys.clone()).seal(&json!({"run": run_id}), &state_binding(principal, request), STATE_TTL)
}

/// The run a retry's sealed `requestState` continues; an error message for tampered,
/// foreign or expired state, or state sealed with a key no longer in use.
pub(crate) fn open_run(keys: &StateKeys, sealed: &str, principal: &Principal, request: &Map<String, Value>) -> Result<String, String> {
    let payload = StateSealer::new(keys.clone()).open(sealed, &state_binding(principal, request)).map_err(|e| e.to_string())?;
    payload.get("run").and_then(Value::as_str).map(str::to_owned).ok_or_else(|| "invalid requestState: no run".to_owned())
}

/// The alias under which a legacy session's JSON-RPC request id points at its run. The id
/// is the client's, of any length a body may carry: bounded by [`key_part`], so that every
/// backend can index the key (a 3,000-byte id overflowed PostgreSQL's index).
pub(crate) fn alias_key(session: &SessionId, id: &RequestId) -> String {
    format!("{session}/{}", key_part(&id.to_string()))
}

impl Engine {
    /// The run a session's request id already started, if any (a re-sent request attaches
    /// to it, D6).
    pub(crate) async fn existing_run(&self, session: &SessionId, id: &RequestId) -> Result<Option<StreamId>, EngineError> {
        let alias = self.store().get_record(RecordKind::Alias, &alias_key(session, id)).await?;
        Ok(alias.and_then(|a| a.value.parse().ok()))
    }

    /// Give every committed step of `run_id` a new expiry (`None`: keep until the run
    /// ends): a stateless request continued by a retry, or turned into a task, keeps all
    /// its earlier steps, not only the ones of its last round.
    pub(crate) async fn refresh_steps(&self, run_id: &str, expires_at_ms: Option<u64>) -> Result<(), EngineError> {
        const MAX_STEPS: usize = 10_000;
        for record in self.store().list_records(RecordKind::Step, &format!("{run_id}/"), MAX_STEPS).await? {
            match self
                .store()
                .put_record(RecordKind::Step, &record.key, record.value, expires_at_ms, Expect::Version(record.version))
                .await
            {
                Ok(_) | Err(StoreError::Conflict { .. }) => {}
                Err(error) => return Err(error.into()),
            }
        }
        Ok(())
    }

    /// Record a client's cancellation of a run that does not run here: its worker's next
    /// heartbeat (within a third of the lease) cancels it (D11).
    pub(crate) async fn cancel_elsewhere(&self, session: &SessionId, id: &RequestId) -> Result<(), EngineError> {
        let Some(stream) = self.existing_run(session, id).await? else { return Ok(()) };
        let run_id = stream.to_string();
        if self.store().get_record(RecordKind::Run, &run_id).await?.is_none() {
            return Ok(());
        }
        self.cancel_elsewhere_by_run(&run_id).await
    }

    /// Take over every run that is ours from before a restart, or whose owner's lease
    /// expired, and run it again. Returns how many runs were resumed.
    pub async fn recover(&self) -> Result<usize, EngineError> {
        const BATCH: usize = 1_000;
        let mut resumed = 0;
        // Usually one listing sees every entry; past `BATCH` live entries, run ids being
        // hex, one listing per first digit keeps each bounded while all are looked at.
        let all = self.store().list_records(RecordKind::Run, "", BATCH).await?;
        let prefixes: Vec<String> =
            if all.len() < BATCH { vec![String::new()] } else { "0123456789abcdef".chars().map(String::from).collect() };
        for prefix in prefixes {
            let records = if prefix.is_empty() { all.clone() } else { self.store().list_records(RecordKind::Run, &prefix, BATCH).await? };
            for record in records {
                match self.recover_one(record).await {
                    Ok(true) => resumed += 1,
                    Ok(false) => {}
                    Err(error) => tracing::warn!(%error, "could not recover a run; retrying at the next pass"),
                }
            }
        }
        Ok(resumed)
    }

    async fn recover_one(&self, record: durable_mcp_store::Record) -> Result<bool, EngineError> {
        let me = self.options().worker_id.clone();
        if self.is_running_here(&record.key) {
            return Ok(false);
        }
        let Ok(mut run) = RunRecord::decode(&record.value) else {
            tracing::error!(run = %record.key, "undecodable journal entry; removing it");
            self.store().delete_records(RecordKind::Run, &record.key).await?;
            return Ok(false);
        };
        // Ours from before this process started (a lease this process granted or renewed
        // ends after `started + lease`), or anyone's expired lease.
        let ours_from_before = run.owner == me && run.lease_until_ms < self.started_at_ms() + ms(self.options().lease);
        if !ours_from_before && run.lease_until_ms > now_ms() {
            return Ok(false);
        }
        let previous_owner = std::mem::replace(&mut run.owner, me.clone());
        run.lease_until_ms = now_ms() + ms(self.options().lease);
        run.attempt += 1;
        let version = match self.store().put_record(RecordKind::Run, &record.key, run.encode(), None, Expect::Version(record.version)).await {
            Ok(version) => version,
            Err(StoreError::Conflict { .. }) => return Ok(false), // another worker was faster
            Err(error) => return Err(error.into()),
        };
        tracing::info!(run = %record.key, %previous_owner, attempt = run.attempt, "taking over a run");
        let held = Held::start(self, record.key.clone(), run, version);
        self.resume(held).await
    }

    /// Run a taken-over request again on its original stream.
    async fn resume(&self, mut held: Held) -> Result<bool, EngineError> {
        match self.try_resume(&held).await {
            Ok(Resume::Launch(caller, id, stream, already_sent)) => {
                let request = held.record.request.clone();
                held.already_sent = Some(Arc::new(already_sent));
                if let Err(mut rejection) = self.launch(*caller, id.clone(), request, stream.clone(), Some(held)).await {
                    rejection.id = Some(id);
                    self.commit(&stream, &rejection.to_response(), true).await?;
                }
                Ok(true)
            }
            Ok(Resume::Relay) => {
                tokio::spawn(self.clone().run_relay(held));
                Ok(true)
            }
            Ok(Resume::Done) => {
                held.finish(self).await;
                Ok(false)
            }
            Err(error) => {
                // Try again later (here or elsewhere): a store blip must not strand the run.
                held.release(self, now_ms() + 1_000, false).await;
                Err(error)
            }
        }
    }

    /// Decide what a taken-over run needs: to be run again, or only to be cleaned up
    /// (its outcome is committed, its session or task ended, it was cancelled, it failed
    /// too often).
    async fn try_resume(&self, held: &Held) -> Result<Resume, EngineError> {
        let record = &held.record;
        let Ok(stream) = record.stream.parse::<StreamId>() else { return Ok(Resume::Done) };
        let id = record.id();
        // Outcome already committed (the owner died between the commit and the clean-up)?
        if self.stream_closed(&stream).await? {
            if let Some(task) = &record.task
                && let Some(outcome) = self.last_message(&stream).await?
            {
                self.settle_task(task, &outcome).await?;
            }
            return Ok(Resume::Done);
        }
        if record.relay.is_some() {
            if record.failures >= self.options().max_attempts {
                return self.closed_or_retry(&stream, &id, false).await;
            }
            return Ok(Resume::Relay);
        }
        // A task whose worker died before its create result was committed: commit it now,
        // so that its client (or a re-send of its request) gets it.
        if let (Some(reply), Some(task)) = (&record.reply, &record.task)
            && let Ok(reply) = reply.parse::<StreamId>()
            && !self.stream_closed(&reply).await?
            && let Some((task, _)) = self.load_task(task).await?
        {
            let created = json!({"jsonrpc": "2.0", "id": id, "result": task.created()});
            match self.commit(&reply, &created, true).await {
                Ok(_) | Err(EngineError::Store(StoreError::StreamClosed { .. })) => {}
                Err(error) => return Err(error),
            }
        }
        let cancelled = self.store().get_record(RecordKind::Step, &cancel_key(&held.run_id)).await?.is_some();
        let task_ended = match &record.task {
            Some(task) => self.load_task(task).await?.is_none_or(|(t, _)| is_terminal(&t.status)),
            None => false,
        };
        if cancelled || task_ended {
            return self.closed_or_retry(&stream, &id, true).await;
        }
        let principal = Principal::new(record.principal.clone());
        let session = match record.session.as_ref().map(|id| id.parse::<SessionId>()) {
            Some(Ok(session)) => match self.store().load_session(&principal, &session).await {
                Ok(session) => Some(session),
                Err(StoreError::NotFound { .. }) => {
                    if let Some(task) = &record.task {
                        self.end_task(task, "cancelled", "The session ended.").await?;
                    }
                    return Ok(Resume::Done);
                }
                Err(error) => return Err(error.into()),
            },
            _ => None,
        };
        if record.modern && record.task.is_none() {
            // A stateless request's client is gone with its connection: nobody could
            // read a re-run's outcome, so the request ends with an error (its steps stay:
            // a retry with its sealed state continues them).
            return self.closed_or_retry(&stream, &id, false).await;
        }
        if record.failures >= self.options().max_attempts {
            tracing::error!(run = %held.run_id, failures = record.failures, "a run failed too often; ending it with an error");
            if let Some(task) = &record.task {
                self.end_task(task, "failed", "The task failed too often.").await?;
            }
            return self.closed_or_retry(&stream, &id, false).await;
        }
        let caller = Caller {
            principal,
            era: if record.modern { Era::Modern } else { Era::Legacy },
            session,
            protocol_version: record.protocol_version,
            log_level: record.log_level.clone(),
        };
        // Read once, here: the re-run's notifications are then checked in memory.
        let already_sent = AlreadySent::read(self, &stream).await?;
        Ok(Resume::Launch(Box::new(caller), id, stream, already_sent))
    }

    /// Close a run's stream without an outcome; if the store does not let us, the run is
    /// released and a later recovery pass tries again (the client is never left waiting).
    async fn closed_or_retry(&self, stream: &StreamId, id: &RequestId, cancelled: bool) -> Result<Resume, EngineError> {
        if self.close_unanswered(stream, id, cancelled).await {
            Ok(Resume::Done)
        } else {
            Err(EngineError::Store(StoreError::Unavailable("could not close a run's stream".into())))
        }
    }

    /// Mark run `run_id` cancelled (its next recovery closes it instead of running it).
    pub(crate) async fn cancel_elsewhere_by_run(&self, run_id: &str) -> Result<(), EngineError> {
        let expires = now_ms() + MARK_TTL_MS;
        match self.store().put_record(RecordKind::Step, &cancel_key(run_id), "1".into(), Some(expires), Expect::Absent).await {
            Ok(_) | Err(StoreError::Conflict { .. }) => Ok(()),
            Err(error) => Err(error.into()),
        }
    }

    /// The last JSON message of a stream, if any.
    pub(crate) async fn last_message(&self, stream: &StreamId) -> Result<Option<Value>, EngineError> {
        let mut after = 0;
        let mut last = None;
        loop {
            let read = match self.store().read_after(stream, after, 1_000).await {
                Ok(read) => read,
                Err(StoreError::NotFound { .. }) => return Ok(None),
                Err(StoreError::Pruned { oldest_retained, .. }) => {
                    after = oldest_retained.saturating_sub(1);
                    continue;
                }
                Err(error) => return Err(error.into()),
            };
            let Some(end) = read.events.last().map(|e| e.id.seq) else { return Ok(last) };
            for event in read.events {
                if let Ok(message) = serde_json::from_str::<Value>(&event.data) {
                    last = Some(message);
                }
            }
            after = end;
        }
    }

    pub(crate) async fn stream_closed(&self, stream: &StreamId) -> Result<bool, EngineError> {
        // Read from the start: a closed stream ends with `finished`.
        let mut after = 0;
        loop {
            match self.store().read_after(stream, after, 1_000).await {
                Ok(read) => {
                    if read.finished {
                        return Ok(true);
                    }
                    match read.events.last() {
                        Some(last) => after = last.id.seq,
                        None => return Ok(false),
                    }
                }
                Err(StoreError::NotFound { .. }) => return Ok(true),
                Err(StoreError::Pruned { oldest_retained, .. }) => after = oldest_retained.saturating_sub(1),
                Err(error) => return Err(error.into()),
            }
        }
    }

    /// Run [`Engine::recover`] now and then every second (every half lease if that is
    /// shorter), until the handle is aborted: a released lease is picked up within a second.
    pub fn spawn_recovery(&self) -> tokio::task::JoinHandle<()> {
        let engine = self.clone();
        tokio::spawn(async move {
            let mut ticker = tokio::time::interval((engine.options().lease / 2).min(Duration::from_secs(1)));
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticker.tick().await;
                match engine.recover().await {
                    Ok(0) => {}
                    Ok(n) => tracing::info!(resumed = n, "recovered runs"),
                    Err(error) => tracing::warn!(%error, "recovery failed; retrying"),
                }
            }
        })
    }
}

#[cfg(test)]
#[path = "journal_tests.rs"]
mod tests;
