//! The tools of the suite's legacy-era scenarios, the SEP-2575 diagnostic tools, and
//! durable-mcp's own `emit_events`, `dynamic_tool` and `trigger_resource_update`.

use durable_mcp_handler::{TaskSupport, task_support};
use rmcp::handler::server::tool::InputResponses as InputResponsesPart;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{
    CallToolResponse, CallToolResult, ContentBlock, CustomNotification, InputRequiredResult,
    JsonObject, LoggingLevel, ResourceContents, ResourceUpdatedNotificationParam,
    ServerNotification,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, tool, tool_router};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::input::{self, Answers, Gathered, Question};
use super::{CLOSE_SSE_STREAM_METHOD, Change, Everything, fixtures, resources};

/// The tool `test_trigger_tool_change` shows and hides.
pub(super) const DYNAMIC_TOOL: &str = "dynamic_tool";

/// The tool `tools/list` shows first (see `list_tools`).
pub(super) const FIRST_TOOL: &str = "test_simple_text";

const LOGGER: &str = "durable-mcp-everything";

fn text(text: impl Into<String>) -> CallToolResult {
    CallToolResult::success(vec![ContentBlock::text(text)])
}

/// Asks `questions` and finishes with `finish`. On 2026-07-28 a missing answer returns
/// an `InputRequiredResult`. Failures are JSON-RPC errors on 2026-07-28 and tool errors
/// (`isError`, text `<failure>: <message>`) in legacy sessions, as the legacy scenarios
/// expect.
async fn ask_then(
    context: &RequestContext<RoleServer>,
    responses: Option<&rmcp::model::InputResponses>,
    questions: Vec<Question>,
    failure: &str,
    finish: impl FnOnce(Answers) -> CallToolResult,
) -> Result<CallToolResponse, McpError> {
    match input::gather(context, responses, questions).await {
        Ok(Gathered::Complete(answers)) => Ok(finish(answers).into()),
        Ok(Gathered::InputRequired(requests)) => {
            Ok(InputRequiredResult::from_input_requests(requests).into())
        }
        Err(error) if input::is_stateless(context) => Err(error),
        Err(error) => Ok(CallToolResult::error(vec![ContentBlock::text(format!(
            "{failure}: {}",
            error.message
        ))])
        .into()),
    }
}

/// Ask one elicitation form under `key` and answer `"<prefix>: <the user's answer>"`.
async fn elicit_form(
    context: &RequestContext<RoleServer>,
    responses: Option<&rmcp::model::InputResponses>,
    key: &'static str,
    message: impl Into<String>,
    schema: rmcp::model::ElicitationSchema,
    prefix: &str,
) -> Result<CallToolResponse, McpError> {
    let questions = vec![Question::elicit(key, message, schema)];
    ask_then(
        context,
        responses,
        questions,
        "Elicitation error",
        |answers| text(format!("{prefix}: {}", describe(&answers, key))),
    )
    .await
}

fn describe(answers: &Answers, key: &str) -> String {
    answers
        .get(key)
        .map_or_else(|| "(no answer)".to_owned(), input::Answer::describe)
}

/// Arguments of `test_sampling`.
#[derive(Debug, Deserialize, JsonSchema)]
pub(super) struct SamplingArgs {
    /// The prompt to send to the client's LLM.
    prompt: String,
}

/// Arguments of `test_elicitation`.
#[derive(Debug, Deserialize, JsonSchema)]
pub(super) struct ElicitationArgs {
    /// The message to show the user.
    message: String,
}

/// Arguments of `test_custom_header`.
#[derive(Debug, Deserialize)]
pub(super) struct CustomHeaderArgs {
    value: String,
}

/// Arguments of `emit_events`.
#[derive(Debug, Deserialize, JsonSchema)]
pub(super) struct EmitEventsArgs {
    /// How many progress notifications and log messages to send.
    count: u32,
    /// Milliseconds between two events.
    interval_ms: u64,
}

/// Arguments of `trigger_resource_update`.
#[derive(Debug, Deserialize, JsonSchema)]
pub(super) struct ResourceUpdateArgs {
    /// The resource that changed (default `test://watched-resource`).
    #[serde(default)]
    uri: Option<String>,
}

