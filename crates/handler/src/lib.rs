//! What a durable-mcp handler sees, and the only crate that names [`rmcp`]: the [`Durable`]
//! context (steps, questions, request-state sealing), session and server state, the
//! [`Outbox`], the caller's [`AuthInfo`], a tool's task support, the adapter that runs an
//! rmcp `ServerHandler` for the engine ([`McpHandler`]), and [`Forward`], the handler that
//! forwards to an upstream MCP server. A future rmcp major version touches this crate alone.

mod adapter;
pub mod auth;
pub mod context;
pub mod durable;
pub mod forward;
pub mod outbox;
pub mod state_keys;
pub mod tasks;

pub use adapter::{Closed, McpHandler, NOTIFY_WINDOW, Outbound, PeerContext, Run, ServerSummary};
pub use auth::{AuthInfo, REQUIRED_SCOPES_META, merge_meta, required_scopes};
pub use context::{ServerState, SessionState, StateBackend, StateError};
pub use durable::{
    Durable, DurableBackend, DurableError, Retry, SealError, ServerChange, StateSealer, StepKey,
};
pub use forward::{Forward, Questions, Upstream, UpstreamError, UpstreamRequest};
pub use outbox::{Outbox, OutboxBackend, OutboxError};
pub use state_keys::{KeyRing, RingKey, StateKeyError, StateKeys};
pub use tasks::{TaskSupport, task_support};

/// rmcp itself, for handler authors (`#[tool_router]`, models, `ServerHandler`).
pub use rmcp;
