//! The in-process client: JSON-RPC over the endpoint's router, in either era.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use base64::Engine as _;
use durable_mcp_protocol::{McpVersion, meta, methods};
use http::header::{ACCEPT, CONTENT_TYPE, HOST};
use http::{HeaderMap, HeaderName, HeaderValue, Method, Request, StatusCode};
use http_body_util::BodyExt;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};
use tokio::sync::watch;

use super::sse::Events;
use super::{DEFAULT_TIMEOUT, Endpoint, TestError};
use crate::rmcp::model::{CallToolResult, ErrorData, ListToolsResult};

/// `Mcp-Session-Id`.
const SESSION_ID: &str = "mcp-session-id";
/// `MCP-Protocol-Version`.
const PROTOCOL_VERSION: &str = "mcp-protocol-version";
/// `Last-Event-ID`.
const LAST_EVENT_ID: &str = "last-event-id";
/// `Mcp-Method` (2026-07-28).
const MCP_METHOD: &str = "mcp-method";
/// `Mcp-Name` (2026-07-28).
const MCP_NAME: &str = "mcp-name";
/// The `Accept` of a POST: both answers a server may choose.
const POST_ACCEPT: &str = "application/json, text/event-stream";

/// Which protocol era a [`TestClient`] speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Era {
    /// 2025-11-25: a session opened by `initialize`, then every request with
    /// `Mcp-Session-Id` and `MCP-Protocol-Version`; a stream that ends early is resumed
    /// with `Last-Event-ID`.
    Legacy,
    /// 2026-07-28: stateless requests, each with its protocol version, client info and
    /// capabilities in `_meta`, and the `MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name`
    /// and `Mcp-Param-*` headers.
    Modern,
}

impl Era {
    /// The protocol version this era's client sends (`"2025-11-25"`, `"2026-07-28"`).
    pub const fn protocol_version(self) -> &'static str {
        match self {
            Era::Legacy => McpVersion::LATEST_LEGACY.as_str(),
            Era::Modern => McpVersion::MODERN.as_str(),
        }
    }
}

/// A notification the server sent on a request's stream (progress, a log message, ...).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Notification {
    /// Its method (`notifications/progress`, `notifications/message`, ...).
    pub method: String,
    /// Its params (`Null` when it has none).
    pub params: Value,
}

/// A server's answer to one request, with the notifications its stream carried first.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Response<T = Value> {
    /// The HTTP status of the response that carried the answer (the first one, when a
    /// legacy stream was resumed).
    pub status: StatusCode,
    /// The JSON-RPC result, or its error.
    pub result: Result<T, ErrorData>,
    /// The notifications that came before the answer, in order.
    pub notifications: Vec<Notification>,
}

impl<T> Response<T> {
    /// The params of the notifications with this method, in order.
    pub fn notifications_of<'a>(&'a self, method: &'a str) -> impl Iterator<Item = &'a Value> + 'a {
        self.notifications
            .iter()
            .filter(move |n| n.method == method)
            .map(|n| &n.params)
    }
}

impl Response<Value> {
    /// The result decoded as `U` (the result type of `method`, named in the error).
    pub fn decode<U: DeserializeOwned>(self, method: &str) -> Result<Response<U>, TestError> {
        let result = match self.result {
            Ok(value) => Ok(
                serde_json::from_value(value).map_err(|source| TestError::Decode {
                    method: method.to_owned(),
                    source,
                })?,
            ),
            Err(error) => Err(error),
        };
        Ok(Response {
            status: self.status,
            result,
            notifications: self.notifications,
        })
    }
}

/// How a client reaches the server's current worker.
#[derive(Clone)]
pub(super) struct Link {
    pub(super) endpoint: watch::Receiver<Endpoint>,
    pub(super) path: String,
}

