//! Metrics: what a worker records through the [`metrics`] facade, under the names of the
//! OpenTelemetry MCP semantic conventions (`mcp.server.*`) and durable-mcp's own
//! (`durable_mcp.*`). Every name, its type, labels and meaning is in `docs/metrics.md`.
//!
//! Off by default: nothing is recorded, no label is built and no clock is read until
//! [`enable`] is called (the facade's `metrics::install` does, after installing the
//! Prometheus recorder). Each recording function checks [`enabled`] first, one relaxed
//! atomic load, so that with metrics off the request path does not even build the label
//! strings the facade would hand a no-op recorder.
//!
//! The store latency is recorded by a decorator ([`MeteredStore`]) that the engine puts
//! around its store when metrics are on (the engine's `Engine::new`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use ::metrics::{
    Label, SharedString, Unit, counter, describe_counter, describe_gauge, describe_histogram,
    gauge, histogram,
};
use durable_mcp_handler::durable::SUSPENDED_CODE;
use durable_mcp_protocol::jsonrpc::Outcome;
use durable_mcp_protocol::methods::{self, Method};
use serde_json::Value;

mod store;

pub use store::MeteredStore;

/// `mcp.server.operation.duration` (histogram, seconds): one request, from its acceptance
/// to the commit of its outcome.
pub const OPERATION_DURATION: &str = "mcp.server.operation.duration";
/// `mcp.server.session.duration` (histogram, seconds): a legacy session, from its
/// `initialize` to its end by `DELETE`.
pub const SESSION_DURATION: &str = "mcp.server.session.duration";
/// Store call latency (histogram, seconds), by `backend` and `operation`.
pub const STORE_OPERATION_DURATION: &str = "durable_mcp.store.operation.duration";
/// Store batch commits (counter), by `backend`.
pub const STORE_COMMITS: &str = "durable_mcp.store.commits";
/// Ops per committed batch (histogram), by `backend`.
pub const STORE_BATCH_OPS: &str = "durable_mcp.store.batch.ops";
/// Handler runs in flight on this worker (gauge).
pub const REQUESTS_IN_FLIGHT: &str = "durable_mcp.requests.in_flight";
/// Journaled runs this worker resumed after claiming them (counter), by `kind`.
pub const JOURNAL_RECOVERIES: &str = "durable_mcp.journal.recoveries";
/// Journaled runs this worker claimed (counter), by `from`.
pub const JOURNAL_TAKEOVERS: &str = "durable_mcp.journal.takeovers";
/// Leases this worker lost while running a run (counter), by `reason`.
pub const JOURNAL_LEASES_LOST: &str = "durable_mcp.journal.leases_lost";
/// Runs this worker parked for an operator (counter), by `reason`.
pub const RUNS_PARKED: &str = "durable_mcp.runs.parked";
/// Parked runs in the journal, as this worker's last recovery pass counted them (gauge).
pub const RUNS_PARKED_NOW: &str = "durable_mcp.runs.parked_now";
/// SSE responses open on this worker (gauge).
pub const SSE_STREAMS_OPEN: &str = "durable_mcp.sse.streams.open";
/// `Last-Event-ID` resumes served (counter), by `stream`.
pub const SSE_REPLAYS: &str = "durable_mcp.sse.replays";
/// Events written on resumed (`Last-Event-ID`) connections (counter).
pub const SSE_REPLAYED_EVENTS: &str = "durable_mcp.sse.replayed_events";
/// Live legacy sessions as this worker counts them (gauge).
pub const SESSIONS_LIVE: &str = "durable_mcp.sessions.live";
/// Task status changes (counter), by `status` (the new status).
pub const TASK_TRANSITIONS: &str = "durable_mcp.tasks.transitions";
/// What retention removed (counter), by `kind`.
pub const RETENTION_REMOVED: &str = "durable_mcp.retention.removed";
/// Requests refused by a limit per principal (counter), by `limit` (see [`crate::limits`]).
pub const LIMITS_REFUSED: &str = "durable_mcp.limits.refused";
/// Questions to the client answered from the journal instead of asked again (counter), by
/// `method` (D9).
pub const JOURNAL_ANSWERS_REUSED: &str = "durable_mcp.journal.answers_reused";
/// Requests refused by authentication (counter), by `reason` (see [`auth_refused`]).
pub const AUTH_REFUSED: &str = "durable_mcp.auth.refused";
/// Requests whose credentials were accepted (counter), by `method` (see [`authenticated`]).
pub const AUTH_AUTHENTICATED: &str = "durable_mcp.auth.authenticated";
/// Failed requests to the authorization server (counter), by `endpoint` (`jwks`,
/// `introspection`).
pub const AUTH_FETCH_FAILURES: &str = "durable_mcp.auth.fetch_failures";

