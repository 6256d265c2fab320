//! A server that forwards every request to another MCP server (an *upstream*) as JSON:
//! the rmcp side of `durable-mcp proxy`.
//!
//! [`Forward`] is an rmcp `ServerHandler`, so the engine serves it as it serves any handler
//! (sessions, streams, both eras, the journal, recovery). Each request it gets is handed to
//! an [`Upstream`] as plain JSON, with what the upstream needs to route it (the session,
//! the session's stored `initialize` params, the attempt of a journaled request), and the
//! upstream's notifications for that request (progress, log messages) are sent to the
//! client through the request's rmcp peer: the engine commits them before any client sees
//! them (D1). The upstream side (`durable-mcp-proxy`) needs no rmcp at all.

use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CompleteRequestParams, CompleteResult,
    CustomRequest, CustomResult, ErrorCode, GetPromptRequestParams, GetPromptResponse,
    GetPromptResult, ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult,
    ListToolsResult, PaginatedRequestParams, ReadResourceRequestParams, ReadResourceResponse,
    ReadResourceResult, ServerConfig, ServerNotification, SubscribeRequestParams,
    SubscriptionFilter, Tool, UnsubscribeRequestParams,
};
use rmcp::service::{NotificationContext, RequestContext, SubscriptionContext};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::context::BoxFuture;

/// The prefix of the `_meta` keys of the 2026-07-28 per-request lifecycle (protocol
/// version, client info and capabilities, log level): the proxy's own business with its
/// client, never forwarded to an upstream that speaks a session-era version.
const LIFECYCLE_META_PREFIX: &str = "io.modelcontextprotocol/";

/// One request for the upstream.
#[derive(Debug)]
pub struct UpstreamRequest {
    /// Its method (`tools/call`, `resources/read`, ...).
    pub method: String,
    /// Its params as the client sent them (`_meta` with the progress token included), less
    /// the 2026-07-28 lifecycle keys.
    pub params: Option<Value>,
    /// The legacy session it belongs to; `None` for a 2026-07-28 (stateless) request.
    pub session: Option<String>,
    /// The session's `initialize` params as stored (legacy era).
    pub client: Option<Value>,
    /// The attempt of a journaled request: 1 the first time, more when the engine runs it
    /// again after the worker running it died (D7). 1 for requests that are not journaled.
    pub attempt: u32,
    /// Cancelled when the client cancels the request (or its session ends).
    pub cancel: CancellationToken,
    /// Where the upstream puts the notifications it sends for this request (whole JSON-RPC
    /// notification messages): they go to the client on the request's stream, in order,
    /// before the outcome.
    pub notifications: mpsc::UnboundedSender<Value>,
    /// Where the upstream's questions for this request go (`elicitation/create`,
    /// `sampling/createMessage`, `roots/list`): `None` for a request that is not journaled
    /// (a list, `ping`), which cannot ask.
    pub questions: Option<Questions>,
    /// Where the upstream sends what it reports outside this request (list changes,
    /// resource updates): bound to the request's caller and session. `None` when the
    /// request was not served by durable-mcp's engine.
    pub outbox: Option<crate::Outbox>,
}

/// The questions an upstream asks while it serves one journaled request, relayed to the
/// client through the request's durable context: asked once, their answers committed in
/// the journal before the upstream gets them (D9).
///
/// In plain words: when a request is sent again to an upstream (its process died, the
/// worker died, or a 2026-07-28 client retried with its answers) and the upstream asks the
/// same question again, it gets the answer the client already gave, and the client is not
/// asked twice. Stated more precisely: each question an upstream asks is compared, in the
/// order asked, with the questions committed for the request so far (its method and params,
/// without `_meta`); the first committed one at or after the place of the previous match
/// that is equal is the same question, and its committed answer (or, if it has none yet,
/// the client's answer when it comes) is the upstream's. A question equal to none is a new
/// one, committed at the end and asked. Call [`Questions::restart`] before each send.
///
/// How the client is asked is the engine's: on the request's stream (2025 sessions, the
/// client POSTs its response), as the task's `inputRequests` (2026-07-28 task), or as an
/// `input_required` result (2026-07-28 without a task: the request ends, see
/// [`Questions::suspended`], and the client's retry carries the answers).
#[derive(Clone)]
pub struct Questions(Arc<QuestionsInner>);

