//! SEP-2663 Tasks-extension fixtures (`io.modelcontextprotocol/tasks`), run on rmcp's
//! in-process [`TaskManager`](rmcp::task_manager::TaskManager).
//!
//! The server decides per call whether to create a task: task-supporting tools do so
//! when the request's client capabilities declare the extension (at `initialize`, or per
//! request in `_meta`), and otherwise run synchronously; task-*required* tools refuse
//! such clients with -32021 naming the extension. Tasks live in this process only.

use std::time::Duration;

use rmcp::handler::server::tool::InputResponses as InputResponsesPart;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{
    CallToolResponse, CallToolResult, ClientCapabilities, ContentBlock, CreateTaskResult,
    InputRequest, InputRequiredResult,
};
use rmcp::service::RequestContext;
use rmcp::task_manager::{TaskContext, TaskExit, TaskOptions};
use rmcp::{ErrorData as McpError, RoleServer, tool, tool_router};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use super::Everything;
use super::fixtures::single_field_schema;
use super::input::{self, Gathered, Question};

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

/// An elicitation input request for a task to park on.
fn elicitation(message: &str, field: &str, kind: &str) -> InputRequest {
    Question::elicit("task", message.to_owned(), single_field_schema(field, kind)).input_request()
}

/// The `content.<field>` of an `ElicitResult` delivered through `tasks/update`.
fn elicited(response: &Value, field: &str) -> String {
    response
        .get("content")
        .and_then(|content| content.get(field))
        .map_or_else(
            || "(not provided)".to_owned(),
            |value| match value {
                Value::String(text) => text.clone(),
                other => other.to_string(),
            },
        )
}

async fn ask(context: &TaskContext, key: &str, request: InputRequest) -> Result<Value, TaskExit> {
    context.request_input(key, request).await
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
        description = "Tasks fixture: task-supporting; sleeps `seconds` then returns; settles as cancelled on tasks/cancel"
    )]
    async fn slow_compute(
        &self,
        context: RequestContext<RoleServer>,
        Parameters(args): Parameters<SlowComputeArgs>,
    ) -> Result<CallToolResponse, McpError> {
        let seconds = args.seconds.unwrap_or(1.0).clamp(0.0, 3600.0);
        let label = args.label.unwrap_or_else(|| "compute".to_owned());
        let done = format!("slow_compute({label}) finished after {seconds}s");
        let duration = Duration::from_secs_f64(seconds);
        if !client_supports_tasks(&context) {
            tokio::select! {
                () = context.ct.cancelled() => {
                    return Err(McpError::internal_error("slow_compute was cancelled", None));
                }
                () = tokio::time::sleep(duration) => {}
            }
            return Ok(text(done).into());
        }
        let task = self
            .shared
            .tasks
            .spawn(TaskOptions::default(), move |task| {
                Box::pin(async move {
                    tokio::select! {
                        () = task.cancelled() => Err(TaskExit::Cancelled),
                        () = tokio::time::sleep(duration) => Ok(text(done)),
                    }
                })
            });
        Ok(CreateTaskResult::new(task).into())
    }

    #[tool(
        description = "Tasks fixture: task-required; after ~1 s completes with a tool error (isError)"
    )]
    async fn failing_job(
        &self,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        tasks_required(&context)?;
        let task = self.shared.tasks.spawn(TaskOptions::default(), |task| {
            Box::pin(async move {
                tokio::select! {
                    () = task.cancelled() => Err(TaskExit::Cancelled),
                    () = tokio::time::sleep(Duration::from_secs(1)) => Ok(CallToolResult::error(
                        vec![ContentBlock::text("failing_job: intentional tool execution error")],
                    )),
                }
            })
        });
        Ok(CreateTaskResult::new(task).into())
    }

    #[tool(description = "Tasks fixture: task-supporting; fails with a protocol-level error")]
    async fn protocol_error_job(
        &self,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let failure = || McpError::internal_error("protocol_error_job: intentional failure", None);
        if !client_supports_tasks(&context) {
            tokio::time::sleep(Duration::from_millis(200)).await;
            return Err(failure());
        }
        let task = self
            .shared
            .tasks
            .spawn(TaskOptions::default(), move |_task| {
                Box::pin(async move {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    Err(TaskExit::Error(failure()))
                })
            });
        Ok(CreateTaskResult::new(task).into())
    }

    #[tool(
        description = "Tasks fixture: task-required; parks on one elicitation (confirm) delivered through tasks/update"
    )]
    async fn confirm_delete(
        &self,
        context: RequestContext<RoleServer>,
        Parameters(args): Parameters<ConfirmDeleteArgs>,
    ) -> Result<CallToolResponse, McpError> {
        tasks_required(&context)?;
        let filename = args.filename.unwrap_or_else(|| "file.txt".to_owned());
        let task = self
            .shared
            .tasks
            .spawn(TaskOptions::default(), move |task| {
                Box::pin(async move {
                    let request = elicitation(&format!("Delete {filename}?"), "confirm", "boolean");
                    let response = ask(&task, "confirm", request).await?;
                    Ok(text(format!(
                        "confirm_delete({filename}): confirm={}",
                        elicited(&response, "confirm")
                    )))
                })
            });
        Ok(CreateTaskResult::new(task).into())
    }

    #[tool(
        description = "Tasks fixture: task-required; parks on two elicitations at once (input_a, input_b)"
    )]
    async fn multi_input(
        &self,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        tasks_required(&context)?;
        let task = self.shared.tasks.spawn(TaskOptions::default(), |task| {
            Box::pin(async move {
                let first = ask(
                    &task,
                    "input_a",
                    elicitation("Provide value A", "value", "string"),
                );
                let second = ask(
                    &task,
                    "input_b",
                    elicitation("Provide value B", "value", "string"),
                );
                let (first, second) = tokio::join!(first, second);
                let (first, second) = (first?, second?);
                Ok(text(format!(
                    "multi_input: a={}, b={}",
                    elicited(&first, "value"),
                    elicited(&second, "value")
                )))
            })
        });
        Ok(CreateTaskResult::new(task).into())
    }

    #[tool(
        description = "Tasks fixture: task-required; round 1 asks user_name (InputRequiredResult), round 2 creates a task that greets"
    )]
    async fn test_tool_with_task(
        &self,
        context: RequestContext<RoleServer>,
        InputResponsesPart(responses): InputResponsesPart,
    ) -> Result<CallToolResponse, McpError> {
        tasks_required(&context)?;
        let questions = vec![Question::elicit(
            "user_name",
            "What is your name?",
            single_field_schema("name", "string"),
        )];
        let name = match input::gather(&context, responses.as_ref(), questions).await? {
            Gathered::Complete(answers) => answers
                .get("user_name")
                .and_then(|answer| answer.field("name"))
                .unwrap_or_else(|| "friend".to_owned()),
            Gathered::InputRequired(requests) => {
                return Ok(InputRequiredResult::from_input_requests(requests).into());
            }
        };
        let task = self
            .shared
            .tasks
            .spawn(TaskOptions::default(), move |task| {
                Box::pin(async move {
                    tokio::select! {
                        () = task.cancelled() => Err(TaskExit::Cancelled),
                        () = tokio::time::sleep(Duration::from_millis(200)) => {
                            Ok(text(format!("Hello, {name}! (from a task)")))
                        }
                    }
                })
            });
        Ok(CreateTaskResult::new(task).into())
    }
}
