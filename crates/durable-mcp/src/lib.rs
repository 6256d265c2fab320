//! # durable-mcp
//!
//! MCP servers that never lose a request. Bring an [`rmcp`] `ServerHandler` (typically
//! built with `#[tool_router]`), and serve it over Streamable HTTP with sessions and SSE
//! streams kept in a store rather than in one process's memory. Hello world (the file
//! `examples/hello-world/src/main.rs`, compiled here as a doctest):
//!
//! ```no_run
#![doc = include_str!("../doc/hello-world.rs")]
//! ```
//!
//! The `examples/` folder of the repository has one small crate per idea: hello world,
//! durable steps and questions, tasks, several workers on PostgreSQL, and a durable
//! endpoint mounted in an existing axum app ([`DurableMcp::embed`]).
//!
//! To test a server, the `testing` feature adds `testing::TestServer` and
//! `testing::TestClient`: the server runs in process with its background duties, clients
//! speak either protocol era (2025-11-25 sessions, 2026-07-28 stateless requests) and
//! collect each answer's notifications, and `TestServer::restart` simulates a restart on
//! the same store (`docs/testing.md`).
//!
//! Cargo features: `sqlite` (the default store), `postgres`, `redis`, `auth` (OAuth),
//! `metrics`, `otlp` and `testing`; a store URL whose backend is off is refused naming its feature
//! (`docs/features.md`).
//!
//! See [`DurableMcp`] for the options, and [`guarantees`] (the project's `docs/guarantees.md`)
//! for what is guaranteed: the promises D1..D15 that the docs and tests name.

#[doc = include_str!("../doc/guarantees.md")]
pub mod guarantees {}

#[cfg(feature = "metrics")]
pub mod metrics;
#[cfg(feature = "testing")]
pub mod testing;
#[cfg(feature = "otlp")]
pub mod traces;

use std::net::SocketAddr;
use std::sync::Arc;

/// The axum version the endpoint's [`Router`](axum::Router) belongs to, for mounting it
/// with [`DurableMcp::embed`].
pub use axum;
/// What a handler uses: the durable context of a call, session and server state, tasks.
pub use durable_mcp_handler::{
    AuthInfo, Durable, DurableError, McpHandler, Retry, ServerChange, ServerState, SessionState,
    StateError, StepKey, TaskSupport, merge_meta, required_scopes, rmcp, task_support,
};

/// The names a durable server's code uses most: `use durable_mcp::prelude::*;`.
///
/// [`DurableMcp`] and a handler's durable context and state, with rmcp's handler trait, its
/// macros and error type, and the wrappers a tool's parameters come in.
pub mod prelude {
    pub use crate::rmcp::handler::server::tool::Extension;
    pub use crate::rmcp::handler::server::wrapper::Parameters;
    pub use crate::rmcp::{
        self, ErrorData as McpError, ServerHandler, tool, tool_handler, tool_router,
    };
    pub use crate::{
        Durable, DurableError, DurableMcp, Retry, ServerState, SessionState, StateError, StepKey,
        TaskSupport, task_support,
    };
}

/// Authentication (see `docs/security.md`): set one with [`DurableMcp::auth`].
pub mod auth {
    pub use durable_mcp_auth::{
        ApiKey, ApiKeys, AuthError, Authenticated, Authenticator, Cidr, ConfigError, ScopeRules,
        TrustedProxy,
    };
    #[cfg(feature = "auth")]
    pub use durable_mcp_auth::{IntrospectionConfig, OAuth, OAuthConfig, oauth_principal};
}

/// The store contract and its backends, for [`DurableMcp::store`] and tools that read a
/// store; [`open_store`] opens one from a URL.
pub mod store {
    pub use durable_mcp_store::{EventId, PruneReport, Retention, Store, StoreError, now_ms};
    pub use durable_mcp_store_memory::MemoryStore;
    #[cfg(feature = "postgres")]
    pub use durable_mcp_store_postgres::{PgOptions, PgStore};
    #[cfg(feature = "redis")]
    pub use durable_mcp_store_redis::{RedisOptions, RedisStore};
    #[cfg(feature = "sqlite")]
    pub use durable_mcp_store_sqlite::{SqliteOptions, SqliteStore};
}

