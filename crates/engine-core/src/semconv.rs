//! Names of the OpenTelemetry MCP semantic conventions that metrics and traces share, so
//! that neither module imports the other for them.

/// `error.type` of a tool result with `isError: true` (as the semantic conventions say).
pub const TOOL_ERROR: &str = "tool_error";
/// `mcp.method.name` of a method outside the protocol's set (bounded cardinality).
pub const OTHER: &str = "_OTHER";
