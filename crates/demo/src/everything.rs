//! The conformance "everything" server.
//!
//! [`Everything`] is an ordinary rmcp [`ServerHandler`] (built with `#[tool_router]`,
//! `#[tool_handler]` and `#[prompt_router]`) exposing every fixture the official
//! conformance suite (`@modelcontextprotocol/conformance` 0.1.16 and 0.2.0-alpha.12)
//! looks for, with the exact names it uses. It serves both protocol eras:
//!
//! * **legacy** (2025-03-26 … 2025-11-25): `initialize` sessions; the handler talks to
//!   the client with server-to-client requests (`sampling/createMessage`,
//!   `elicitation/create`, `roots/list`) through `context.peer`.
//! * **stateless** (2026-07-28): every request carries `_meta` (protocol version, client
//!   capabilities, optional log level); server-to-client requests are forbidden, so the
//!   same tools return an `InputRequiredResult` (SEP-2322, "MRTR") and finish when the
//!   client retries with `inputResponses` (and the echoed `requestState`).
//!
//! A handler instance holds no per-connection state. What it shares between requests is
//! global by nature and lives behind one `Arc`, shared by every clone: the
//! `requestState` sealing key, the two "list changed" toggles, and a broadcast channel
//! that feeds open `subscriptions/listen` streams. **Construct one `Everything` and
//! clone it per request** (as `durable_mcp_handler::McpHandler` does); two separately
//! constructed values do not see each other's list changes.
//!
//! Under durable-mcp (the request carries a `Durable` context) a change is announced with
//! `Durable::announce` instead of the in-process broadcast: durable-mcp delivers it to the
//! listen streams of every worker, and the two switches live in the server's durable state
//! (`ServerState`), so every worker lists the same tools and prompts.
//!
//! # `requestState` key
//!
//! `requestState` is sealed with HMAC-SHA256 through rmcp's [`RequestStateCodec`], bound
//! to the tool or prompt name, with a 10-minute TTL. Under durable-mcp (`Everything::new(None)`)
//! the codec comes from the request's extensions ([`StateKeys`]): the server's key ring in
//! the store, shared by every worker and kept across restarts, so a retry may land on any
//! worker. [`Everything::new`] with a key (at least [`RequestStateCodec::MIN_KEY_LENGTH`],
//! 32, bytes) seals with that key instead, everywhere. Outside durable-mcp, with no key,
//! a random key for this process is used: fine for one node, but a retry that lands on
//! another node or after a restart then fails verification (-32602).
//!
//! # Fixtures, what the suite checks, and what the transport must do
//!
//! Scenario names are the suite's. "POST stream" is the SSE (or JSON) response of the
//! HTTP request that carried the JSON-RPC request.
//!
//! ## Tools (both eras unless noted)
//!
//! | tool | behaviour | scenario checks | transport |
//! | --- | --- | --- | --- |
//! | `test_simple_text` | text `This is a simple text response for testing.` | `tools-call-simple-text` | – |
//! | `test_image_content` | one `image/png` block (1×1 PNG) | `tools-call-image` | – |
//! | `test_audio_content` | one `audio/wav` block | `tools-call-audio` (mimeType must be `audio/wav`) | – |
//! | `test_embedded_resource` | embedded text resource `test://embedded-resource` | `tools-call-embedded-resource` | – |
//! | `test_multiple_content_types` | text + image + embedded JSON resource | `tools-call-mixed-content` | – |
//! | `test_tool_with_logging` | 3 `notifications/message` (info), 50 ms apart | `tools-call-with-logging` (legacy only; ≥3 logs after `logging/setLevel debug`) | logs go on the POST stream of the call |
//! | `test_tool_with_progress` | progress 0, 50, 100 of 100, 50 ms apart, if `_meta.progressToken` | `tools-call-with-progress` (≥3, non-decreasing) | progress goes on the POST stream of the call |
//! | `test_error_handling` | result with `isError: true` | `tools-call-error` | – |
//! | `test_sampling` | legacy: `sampling/createMessage` to the client; 2026: InputRequiredResult `sampling` | `tools-call-sampling` (legacy only) | legacy: the request goes on the POST stream, the client's answer (a POSTed JSON-RPC response) must be routed back to this run |
//! | `test_elicitation` | legacy: `elicitation/create` (username, email); 2026: InputRequiredResult `elicitation` | `tools-call-elicitation` (legacy only) | as `test_sampling` |
//! | `test_elicitation_sep1034_defaults` | elicitation whose schema has defaults for string/integer/number/enum/boolean | `elicitation-sep1034-defaults` (legacy) | as `test_sampling` |
//! | `test_elicitation_sep1330_enums` | elicitation with the five SEP-1330 enum shapes | `elicitation-sep1330-enums` (legacy) | as `test_sampling` |
//! | `json_schema_2020_12_tool` | inputSchema with `$schema`, `$defs`/`$anchor`, `$ref`, `allOf`/`anyOf`, `if`/`then`/`else`, `additionalProperties: false` | `json-schema-2020-12` (keywords preserved in `tools/list`) | – |
//! | `test_reconnection` | sends the [`CLOSE_SSE_STREAM_METHOD`] hint, waits (200 ms by default), then returns text | `server-sse-polling` (2025-11-25; not scored) | see below |
//! | `test_missing_capability` | needs `sampling`: without it, JSON-RPC error -32021 with `data.requiredCapabilities = {"sampling": {}}`; with it, asks for a sampling input | `server-stateless` (2026) | map -32021 to HTTP 400 |
//! | `test_streaming_elicitation` | progress (if token), then legacy: `elicitation/create`; 2026: InputRequiredResult — never a server-to-client request | `server-stateless`: no JSON-RPC request on the response stream | – |
//! | `test_logging_tool` | one `notifications/message` (info) if allowed | `server-stateless`: no log without `_meta.io.modelcontextprotocol/logLevel` | must not add logs of its own |
//! | `test_trigger_tool_change` | toggles `dynamic_tool` in `tools/list`, tells every open `listen` (announced under durable-mcp, broadcast otherwise); legacy also sends `notifications/tools/list_changed` through its peer | `server-stateless` (2026): the notification reaches a `subscriptions/listen` stream filtered on `toolsListChanged`, and not one filtered on prompts only | see `subscriptions/listen` below |
//! | `test_trigger_prompt_change` | same for `dynamic_prompt` and `notifications/prompts/list_changed` | `server-stateless` (2026) | same |
//! | `test_custom_header` | echoes `value`; its schema marks `value` with `x-mcp-header: Value` | `http-custom-header-server-validation` (2026, pending) | validates `Mcp-Param-Value` against the body (schema from `get_tool`) |
//! | `dynamic_tool` | listed and callable only after an odd number of `test_trigger_tool_change` | – | – |
//! | `emit_events` | `count` progress notifications (only with a progressToken) and `count` info logs (subject to the log rules below), `interval_ms` apart, then text `count`; stops on cancellation; task-supporting (an ordinary handler, without the durable context, run as a task) | used by durable-mcp's own tests and benchmarks | everything on the POST stream of the call |
//! | `trigger_resource_update` | announces (or broadcasts) `notifications/resources/updated` for `uri` (default `test://watched-resource`) to `listen` streams that subscribed it; legacy also sends it through its peer | – | legacy: route to the sessions that subscribed the URI |
//!
//! ## SEP-2322 fixtures (2026-07-28; in legacy sessions the same code asks inline)
//!
//! Every retry may carry unrelated `inputResponses` keys (ignored); a missing or `null`
//! `inputResponses` re-requests the input (`input-required-result-missing-input-response`);
//! a response of the wrong shape (e.g. `12345`) is a -32602 error
//! (`input-required-result-validate-input`). Inputs the client did not declare a
//! capability for are a -32021 error.
//!
//! | tool | rounds |
//! | --- | --- |
//! | `test_input_required_result_elicitation` | `user_name` (elicitation) → `Hello, <name>!` (also `-result-type`, `-ignore-extra-params`) |
//! | `test_input_required_result_sampling` | `capital_question` (sampling) → the sampled text |
//! | `test_input_required_result_list_roots` | `client_roots` (roots/list) → the root URIs |
//! | `test_input_required_result_request_state` | `confirm` + sealed `requestState` → text containing `state-ok` |
//! | `test_input_required_result_tampered_state` | like `request_state`; a modified `requestState` is a -32602 error |
//! | `test_input_required_result_multiple_inputs` | `user_name` + `greeting` (sampling) + `client_roots` + `requestState` → complete |
//! | `test_input_required_result_multi_round` | `step1` (name) → `step2` (colour) with a new `requestState` → complete |
//! | `test_input_required_result_capabilities` | asks only for inputs whose capability the request declares |
//! | prompt `test_input_required_result_prompt` | `user_context` (elicitation) → a `GetPromptResult` (`input-required-result-non-tool-request`) |
//!
//! `tools/list` and `prompts/list` never return an InputRequiredResult
//! (`input-required-result-unsupported-methods`).
//!
//! ## SEP-2663 Tasks extension fixtures (2026-07-28 `tasks-*` scenarios, not scored)
//!
//! The server advertises `capabilities.extensions["io.modelcontextprotocol/tasks"]`. The
//! fixtures are ordinary tools that declare their task support in `_meta`; durable-mcp's
//! engine makes the tasks (durable: committed before the create result, served by any
//! worker, re-run after a crash), gates `tasks/get|update|cancel` (-32021 for clients that
//! did not declare the extension) and refuses task-required tools to such clients.
//!
//! | tool | behaviour |
//! | --- | --- |
//! | `greet` | synchronous only: `Hello, {name}!` |
//! | `slow_compute` | task if the client declared the extension, else synchronous; sleeps `seconds` (default 1, a durable timer); `tasks/cancel` stops it |
//! | `failing_job` | task-required (-32021 otherwise); completes after ~1 s with `isError: true` |
//! | `protocol_error_job` | task: settles as `failed` with the error; synchronous: a JSON-RPC error |
//! | `confirm_delete` | task-supporting; parks on one `inputRequests` entry until `tasks/update` |
//! | `multi_input` | task-supporting; parks on two entries at once (partial updates) |
//! | `test_tool_with_task` | task-required; round 1 is an `input_required` (durable question, sealed state), round 2 becomes a task (`Durable::start_task`) whose result greets that name |
//! | `steps`, `ask`, `consult` | the durability fixtures (see `durability.rs`), task-supporting |
//!
//! `tools/list` puts `test_simple_text` first: `http-header-validation` calls the first
//! listed tool with empty arguments and no tasks extension and expects success.
//!
//! ## Resources
//!
//! `test://static-text` (text/plain), `test://static-binary` (image/png blob),
//! `test://watched-resource` (text/plain) and the template `test://template/{id}/data`
//! (application/json, echoes `id`) — `resources-list`, `resources-read-text`,
//! `resources-read-binary`, `resources-templates-read`. Any other URI is
//! `Resource not found` with `data.uri` (-32002; rmcp turns it into -32602 for 2026,
//! `sep-2164-resource-not-found`). Legacy `resources/subscribe` / `unsubscribe` accept the
//! known URIs and return `{}` (`resources-subscribe`, `resources-unsubscribe`); rmcp
//! answers both with -32601 on 2026-07-28. `caching`: rmcp adds `ttlMs: 0` /
//! `cacheScope` to list and read results on 2026-07-28.
//!
//! ## Prompts
//!
//! `test_simple_prompt`, `test_prompt_with_arguments` (`arg1`, `arg2`, both required,
//! echoed), `test_prompt_with_embedded_resource` (`resourceUri`, required, embedded),
//! `test_prompt_with_image`, `dynamic_prompt` (after `test_trigger_prompt_change`) and the
//! MRTR prompt above — `prompts-list`, `prompts-get-*`.
//!
//! ## Utilities
//!
//! * `completion/complete` (`completion-complete`): prefix-filtered values for
//!   `test_prompt_with_arguments` `arg1`/`arg2`, `test_prompt_with_embedded_resource`
//!   `resourceUri` and the template's `id`; an empty list otherwise.
//! * `logging/setLevel` (`logging-set-level`): accepted (`{}`) in legacy sessions and not
//!   stored (a handler instance has no session); -32601 on 2026-07-28, where the method
//!   was removed. Log rule used by every tool: on 2026-07-28 a `notifications/message` is
//!   sent only if the request's `_meta` has `io.modelcontextprotocol/logLevel` and the
//!   message is at least that severe; in legacy sessions always (a transport that wants
//!   per-session `setLevel` filtering records the level itself and drops below it).
//! * `ping`, `server/discover`: rmcp's defaults (`ping` is -32601 on 2026-07-28).
//!
//! ## `subscriptions/listen` (2026-07-28)
//!
//! [`Everything`] accepts the requested filter (tools, prompts, resources list changes, and
//! the known resource URIs). rmcp sends `notifications/subscriptions/acknowledged` first;
//! `listen` then forwards every broadcast change allowed by the filter through rmcp's
//! `SubscriptionSink`, which tags it with `_meta.io.modelcontextprotocol/subscriptionId`.
//! The transport must run `subscriptions/listen` through the handler like any other
//! request, keep its response stream open and deliver everything the run sends, and cancel
//! the run when the client goes away (the handler then returns and rmcp sends the final
//! result). Under durable-mcp, changes are announced instead of broadcast, and durable-mcp
//! itself delivers them to the listen streams whose acknowledged filter covers them (on
//! every worker), tagged the same way.
//!
//! ## `test_reconnection` (SEP-1699, `server-sse-polling`)
//!
//! Reading of the scenario: the client POSTs `tools/call test_reconnection` and reads the
//! SSE response. It wants a priming event (an `id` with empty data) first and a `retry`
//! field; then the server should *close the stream before the result*; the client
//! reconnects with `GET` + `Last-Event-ID` and expects the `tools/call` result (id 1) on
//! that stream. A handler cannot close an HTTP stream, so the tool sends the custom
//! notification [`CLOSE_SSE_STREAM_METHOD`] through its peer and then waits. The
//! transport should swallow that notification (never forward it) and close the POST SSE
//! stream of that request after the priming event, keep the run going, and replay the
//! result after the last event id on the client's `GET`. A transport that ignores the hint
//! still passes the tool call (the scenario then only reports the resume check as INFO).
//!
//! ## Transport-level scenarios with no fixture
//!
//! `server-initialize`, `server-session-lifecycle`, `server-sse-multiple-streams` (three
//! concurrent POSTs must each get a working stream), `dns-rebinding-protection`, and in
//! `server-stateless` the `_meta` validation (-32602 / HTTP 400, rmcp checks `_meta`), the
//! version checks (-32022 / -32020, HTTP 400), and removed methods (`initialize`, `ping`,
//! `logging/setLevel`, `resources/(un)subscribe`, unknown methods: HTTP 404 + -32601 —
//! rmcp answers `initialize` itself, so the transport must refuse it on 2026-07-28).

