//! Shared test support: a small rmcp handler and an in-process HTTP client for the router.
#![allow(dead_code, missing_docs, clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use durable_mcp_engine::{Engine, EngineOptions};
use durable_mcp_handler::McpHandler;
use durable_mcp_handler::rmcp::{
    self, ErrorData, RoleServer, ServerHandler,
    handler::server::{router::tool::ToolRouter, wrapper::Parameters},
    model::*,
    service::RequestContext,
    tool, tool_handler, tool_router,
};
use durable_mcp_http::{HttpConfig, Transport};
use durable_mcp_store::Store;
use durable_mcp_store_memory::MemoryStore;
use futures::StreamExt;
use http::{HeaderMap, Request, StatusCode};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tower::ServiceExt;

#[derive(Clone)]
pub struct TestServer {
    tool_router: ToolRouter<Self>,
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
pub struct EchoArgs {
    pub text: String,
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
pub struct SlowArgs {
    pub ms: u64,
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
pub struct TagArgs {
    pub tag: String,
}

/// The idempotency keys the `stepped` tool's step body ran with, by the call's tag.
static STEP_RUNS: std::sync::Mutex<Vec<(String, String)>> = std::sync::Mutex::new(Vec::new());

/// The idempotency keys `stepped` ran its step with for `tag`, in order.
pub fn step_runs(tag: &str) -> Vec<String> {
    STEP_RUNS
        .lock()
        .unwrap()
        .iter()
        .filter(|(t, _)| t == tag)
        .map(|(_, key)| key.clone())
        .collect()
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
pub struct CountArgs {
    pub count: u32,
}

#[tool_router]
impl TestServer {
    pub fn new() -> Self {
        Self {
            tool_router: Self::tool_router(),
        }
    }

    #[tool(description = "Echo text back")]
    async fn echo(&self, Parameters(args): Parameters<EchoArgs>) -> String {
        args.text
    }

    #[tool(description = "One durable step, its body's runs recorded by tag; returns its result")]
    async fn stepped(
        &self,
        Parameters(args): Parameters<TagArgs>,
        rmcp::handler::server::tool::Extension(durable): rmcp::handler::server::tool::Extension<
            durable_mcp_handler::Durable,
        >,
    ) -> Result<CallToolResult, ErrorData> {
        let tag = args.tag;
        let result: Result<String, String> = durable
            .step("one", |key| async move {
                let key = key.idempotency_key().to_string();
                STEP_RUNS.lock().unwrap().push((tag, key.clone()));
                Ok(key)
            })
            .await?;
        let key = result.map_err(|e| ErrorData::internal_error(e, None))?;
        Ok(CallToolResult::success(vec![ContentBlock::text(format!(
            "stepped {key}"
        ))]))
    }

    #[tool(description = "Sleep, honouring cancellation")]
    async fn slow(
        &self,
        Parameters(args): Parameters<SlowArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        tokio::select! {
            () = tokio::time::sleep(Duration::from_millis(args.ms)) => Ok(CallToolResult::success(vec![ContentBlock::text("done")])),
            () = ctx.ct.cancelled() => Err(ErrorData::internal_error("cancelled", None)),
        }
    }

    #[tool(description = "Send progress and log messages, then return the count")]
    #[allow(deprecated)]
    async fn chatty(
        &self,
        Parameters(args): Parameters<CountArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        for i in 0..args.count {
            if let Some(token) = ctx.meta.get_progress_token() {
                let _ = ctx
                    .peer
                    .notify_progress(ProgressNotificationParam::new(token, f64::from(i + 1)))
                    .await;
            }
            let _ = ctx
                .peer
                .notify_logging_message(LoggingMessageNotificationParam::new(
                    LoggingLevel::Info,
                    json!(format!("step {i}")),
                ))
                .await;
        }
        Ok(CallToolResult::success(vec![ContentBlock::text(
            args.count.to_string(),
        )]))
    }

    #[tool(description = "Ask the user a question (elicitation) and return the answer")]
    async fn ask(&self, ctx: RequestContext<RoleServer>) -> Result<CallToolResult, ErrorData> {
        let schema = ElicitationSchema::builder()
            .required_string("answer")
            .build()
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        let result = ctx
            .peer
            .create_elicitation(ElicitRequestParams::FormElicitationParams {
                meta: None,
                message: "question?".into(),
                requested_schema: schema,
            })
            .await
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        let answer = result
            .content
            .and_then(|c| c.get("answer").cloned())
            .unwrap_or(Value::Null);
        Ok(CallToolResult::success(vec![ContentBlock::text(
            answer.to_string(),
        )]))
    }

    #[tool(description = "Send notifications/resources/updated for a URI")]
    async fn touch(
        &self,
        Parameters(args): Parameters<EchoArgs>,
        ctx: RequestContext<RoleServer>,
    ) -> String {
        let _ = ctx
            .peer
            .notify_resource_updated(ResourceUpdatedNotificationParam::new(args.text))
            .await;
        "touched".into()
    }

    #[tool(description = "Announce a tool list change")]
    async fn change(&self, ctx: RequestContext<RoleServer>) -> String {
        let _ = ctx.peer.notify_tool_list_changed().await;
        "changed".into()
    }
}

#[tool_handler]
impl ServerHandler for TestServer {
    #[allow(deprecated)]
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .enable_logging()
                .build(),
        )
        .with_server_info(Implementation::new("test-server", "1.0.0"))
    }
}

pub struct Harness {
    pub router: Router,
    pub transport: Transport,
    pub store: Arc<dyn Store>,
    pub engine: Engine,
}

pub fn harness_with(config: HttpConfig) -> Harness {
    harness_full(config, EngineOptions::default())
}

pub fn harness_full(config: HttpConfig, options: EngineOptions) -> Harness {
    harness_on(Arc::new(MemoryStore::new()), config, options)
}

/// A worker on `store` (several harnesses on one store are several workers).
pub fn harness_on(store: Arc<dyn Store>, config: HttpConfig, options: EngineOptions) -> Harness {
    let engine = Engine::new(store.clone(), McpHandler::new(TestServer::new()), options);
    let transport = Transport::new(engine.clone(), config);
    let router = transport.clone().router();
    Harness {
        router,
        transport,
        store,
        engine,
    }
}

pub fn harness() -> Harness {
    harness_with(HttpConfig::default())
}

/// Wait until `condition` holds, checking every 10 ms, for at most 10 s; panics naming
/// `what` if it never does.
pub async fn eventually(what: &str, mut condition: impl AsyncFnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !condition().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "never happened within 10 s: {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Body,
}

impl Reply {
    pub async fn text(self) -> String {
        let bytes = tokio::time::timeout(
            Duration::from_secs(10),
            axum::body::to_bytes(self.body, usize::MAX),
        )
        .await
        .expect("body within 10s")
        .expect("body");
        String::from_utf8(bytes.to_vec()).expect("utf-8")
    }