struct QuestionsInner {
    durable: crate::Durable,
    /// The capabilities the client declared (a question it cannot answer is refused).
    capabilities: Value,
    /// The place of the last committed question matched in the current send.
    place: tokio::sync::Mutex<u64>,
    /// Fired when the client must answer before the request can go on (2026-07-28, no task).
    suspended: CancellationToken,
}

impl std::fmt::Debug for Questions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Questions")
            .field("durable", &self.0.durable)
            .finish_non_exhaustive()
    }
}

/// How many committed questions of one request a question is compared with at most.
const MAX_QUESTIONS: u64 = 1_000;

/// The client capability a question needs, by method; `None`: not a question relayed.
fn needed_capability(method: &str) -> Option<&'static str> {
    match method {
        "elicitation/create" => Some("elicitation"),
        "sampling/createMessage" => Some("sampling"),
        "roots/list" => Some("roots"),
        _ => None,
    }
}

/// A JSON-RPC response body (`{"error": ...}`) for an upstream's question.
fn refusal(code: i64, message: impl Into<String>) -> Value {
    serde_json::json!({"error": {"code": code, "message": message.into()}})
}

impl Questions {
    /// The questions of the request whose durable context is `durable`, for a client that
    /// declared `capabilities`.
    pub fn new(durable: crate::Durable, capabilities: Value) -> Self {
        Self(Arc::new(QuestionsInner {
            durable,
            capabilities,
            place: tokio::sync::Mutex::new(0),
            suspended: CancellationToken::new(),
        }))
    }

    /// A new send of the request begins (to a fresh process): its questions are matched
    /// from the first committed one again.
    pub async fn restart(&self) {
        *self.0.place.lock().await = 0;
    }

    /// Fired when a question must be answered by the client's retry (2026-07-28 without a
    /// task): the request ends `input_required` ([`DurableError::InputRequired`](crate::DurableError::InputRequired)).
    pub fn suspended(&self) -> CancellationToken {
        self.0.suspended.clone()
    }

    /// Ask `method` with `params` for the upstream: the body of the JSON-RPC response to
    /// give it (`{"result": ...}` or `{"error": ...}`), once the client's answer is
    /// committed (or at once, if it was before).
    pub async fn ask(&self, method: &str, params: Value) -> Value {
        let Some(capability) = needed_capability(method) else {
            return refusal(
                durable_mcp_protocol::jsonrpc::code::METHOD_NOT_FOUND,
                format!("durable-mcp proxy does not relay {method} to its clients"),
            );
        };
        if self.0.capabilities.get(capability).is_none() {
            let mut missing = refusal(
                durable_mcp_protocol::jsonrpc::code::MISSING_CLIENT_CAPABILITY,
                format!("the client did not declare the {capability} capability"),
            );
            missing["error"]["data"] =
                serde_json::json!({"requiredCapabilities": {capability: {}}});
            return missing;
        }
        let index = match self.place(method, &params).await {
            Ok(index) => index,
            Err(error) => return self.failed(method, error),
        };
        match self.0.durable.ask_at(index, method, params).await {
            Ok(response) => match (response.get("result"), response.get("error")) {
                (Some(result), _) => serde_json::json!({"result": result}),
                (None, Some(error)) => serde_json::json!({"error": error}),
                (None, None) => refusal(
                    durable_mcp_protocol::jsonrpc::code::INTERNAL_ERROR,
                    "the client's response had neither result nor error",
                ),
            },
            Err(error) => self.failed(method, error),
        }
    }

    /// The upstream's answer when asking failed.
    fn failed(&self, method: &str, error: crate::DurableError) -> Value {
        match error {
            crate::DurableError::InputRequired => {
                self.0.suspended.cancel();
                refusal(
                    REQUEST_CANCELLED,
                    "the request waits for the client's input (it will be sent again with the answer)",
                )
            }
            crate::DurableError::Cancelled => {
                refusal(REQUEST_CANCELLED, "the request was cancelled")
            }
            other => {
                tracing::warn!(error = %other, %method, "an upstream's question could not be relayed");
                refusal(
                    durable_mcp_protocol::jsonrpc::code::INTERNAL_ERROR,
                    format!("the question could not be relayed: {other}"),
                )
            }
        }
    }