impl Link {
    /// The current worker's router, waiting through a restart.
    async fn router(&self) -> Result<Router, TestError> {
        let mut endpoint = self.endpoint.clone();
        let current = endpoint
            .wait_for(|e| !matches!(e, Endpoint::Restarting))
            .await
            .map_err(|_| TestError::Stopped)?;
        match &*current {
            Endpoint::Up(router) => Ok(router.clone()),
            Endpoint::Restarting | Endpoint::Down => Err(TestError::Stopped),
        }
    }

    /// One HTTP exchange with the current worker.
    async fn send(
        &self,
        method: Method,
        headers: HeaderMap,
        body: Option<String>,
    ) -> Result<http::Response<Body>, TestError> {
        let mut router = self.router().await?;
        let mut request = Request::builder()
            .method(method)
            .uri(&self.path)
            .body(body.map_or_else(Body::empty, Body::from))
            .map_err(TestError::Request)?;
        *request.headers_mut() = headers;
        let ready: Result<(), Infallible> = std::future::poll_fn(|cx| {
            tower_service::Service::<Request<Body>>::poll_ready(&mut router, cx)
        })
        .await;
        let Ok(()) = ready;
        let response: Result<_, Infallible> =
            tower_service::Service::call(&mut router, request).await;
        let Ok(response) = response;
        Ok(response)
    }
}

/// Options of a client, from [`TestServer::client`](super::TestServer::client).
#[must_use = "a builder does nothing until `legacy` or `modern`"]
pub struct ClientBuilder {
    link: Link,
    headers: HeaderMap,
    capabilities: Value,
    timeout: Duration,
}

impl ClientBuilder {
    pub(super) fn new(link: Link) -> Self {
        let mut headers = HeaderMap::new();
        headers.insert(HOST, HeaderValue::from_static("localhost"));
        Self {
            link,
            headers,
            capabilities: json!({}),
            timeout: DEFAULT_TIMEOUT,
        }
    }

    /// Send this header with every request (`Authorization`, another `Host`, ...);
    /// it replaces a header of the same name the client would send.
    pub fn header(mut self, name: HeaderName, value: HeaderValue) -> Self {
        self.headers.insert(name, value);
        self
    }

    /// The client's capabilities (default `{}`): in `initialize` (legacy), or in every
    /// request's `_meta` (modern).
    pub fn capabilities(mut self, capabilities: Value) -> Self {
        self.capabilities = capabilities;
        self
    }

    /// How long to wait for each answer (default [`DEFAULT_TIMEOUT`]).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// A 2025-11-25 client, its session initialized (`initialize`, then
    /// `notifications/initialized`).
    pub async fn legacy(self) -> Result<TestClient, TestError> {
        let mut client = self.build(Era::Legacy);
        let params = json!({
            "protocolVersion": Era::Legacy.protocol_version(),
            "capabilities": client.capabilities,
            "clientInfo": client_info(),
        });
        let body =
            json!({"jsonrpc": "2.0", "id": 0, "method": methods::INITIALIZE, "params": params});
        let mut headers = client.headers.clone();
        headers.insert(ACCEPT, HeaderValue::from_static(POST_ACCEPT));
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        let (response, session) = client.within(client.round_trip(0, headers, body)).await?;
        let result = response.result.map_err(TestError::Rpc)?;
        let session = session.ok_or_else(|| {
            TestError::Protocol("initialize answered without an Mcp-Session-Id".into())
        })?;
        tracing::debug!(%session, "test client initialized");
        client.session = Some(
            HeaderValue::from_str(&session)
                .map_err(|_| TestError::Protocol(format!("invalid Mcp-Session-Id {session:?}")))?,
        );
        client.initialize = Some(result);
        client
            .notify("notifications/initialized", Value::Null)
            .await?;
        Ok(client)
    }

    /// A 2026-07-28 client.
    pub fn modern(self) -> TestClient {
        self.build(Era::Modern)
    }

    fn build(self, era: Era) -> TestClient {
        TestClient {
            link: self.link,
            era,
            headers: self.headers,
            capabilities: self.capabilities,
            timeout: self.timeout,
            session: None,
            initialize: None,
            next_id: AtomicU64::new(1),
            log_level: Mutex::new(None),
            tool_schemas: tokio::sync::Mutex::new(None),
        }
    }
}