    pub async fn json(self) -> Value {
        serde_json::from_str(&self.text().await).expect("json body")
    }

    /// SSE events (id, data) until the stream ends.
    pub async fn events(self) -> Vec<(Option<String>, String)> {
        parse_sse(&self.text().await)
    }

    /// The first `n` SSE events, leaving the connection open (then dropped).
    pub async fn first_events(self, n: usize) -> Vec<(Option<String>, String)> {
        let mut stream = self.body.into_data_stream();
        let mut text = String::new();
        while parse_sse(&text).len() < n {
            let chunk = tokio::time::timeout(Duration::from_secs(10), stream.next())
                .await
                .expect("event within 10s");
            match chunk {
                Some(Ok(bytes)) => text.push_str(std::str::from_utf8(&bytes).expect("utf-8")),
                _ => break,
            }
        }
        parse_sse(&text).into_iter().take(n).collect()
    }
}

pub fn parse_sse(text: &str) -> Vec<(Option<String>, String)> {
    let mut out = Vec::new();
    for block in text.split("\n\n") {
        if block.trim().is_empty() || block.lines().all(|l| l.starts_with(':')) {
            continue;
        }
        let mut id = None;
        let mut data = None;
        for line in block.lines() {
            if let Some(v) = line.strip_prefix("id: ") {
                id = Some(v.to_owned());
            } else if let Some(v) = line.strip_prefix("data:") {
                data = Some(v.trim_start().to_owned());
            }
        }
        if let Some(data) = data {
            out.push((id, data));
        }
    }
    out
}

pub async fn send(
    router: &Router,
    method: &str,
    headers: &[(&str, &str)],
    body: Option<String>,
) -> Reply {
    let mut builder = Request::builder()
        .method(method)
        .uri("/mcp")
        .header("host", "localhost");
    for (k, v) in headers {
        builder = builder.header(*k, *v);
    }
    let request = builder
        .body(body.map(Body::from).unwrap_or_else(Body::empty))
        .expect("request");
    let response = router.clone().oneshot(request).await.expect("infallible");
    let (parts, body) = response.into_parts();
    Reply {
        status: parts.status,
        headers: parts.headers,
        body,
    }
}

pub const POST_HEADERS: [(&str, &str); 2] = [
    ("accept", "application/json, text/event-stream"),
    ("content-type", "application/json"),
];

pub async fn post(router: &Router, session: Option<&str>, body: Value) -> Reply {
    let mut headers: Vec<(&str, &str)> = POST_HEADERS.to_vec();
    if let Some(s) = session {
        headers.push(("mcp-session-id", s));
    }
    send(router, "POST", &headers, Some(body.to_string())).await
}

/// Initialize a legacy session at `version`; returns the session id.
pub async fn initialize(router: &Router, version: &str) -> String {
    let reply = post(
        router,
        None,
        json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": version, "capabilities": {"elicitation": {}}, "clientInfo": {"name": "t", "version": "1"}}}),
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK);
    let id = reply
        .headers
        .get("mcp-session-id")
        .expect("session header")
        .to_str()
        .expect("ascii")
        .to_owned();
    let body = reply.json().await;
    assert_eq!(body["result"]["protocolVersion"], version);
    let ack = post(
        router,
        Some(&id),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    )
    .await;
    assert_eq!(ack.status, StatusCode::ACCEPTED);
    id
}

pub fn call(id: u64, tool: &str, args: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": tool, "arguments": args}})
}

/// The JSON messages of SSE events (priming and empty events left out).
pub fn messages(events: &[(Option<String>, String)]) -> Vec<Value> {
    events
        .iter()
        .filter(|(_, d)| !d.is_empty())
        .map(|(_, d)| serde_json::from_str(d).expect("json event"))
        .collect()
}

/// An SSE response read incrementally, its text kept.
pub struct Live {
    stream: axum::body::BodyDataStream,
    pub text: String,
    pub ended: bool,
}

impl Live {
    pub fn new(reply: Reply) -> Self {
        assert_eq!(reply.status, StatusCode::OK);
        Self {
            stream: reply.body.into_data_stream(),
            text: String::new(),
            ended: false,
        }
    }

