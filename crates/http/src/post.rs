//! POST: one JSON-RPC message per body, dispatched by era; a batch (an array of them) from a
//! 2025-03-26 session.

use std::sync::Arc;

use axum::body::Body;
use axum::response::{IntoResponse, Response};
use durable_mcp_auth::Authenticated;
use durable_mcp_engine::{Caller, Era};
use durable_mcp_protocol::McpVersion;
use durable_mcp_protocol::jsonrpc::{self, Inbound, Message};
use durable_mcp_protocol::methods::{self, Method};
use durable_mcp_store::{Principal, SessionRecord};
use futures::StreamExt;
use http::request::Parts;
use http::{HeaderMap, HeaderValue, StatusCode};
use serde_json::{Map, Value};

use crate::headers::{self, SESSION_ID};
use crate::rejection::Refusal;
use crate::sse::{self, SseSource};
use crate::{Rejection, Transport};

const META_VERSION: &str = durable_mcp_protocol::meta::PROTOCOL_VERSION;
const META_CAPABILITIES: &str = durable_mcp_protocol::meta::CLIENT_CAPABILITIES;
const META_LOG_LEVEL: &str = durable_mcp_protocol::meta::LOG_LEVEL;
const LOG_LEVELS: [&str; 8] = [
    "debug",
    "info",
    "notice",
    "warning",
    "error",
    "critical",
    "alert",
    "emergency",
];

fn meta(message: &Map<String, Value>) -> Option<&Map<String, Value>> {
    Message::from_map(message).meta()
}

/// Which era a message belongs to (decided per request, as the 2026-07-28 spec says).
fn era_of(
    method: Option<&str>,
    message: &Map<String, Value>,
    header_version: Option<McpVersion>,
) -> Era {
    let modern_header = header_version.is_some_and(McpVersion::is_modern);
    let modern_meta = meta(message).is_some_and(|m| m.contains_key(META_VERSION));
    match method {
        // `initialize` opens a legacy session, unless the request says it is 2026-07-28,
        // where `initialize` no longer exists (404, -32601).
        Some(methods::INITIALIZE) if !(modern_header && modern_meta) => Era::Legacy,
        Some(methods::SERVER_DISCOVER) => Era::Modern,
        _ if modern_meta || modern_header => Era::Modern,
        _ => Era::Legacy,
    }
}

impl Transport {
    /// A POST. Every refusal of a body whose request id can be read carries that id.
    pub(crate) async fn post(
        &self,
        parts: &Parts,
        body: Body,
        who: &Authenticated,
    ) -> Result<Response, Refusal> {
        let bytes = axum::body::to_bytes(body, self.config.max_body_bytes)
            .await
            .map_err(|_| Rejection::PayloadTooLarge(self.config.max_body_bytes))?;
        let value = serde_json::from_slice::<Value>(&bytes);
        let id = value.as_ref().ok().and_then(jsonrpc::request_id);
        self.post_message(parts, value, who)
            .await
            .map_err(|rejection| Refusal { rejection, id })
    }

    async fn post_message(
        &self,
        parts: &Parts,
        value: serde_json::Result<Value>,
        who: &Authenticated,
    ) -> Result<Response, Rejection> {
        let headers = &parts.headers;
        headers::check_post_accept(headers)?;
        headers::check_content_type(headers)?;
        let value = value.map_err(|e| Rejection::ParseError(e.to_string()))?;
        if self.config.log_bodies {
            tracing::trace!(body = %value, "message");
        }
        let value = match value {
            Value::Array(items) => return self.post_batch(parts, items, who).await,
            value => value,
        };
        let inbound = jsonrpc::classify(value).map_err(|r| Rejection::InvalidRequest {
            message: r.message,
            id: r.id,
        })?;
        self.check_operation(who, &inbound)?;
        let header_version = headers::protocol_version(headers)?;
        let (method, message) = match &inbound {
            Inbound::Request(request) => (Some(request.method().as_str()), request.message()),
            Inbound::Notification { method, message } => (Some(method.as_str()), message),
            Inbound::Response { message, .. } => (None, message),
        };
        match era_of(method, message, header_version) {
            Era::Legacy => self.post_legacy(parts, inbound, who).await,
            Era::Modern => self.post_modern(parts, header_version, inbound, who).await,
        }
    }

