//! Example servers.
//!
//! [`Everything`] is the conformance "everything" server: a plain rmcp
//! [`ServerHandler`](rmcp::ServerHandler) that exposes every fixture the official MCP
//! conformance suite probes, in both protocol eras.

pub mod everything;

pub use everything::Everything;