    /// The index of the committed question `method` `params` is (committing it as a new
    /// one if it is equal to none after the current place), and the place moved there.
    async fn place(&self, method: &str, params: &Value) -> Result<u64, crate::DurableError> {
        let mut question = serde_json::json!({"method": method, "params": params});
        if let Some(params) = question.get_mut("params").and_then(Value::as_object_mut) {
            params.remove("_meta");
        }
        let mut place = self.0.place.lock().await;
        for index in *place + 1..=*place + MAX_QUESTIONS {
            let mine = question.clone();
            let committed: Value = self
                .0
                .durable
                .step(&format!("proxy:question:{index}"), |_| async move { mine })
                .await?;
            if committed == question {
                *place = index;
                return Ok(index);
            }
        }
        Err(crate::DurableError::Journal(
            format!("more than {MAX_QUESTIONS} questions in one request").into(),
        ))
    }
}

/// `notifications/cancelled`'s JSON-RPC code in answers to a question that will not be
/// answered (the request was cancelled, or goes on in a retry).
const REQUEST_CANCELLED: i64 = -32_800;

/// A JSON-RPC error the upstream answered with, or one made for it (the call was
/// interrupted, the upstream could not be started).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{message} ({code})")]
pub struct UpstreamError {
    /// The JSON-RPC error code.
    pub code: i64,
    /// The message.
    pub message: String,
    /// The error's data.
    pub data: Option<Value>,
}

/// The other MCP server: what [`Forward`] forwards to.
pub trait Upstream: Send + Sync + 'static {
    /// The upstream's `initialize` result (`protocolVersion`, `capabilities`,
    /// `serverInfo`, `instructions`), as the proxy's own.
    fn info(&self) -> Value;
    /// The upstream's tool `name` as it listed it, if it did.
    fn tool(&self, name: &str) -> Option<Value>;
    /// Forward one request; its result (the JSON-RPC `result`) or error.
    fn request(&self, request: UpstreamRequest)
    -> BoxFuture<'static, Result<Value, UpstreamError>>;
    /// A 2026-07-28 `subscriptions/listen` stream follows the resources `uris` while the
    /// returned guard lives: the upstream should report their updates through `outbox`'s
    /// [`announce`](crate::Outbox::announce). The default follows nothing.
    fn follow(&self, uris: Vec<String>, outbox: Option<crate::Outbox>) -> Box<dyn Send> {
        let _ = (uris, outbox);
        Box::new(())
    }
}

/// An rmcp server handler that forwards to an [`Upstream`].
#[derive(Clone)]
pub struct Forward {
    upstream: Arc<dyn Upstream>,
    info: Arc<ServerConfig>,
    /// The upstream declares tasks (`capabilities.tasks.requests.tools.call`): its tools'
    /// own task support is then meaningful, and mirrored (see [`offered`]).
    knows_tasks: bool,
}

impl std::fmt::Debug for Forward {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Forward")
            .field("server_info", &self.info.server_info)
            .finish_non_exhaustive()
    }
}

impl Forward {
    /// A handler forwarding to `upstream`. The upstream's `initialize` result is read once,
    /// here: a malformed one is an error. Its `tasks` capability is left out (upstream
    /// tasks are not forwarded: the engine holds tasks itself, for the tools `offered`
    /// says, and declares its own task capabilities).
    pub fn new(upstream: Arc<dyn Upstream>) -> Result<Self, serde_json::Error> {
        let mut info = upstream.info();
        let knows_tasks = info
            .pointer("/capabilities/tasks/requests/tools/call")
            .is_some();
        if let Some(capabilities) = info.get_mut("capabilities").and_then(Value::as_object_mut) {
            capabilities.remove("tasks");
        }
        let info: ServerConfig = serde_json::from_value(info)?;
        Ok(Self {
            upstream,
            info: Arc::new(info),
            knows_tasks,
        })
    }

    /// Forward `method` with `params`, sending the upstream's notifications for it to the
    /// client as they come, and read its result as `R`.
    async fn forward<P: Serialize, R: DeserializeOwned>(
        &self,
        method: &str,
        params: Option<P>,
        context: RequestContext<RoleServer>,
    ) -> Result<R, ErrorData> {
        let params = params
            .map(|p| serde_json::to_value(p))
            .transpose()
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        // A session-era upstream's result has no `resultType`, which a 2026-07-28 client must
        // get (see `complete`).
        let value = complete(self.forward_value(method, params, context).await?);
        serde_json::from_value(value).map_err(|e| {
            ErrorData::internal_error(
                format!("the upstream's {method} result does not parse: {e}"),
                None,
            )
        })
    }

