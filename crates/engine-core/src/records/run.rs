//! The journal entry of one request ([`RecordKind::Run`](durable_mcp_store::RecordKind::Run)).

use durable_mcp_protocol::McpVersion;
use durable_mcp_protocol::jsonrpc::{Request, RequestId};
use durable_mcp_store::{Principal, RecordKind, SessionId, StreamId};
use serde::{Deserialize, Serialize};

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
        Ok(if bool::deserialize(deserializer)? {
            Era::Modern
        } else {
            Era::Legacy
        })
    }
}

/// The journal entry of one request, with its lease.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunRecord {
    /// Who sent the request (D13).
    pub principal: Principal,
    /// Its legacy session, if any.
    pub session: Option<SessionId>,
    /// The request's era (stored as `modern`).
    #[serde(rename = "modern", with = "era_as_modern")]
    pub era: Era,
    /// The protocol version it was sent under.
    pub protocol_version: McpVersion,
    /// The log level of its session, or of its `_meta` (2026-07-28), when it was accepted.
    pub log_level: Option<String>,
    /// The request, as it came (stored as its JSON-RPC message).
    pub request: Request,
    /// Its response stream.
    pub stream: StreamId,
    /// Where the client's answers to durable questions are committed (created lazily).
    pub inbox: StreamId,
    /// The worker holding its lease (empty: given back, for any worker to take).
    pub owner: String,
    /// Until when the lease lasts (milliseconds since the epoch).
    pub lease_until_ms: u64,
    /// Which run of the request this is (1: the first).
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
    pub reply: Option<StreamId>,
    /// A 2025-11-25 `tasks/result`: the task whose stream is relayed onto `stream`. Such a
    /// run has no handler: recovery restarts the relay where it stopped.
    #[serde(default)]
    pub relay: Option<Relay>,
    /// The W3C trace context of the request's first run (its server span's, or the
    /// client's with traces off): a re-run's server span links to it. Absent in records
    /// written before traces existed, and for requests that carried none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<crate::traces::TraceContext>,
    /// The HTTP head of the request, without its credentials, for a re-run's handler.
    /// Absent for stdio requests and in records written before it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http: Option<StoredHead>,
    /// Set while the run is parked for an operator ([`Parked`]): no worker takes it until
    /// an operator retries it (`durable-mcp runs retry`) or ends it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parked: Option<Parked>,
    /// Its last [`ATTEMPTS_KEPT`] attempts, oldest first, for its timeline. Absent in
    /// records written before they were kept.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attempts: Vec<Attempt>,
}

/// How many attempts a run record keeps (a run that fails on and on keeps its last ones).
pub const ATTEMPTS_KEPT: usize = 16;

/// One attempt of a run: which worker ran it, from when, and how it ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attempt {
    /// Which attempt (1: the first).
    pub attempt: u32,
    /// The worker that ran it.
    pub worker: String,
    /// When it started (milliseconds since the epoch).
    pub started_ms: u64,
    /// How it ended, once it ended without the run ending (an attempt that answered ends
    /// with the run, whose outcome is on its stream).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended: Option<AttemptEnd>,
}

/// How and when an attempt ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttemptEnd {
    /// How.
    pub how: AttemptEnding,
    /// When (milliseconds since the epoch; for [`AttemptEnding::LeaseLost`], when another
    /// worker found it so).
    pub at_ms: u64,
}

/// How an attempt ended without an outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AttemptEnding {
    /// Its worker gave it back (shutting down, or a client's re-send) for another to go on.
    HandedOver,
    /// Its handler panicked or the store failed under it.
    Failed,
    /// Its worker stopped renewing its lease (it died, or was cut off) and another took it.
    LeaseLost,
    /// It was parked for an operator.
    Parked,
}

impl AttemptEnding {
    /// Its name, as stored and printed.
    pub fn as_str(self) -> &'static str {
        match self {
            AttemptEnding::HandedOver => "handed_over",
            AttemptEnding::Failed => "failed",
            AttemptEnding::LeaseLost => "lease_lost",
            AttemptEnding::Parked => "parked",
        }
    }
}

/// Why a run was parked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ParkReason {
    /// It ended without an outcome `max_attempts` times (its worker died, its handler
    /// panicked, the store failed under it).
    TooManyFailures,
    /// Its handler ended with an error it marked retryable (after a fix, not at once).
    RetryableError,
}

impl ParkReason {
    /// Its name, as stored and printed.
    pub fn as_str(self) -> &'static str {
        match self {
            ParkReason::TooManyFailures => "too_many_failures",
            ParkReason::RetryableError => "retryable_error",
        }
    }
}

/// A run kept for an operator instead of ended: a poisoned run (one that keeps failing) or
/// one whose handler asked for a retry after a fix. Its client waits (a legacy stream stays
/// open, a task stays `working`); its committed steps stay, so a retry replays them (D8).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Parked {
    /// Why.
    pub reason: ParkReason,
    /// The last error, as a person reads it.
    pub error: String,
    /// When (milliseconds since the epoch).
    pub at_ms: u64,
}