// Sampling, roots and logging are deprecated by SEP-2577 but the conformance suite still
// exercises them.
#![allow(deprecated)]

mod durability;
mod fixtures;
mod input;
mod mrtr;
mod prompts;
mod resources;
mod tasks;
#[cfg(test)]
mod tests;
mod tools;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use durable_mcp_handler::{Durable, ServerChange, ServerState, StateKeys};
use rand::RngCore;
use rmcp::handler::server::router::prompt::PromptRouter;
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::tool::ToolCallContext;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CompleteRequestParams, CompleteResult,
    GetPromptRequestParams, GetPromptResponse, Implementation, ListPromptsResult,
    ListResourceTemplatesResult, ListResourcesResult, ListToolsResult, PaginatedRequestParams,
    ReadResourceRequestParams, ReadResourceResponse, RequestStateCodec, RequestStateError,
    ServerCapabilities, ServerConfig, SetLevelRequestMethod, SetLevelRequestParams,
    SubscribeRequestParams, SubscriptionFilter, UnsubscribeRequestParams,
};
use rmcp::service::{RequestContext, SubscriptionContext, SubscriptionSendError};
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler, tool_handler};
use tokio::sync::broadcast;

/// The server name advertised in `serverInfo`.
pub const SERVER_NAME: &str = "durable-mcp-everything";