/// The `clientInfo` a test client sends.
fn client_info() -> Value {
    json!({"name": "durable-mcp-test-client", "version": env!("CARGO_PKG_VERSION")})
}

/// A client of a [`TestServer`](super::TestServer), in one protocol era: each method sends
/// one request to the server's current worker and returns its answer with the
/// notifications its stream carried.
///
/// Every request gets a `progressToken` (its id) in `_meta` unless it has one, so that
/// progress is reported. A server's request to the client (elicitation, sampling) fails
/// the exchange with [`TestError::ServerRequest`]. Methods take `&self`: requests may run
/// concurrently.
///
/// ```
/// # use durable_mcp::rmcp::{self, ServerHandler, tool, tool_handler, tool_router};
/// # #[derive(Clone)]
/// # struct Hello;
/// # #[tool_router]
/// # impl Hello {
/// #     #[tool(description = "Say hello")]
/// #     async fn hello(&self) -> String { "Hello".to_owned() }
/// # }
/// # #[tool_handler]
/// # impl ServerHandler for Hello {}
/// use durable_mcp::testing::TestServer;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let server = TestServer::start(durable_mcp::DurableMcp::new(Hello)).await?;
/// for client in [server.client_legacy().await?, server.client_modern()] {
///     let tools = client.list_tools().await?.result?;
///     assert_eq!(tools.tools[0].name, "hello");
///     let response = client.call_tool("hello", serde_json::json!({})).await?;
///     assert!(response.notifications.is_empty());
///     assert_eq!(response.result?.content[0].as_text().map(|t| t.text.as_str()), Some("Hello"));
/// }
/// # Ok(()) }
/// ```
pub struct TestClient {
    link: Link,
    era: Era,
    headers: HeaderMap,
    capabilities: Value,
    timeout: Duration,
    /// The legacy session.
    session: Option<HeaderValue>,
    /// The legacy `initialize` result.
    initialize: Option<Value>,
    next_id: AtomicU64,
    /// The modern era's per-request log level.
    log_level: Mutex<Option<String>>,
    /// The input schemas of the tools, by name, read once for `Mcp-Param-*` (modern).
    tool_schemas: tokio::sync::Mutex<Option<HashMap<String, Value>>>,
}

impl std::fmt::Debug for TestClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestClient")
            .field("era", &self.era)
            .field("session", &self.session_id())
            .finish_non_exhaustive()
    }
}

impl TestClient {
    /// The era this client speaks.
    pub fn era(&self) -> Era {
        self.era
    }

    /// The legacy session's id (`None` for a modern client).
    pub fn session_id(&self) -> Option<&str> {
        self.session.as_ref().and_then(|s| s.to_str().ok())
    }

    /// The legacy `initialize` result (`None` for a modern client).
    pub fn initialize_result(&self) -> Option<&Value> {
        self.initialize.as_ref()
    }

    /// Call tool `name` with `arguments` (a JSON object, or `Null` for none).
    pub async fn call_tool(
        &self,
        name: &str,
        arguments: Value,
    ) -> Result<Response<CallToolResult>, TestError> {
        let mut params = json!({"name": name});
        match arguments {
            Value::Null => {}
            Value::Object(_) => params["arguments"] = arguments,
            _ => return Err(TestError::NotAnObject("a tool's arguments")),
        }
        self.request(methods::TOOLS_CALL, params)
            .await?
            .decode(methods::TOOLS_CALL)
    }

    /// The first page of the server's tools (`request("tools/list", json!({"cursor": ..}))`
    /// for the next ones).
    pub async fn list_tools(&self) -> Result<Response<ListToolsResult>, TestError> {
        self.request(methods::TOOLS_LIST, json!({}))
            .await?
            .decode(methods::TOOLS_LIST)
    }

