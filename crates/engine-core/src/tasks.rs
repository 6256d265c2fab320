//! Durable tasks (D10), both designs:
//!
//! - the 2026-07-28 Tasks extension (`io.modelcontextprotocol/tasks`): server-directed
//!   creation for clients that declared the extension, `tasks/get` (a detailed task with
//!   its result, error or `inputRequests`), `tasks/update` (`inputResponses`), and
//!   `tasks/cancel` (an idempotent acknowledgement);
//! - 2025-11-25 experimental tasks: `params.task`, `tasks/get`, `tasks/result` (blocks
//!   until the task ends, carries its questions), `tasks/list`, `tasks/cancel`.
//!
//! A task is a [`RecordKind::Task`] record, committed before the create result is returned,
//! keyed by its owner ([`TaskOwner`]: the principal, and without authentication the
//! session of a 2025-11-25 task) and an unguessable id (D13), and changed only by compare-and-set, so
//! that a terminal status never changes. Its work is an ordinary journaled run (leases,
//! recovery, durable steps) whose stream is internal to the task: any worker answers for
//! any task from the record.
//!
//! [`Tasks`] is built on the records and the door out ([`crate::events::Events`]); the
//! request path starts a task's run and relays its result.

use std::collections::BTreeMap;
use std::time::Duration;

use durable_mcp_protocol::jsonrpc::{Request, RequestId, code, error_response, to_text};
use durable_mcp_protocol::meta::CLIENT_CAPABILITIES;
use durable_mcp_protocol::methods::{self, Method};
use durable_mcp_protocol::tasks::{TASKS_EXTENSION, TaskStatus};
use durable_mcp_store::{Expect, Principal, RecordKind, SessionId, StoreError, StreamId, now_ms};
use serde_json::{Map, Value, json};

use crate::EngineError;
use crate::caller::Caller;
use crate::events::Events;
use crate::records::{Era, Flavor, TaskRecord, iso8601, key};

/// Default and largest task lifetimes.
const DEFAULT_TTL_MS: u64 = 3_600_000;
const MAX_TTL_MS: u64 = 7 * 24 * 3_600_000;
/// How often clients are told to poll.
const POLL_INTERVAL_MS: u64 = 500;
/// A finished task stays readable at least this long, whatever its TTL.
const MIN_RETENTION_AFTER_END_MS: u64 = 60_000;
/// How often a task's run re-reads its record for a cancellation written on another
/// worker.
const TASK_POLL: Duration = Duration::from_millis(250);

/// Who a task belongs to (D13): the key it is stored under, and who finds it.
///
/// In plain words: a task is visible only to whoever created it. With an authenticated
/// principal, that is the principal (every session of it sees its tasks, as the 2025-11-25
/// spec asks of an authorization context). Without one (the anonymous principal), a
/// 2025-11-25 task belongs to the session that created it: another session's `tasks/get`,
/// `tasks/list`, `tasks/result` and `tasks/cancel` find nothing. A 2026-07-28 task has no
/// session to belong to: without authentication its id, 128 bits from the CSPRNG and never
/// listed, is the capability.
///
/// Stated more precisely: the key is `<principal>/<task id>`, or
/// `<principal>/<session id>/<task id>` for a session-bound task, with the principal
/// bounded ([`key::task_owner`]); so one owner's tasks list by prefix, and another owner's id
/// is simply not found, the same answer as an id that never existed. The record's own
/// principal and session are checked on every read as well.
#[derive(Debug, Clone)]
pub struct TaskOwner {
    principal: Principal,
    session: Option<SessionId>,
}

impl TaskOwner {
    /// The owner of the tasks `caller` creates and looks up in design `flavor`.
    pub fn of(caller: &Caller, flavor: Flavor) -> Self {
        let bound_to_session = flavor == Flavor::V2025 && caller.principal.is_anonymous();
        let session = caller
            .session
            .as_ref()
            .filter(|_| bound_to_session)
            .map(|s| s.id.clone());
        Self {
            principal: caller.principal.clone(),
            session,
        }
    }

