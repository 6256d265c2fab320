//! A stock rmcp Streamable HTTP server: the baseline `durable-mcp-bench` compares against.
//!
//! Nothing durable here on purpose: rmcp's own [`StreamableHttpService`] with its in-memory
//! [`LocalSessionManager`] and default settings (legacy sessions, SSE responses), served by
//! axum like durable-mcp's transport, with `TCP_NODELAY` on every accepted connection, so
//! the comparison measures the transports and not Nagle's algorithm.

use std::sync::Arc;

use axum::serve::ListenerExt;
use rmcp::ServerHandler;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// The endpoint path of [`serve_rmcp_baseline`].
pub const RMCP_BASELINE_PATH: &str = "/mcp";

/// Serve `handler` with rmcp's own Streamable HTTP server on `listener`, at
/// [`RMCP_BASELINE_PATH`], until `shutdown` resolves.
///
/// The service is rmcp's `StreamableHttpService` with a `LocalSessionManager` and rmcp's
/// default `StreamableHttpServerConfig` (loopback `Host` names only); every accepted
/// connection gets `TCP_NODELAY`. On shutdown rmcp's sessions are cancelled and the server
/// waits for open connections to finish, as durable-mcp's own server does.
///
/// # Errors
/// An I/O error of the listener.
pub async fn serve_rmcp_baseline<H>(
    handler: H,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()>
where
    H: ServerHandler + Clone,
{
    let cancel = CancellationToken::new();
    let config =
        StreamableHttpServerConfig::default().with_cancellation_token(cancel.child_token());
    let service = StreamableHttpService::new(
        move || Ok(handler.clone()),
        Arc::new(LocalSessionManager::default()),
        config,
    );
    let router = axum::Router::new().nest_service(RMCP_BASELINE_PATH, service);
    let listener = listener.tap_io(|tcp| {
        if let Err(error) = tcp.set_nodelay(true) {
            tracing::warn!(%error, "could not set TCP_NODELAY");
        }
    });
    axum::serve(listener, router)
        .with_graceful_shutdown(async move {
            shutdown.await;
            cancel.cancel();
        })
        .await
}
