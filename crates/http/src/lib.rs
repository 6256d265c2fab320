//! durable-mcp http.
