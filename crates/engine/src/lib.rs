//! The durable-mcp engine: the request path of both protocol eras, written against the
//! [store contract](durable_mcp_store::Store) and the [protocol adapter](durable_mcp_protocol).
//!
//! The request path has one door in and one door out:
//! - [`Engine::accept`] is the only place a request is accepted: its response stream is
//!   committed, then its handler starts.
//! - `commit` (in `run.rs`) is the only place a handler's messages, its outcome included,
//!   become events: each is appended to the store before any transport can send it (D1).
//!
//! Transports (HTTP, stdio) read the events back through [`Engine::tail`].

mod error;
mod run;
mod session;
mod tail;

use std::sync::Arc;
use std::time::Duration;

use durable_mcp_protocol::{McpHandler, ServerSummary};
use durable_mcp_store::Store;

pub use error::EngineError;
pub use run::{Accepted, Caller, Era};
pub use tail::tail;

/// Settings of the engine.
#[derive(Debug, Clone)]
pub struct EngineOptions {
    /// The `retry` hint sent with the priming event of 2025-11-25 streams.
    pub sse_retry: Duration,
}

impl Default for EngineOptions {
    fn default() -> Self {
        Self { sse_retry: Duration::from_millis(500) }
    }
}

/// The engine: one per worker, shared by its transports.
#[derive(Clone)]
pub struct Engine {
    inner: Arc<Inner>,
}

struct Inner {
    store: Arc<dyn Store>,
    handler: McpHandler,
    summary: ServerSummary,
    options: EngineOptions,
    runs: run::Registry,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine").field("store", &self.inner.store.backend()).finish_non_exhaustive()
    }
}

impl Engine {
    /// An engine serving `handler` on `store`.
    pub fn new(store: Arc<dyn Store>, handler: McpHandler, options: EngineOptions) -> Self {
        let summary = handler.summary();
        Self { inner: Arc::new(Inner { store, handler, summary, options, runs: run::Registry::default() }) }
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.inner.store
    }

    /// The handler.
    pub fn handler(&self) -> &McpHandler {
        &self.inner.handler
    }

    /// The server's static information, read once at start.
    pub fn summary(&self) -> &ServerSummary {
        &self.inner.summary
    }

    /// The options.
    pub fn options(&self) -> &EngineOptions {
        &self.inner.options
    }
}
