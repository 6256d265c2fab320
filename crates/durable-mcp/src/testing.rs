//! Tests of a durable server, in process (the `testing` feature; `docs/testing.md`).
//!
//! [`TestServer`] runs a [`DurableMcp`] as [`embed`](DurableMcp::embed) does, with its
//! background duties (recovery, retention, hand-over at shutdown), but serves its endpoint
//! to [`TestClient`]s in the same process rather than on a socket. A client speaks either
//! protocol era: [`client_legacy`](TestServer::client_legacy) opens a 2025-11-25 session,
//! [`client_modern`](TestServer::client_modern) sends stateless 2026-07-28 requests. Each
//! answer comes with the notifications (progress, log messages) that its stream carried.
//!
//! [`restart`](TestServer::restart) stops the worker as a shutdown does and starts a new one
//! on the same store, with the same worker id: legacy sessions and their
//! [`SessionState`](crate::SessionState) live on, requests in flight are resumed by the new
//! worker, and a legacy client's stream resumes on it (`Last-Event-ID`).
//!
//! ```
//! use durable_mcp::rmcp::{self, ServerHandler, tool, tool_handler, tool_router};
//! use durable_mcp::testing::TestServer;
//!
//! #[derive(Clone)]
//! struct Hello;
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
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // No store given: a memory store, kept across restarts.
//! let server = TestServer::start(durable_mcp::DurableMcp::new(Hello)).await?;
//! let client = server.client_legacy().await?;
//! let answer = client.call_tool("hello", serde_json::json!({})).await?.result?;
//! assert_eq!(answer.content[0].as_text().map(|t| t.text.as_str()), Some("Hello, durable world"));
//!
//! server.restart().await?; // the session lives on
//! assert!(client.call_tool("hello", serde_json::json!({})).await?.result.is_ok());
//! # Ok(()) }
//! ```

mod client;
mod sse;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

pub use client::{ClientBuilder, Era, Notification, Response, TestClient};

use crate::{DurableMcp, EngineOptions, HttpConfig, HttpTransport, McpHandler, MemoryStore, Store};