    /// The prefix every key of this owner's tasks starts with.
    fn prefix(&self) -> String {
        key::task_owner(&self.principal, self.session.as_ref())
    }

    /// The record key of this owner's task `task_id`.
    pub fn key(&self, task_id: &str) -> String {
        key::task(&self.prefix(), task_id)
    }

    /// Whether `task` is this owner's (a record found under its key always is; checked
    /// anyway, so that a key layout mistake can never expose another owner's task).
    pub fn owns(&self, task: &TaskRecord) -> bool {
        task.principal == self.principal
            && self
                .session
                .as_ref()
                .is_none_or(|session| task.session.as_ref() == Some(session))
    }
}

impl TaskRecord {
    fn expires_at(&self) -> u64 {
        let by_ttl = self.created_at_ms.saturating_add(self.ttl_ms);
        if self.status.is_terminal() {
            by_ttl.max(self.updated_at_ms + MIN_RETENTION_AFTER_END_MS)
        } else {
            by_ttl
        }
    }

    /// The task as the protocol shows it (without a result envelope).
    pub fn wire(&self) -> Map<String, Value> {
        let mut task = Map::new();
        task.insert("taskId".into(), json!(self.task_id));
        task.insert("status".into(), json!(self.status.as_str()));
        if let Some(message) = &self.status_message {
            task.insert("statusMessage".into(), json!(message));
        }
        task.insert("createdAt".into(), json!(iso8601(self.created_at_ms)));
        task.insert("lastUpdatedAt".into(), json!(iso8601(self.updated_at_ms)));
        match self.flavor {
            Flavor::Extension => {
                task.insert("ttlMs".into(), json!(self.ttl_ms));
                task.insert("pollIntervalMs".into(), json!(POLL_INTERVAL_MS));
            }
            Flavor::V2025 => {
                task.insert("ttl".into(), json!(self.ttl_ms));
                task.insert("pollInterval".into(), json!(POLL_INTERVAL_MS));
            }
        }
        task
    }

    /// The result that creates the task: flat with `resultType: "task"` (2026-07-28), or
    /// `{task}` (2025-11-25).
    pub fn created(&self) -> Value {
        match self.flavor {
            Flavor::Extension => {
                let mut wire = self.wire();
                wire.insert("resultType".into(), json!("task"));
                Value::Object(wire)
            }
            Flavor::V2025 => json!({"task": self.wire()}),
        }
    }

    /// 2026-07-28 `tasks/get`: the detailed task.
    fn detailed(&self) -> Value {
        let mut task = self.detailed_map();
        task.insert("resultType".into(), json!("complete"));
        Value::Object(task)
    }

    /// The detailed task (2026-07-28): its result, error or open questions inlined, as
    /// `tasks/get` and `notifications/tasks` show it.
    pub fn detailed_map(&self) -> Map<String, Value> {
        let mut task = self.wire();
        match self.status {
            TaskStatus::Completed => {
                if let Some(result) = &self.result {
                    task.insert("result".into(), result.clone());
                }
            }
            TaskStatus::Failed => {
                if let Some(error) = &self.error {
                    task.insert("error".into(), error.clone());
                } else if let Some(result) = &self.result {
                    task.insert("result".into(), result.clone());
                }
            }
            TaskStatus::InputRequired => {
                task.insert("inputRequests".into(), json!(self.input_requests));
            }
            TaskStatus::Working | TaskStatus::Cancelled => {}
        }
        task
    }
}

/// The 2026-07-28 capability error for a client that did not declare the extension.
pub fn missing_extension(id: RequestId) -> Value {
    error_response(
        id,
        code::MISSING_CLIENT_CAPABILITY,
        "Missing required client capability",
        Some(json!({"requiredCapabilities": {"extensions": {TASKS_EXTENSION: {}}}})),
    )
}

/// Whether a 2026-07-28 request's client declared the tasks extension (per request, in
/// `_meta`).
pub fn declares_extension(meta: Option<&Map<String, Value>>) -> bool {
    meta.and_then(|m| m.get(CLIENT_CAPABILITIES))
        .and_then(|c| c.get("extensions"))
        .and_then(|e| e.get(TASKS_EXTENSION))
        .is_some()
}

