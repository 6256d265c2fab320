//! durable-mcp engine.
