//! Which tools run as durable tasks.
//!
//! A tool declares its task support in its `_meta`, with [`task_support`] in rmcp's
//! `#[tool(meta = ...)]` attribute:
//!
//! ```no_run
//! use durable_mcp_handler::{Durable, TaskSupport, task_support};
//! use rmcp::handler::server::tool::Extension;
//! use rmcp::model::{CallToolResult, ContentBlock};
//! use rmcp::{ErrorData as McpError, tool, tool_router};
//!
//! #[derive(Clone)]
//! struct Provisioner;
//!
//! #[tool_router]
//! impl Provisioner {
//!     #[tool(description = "Provision a server", meta = task_support(TaskSupport::Optional))]
//!     async fn provision(&self, Extension(durable): Extension<Durable>) -> Result<CallToolResult, McpError> {
//!         let id: String = durable.step("create", |key| async move { format!("srv-{}", key.idempotency_key()) }).await?;
//!         Ok(CallToolResult::success(vec![ContentBlock::text(id)]))
//!     }
//! }
//! ```
//!
//! (`examples/tasks` in the repository is a whole server.)
//!
//! durable-mcp then turns calls of that tool into durable tasks: on 2026-07-28 when the
//! client declared the `io.modelcontextprotocol/tasks` extension (server-directed), on
//! 2025-11-25 when the request carries `params.task`. The handler is an ordinary tool:
//! its result (or error) becomes the task's, and its durable questions become the task's
//! `input_required` state.

use rmcp::model::MetaObject;
use serde_json::Value;

/// The `_meta` key under which a tool declares its task support.
pub const TASK_SUPPORT_META: &str = "io.durable-mcp/taskSupport";

/// Whether a tool runs as a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TaskSupport {
    /// Never (the default): the call is answered directly.
    #[default]
    Forbidden,
    /// When the client can use tasks.
    Optional,
    /// Only as a task: clients that cannot use tasks are refused.
    Required,
}

impl TaskSupport {
    /// The spec's name (`forbidden`, `optional`, `required`).
    pub fn as_str(self) -> &'static str {
        match self {
            TaskSupport::Forbidden => "forbidden",
            TaskSupport::Optional => "optional",
            TaskSupport::Required => "required",
        }
    }

    fn parse(value: &Value) -> Self {
        match value.as_str() {
            Some("optional") => TaskSupport::Optional,
            Some("required") => TaskSupport::Required,
            _ => TaskSupport::Forbidden,
        }
    }
}

/// The tool `_meta` declaring `support`, for `#[tool(meta = task_support(...))]`.
pub fn task_support(support: TaskSupport) -> MetaObject {
    let mut meta = serde_json::Map::new();
    meta.insert(
        TASK_SUPPORT_META.into(),
        Value::String(support.as_str().into()),
    );
    MetaObject(meta)
}

/// The task support a tool's `_meta` declares.
pub(crate) fn declared(meta: Option<&MetaObject>) -> TaskSupport {
    meta.and_then(|m| m.0.get(TASK_SUPPORT_META))
        .map_or(TaskSupport::Forbidden, TaskSupport::parse)
}