/// The error answering a request about a task that is unknown, expired or another's.
pub fn task_not_found(id: RequestId) -> Value {
    error_response(
        id,
        code::INVALID_PARAMS,
        "Failed to retrieve task: Task not found",
        None,
    )
}

/// The tasks: their records, and the writes of them on this worker, which wake its listen
/// streams and task runs at once (other workers' writes are polled).
#[derive(Clone)]
pub struct Tasks {
    events: Events,
    /// Every task write on this worker, by record key.
    written: tokio::sync::broadcast::Sender<String>,
}

impl Tasks {
    /// The tasks of the store behind `events`, which they commit notifications through.
    pub fn new(events: Events) -> Self {
        Self {
            events,
            written: tokio::sync::broadcast::channel(256).0,
        }
    }

    fn store(&self) -> &std::sync::Arc<dyn durable_mcp_store::Store> {
        self.events.store()
    }

    /// The task writes of this worker, by record key, from now on.
    pub fn written(&self) -> tokio::sync::broadcast::Receiver<String> {
        self.written.subscribe()
    }

    /// Commit a new task (D10: before its create result exists). Returns the record and
    /// its key.
    pub async fn create_task(
        &self,
        caller: &Caller,
        flavor: Flavor,
        ttl_ms: Option<u64>,
        stream: &StreamId,
        run_id: &str,
    ) -> Result<(TaskRecord, String), EngineError> {
        let now = now_ms();
        let session = caller
            .session
            .as_ref()
            .filter(|_| caller.era == Era::Legacy);
        let task = TaskRecord {
            task_id: StreamId::random(),
            principal: caller.principal.clone(),
            session: session.map(|s| s.id.clone()),
            flavor,
            status: TaskStatus::Working,
            status_message: Some("The task is running.".into()),
            created_at_ms: now,
            updated_at_ms: now,
            ttl_ms: ttl_ms.unwrap_or(DEFAULT_TTL_MS).clamp(1_000, MAX_TTL_MS),
            stream: stream.clone(),
            result: None,
            error: None,
            input_requests: BTreeMap::new(),
            input_responses: BTreeMap::new(),
            notify: session
                .filter(|_| flavor == Flavor::V2025)
                .map(|s| s.standalone_stream.clone()),
            run: Some(run_id.to_owned()),
        };
        let key = TaskOwner::of(caller, flavor).key(task.task_id.as_str());
        self.store()
            .put_record(
                RecordKind::Task,
                &key,
                task.encode()?,
                Some(task.expires_at()),
                Expect::Absent,
            )
            .await?;
        crate::metrics::task_status(task.status.as_str());
        Ok((task, key))
    }

    /// Read a task.
    pub async fn load_task(&self, key: &str) -> Result<Option<(TaskRecord, u64)>, EngineError> {
        let Some(record) = self.store().get_record(RecordKind::Task, key).await? else {
            return Ok(None);
        };
        let task = TaskRecord::decode(key, &record.value)?;
        Ok(Some((task, record.version)))
    }

    /// A task was written (by compare-and-set, so once per change): wake this worker's
    /// listen streams and task runs, and tell a 2025-11-25 session if the status changed.
    async fn task_written(&self, key: &str, status_before: TaskStatus, task: &TaskRecord) {
        // No receiver is the common case, not an error.
        let _ = self.written.send(key.to_owned());
        if task.status != status_before {
            crate::metrics::task_status(task.status.as_str());
        }
        if task.flavor != Flavor::V2025 || task.status == status_before {
            return;
        }
        let Some(stream) = task.notify.clone() else {
            return;
        };
        // A later change (made on another worker, say) sends its own notification; this one
        // would arrive after it, out of order. (Clients may also order by `lastUpdatedAt`.)
        if let Ok(Some((latest, _))) = self.load_task(key).await
            && latest.updated_at_ms != task.updated_at_ms
        {
            return;
        }
        // The notification carries the task id itself, not `related-task` (2025-11-25).
        let message = json!({"jsonrpc": "2.0", "method": methods::NOTIFICATION_TASKS_STATUS, "params": task.wire()});
        if let Err(error) = self.events.append(&stream, to_text(&message), false).await {
            tracing::debug!(%error, task = %task.task_id, "task status notification not sent (the session may have ended)");
        }
    }

