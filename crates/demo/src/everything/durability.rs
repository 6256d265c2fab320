//! The durability fixtures: tools that check durable-mcp's guarantees from outside.
//!
//! * `steps` runs `count` durable steps; each appends `<step index> <idempotency key>` to a
//!   ledger file, then sleeps `step_ms`. Kill the worker during a step and count the
//!   ledger's lines: a committed step never appears twice (D8), an interrupted one at most
//!   twice, with the same key both times.
//!   With `poison` (a file whose name ends in `.poison`) and `poison_at`, step `poison_at`
//!   fails before its effect while that file exists: it ends the call with a retryable
//!   error (the run is parked for an operator), or with `poison_crash` kills the worker's
//!   process, as a poisoned tool would. Deleting the file is the fix.
//! * `ask` elicits an answer through the durable context (asked once, D9), records it in a
//!   step and returns it.
//! * `consult` asks for the client's roots, then its model: two durable questions in a row
//!   (in a stateless request, two `input_required` rounds of one run).

use std::io::Write;
use std::time::Duration;

use durable_mcp_handler::{Durable, DurableError, TaskSupport, task_support};
use rmcp::handler::server::tool::Extension;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{
    CallToolResult, ContentBlock, CreateMessageRequestParams, ElicitRequestParams,
    ElicitationAction, SamplingMessage,
};
use rmcp::{ErrorData as McpError, tool, tool_router};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

use super::{Everything, fixtures};

/// The only file names `steps` writes to: the fixture appends to a path its client names,
/// so it refuses anything that is not plainly a ledger.
const LEDGER_SUFFIX: &str = ".ledger";

/// Arguments of `steps`.
#[derive(Debug, Deserialize, JsonSchema)]
pub(super) struct StepsArgs {
    /// How many durable steps to run (at most 1000).
    count: u32,
    /// Milliseconds each step sleeps after its effect.
    #[serde(default)]
    step_ms: u64,
    /// A file (name ending in `.ledger`) each step appends `<index> <idempotency key>` to.
    #[serde(default)]
    ledger: Option<String>,
    /// A file (name ending in `.poison`): while it exists, step `poison_at` fails.
    #[serde(default)]
    poison: Option<String>,
    /// The step that fails while `poison` exists (1 = the first).
    #[serde(default)]
    poison_at: u32,
    /// Fail by killing the worker's process instead of with a retryable error.
    #[serde(default)]
    poison_crash: bool,
}

/// The only file names `steps` reads as poison.
const POISON_SUFFIX: &str = ".poison";

/// Arguments of `consult`.
#[derive(Debug, Deserialize, JsonSchema)]
pub(super) struct ConsultArgs {
    /// What to ask the client's model.
    prompt: String,
}

/// Arguments of `ask`.
#[derive(Debug, Deserialize, JsonSchema)]
pub(super) struct AskArgs {
    /// The question to ask the user.
    question: String,
    /// Milliseconds to wait (in a durable step) after recording the answer, before
    /// returning: a window in which to kill the worker.
    #[serde(default)]
    then_ms: u64,
}

fn append_line(path: &str, line: &str) -> std::io::Result<()> {
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?;
    file.write_all(line.as_bytes())?;
    file.sync_data()
}

