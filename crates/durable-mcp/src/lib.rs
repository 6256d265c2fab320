//! durable-mcp durable-mcp.