    /// Send request `method` with `params` (a JSON object, or `Null`), and return its
    /// result or error as JSON.
    pub async fn request(&self, method: &str, params: Value) -> Result<Response, TestError> {
        let mut params = match params {
            Value::Null => Map::new(),
            Value::Object(params) => params,
            _ => return Err(TestError::NotAnObject("params")),
        };
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.add_meta(id, &mut params)?;
        self.within(async {
            let mut headers = self.post_headers();
            if self.era == Era::Modern {
                self.add_standard_headers(method, &params, &mut headers)
                    .await?;
            }
            let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
            Ok(self.round_trip(id, headers, body).await?.0)
        })
        .await
    }

    /// Send notification `method` with `params` (`Null` for none); the server accepts it
    /// with 202.
    pub async fn notify(&self, method: &str, params: Value) -> Result<(), TestError> {
        let mut body = json!({"jsonrpc": "2.0", "method": method});
        if !params.is_null() {
            body["params"] = params;
        }
        let mut headers = self.post_headers();
        if self.era == Era::Modern {
            headers.insert(MCP_METHOD, header_value(method)?);
        }
        let response = self
            .within(
                self.link
                    .send(Method::POST, headers, Some(body.to_string())),
            )
            .await?;
        match response.status() {
            StatusCode::ACCEPTED | StatusCode::OK => Ok(()),
            status => Err(TestError::Http {
                status,
                body: self.within(text(response.into_body())).await?,
            }),
        }
    }

    /// Ask for log messages at `level` and above (`"debug"`, `"info"`, ...):
    /// `logging/setLevel` for the legacy session; in every later request's `_meta` for a
    /// modern client.
    pub async fn set_log_level(&self, level: &str) -> Result<(), TestError> {
        match self.era {
            Era::Legacy => self
                .request(methods::LOGGING_SET_LEVEL, json!({"level": level}))
                .await?
                .result
                .map(drop)
                .map_err(TestError::Rpc),
            Era::Modern => {
                *self
                    .log_level
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(level.to_owned());
                Ok(())
            }
        }
    }

    /// End the legacy session (`DELETE`); nothing for a modern client.
    pub async fn close(self) -> Result<(), TestError> {
        if self.era == Era::Modern {
            return Ok(());
        }
        let response = self
            .within(self.link.send(Method::DELETE, self.post_headers(), None))
            .await?;
        match response.status() {
            status if status.is_success() => Ok(()),
            status => Err(TestError::Http {
                status,
                body: self.within(text(response.into_body())).await?,
            }),
        }
    }

    /// `future`, or [`TestError::Timeout`] after the client's timeout.
    async fn within<T>(
        &self,
        future: impl Future<Output = Result<T, TestError>>,
    ) -> Result<T, TestError> {
        tokio::time::timeout(self.timeout, future)
            .await
            .unwrap_or(Err(TestError::Timeout(self.timeout)))
    }