/// Method of the custom notification `test_reconnection` sends to ask the transport to
/// close the calling request's SSE stream (SEP-1699 polling). A transport should swallow
/// it, never forward it to the client.
pub use durable_mcp_protocol::CLOSE_SSE_STREAM_METHOD;

/// How long `test_reconnection` waits after its hint before answering, by default.
pub const DEFAULT_RECONNECTION_DELAY: Duration = Duration::from_millis(200);

const INSTRUCTIONS: &str = "Conformance 'everything' server for durable-mcp. Tools named test_* \
are the fixtures of the official MCP conformance suite; emit_events(count, interval_ms) streams \
progress and log notifications; test_trigger_tool_change / test_trigger_prompt_change toggle \
dynamic_tool / dynamic_prompt and notify list changes.";

/// A change broadcast to open `subscriptions/listen` streams.
#[derive(Debug, Clone, PartialEq)]
enum Change {
    Tools,
    Prompts,
    Resource(String),
}

/// The server-state keys of the two switches (under durable-mcp).
const DYNAMIC_TOOL_SWITCH: &str = "everything/dynamic_tool";
const DYNAMIC_PROMPT_SWITCH: &str = "everything/dynamic_prompt";

/// A switch's position: in the server's durable state under durable-mcp (every worker
/// agrees), else in this process (`local`).
async fn switch_is_on(context: &RequestContext<RoleServer>, key: &str, local: &AtomicBool) -> bool {
    if let Some(state) = context.extensions.get::<ServerState>() {
        match state.get::<bool>(key).await {
            Ok(on) => return on.unwrap_or(false),
            Err(error) => {
                tracing::warn!(%error, key, "could not read a switch; using this process's")
            }
        }
    }
    local.load(Ordering::SeqCst)
}

