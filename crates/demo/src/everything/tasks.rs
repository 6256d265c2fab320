//! SEP-2663 Tasks-extension fixtures (`io.modelcontextprotocol/tasks`).
//!
//! Most are ordinary tools that declare their task support in `_meta`
//! ([`task_support`]): durable-mcp makes each call of them a durable task when the
//! client declared the extension (and refuses task-*required* tools to clients that did
//! not, with -32021), runs it as a journaled run on any worker, and keeps the task in the
//! store. Their questions go through the durable context and become the task's
//! `inputRequests`.
//!
//! `test_tool_with_task` shows the other way: its first round is a synchronous
//! `input_required` (a durable question in a stateless request), and only then does it
//! become a task, with [`Durable::start_task`].

use std::time::Duration;

use durable_mcp_handler::{Durable, TaskSupport, task_support};
use rmcp::handler::server::tool::Extension;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{
    CallToolResult, ClientCapabilities, ContentBlock, ElicitRequestParams, ElicitResult,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, tool, tool_router};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use super::Everything;
use super::fixtures::single_field_schema;

fn text(text: impl Into<String>) -> CallToolResult {
    CallToolResult::success(vec![ContentBlock::text(text)])
}

/// Whether this request's client declared the tasks extension.
fn client_supports_tasks(context: &RequestContext<RoleServer>) -> bool {
    context
        .client_capabilities()
        .is_some_and(|capabilities| capabilities.supports_tasks())
}

/// -32021 for a tool that can only answer with a task.
fn tasks_required(context: &RequestContext<RoleServer>) -> Result<(), McpError> {
    if client_supports_tasks(context) {
        Ok(())
    } else {
        Err(McpError::missing_required_client_capability(
            ClientCapabilities::builder().enable_tasks().build(),
        ))
    }
}

/// A form elicitation with one field.
fn elicitation(message: &str, field: &str, kind: &str) -> ElicitRequestParams {
    ElicitRequestParams::FormElicitationParams {
        meta: None,
        message: message.to_owned(),
        requested_schema: single_field_schema(field, kind),
    }
}

/// The `content.<field>` of an accepted elicitation, as text.
fn elicited(answer: &ElicitResult, field: &str) -> String {
    answer
        .content
        .as_ref()
        .and_then(|content| content.get(field))
        .map_or_else(
            || "(not provided)".to_owned(),
            |value| match value {
                Value::String(text) => text.clone(),
                other => other.to_string(),
            },
        )
}

/// Arguments of `greet`.
#[derive(Debug, Deserialize, JsonSchema)]
pub(super) struct GreetArgs {
    /// Who to greet.
    name: String,
}

/// Arguments of `slow_compute`.
#[derive(Debug, Deserialize, JsonSchema)]
pub(super) struct SlowComputeArgs {
    /// How long the work takes, in seconds (default 1).
    #[serde(default)]
    seconds: Option<f64>,
    /// A label echoed in the result.
    #[serde(default)]
    label: Option<String>,
}

/// Arguments of `confirm_delete`.
#[derive(Debug, Deserialize, JsonSchema)]
pub(super) struct ConfirmDeleteArgs {
    /// The file to (pretend to) delete.
    #[serde(default)]
    filename: Option<String>,
}

#[tool_router(router = tasks_router, vis = "pub(super)")]
impl Everything {
    #[tool(description = "Tasks fixture: synchronous only; returns Hello, {name}!")]
    async fn greet(&self, Parameters(args): Parameters<GreetArgs>) -> CallToolResult {
        text(format!("Hello, {}!", args.name))
    }