    async fn forward_value(
        &self,
        method: &str,
        params: Option<Value>,
        context: RequestContext<RoleServer>,
    ) -> Result<Value, ErrorData> {
        let params = with_meta(params, &context.meta.0.0);
        let session = context
            .extensions
            .get::<crate::SessionState>()
            .and_then(|s| s.session_id().map(str::to_owned));
        let attempt = context
            .extensions
            .get::<crate::Durable>()
            .map_or(1, crate::Durable::attempt);
        let client = if session.is_some() {
            context
                .peer
                .peer_info()
                .and_then(|p| serde_json::to_value(&*p).ok())
        } else {
            None
        };
        // The client's capabilities: a session's from its `initialize`, a 2026-07-28
        // request's from its own `_meta`.
        let capabilities = match &client {
            Some(client) => client.get("capabilities").cloned(),
            None => context
                .meta
                .0
                .0
                .get(durable_mcp_protocol::meta::CLIENT_CAPABILITIES)
                .cloned(),
        };
        let questions = context
            .extensions
            .get::<crate::Durable>()
            .map(|durable| Questions::new(durable.clone(), capabilities.unwrap_or(Value::Null)));
        let suspended = questions
            .as_ref()
            .map_or_else(CancellationToken::new, Questions::suspended);
        // Cancelled with the client's request, or here when the request must wait for the
        // client's answers (the upstream is told; a retry sends it again).
        let cancel = context.ct.child_token();
        let (notifications, mut incoming) = mpsc::unbounded_channel();
        let outbox = context.extensions.get::<crate::Outbox>().cloned();
        let request = UpstreamRequest {
            method: method.to_owned(),
            params,
            session,
            client,
            attempt,
            cancel: cancel.clone(),
            notifications,
            questions,
            outbox,
        };
        // Sending to the upstream is the request's first effect: it is journaled first
        // (D6), so that a crash from here on re-runs it as another attempt, which the
        // upstream's re-send policy sees, rather than leaving a re-send to look new.
        if let Some(durable) = context.extensions.get::<crate::Durable>() {
            durable.journaled().await.map_err(ErrorData::from)?;
        }
        let outcome = self.upstream.request(request);
        tokio::pin!(outcome);
        let outcome = loop {
            tokio::select! {
                biased;
                Some(message) = incoming.recv() => send(&context, message).await,
                outcome = &mut outcome => break Some(outcome),
                () = suspended.cancelled() => {
                    cancel.cancel();
                    let _ = (&mut outcome).await;
                    break None;
                }
            }
        };
        // What the upstream sent before its outcome goes first.
        while let Ok(message) = incoming.try_recv() {
            send(&context, message).await;
        }
        let outcome = match outcome {
            Some(outcome) if !suspended.is_cancelled() => outcome,
            // 2026-07-28 without a task: the engine answers `input_required` with the
            // questions asked; the client's retry continues the run (and the upstream is
            // sent the request again: its questions are then answered from the retry).
            _ => return Err(crate::DurableError::InputRequired.into()),
        };
        outcome.map_err(|e| {
            ErrorData::new(
                ErrorCode(
                    i32::try_from(e.code)
                        .unwrap_or(durable_mcp_protocol::jsonrpc::code::INTERNAL_ERROR as i32),
                ),
                e.message,
                e.data,
            )
        })
    }
}

/// An upstream's tool as the proxy offers it, with the task support the engine gives it
/// (the engine holds the task; the upstream gets a plain `tools/call`: the proxy never
/// forwards a task to the upstream, so the tool's own `execution` is left out):
///
/// - an upstream that has never heard of tasks (no `tasks` capability): every tool is
///   `optional`, so a client that can use tasks gets one for any tool;
/// - an upstream that declares tasks (`knows_tasks`): its own statement is mirrored, a
///   tool without `execution.taskSupport` being `forbidden` (as in 2025-11-25), so a tool
///   it runs synchronously stays synchronous.
fn offered(mut tool: Value, knows_tasks: bool) -> Value {
    if let Some(tool) = tool.as_object_mut() {
        let own = tool.remove("execution").and_then(|e| {
            e.get("taskSupport")
                .and_then(Value::as_str)
                .map(str::to_owned)
        });
        let support = match (knows_tasks, own.as_deref()) {
            (false, _) | (true, Some("optional")) => crate::TaskSupport::Optional,
            (true, Some("required")) => crate::TaskSupport::Required,
            (true, _) => crate::TaskSupport::Forbidden,
        };
        let meta = tool
            .entry("_meta")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Some(meta) = meta.as_object_mut() {
            meta.insert(
                crate::tasks::TASK_SUPPORT_META.into(),
                Value::String(support.as_str().into()),
            );
        }
    }
    tool
}