/// How long a [`TestClient`] waits for one answer by default.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// Errors of a [`TestServer`] or a [`TestClient`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TestError {
    /// The server could not start, or its worker failed when it stopped.
    #[error("the server failed: {0}")]
    Server(#[from] crate::Error),
    /// The worker's task panicked.
    #[error("the worker's task failed: {0}")]
    Worker(#[source] tokio::task::JoinError),
    /// The server was [stopped](TestServer::stop) or dropped.
    #[error("the server is stopped")]
    Stopped,
    /// No answer came within the client's timeout.
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    /// A request's `params` (or a tool's `arguments`) are not a JSON object.
    #[error("{0} must be a JSON object")]
    NotAnObject(&'static str),
    /// The HTTP request could not be built (the endpoint's path or a header is invalid).
    #[error("invalid HTTP request: {0}")]
    Request(#[source] http::Error),
    /// Reading the response's body failed.
    #[error("reading the response failed: {0}")]
    Body(#[source] axum::Error),
    /// The server answered with an HTTP status and a body that is no JSON-RPC message.
    #[error("HTTP {status}: {body}")]
    Http {
        /// The response's status.
        status: http::StatusCode,
        /// The response's body, as text.
        body: String,
    },
    /// The server sent something that is not JSON.
    #[error("the server sent invalid JSON: {0}")]
    Json(#[source] serde_json::Error),
    /// The server sent a message that does not fit the exchange (no session id after
    /// `initialize`, an answer to another request, a message that is neither a
    /// notification nor a response).
    #[error("unexpected message from the server: {0}")]
    Protocol(String),
    /// A result does not decode as the type the method returns.
    #[error("the result of {method} does not decode: {source}")]
    Decode {
        /// The request's method.
        method: String,
        /// Why.
        #[source]
        source: serde_json::Error,
    },
    /// The response's stream ended before its answer, and cannot be resumed (2026-07-28
    /// streams have no `Last-Event-ID`).
    #[error("the stream ended before the answer")]
    StreamEnded,
    /// The server sent a request to the client (elicitation, sampling, roots), which a
    /// [`TestClient`] does not answer.
    #[error("the server sent a {method} request, which TestClient does not answer")]
    ServerRequest {
        /// The server's request method.
        method: String,
    },
    /// The server answered with a JSON-RPC error where the client needs a result
    /// (`initialize`, `logging/setLevel`).
    #[error("the server answered with an error: {0}")]
    Rpc(#[source] crate::rmcp::model::ErrorData),
}

/// A durable server for tests: a worker serving its endpoint in process (see the
/// [module docs](self)).
///
/// It keeps the [`DurableMcp`]'s handler, store, HTTP and engine options; the metrics and
/// dashboard listeners are not started. Without a store, it uses a [`MemoryStore`], kept
/// across [`restart`](Self::restart)s. Dropping it stops the worker in the background;
/// [`stop`](Self::stop) waits for the shutdown and reports its error.
pub struct TestServer {
    blueprint: Blueprint,
    endpoint: watch::Sender<Endpoint>,
    worker: tokio::sync::Mutex<Option<Worker>>,
}

impl std::fmt::Debug for TestServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestServer")
            .field("path", &self.blueprint.http.path)
            .field("worker_id", &self.blueprint.engine.worker_id)
            .finish_non_exhaustive()
    }
}

/// What the server's clients reach.
#[derive(Clone)]
enum Endpoint {
    /// Served by the current worker.
    Up(Router),
    /// Between two workers: clients wait.
    Restarting,
    /// Stopped: clients fail.
    Down,
}

/// What every worker of a [`TestServer`] is built from.
struct Blueprint {
    handler: McpHandler,
    store: Arc<dyn Store>,
    http: HttpConfig,
    engine: EngineOptions,
    shutdown_grace: Duration,
}

impl Blueprint {
    /// The server for one worker.
    fn server(&self) -> DurableMcp {
        let mut server = DurableMcp::with_handler(self.handler.clone());
        server.store = Some(self.store.clone());
        server.http = self.http.clone();
        server.engine = self.engine.clone();
        server.shutdown_grace = self.shutdown_grace;
        server
    }
}

/// A running worker: its task ends once `stop` is cancelled and the worker has drained.
struct Worker {
    stop: CancellationToken,
    task: tokio::task::JoinHandle<Result<(), crate::Error>>,
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl TestServer {
    /// Start a worker of `server` (its `bind` address is not used).
    pub async fn start(server: DurableMcp) -> Result<Self, TestError> {
        if server.metrics_listen.is_some() || server.dashboard.is_some() {
            tracing::debug!("TestServer starts neither the metrics nor the dashboard listener");
        }
        let mut blueprint = Blueprint {
            handler: server.handler,
            store: server.store.unwrap_or_else(|| Arc::new(MemoryStore::new())),
            http: server.http,
            engine: server.engine,
            shutdown_grace: server.shutdown_grace,
        };
        if blueprint.engine.worker_id.is_empty() {
            // One id for every worker of this server, and no other server's (the default
            // would be the unused bind address's).
            blueprint.engine.worker_id =
                format!("test-worker-{}", durable_mcp_store::StreamId::random());
        }
        let (endpoint, _) = watch::channel(Endpoint::Restarting);
        let this = Self {
            blueprint,
            endpoint,
            worker: tokio::sync::Mutex::new(None),
        };
        let worker = this.start_worker().await?;
        *this.worker.lock().await = Some(worker);
        Ok(this)
    }

    /// Stop the worker as a shutdown does (its SSE streams end, requests in flight get the
    /// `shutdown_grace` to finish, then their leases are given back), then start a new one
    /// on the same store with the same worker id, which resumes those requests at once.
    /// Clients wait meanwhile, and keep working with the new worker.
    pub async fn restart(&self) -> Result<(), TestError> {
        let mut worker = self.worker.lock().await;
        if let Some(old) = worker.take() {
            self.endpoint.send_replace(Endpoint::Restarting);
            Self::stop_worker(old).await?;
        }
        *worker = Some(self.start_worker().await?);
        Ok(())
    }

    /// Stop the worker as a shutdown does; clients then fail with [`TestError::Stopped`]
    /// until [`restart`](Self::restart).
    pub async fn stop(&self) -> Result<(), TestError> {
        let mut worker = self.worker.lock().await;
        self.endpoint.send_replace(Endpoint::Down);
        match worker.take() {
            Some(old) => Self::stop_worker(old).await,
            None => Ok(()),
        }
    }

    /// The store the workers use.
    pub fn store(&self) -> Arc<dyn Store> {
        self.blueprint.store.clone()
    }

    /// The current worker's endpoint (`None` while stopped or restarting), for requests of
    /// your own: its path is the server's (`/mcp` by default).
    pub fn router(&self) -> Option<Router> {
        match &*self.endpoint.borrow() {
            Endpoint::Up(router) => Some(router.clone()),
            Endpoint::Restarting | Endpoint::Down => None,
        }
    }

    /// A client with options: headers (`Authorization`, ...), capabilities, a timeout.
    pub fn client(&self) -> ClientBuilder {
        ClientBuilder::new(client::Link {
            endpoint: self.endpoint.subscribe(),
            path: self.blueprint.http.path.clone(),
        })
    }

    /// A 2025-11-25 client: `initialize` and `notifications/initialized` are done, and
    /// every request carries the session's `Mcp-Session-Id`.
    pub async fn client_legacy(&self) -> Result<TestClient, TestError> {
        self.client().legacy().await
    }

    /// A 2026-07-28 client: stateless requests, each with its protocol version, client
    /// info and capabilities in `_meta` and the standard headers.
    pub fn client_modern(&self) -> TestClient {
        self.client().modern()
    }

    /// Start a worker and publish its endpoint.
    async fn start_worker(&self) -> Result<Worker, TestError> {
        let server = self.blueprint.server();
        let http = self.blueprint.http.clone();
        let stop = CancellationToken::new();
        let (ready, router) = tokio::sync::oneshot::channel();
        let task = tokio::spawn({
            let stop = stop.clone();
            async move {
                server
                    .run_with_engine(move |engine| async move {
                        let transport = HttpTransport::new(engine, http);
                        let closing = transport.shutdown_token();
                        // No receiver: `start_worker` was dropped, so stop at once.
                        if ready.send(transport.router()).is_ok() {
                            stop.cancelled().await;
                        }
                        closing.cancel();
                    })
                    .await
            }
        });
        let mut worker = Worker { stop, task };
        match router.await {
            Ok(router) => {
                self.endpoint.send_replace(Endpoint::Up(router));
                Ok(worker)
            }
            // The engine did not start: the task ended with its error.
            Err(_) => match (&mut worker.task).await {
                Ok(Err(error)) => Err(TestError::Server(error)),
                Ok(Ok(())) => Err(TestError::Stopped),
                Err(error) => Err(TestError::Worker(error)),
            },
        }
    }

    /// Shut `worker` down and wait until it has drained.
    async fn stop_worker(mut worker: Worker) -> Result<(), TestError> {
        worker.stop.cancel();
        match (&mut worker.task).await {
            Ok(result) => Ok(result?),
            Err(error) => Err(TestError::Worker(error)),
        }
    }
}
