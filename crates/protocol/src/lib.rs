//! The protocol adapter of durable-mcp: JSON-RPC framing, and the only place that names
//! [`rmcp`]. A future rmcp major version touches this crate alone.

mod adapter;
pub mod auth;
#[cfg(feature = "rmcp-baseline")]
mod baseline;
pub mod context;
pub mod durable;
pub mod forward;
pub mod jsonrpc;
pub mod meta;
pub mod methods;
pub mod outbox;
pub mod state_keys;
pub mod tasks;
mod version;

pub use adapter::{Closed, McpHandler, NOTIFY_WINDOW, Outbound, PeerContext, Run, ServerSummary};
pub use auth::{AuthInfo, REQUIRED_SCOPES_META, merge_meta, required_scopes};
#[cfg(feature = "rmcp-baseline")]
pub use baseline::{RMCP_BASELINE_PATH, serve_rmcp_baseline};
pub use context::{ServerState, SessionState, StateBackend, StateError};
pub use durable::{
    Durable, DurableBackend, DurableError, Retry, SealError, ServerChange, StateSealer, StepKey,
};
pub use forward::{Forward, Questions, Upstream, UpstreamError, UpstreamRequest};
pub use outbox::{Outbox, OutboxBackend, OutboxError};
pub use state_keys::{KeyRing, RingKey, StateKeyError, StateKeys};
pub use tasks::{TaskSupport, task_support};
pub use version::{McpVersion, UnknownVersion};
/// A notification a handler sends (through its rmcp peer) to ask the transport to close the
/// current SSE connection of its request without ending the stream: the client resumes with
/// `GET` + `Last-Event-ID` (SSE polling, 2025-11-25). It is never forwarded to the client.
pub const CLOSE_SSE_STREAM_METHOD: &str = "notifications/durable-mcp/close_sse_stream";

/// rmcp itself, for handler authors (`#[tool_router]`, models, `ServerHandler`).
pub use rmcp;
