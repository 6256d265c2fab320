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
    CallToolRequestParams, CallToolResponse, CallToolResult, CompleteRequestParams, CompleteResult, CustomRequest, CustomResult,
    ErrorCode, GetPromptRequestParams, GetPromptResponse, GetPromptResult, ListPromptsResult, ListResourceTemplatesResult,
    ListResourcesResult, ListToolsResult, PaginatedRequestParams, ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult,
    ServerConfig, ServerNotification, SubscribeRequestParams, Tool, UnsubscribeRequestParams,
};
use rmcp::service::{NotificationContext, RequestContext};
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
}

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
    fn request(&self, request: UpstreamRequest) -> BoxFuture<'static, Result<Value, UpstreamError>>;
}

/// An rmcp server handler that forwards to an [`Upstream`].
#[derive(Clone)]
pub struct Forward {
    upstream: Arc<dyn Upstream>,
    info: Arc<ServerConfig>,
}

impl std::fmt::Debug for Forward {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Forward").field("server_info", &self.info.server_info).finish_non_exhaustive()
    }
}

impl Forward {
    /// A handler forwarding to `upstream`. The upstream's `initialize` result is read once,
    /// here: a malformed one is an error. Its `tasks` capability is left out (upstream
    /// tasks are not forwarded).
    pub fn new(upstream: Arc<dyn Upstream>) -> Result<Self, serde_json::Error> {
        let mut info = upstream.info();
        if let Some(capabilities) = info.get_mut("capabilities").and_then(Value::as_object_mut) {
            capabilities.remove("tasks");
        }
        let info: ServerConfig = serde_json::from_value(info)?;
        Ok(Self { upstream, info: Arc::new(info) })
    }

    /// Forward `method` with `params`, sending the upstream's notifications for it to the
    /// client as they come, and read its result as `R`.
    async fn forward<P: Serialize, R: DeserializeOwned>(
        &self,
        method: &str,
        params: Option<P>,
        context: RequestContext<RoleServer>,
    ) -> Result<R, ErrorData> {
        let params = params.map(|p| serde_json::to_value(p)).transpose().map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        let mut value = self.forward_value(method, params, context).await?;
        // A session-era upstream's result has no `resultType`, which a 2026-07-28 client must
        // get: say "complete" (the only kind an upstream result is here). rmcp takes it out
        // again for a client of an older version.
        if let Value::Object(result) = &mut value {
            result.entry("resultType").or_insert_with(|| Value::String("complete".to_owned()));
        }
        serde_json::from_value(value).map_err(|e| ErrorData::internal_error(format!("the upstream's {method} result does not parse: {e}"), None))
    }

    async fn forward_value(&self, method: &str, params: Option<Value>, context: RequestContext<RoleServer>) -> Result<Value, ErrorData> {
        let params = with_meta(params, &context.meta.0.0);
        let session = context.extensions.get::<crate::SessionState>().map(|s| s.session_id().to_owned());
        let attempt = context.extensions.get::<crate::Durable>().map_or(1, crate::Durable::attempt);
        let client = if session.is_some() { context.peer.peer_info().and_then(|p| serde_json::to_value(&*p).ok()) } else { None };
        let (notifications, mut incoming) = mpsc::unbounded_channel();
        let request = UpstreamRequest { method: method.to_owned(), params, session, client, attempt, cancel: context.ct.clone(), notifications };
        let outcome = self.upstream.request(request);
        tokio::pin!(outcome);
        let outcome = loop {
            tokio::select! {
                biased;
                Some(message) = incoming.recv() => send(&context, message).await,
                outcome = &mut outcome => break outcome,
            }
        };
        // What the upstream sent before its outcome goes first.
        while let Ok(message) = incoming.try_recv() {
            send(&context, message).await;
        }
        outcome.map_err(|e| ErrorData::new(ErrorCode(i32::try_from(e.code).unwrap_or(crate::jsonrpc::code::INTERNAL_ERROR as i32)), e.message, e.data))
    }
}

/// Send one upstream notification to the client; one rmcp cannot read is dropped (logged).
async fn send(context: &RequestContext<RoleServer>, message: Value) {
    match serde_json::from_value::<ServerNotification>(message) {
        Ok(notification) => {
            if let Err(error) = context.peer.send_notification(notification).await {
                tracing::debug!(%error, "a forwarded notification could not be sent");
            }
        }
        Err(error) => tracing::debug!(%error, "dropping an upstream notification rmcp does not read"),
    }
}

