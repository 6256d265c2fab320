//! The journal entry of one request ([`RecordKind::Run`](durable_mcp_store::RecordKind::Run)).

use durable_mcp_protocol::McpVersion;
use durable_mcp_protocol::jsonrpc::RequestId;
use durable_mcp_store::RecordKind;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::{Flavor, RecordError};

/// The protocol era of one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Era {
    /// 2025-03-26 .. 2025-11-25: `initialize`, sessions, resumable streams.
    Legacy,
    /// 2026-07-28: stateless, per-request `_meta`.
    Modern,
}

/// A run record keeps the era as `"modern": true|false` (its layout from before the enum).
mod era_as_modern {
    use serde::{Deserialize, Deserializer, Serializer};

    use super::Era;

    pub(super) fn serialize<S: Serializer>(era: &Era, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_bool(*era == Era::Modern)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Era, D::Error> {
        Ok(if bool::deserialize(deserializer)? { Era::Modern } else { Era::Legacy })
    }
}

/// The journal entry of one request, with its lease.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct RunRecord {
    pub principal: String,
    pub session: Option<String>,
    /// The request's era (stored as `modern`).
    #[serde(rename = "modern", with = "era_as_modern")]
    pub era: Era,
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
    /// The W3C trace context of the request's first run (its server span's, or the
    /// client's with traces off): a re-run's server span links to it. Absent in records
    /// written before traces existed, and for requests that carried none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<crate::traces::TraceContext>,
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

impl RunRecord {
    /// The value the store keeps.
    pub(crate) fn encode(&self) -> Result<String, RecordError> {
        super::encode(RecordKind::Run, self)
    }

    /// The run record stored under `key`.
    pub(crate) fn decode(key: &str, value: &str) -> Result<Self, RecordError> {
        super::decode(RecordKind::Run, key, value)
    }

    /// The client's JSON-RPC id of the request.
    pub(crate) fn id(&self) -> RequestId {
        self.request.get("id").cloned().unwrap_or(Value::Null)
    }

    /// Whether the run is a stateless request (2026-07-28, not a task): its steps outlive it,
    /// for a retry with its sealed state to continue them.
    pub(crate) fn stateless(&self) -> bool {
        self.era == Era::Modern && self.task.is_none()
    }
}