pub use crate::semconv::{OTHER, TOOL_ERROR};

/// The bucket bounds of the MCP semantic conventions for `mcp.server.*.duration`.
pub const MCP_DURATION_BUCKETS: &[f64] = &[
    0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
];
/// The bucket bounds of [`STORE_OPERATION_DURATION`]: 50 µs to 2.5 s.
pub const STORE_DURATION_BUCKETS: &[f64] = &[
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
    2.5,
];
/// The bucket bounds of [`STORE_BATCH_OPS`].
pub const BATCH_OPS_BUCKETS: &[f64] = &[1.0, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0, 32.0, 64.0];

static ENABLED: AtomicBool = AtomicBool::new(false);

/// Turn recording on for the process, and describe every metric (type, unit, help) to the
/// recorder installed now. Call it after installing a recorder; engines created afterwards
/// time their store ([`MeteredStore`]).
pub fn enable() {
    ENABLED.store(true, Ordering::Relaxed);
    describe();
}

/// Whether [`enable`] was called.
#[inline]
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

fn describe() {
    describe_histogram!(
        OPERATION_DURATION,
        Unit::Seconds,
        "MCP requests, from their acceptance to the commit of their outcome."
    );
    describe_histogram!(
        SESSION_DURATION,
        Unit::Seconds,
        "Legacy sessions, from initialize to their end by DELETE."
    );
    describe_histogram!(
        STORE_OPERATION_DURATION,
        Unit::Seconds,
        "Store calls, by backend and operation."
    );
    describe_counter!(
        STORE_COMMITS,
        Unit::Count,
        "Batches committed to the store, by backend."
    );
    describe_histogram!(
        STORE_BATCH_OPS,
        Unit::Count,
        "Ops per committed batch, by backend."
    );
    describe_gauge!(
        REQUESTS_IN_FLIGHT,
        Unit::Count,
        "Handler runs in flight on this worker."
    );
    describe_counter!(
        JOURNAL_RECOVERIES,
        Unit::Count,
        "Journaled runs this worker resumed after claiming them."
    );
    describe_counter!(
        JOURNAL_TAKEOVERS,
        Unit::Count,
        "Journaled runs this worker claimed: its own from before a restart, expired leases, or runs a re-sent request found unrun."
    );
    describe_counter!(
        JOURNAL_LEASES_LOST,
        Unit::Count,
        "Leases this worker lost while running a run."
    );
    describe_counter!(
        RUNS_PARKED,
        Unit::Count,
        "Runs this worker parked for an operator: failed too often, or a retryable handler error."
    );
    describe_gauge!(
        RUNS_PARKED_NOW,
        Unit::Count,
        "Parked runs in the journal, as this worker's last recovery pass counted them."
    );
    describe_gauge!(
        SSE_STREAMS_OPEN,
        Unit::Count,
        "SSE responses open on this worker."
    );
    describe_counter!(
        SSE_REPLAYS,
        Unit::Count,
        "Streams resumed with Last-Event-ID."
    );
    describe_counter!(
        SSE_REPLAYED_EVENTS,
        Unit::Count,
        "Events written on connections resumed with Last-Event-ID."
    );
    describe_gauge!(
        SESSIONS_LIVE,
        Unit::Count,
        "Live sessions: opened here minus ended or pruned here."
    );
    describe_counter!(
        TASK_TRANSITIONS,
        Unit::Count,
        "Task status changes, by new status."
    );
    describe_counter!(
        RETENTION_REMOVED,
        Unit::Count,
        "What retention removed, by kind."
    );
    describe_counter!(
        LIMITS_REFUSED,
        Unit::Count,
        "Requests refused by a limit per principal, by limit."
    );
    describe_counter!(
        JOURNAL_ANSWERS_REUSED,
        Unit::Count,
        "Questions to the client answered from the journal instead of asked again, by method."
    );
    describe_counter!(
        AUTH_REFUSED,
        Unit::Count,
        "Requests refused by authentication, by reason."
    );
    describe_counter!(
        AUTH_AUTHENTICATED,
        Unit::Count,
        "Requests whose credentials were accepted, by method."
    );
    describe_counter!(
        AUTH_FETCH_FAILURES,
        Unit::Count,
        "Failed requests to the authorization server, by endpoint."
    );
}