/// `params` with the request's `_meta` back in place (rmcp takes it out into the request
/// context), less the 2026-07-28 lifecycle keys.
fn with_meta(params: Option<Value>, meta: &Map<String, Value>) -> Option<Value> {
    let kept: Map<String, Value> = meta.iter().filter(|(k, _)| !k.starts_with(LIFECYCLE_META_PREFIX)).map(|(k, v)| (k.clone(), v.clone())).collect();
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
        let target = params.entry("_meta").or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(target) = target {
            for (k, v) in kept {
                target.entry(k).or_insert(v);
            }
        }
    }
    if params.get("_meta").and_then(Value::as_object).is_some_and(Map::is_empty) {
        params.remove("_meta");
    }
    Some(Value::Object(params))
}

impl ServerHandler for Forward {
    fn get_info(&self) -> ServerConfig {
        (*self.info).clone()
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.upstream.tool(name).and_then(|tool| serde_json::from_value(tool).ok())
    }

    async fn call_tool(&self, request: CallToolRequestParams, context: RequestContext<RoleServer>) -> Result<CallToolResponse, ErrorData> {
        let result: CallToolResult = self.forward(crate::methods::TOOLS_CALL, Some(request), context).await?;
        Ok(result.into())
    }

    async fn list_tools(&self, request: Option<PaginatedRequestParams>, context: RequestContext<RoleServer>) -> Result<ListToolsResult, ErrorData> {
        self.forward(crate::methods::TOOLS_LIST, request, context).await
    }

    async fn get_prompt(&self, request: GetPromptRequestParams, context: RequestContext<RoleServer>) -> Result<GetPromptResponse, ErrorData> {
        let result: GetPromptResult = self.forward(crate::methods::PROMPTS_GET, Some(request), context).await?;
        Ok(result.into())
    }

    async fn list_prompts(&self, request: Option<PaginatedRequestParams>, context: RequestContext<RoleServer>) -> Result<ListPromptsResult, ErrorData> {
        self.forward("prompts/list", request, context).await
    }

    async fn list_resources(&self, request: Option<PaginatedRequestParams>, context: RequestContext<RoleServer>) -> Result<ListResourcesResult, ErrorData> {
        self.forward("resources/list", request, context).await
    }

    async fn list_resource_templates(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        self.forward("resources/templates/list", request, context).await
    }

    async fn read_resource(&self, request: ReadResourceRequestParams, context: RequestContext<RoleServer>) -> Result<ReadResourceResponse, ErrorData> {
        let result: ReadResourceResult = self.forward(crate::methods::RESOURCES_READ, Some(request), context).await?;
        Ok(result.into())
    }

    async fn complete(&self, request: CompleteRequestParams, context: RequestContext<RoleServer>) -> Result<CompleteResult, ErrorData> {
        self.forward(crate::methods::COMPLETION_COMPLETE, Some(request), context).await
    }

    #[allow(deprecated)]
    async fn subscribe(&self, request: SubscribeRequestParams, context: RequestContext<RoleServer>) -> Result<(), ErrorData> {
        let _: Value = self.forward(crate::methods::RESOURCES_SUBSCRIBE, Some(request), context).await?;
        Ok(())
    }

    #[allow(deprecated)]
    async fn unsubscribe(&self, request: UnsubscribeRequestParams, context: RequestContext<RoleServer>) -> Result<(), ErrorData> {
        let _: Value = self.forward(crate::methods::RESOURCES_UNSUBSCRIBE, Some(request), context).await?;
        Ok(())
    }

    async fn on_custom_request(&self, request: CustomRequest, context: RequestContext<RoleServer>) -> Result<CustomResult, ErrorData> {
        let CustomRequest { method, params, .. } = request;
        self.forward_value(&method, params, context).await.map(CustomResult)
    }

    async fn on_initialized(&self, _context: NotificationContext<RoleServer>) {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_progress_token_is_forwarded_and_the_lifecycle_meta_is_not() {
        let meta = json!({"progressToken": "p", "io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientInfo": {}});
        let params = with_meta(Some(json!({"name": "t", "arguments": {}})), meta.as_object().unwrap());
        assert_eq!(params, Some(json!({"name": "t", "arguments": {}, "_meta": {"progressToken": "p"}})));
        let only_lifecycle = json!({"io.modelcontextprotocol/logLevel": "info"});
        assert_eq!(with_meta(Some(json!({"name": "t"})), only_lifecycle.as_object().unwrap()), Some(json!({"name": "t"})));
        assert_eq!(with_meta(None, only_lifecycle.as_object().unwrap()), None);
    }
}