    /// Change a task by compare-and-set: `change` returns whether it changed anything.
    /// Returns the task as stored afterwards, or `None` if it does not exist.
    pub async fn update_task(
        &self,
        key: &str,
        mut change: impl FnMut(&mut TaskRecord) -> bool,
    ) -> Result<Option<TaskRecord>, EngineError> {
        loop {
            let Some((mut task, version)) = self.load_task(key).await? else {
                return Ok(None);
            };
            let status_before = task.status;
            if !change(&mut task) {
                return Ok(Some(task));
            }
            task.updated_at_ms = now_ms().max(task.updated_at_ms);
            match self
                .store()
                .put_record(
                    RecordKind::Task,
                    key,
                    task.encode()?,
                    Some(task.expires_at()),
                    Expect::Version(version),
                )
                .await
            {
                Ok(_) => {
                    self.task_written(key, status_before, &task).await;
                    return Ok(Some(task));
                }
                Err(StoreError::Conflict { .. }) => continue,
                Err(error) => return Err(error.into()),
            }
        }
    }

    /// The run's outcome becomes the task's terminal status (never over another terminal
    /// status). A tool result with `isError` ends a 2025-11-25 task as `failed` and an
    /// extension task as `completed`.
    pub async fn settle_task(&self, key: &str, outcome: &Value) -> Result<(), EngineError> {
        self.update_task(key, |task| {
            if task.status.is_terminal() {
                return false;
            }
            task.input_requests.clear();
            if let Some(error) = outcome.get("error") {
                task.status = TaskStatus::Failed;
                task.status_message = error
                    .get("message")
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                task.error = Some(error.clone());
            } else {
                let result = outcome.get("result").cloned().unwrap_or(Value::Null);
                let is_error = result
                    .get("isError")
                    .and_then(Value::as_bool)
                    .unwrap_or(false);
                task.status = if is_error && task.flavor == Flavor::V2025 {
                    TaskStatus::Failed
                } else {
                    TaskStatus::Completed
                };
                task.status_message = Some(
                    if is_error {
                        "The tool reported an error."
                    } else {
                        "The task completed."
                    }
                    .into(),
                );
                task.result = Some(result);
            }
            true
        })
        .await?;
        Ok(())
    }

    /// End a task that has no outcome (its session ended, it failed too often, it was
    /// cancelled) with `status`, unless it already ended.
    pub async fn end_task(
        &self,
        key: &str,
        status: TaskStatus,
        message: &str,
    ) -> Result<(), EngineError> {
        self.update_task(key, |task| {
            if task.status.is_terminal() {
                return false;
            }
            task.status = status;
            task.status_message = Some(message.to_owned());
            task.input_requests.clear();
            if status == TaskStatus::Failed {
                task.error = Some(json!({"code": code::INTERNAL_ERROR, "message": message}));
            }
            true
        })
        .await?;
        Ok(())
    }