/// Flip a switch (see [`switch_is_on`]); returns its new position.
async fn flip_switch(context: &RequestContext<RoleServer>, key: &str, local: &AtomicBool) -> bool {
    if let Some(state) = context.extensions.get::<ServerState>() {
        match state
            .update(key, |on: Option<bool>| !on.unwrap_or(false))
            .await
        {
            Ok(on) => return on,
            Err(error) => {
                tracing::warn!(%error, key, "could not flip a switch; flipping this process's")
            }
        }
    }
    !local.fetch_xor(true, Ordering::SeqCst)
}

/// State shared by every clone of one [`Everything`].
struct Shared {
    /// The key given to [`Everything::new`], if any; else a random one, used only where
    /// the request carries no [`StateKeys`] (outside durable-mcp).
    codec: Arc<RequestStateCodec>,
    explicit_key: bool,
    dynamic_tool: AtomicBool,
    dynamic_prompt: AtomicBool,
    changes: broadcast::Sender<Change>,
}

/// The conformance "everything" server. See the [module documentation](self) for its
/// fixtures and what each needs from the transport.
///
/// Cheap to clone; clones share the `requestState` key, the dynamic tool/prompt toggles
/// and the change broadcast.
#[derive(Clone)]
pub struct Everything {
    shared: Arc<Shared>,
    tool_router: Arc<ToolRouter<Everything>>,
    prompt_router: Arc<PromptRouter<Everything>>,
    reconnection_delay: Duration,
}

