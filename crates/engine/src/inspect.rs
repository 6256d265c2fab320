//! Read-only views of the journal for operators: the requests in flight (or waiting for
//! recovery) and the tasks, as `durable-mcp inspect runs|tasks` prints them. Reading never
//! changes a record, so it is safe against a store that live workers are using.

use durable_mcp_store::{RecordKind, Store};
use serde::Serialize;
use serde_json::Value;

use crate::EngineError;
pub use crate::records::iso8601;
pub use crate::records::{
    Attempt, AttemptEnd, AttemptEnding, ParkReason, Parked, StepMeta, decode_step,
};
use crate::records::{Flavor, RecordError, RunRecord, TaskRecord, key};

/// A journaled request that has not finished: running on a worker, or waiting for one to
/// take it over.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct RunSummary {
    /// The run's id (its journal key).
    pub run_id: String,
    /// The JSON-RPC method.
    pub method: String,
    /// What the request names: the tool, the prompt, the resource URI, if any.
    pub target: Option<String>,
    /// The client's JSON-RPC request id.
    pub request_id: Value,
    /// Who sent it.
    pub principal: String,
    /// Its legacy session, if any.
    pub session: Option<String>,
    /// The request's protocol version.
    pub protocol_version: String,
    /// The worker holding the lease (`None`: released, any worker may take it).
    pub owner: Option<String>,
    /// When the lease ends (milliseconds since the epoch).
    pub lease_until_ms: u64,
    /// How many times it was started (takeovers and restarts included).
    pub attempt: u32,
    /// How many attempts ended without an outcome.
    pub failures: u32,
    /// The task it works for, if any.
    pub task_id: Option<String>,
    /// When it was accepted (milliseconds since the epoch, from its id).
    pub accepted_ms: Option<u64>,
    /// Why and since when it is parked for an operator, if it is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parked: Option<Parked>,
    /// Its last attempts: worker, start, how each ended (the one running has no end).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub attempts: Vec<Attempt>,
    /// The request's `params.arguments` (a payload: left out of the serialized summary, so
    /// `inspect runs --json` does not print it; the dashboard shows it only when asked).
    #[serde(skip)]
    pub arguments: Option<Value>,
}

/// Where a journaled run stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum RunState {
    /// A worker holds it (its lease has not run out).
    Running,
    /// It waits for a worker to take it over (given back, or its lease ran out).
    Waiting,
    /// It is kept for an operator ([`Parked`]).
    Parked,
}

impl RunState {
    /// Its name, as printed.
    pub fn as_str(self) -> &'static str {
        match self {
            RunState::Running => "running",
            RunState::Waiting => "waiting",
            RunState::Parked => "parked",
        }
    }
}

impl RunSummary {
    /// Where it stands at `now_ms`.
    pub fn state(&self, now_ms: u64) -> RunState {
        if self.parked.is_some() {
            RunState::Parked
        } else if self.owner.is_some() && self.lease_until_ms > now_ms {
            RunState::Running
        } else {
            RunState::Waiting
        }
    }

    /// Whether a worker holds it at `now_ms` (its lease has not run out).
    pub fn is_running(&self, now_ms: u64) -> bool {
        self.state(now_ms) == RunState::Running
    }

    /// The lease, as a person reads it at `now_ms`: `"released"`, `"expires in 2.3 s"`,
    /// `"expired 4.0 s ago"`.
    pub fn lease_state(&self, now_ms: u64) -> String {
        match (&self.owner, self.lease_until_ms.checked_sub(now_ms)) {
            _ if self.parked.is_some() => "parked".to_owned(),
            (None, _) => "released".to_owned(),
            (Some(_), Some(left)) => format!("expires in {:.1} s", left as f64 / 1000.0),
            (Some(_), None) => format!(
                "expired {:.1} s ago",
                (now_ms - self.lease_until_ms) as f64 / 1000.0
            ),
        }
    }
}