    /// Answer a `tasks/*` request from the task records (`None`: a method durable-mcp does
    /// not serve for this design; the handler answers).
    pub async fn tasks_request(
        &self,
        caller: &Caller,
        flavor: Flavor,
        request: &Request,
    ) -> Result<Option<Value>, EngineError> {
        let (id, method) = (request.id(), request.method());
        let owner = TaskOwner::of(caller, flavor);
        if *method == Method::TasksList && flavor == Flavor::V2025 {
            return self
                .list_tasks(&owner, id, request.param("cursor"))
                .await
                .map(Some);
        }
        let Some(task_id) = request.param_str("taskId") else {
            return Ok(Some(error_response(
                id.clone(),
                code::INVALID_PARAMS,
                "taskId is required",
                None,
            )));
        };
        if task_id.parse::<StreamId>().is_err() {
            // Not an id durable-mcp issues: nothing to look up (and no key tricks, D13).
            return Ok(Some(task_not_found(id.clone())));
        }
        let key = owner.key(task_id);
        let Some((task, _)) = self.load_task(&key).await?.filter(|(t, _)| owner.owns(t)) else {
            // Unknown, expired, or another owner's (D13).
            return Ok(Some(task_not_found(id.clone())));
        };
        if task.flavor != flavor {
            return Ok(Some(task_not_found(id.clone())));
        }
        let ok = |result: Value| json!({"jsonrpc": "2.0", "id": id, "result": result});
        Ok(Some(match (flavor, method) {
            (Flavor::Extension, Method::TasksGet) => ok(task.detailed()),
            (Flavor::V2025, Method::TasksGet) => ok(Value::Object(task.wire())),
            (Flavor::Extension, Method::TasksUpdate) => {
                let responses = request
                    .param("inputResponses")
                    .and_then(Value::as_object)
                    .cloned()
                    .unwrap_or_default();
                self.update_task(&key, |task| {
                    let mut changed = false;
                    for (k, v) in &responses {
                        // Answers to questions the task did not ask are ignored.
                        if task.input_requests.remove(k).is_some() {
                            task.input_responses.insert(k.clone(), v.clone());
                            changed = true;
                        }
                    }
                    if changed
                        && task.input_requests.is_empty()
                        && task.status == TaskStatus::InputRequired
                    {
                        task.status = TaskStatus::Working;
                        task.status_message = Some("The task is running.".into());
                    }
                    changed
                })
                .await?;
                ok(json!({"resultType": "complete"}))
            }
            (_, Method::TasksCancel) => {
                let mut was_terminal = None;
                let task = self
                    .update_task(&key, |task| {
                        if task.status.is_terminal() {
                            was_terminal = Some(task.status);
                            return false;
                        }
                        task.status = TaskStatus::Cancelled;
                        task.status_message = Some("The task was cancelled by request.".into());
                        task.input_requests.clear();
                        true
                    })
                    .await?;
                // The run, wherever it runs, sees the cancelled record (on this worker at
                // once: `watch_task_cancellation` wakes on the write).
                match (flavor, was_terminal, task) {
                    (Flavor::Extension, _, _) => ok(json!({"resultType": "complete"})),
                    (Flavor::V2025, Some(status), _) => error_response(
                        id.clone(),
                        code::INVALID_PARAMS,
                        &format!("Cannot cancel task: already in terminal status '{status}'"),
                        None,
                    ),
                    (Flavor::V2025, None, Some(task)) => ok(Value::Object(task.wire())),
                    (Flavor::V2025, None, None) => task_not_found(id.clone()),
                }
            }
            _ => return Ok(None),
        }))
    }

    async fn list_tasks(
        &self,
        owner: &TaskOwner,
        id: &RequestId,
        cursor: Option<&Value>,
    ) -> Result<Value, EngineError> {
        const PAGE: usize = 50;
        const MAX_LISTED: usize = 10_000;
        let offset = match cursor {
            None | Some(Value::Null) => 0,
            Some(Value::String(cursor)) => match cursor.parse::<usize>() {
                Ok(offset) => offset,
                Err(_) => {
                    return Ok(error_response(
                        id.clone(),
                        code::INVALID_PARAMS,
                        "invalid cursor",
                        None,
                    ));
                }
            },
            Some(_) => {
                return Ok(error_response(
                    id.clone(),
                    code::INVALID_PARAMS,
                    "invalid cursor",
                    None,
                ));
            }
        };
        let mut tasks = Vec::new();
        for record in self
            .store()
            .list_records(RecordKind::Task, &owner.prefix(), MAX_LISTED)
            .await?
        {
            if let Ok(task) = TaskRecord::decode(&record.key, &record.value)
                && owner.owns(&task)
                && task.flavor == Flavor::V2025
            {
                tasks.push(task);
            }
        }
        tasks.sort_by_key(|t| (t.created_at_ms, t.task_id.clone()));
        let page: Vec<Value> = tasks
            .iter()
            .skip(offset)
            .take(PAGE)
            .map(|t| Value::Object(t.wire()))
            .collect();
        let mut result = json!({"tasks": page});
        if offset + PAGE < tasks.len() {
            result["nextCursor"] = json!((offset + PAGE).to_string());
        }
        Ok(json!({"jsonrpc": "2.0", "id": id, "result": result}))
    }