impl std::fmt::Debug for Everything {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Everything")
            .field("reconnection_delay", &self.reconnection_delay)
            .finish_non_exhaustive()
    }
}

impl Default for Everything {
    /// An [`Everything`] with a random `requestState` key (single-process use only).
    fn default() -> Self {
        Self::with_codec(Self::random_codec(), false)
    }
}

impl Everything {
    /// Creates the server.
    ///
    /// `request_state_key` seals SEP-2322 `requestState` values; it must be at least
    /// [`RequestStateCodec::MIN_KEY_LENGTH`] bytes of secret, high-entropy material and the
    /// same on every node that may receive a retry. `None`: the server's [`StateKeys`]
    /// under durable-mcp (shared by every worker), else a random key valid for this
    /// process only.
    ///
    /// # Errors
    ///
    /// [`RequestStateError::KeyTooShort`] if the key is shorter than 32 bytes.
    pub fn new(request_state_key: Option<Vec<u8>>) -> Result<Self, RequestStateError> {
        Ok(match request_state_key {
            Some(key) => Self::with_codec(RequestStateCodec::try_new(key)?, true),
            None => Self::with_codec(Self::random_codec(), false),
        })
    }

    /// Sets how long `test_reconnection` waits after asking the transport to close its
    /// stream ([`DEFAULT_RECONNECTION_DELAY`] by default).
    #[must_use]
    pub fn with_reconnection_delay(mut self, delay: Duration) -> Self {
        self.reconnection_delay = delay;
        self
    }

