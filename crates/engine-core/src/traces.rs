//! Traces: the OpenTelemetry spans a worker makes, named and attributed as the
//! OpenTelemetry MCP semantic conventions say (`docs/gen-ai/mcp.md`), through the
//! `opentelemetry` API. Every span, attribute and link is in `docs/tracing.md`.
//!
//! Off by default: no span is built, no trace context is read from a request and no
//! tracer is looked up until [`enable`] is called (the facade's `traces::install` does,
//! after installing an OTLP exporter). Each entry point checks [`enabled`] first, one
//! relaxed atomic load.
//!
//! What a request gets, with traces on:
//! - a **server span** `{mcp.method.name} {target}` from its acceptance to the commit of
//!   its outcome (it travels with the request's [`crate::metrics::Operation`]); its parent
//!   is the W3C trace context of the request's `params._meta` (`traceparent`,
//!   `tracestate`), else that of the HTTP request's headers; when both are present the
//!   `_meta` one is the parent and the HTTP one a link (as the conventions say);
//! - **store spans**, children of it, for the store calls made on its behalf while it is
//!   accepted and while its messages are committed ([`crate::metrics::MeteredStore`]);
//! - its **trace context stored** in its run record when it is journaled ([`TraceContext`]:
//!   the server span's own, or with traces off the client's), so that a re-run on another
//!   worker after a crash makes a server span **linked** to the original one.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

use durable_mcp_protocol::jsonrpc::{Outcome, Request as JsonRpcRequest};
use durable_mcp_protocol::methods::Method;
use opentelemetry::global::{BoxedSpan, BoxedTracer};
use opentelemetry::trace::{
    Link, Span as _, SpanContext, SpanId, SpanKind, Status, TraceContextExt as _, TraceFlags,
    TraceId, TraceState, Tracer as _,
};
use opentelemetry::{Context, KeyValue};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The name of durable-mcp's tracer (the instrumentation scope of its spans).
pub const TRACER: &str = "durable-mcp";
/// The `params._meta` key of the W3C `traceparent` (reserved by MCP 2026-07-28).
pub const META_TRACEPARENT: &str = "traceparent";
/// The `params._meta` key of the W3C `tracestate` (reserved by MCP 2026-07-28).
pub const META_TRACESTATE: &str = "tracestate";
/// The longest `tracestate` kept (W3C: at least 512 characters SHOULD be propagated);
/// longer ones are cut by whole list members.
pub const MAX_TRACESTATE: usize = 512;
/// A `tracestate` list member longer than this is dropped first when one must be cut
/// (W3C trace context, "Mutating the tracestate field").
const MAX_TRACESTATE_MEMBER: usize = 128;

static ENABLED: AtomicBool = AtomicBool::new(false);
static TRACER_HANDLE: OnceLock<BoxedTracer> = OnceLock::new();

/// Turn spans on for the process. Call it after installing a tracer provider (the
/// global one of `opentelemetry::global`); engines created afterwards trace their store.
pub fn enable() {
    ENABLED.store(true, Ordering::Relaxed);
}

/// Whether [`enable`] was called.
#[inline]
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

fn tracer() -> &'static BoxedTracer {
    TRACER_HANDLE.get_or_init(|| opentelemetry::global::tracer(TRACER))
}

/// A W3C trace context as a request carried it: a valid `traceparent` and, bounded, its
/// `tracestate`. Stored with a journaled request (its run record's `trace`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceContext {
    /// `00-{trace id}-{span id}-{flags}`, validated.
    pub traceparent: String,
    /// The vendor list, at most [`MAX_TRACESTATE`] characters; `None` when absent or empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tracestate: Option<String>,
}

impl TraceContext {
    /// The context of a `traceparent` and `tracestate` as received; `None` (with a DEBUG
    /// log) when `traceparent` is not a valid W3C trace parent: an invalid one is ignored,
    /// the request is served as if it had none. An invalid `tracestate` is dropped alone.
    pub fn parse(traceparent: &str, tracestate: Option<&str>) -> Option<Self> {
        if parse_traceparent(traceparent).is_none() {
            tracing::debug!(traceparent = %truncated(traceparent), "ignoring an invalid traceparent");
            return None;
        }
        let tracestate = tracestate.and_then(bound_tracestate);
        Some(Self {
            traceparent: traceparent.trim().to_owned(),
            tracestate,
        })
    }

