//! Example servers.
//!
//! [`Everything`] is the conformance "everything" server: a plain rmcp
//! [`ServerHandler`](rmcp::ServerHandler) that exposes every fixture the official MCP
//! conformance suite probes, in both protocol eras, plus the durability fixtures.
//!
//! [`Provisioning`] is a realistic durable workflow (reserve, confirm, charge, boot,
//! notify) written the way a handler author would write one.

pub mod everything;
pub mod provisioning;

pub use everything::Everything;
pub use provisioning::Provisioning;