    fn random_codec() -> RequestStateCodec {
        let mut key = vec![0u8; 2 * RequestStateCodec::MIN_KEY_LENGTH];
        rand::rng().fill_bytes(&mut key);
        RequestStateCodec::new_unchecked(key)
    }

    fn with_codec(codec: RequestStateCodec, explicit_key: bool) -> Self {
        let (changes, _) = broadcast::channel(64);
        Self {
            shared: Arc::new(Shared {
                codec: Arc::new(codec),
                explicit_key,
                dynamic_tool: AtomicBool::new(false),
                dynamic_prompt: AtomicBool::new(false),
                changes,
            }),
            tool_router: Arc::new(
                Self::tool_router()
                    + Self::mrtr_router()
                    + Self::tasks_router()
                    + Self::durability_router(),
            ),
            prompt_router: Arc::new(Self::prompt_router()),
            reconnection_delay: DEFAULT_RECONNECTION_DELAY,
        }
    }

    /// The codec that seals and opens this request's `requestState`: the key given to
    /// [`Everything::new`], else the server's keys from the request (under durable-mcp),
    /// else this process's random key.
    fn state_codec(&self, context: &RequestContext<RoleServer>) -> Arc<RequestStateCodec> {
        match context.extensions.get::<StateKeys>() {
            Some(keys) if !self.shared.explicit_key => keys.codec(),
            _ => self.shared.codec.clone(),
        }
    }

    /// Whether `dynamic_tool` is currently listed.
    async fn dynamic_tool_visible(&self, context: &RequestContext<RoleServer>) -> bool {
        switch_is_on(context, DYNAMIC_TOOL_SWITCH, &self.shared.dynamic_tool).await
    }

    /// Whether `dynamic_prompt` is currently listed.
    async fn dynamic_prompt_visible(&self, context: &RequestContext<RoleServer>) -> bool {
        switch_is_on(context, DYNAMIC_PROMPT_SWITCH, &self.shared.dynamic_prompt).await
    }

    /// Flips `dynamic_tool`'s visibility and tells open listen streams. Returns the new
    /// visibility.
    async fn toggle_dynamic_tool(&self, context: &RequestContext<RoleServer>) -> bool {
        let visible = flip_switch(context, DYNAMIC_TOOL_SWITCH, &self.shared.dynamic_tool).await;
        self.announce(context, Change::Tools).await;
        visible
    }

    /// Flips `dynamic_prompt`'s visibility and tells open listen streams.
    async fn toggle_dynamic_prompt(&self, context: &RequestContext<RoleServer>) -> bool {
        let visible =
            flip_switch(context, DYNAMIC_PROMPT_SWITCH, &self.shared.dynamic_prompt).await;
        self.announce(context, Change::Prompts).await;
        visible
    }

    /// Tells open `subscriptions/listen` streams of a change. Under durable-mcp (the
    /// request has a [`Durable`] context) the change is announced through the store, so
    /// listen streams on every worker hear of it; otherwise only this process's streams do.
    async fn announce(&self, context: &RequestContext<RoleServer>, change: Change) {
        if let Some(durable) = context.extensions.get::<Durable>() {
            let announced = match &change {
                Change::Tools => ServerChange::ToolsListChanged,
                Change::Prompts => ServerChange::PromptsListChanged,
                Change::Resource(uri) => ServerChange::ResourceUpdated(uri.clone()),
            };
            match durable.announce(announced).await {
                Ok(()) => return,
                Err(error) => {
                    tracing::warn!(%error, "could not announce a change; telling this process's listen streams only")
                }
            }
        }
        self.broadcast(change);
    }

