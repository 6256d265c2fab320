//! The `_meta` keys durable-mcp reads or writes, one constant each.

/// Ties a message to its task (2025-11-25 tasks).
pub const RELATED_TASK: &str = "io.modelcontextprotocol/related-task";
/// The request's protocol version (2026-07-28).
pub const PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
/// The client's name and version, per request (2026-07-28).
pub const CLIENT_INFO: &str = "io.modelcontextprotocol/clientInfo";
/// The lowest log level the client wants on this request's stream (2026-07-28).
pub const LOG_LEVEL: &str = "io.modelcontextprotocol/logLevel";
/// The client's capabilities, per request (2026-07-28).
pub const CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
/// The server's `serverInfo`, on every result (2026-07-28).
pub const SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";
/// Ties a notification to its `subscriptions/listen` subscription (2026-07-28).
pub const SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";
/// In an error's `data`: the handler waits for the client's input (stateless era); the
/// engine replaces such an outcome with an `input_required` result.
pub const SUSPENDED: &str = "durable-mcp/suspended";
/// In an error's `data`: the handler's error is worth a retry after a fix (an upstream
/// down, a bug): the engine parks the run for an operator instead of answering, where its
/// client can read a later outcome.
pub const RETRYABLE: &str = "durable-mcp/retryable";
