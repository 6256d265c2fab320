//! The protocol adapter of durable-mcp: JSON-RPC framing, and the only place that names
//! [`rmcp`]. A future rmcp major version touches this crate alone.

mod adapter;
pub mod jsonrpc;

pub use adapter::{Closed, LEGACY_VERSIONS, MODERN_VERSION, McpHandler, Outbound, PeerContext, Run, ServerSummary};
/// rmcp itself, for handler authors (`#[tool_router]`, models, `ServerHandler`).
pub use rmcp;