    fn broadcast(&self, change: Change) {
        // No receiver (no open listen stream) is not an error.
        let _ = self.shared.changes.send(change);
    }

    /// Forwards broadcast changes to one subscription until it ends.
    async fn forward_changes(&self, context: &SubscriptionContext) {
        let mut changes = self.shared.changes.subscribe();
        let sink = context.sink();
        loop {
            let change = tokio::select! {
                () = context.cancelled() => return,
                change = changes.recv() => change,
            };
            let sent = match change {
                Ok(Change::Tools) => sink.notify_tool_list_changed().await,
                Ok(Change::Prompts) => sink.notify_prompt_list_changed().await,
                Ok(Change::Resource(uri)) => sink.notify_resource_updated(uri).await,
                // Missed some changes: a list-changed notification tells the client to
                // re-fetch anyway, so send what the filter allows.
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    let _ = sink.notify_tool_list_changed().await;
                    sink.notify_prompt_list_changed().await
                }
                Err(broadcast::error::RecvError::Closed) => return,
            };
            match sent {
                Ok(()) | Err(SubscriptionSendError::NotificationNotAccepted(_)) => {}
                Err(error) => {
                    tracing::debug!(%error, "subscription closed");
                    return;
                }
            }
        }
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for Everything {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_logging()
                .enable_completions()
                .enable_prompts()
                .enable_prompts_list_changed()
                .enable_resources()
                .enable_resources_subscribe()
                .enable_resources_list_changed()
                .enable_tools()
                .enable_tool_list_changed()
                .enable_tasks()
                .build(),
        )
        .with_server_info(Implementation::new(SERVER_NAME, env!("CARGO_PKG_VERSION")))
        .with_instructions(INSTRUCTIONS)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        if request.name == tools::DYNAMIC_TOOL && !self.dynamic_tool_visible(&context).await {
            return Err(McpError::invalid_params("tool not found", None));
        }
        let call = ToolCallContext::new(self, request, context);
        self.tool_router.call(call).await
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let show_dynamic = self.dynamic_tool_visible(&context).await;
        let mut listed: Vec<_> = self
            .tool_router
            .list_all()
            .into_iter()
            .filter(|tool| show_dynamic || tool.name != tools::DYNAMIC_TOOL)
            .collect();
        // `http-header-validation` calls the first listed tool with empty arguments and
        // no tasks extension, and expects it to succeed: list `test_simple_text` first.
        listed.sort_by_key(|tool| (tool.name != tools::FIRST_TOOL, tool.name.clone()));
        Ok(ListToolsResult::with_all_items(listed))
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, McpError> {
        Ok(ListPromptsResult::with_all_items(
            self.prompt_list(&context).await,
        ))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, McpError> {
        self.prompt(request, context).await
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        Ok(ListResourcesResult::with_all_items(resources::list()))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, McpError> {
        Ok(ListResourceTemplatesResult::with_all_items(
            resources::templates(),
        ))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        resources::read(&request.uri).map(ReadResourceResponse::from)
    }

    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        resources::check_known(&request.uri)
    }

    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        resources::check_known(&request.uri)
    }

    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        let mut accepted = requested.clone();
        accepted.resource_subscriptions = requested.resource_subscriptions.as_ref().map(|uris| {
            uris.iter()
                .filter(|uri| resources::check_known(uri).is_ok())
                .cloned()
                .collect()
        });
        Some(accepted)
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), McpError> {
        self.forward_changes(&context).await;
        Ok(())
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, McpError> {
        resources::complete(&request)
    }

    async fn set_level(
        &self,
        _request: SetLevelRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        if input::is_stateless(&context) {
            // logging/setLevel was removed in 2026-07-28 (per-request `_meta` logLevel).
            return Err(McpError::method_not_found::<SetLevelRequestMethod>());
        }
        Ok(())
    }
}
