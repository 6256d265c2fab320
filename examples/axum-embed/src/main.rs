//! A durable MCP endpoint mounted in an existing axum application: the app keeps its own
//! routes (and state), and serves durable-mcp's endpoint at `/mcp` beside them.
//! [`DurableMcp::embed`] hands the app the endpoint's router and runs the worker's
//! background duties alongside the app: recovery after a crash, retention, and the
//! hand-over of requests in flight at shutdown.
//!
//! `cargo run -p example-axum-embed -- [ADDR] [STORE_URL]` (defaults `127.0.0.1:3000`,
//! `sqlite:./axum-embed.db`): `GET /health` is the app's, `/mcp` is durable-mcp's. Kill
//! the process during a `wait` call and start it again: the call finishes, and a client
//! that resumes its stream gets the result.

use std::time::Duration;

use durable_mcp::axum::{self, Router, routing::get};
use durable_mcp::rmcp::handler::server::{tool::Extension, wrapper::Parameters};
use durable_mcp::rmcp::model::{CallToolResult, ContentBlock};
use durable_mcp::rmcp::{
    self, ErrorData as McpError, ServerHandler, tool, tool_handler, tool_router,
};
use durable_mcp::{Durable, DurableMcp};

#[derive(Clone)]
struct Jobs;

/// Arguments of `wait`.
#[derive(serde::Deserialize, schemars::JsonSchema)]
struct WaitArgs {
    /// How long to wait, in milliseconds.
    millis: u64,
}

#[tool_router]
impl Jobs {
    #[tool(
        description = "Wait on a durable timer, then answer: a crash meanwhile does not lose the call"
    )]
    async fn wait(
        &self,
        Extension(durable): Extension<Durable>,
        Parameters(args): Parameters<WaitArgs>,
    ) -> Result<CallToolResult, McpError> {
        durable.progress(0.0, Some(1.0), Some("waiting")).await?;
        durable
            .sleep("wait", Duration::from_millis(args.millis))
            .await?;
        Ok(CallToolResult::success(vec![ContentBlock::text(format!(
            "waited {} ms",
            args.millis
        ))]))
    }
}

#[tool_handler]
impl ServerHandler for Jobs {}

// ANCHOR: embed
#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let addr: std::net::SocketAddr = args
        .next()
        .unwrap_or_else(|| "127.0.0.1:3000".to_owned())
        .parse()?;
    let store = args
        .next()
        .unwrap_or_else(|| "sqlite:./axum-embed.db".to_owned());
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let served = DurableMcp::new(Jobs)
        .store_url(&store)
        .await?
        // A stable name: restarted, this worker resumes its own unfinished calls at once.
        .worker_id(format!("axum-embed@{addr}"))
        .embed(durable_mcp::shutdown_signal(), |mcp, closing| async move {
            // The existing application: its own routes, and the MCP endpoint merged in.
            let app = Router::new()
                .route("/health", get(|| async { "ok" }))
                .merge(mcp);
            axum::serve(listener, app)
                .with_graceful_shutdown(closing)
                .await
        })
        .await?; // recovery and retention ran alongside; requests in flight were handed over
    served?;
    Ok(())
}
// ANCHOR_END: embed
