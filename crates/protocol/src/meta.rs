//! The `_meta` keys durable-mcp reads or writes, one constant each.

/// Ties a message to its task (2025-11-25 tasks).
pub const RELATED_TASK: &str = "io.modelcontextprotocol/related-task";
/// The client's capabilities, per request (2026-07-28).
pub const CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
/// The server's `serverInfo`, on every result (2026-07-28).
pub const SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";
/// Ties a notification to its `subscriptions/listen` subscription (2026-07-28).
pub const SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";
/// In an error's `data`: the handler waits for the client's input (stateless era); the
/// engine replaces such an outcome with an `input_required` result.
pub const SUSPENDED: &str = "durable-mcp/suspended";