    /// Read until `done(self)` holds or the stream ends (10 s deadline).
    pub async fn until(&mut self, done: impl Fn(&Live) -> bool) -> &mut Self {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while !done(self) && !self.ended {
            match tokio::time::timeout_at(deadline, self.stream.next())
                .await
                .expect("condition within 10s")
            {
                Some(Ok(bytes)) => self
                    .text
                    .push_str(std::str::from_utf8(&bytes).expect("utf-8")),
                _ => self.ended = true,
            }
        }
        self
    }

    pub fn events(&self) -> Vec<(Option<String>, String)> {
        parse_sse(&self.text)
    }

    pub fn messages(&self) -> Vec<Value> {
        messages(&self.events())
    }

    /// Messages with this method.
    pub fn count(&self, method: &str) -> usize {
        self.messages()
            .iter()
            .filter(|m| m["method"] == method)
            .count()
    }

    pub fn keep_alives(&self) -> usize {
        self.text.matches(": keep-alive").count()
    }
}

/// A GET on the session's standalone stream (optionally resuming), read incrementally.
pub async fn open_get(router: &Router, session: &str, last_event_id: Option<&str>) -> Live {
    let mut headers = vec![("accept", "text/event-stream"), ("mcp-session-id", session)];
    if let Some(id) = last_event_id {
        headers.push(("last-event-id", id));
    }
    Live::new(send(router, "GET", &headers, None).await)
}

/// One POST over a raw keep-alive connection: (response head, body).
pub async fn round_trip(
    conn: &mut BufReader<tokio::net::TcpStream>,
    body: &str,
    session: Option<&str>,
) -> (String, String) {
    let session_header = session
        .map(|s| format!("mcp-session-id: {s}\r\n"))
        .unwrap_or_default();
    let request = format!(
        "POST /mcp HTTP/1.1\r\nhost: localhost\r\naccept: application/json, text/event-stream\r\ncontent-type: application/json\r\n{session_header}content-length: {}\r\n\r\n{body}",
        body.len()
    );
    conn.get_mut().write_all(request.as_bytes()).await.unwrap();
    let mut headers = String::new();
    let mut chunked = false;
    let mut length = None;
    loop {
        let mut line = String::new();
        conn.read_line(&mut line).await.unwrap();
        if line == "\r\n" {
            break;
        }
        let lower = line.to_ascii_lowercase();
        if lower.starts_with("transfer-encoding: chunked") {
            chunked = true;
        }
        if let Some(v) = lower.strip_prefix("content-length: ") {
            length = Some(v.trim().parse::<usize>().unwrap());
        }
        headers.push_str(&line);
    }
    let mut body = Vec::new();
    if chunked {
        loop {
            let mut size = String::new();
            conn.read_line(&mut size).await.unwrap();
            let n = usize::from_str_radix(size.trim(), 16).unwrap();
            let mut chunk = vec![0; n + 2];
            conn.read_exact(&mut chunk).await.unwrap();
            if n == 0 {
                break;
            }
            body.extend_from_slice(&chunk[..n]);
        }
    } else if let Some(n) = length {
        body.resize(n, 0);
        conn.read_exact(&mut body).await.unwrap();
    }
    (headers, String::from_utf8(body).unwrap())
}