#[tool_router(vis = "pub(super)")]
impl Everything {
    #[tool(description = "Returns simple text content")]
    async fn test_simple_text(&self) -> CallToolResult {
        text("This is a simple text response for testing.")
    }

    #[tool(description = "Returns image content (a 1x1 PNG)")]
    async fn test_image_content(&self) -> CallToolResult {
        CallToolResult::success(vec![ContentBlock::image(fixtures::PNG_BASE64, "image/png")])
    }

    #[tool(description = "Returns audio content (a short WAV)")]
    async fn test_audio_content(&self) -> CallToolResult {
        CallToolResult::success(vec![ContentBlock::audio(fixtures::WAV_BASE64, "audio/wav")])
    }

    #[tool(description = "Returns an embedded text resource")]
    async fn test_embedded_resource(&self) -> CallToolResult {
        CallToolResult::success(vec![ContentBlock::resource(
            ResourceContents::TextResourceContents {
                uri: "test://embedded-resource".into(),
                mime_type: Some("text/plain".into()),
                text: "This is an embedded resource content.".into(),
                meta: None,
            },
        )])
    }

    #[tool(description = "Returns text, image and embedded resource content together")]
    async fn test_multiple_content_types(&self) -> CallToolResult {
        CallToolResult::success(vec![
            ContentBlock::text("Multiple content types test:"),
            ContentBlock::image(fixtures::PNG_BASE64, "image/png"),
            ContentBlock::resource(ResourceContents::TextResourceContents {
                uri: "test://mixed-content-resource".into(),
                mime_type: Some("application/json".into()),
                text: json!({ "test": "data", "value": 123 }).to_string(),
                meta: None,
            }),
        ])
    }