/// An upstream's result with `resultType: "complete"` if it has none (an upstream speaking
/// a version before 2026-07-28 sends none; rmcp leaves it out again for legacy clients).
fn complete(mut result: Value) -> Value {
    if let Some(result) = result.as_object_mut() {
        result
            .entry("resultType")
            .or_insert_with(|| Value::String("complete".into()));
    }
    result
}

/// Send one upstream notification to the client; one rmcp cannot read is dropped (logged).
async fn send(context: &RequestContext<RoleServer>, message: Value) {
    match serde_json::from_value::<ServerNotification>(message) {
        Ok(notification) => {
            if let Err(error) = context.peer.send_notification(notification).await {
                tracing::debug!(%error, "a forwarded notification could not be sent");
            }
        }
        Err(error) => {
            tracing::debug!(%error, "dropping an upstream notification rmcp does not read")
        }
    }
}

/// `params` with the request's `_meta` back in place (rmcp takes it out into the request
/// context), less the 2026-07-28 lifecycle keys.
fn with_meta(params: Option<Value>, meta: &Map<String, Value>) -> Option<Value> {
    let kept: Map<String, Value> = meta
        .iter()
        .filter(|(k, _)| !k.starts_with(LIFECYCLE_META_PREFIX))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let mut params = match params {
        Some(Value::Object(params)) => params,
        Some(other) => return Some(other),
        None if kept.is_empty() => return None,
        None => Map::new(),
    };
    if let Some(Value::Object(own)) = params.get_mut("_meta") {
        own.retain(|k, _| !k.starts_with(LIFECYCLE_META_PREFIX));
    }
    if !kept.is_empty() {
        let target = params
            .entry("_meta")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(target) = target {
            for (k, v) in kept {
                target.entry(k).or_insert(v);
            }
        }
    }
    if params
        .get("_meta")
        .and_then(Value::as_object)
        .is_some_and(Map::is_empty)
    {
        params.remove("_meta");
    }
    Some(Value::Object(params))
}

impl ServerHandler for Forward {
    fn get_info(&self) -> ServerConfig {
        (*self.info).clone()
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.upstream
            .tool(name)
            .and_then(|tool| serde_json::from_value(offered(tool, self.knows_tasks)).ok())
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let result: CallToolResult = self
            .forward(
                durable_mcp_protocol::methods::TOOLS_CALL,
                Some(request),
                context,
            )
            .await?;
        Ok(result.into())
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let params = request
            .map(serde_json::to_value)
            .transpose()
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        let mut result = complete(
            self.forward_value(durable_mcp_protocol::methods::TOOLS_LIST, params, context)
                .await?,
        );
        if let Some(tools) = result.get_mut("tools").and_then(Value::as_array_mut) {
            for tool in tools {
                *tool = offered(std::mem::take(tool), self.knows_tasks);
            }
        }
        serde_json::from_value(result).map_err(|e| {
            ErrorData::internal_error(
                format!("the upstream's tools/list result does not parse: {e}"),
                None,
            )
        })
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        let result: GetPromptResult = self
            .forward(
                durable_mcp_protocol::methods::PROMPTS_GET,
                Some(request),
                context,
            )
            .await?;
        Ok(result.into())
    }