/// `mcp.method.name` of `method`: the method itself for one of the protocol, [`OTHER`]
/// otherwise (a client's made-up method names must not mint series).
fn method_label(method: &str) -> &'static str {
    const KNOWN: &[&str] = &[
        methods::INITIALIZE,
        methods::SERVER_DISCOVER,
        methods::TOOLS_CALL,
        methods::TOOLS_LIST,
        methods::PROMPTS_GET,
        "prompts/list",
        "resources/list",
        "resources/templates/list",
        methods::RESOURCES_READ,
        methods::RESOURCES_SUBSCRIBE,
        methods::RESOURCES_UNSUBSCRIBE,
        methods::COMPLETION_COMPLETE,
        methods::LOGGING_SET_LEVEL,
        methods::SUBSCRIPTIONS_LISTEN,
        methods::TASKS_GET,
        methods::TASKS_LIST,
        methods::TASKS_RESULT,
        methods::TASKS_CANCEL,
        methods::TASKS_UPDATE,
        "ping",
    ];
    KNOWN
        .iter()
        .find(|known| **known == method)
        .copied()
        .unwrap_or(OTHER)
}

/// One request being served, as metrics and traces see it: started at its acceptance
/// ([`Operation::start`], `None` with metrics and traces off), recorded once with its
/// outcome ([`Operation::finish`]): its `mcp.server.operation.duration` (metrics on) and
/// its server span (traces on, see [`crate::traces`]). An operation dropped unfinished (its
/// outcome was never committed on this worker: cancelled, handed over, the store failed)
/// records no duration, and ends its span without an outcome.
#[derive(Debug)]
pub struct Operation {
    timing: Option<Timing>,
    span: Option<crate::traces::ServerSpan>,
}

#[derive(Debug)]
struct Timing {
    started: Instant,
    method: &'static str,
    tool: Option<String>,
}

impl Operation {
    /// Start timing and tracing `request` (a JSON-RPC request object); `None` when metrics
    /// and traces are off. The tool name of a `tools/call` is its metrics label only if
    /// `known(name)` (the handler has the tool), [`OTHER`] otherwise: a client's made-up
    /// names must not mint series.
    pub fn start(
        span: &crate::traces::Request<'_>,
        known: impl FnOnce(&str) -> bool,
    ) -> Option<Self> {
        let timing = enabled().then(|| {
            let method = method_label(span.request.method().as_str());
            let tool =
                (*span.request.method() == Method::ToolsCall).then(|| match span.request.name() {
                    Some(name) if known(name) => name.to_owned(),
                    _ => OTHER.to_owned(),
                });
            Timing {
                started: Instant::now(),
                method,
                tool,
            }
        });
        Self::of(timing, crate::traces::ServerSpan::start(span))
    }

    /// A re-run's operation: its server span alone (re-runs are counted by
    /// `durable_mcp.journal.recoveries`, not timed); `None` when traces are off.
    pub fn rerun(span: Option<crate::traces::ServerSpan>) -> Option<Self> {
        Self::of(None, span)
    }

    fn of(timing: Option<Timing>, span: Option<crate::traces::ServerSpan>) -> Option<Self> {
        (timing.is_some() || span.is_some()).then_some(Self { timing, span })
    }

    /// The trace context to run the request's work in (traces on).
    pub fn context(&self) -> Option<opentelemetry::Context> {
        self.span.as_ref().map(|span| span.context().clone())
    }

    /// Record the operation with its outcome (a JSON-RPC response).
    pub fn finish(self, outcome: &Value) {
        if let Some(span) = self.span {
            span.finish(outcome);
        }
        if let Some(timing) = self.timing {
            timing.record(error_type(outcome));
        }
    }

