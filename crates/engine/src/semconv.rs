//! Names of the OpenTelemetry MCP semantic conventions that metrics and traces share, so
//! that neither module imports the other for them.

use serde_json::Value;

/// `error.type` of a tool result with `isError: true` (as the semantic conventions say).
pub const TOOL_ERROR: &str = "tool_error";
/// `mcp.method.name` of a method outside the protocol's set (bounded cardinality).
pub const OTHER: &str = "_OTHER";

/// Whether `outcome` is a tool result with `isError: true` (a plain lookup: every answer
/// passes here).
pub(crate) fn is_tool_error(outcome: &Value) -> bool {
    outcome
        .get("result")
        .and_then(|result| result.get("isError"))
        == Some(&Value::Bool(true))
}