    #[tool(
        description = "Tasks fixture: a durable task when the client can use tasks, else synchronous; sleeps `seconds` (durable timer) then returns; stops on tasks/cancel",
        meta = task_support(TaskSupport::Optional)
    )]
    async fn slow_compute(
        &self,
        Extension(durable): Extension<Durable>,
        Parameters(args): Parameters<SlowComputeArgs>,
    ) -> Result<CallToolResult, McpError> {
        let seconds = args.seconds.unwrap_or(1.0).clamp(0.0, 3600.0);
        let label = args.label.unwrap_or_else(|| "compute".to_owned());
        durable
            .sleep("compute", Duration::from_secs_f64(seconds))
            .await?;
        Ok(text(format!(
            "slow_compute({label}) finished after {seconds}s"
        )))
    }

    #[tool(
        description = "Tasks fixture: task-required; after ~1 s completes with a tool error (isError)",
        meta = task_support(TaskSupport::Required)
    )]
    async fn failing_job(
        &self,
        Extension(durable): Extension<Durable>,
    ) -> Result<CallToolResult, McpError> {
        durable.sleep("work", Duration::from_secs(1)).await?;
        Ok(CallToolResult::error(vec![ContentBlock::text(
            "failing_job: intentional tool execution error",
        )]))
    }

    #[tool(
        description = "Tasks fixture: task-supporting; fails with a protocol-level error",
        meta = task_support(TaskSupport::Optional)
    )]
    async fn protocol_error_job(
        &self,
        Extension(durable): Extension<Durable>,
    ) -> Result<CallToolResult, McpError> {
        durable.sleep("work", Duration::from_millis(200)).await?;
        Err(McpError::internal_error(
            "protocol_error_job: intentional failure",
            None,
        ))
    }

    #[tool(
        description = "Tasks fixture: task-supporting; asks for confirmation once (durable elicitation: the task's inputRequests, answered with tasks/update)",
        meta = task_support(TaskSupport::Optional)
    )]
    async fn confirm_delete(
        &self,
        Extension(durable): Extension<Durable>,
        Parameters(args): Parameters<ConfirmDeleteArgs>,
    ) -> Result<CallToolResult, McpError> {
        let filename = args.filename.unwrap_or_else(|| "file.txt".to_owned());
        let answer = durable
            .elicit(elicitation(
                &format!("Delete {filename}?"),
                "confirm",
                "boolean",
            ))
            .await?;
        Ok(text(format!(
            "confirm_delete({filename}): confirm={}",
            elicited(&answer, "confirm")
        )))
    }

    #[tool(
        description = "Tasks fixture: task-supporting; asks two questions at once (two inputRequests)",
        meta = task_support(TaskSupport::Optional)
    )]
    async fn multi_input(
        &self,
        Extension(durable): Extension<Durable>,
    ) -> Result<CallToolResult, McpError> {
        let (first, second) = tokio::join!(
            durable.elicit(elicitation("Provide value A", "name", "string")),
            durable.elicit(elicitation("Provide value B", "name", "string")),
        );
        let (first, second) = (first?, second?);
        Ok(text(format!(
            "multi_input: a={}, b={}",
            elicited(&first, "name"),
            elicited(&second, "name")
        )))
    }

    #[tool(
        description = "Tasks fixture: task-required; round 1 asks the user's name (a synchronous input_required), round 2 becomes a durable task that greets"
    )]
    async fn test_tool_with_task(
        &self,
        context: RequestContext<RoleServer>,
        Extension(durable): Extension<Durable>,
    ) -> Result<CallToolResult, McpError> {
        tasks_required(&context)?;
        let answer = durable
            .elicit(elicitation("What is your name?", "name", "string"))
            .await?;
        let name = match elicited(&answer, "name") {
            name if name == "(not provided)" => "friend".to_owned(),
            name => name,
        };
        // Not declared as a task tool (the engine would make the task before the question):
        // it becomes a task itself, once it has its answer.
        if !durable.start_task().await? {
            return Err(McpError::internal_error(
                "test_tool_with_task needs a client that uses tasks",
                None,
            ));
        }
        durable.sleep("greet", Duration::from_millis(200)).await?;
        Ok(text(format!("Hello, {name}! (from a task)")))
    }
}