    /// The headers of every request after `initialize`.
    fn post_headers(&self) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(ACCEPT, HeaderValue::from_static(POST_ACCEPT));
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers.insert(
            PROTOCOL_VERSION,
            HeaderValue::from_static(self.era.protocol_version()),
        );
        if let Some(session) = &self.session {
            headers.insert(SESSION_ID, session.clone());
        }
        headers.extend(self.headers.clone());
        headers
    }

    /// The `_meta` of a request: its progress token, and the modern era's fields.
    fn add_meta(&self, id: u64, params: &mut Map<String, Value>) -> Result<(), TestError> {
        let meta = params.entry("_meta").or_insert_with(|| json!({}));
        let Value::Object(meta) = meta else {
            return Err(TestError::NotAnObject("params._meta"));
        };
        meta.entry("progressToken").or_insert_with(|| json!(id));
        if self.era == Era::Modern {
            meta.entry(meta::PROTOCOL_VERSION)
                .or_insert_with(|| json!(Era::Modern.protocol_version()));
            meta.entry(meta::CLIENT_CAPABILITIES)
                .or_insert_with(|| self.capabilities.clone());
            meta.entry(meta::CLIENT_INFO).or_insert_with(client_info);
            if let Some(level) = self
                .log_level
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .clone()
            {
                meta.entry(meta::LOG_LEVEL).or_insert(Value::String(level));
            }
        }
        Ok(())
    }

    /// 2026-07-28: `Mcp-Method`, `Mcp-Name`, and for a tool call the `Mcp-Param-*` headers
    /// its input schema asks for (`x-mcp-header`; the schemas are listed once).
    async fn add_standard_headers(
        &self,
        method: &str,
        params: &Map<String, Value>,
        headers: &mut HeaderMap,
    ) -> Result<(), TestError> {
        headers.insert(MCP_METHOD, header_value(method)?);
        let name = match method {
            methods::TOOLS_CALL | methods::PROMPTS_GET => params.get("name"),
            methods::RESOURCES_READ => params.get("uri"),
            methods::TASKS_GET | methods::TASKS_UPDATE | methods::TASKS_CANCEL => {
                params.get("taskId")
            }
            _ => None,
        };
        if let Some(name) = name.and_then(Value::as_str) {
            headers.insert(MCP_NAME, header_value(name)?);
        }
        if method == methods::TOOLS_CALL
            && let Some(tool) = params.get("name").and_then(Value::as_str)
        {
            let mut schemas = self.tool_schemas.lock().await;
            if schemas.is_none() {
                *schemas = Some(self.list_schemas().await?);
            }
            let schema = schemas.as_ref().and_then(|s| s.get(tool));
            if let Some(schema) = schema {
                let mut annotated = Vec::new();
                header_params(schema, &mut Vec::new(), &mut annotated);
                let arguments = params.get("arguments");
                for (header, path) in annotated {
                    let value = path
                        .iter()
                        .try_fold(arguments, |v, key| Some(v?.get(key)))
                        .flatten();
                    let text = match value {
                        Some(Value::String(s)) => s.clone(),
                        Some(Value::Bool(b)) => b.to_string(),
                        Some(Value::Number(n)) => n.to_string(),
                        _ => continue,
                    };
                    let Ok(name) =
                        HeaderName::try_from(format!("mcp-param-{}", header.to_ascii_lowercase()))
                    else {
                        continue;
                    };
                    headers.insert(name, header_value(&text)?);
                }
            }
        }
        Ok(())
    }

    /// Every tool's input schema, by name (all pages of `tools/list`).
    async fn list_schemas(&self) -> Result<HashMap<String, Value>, TestError> {
        let mut schemas = HashMap::new();
        let mut cursor: Option<String> = None;
        loop {
            let mut params = Map::new();
            if let Some(cursor) = cursor.take() {
                params.insert("cursor".into(), Value::String(cursor));
            }
            let id = self.next_id.fetch_add(1, Ordering::Relaxed);
            self.add_meta(id, &mut params)?;
            let mut headers = self.post_headers();
            headers.insert(MCP_METHOD, HeaderValue::from_static(methods::TOOLS_LIST));
            let body = json!({"jsonrpc": "2.0", "id": id, "method": methods::TOOLS_LIST, "params": params});
            let page = self
                .round_trip(id, headers, body)
                .await?
                .0
                .result
                .map_err(TestError::Rpc)?;
            for tool in page
                .get("tools")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                if let (Some(name), Some(schema)) = (
                    tool.get("name").and_then(Value::as_str),
                    tool.get("inputSchema"),
                ) {
                    schemas.insert(name.to_owned(), schema.clone());
                }
            }
            match page.get("nextCursor").and_then(Value::as_str) {
                Some(next) => cursor = Some(next.to_owned()),
                None => return Ok(schemas),
            }
        }
    }

    /// POST `body` (request `id`) and read its answer, resuming a legacy stream that ends
    /// before it; also returns the response's `Mcp-Session-Id`.
    async fn round_trip(
        &self,
        id: u64,
        headers: HeaderMap,
        body: Value,
    ) -> Result<(Response, Option<String>), TestError> {
        let response = self
            .link
            .send(Method::POST, headers, Some(body.to_string()))
            .await?;
        let status = response.status();
        let session = response
            .headers()
            .get(SESSION_ID)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        if !is_event_stream(response.headers()) {
            let text = text(response.into_body()).await?;
            let Ok(mut message) = serde_json::from_str::<Value>(&text) else {
                return Err(TestError::Http { status, body: text });
            };
            // A refusal before the request was read (403, 429, ...) may name no id.
            if message.get("id").is_none_or(Value::is_null) {
                let Some(error) = message.get_mut("error").map(Value::take) else {
                    return Err(TestError::Http { status, body: text });
                };
                let error = serde_json::from_value(error).map_err(TestError::Json)?;
                return Ok((
                    Response {
                        status,
                        result: Err(error),
                        notifications: Vec::new(),
                    },
                    session,
                ));
            }
            let answer = answer(id, message, &mut Vec::new())?
                .ok_or_else(|| TestError::Protocol(format!("no answer in {text}")))?;
            return Ok((
                Response {
                    status,
                    result: answer,
                    notifications: Vec::new(),
                },
                session,
            ));
        }
        let mut notifications = Vec::new();
        let mut last_event_id = None;
        let mut events = Events::new(response.into_body());
        loop {
            let mut progressed = false;
            while let Some(event) = events.next().await? {
                progressed = true;
                if event.id.is_some() {
                    last_event_id = event.id;
                }
                if event.data.is_empty() {
                    continue;
                }
                let message = serde_json::from_str(&event.data).map_err(TestError::Json)?;
                if let Some(result) = answer(id, message, &mut notifications)? {
                    return Ok((
                        Response {
                            status,
                            result,
                            notifications,
                        },
                        session,
                    ));
                }
            }
            // The stream ended before the answer: a legacy stream is resumed.
            let (Era::Legacy, Some(last)) = (self.era, &last_event_id) else {
                return Err(TestError::StreamEnded);
            };
            if !progressed {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            tracing::debug!(last_event_id = %last, "test client resuming a stream");
            events = Events::new(self.resume(last).await?);
        }
    }

    /// A GET resuming the session's stream after `last_event_id`; a worker shutting down
    /// (503) is tried again.
    async fn resume(&self, last_event_id: &str) -> Result<Body, TestError> {
        let mut headers = self.post_headers();
        headers.remove(CONTENT_TYPE);
        headers.insert(ACCEPT, HeaderValue::from_static("text/event-stream"));
        headers.insert(LAST_EVENT_ID, header_value(last_event_id)?);
        loop {
            let response = self.link.send(Method::GET, headers.clone(), None).await?;
            match response.status() {
                StatusCode::OK => return Ok(response.into_body()),
                StatusCode::SERVICE_UNAVAILABLE => {
                    tokio::time::sleep(Duration::from_millis(20)).await
                }
                status => {
                    return Err(TestError::Http {
                        status,
                        body: text(response.into_body()).await?,
                    });
                }
            }
        }
    }
}