#[tool_router(router = durability_router, vis = "pub(super)")]
impl Everything {
    #[tool(
        description = "Durability fixture: runs count durable steps; each appends '<index> <idempotency key>' to the ledger file (name ending in .ledger), then sleeps step_ms. Returns the step indexes.",
        meta = task_support(TaskSupport::Optional)
    )]
    async fn steps(
        &self,
        Extension(durable): Extension<Durable>,
        Parameters(args): Parameters<StepsArgs>,
    ) -> Result<CallToolResult, McpError> {
        if args.count > 1000 {
            return Err(McpError::invalid_params("count must be at most 1000", None));
        }
        if let Some(ledger) = &args.ledger
            && !ledger.ends_with(LEDGER_SUFFIX)
        {
            return Err(McpError::invalid_params(
                format!("ledger must name a file ending in {LEDGER_SUFFIX}"),
                None,
            ));
        }
        if let Some(poison) = &args.poison
            && !poison.ends_with(POISON_SUFFIX)
        {
            return Err(McpError::invalid_params(
                format!("poison must name a file ending in {POISON_SUFFIX}"),
                None,
            ));
        }
        let mut done = Vec::new();
        for index in 1..=args.count {
            if index == args.poison_at
                && let Some(poison) = &args.poison
                && std::path::Path::new(poison).exists()
            {
                if args.poison_crash {
                    tracing::error!(step = index, "steps: poisoned; killing the worker");
                    std::process::abort();
                }
                return Err(DurableError::retryable(format!(
                    "step {index} is poisoned ({poison} exists)"
                ))
                .into());
            }
            let ledger = args.ledger.clone();
            let step_ms = args.step_ms;
            let result: Result<u32, String> = durable
                .step(&format!("step-{index}"), |key| async move {
                    if let Some(path) = ledger {
                        append_line(&path, &format!("{index} {}\n", key.idempotency_key()))
                            .map_err(|e| e.to_string())?;
                    }
                    tokio::time::sleep(Duration::from_millis(step_ms)).await;
                    Ok(index)
                })
                .await?;
            done.push(
                result.map_err(|e| McpError::internal_error(format!("step {index}: {e}"), None))?,
            );
            let message = format!("step {index} of {}", args.count);
            durable
                .progress(
                    f64::from(index),
                    Some(f64::from(args.count)),
                    Some(&message),
                )
                .await?;
        }
        let mut result = CallToolResult::success(vec![ContentBlock::text(json!(done).to_string())]);
        result.structured_content = Some(json!({ "steps": done }));
        Ok(result)
    }

    #[tool(
        description = "Durability fixture: asks the user the question once (durable elicitation), records the answer in a durable step, waits then_ms (durable sleep) and returns it.",
        meta = task_support(TaskSupport::Optional)
    )]
    async fn ask(
        &self,
        Extension(durable): Extension<Durable>,
        Parameters(args): Parameters<AskArgs>,
    ) -> Result<CallToolResult, McpError> {
        let params = ElicitRequestParams::FormElicitationParams {
            meta: None,
            message: args.question.clone(),
            requested_schema: fixtures::single_field_schema("answer", "string"),
        };
        let answer = durable.elicit(params).await?;
        let recorded: String = durable
            .step("record", |_| async move {
                match answer.action {
                    ElicitationAction::Accept => answer
                        .content
                        .as_ref()
                        .and_then(|c| c.get("answer"))
                        .and_then(|a| a.as_str())
                        .unwrap_or_default()
                        .to_owned(),
                    ElicitationAction::Decline => "(declined)".to_owned(),
                    _ => "(cancelled)".to_owned(),
                }
            })
            .await
            .map_err(McpError::from)?;
        if args.then_ms > 0 {
            durable
                .sleep("then", Duration::from_millis(args.then_ms))
                .await?;
        }
        Ok(CallToolResult::success(vec![ContentBlock::text(recorded)]))
    }
    #[tool(
        description = "Durability fixture: asks for the client's roots, then its model (durable roots/list and sampling/createMessage, each asked once) and returns how many roots, the model and its text.",
        meta = task_support(TaskSupport::Optional)
    )]
    #[allow(deprecated)] // sampling and roots are deprecated upstream (SEP-2577), still served
    async fn consult(
        &self,
        Extension(durable): Extension<Durable>,
        Parameters(args): Parameters<ConsultArgs>,
    ) -> Result<CallToolResult, McpError> {
        let roots = durable.list_roots().await?;
        let params =
            CreateMessageRequestParams::new(vec![SamplingMessage::user_text(args.prompt)], 100);
        let answer = durable.sample(params).await?;
        let message = serde_json::to_value(&answer.message).unwrap_or_default();
        let text = message
            .pointer("/content/text")
            .and_then(|t| t.as_str())
            .unwrap_or_default()
            .to_owned();
        let value = json!({"roots": roots.roots.len(), "model": answer.model, "text": text});
        let mut result = CallToolResult::success(vec![ContentBlock::text(value.to_string())]);
        result.structured_content = Some(value);
        Ok(result)
    }
}
