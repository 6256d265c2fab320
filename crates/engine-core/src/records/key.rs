//! Every record key the engine writes, built here and nowhere else.
//!
//! Keys are persistent: a worker finds what another worker (or an earlier version) wrote
//! by building the same key, so the layouts below are pinned by this module's tests. Parts
//! that come from clients or handlers (request ids, step names, principals) are bounded by
//! [`key_part`] so that every backend can index the key.
//!
//! | kind | key |
//! |---|---|
//! | `Run` | `<run id>` (the id of the request's response stream) |
//! | `Step` | `<run id>/s/<step name>`, `<run id>/a/<question index>`, `<run id>/e/<emit index>`, `<run id>/cancel` |
//! | `Alias` | `<session id>/<JSON-RPC request id>` |
//! | `Task` | `<principal>/<task id>`, or `<principal>/<session id>/<task id>` |
//! | `Key` | `request-state` |
//! | `Subscription` | `<hex of the URI>/<session id>` |
//! | `Change` | `<announcement key>` (`tools`, `resource/<uri>`, ...) |
//! | `State` | `<state key>` |

use std::borrow::Cow;

use durable_mcp_protocol::jsonrpc::RequestId;
use durable_mcp_store::{Principal, SessionId, StreamId, key_part};

/// The key of the `requestState` key ring (D12).
pub const KEY_RING: &str = "request-state";

/// The journal entry of the run whose response stream is `stream` (a run's id is its
/// stream's id).
pub fn run(stream: &StreamId) -> String {
    stream.to_string()
}

/// What a step record of a run marks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepKind {
    /// A named step's committed result (D8).
    Step,
    /// The committed answer to a durable question (D9).
    Answer,
    /// An "already sent" mark of a durable notification (D7).
    Emitted,
}

impl StepKind {
    /// The key segment of the kind.
    const fn segment(self) -> &'static str {
        match self {
            StepKind::Step => "s",
            StepKind::Answer => "a",
            StepKind::Emitted => "e",
        }
    }
}

/// The step record `<run>/<kind>/<name>`: `name` (a handler's step name, maybe built from
/// input) is bounded by [`key_part`].
pub fn step(run_id: &str, kind: StepKind, name: &str) -> String {
    format!("{run_id}/{}/{}", kind.segment(), key_part(name))
}

/// The answer record of question `index` of a run.
pub fn answer(run_id: &str, index: u64) -> String {
    step(run_id, StepKind::Answer, &index.to_string())
}

/// The "already sent" mark of notification `index` of a run.
pub fn emitted(run_id: &str, index: u64) -> String {
    step(run_id, StepKind::Emitted, &index.to_string())
}

/// The prefix of every step record of a run (its cancellation mark included).
pub fn steps(run_id: &str) -> String {
    format!("{run_id}/")
}

/// The mark a client's cancellation leaves for a run running elsewhere (D11).
pub fn cancel_mark(run_id: &str) -> String {
    format!("{run_id}/cancel")
}

/// The prefix of the operator actions on a run: not under [`steps`], so they stay after
/// the run ends, as its audit trail.
pub fn actions(run_id: &str) -> String {
    format!("action/{run_id}/")
}

/// The operator action on a run taken at `at_ms` (ordered by time within the run).
pub fn action(run_id: &str, at_ms: u64) -> String {
    format!("action/{run_id}/{at_ms:016}")
}

/// The alias under which a legacy session's JSON-RPC request id points at its run. The id
/// is the client's, of any length a body may carry: bounded by [`key_part`] (a 3,000-byte
/// id overflowed PostgreSQL's index).
pub fn alias(session: &SessionId, id: &RequestId) -> String {
    format!("{session}/{}", key_part(&id.to_string()))
}

/// The prefix of every alias of one session's request ids.
pub fn session_aliases(session: &SessionId) -> String {
    format!("{session}/")
}

/// The prefix of every task key of one owner (D13): its principal (bounded by
/// [`key_part`]) and, for a session-bound task, its session.
pub fn task_owner(principal: &Principal, session: Option<&SessionId>) -> String {
    let principal = key_part(principal.as_str());
    match session {
        Some(session) => format!("{principal}/{session}/"),
        None => format!("{principal}/"),
    }
}

/// The key of task `task_id` of the owner whose prefix is `owner` ([`task_owner`]).
pub fn task(owner: &str, task_id: &str) -> String {
    format!("{owner}{task_id}")
}

/// The task id a task key ends with.
pub fn task_id(task_key: &str) -> &str {
    task_key.rsplit('/').next().unwrap_or_default()
}

/// The prefix of every subscription index entry of `uri` (hex has no `/`, so no URI's
/// prefix is another's).
pub fn subscriptions(uri: &str) -> String {
    let mut prefix: String = uri.bytes().map(|b| format!("{b:02x}")).collect();
    prefix.push('/');
    prefix
}

/// The subscription index entry of `session` for `uri`.
pub fn subscription(uri: &str, session: &SessionId) -> String {
    format!("{}{session}", subscriptions(uri))
}

/// The announcement key of a change of the tool list.
pub const TOOLS_ANNOUNCEMENT: &str = "tools";
/// The announcement key of a change of the prompt list.
pub const PROMPTS_ANNOUNCEMENT: &str = "prompts";
/// The announcement key of a change of the resource list.
pub const RESOURCES_ANNOUNCEMENT: &str = "resources";
/// The announcement keys of the lists, which every listen stream may follow.
pub const LIST_ANNOUNCEMENTS: [&str; 3] = [
    TOOLS_ANNOUNCEMENT,
    PROMPTS_ANNOUNCEMENT,
    RESOURCES_ANNOUNCEMENT,
];

/// The announcement key of an update of resource `uri`.
pub fn resource_announcement(uri: &str) -> String {
    format!("resource/{uri}")
}

/// The resource an announcement key names, if it is a resource's.
pub fn announced_resource(announcement: &str) -> Option<&str> {
    announcement.strip_prefix("resource/")
}

/// The record of the latest announcement of `announcement` (`tools`, `resource/<uri>`).
pub fn change(announcement: &str) -> Cow<'_, str> {
    key_part(announcement)
}

/// The record of a key of the server's application state.
pub fn state(state_key: &str) -> Cow<'_, str> {
    key_part(state_key)
}

/// The key of question `index` in a task's `inputRequests` / a request's
/// `inputResponses` (2026-07-28): kept in task records, so persistent too.
pub fn question(index: u64) -> String {
    format!("q{index}")
}

/// The JSON-RPC id the client sees for the handler's `n`th request through `inbox`.
pub fn inbox_request(inbox: &StreamId, n: u64) -> String {
    format!("{inbox}-{n}")
}

/// The JSON-RPC id the client sees for durable question `index` asked through `inbox`.
pub fn inbox_question(inbox: &StreamId, index: u64) -> String {
    format!("{inbox}-d{index}")
}

/// The inbox a client's response id names, if it is one durable-mcp issued.
pub fn inbox_of(wire_id: &str) -> Option<StreamId> {
    wire_id
        .split_once('-')
        .and_then(|(inbox, _)| inbox.parse().ok())
}