    /// Record the operation as answered without an error.
    pub fn succeeded(self) {
        if let Some(span) = self.span {
            span.succeeded();
        }
        if let Some(timing) = self.timing {
            timing.record(None);
        }
    }
}

impl Timing {
    fn record(self, error: Option<SharedString>) {
        let seconds = self.started.elapsed().as_secs_f64();
        let mut labels = Vec::with_capacity(3);
        labels.push(Label::new("mcp.method.name", self.method));
        if let Some(tool) = self.tool {
            labels.push(Label::new("gen_ai.tool.name", tool));
        }
        if let Some(error) = error {
            labels.push(Label::new("error.type", error));
        }
        histogram!(OPERATION_DURATION, labels).record(seconds);
    }
}

/// `error.type` of an outcome: the JSON-RPC error code of an error response, [`TOOL_ERROR`]
/// for a tool result with `isError`, none for a success.
fn error_type(outcome: &Value) -> Option<SharedString> {
    match Outcome::of(outcome)? {
        Outcome::Error {
            code: Some(code), ..
        } => Some(code.to_string().into()),
        Outcome::Error { code: None, .. } => Some(OTHER.into()),
        Outcome::Suspended => Some(SUSPENDED_CODE.to_string().into()),
        Outcome::ToolError(_) => Some(TOOL_ERROR.into()),
        Outcome::Result(_) | Outcome::InputRequired(_) => None,
    }
}

/// Finish `operation`, if timed, with `outcome`.
pub fn finish(operation: Option<Operation>, outcome: &Value) {
    if let Some(operation) = operation {
        operation.finish(outcome);
    }
}

/// A legacy session ended after `seconds`.
pub fn session_ended(created_at_ms: u64) {
    if enabled() {
        let seconds = durable_mcp_store::now_ms().saturating_sub(created_at_ms) as f64 / 1000.0;
        histogram!(SESSION_DURATION).record(seconds);
        gauge!(SESSIONS_LIVE).decrement(1.0);
    }
}

/// A legacy session was opened here.
pub fn session_opened() {
    if enabled() {
        gauge!(SESSIONS_LIVE).increment(1.0);
    }
}

/// A handler run started (`+1`) or ended (`-1`) on this worker.
pub fn in_flight(delta: f64) {
    if enabled() {
        gauge!(REQUESTS_IN_FLIGHT).increment(delta);
    }
}

/// A claimed run was resumed: run again (`rerun`) or its task result relayed (`relay`).
pub fn recovered(kind: &'static str) {
    if enabled() {
        counter!(JOURNAL_RECOVERIES, "kind" => kind).increment(1);
    }
}

/// A run was claimed: this worker's own from before a restart (`own`) or one whose lease
/// expired (`expired`).
pub fn taken_over(from: &'static str) {
    if enabled() {
        counter!(JOURNAL_TAKEOVERS, "from" => from).increment(1);
    }
}

/// A lease was lost: another worker took the run over (`taken_over`), or it could not be
/// renewed for a whole lease (`expired`).
pub fn lease_lost(reason: &'static str) {
    if enabled() {
        counter!(JOURNAL_LEASES_LOST, "reason" => reason).increment(1);
    }
}

/// A run was parked for an operator, for `reason` (`too_many_failures`, `retryable_error`).
pub fn parked(reason: &'static str) {
    if enabled() {
        counter!(RUNS_PARKED, "reason" => reason).increment(1);
    }
}

/// A recovery pass found `count` parked runs in the journal.
pub fn parked_now(count: usize) {
    if enabled() {
        gauge!(RUNS_PARKED_NOW).set(count as f64);
    }
}

/// A task moved to `status`.
pub fn task_status(status: &'static str) {
    if enabled() {
        counter!(TASK_TRANSITIONS, "status" => status).increment(1);
    }
}

/// Retention removed what `report` says.
pub fn pruned(report: &durable_mcp_store::PruneReport) {
    if enabled() {
        counter!(RETENTION_REMOVED, "kind" => "sessions").increment(report.sessions_ended);
        counter!(RETENTION_REMOVED, "kind" => "streams").increment(report.streams_deleted);
        counter!(RETENTION_REMOVED, "kind" => "records").increment(report.records_expired);
        // Pruned sessions are no longer live (counted by the worker that pruned them).
        gauge!(SESSIONS_LIVE).decrement(report.sessions_ended as f64);
    }
}