    async fn post_legacy(
        &self,
        parts: &Parts,
        inbound: Inbound,
        who: &Authenticated,
    ) -> Result<Response, Rejection> {
        let headers = &parts.headers;
        let principal = who.principal.clone();
        if let Inbound::Request(request) = &inbound
            && request.method() == &Method::Initialize
        {
            let (session, response) = self
                .engine
                .initialize(&principal, request.clone(), Some(Arc::new(parts.clone())))
                .await?;
            let mut response = axum::Json(response).into_response();
            if let Some(session) = session {
                let value = HeaderValue::from_str(session.id.as_str())
                    .map_err(|e| Rejection::Internal(e.to_string()))?;
                response.headers_mut().insert(SESSION_ID, value);
            }
            return Ok(response);
        }
        // An unknown header version was refused already; a modern one made the request
        // modern. What is left is a legacy version (or none).
        let session = self.legacy_session(headers, &principal).await?;
        let caller = self.legacy_caller(parts, who, session)?;
        match inbound {
            Inbound::Request(request) => {
                // Boxed: the request path's future is large, and every future around it
                // (the handler's, the connection's) would otherwise carry it and copy it.
                let accepted = Box::pin(self.engine.accept(&caller, request)).await?;
                let mut prefix = Vec::new();
                if let Some(priming) = &accepted.priming {
                    prefix.push(sse::priming_frame(priming, self.engine.options().sse_retry));
                }
                if self.config.json_response {
                    return self.json_outcome(accepted.stream, accepted.follow).await;
                }
                let after = accepted.priming.as_ref().map_or(0, |p| p.seq);
                let close_after = if caller.primes_streams() {
                    self.config.poll_after
                } else {
                    None
                };
                // A stream committed with its handler's first message (a request that is not
                // journaled) starts with its priming event all the same: the tail yields it.
                let priming = match accepted.priming {
                    None if caller.primes_streams() => {
                        Some(durable_mcp_store::EventId::new(accepted.stream.clone(), 1))
                    }
                    _ => None,
                };
                let mut events = self
                    .engine
                    .tail(accepted.stream, after, accepted.follow)
                    .boxed();
                if !prefix.is_empty() {
                    events = self.first_event_with_priming(events, close_after).await;
                }
                let source = SseSource {
                    events,
                    priming,
                    prefix,
                    cancel_on_drop: None,
                    close_after,
                    close_on: accepted.close_connection,
                    keep_session: None,
                };
                Ok(sse::response(
                    &self.engine,
                    source,
                    self.config.keep_alive,
                    &self.shutdown,
                ))
            }
            other => {
                self.legacy_one_way(&caller, other).await?;
                Ok(StatusCode::ACCEPTED.into_response())
            }
        }
    }

    /// The caller of a legacy request on `session`.
    fn legacy_caller(
        &self,
        parts: &Parts,
        who: &Authenticated,
        session: SessionRecord,
    ) -> Result<Caller, Rejection> {
        let mut caller = Caller::legacy(who.principal.clone(), session)?;
        caller.auth = self.auth_info(who);
        caller.trace = trace_context(&parts.headers);
        caller.http = Some(Arc::new(parts.clone()));
        Ok(caller)
    }

    /// A legacy notification or response: handled before the POST is answered (202).
    async fn legacy_one_way(&self, caller: &Caller, inbound: Inbound) -> Result<(), Rejection> {
        match inbound {
            Inbound::Notification { method, message } => {
                if method == methods::NOTIFICATION_CANCELLED {
                    if let Some(request_id) = Message::from_map(&message).param("requestId") {
                        self.engine.cancel(caller, request_id).await?;
                    }
                } else {
                    self.engine.notify(caller, message);
                }
            }
            Inbound::Response { id, message } => self.engine.reply(caller, &id, message).await?,
            Inbound::Request(_) => {
                return Err(Rejection::Internal("a request is not one-way".into()));
            }
        }
        Ok(())
    }