/// Whether a header named `name` carries a credential: such headers are never logged, and
/// never kept with a journaled request (a re-run's handler does not see them).
pub fn is_credential(name: &http::HeaderName) -> bool {
    use http::header;
    matches!(
        *name,
        header::AUTHORIZATION | header::PROXY_AUTHORIZATION | header::COOKIE | header::SET_COOKIE
    ) || {
        // Header names are short and lowercase: comparing windows costs less than setting
        // up a substring search per word (this runs for every header of every journaled
        // request).
        let name = name.as_str().as_bytes();
        ["key", "token", "secret", "password", "auth"]
            .iter()
            .any(|word| {
                name.windows(word.len())
                    .any(|window| window == word.as_bytes())
            })
    }
}

/// A request's HTTP head as a journal entry keeps it: the method, the URI, the version and
/// every header that carries no credential ([`is_credential`]) and whose value is
/// text. A re-run's handler gets it back as [`http::request::Parts`] without extensions.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredHead {
    method: String,
    uri: String,
    version: String,
    headers: Vec<(String, String)>,
}

impl StoredHead {
    /// The head of `parts` without its credentials (see [`is_credential`](super::is_credential)).
    pub fn keep(parts: &http::request::Parts) -> Self {
        let headers = parts
            .headers
            .iter()
            .filter(|(name, value)| !is_credential(name) && !value.is_sensitive())
            .filter_map(|(name, value)| {
                Some((name.as_str().to_owned(), value.to_str().ok()?.to_owned()))
            })
            .collect();
        Self {
            method: parts.method.to_string(),
            uri: parts.uri.to_string(),
            version: format!("{:?}", parts.version),
            headers,
        }
    }

    /// The head again; `None` if what it holds is not a valid head (a record edited by hand).
    pub fn parts(&self) -> Option<http::request::Parts> {
        let version = match self.version.as_str() {
            "HTTP/0.9" => http::Version::HTTP_09,
            "HTTP/1.0" => http::Version::HTTP_10,
            "HTTP/2.0" => http::Version::HTTP_2,
            "HTTP/3.0" => http::Version::HTTP_3,
            _ => http::Version::HTTP_11,
        };
        let mut builder = http::Request::builder()
            .method(self.method.as_str())
            .uri(self.uri.as_str())
            .version(version);
        for (name, value) in &self.headers {
            builder = builder.header(name.as_str(), value.as_str());
        }
        builder.body(()).ok().map(|request| request.into_parts().0)
    }
}

/// What a journaled `tasks/result` relays.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Relay {
    /// The task's record key.
    pub task: String,
    /// The task's id.
    pub task_id: String,
    /// The task's own stream (its questions, then its outcome).
    pub source: StreamId,
}

impl RunRecord {
    /// Attempt `self.attempt` starts on `worker` at `now_ms` (its timeline's entry).
    pub fn begin_attempt(&mut self, worker: &str, now_ms: u64) {
        if self.attempts.len() >= ATTEMPTS_KEPT {
            self.attempts.remove(0);
        }
        self.attempts.push(Attempt {
            attempt: self.attempt,
            worker: worker.to_owned(),
            started_ms: now_ms,
            ended: None,
        });
    }

    /// Take back the attempt just begun: the run was claimed, and is not run after all.
    pub fn unbegin_attempt(&mut self) {
        if self
            .attempts
            .last()
            .is_some_and(|last| last.ended.is_none())
        {
            self.attempts.pop();
            self.attempt = self.attempt.saturating_sub(1).max(1);
        }
    }

    /// The current attempt ended `how` at `now_ms` (unless its end is already known).
    pub fn end_attempt(&mut self, how: AttemptEnding, now_ms: u64) {
        if let Some(last) = self.attempts.last_mut()
            && last.ended.is_none()
        {
            last.ended = Some(AttemptEnd { how, at_ms: now_ms });
        }
    }

    /// The value the store keeps.
    pub fn encode(&self) -> Result<String, RecordError> {
        super::encode(RecordKind::Run, self)
    }

    /// The run record stored under `key`.
    pub fn decode(key: &str, value: &str) -> Result<Self, RecordError> {
        super::decode(RecordKind::Run, key, value)
    }

    /// The client's JSON-RPC id of the request.
    pub fn id(&self) -> RequestId {
        self.request.id().clone()
    }

    /// Whether the run is a stateless request (2026-07-28, not a task): its steps outlive it,
    /// for a retry with its sealed state to continue them.
    pub fn stateless(&self) -> bool {
        self.era == Era::Modern && self.task.is_none()
    }

    /// Whether the run can be parked: its client can read a later outcome (a legacy stream
    /// it resumes, a task it polls). A stateless request's client is gone with its
    /// connection; a relay (`tasks/result`) has no handler to fail.
    pub fn parkable(&self) -> bool {
        !self.stateless() && self.relay.is_none()
    }
}