/// A task (D10), in either design.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct TaskSummary {
    /// The task id clients use.
    pub task_id: String,
    /// Who owns it.
    pub principal: String,
    /// `"2025-11-25"` (experimental tasks) or `"extension"` (the 2026-07-28 Tasks extension).
    pub design: &'static str,
    /// `working`, `input_required`, `completed`, `failed` or `cancelled`.
    pub status: String,
    /// The status message, if any.
    pub status_message: Option<String>,
    /// Creation time (ISO 8601).
    pub created_at: String,
    /// Last change (ISO 8601).
    pub last_updated_at: String,
    /// Its lifetime from creation, in milliseconds.
    pub ttl_ms: u64,
    /// Questions waiting for the client (2026-07-28 `inputRequests`).
    pub open_questions: usize,
    /// The legacy session that created it, if any.
    pub session: Option<String>,
    /// Its run (`durable-mcp runs show`): the journaled request doing its work (unknown for
    /// tasks created before it was kept).
    pub run_id: Option<String>,
    /// The stream of its run's questions and outcome.
    #[serde(skip)]
    pub stream: String,
}

/// Up to `limit` unfinished journaled requests, by run id. Unreadable records are logged
/// and left out.
pub async fn runs(store: &dyn Store, limit: usize) -> Result<Vec<RunSummary>, EngineError> {
    Ok(decoded(store, RecordKind::Run, limit, RunRecord::decode)
        .await?
        .into_iter()
        .map(|(key, run)| RunSummary::of(key, run))
        .collect())
}

/// The unfinished journaled request `run_id` (`None`: not in the journal).
pub async fn run(store: &dyn Store, run_id: &str) -> Result<Option<RunSummary>, EngineError> {
    let Some(record) = store.get_record(RecordKind::Run, run_id).await? else {
        return Ok(None);
    };
    let run = RunRecord::decode(run_id, &record.value)?;
    Ok(Some(RunSummary::of(record.key, run)))
}

impl RunSummary {
    /// The summary of journal entry `key`.
    fn of(key: String, run: RunRecord) -> Self {
        let target = ["name", "uri"]
            .iter()
            .find_map(|field| run.request.param_str(field))
            .map(str::to_owned);
        Self {
            method: run.request.method().to_string(),
            target,
            request_id: run.id(),
            principal: run.principal.as_str().to_owned(),
            session: run.session.map(|session| session.to_string()),
            protocol_version: run.protocol_version.to_string(),
            owner: Some(run.owner).filter(|owner| !owner.is_empty()),
            lease_until_ms: run.lease_until_ms,
            attempt: run.attempt,
            failures: run.failures,
            task_id: run
                .task
                .as_deref()
                .map(|task| key::task_id(task).to_owned()),
            arguments: run.request.param("arguments").cloned(),
            parked: run.parked,
            attempts: run.attempts,
            // The run's id is its first stream's (a task's stream comes later).
            accepted_ms: key
                .parse::<durable_mcp_store::StreamId>()
                .ok()
                .and_then(|id| id.created_ms()),
            run_id: key,
        }
    }
}

/// A committed step record of a run: a step's result, a question's answer, a sent
/// notification's mark, its cancellation mark.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct StepSummary {
    /// Its key (`<run id>/<kind>/<name>`).
    pub key: String,
    /// What it records: `step` (a named step's result), `answer` (question `name`'s),
    /// `sent` (notification `name` was sent), or `cancel` (a cancellation mark).
    pub kind: &'static str,
    /// The step's name, or the question's or notification's number.
    pub name: String,
    /// The size of what it keeps (a step's result, an answer), in bytes.
    pub bytes: usize,
    /// When it expires (milliseconds since the epoch), if before the run ends.
    pub expires_at_ms: Option<u64>,
    /// When, by which attempt and worker it was committed, and how long the step's body
    /// ran (absent for marks, and for records written before it was kept).
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub committed: Option<StepMeta>,
}

/// Up to `limit` committed step records of run `run_id`, in the order they were committed
/// where that is known, else by key.
pub async fn steps(
    store: &dyn Store,
    run_id: &str,
    limit: usize,
) -> Result<Vec<StepSummary>, EngineError> {
    let mut steps: Vec<StepSummary> = store
        .list_records(RecordKind::Step, &key::steps(run_id), limit)
        .await?
        .into_iter()
        .map(|record| {
            let rest = record.key.get(run_id.len() + 1..).unwrap_or_default();
            let (kind, name) = match rest.split_once('/') {
                Some(("s", name)) => ("step", name),
                Some(("a", name)) => ("answer", name),
                Some(("e", name)) => ("sent", name),
                _ => ("cancel", rest),
            };
            let (bytes, committed) = match kind {
                "step" | "answer" => {
                    match crate::records::decode_step(&record.key, &record.value) {
                        Ok((value, meta)) => (value.to_string().len(), meta),
                        Err(_) => (record.value.len(), None),
                    }
                }
                _ => (record.value.len(), None),
            };
            StepSummary {
                kind,
                name: name.to_owned(),
                bytes,
                expires_at_ms: record.expires_at_ms,
                committed,
                key: record.key,
            }
        })
        .collect();
    steps.sort_by_key(|step| step.committed.as_ref().map_or(u64::MAX, |c| c.at_ms));
    Ok(steps)
}