    /// A JSON-RPC batch: an array of messages, which 2025-03-26 says a server MUST receive
    /// (later versions removed batches, so other sessions are refused, 400).
    ///
    /// Every element is checked before any runs: an invalid one, or an `initialize` (which
    /// may not be batched), refuses the whole batch. Then, in order, notifications and
    /// responses are handled, and each request is accepted as if posted alone (journaled,
    /// deduplicated by its id). Requests are answered on one SSE stream, their events
    /// interleaved and each request's in order, or with `json_response` by a JSON array of
    /// their answers in the batch's order; a batch without requests by 202.
    async fn post_batch(
        &self,
        parts: &Parts,
        items: Vec<Value>,
        who: &Authenticated,
    ) -> Result<Response, Rejection> {
        let refuse = |message: String| Rejection::InvalidRequest { message, id: None };
        if items.is_empty() {
            return Err(refuse("an empty JSON-RPC batch".into()));
        }
        let session = self.legacy_session(&parts.headers, &who.principal).await?;
        if session.protocol_version.parse::<McpVersion>().ok() != Some(McpVersion::V2025_03_26) {
            return Err(refuse(format!(
                "JSON-RPC batches are accepted only in 2025-03-26 sessions; this one negotiated {}",
                session.protocol_version
            )));
        }
        let mut inbounds = Vec::with_capacity(items.len());
        for (n, item) in items.into_iter().enumerate() {
            let inbound = jsonrpc::classify(item)
                .map_err(|r| refuse(format!("batch element {n}: {}", r.message)))?;
            if matches!(&inbound, Inbound::Request(request) if request.method() == &Method::Initialize)
            {
                return Err(refuse(
                    "initialize may not be part of a JSON-RPC batch".into(),
                ));
            }
            self.check_operation(who, &inbound)?;
            inbounds.push(inbound);
        }
        let caller = self.legacy_caller(parts, who, session)?;
        let mut streams = Vec::new();
        for inbound in inbounds {
            match inbound {
                Inbound::Request(request) => {
                    let accepted = Box::pin(self.engine.accept(&caller, request)).await?;
                    streams.push((accepted.stream, accepted.follow));
                }
                other => self.legacy_one_way(&caller, other).await?,
            }
        }
        if streams.is_empty() {
            return Ok(StatusCode::ACCEPTED.into_response());
        }
        if self.config.json_response {
            let mut answers = Vec::with_capacity(streams.len());
            for (stream, follow) in streams {
                answers.push(self.last_message(stream, follow).await?);
            }
            return Ok(axum::Json(Value::Array(answers)).into_response());
        }
        let tails = streams
            .into_iter()
            .map(|(stream, follow)| self.engine.tail(stream, 0, follow).boxed());
        let events = futures::stream::select_all(tails).boxed();
        let source = SseSource {
            events,
            priming: None,
            prefix: Vec::new(),
            cancel_on_drop: None,
            close_after: None,
            close_on: None,
            keep_session: None,
        };
        Ok(sse::response(
            &self.engine,
            source,
            self.config.keep_alive,
            &self.shutdown,
        ))
    }

    /// While other requests run on this worker, wait up to
    /// [`crate::HttpConfig::first_event_wait`] (never past `close_after`) for the first event
    /// after the priming one, so that a quick answer leaves with the response's head and
    /// priming event in one write; the events, that first one included, in order. A worker
    /// with nothing else to do writes the priming event at once: its CPU is free, and the
    /// early write wakes the client while the handler runs. Only when the event is ready does
    /// the response start: nothing is written earlier than it would be anyway, and nothing
    /// that is not committed (D1).
    async fn first_event_with_priming(
        &self,
        mut events: sse::Events,
        close_after: Option<std::time::Duration>,
    ) -> sse::Events {
        let wait = close_after.map_or(self.config.first_event_wait, |c| {
            c.min(self.config.first_event_wait)
        });
        // This request's own run counts as one.
        if wait.is_zero() || self.engine.in_flight() <= 1 {
            return events;
        }
        match tokio::time::timeout(wait, events.next()).await {
            Ok(Some(first)) => futures::stream::once(std::future::ready(first))
                .chain(events)
                .boxed(),
            // Ended without an event: polling it again is not allowed.
            Ok(None) => futures::stream::empty().boxed(),
            Err(_) => events,
        }
    }

