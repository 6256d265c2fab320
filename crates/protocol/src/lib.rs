//! MCP framing for durable-mcp: JSON-RPC messages read once at the door ([`jsonrpc`]),
//! the method names it routes on ([`methods`]), the protocol versions ([`McpVersion`]), the
//! `_meta` keys ([`meta`]) and the Tasks extension's wire names ([`tasks`]).
//!
//! Independent of rmcp and of any transport: a malformed message is rejected here, before
//! any handler sees it. What a handler sees lives in `durable-mcp-handler`.

pub mod jsonrpc;
pub mod meta;
pub mod methods;
pub mod tasks;
mod version;

pub use version::{McpVersion, UnknownVersion};

/// A notification a handler sends (through its rmcp peer) to ask the transport to close the
/// current SSE connection of its request without ending the stream: the client resumes with
/// `GET` + `Last-Event-ID` (SSE polling, 2025-11-25). It is never forwarded to the client.
pub const CLOSE_SSE_STREAM_METHOD: &str = "notifications/durable-mcp/close_sse_stream";
