//! durable-mcp stdio.