    pub(crate) async fn legacy_session(
        &self,
        headers: &HeaderMap,
        principal: &Principal,
    ) -> Result<SessionRecord, Rejection> {
        let Some(id) = headers::single(headers, SESSION_ID)? else {
            return Err(Rejection::SessionRequired);
        };
        Ok(self.engine.session(principal, &id).await?)
    }

    async fn post_modern(
        &self,
        parts: &Parts,
        header_version: Option<McpVersion>,
        inbound: Inbound,
        who: &Authenticated,
    ) -> Result<Response, Rejection> {
        let headers = &parts.headers;
        let request = match inbound {
            Inbound::Request(request) => request,
            Inbound::Notification { .. } => return Ok(StatusCode::ACCEPTED.into_response()),
            Inbound::Response { .. } => {
                return Err(Rejection::InvalidRequest {
                    message: "a stateless server does not accept JSON-RPC responses".into(),
                    id: None,
                });
            }
        };
        let id = request.id().clone();
        let method = request.method();
        let meta = request.meta();
        let meta_version = meta
            .and_then(|m| m.get(META_VERSION))
            .and_then(Value::as_str);
        match (&header_version, meta_version) {
            (None, Some(_)) => {
                return Err(Rejection::HeaderMismatch {
                    message: "required header MCP-Protocol-Version is missing".into(),
                    id: Some(id),
                });
            }
            (Some(h), Some(m)) if h.as_str() != m => {
                return Err(Rejection::HeaderMismatch {
                    message: format!(
                        "MCP-Protocol-Version header value '{h}' does not match _meta protocolVersion '{m}'"
                    ),
                    id: Some(id),
                });
            }
            _ => {}
        }
        let capabilities_ok = meta
            .and_then(|m| m.get(META_CAPABILITIES))
            .is_some_and(Value::is_object);
        if meta_version.is_none() || !capabilities_ok {
            let mut missing = Vec::new();
            if meta_version.is_none() {
                missing.push(META_VERSION);
            }
            if !capabilities_ok {
                missing.push(META_CAPABILITIES);
            }
            return Err(Rejection::MalformedMeta {
                message: format!(
                    "request _meta is missing or has malformed required fields: {}",
                    missing.join(", ")
                ),
                id: Some(id),
            });
        }
        // The `_meta` version equals the header's, which is known; checked again for the
        // type (and in case the header rule above changes).
        let version = match meta_version.map(str::parse::<McpVersion>) {
            Some(Ok(version)) => version,
            Some(Err(unknown)) => {
                return Err(Rejection::UnsupportedVersion {
                    requested: unknown.0,
                    supported: McpVersion::supported(),
                    id: Some(id),
                });
            }
            None => McpVersion::MODERN,
        };
        let params = request.params();
        let handler = self.engine.handler();
        headers::check_standard_headers(headers, &id, method.as_str(), params, |name| {
            handler.tool_input_schema(name)
        })?;
        let log_level = match meta.and_then(|m| m.get(META_LOG_LEVEL)) {
            None => None,
            Some(Value::String(level)) if LOG_LEVELS.contains(&level.as_str()) => {
                Some(level.clone())
            }
            Some(other) => {
                return Err(Rejection::MalformedMeta {
                    message: format!("invalid logLevel {other}"),
                    id: Some(id),
                });
            }
        };
        if matches!(method, Method::LoggingSetLevel | Method::Initialize) {
            return Err(Rejection::MethodNotFound {
                method: method.to_string(),
                id: Some(id),
            });
        }
        let caller = Caller {
            principal: who.principal.clone(),
            era: Era::Modern,
            session: None,
            protocol_version: version,
            log_level,
            auth: self.auth_info(who),
            trace: trace_context(headers),
            http: Some(Arc::new(parts.clone())),
        };
        let mut accepted = Box::pin(self.engine.accept(&caller, request)).await?;
        // The status must be known before an SSE stream opens: wait for the first event.
        let mut events = self
            .engine
            .tail(accepted.stream.clone(), 0, accepted.follow.take())
            .boxed();
        let guard = accepted.cancel.clone().map(|c| c.drop_guard());
        let Some(first) = events.next().await else {
            return Err(Rejection::Internal(
                "the request ended without a response".into(),
            ));
        };
        let first = first.map_err(|e| Rejection::from(durable_mcp_engine::EngineError::from(e)))?;
        let parsed: Value = serde_json::from_str(&first.data).unwrap_or(Value::Null);
        let terminal = parsed.get("result").is_some() || parsed.get("error").is_some();
        if terminal {
            if let Some(guard) = guard {
                guard.disarm();
            }
            let status = modern_status(&parsed);
            return Ok((status, axum::Json(parsed)).into_response());
        }
        if let Some(guard) = guard {
            guard.disarm();
        }
        let source = SseSource {
            // The same tail goes on after the first event.
            events,
            priming: None,
            prefix: vec![sse::frame(&first)],
            cancel_on_drop: accepted.cancel,
            close_after: None,
            close_on: None,
            keep_session: None,
        };
        Ok(sse::response(
            &self.engine,
            source,
            self.config.keep_alive,
            &self.shutdown,
        ))
    }

