//! # durable-mcp
//!
//! MCP servers that never lose a request. Bring an [`rmcp`] `ServerHandler` (typically
//! built with `#[tool_router]`), and serve it over Streamable HTTP with sessions and SSE
//! streams kept in a store rather than in one process's memory:
//!
//! ```no_run
//! // rmcp's macros expand to `rmcp::...` paths: bring durable-mcp's re-export into scope
//! // (or depend on the same rmcp version directly).
//! use durable_mcp::rmcp::{self, ServerHandler, handler::server::router::tool::ToolRouter, tool, tool_handler, tool_router};
//!
//! #[derive(Clone)]
//! struct Hello {
//!     tool_router: ToolRouter<Self>,
//! }
//!
//! #[tool_router]
//! impl Hello {
//!     #[tool(description = "Say hello")]
//!     async fn hello(&self) -> String {
//!         "Hello, durable world".to_owned()
//!     }
//! }
//!
//! #[tool_handler]
//! impl ServerHandler for Hello {}
//!
//! #[tokio::main]
//! async fn main() -> Result<(), durable_mcp::Error> {
//!     durable_mcp::DurableMcp::new(Hello { tool_router: Hello::tool_router() })
//!         .bind("127.0.0.1:8080".parse().expect("address"))
//!         .serve()
//!         .await
//! }
//! ```
//!
//! See [`DurableMcp`] for the options, and `DURABILITY.md` for what is guaranteed.

use std::net::SocketAddr;
use std::sync::Arc;

pub use durable_mcp_engine::{Engine, EngineOptions, inspect};
pub use durable_mcp_http::{DEFAULT_MAX_GET_STREAMS_PER_SESSION, HttpConfig, Transport as HttpTransport};
pub use durable_mcp_protocol::{
    Durable, DurableError, McpHandler, Retry, ServerChange, ServerState, SessionState, StateError, StepKey, TaskSupport, rmcp,
    task_support,
};
pub use durable_mcp_store::{EventId, PruneReport, Retention, Store, StoreError, now_ms};
pub use durable_mcp_store_memory::MemoryStore;
pub use durable_mcp_store_postgres::{PgOptions, PgStore};
pub use durable_mcp_store_redis::{RedisOptions, RedisStore};
pub use durable_mcp_store_sqlite::{SqliteOptions, SqliteStore};

/// The store used when none is configured: a SQLite file in the working directory.
pub const DEFAULT_STORE_URL: &str = "sqlite:./durable-mcp.db";

/// Errors of building or running a server.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The store URL is not one durable-mcp knows.
    #[error("unsupported store URL {0:?} (expected memory:, sqlite:PATH, postgres://... or redis://...)")]
    UnsupportedStore(String),
    /// Binding or serving failed.
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Open the store named by `url`: the one place a backend is chosen by URL scheme.
///
/// - `memory:` — in-process, lost on exit (tests, development).
/// - `sqlite:PATH[?synchronous=full|normal|off&max_events=N]` — the embedded default.
/// - `postgres://USER@HOST:PORT/DB[?schema=NAME&...]` — shared by many workers.
/// - `redis://HOST:PORT[/DB][?prefix=NAME&...]` — shared by many workers.
pub async fn open_store(url: &str) -> Result<Arc<dyn Store>, Error> {
    match url.split_once(':').map(|(scheme, _)| scheme) {
        Some("memory") => Ok(Arc::new(MemoryStore::new())),
        Some("sqlite") => Ok(Arc::new(SqliteStore::open_url(url).await?)),
        Some("postgres" | "postgresql") => Ok(Arc::new(PgStore::open_url(url).await?)),
        Some("redis") => Ok(Arc::new(RedisStore::open_url(url).await?)),
        _ => Err(Error::UnsupportedStore(url.to_owned())),
    }
}

/// Create or upgrade the schema of the store named by `url` and return its version; `None`
/// for backends without a schema (memory, Redis). Opening a store migrates it too; this is
/// for running the migration once, before starting workers.
pub async fn migrate_store(url: &str) -> Result<Option<i64>, Error> {
    match url.split_once(':').map(|(scheme, _)| scheme) {
        Some("sqlite") => {
            SqliteStore::open_url(url).await?;
            Ok(Some(durable_mcp_store_sqlite::SCHEMA_VERSION))
        }
        Some("postgres" | "postgresql") => Ok(Some(PgStore::open_url(url).await?.migrate().await?)),
        Some("memory" | "redis") => {
            open_store(url).await?;
            Ok(None)
        }
        _ => Err(Error::UnsupportedStore(url.to_owned())),
    }
}