/// The engine behind the endpoint: its options, limits per principal, the `requestState`
/// key ring, and reading what is in flight.
pub mod engine {
    /// The engine, for [`DurableMcp::run_with_engine`](crate::DurableMcp::run_with_engine).
    /// Serving one built by hand with `Engine::new` leaves its background duties (recovery,
    /// retention, drain) to you.
    pub use durable_mcp_engine::Engine;
    pub use durable_mcp_engine::{
        ActionKind, ActionRecord, EngineError, EngineOptions, default_worker_id, inspect, keys,
        limits,
    };
    pub use durable_mcp_handler::{KeyRing, RingKey, StateKeys};
}

/// The Streamable HTTP transport's settings and the dashboard's.
pub mod http {
    pub use durable_mcp_http::{
        DEFAULT_FIRST_EVENT_WAIT, DEFAULT_MAX_GET_STREAMS_PER_SESSION, DashboardAuth,
        DashboardError, DashboardOptions, HttpConfig, Transport,
    };
}

/// A handler that forwards to another MCP server (what `durable-mcp proxy` serves).
pub mod proxy {
    pub use durable_mcp_handler::{Forward, Upstream, UpstreamError, UpstreamRequest};
}

use durable_mcp_engine::{Engine, EngineError, EngineOptions, default_worker_id};
use durable_mcp_http::{
    DashboardAuth, DashboardError, DashboardOptions, HttpConfig, Transport as HttpTransport,
};
use durable_mcp_store::{Store, StoreError};
use durable_mcp_store_memory::MemoryStore;
#[cfg(feature = "postgres")]
use durable_mcp_store_postgres::PgStore;
#[cfg(feature = "redis")]
use durable_mcp_store_redis::RedisStore;
#[cfg(feature = "sqlite")]
use durable_mcp_store_sqlite::SqliteStore;

/// The store used when none is configured: a SQLite file in the working directory.
pub const DEFAULT_STORE_URL: &str = "sqlite:./durable-mcp.db";