/// An SSE response opened on this worker; the gauge goes down when the guard drops.
pub fn sse_stream_opened() -> Option<SseStreamOpen> {
    enabled().then(|| {
        gauge!(SSE_STREAMS_OPEN).increment(1.0);
        SseStreamOpen(())
    })
}

/// Holds one SSE response in [`SSE_STREAMS_OPEN`] until dropped.
#[derive(Debug)]
pub struct SseStreamOpen(());

impl Drop for SseStreamOpen {
    fn drop(&mut self) {
        gauge!(SSE_STREAMS_OPEN).decrement(1.0);
    }
}

/// A stream was resumed with `Last-Event-ID`: `standalone` for a session's GET stream,
/// `request` for a request's stream.
pub fn replayed(stream: &'static str) {
    if enabled() {
        counter!(SSE_REPLAYS, "stream" => stream).increment(1);
    }
}

/// A request was refused by the limit per principal named `limit`.
pub fn limit_refused(limit: &'static str) {
    if enabled() {
        counter!(LIMITS_REFUSED, "limit" => limit).increment(1);
    }
}

/// Question `method` was answered from the journal (committed before, by an earlier run or
/// send of the request) instead of asked again.
pub fn answer_reused(method: &str) {
    if enabled() {
        let method = match method {
            "elicitation/create" => "elicitation/create",
            "sampling/createMessage" => "sampling/createMessage",
            "roots/list" => "roots/list",
            _ => OTHER,
        };
        counter!(JOURNAL_ANSWERS_REUSED, "method" => method).increment(1);
    }
}

/// A request was refused by authentication for `reason` (a bounded set: the auth crate's
/// `AuthError::reason`).
pub fn auth_refused(reason: &'static str) {
    if enabled() {
        counter!(AUTH_REFUSED, "reason" => reason).increment(1);
    }
}

/// A request's credentials were accepted by `method` (`api_key`, `jwt`, `introspection`,
/// `trusted_proxy`).
pub fn authenticated(method: &'static str) {
    if enabled() {
        counter!(AUTH_AUTHENTICATED, "method" => method).increment(1);
    }
}

/// `count` more requests to the authorization server's `endpoint` failed.
pub fn auth_fetch_failed(endpoint: &'static str, count: u64) {
    if enabled() {
        counter!(AUTH_FETCH_FAILURES, "endpoint" => endpoint).increment(count);
    }
}

/// One event was written on a resumed connection.
pub fn replayed_event() {
    if enabled() {
        counter!(SSE_REPLAYED_EVENTS).increment(1);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // tests: a panic is the failure report

    use super::*;

    #[test]
    fn error_type_is_the_code_or_tool_error_or_none() {
        let error = serde_json::json!({"jsonrpc": "2.0", "id": 1, "error": {"code": -32602, "message": "bad"}});
        assert_eq!(error_type(&error).as_deref(), Some("-32602"));
        let tool = serde_json::json!({"jsonrpc": "2.0", "id": 1, "result": {"content": [], "isError": true}});
        assert_eq!(error_type(&tool).as_deref(), Some(TOOL_ERROR));
        let ok = serde_json::json!({"jsonrpc": "2.0", "id": 1, "result": {"content": [], "isError": false}});
        assert_eq!(error_type(&ok), None);
    }

    /// Off (no test of this crate enables metrics), a request is not timed: nothing is
    /// read from it, and the tool lookup (and its label string) never happens.
    #[test]
    fn with_metrics_off_nothing_is_built() {
        assert!(!enabled());
        let request = serde_json::json!({"method": "tools/call", "params": {"name": "echo"}});
        let looked_up = std::cell::Cell::new(false);
        let request = crate::traces::Request {
            request: &crate::Request::from_message(request.as_object().unwrap().clone()),
            session: None,
            protocol_version: "2025-11-25",
            header: None,
        };
        let operation = Operation::start(&request, |_| {
            looked_up.set(true);
            true
        });
        assert!(operation.is_none());
        assert!(!looked_up.get(), "no tool lookup with metrics off");
        assert!(sse_stream_opened().is_none());
    }

    #[test]
    fn unknown_methods_share_one_label() {
        assert_eq!(method_label("tools/call"), "tools/call");
        assert_eq!(method_label("made/up/42"), OTHER);
    }
}