    #[tool(description = "Sends three info log messages, 50 ms apart, while it runs")]
    async fn test_tool_with_logging(&self, context: RequestContext<RoleServer>) -> CallToolResult {
        let steps = [
            "Tool execution started",
            "Tool processing data",
            "Tool execution completed",
        ];
        for (i, step) in steps.into_iter().enumerate() {
            if i > 0 {
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
            input::log(&context, LoggingLevel::Info, LOGGER, json!(step)).await;
        }
        text("Tool with logging executed successfully")
    }

    #[tool(
        description = "Reports progress 0, 50 and 100 of 100, 50 ms apart, when given a progressToken"
    )]
    async fn test_tool_with_progress(&self, context: RequestContext<RoleServer>) -> CallToolResult {
        for (i, (done, message)) in [(0.0, "Starting"), (50.0, "Halfway"), (100.0, "Complete")]
            .into_iter()
            .enumerate()
        {
            if i > 0 {
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
            input::progress(&context, done, 100.0, message).await;
        }
        text("Progress test completed")
    }

    #[tool(description = "Always fails with a tool error (isError: true)")]
    async fn test_error_handling(&self) -> CallToolResult {
        CallToolResult::error(vec![ContentBlock::text(
            "This tool intentionally returns an error for testing",
        )])
    }

    #[tool(description = "Asks the client's LLM to answer the prompt (sampling)")]
    async fn test_sampling(
        &self,
        context: RequestContext<RoleServer>,
        InputResponsesPart(responses): InputResponsesPart,
        Parameters(args): Parameters<SamplingArgs>,
    ) -> Result<CallToolResponse, McpError> {
        let questions = vec![Question::sample("sampling", args.prompt, 100)];
        ask_then(
            &context,
            responses.as_ref(),
            questions,
            "Sampling error",
            |answers| text(format!("LLM response: {}", describe(&answers, "sampling"))),
        )
        .await
    }

    #[tool(description = "Asks the user for a username and email (elicitation)")]
    async fn test_elicitation(
        &self,
        context: RequestContext<RoleServer>,
        InputResponsesPart(responses): InputResponsesPart,
        Parameters(args): Parameters<ElicitationArgs>,
    ) -> Result<CallToolResponse, McpError> {
        elicit_form(
            &context,
            responses.as_ref(),
            "elicitation",
            args.message,
            fixtures::user_info_schema(),
            "User response",
        )
        .await
    }

    #[tool(
        description = "Elicitation whose schema has a default for every primitive type (SEP-1034)"
    )]
    async fn test_elicitation_sep1034_defaults(
        &self,
        context: RequestContext<RoleServer>,
        InputResponsesPart(responses): InputResponsesPart,
    ) -> Result<CallToolResponse, McpError> {
        let message = "Please review and update the form fields with defaults";
        elicit_form(
            &context,
            responses.as_ref(),
            "elicitation",
            message,
            fixtures::defaults_schema(),
            "Elicitation completed",
        )
        .await
    }

    #[tool(description = "Elicitation using the five enum schema shapes of SEP-1330")]
    async fn test_elicitation_sep1330_enums(
        &self,
        context: RequestContext<RoleServer>,
        InputResponsesPart(responses): InputResponsesPart,
    ) -> Result<CallToolResponse, McpError> {
        let message = "Please pick from the enum fields";
        elicit_form(
            &context,
            responses.as_ref(),
            "elicitation",
            message,
            fixtures::enums_schema(),
            "Elicitation completed",
        )
        .await
    }

    #[tool(
        description = "Tool with JSON Schema 2020-12 features",
        input_schema = fixtures::json_schema_2020_12()
    )]
    async fn json_schema_2020_12_tool(&self, arguments: JsonObject) -> CallToolResult {
        let name = arguments
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or("world");
        text(format!("Hello, {name}!"))
    }

    #[tool(
        description = "Tests SSE reconnection (SEP-1699): asks the transport to close this call's stream, then answers after a short delay"
    )]
    async fn test_reconnection(&self, context: RequestContext<RoleServer>) -> CallToolResult {
        // See the module documentation ("test_reconnection"): the transport closes the
        // POST stream on this hint; the result is then delivered on the client's
        // GET + Last-Event-ID reconnection.
        let hint = CustomNotification::new(
            CLOSE_SSE_STREAM_METHOD,
            Some(json!({ "requestId": context.id })),
        );
        if let Err(error) = context
            .peer
            .send_notification(ServerNotification::CustomNotification(hint))
            .await
        {
            tracing::debug!(%error, "could not send the close-stream hint");
        }
        tokio::time::sleep(self.reconnection_delay).await;
        text(
            "Reconnection test completed successfully. If you received this, the client \
             properly reconnected after stream closure.",
        )
    }

    #[tool(description = "Requires the client's sampling capability; fails with -32021 without it")]
    async fn test_missing_capability(
        &self,
        context: RequestContext<RoleServer>,
        InputResponsesPart(responses): InputResponsesPart,
    ) -> Result<CallToolResponse, McpError> {
        let questions = vec![Question::sample("capability_probe", "Say hello", 50)];
        match input::gather(&context, responses.as_ref(), questions).await? {
            Gathered::Complete(answers) => Ok(text(format!(
                "Sampling capability declared; LLM said: {}",
                describe(&answers, "capability_probe")
            ))
            .into()),
            Gathered::InputRequired(requests) => {
                Ok(InputRequiredResult::from_input_requests(requests).into())
            }
        }
    }

    #[tool(
        description = "Streams progress, then asks for confirmation: an InputRequiredResult on 2026-07-28, never a request on the response stream"
    )]
    async fn test_streaming_elicitation(
        &self,
        context: RequestContext<RoleServer>,
        InputResponsesPart(responses): InputResponsesPart,
    ) -> Result<CallToolResponse, McpError> {
        input::progress(&context, 1.0, 2.0, "waiting for confirmation").await;
        let schema = fixtures::single_field_schema("ok", "boolean");
        let message = "Please confirm to continue";
        elicit_form(
            &context,
            responses.as_ref(),
            "confirm",
            message,
            schema,
            "Streaming elicitation completed",
        )
        .await
    }

    #[tool(
        description = "Sends one info log message, only if the request allows it (_meta logLevel on 2026-07-28)"
    )]
    async fn test_logging_tool(&self, context: RequestContext<RoleServer>) -> CallToolResult {
        input::log(
            &context,
            LoggingLevel::Info,
            LOGGER,
            json!("test_logging_tool executed"),
        )
        .await;
        text("Logging tool completed")
    }

    #[tool(description = "Shows or hides dynamic_tool and notifies tools/list_changed")]
    async fn test_trigger_tool_change(
        &self,
        context: RequestContext<RoleServer>,
    ) -> CallToolResult {
        let visible = self.toggle_dynamic_tool(&context).await;
        if !input::is_stateless(&context)
            && let Err(error) = context.peer.notify_tool_list_changed().await
        {
            tracing::debug!(%error, "could not send tools/list_changed");
        }
        text(format!(
            "Tool list changed: {DYNAMIC_TOOL} is now {}",
            if visible { "listed" } else { "hidden" }
        ))
    }

    #[tool(description = "Shows or hides dynamic_prompt and notifies prompts/list_changed")]
    async fn test_trigger_prompt_change(
        &self,
        context: RequestContext<RoleServer>,
    ) -> CallToolResult {
        let visible = self.toggle_dynamic_prompt(&context).await;
        if !input::is_stateless(&context)
            && let Err(error) = context.peer.notify_prompt_list_changed().await
        {
            tracing::debug!(%error, "could not send prompts/list_changed");
        }
        text(format!(
            "Prompt list changed: {} is now {}",
            super::prompts::DYNAMIC_PROMPT,
            if visible { "listed" } else { "hidden" }
        ))
    }

    #[tool(
        description = "Echoes value; value is mirrored into the Mcp-Param-Value header (SEP-2243)",
        input_schema = fixtures::custom_header_schema()
    )]
    async fn test_custom_header(&self, arguments: JsonObject) -> Result<CallToolResult, McpError> {
        let args: CustomHeaderArgs =
            serde_json::from_value(Value::Object(arguments)).map_err(|error| {
                McpError::invalid_params(format!("invalid arguments: {error}"), None)
            })?;
        Ok(text(args.value))
    }

    #[tool(
        description = "Adds 1 to this session's durable counter (kept in the store, shared by every worker serving the session) and returns the new value"
    )]
    async fn session_counter(
        &self,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        let Some(state) = ctx
            .extensions
            .get::<durable_mcp_handler::SessionState>()
            .filter(|s| s.session_id().is_some())
        else {
            return Err(McpError::invalid_request(
                "session_counter needs a legacy-era session (initialize)",
                None,
            ));
        };
        let n = state
            .update("counter", |n: Option<u64>| n.unwrap_or(0) + 1)
            .await?;
        Ok(text(n.to_string()))
    }

    #[tool(description = "Listed only after test_trigger_tool_change; returns a fixed text")]
    async fn dynamic_tool(&self) -> CallToolResult {
        text("dynamic_tool was called")
    }

    #[tool(
        description = "Sends count progress notifications (with a progressToken) and count info log messages, interval_ms apart, then returns count; a task for clients that ask for one",
        meta = task_support(TaskSupport::Optional)
    )]
    async fn emit_events(
        &self,
        context: RequestContext<RoleServer>,
        Parameters(args): Parameters<EmitEventsArgs>,
    ) -> Result<CallToolResult, McpError> {
        let interval = std::time::Duration::from_millis(args.interval_ms);
        let total = f64::from(args.count);
        for event in 1..=args.count {
            if event > 1 {
                tokio::select! {
                    () = context.ct.cancelled() => {
                        return Err(McpError::internal_error("emit_events was cancelled", None));
                    }
                    () = tokio::time::sleep(interval) => {}
                }
            }
            let message = format!("event {event} of {}", args.count);
            input::progress(&context, f64::from(event), total, message.clone()).await;
            input::log(
                &context,
                LoggingLevel::Info,
                "emit_events",
                json!({ "event": event, "count": args.count, "message": message }),
            )
            .await;
        }
        Ok(text(args.count.to_string()))
    }

    #[tool(
        description = "Notifies notifications/resources/updated for uri (default test://watched-resource) to its subscribers"
    )]
    async fn trigger_resource_update(
        &self,
        context: RequestContext<RoleServer>,
        Parameters(args): Parameters<ResourceUpdateArgs>,
    ) -> Result<CallToolResult, McpError> {
        let uri = args.uri.unwrap_or_else(|| resources::WATCHED.to_owned());
        resources::check_known(&uri)?;
        self.announce(&context, Change::Resource(uri.clone())).await;
        if !input::is_stateless(&context)
            && let Err(error) = context
                .peer
                .notify_resource_updated(ResourceUpdatedNotificationParam::new(uri.clone()))
                .await
        {
            tracing::debug!(%error, "could not send resources/updated");
        }
        Ok(text(format!("Resource updated: {uri}")))
    }
}
