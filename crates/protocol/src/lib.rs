//! durable-mcp protocol.