    /// Cancel a task's run, on whichever worker runs it, once its record is cancelled:
    /// polls the record while the run lasts (a cancellation written on another worker),
    /// and reads it at once when this worker writes it (`tasks/cancel` answered here).
    pub fn watch_task_cancellation(
        &self,
        key: String,
        cancel: tokio_util::sync::CancellationToken,
    ) -> tokio::task::JoinHandle<()> {
        let tasks = self.clone();
        let mut written_here = self.written();
        tokio::spawn(async move {
            loop {
                let deadline = tokio::time::Instant::now() + TASK_POLL;
                loop {
                    tokio::select! {
                        () = cancel.cancelled() => return,
                        () = tokio::time::sleep_until(deadline) => break,
                        written = written_here.recv() => match written {
                            Ok(written) if written != key => {}
                            // A lagging receiver may have missed this task's write: read it.
                            Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => break,
                            Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                        },
                    }
                }
                match tasks.load_task(&key).await {
                    Ok(Some((task, _))) if task.status == TaskStatus::Cancelled => {
                        cancel.cancel();
                        return;
                    }
                    Ok(None) => {
                        cancel.cancel();
                        return;
                    }
                    _ => {}
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use durable_mcp_store::SessionRecord;

    use super::*;

    fn caller(principal: Principal, era: crate::Era) -> Caller {
        let session = (era == Era::Legacy).then(|| SessionRecord {
            id: SessionId::random(),
            principal: principal.clone(),
            protocol_version: "2025-11-25".into(),
            client: Value::Null,
            log_level: None,
            subscriptions: Default::default(),
            state: Default::default(),
            standalone_stream: StreamId::random(),
            created_at_ms: 0,
            last_seen_ms: 0,
            delivery: None,
        });
        Caller {
            principal,
            era,
            session: session.map(std::sync::Arc::new),
            protocol_version: durable_mcp_protocol::McpVersion::V2025_11_25,
            log_level: None,
            auth: None,
            trace: None,
            http: None,
        }
    }

    fn record(caller: &Caller) -> TaskRecord {
        let mut task: TaskRecord = serde_json::from_value(json!({
            "task_id": StreamId::random().to_string(), "principal": caller.principal.as_str(),
            "session": null, "flavor": "V2025",
            "status": "working", "status_message": null, "created_at_ms": 0, "updated_at_ms": 0, "ttl_ms": 1,
            "stream": StreamId::random().to_string(), "result": null, "error": null, "input_requests": {}, "input_responses": {}
        }))
        .expect("a task record");
        task.session = caller.session_id().cloned();
        task
    }

    /// D13: without authentication a 2025-11-25 task is its session's; with a principal it
    /// is the principal's, in every session; a 2026-07-28 task is its principal's.
    #[test]
    fn d13_task_owners() {
        let a = caller(Principal::anonymous(), Era::Legacy);
        let b = caller(Principal::anonymous(), Era::Legacy);
        let (owner_a, owner_b) = (
            TaskOwner::of(&a, Flavor::V2025),
            TaskOwner::of(&b, Flavor::V2025),
        );
        assert_ne!(
            owner_a.key("t"),
            owner_b.key("t"),
            "two anonymous sessions, two key spaces"
        );
        assert!(owner_a.owns(&record(&a)) && !owner_b.owns(&record(&a)));
        let alice_1 = caller(Principal::new("alice"), Era::Legacy);
        let alice_2 = caller(Principal::new("alice"), Era::Legacy);
        let owner = TaskOwner::of(&alice_2, Flavor::V2025);
        assert_eq!(
            TaskOwner::of(&alice_1, Flavor::V2025).key("t"),
            owner.key("t"),
            "one principal, every session"
        );
        assert_eq!(owner.key("t"), "alice/t");
        assert!(owner.owns(&record(&alice_1)));
        assert!(
            !TaskOwner::of(&caller(Principal::new("bob"), Era::Legacy), Flavor::V2025)
                .owns(&record(&alice_1))
        );
        let modern = TaskOwner::of(
            &caller(Principal::anonymous(), Era::Modern),
            Flavor::Extension,
        );
        assert_eq!(modern.key("t"), "anonymous/t", "the id is the capability");
        let long = TaskOwner::of(
            &caller(Principal::new("p".repeat(5_000)), Era::Modern),
            Flavor::Extension,
        );
        assert!(long.key("t").len() < 100, "a long principal is bounded");
    }

    fn tasks() -> (Arc<dyn durable_mcp_store::Store>, Tasks) {
        let store: Arc<dyn durable_mcp_store::Store> =
            Arc::new(durable_mcp_store_memory::MemoryStore::new());
        (store.clone(), Tasks::new(Events::new(store)))
    }

    /// D10: a task is committed when created; every write of it on this worker wakes
    /// whoever follows this worker's task writes (listen streams, task runs).
    #[tokio::test]
    async fn d10_a_created_task_is_committed_and_its_writes_wake_this_worker() {
        let (_, tasks) = tasks();
        let alice = caller(Principal::new("alice"), Era::Modern);
        let (task, key) = tasks
            .create_task(&alice, Flavor::Extension, None, &StreamId::random(), "run")
            .await
            .unwrap();
        let (stored, _) = tasks.load_task(&key).await.unwrap().expect("committed");
        assert_eq!(
            (stored.task_id, stored.status),
            (task.task_id, TaskStatus::Working)
        );
        let mut written = tasks.written();
        tasks
            .update_task(&key, |task| {
                task.status_message = Some("half way".into());
                true
            })
            .await
            .unwrap();
        assert_eq!(written.recv().await.unwrap(), key);
    }

    /// A run's outcome settles its task once: a tool's error fails a 2025-11-25 task and
    /// completes an extension task; a later outcome changes nothing.
    #[tokio::test]
    async fn a_tasks_outcome_is_settled_once_by_its_design() {
        let (_, tasks) = tasks();
        let tool_error = json!({"jsonrpc": "2.0", "id": 1, "result": {"isError": true}});
        for (flavor, era, settled) in [
            (Flavor::V2025, Era::Legacy, TaskStatus::Failed),
            (Flavor::Extension, Era::Modern, TaskStatus::Completed),
        ] {
            let who = caller(Principal::new("alice"), era);
            let (_, key) = tasks
                .create_task(&who, flavor, None, &StreamId::random(), "run")
                .await
                .unwrap();
            tasks.settle_task(&key, &tool_error).await.unwrap();
            let ok = json!({"jsonrpc": "2.0", "id": 1, "result": {"content": []}});
            tasks.settle_task(&key, &ok).await.unwrap();
            let (task, _) = tasks.load_task(&key).await.unwrap().unwrap();
            assert_eq!(task.status, settled, "{flavor:?}");
        }
    }

    /// `tasks/cancel` on any worker reaches the run: the watch fires once the record says
    /// cancelled.
    #[tokio::test]
    async fn a_cancelled_task_record_cancels_its_run() {
        let (store, tasks) = tasks();
        let other_worker = Tasks::new(Events::new(store));
        let alice = caller(Principal::new("alice"), Era::Modern);
        let (_, key) = tasks
            .create_task(&alice, Flavor::Extension, None, &StreamId::random(), "run")
            .await
            .unwrap();
        let cancel = tokio_util::sync::CancellationToken::new();
        let watch = tasks.watch_task_cancellation(key.clone(), cancel.clone());
        other_worker
            .update_task(&key, |task| {
                task.status = TaskStatus::Cancelled;
                true
            })
            .await
            .unwrap();
        tokio::time::timeout(TASK_POLL * 3, cancel.cancelled())
            .await
            .expect("the run is cancelled within its poll");
        watch.await.unwrap();
    }
}