/// What is known of one run, as `durable-mcp runs show` and the dashboard's run page show
/// it: its journal entry (with its attempts) while it has not finished, its committed steps
/// and answers, the messages on its stream, and the operators' actions.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct RunTimeline {
    /// The run's id.
    pub run_id: String,
    /// Its journal entry (`None`: it has finished, was killed, or never existed).
    pub run: Option<RunSummary>,
    /// Whether it is in the journal.
    pub in_journal: bool,
    /// Its committed steps, answers and marks.
    pub steps: Vec<StepSummary>,
    /// Its stream's messages.
    pub stream: StreamTimeline,
    /// The operators' actions on it, oldest first.
    pub actions: Vec<crate::records::ActionRecord>,
}

/// Run `run_id`'s timeline, with the operators' `actions` on it (`None`: nothing is known
/// of it: not in the journal, no stream, no action).
pub async fn timeline(
    store: &dyn Store,
    run_id: &str,
    actions: Vec<crate::records::ActionRecord>,
    limit: usize,
) -> Result<Option<RunTimeline>, EngineError> {
    // A task's run answers on the task's stream, not on the one its id is taken from.
    let (run, stream_id) = match store.get_record(RecordKind::Run, run_id).await? {
        Some(record) => {
            let entry = RunRecord::decode(run_id, &record.value)?;
            let stream_id = entry.stream.to_string();
            (Some(RunSummary::of(record.key, entry)), stream_id)
        }
        None => (None, run_id.to_owned()),
    };
    let steps = steps(store, run_id, limit).await?;
    let stream = stream(store, &stream_id, limit).await?;
    if run.is_none() && actions.is_empty() && stream.state == "gone" {
        return Ok(None);
    }
    Ok(Some(RunTimeline {
        run_id: run_id.to_owned(),
        in_journal: run.is_some(),
        run,
        steps,
        stream,
        actions,
    }))
}

/// One message on a run's stream, as its timeline shows it (its payload left out).
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct StreamMessage {
    /// Its sequence on the stream.
    pub seq: u64,
    /// `notification`, `question` (a request to the client), or `outcome` (the response).
    pub kind: &'static str,
    /// A notification's or question's method.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
    /// The message's size in bytes.
    pub bytes: usize,
    /// An error outcome's code and message.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<Value>,
}

/// What a run's stream holds: its messages, or why they cannot be read.
#[derive(Debug, Clone, Serialize)]
#[non_exhaustive]
pub struct StreamTimeline {
    /// `open` (more may come), `finished` (closed, all read), `truncated` (more than the
    /// limit), `pruned` (retention removed it) or `gone` (no such stream).
    pub state: &'static str,
    /// Its messages, in order.
    pub messages: Vec<StreamMessage>,
}

/// The first `limit` messages on stream `stream_id` (a run's: its id is the run's, but for
/// a task's run).
pub async fn stream(
    store: &dyn Store,
    stream_id: &str,
    limit: usize,
) -> Result<StreamTimeline, EngineError> {
    let unreadable = |state| StreamTimeline {
        state,
        messages: Vec::new(),
    };
    let Ok(stream) = stream_id.parse::<durable_mcp_store::StreamId>() else {
        return Ok(unreadable("gone"));
    };
    let read = match store.read_after(&stream, 0, limit).await {
        Ok(read) => read,
        Err(durable_mcp_store::StoreError::Pruned { .. }) => return Ok(unreadable("pruned")),
        Err(durable_mcp_store::StoreError::NotFound { .. }) => return Ok(unreadable("gone")),
        Err(error) => return Err(error.into()),
    };
    let state = if read.finished {
        "finished"
    } else if read.events.len() >= limit {
        "truncated"
    } else {
        "open"
    };
    let messages = read
        .events
        .into_iter()
        .filter(|event| !event.data.is_empty())
        .map(|event| {
            let message: Value = serde_json::from_str(&event.data).unwrap_or(Value::Null);
            let method = message["method"].as_str().map(str::to_owned);
            let kind = match (&method, message.get("id")) {
                (Some(_), Some(_)) => "question",
                (Some(_), None) => "notification",
                (None, _) => "outcome",
            };
            StreamMessage {
                seq: event.id.seq,
                kind,
                method,
                bytes: event.data.len(),
                error: message.get("error").map(
                    |error| serde_json::json!({"code": error["code"], "message": error["message"]}),
                ),
            }
        })
        .collect();
    Ok(StreamTimeline { state, messages })
}