    /// The context in a request's `params._meta`, if it has a valid one.
    pub fn from_meta(request: &JsonRpcRequest) -> Option<Self> {
        let meta = request.meta()?;
        let traceparent = meta.get(META_TRACEPARENT)?.as_str()?;
        Self::parse(
            traceparent,
            meta.get(META_TRACESTATE).and_then(Value::as_str),
        )
    }

    /// The remote span this context names.
    pub fn span_context(&self) -> Option<SpanContext> {
        let (trace_id, span_id, flags) = parse_traceparent(&self.traceparent)?;
        let state = self
            .tracestate
            .as_deref()
            .and_then(|s| s.parse::<TraceState>().ok())
            .unwrap_or_default();
        Some(SpanContext::new(trace_id, span_id, flags, true, state))
    }

    /// The context of a span (its `traceparent`, its `tracestate`).
    fn of(span: &SpanContext) -> Option<Self> {
        span.is_valid().then(|| {
            let traceparent = format!(
                "00-{}-{}-{:02x}",
                span.trace_id(),
                span.span_id(),
                span.trace_flags().to_u8()
            );
            let state = span.trace_state().header();
            Self {
                traceparent,
                tracestate: (!state.is_empty()).then_some(state),
            }
        })
    }
}

/// A log-safe prefix of something a client sent.
fn truncated(value: &str) -> &str {
    let mut end = value.len().min(64);
    while !value.is_char_boundary(end) {
        end -= 1;
    }
    &value[..end]
}