    async fn json_outcome(
        &self,
        stream: durable_mcp_store::StreamId,
        follow: Option<durable_mcp_engine::Follow>,
    ) -> Result<Response, Rejection> {
        Ok(axum::Json(self.last_message(stream, follow).await?).into_response())
    }

    /// The last message of `stream` once it is finished (a request's answer).
    async fn last_message(
        &self,
        stream: durable_mcp_store::StreamId,
        follow: Option<durable_mcp_engine::Follow>,
    ) -> Result<Value, Rejection> {
        let mut events = self.engine.tail(stream, 0, follow).boxed();
        let mut last = None;
        while let Some(event) = events.next().await {
            let event =
                event.map_err(|e| Rejection::from(durable_mcp_engine::EngineError::from(e)))?;
            if !event.data.is_empty() {
                last = Some(event.data);
            }
        }
        Ok(last
            .and_then(|d| serde_json::from_str(&d).ok())
            .unwrap_or(Value::Null))
    }
}

/// Modern-era status of a terminal message: protocol-level errors get their 4xx.
fn modern_status(message: &Value) -> StatusCode {
    match message.pointer("/error/code").and_then(Value::as_i64) {
        Some(
            jsonrpc::code::HEADER_MISMATCH
            | jsonrpc::code::MISSING_CLIENT_CAPABILITY
            | jsonrpc::code::UNSUPPORTED_PROTOCOL_VERSION,
        ) => StatusCode::BAD_REQUEST,
        Some(jsonrpc::code::METHOD_NOT_FOUND) => StatusCode::NOT_FOUND,
        _ => StatusCode::OK,
    }
}

/// The W3C trace context of the HTTP request (`traceparent`, `tracestate` headers), read
/// only with traces on; an invalid `traceparent` is ignored (with a DEBUG log). Several
/// `tracestate` fields are one list, joined in order (W3C trace context).
fn trace_context(headers: &HeaderMap) -> Option<durable_mcp_engine::traces::TraceContext> {
    if !durable_mcp_engine::traces::enabled() {
        return None;
    }
    let traceparent = headers.get("traceparent")?.to_str().ok()?;
    let states: Vec<&str> = headers
        .get_all("tracestate")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect();
    let tracestate = (!states.is_empty()).then(|| states.join(","));
    durable_mcp_engine::traces::TraceContext::parse(traceparent, tracestate.as_deref())
}