    async fn list_prompts(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        self.forward("prompts/list", request, context).await
    }

    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        self.forward("resources/list", request, context).await
    }

    async fn list_resource_templates(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        self.forward("resources/templates/list", request, context)
            .await
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let result: ReadResourceResult = self
            .forward(
                durable_mcp_protocol::methods::RESOURCES_READ,
                Some(request),
                context,
            )
            .await?;
        Ok(result.into())
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        self.forward(
            durable_mcp_protocol::methods::COMPLETION_COMPLETE,
            Some(request),
            context,
        )
        .await
    }

    #[allow(deprecated)]
    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let _: Value = self
            .forward(
                durable_mcp_protocol::methods::RESOURCES_SUBSCRIBE,
                Some(request),
                context,
            )
            .await?;
        Ok(())
    }

    #[allow(deprecated)]
    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let _: Value = self
            .forward(
                durable_mcp_protocol::methods::RESOURCES_UNSUBSCRIBE,
                Some(request),
                context,
            )
            .await?;
        Ok(())
    }

    /// Every kind the client asks for (rmcp keeps only those the upstream's capabilities
    /// declare): the proxy tells the listen streams of what the upstream reports.
    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        Some(requested.clone())
    }

    /// The engine delivers what the upstream reports (announced through the [`Outbox`](crate::Outbox))
    /// to the listen stream; the upstream follows the stream's resources while it is open.
    async fn listen(&self, context: SubscriptionContext) -> Result<(), ErrorData> {
        let uris = context
            .accepted()
            .resource_subscriptions
            .clone()
            .unwrap_or_default();
        let outbox = context
            .request_context()
            .extensions
            .get::<crate::Outbox>()
            .cloned();
        let _following = self.upstream.follow(uris, outbox);
        context.cancelled().await;
        Ok(())
    }

    async fn on_custom_request(
        &self,
        request: CustomRequest,
        context: RequestContext<RoleServer>,
    ) -> Result<CustomResult, ErrorData> {
        let CustomRequest { method, params, .. } = request;
        if method.starts_with(durable_mcp_protocol::methods::TASKS_PREFIX) {
            // Tasks are the engine's (it answered what it serves); the upstream's own are
            // never reached through the proxy.
            return Err(ErrorData::new(
                ErrorCode::METHOD_NOT_FOUND,
                format!("method not found: {method}"),
                None,
            ));
        }
        self.forward_value(&method, params, context)
            .await
            .map(CustomResult)
    }

    async fn on_initialized(&self, _context: NotificationContext<RoleServer>) {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_upstream_tool_is_offered_as_an_optional_task_and_its_own_execution_is_dropped() {
        let tool = offered(
            json!({"name": "t", "inputSchema": {"type": "object"}, "execution": {"taskSupport": "required"}, "_meta": {"x": 1}}),
            false,
        );
        assert_eq!(
            tool,
            json!({"name": "t", "inputSchema": {"type": "object"}, "_meta": {"x": 1, "io.durable-mcp/taskSupport": "optional"}})
        );
        let parsed: Tool = serde_json::from_value(offered(
            json!({"name": "u", "inputSchema": {"type": "object"}}),
            false,
        ))
        .unwrap();
        assert_eq!(
            crate::tasks::declared(parsed.meta.as_ref()),
            crate::TaskSupport::Optional
        );
        // An upstream that knows tasks: its own support, absent meaning forbidden.
        let support = |execution: Value| {
            let tool = offered(
                json!({"name": "t", "inputSchema": {"type": "object"}, "execution": execution}),
                true,
            );
            tool["_meta"]["io.durable-mcp/taskSupport"].clone()
        };
        assert_eq!(support(json!({})), "forbidden");
        assert_eq!(support(json!({"taskSupport": "optional"})), "optional");
        assert_eq!(support(json!({"taskSupport": "required"})), "required");
    }

    #[test]
    fn an_upstream_result_without_a_result_type_is_complete() {
        assert_eq!(
            complete(json!({"content": []})),
            json!({"content": [], "resultType": "complete"})
        );
        assert_eq!(
            complete(json!({"resultType": "input_required"}))["resultType"],
            "input_required"
        );
    }

    #[test]
    fn the_progress_token_is_forwarded_and_the_lifecycle_meta_is_not() {
        let meta = json!({"progressToken": "p", "io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientInfo": {}});
        let params = with_meta(
            Some(json!({"name": "t", "arguments": {}})),
            meta.as_object().unwrap(),
        );
        assert_eq!(
            params,
            Some(json!({"name": "t", "arguments": {}, "_meta": {"progressToken": "p"}}))
        );
        let only_lifecycle = json!({"io.modelcontextprotocol/logLevel": "info"});
        assert_eq!(
            with_meta(
                Some(json!({"name": "t"})),
                only_lifecycle.as_object().unwrap()
            ),
            Some(json!({"name": "t"}))
        );
        assert_eq!(with_meta(None, only_lifecycle.as_object().unwrap()), None);
    }
}