/// A durable MCP server: the first thing to read.
///
/// `DurableMcp::new(handler)` takes any rmcp `ServerHandler + Clone` (cloned once per
/// request, so keep shared state behind `Arc`s) and serves it with:
///
/// - **store**: where sessions and streams live. Default: the SQLite file
///   [`DEFAULT_STORE_URL`]. Set one with [`store`](Self::store) or
///   [`store_url`](Self::store_url) (`memory:`, `sqlite:PATH`).
/// - **bind address**: default `127.0.0.1:8080` (loopback: safe by default).
/// - **path**: default `/mcp`.
/// - **HTTP options** ([`HttpConfig`]): allowed hosts/origins (DNS-rebinding protection),
///   body limit, JSON responses, SSE keep-alive and polling.
///
/// [`serve`](Self::serve) runs until Ctrl-C or SIGTERM and then shuts down gracefully.
/// [`into_router`](Self::into_router) gives an axum `Router` to mount in your own app.
pub struct DurableMcp {
    handler: McpHandler,
    store: Option<Arc<dyn Store>>,
    bind: SocketAddr,
    http: HttpConfig,
    engine: EngineOptions,
    shutdown_grace: std::time::Duration,
}

impl DurableMcp {
    /// A server for `handler`, with the defaults above.
    pub fn new<H>(handler: H) -> Self
    where
        H: rmcp::ServerHandler + Clone,
    {
        Self {
            handler: McpHandler::new(handler),
            store: None,
            bind: SocketAddr::from(([127, 0, 0, 1], 8080)),
            http: HttpConfig::default(),
            engine: EngineOptions::default(),
            shutdown_grace: std::time::Duration::from_secs(10),
        }
    }

    /// On shutdown, wait this long for journaled requests in flight to finish before
    /// handing their leases to other workers (default 10 s; D7).
    pub fn shutdown_grace(mut self, grace: std::time::Duration) -> Self {
        self.shutdown_grace = grace;
        self
    }

    /// Use this store.
    pub fn store(mut self, store: Arc<dyn Store>) -> Self {
        self.store = Some(store);
        self
    }

    /// Use the store named by `url` (see [`open_store`]).
    pub async fn store_url(self, url: &str) -> Result<Self, Error> {
        let store = open_store(url).await?;
        Ok(self.store(store))
    }

    /// Listen on this address.
    pub fn bind(mut self, addr: SocketAddr) -> Self {
        self.bind = addr;
        self
    }

    /// Serve the endpoint at this path (default `/mcp`).
    pub fn path(mut self, path: impl Into<String>) -> Self {
        self.http.path = path.into();
        self
    }

    /// Replace the HTTP options (the path set by [`path`](Self::path) is part of them).
    pub fn http_config(mut self, config: HttpConfig) -> Self {
        self.http = config;
        self
    }

    /// Replace the engine options.
    pub fn engine_options(mut self, options: EngineOptions) -> Self {
        self.engine = options;
        self
    }

    /// The engine this server runs (for custom transports, such as stdio). Opens the
    /// default store if none was set.
    pub async fn engine(&self) -> Result<Engine, Error> {
        let store = match &self.store {
            Some(store) => store.clone(),
            None => open_store(DEFAULT_STORE_URL).await?,
        };
        Ok(Engine::new(store, self.handler.clone(), self.engine.clone()))
    }

    /// An axum router serving the endpoint, to mount in a larger application.
    pub async fn into_router(self) -> Result<axum::Router, Error> {
        Ok(HttpTransport::new(self.engine().await?, self.http).router())
    }

    /// Bind and serve until Ctrl-C or SIGTERM.
    pub async fn serve(self) -> Result<(), Error> {
        let listener = tokio::net::TcpListener::bind(self.bind).await?;
        self.serve_on(listener, shutdown_signal()).await
    }

    /// Serve on an already-bound listener until `shutdown` resolves.
    pub async fn serve_on(
        self,
        listener: tokio::net::TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), Error> {
        tracing::info!(addr = %listener.local_addr()?, path = %self.http.path, "durable-mcp serving");
        let engine = self.engine().await?;
        let pruner = engine.spawn_pruner();
        // Resumes this worker's own unfinished requests at once, then takes over those
        // of workers whose leases expire (D7).
        let recovery = engine.spawn_recovery();
        let transport = HttpTransport::new(engine.clone(), self.http);
        let served = durable_mcp_http::serve(listener, transport, shutdown).await;
        recovery.abort();
        pruner.abort();
        engine.drain(self.shutdown_grace).await;
        served?;
        Ok(())
    }

    /// Serve over stdin/stdout (for a desktop client that launches the server).
    pub async fn serve_stdio(self) -> Result<(), Error> {
        durable_mcp_stdio::serve(self.engine().await?, tokio::io::stdin(), tokio::io::stdout()).await?;
        Ok(())
    }
}

/// Resolves on Ctrl-C or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(error) = tokio::signal::ctrl_c().await {
            tracing::warn!(%error, "cannot listen for Ctrl-C");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(error) => {
                tracing::warn!(%error, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
    tracing::info!("shutting down");
}