/// Errors of building or running a server.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The store URL is not one durable-mcp knows (shown with its password redacted).
    #[error(
        "unsupported store URL {0:?} (expected memory:, sqlite:PATH, postgres://..., a PostgreSQL key=value string, redis://..., rediss://..., valkey://... or valkeys://...)"
    )]
    UnsupportedStore(String),
    /// Binding or serving failed.
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    /// The handler factory given to [`DurableMcp::from_factory`] failed.
    #[error("the handler factory failed: {0}")]
    Factory(#[source] std::io::Error),
    /// The store URL names a backend whose cargo feature is off.
    #[error(
        "the store URL {url:?} needs durable-mcp's `{feature}` feature (in Cargo.toml: durable-mcp = {{ features = [\"{feature}\"] }})"
    )]
    FeatureOff {
        /// The URL, its password redacted.
        url: String,
        /// The feature that serves it.
        feature: &'static str,
    },
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The engine could not start: the `requestState` keys could not be read or created.
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// The metrics recorder could not be installed ([`DurableMcp::metrics_listen`]).
    #[cfg(feature = "metrics")]
    #[error(transparent)]
    Metrics(#[from] metrics::MetricsError),
    /// The dashboard was refused its address ([`DurableMcp::dashboard_listen`]).
    #[error(transparent)]
    Dashboard(#[from] DashboardError),
}

/// Open the store named by `url`: the one place a backend is chosen by URL scheme.
///
/// - `memory:` — in-process, lost on exit (tests, development).
/// - `sqlite:PATH[?synchronous=full|normal|off&max_events=N]` — the embedded default.
/// - `postgres://USER@HOST:PORT/DB[?schema=NAME&sslmode=verify-full&...]`, or a libpq
///   `key=value` string (`host=... dbname=... sslmode=...`) — shared by many workers
///   (`store::PgOptions`, `postgres` feature).
/// - `redis://HOST:PORT[/DB][?prefix=NAME&...]`, `rediss://` over TLS, and `valkey://`,
///   `valkeys://`; a Redis Cluster as `redis+cluster://HOST:PORT,HOST:PORT,...` — shared by
///   many workers (`store::RedisOptions`, `redis` feature).
///
/// A backend whose cargo feature is off (`sqlite`, the default; `postgres`; `redis`) is
/// refused with [`Error::FeatureOff`], which names the feature.
pub async fn open_store(url: &str) -> Result<Arc<dyn Store>, Error> {
    match backend(url)? {
        Backend::Memory => Ok(Arc::new(MemoryStore::new())),
        #[cfg(feature = "sqlite")]
        Backend::Sqlite => Ok(Arc::new(SqliteStore::open_url(url).await?)),
        #[cfg(feature = "postgres")]
        Backend::Postgres => Ok(Arc::new(PgStore::open_url(url).await?)),
        #[cfg(feature = "redis")]
        Backend::Redis => Ok(Arc::new(RedisStore::open_url(url).await?)),
    }
}

/// The backends a store URL can name and this build serves (see the cargo features).
enum Backend {
    Memory,
    #[cfg(feature = "sqlite")]
    Sqlite,
    #[cfg(feature = "postgres")]
    Postgres,
    #[cfg(feature = "redis")]
    Redis,
}

/// The backend `url` names, by its scheme (a libpq `key=value` string is PostgreSQL);
/// [`Error::FeatureOff`] if its feature is off.
fn backend(url: &str) -> Result<Backend, Error> {
    let feature = if durable_mcp_store::is_key_value(url) {
        "postgres"
    } else {
        match url.split_once(':').map(|(scheme, _)| scheme) {
            Some("memory") => return Ok(Backend::Memory),
            Some("sqlite") => "sqlite",
            Some("postgres" | "postgresql") => "postgres",
            Some(
                "redis" | "rediss" | "valkey" | "valkeys" | "redis+cluster" | "rediss+cluster"
                | "valkey+cluster" | "valkeys+cluster",
            ) => "redis",
            _ => return Err(Error::UnsupportedStore(durable_mcp_store::redact_url(url))),
        }
    };
    match feature {
        #[cfg(feature = "sqlite")]
        "sqlite" => Ok(Backend::Sqlite),
        #[cfg(feature = "postgres")]
        "postgres" => Ok(Backend::Postgres),
        #[cfg(feature = "redis")]
        "redis" => Ok(Backend::Redis),
        feature => Err(Error::FeatureOff {
            url: durable_mcp_store::redact_url(url),
            feature,
        }),
    }
}

/// Create or upgrade the schema of the store named by `url` and return its version; `None`
/// for backends without a schema (memory, Redis). Opening a store migrates it too; this is
/// for running the migration once, before starting workers.
pub async fn migrate_store(url: &str) -> Result<Option<i64>, Error> {
    match backend(url)? {
        #[cfg(feature = "sqlite")]
        Backend::Sqlite => {
            SqliteStore::open_url(url).await?;
            Ok(Some(durable_mcp_store_sqlite::SCHEMA_VERSION))
        }
        #[cfg(feature = "postgres")]
        Backend::Postgres => Ok(Some(PgStore::open_url(url).await?.migrate().await?)),
        #[cfg(feature = "redis")]
        Backend::Redis => {
            open_store(url).await?;
            Ok(None)
        }
        Backend::Memory => Ok(None),
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
/// - **worker id**: the host name and the listen address ([`default_worker_id`]), so that
///   a restarted worker resumes its own unfinished calls at once (D7); set
///   [`EngineOptions::worker_id`] to choose one.
/// - **path**: default `/mcp`.
/// - **HTTP options** ([`HttpConfig`]): allowed hosts/origins (DNS-rebinding protection),
///   body limit, JSON responses, SSE keep-alive and polling.
/// - **authentication**: none by default (every request is anonymous; a WARN is logged
///   when serving a non-loopback address so); OAuth 2.1, API keys or a trusted proxy with
///   [`auth`](Self::auth), scopes of prompts and resources with
///   [`prompt_scopes`](Self::prompt_scopes) and [`resource_scopes`](Self::resource_scopes)
///   (`docs/security.md`).
///
/// - **limits per principal** ([`engine::limits::Limits`]): live sessions, GET streams, requests
///   in flight, tasks and a request rate, with defaults safe for a public server; set them
///   with [`limits`](Self::limits) (the anonymous principal, authentication off, is exempt
///   unless they say otherwise).
///
/// - **metrics** (feature `metrics`): off; `metrics_listen` serves Prometheus metrics at
///   `/metrics` on an address of its own (see the `metrics` module).
/// - **dashboard**: off; [`dashboard_listen`](Self::dashboard_listen) serves a read-only
///   page of the workers' sessions, streams, requests and tasks on an address of its own
///   (loopback only unless [`DashboardOptions::allow_remote`]; no authentication).
///
/// - **traces**: off; with the `otlp` feature, `traces::install` before `serve` exports
///   OpenTelemetry spans over OTLP/HTTP, configured by the `OTEL_*` variables
///   (`docs/tracing.md`).
///
/// [`serve`](Self::serve) runs until Ctrl-C or SIGTERM and then shuts down gracefully.
/// [`embed`](Self::embed) mounts the endpoint in your own axum app, and
/// [`serve_stdio`](Self::serve_stdio) serves one client on stdin/stdout; each of them runs
/// the worker's background duties (recovery, retention, hand-over at shutdown).
pub struct DurableMcp {
    handler: McpHandler,
    store: Option<Arc<dyn Store>>,
    bind: SocketAddr,
    http: HttpConfig,
    engine: EngineOptions,
    shutdown_grace: std::time::Duration,
    // Set only with the `metrics` feature.
    #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
    metrics_listen: Option<SocketAddr>,
    dashboard: Option<(SocketAddr, DashboardOptions)>,
    /// The dashboard's viewers (`None`: authenticated as the endpoint's requests are).
    dashboard_auth: Option<DashboardAuth>,
    /// The address of the default worker id (`None`: stdio); see [`default_worker_id`].
    id_listen: Option<SocketAddr>,
}

impl DurableMcp {
    /// A server for `handler`, with the defaults above. Every request, of every session,
    /// is served by a clone of this one instance (its fields are shared by all sessions
    /// and start again at every restart); see [`from_factory`](Self::from_factory) for an
    /// instance per session, as rmcp's `StreamableHttpService` makes.
    pub fn new<H>(handler: H) -> Self
    where
        H: rmcp::ServerHandler + Clone,
    {
        Self::with_handler(McpHandler::new(handler))
    }

    /// A server whose handler instances `factory` makes, as rmcp's
    /// `StreamableHttpService::new` takes one: on each worker, a legacy-era session gets an
    /// instance of its own (made for its `initialize`, or for its first request on a worker
    /// that did not see that), and a 2026-07-28 request, which has no session, a new one.
    ///
    /// An instance lives in one worker's memory, so its fields do not survive a restart
    /// and are not seen by the session's other workers: keep such state in
    /// [`SessionState`] (`docs/migrating-from-rmcp.md`). The factory is called once here,
    /// for the server's tools and capabilities, and its error is returned.
    pub fn from_factory<H, F>(factory: F) -> Result<Self, Error>
    where
        H: rmcp::ServerHandler + Clone,
        F: Fn() -> std::io::Result<H> + Send + Sync + 'static,
    {
        McpHandler::from_factory(factory)
            .map(Self::with_handler)
            .map_err(Error::Factory)
    }

    /// A server for an adapted handler, with the defaults above.
    fn with_handler(handler: McpHandler) -> Self {
        Self {
            handler,
            store: None,
            bind: SocketAddr::from(([127, 0, 0, 1], 8080)),
            http: HttpConfig::default(),
            engine: EngineOptions::default(),
            shutdown_grace: std::time::Duration::from_secs(10),
            metrics_listen: None,
            dashboard: None,
            dashboard_auth: None,
            id_listen: Some(SocketAddr::from(([127, 0, 0, 1], 8080))),
        }
    }

    /// Serve Prometheus metrics at `http://ADDR/metrics`, on a listener of its own, while the
    /// server runs (off by default). Installs the process's recorder ([`metrics::install`])
    /// when the server starts; with [`embed`](Self::embed) you may instead call
    /// [`metrics::install`] yourself and mount [`metrics::MetricsHandle::router`].
    #[cfg(feature = "metrics")]
    pub fn metrics_listen(mut self, addr: SocketAddr) -> Self {
        self.metrics_listen = Some(addr);
        self
    }

    /// Serve the operator dashboard at `http://ADDR/`, on a listener of its own, while the
    /// server runs (off by default): a page of what every worker on the store is doing,
    /// updating every second, with charts of this worker's last hour (metrics are recorded
    /// while it is on, with the `metrics` feature) and, for viewers with the act scope,
    /// actions on runs and tasks. Viewers are authenticated as the endpoint's requests are,
    /// or as [`dashboard_auth`](Self::dashboard_auth) says; without authentication nothing
    /// can be done from it. A non-loopback `addr` is refused at start unless `options`
    /// [allow it](DashboardOptions::allow_remote), a request whose `Host` is not `addr` or
    /// a loopback name is answered 403, and payloads are left out unless
    /// [shown](DashboardOptions::show_payloads).
    pub fn dashboard_listen(mut self, addr: SocketAddr, options: DashboardOptions) -> Self {
        self.dashboard = Some((addr, options));
        self
    }

    /// Authenticate the dashboard's viewers with `auth` (its own API keys, say) instead of
    /// as the endpoint's requests are ([`auth`](Self::auth), with the default scopes
    /// `dashboard:read` to look and `dashboard:act` to act).
    pub fn dashboard_auth(mut self, auth: DashboardAuth) -> Self {
        self.dashboard_auth = Some(auth);
        self
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

    /// Listen on this address. With [`embed`](Self::embed), give the address your app
    /// listens on: the default worker id is made of it.
    pub fn bind(mut self, addr: SocketAddr) -> Self {
        self.bind = addr;
        self.id_listen = Some(addr);
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

    /// Authenticate every HTTP request with `auth` (default: none, every request is
    /// anonymous). See `docs/security.md` for the modes and what each protects against.
    /// OAuth needs the `auth` feature:
    ///
    #[cfg_attr(feature = "auth", doc = "```no_run")]
    #[cfg_attr(not(feature = "auth"), doc = "```ignore")]
    /// # fn f(handler: impl durable_mcp::rmcp::ServerHandler + Clone) -> Result<(), durable_mcp::auth::ConfigError> {
    /// use durable_mcp::auth::{Authenticator, OAuthConfig};
    /// let mut oauth = OAuthConfig::new("https://auth.example.com", "https://mcp.example.com/mcp", "http://auth.internal/jwks");
    /// oauth.scopes = vec!["mcp".into()];
    /// let server = durable_mcp::DurableMcp::new(handler).auth(Authenticator::oauth(oauth)?);
    /// # Ok(()) }
    /// ```
    pub fn auth(mut self, auth: durable_mcp_auth::Authenticator) -> Self {
        self.http.auth = auth;
        self
    }

    /// With authentication on, `prompts/get` of prompt `name` needs `scopes` (tools declare
    /// theirs with [`required_scopes`]); a caller without them is answered 403.
    pub fn prompt_scopes(mut self, name: &str, scopes: &[&str]) -> Self {
        self.http.scope_rules = std::mem::take(&mut self.http.scope_rules).prompt(name, scopes);
        self
    }

    /// With authentication on, reading or subscribing to a resource whose URI starts with
    /// `uri_prefix` needs `scopes`; a caller without them is answered 403.
    pub fn resource_scopes(mut self, uri_prefix: &str, scopes: &[&str]) -> Self {
        self.http.scope_rules =
            std::mem::take(&mut self.http.scope_rules).resource(uri_prefix, scopes);
        self
    }

    /// Limit what one principal may use of each worker (default [`engine::limits::Limits::default`];
    /// see `docs/security.md`). Refused requests are answered 429 before anything of them
    /// is written.
    ///
    /// ```no_run
    /// # fn f(handler: impl durable_mcp::rmcp::ServerHandler + Clone) {
    /// use durable_mcp::engine::limits::{Limits, Rate};
    /// let limits = { let mut o = Limits::default(); o.sessions = Some(8); o.rate = Some(Rate { per_second: 5.0, burst: 20 }); o };
    /// let server = durable_mcp::DurableMcp::new(handler).limits(limits);
    /// # }
    /// ```
    pub fn limits(mut self, limits: durable_mcp_engine::limits::Limits) -> Self {
        self.engine.limits = limits;
        self
    }

    /// This worker's id in leases and logs (default: the host name and the listen address,
    /// [`engine::default_worker_id`], so that a restarted worker resumes its own calls at
    /// once). Unique per live worker.
    pub fn worker_id(mut self, id: impl Into<String>) -> Self {
        self.engine.worker_id = id.into();
        self
    }

    /// Replace the engine options (the limits set by [`limits`](Self::limits) and the id set
    /// by [`worker_id`](Self::worker_id) are part of them). `EngineOptions` can grow: start
    /// from `EngineOptions::default()` and set fields.
    pub fn engine_options(mut self, options: EngineOptions) -> Self {
        self.engine = options;
        self
    }

    /// The engine this server runs. Opens the default store if none was set, and reads the
    /// `requestState` key ring from it (creating it on the first start of the first worker),
    /// so that a broken store or key fails here rather than at the first multi-round-trip
    /// request. Private: an engine served without its background duties loses recovery (D7)
    /// and retention (D14); [`run_with_engine`](Self::run_with_engine) is the way to it.
    async fn engine(&self) -> Result<Engine, Error> {
        let store = match &self.store {
            Some(store) => store.clone(),
            None => open_store(DEFAULT_STORE_URL).await?,
        };
        let mut options = self.engine.clone();
        if options.worker_id.is_empty() {
            options.worker_id = default_worker_id(self.id_listen);
        }
        let engine = Engine::new(store, self.handler.clone(), options);
        engine.state_keys().await?;
        Ok(engine)
    }

    /// Serve the durable endpoint from your own axum application: `serve` gets the
    /// endpoint's [`Router`](axum::Router) (mount it with `merge` or `nest`) and a
    /// [`Closing`] future for the server's graceful shutdown, and returns the future that
    /// serves your app. `embed` runs the worker's background duties alongside it and
    /// resolves to its output once it is done and durable execution is drained.
    ///
    /// The duties are what make the endpoint durable, and a server without them fails
    /// quietly, long after deployment:
    ///
    /// - **recovery** (D7): at start, requests this worker had in flight when it died are
    ///   run again; then, every second, requests of workers whose leases expired;
    /// - **retention** (D14): the pruner applies [`EngineOptions::retention`] every
    ///   `prune_interval`;
    /// - **hand-over**: when your future ends, requests still running get
    ///   [`shutdown_grace`](Self::shutdown_grace) to finish, then their leases are given
    ///   back so that another worker resumes them at once.
    ///
    /// When `shutdown` resolves, the endpoint's open SSE connections end (their streams
    /// stay resumable, on any worker) and then [`Closing`] resolves: pass it to axum's
    /// `with_graceful_shutdown`, or that waits forever on long-lived GET streams.
    ///
    /// # Why a closure
    ///
    /// The router exists only inside `serve`, and `serve` runs only inside `embed`, with
    /// the duties: there is no way to serve the endpoint without them, which a returned
    /// `Router` plus a guard (easy to drop) or a `#[must_use]` duty future (only a warning)
    /// could not promise. Your future need not be `Send`; the duties are tokio tasks
    /// started before it and stopped after it.
    ///
    /// # Example
    ///
    /// ```no_run
    #[doc = include_str!("../doc/axum-embed.rs")]
    /// ```
    pub async fn embed<F, Fut, T>(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
        serve: F,
    ) -> Result<T, Error>
    where
        F: FnOnce(axum::Router, Closing) -> Fut,
        Fut: Future<Output = T>,
    {
        let http = self.http.clone();
        self.run_with_engine(move |engine| async move {
            let transport = HttpTransport::new(engine, http);
            let token = transport.shutdown_token();
            let closing = Closing(Box::pin(token.clone().cancelled_owned()));
            let _watcher = AbortOnDrop(tokio::spawn({
                let token = token.clone();
                async move {
                    shutdown.await;
                    token.cancel();
                }
            }));
            let output = serve(transport.router(), closing).await;
            token.cancel();
            output
        })
        .await
    }

    /// Run a transport of your own over this server's engine (the built-in ones use
    /// [`serve_on`](Self::serve_on), [`embed`](Self::embed) and
    /// [`serve_stdio`](Self::serve_stdio)): `transport` gets the [`Engine`] and returns
    /// the future that serves it; the background duties described in
    /// [`embed`](Self::embed) run alongside, and durable execution is drained when it ends.
    pub async fn run_with_engine<F, Fut, T>(self, transport: F) -> Result<T, Error>
    where
        F: FnOnce(Engine) -> Fut,
        Fut: Future<Output = T>,
    {
        // Refused before anything starts.
        let dashboard = match self.dashboard {
            Some((addr, options)) => {
                durable_mcp_http::dashboard::check_addr(addr, options)?;
                Some((tokio::net::TcpListener::bind(addr).await?, options))
            }
            None => None,
        };
        #[cfg_attr(not(feature = "metrics"), allow(unused_mut))]
        let mut metrics_render = None;
        // Metrics first: the engine times its store only if they are on when it is created.
        // The dashboard's charts read the recorder: it is installed while it is on.
        #[cfg(feature = "metrics")]
        if dashboard.is_some() && self.metrics_listen.is_none() {
            metrics_render = Some(metrics::install()?.renderer());
        }
        #[cfg(feature = "metrics")]
        let metrics = match self.metrics_listen {
            Some(addr) => {
                let handle = metrics::install()?;
                let listener = tokio::net::TcpListener::bind(addr).await?;
                let render = handle.renderer();
                metrics_render = Some(render.clone());
                Some(AbortOnDrop(tokio::spawn(async move {
                    if let Err(error) =
                        durable_mcp_http::serve_metrics(listener, render, std::future::pending())
                            .await
                    {
                        tracing::error!(%error, "the metrics listener failed");
                    }
                })))
            }
            None => None,
        };
        #[cfg(not(feature = "metrics"))]
        let metrics = ();
        let engine = self.engine().await?;
        let dashboard_auth = self
            .dashboard_auth
            .unwrap_or_else(|| DashboardAuth::new(self.http.auth.clone()));
        let dashboard = dashboard.map(|(listener, options)| {
            let engine = engine.clone();
            AbortOnDrop(tokio::spawn(async move {
                if let Err(error) = durable_mcp_http::serve_dashboard(
                    listener,
                    engine,
                    options,
                    dashboard_auth,
                    metrics_render,
                    std::future::pending(),
                )
                .await
                {
                    tracing::error!(%error, "the dashboard listener failed");
                }
            }))
        });
        // Aborted when the transport ends, or when this future is dropped before that.
        let pruner = AbortOnDrop(engine.spawn_pruner());
        // Resumes this worker's own unfinished requests at once, then takes over those
        // of workers whose leases expire (D7).
        let recovery = AbortOnDrop(engine.spawn_recovery());
        let output = transport(engine.clone()).await;
        drop((recovery, pruner));
        engine.drain(self.shutdown_grace).await;
        drop((metrics, dashboard));
        Ok(output)
    }

    /// Bind and serve until Ctrl-C or SIGTERM.
    pub async fn serve(self) -> Result<(), Error> {
        let listener = tokio::net::TcpListener::bind(self.bind).await?;
        self.serve_on(listener, shutdown_signal()).await
    }

    /// Serve on an already-bound listener until `shutdown` resolves (with the background
    /// duties of [`embed`](Self::embed)).
    pub async fn serve_on(
        mut self,
        listener: tokio::net::TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), Error> {
        let addr = listener.local_addr()?;
        self.id_listen = Some(addr);
        tracing::info!(%addr, path = %self.http.path, "durable-mcp serving");
        if !addr.ip().is_loopback() && !self.http.auth.is_enabled() {
            tracing::warn!(%addr, "serving on a non-loopback address without authentication: anyone who reaches it is the same anonymous principal (see docs/security.md)");
        }
        let http = self.http.clone();
        let served = self
            .embed(shutdown, |router, closing| async move {
                durable_mcp_http::serve_router(listener, router, &http, closing).await
            })
            .await?;
        Ok(served?)
    }

    /// Serve over stdin/stdout (for a desktop client that launches the server) until stdin
    /// ends or Ctrl-C / SIGTERM, with the background duties of [`embed`](Self::embed):
    /// recovery, retention and, at the end, requests in flight get
    /// [`shutdown_grace`](Self::shutdown_grace) to finish and write their messages.
    pub async fn serve_stdio(mut self) -> Result<(), Error> {
        self.id_listen = None;
        let grace = self.shutdown_grace;
        let served = self
            .run_with_engine(|engine| {
                durable_mcp_stdio::serve(
                    engine,
                    tokio::io::stdin(),
                    tokio::io::stdout(),
                    shutdown_signal(),
                    grace,
                )
            })
            .await?;
        Ok(served?)
    }
}

/// A background task that ends with its owner.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Resolves when an [embedded](DurableMcp::embed) endpoint is shutting down, once its SSE
/// connections were told to end: the future to give axum's `with_graceful_shutdown`.
#[must_use = "a server that never shuts down gracefully keeps its SSE connections open"]
pub struct Closing(std::pin::Pin<Box<dyn Future<Output = ()> + Send>>);

impl Future for Closing {
    type Output = ();

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<()> {
        self.0.as_mut().poll(cx)
    }
}

impl std::fmt::Debug for Closing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Closing").finish_non_exhaustive()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone)]
    struct Empty;

    impl rmcp::ServerHandler for Empty {}

    /// Each URL scheme is served with its feature on, and refused with an error naming the
    /// feature with it off (`cargo test -p durable-mcp --no-default-features --lib` checks
    /// the other side); an unknown scheme is refused as such either way.
    #[test]
    fn a_store_url_needs_its_backends_feature() {
        let cases = [
            ("sqlite:./x.db", "sqlite", cfg!(feature = "sqlite")),
            (
                "postgres://u:secret@h/db",
                "postgres",
                cfg!(feature = "postgres"),
            ),
            (
                "host=h dbname=db password=secret",
                "postgres",
                cfg!(feature = "postgres"),
            ),
            ("rediss://:secret@h:6379", "redis", cfg!(feature = "redis")),
            ("redis+cluster://h:1,h:2", "redis", cfg!(feature = "redis")),
        ];
        for (url, feature, on) in cases {
            match backend(url) {
                Ok(_) => assert!(on, "{url} was accepted without the {feature} feature"),
                Err(Error::FeatureOff {
                    url: shown,
                    feature: named,
                }) => {
                    assert!(!on, "{url} was refused with the {feature} feature on");
                    assert_eq!(named, feature);
                    assert!(
                        !shown.contains("secret"),
                        "the password is redacted: {shown}"
                    );
                    let message = Error::FeatureOff {
                        url: shown,
                        feature: named,
                    }
                    .to_string();
                    assert!(
                        message.contains(&format!("features = [\"{feature}\"]")),
                        "{message}"
                    );
                }
                Err(other) => panic!("{url}: {other}"),
            }
        }
        assert!(matches!(backend("memory:"), Ok(Backend::Memory)));
        assert!(matches!(
            backend("mysql://h/db"),
            Err(Error::UnsupportedStore(_))
        ));
    }

    fn server(store: &Arc<dyn Store>, state_key: Option<Vec<u8>>) -> DurableMcp {
        DurableMcp::new(Empty).store(store.clone()).engine_options({
            let mut o = EngineOptions::default();
            o.state_key = state_key;
            o
        })
    }

    /// A refused `state_key` used to be replaced by a random key for the process (states
    /// that no other worker, and no restart, accepts); now the server does not start.
    #[tokio::test]
    async fn d12_a_refused_state_key_fails_the_start_instead_of_sealing_with_a_random_key() {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        let refused = server(&store, Some(b"too short".to_vec())).engine().await;
        assert!(
            matches!(refused, Err(Error::Engine(EngineError::StateKeys(_)))),
            "{refused:?}"
        );
    }

    /// Two servers on one store, with default options, seal with the same keys (D9).
    #[tokio::test]
    async fn d9_engines_on_one_store_share_the_state_keys_by_default() {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        let a = server(&store, None)
            .engine()
            .await
            .expect("engine a")
            .state_keys()
            .await
            .expect("keys a");
        let b = server(&store, None)
            .engine()
            .await
            .expect("engine b")
            .state_keys()
            .await
            .expect("keys b");
        let sealed = a.codec().seal_with(
            b"state",
            &rmcp::model::SealOptions::new().associated_data(b"scope"),
        );
        assert_eq!(
            b.codec()
                .open_with(&sealed, b"scope")
                .expect("opened by the other engine"),
            b"state"
        );
    }
}