/// Sort one message of request `id`'s response: a notification is pushed to
/// `notifications`; the answer is returned.
fn answer(
    id: u64,
    message: Value,
    notifications: &mut Vec<Notification>,
) -> Result<Option<Result<Value, ErrorData>>, TestError> {
    let Value::Object(mut message) = message else {
        return Err(TestError::Protocol(format!(
            "not a JSON-RPC message: {message}"
        )));
    };
    if let Some(method) = message.get("method").and_then(Value::as_str) {
        if message.contains_key("id") {
            return Err(TestError::ServerRequest {
                method: method.to_owned(),
            });
        }
        let method = method.to_owned();
        notifications.push(Notification {
            method,
            params: message.remove("params").unwrap_or(Value::Null),
        });
        return Ok(None);
    }
    if message.get("id") != Some(&json!(id)) {
        return Err(TestError::Protocol(format!(
            "an answer to another request: {}",
            Value::Object(message)
        )));
    }
    if let Some(error) = message.remove("error") {
        return Ok(Some(Err(
            serde_json::from_value(error).map_err(TestError::Json)?
        )));
    }
    match message.remove("result") {
        Some(result) => Ok(Some(Ok(result))),
        None => Err(TestError::Protocol(format!(
            "an answer without result or error: {}",
            Value::Object(message)
        ))),
    }
}

