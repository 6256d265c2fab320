//! The durable state of one task ([`RecordKind::Task`](durable_mcp_store::RecordKind::Task)).

use std::collections::BTreeMap;

use durable_mcp_protocol::tasks::TaskStatus;
use durable_mcp_store::{Principal, RecordKind, SessionId, StreamId};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::RecordError;

/// Which design a task follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Flavor {
    /// 2026-07-28 Tasks extension.
    Extension,
    /// 2025-11-25 experimental tasks.
    V2025,
}

/// The durable state of one task.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TaskRecord {
    /// The id the client knows it by.
    pub task_id: StreamId,
    /// Its owner (D13).
    pub principal: Principal,
    /// The legacy session that created it, if any (2025-11-25 tasks are the session's).
    pub session: Option<SessionId>,
    /// Which design of tasks it follows.
    pub flavor: Flavor,
    /// Its status.
    pub status: TaskStatus,
    /// The message that goes with its status.
    pub status_message: Option<String>,
    /// When it was created (milliseconds since the epoch).
    pub created_at_ms: u64,
    /// When it last changed.
    pub updated_at_ms: u64,
    /// How long it is kept after it last changed.
    pub ttl_ms: u64,
    /// The internal stream of the task's run (its questions and its outcome).
    pub stream: StreamId,
    /// Its result, once it completed.
    pub result: Option<Value>,
    /// Its JSON-RPC error, once it failed.
    pub error: Option<Value>,
    /// Open questions (Extension), by key: `{method, params}`.
    pub input_requests: BTreeMap<String, Value>,
    /// Answers delivered by `tasks/update` and not yet consumed by the run.
    pub input_responses: BTreeMap<String, Value>,
    /// 2025-11-25: the standalone stream of the session that created the task, where
    /// `notifications/tasks/status` go.
    #[serde(default)]
    pub notify: Option<StreamId>,
    /// The journal id of the run doing its work (`durable-mcp runs show`). Absent in
    /// records written before it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<String>,
}

impl TaskRecord {
    /// The value the store keeps.
    pub fn encode(&self) -> Result<String, RecordError> {
        super::encode(RecordKind::Task, self)
    }

    /// The task record stored under `key`.
    pub fn decode(key: &str, value: &str) -> Result<Self, RecordError> {
        super::decode(RecordKind::Task, key, value)
    }
}

/// ISO 8601 (UTC, millisecond precision) for a Unix time in milliseconds: how task times
/// are shown.
pub fn iso8601(ms: u64) -> String {
    let secs = ms / 1000;
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3_600,
        (rem % 3_600) / 60,
        rem % 60,
        ms % 1000
    )
}