/// Which runs an operator asks for (`durable-mcp runs list`): every field set must match.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct RunFilter {
    /// The JSON-RPC method.
    pub method: Option<String>,
    /// The tool (or prompt, or resource URI) the request names.
    pub target: Option<String>,
    /// Who sent it.
    pub principal: Option<String>,
    /// Its legacy session.
    pub session: Option<String>,
    /// The worker holding its lease.
    pub worker: Option<String>,
    /// Where it stands.
    pub state: Option<RunState>,
    /// Accepted at least this many milliseconds ago.
    pub older_than_ms: Option<u64>,
}

impl RunFilter {
    /// Whether `run` is one of them at `now_ms`.
    pub fn matches(&self, run: &RunSummary, now_ms: u64) -> bool {
        let is = |want: &Option<String>, have: Option<&str>| {
            want.as_deref().is_none_or(|want| have == Some(want))
        };
        is(&self.method, Some(&run.method))
            && is(&self.target, run.target.as_deref())
            && is(&self.principal, Some(&run.principal))
            && is(&self.session, run.session.as_deref())
            && is(&self.worker, run.owner.as_deref())
            && self.state.is_none_or(|state| run.state(now_ms) == state)
            && self.older_than_ms.is_none_or(|age| {
                run.accepted_ms
                    .is_some_and(|accepted| now_ms.saturating_sub(accepted) >= age)
            })
    }
}

/// Up to `limit` tasks that have not expired, by principal then id. Unreadable records are
/// logged and left out.
pub async fn tasks(store: &dyn Store, limit: usize) -> Result<Vec<TaskSummary>, EngineError> {
    Ok(decoded(store, RecordKind::Task, limit, TaskRecord::decode)
        .await?
        .into_iter()
        .map(|(_, task)| TaskSummary::of(task))
        .collect())
}

/// The task `task_id` and its record key, whoever owns it (`None`: not in the store).
pub async fn task(
    store: &dyn Store,
    task_id: &str,
) -> Result<Option<(String, TaskSummary)>, EngineError> {
    const SCAN: usize = 100_000;
    // Its key is its owner's prefix and its id: found by key, then only it decoded.
    let Some(record) = store
        .list_records(RecordKind::Task, "", SCAN)
        .await?
        .into_iter()
        .find(|record| key::task_id(&record.key) == task_id)
    else {
        return Ok(None);
    };
    let task = TaskRecord::decode(&record.key, &record.value)?;
    Ok(Some((record.key, TaskSummary::of(task))))
}

impl TaskSummary {
    fn of(task: TaskRecord) -> Self {
        TaskSummary {
            task_id: task.task_id.to_string(),
            principal: task.principal.as_str().to_owned(),
            design: match task.flavor {
                Flavor::V2025 => durable_mcp_protocol::McpVersion::V2025_11_25.as_str(),
                Flavor::Extension => "extension",
            },
            status: task.status.as_str().to_owned(),
            status_message: task.status_message,
            created_at: iso8601(task.created_at_ms),
            last_updated_at: iso8601(task.updated_at_ms),
            ttl_ms: task.ttl_ms,
            open_questions: task.input_requests.len(),
            session: task.session.map(|session| session.to_string()),
            run_id: task.run,
            stream: task.stream.to_string(),
        }
    }
}

/// Up to `limit` records of `kind`, decoded, with their keys; unreadable ones are logged
/// and left out.
async fn decoded<T>(
    store: &dyn Store,
    kind: RecordKind,
    limit: usize,
    decode: impl Fn(&str, &str) -> Result<T, RecordError>,
) -> Result<Vec<(String, T)>, EngineError> {
    let mut out = Vec::new();
    for record in store.list_records(kind, "", limit).await? {
        match decode(&record.key, &record.value) {
            Ok(value) => out.push((record.key, value)),
            Err(error) => {
                tracing::warn!(%error, source = ?std::error::Error::source(&error), "unreadable record")
            }
        }
    }
    Ok(out)
}