/// Whether a response is an SSE stream.
fn is_event_stream(headers: &HeaderMap) -> bool {
    headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"))
}

/// A body as text.
async fn text(body: Body) -> Result<String, TestError> {
    let bytes = body.collect().await.map_err(TestError::Body)?.to_bytes();
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// A header value for `text`: as is when it is visible ASCII, else the `=?base64?...?=`
/// sentinel of the 2026-07-28 standard headers.
fn header_value(text: &str) -> Result<HeaderValue, TestError> {
    let plain = !text.is_empty()
        && text.bytes().all(|b| b.is_ascii_graphic() || b == b' ')
        && text.trim() == text;
    let value = if plain {
        text.to_owned()
    } else {
        format!(
            "=?base64?{}?=",
            base64::engine::general_purpose::STANDARD.encode(text)
        )
    };
    HeaderValue::from_str(&value).map_err(|e| TestError::Request(e.into()))
}

/// The `x-mcp-header` annotations of a tool's input schema: (header name, argument path).
fn header_params(schema: &Value, path: &mut Vec<String>, out: &mut Vec<(String, Vec<String>)>) {
    if path.len() > 32 {
        return;
    }
    if let Some(name) = schema.get("x-mcp-header").and_then(Value::as_str) {
        out.push((name.to_owned(), path.clone()));
    }
    for (key, sub) in schema
        .get("properties")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        path.push(key.clone());
        header_params(sub, path, out);
        path.pop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_values_outside_visible_ascii_use_the_base64_sentinel() {
        assert_eq!(
            header_value("echo").ok(),
            Some(HeaderValue::from_static("echo"))
        );
        assert_eq!(
            header_value("Hello, 世界").ok(),
            Some(HeaderValue::from_static("=?base64?SGVsbG8sIOS4lueVjA==?="))
        );
        assert_eq!(
            header_value(" padded").ok(),
            Some(HeaderValue::from_static("=?base64?IHBhZGRlZA==?="))
        );
    }

    #[test]
    fn messages_are_sorted_into_notifications_and_the_answer() {
        let mut notifications = Vec::new();
        let progress = json!({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progress": 1}});
        assert!(matches!(answer(7, progress, &mut notifications), Ok(None)));
        assert_eq!(
            notifications,
            vec![Notification {
                method: "notifications/progress".into(),
                params: json!({"progress": 1})
            }]
        );
        assert!(matches!(
            answer(
                7,
                json!({"jsonrpc": "2.0", "id": 7, "result": {}}),
                &mut notifications
            ),
            Ok(Some(Ok(_)))
        ));
        let error = json!({"jsonrpc": "2.0", "id": 7, "error": {"code": -32601, "message": "no"}});
        assert!(
            matches!(answer(7, error, &mut notifications), Ok(Some(Err(e))) if e.code.0 == -32601)
        );
        let request =
            json!({"jsonrpc": "2.0", "id": 1, "method": "elicitation/create", "params": {}});
        assert!(
            matches!(answer(7, request, &mut notifications), Err(TestError::ServerRequest { method }) if method == "elicitation/create")
        );
        assert!(matches!(
            answer(
                7,
                json!({"jsonrpc": "2.0", "id": 8, "result": {}}),
                &mut notifications
            ),
            Err(TestError::Protocol(_))
        ));
        assert!(matches!(
            answer(7, json!([1]), &mut notifications),
            Err(TestError::Protocol(_))
        ));
    }
}