/// `00-{32 hex}-{16 hex}-{2 hex}` (lowercase) with non-zero ids (version 00; a higher version is read
/// by its first four fields, as W3C asks, and `ff` is invalid).
fn parse_traceparent(value: &str) -> Option<(TraceId, SpanId, TraceFlags)> {
    let value = value.trim();
    let mut parts = value.split('-');
    let (version, trace, span, flags) =
        (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    // W3C: lowercase hex only.
    let hex = |s: &str, len: usize| {
        s.len() == len
            && s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    if !hex(version, 2) || version == "ff" || !hex(trace, 32) || !hex(span, 16) || !hex(flags, 2) {
        return None;
    }
    if version == "00" && parts.next().is_some() {
        return None;
    }
    let trace_id = TraceId::from_hex(trace).ok()?;
    let span_id = SpanId::from_hex(span).ok()?;
    let flags = u8::from_str_radix(flags, 16).ok()?;
    (trace_id != TraceId::INVALID && span_id != SpanId::INVALID).then_some((
        trace_id,
        span_id,
        TraceFlags::new(flags),
    ))
}

/// `tracestate` as kept: valid (as `opentelemetry` parses it: at most 32 members), then
/// at most [`MAX_TRACESTATE`] characters, cut as W3C says: members longer than 128
/// characters go first, then members from the end. `None` when nothing valid is left.
fn bound_tracestate(value: &str) -> Option<String> {
    let state = value.parse::<TraceState>().ok()?.header();
    if state.is_empty() {
        return None;
    }
    if state.len() <= MAX_TRACESTATE {
        return Some(state);
    }
    let mut kept = String::new();
    for member in state
        .split(',')
        .filter(|m| m.len() <= MAX_TRACESTATE_MEMBER)
    {
        let added = if kept.is_empty() {
            member.len()
        } else {
            member.len() + 1
        };
        if kept.len() + added > MAX_TRACESTATE {
            break;
        }
        if !kept.is_empty() {
            kept.push(',');
        }
        kept.push_str(member);
    }
    (!kept.is_empty()).then_some(kept)
}

/// The context to store with a journaled request: that of the span current now (the
/// request's server span, traces on), else the client's (`_meta`, else the HTTP headers),
/// so that a worker with traces on can link a re-run to it.
pub fn to_store(request: &JsonRpcRequest, header: Option<&TraceContext>) -> Option<TraceContext> {
    if enabled() {
        let current = Context::current();
        if current.has_active_span()
            && let Some(own) = TraceContext::of(&current.span().span_context().clone())
        {
            return Some(own);
        }
    }
    TraceContext::from_meta(request).or_else(|| header.cloned())
}

/// What a server span is about, read from its request.
pub struct Request<'a> {
    /// The request.
    pub request: &'a JsonRpcRequest,
    /// The legacy session, if any.
    pub session: Option<&'a str>,
    /// The protocol version.
    pub protocol_version: &'a str,
    /// The HTTP request's trace context, if any.
    pub header: Option<&'a TraceContext>,
}

/// One request's server span, ended with its outcome ([`ServerSpan::finish`]), or, dropped
/// unfinished (the outcome was not committed on this worker), ended without one.
#[derive(Debug)]
pub struct ServerSpan {
    context: Context,
}

impl ServerSpan {
    /// The server span of a new request; `None` when traces are off.
    pub fn start(request: &Request<'_>) -> Option<Self> {
        if !enabled() {
            return None;
        }
        let meta = TraceContext::from_meta(request.request);
        let (parent, link) = match (meta, request.header) {
            (Some(meta), header) => (Some(meta), header.cloned()),
            (None, header) => (header.cloned(), None),
        };
        let parent_cx = match parent.as_ref().and_then(TraceContext::span_context) {
            Some(remote) => Context::new().with_remote_span_context(remote),
            None => Context::new(),
        };
        let links = link
            .as_ref()
            .and_then(TraceContext::span_context)
            .map(Link::with_context)
            .into_iter()
            .collect();
        Some(Self::open(request, &parent_cx, links, Vec::new()))
    }

    /// The server span of a re-run of a journaled request (claimed after its worker died
    /// or handed it over): a new trace, linked to the span of the run's stored context.
    pub fn rerun(
        request: &Request<'_>,
        stored: Option<&TraceContext>,
        attempt: u32,
    ) -> Option<Self> {
        if !enabled() {
            return None;
        }
        let links = stored
            .and_then(TraceContext::span_context)
            .map(|original| {
                Link::new(
                    original,
                    vec![KeyValue::new("durable_mcp.link", "rerun_of")],
                    0,
                )
            })
            .into_iter()
            .collect();
        let extra = vec![
            KeyValue::new("durable_mcp.rerun", true),
            KeyValue::new("durable_mcp.attempt", i64::from(attempt)),
        ];
        Some(Self::open(request, &Context::new(), links, extra))
    }

    fn open(
        request: &Request<'_>,
        parent: &Context,
        links: Vec<Link>,
        mut attributes: Vec<KeyValue>,
    ) -> Self {
        let method = request.request.method();
        let param = |name: &str| request.request.param_str(name);
        attributes.push(KeyValue::new("mcp.method.name", method.as_str().to_owned()));
        attributes.push(KeyValue::new(
            "mcp.protocol.version",
            request.protocol_version.to_owned(),
        ));
        // No `network.transport`: the engine serves HTTP (`tcp`) and stdio (`pipe`) alike
        // and does not know which one a request came by.
        if let Some(session) = request.session {
            attributes.push(KeyValue::new("mcp.session.id", session.to_owned()));
        }
        match request.request.id() {
            Value::String(id) => attributes.push(KeyValue::new("jsonrpc.request.id", id.clone())),
            Value::Number(id) => {
                attributes.push(KeyValue::new("jsonrpc.request.id", id.to_string()))
            }
            _ => {}
        }
        let target = match method {
            Method::ToolsCall => param("name").inspect(|name| {
                attributes.push(KeyValue::new("gen_ai.tool.name", (*name).to_owned()));
                attributes.push(KeyValue::new("gen_ai.operation.name", "execute_tool"));
            }),
            Method::PromptsGet => param("name").inspect(|name| {
                attributes.push(KeyValue::new("gen_ai.prompt.name", (*name).to_owned()))
            }),
            Method::ResourcesRead | Method::ResourcesSubscribe | Method::ResourcesUnsubscribe => {
                // In the attributes, not the name: URIs have high cardinality (the
                // conventions ask for names without them by default).
                if let Some(uri) = param("uri") {
                    attributes.push(KeyValue::new("mcp.resource.uri", uri.to_owned()));
                }
                None
            }
            _ => None,
        };
        let name = match target {
            Some(target) => format!("{method} {target}"),
            None => method.to_string(),
        };
        let span: BoxedSpan = tracer()
            .span_builder(name)
            .with_kind(SpanKind::Server)
            .with_attributes(attributes)
            .with_links(links)
            .start_with_context(tracer(), parent);
        Self {
            context: parent.with_span(span),
        }
    }

    /// The context to run the request's work in (its store spans become children).
    pub fn context(&self) -> &Context {
        &self.context
    }

    /// End the span with the request's outcome (a JSON-RPC response): `error.type` and an
    /// error status for an error response or a tool result with `isError`.
    pub fn finish(self, outcome: &Value) {
        let span = self.context.span();
        match Outcome::of(outcome) {
            Some(Outcome::Error { code, message, .. }) => {
                let code = code.map_or_else(|| crate::semconv::OTHER.to_owned(), |c| c.to_string());
                span.set_attribute(KeyValue::new("rpc.response.status_code", code.clone()));
                span.set_attribute(KeyValue::new("error.type", code));
                span.set_status(Status::error(message.to_owned()));
            }
            Some(Outcome::Suspended) => {
                let code = durable_mcp_handler::durable::SUSPENDED_CODE.to_string();
                span.set_attribute(KeyValue::new("rpc.response.status_code", code.clone()));
                span.set_attribute(KeyValue::new("error.type", code));
            }
            Some(Outcome::ToolError(_)) => {
                span.set_attribute(KeyValue::new("error.type", crate::semconv::TOOL_ERROR));
                span.set_status(Status::error(crate::semconv::TOOL_ERROR));
            }
            _ => {}
        }
        span.end();
    }

    /// End the span as answered without an error.
    pub fn succeeded(self) {
        self.context.span().end();
    }
}

/// A store call's span, a child of the current span (a request's), or `None` when traces
/// are off or no request's span is current (heartbeats, the pruner, recovery scans).
pub fn store_span(backend: &'static str, operation: &'static str) -> Option<BoxedSpan> {
    if !enabled() {
        return None;
    }
    let parent = Context::current();
    if !parent.has_active_span() {
        return None;
    }
    let attributes = vec![
        KeyValue::new("db.system.name", db_system(backend)),
        KeyValue::new("db.operation.name", operation),
        KeyValue::new("durable_mcp.store.backend", backend),
    ];
    Some(
        tracer()
            .span_builder(format!("store {operation}"))
            .with_kind(SpanKind::Client)
            .with_attributes(attributes)
            .start_with_context(tracer(), &parent),
    )
}

/// End a store call's span, with `error.type` (the error's portable kind) if it failed.
pub fn end_store_span<T>(span: Option<BoxedSpan>, result: &durable_mcp_store::StoreResult<T>) {
    if let Some(mut span) = span {
        if let Err(error) = result {
            span.set_attribute(KeyValue::new("error.type", format!("{:?}", error.kind())));
            span.set_status(Status::error(error.to_string()));
        }
        span.end();
    }
}

/// `db.system.name` of a backend (the conventions' well-known values where there is one).
fn db_system(backend: &'static str) -> &'static str {
    match backend {
        "postgres" => "postgresql",
        "sqlite" => "sqlite",
        "redis" => "redis",
        other => other,
    }
}

/// Run `future` in `context` (its store spans become the context's children), or as is
/// without one.
///
/// Not an `async fn`: an async wrapper would hold `future` twice (as its argument, and
/// again inside the `WithContext` it builds), doubling the size of every request future
/// it wraps; this returns the one future that runs, so the result is `future` plus the
/// context.
pub fn in_context<F: Future>(
    context: Option<Context>,
    future: F,
) -> futures::future::Either<opentelemetry::context::WithContext<F>, F> {
    use opentelemetry::context::FutureExt as _;
    match context {
        Some(context) => futures::future::Either::Left(future.with_context(context)),
        None => futures::future::Either::Right(future),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // tests: a panic is the failure report

    use super::*;

    const VALID: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_valid_traceparent_is_kept_with_its_state() {
        let context =
            TraceContext::parse(VALID, Some("rojo=00f067aa0ba902b7,congo=t61rcWkgMzE")).unwrap();
        assert_eq!(context.traceparent, VALID);
        assert_eq!(
            context.tracestate.as_deref(),
            Some("rojo=00f067aa0ba902b7,congo=t61rcWkgMzE")
        );
        let span = context.span_context().unwrap();
        assert_eq!(
            span.trace_id().to_string(),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
        assert_eq!(span.span_id().to_string(), "00f067aa0ba902b7");
        assert!(span.is_sampled() && span.is_remote());
        assert_eq!(TraceContext::of(&span).unwrap(), context);
    }

    #[test]
    fn invalid_traceparents_are_ignored() {
        for invalid in [
            "",
            "garbage",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
        ] {
            assert_eq!(
                TraceContext::parse(invalid, None),
                None,
                "{invalid:?} is invalid"
            );
        }
        // A later version is read by its first four fields.
        assert!(
            TraceContext::parse(
                "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-next",
                None
            )
            .is_some()
        );
        // An invalid tracestate is dropped alone.
        assert_eq!(
            TraceContext::parse(VALID, Some("no equals sign"))
                .unwrap()
                .tracestate,
            None
        );
    }

    #[test]
    fn a_huge_tracestate_is_bounded() {
        // 32 members of 40 characters: 1,311 characters in all.
        let members: Vec<String> = (0..32)
            .map(|i| format!("k{i:02}={}", "v".repeat(36)))
            .collect();
        let kept = TraceContext::parse(VALID, Some(&members.join(",")))
            .unwrap()
            .tracestate
            .unwrap();
        assert!(kept.len() <= MAX_TRACESTATE, "{} characters", kept.len());
        assert!(
            kept.starts_with("k00="),
            "members are cut from the end: {kept}"
        );
        // A member over 128 characters goes first, even at the front.
        let long = format!("big={}", "x".repeat(200));
        let state = format!("{long},{}", members.join(","));
        let kept = TraceContext::parse(VALID, Some(&state))
            .unwrap()
            .tracestate
            .unwrap();
        assert!(!kept.contains("big="), "{kept}");
        assert!(kept.len() <= MAX_TRACESTATE && kept.starts_with("k00="));
        // Megabytes of it cost what 32 members do (opentelemetry reads no more).
        let huge = format!("a={}", "b".repeat(4 << 20));
        assert_eq!(
            TraceContext::parse(VALID, Some(&huge)).unwrap().tracestate,
            None
        );
    }

    #[test]
    fn the_meta_context_is_read_from_params() {
        let request = serde_json::json!({"method": "tools/call", "params": {"name": "echo", "_meta": {"traceparent": VALID, "tracestate": "a=b"}}});
        let context = TraceContext::from_meta(&crate::Request::from_message(
            request.as_object().unwrap().clone(),
        ))
        .unwrap();
        assert_eq!(context.tracestate.as_deref(), Some("a=b"));
        let without = serde_json::json!({"method": "tools/call", "params": {"name": "echo", "_meta": {"traceparent": 7}}});
        assert_eq!(
            TraceContext::from_meta(&crate::Request::from_message(
                without.as_object().unwrap().clone()
            )),
            None
        );
    }

    /// Off (no test of this crate enables traces), nothing is built.
    #[test]
    fn with_traces_off_nothing_is_built() {
        assert!(!enabled());
        let request = serde_json::json!({"method": "tools/call", "params": {"name": "echo", "_meta": {"traceparent": VALID}}});
        let request = Request {
            request: &crate::Request::from_message(request.as_object().unwrap().clone()),
            session: None,
            protocol_version: "2025-11-25",
            header: None,
        };
        assert!(ServerSpan::start(&request).is_none());
        assert!(ServerSpan::rerun(&request, None, 2).is_none());
        assert!(store_span("memory", "commit").is_none());
        assert!(TRACER_HANDLE.get().is_none(), "no tracer looked up");
    }
}
