//! Several workers sharing one PostgreSQL store, behind any load balancer, with no sticky
//! sessions: a session created on one worker is served by every worker, and its durable
//! state ([`SessionState`]) is the same on all of them; if a worker dies, another one
//! takes over its requests in flight when their leases expire.
//!
//! ```sh
//! cargo run -p example-postgres-workers -- 127.0.0.1:8081 postgres://app@db/app?schema=mcp worker-1
//! cargo run -p example-postgres-workers -- 127.0.0.1:8082 postgres://app@db/app?schema=mcp worker-2
//! ```
//!
//! Each worker needs its own stable name (the third argument): a restarted worker resumes
//! its own unfinished requests at once. `docs/deployment.md` covers a real deployment.

use durable_mcp::rmcp::handler::server::tool::Extension;
use durable_mcp::rmcp::model::{CallToolResult, ContentBlock};
use durable_mcp::rmcp::{
    self, ErrorData as McpError, ServerHandler, tool, tool_handler, tool_router,
};
use durable_mcp::{DurableMcp, SessionState};

#[derive(Clone)]
struct Visits {
    worker: String,
}

#[tool_router]
impl Visits {
    // ANCHOR: visit
    #[tool(
        description = "Count this session's visits (kept in the store: every worker sees the same count)"
    )]
    async fn visit(
        &self,
        Extension(state): Extension<SessionState>,
    ) -> Result<CallToolResult, McpError> {
        let visits = state
            .update("visits", |n: Option<u64>| n.unwrap_or(0) + 1) // compare-and-set: no lost update
            .await
            .map_err(|e| McpError::internal_error(e.to_string(), None))?;
        Ok(CallToolResult::success(vec![ContentBlock::text(format!(
            "visit {visits}, served by {}",
            self.worker
        ))]))
    }
    // ANCHOR_END: visit
}

#[tool_handler]
impl ServerHandler for Visits {}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let (Some(addr), Some(store), Some(worker)) = (args.next(), args.next(), args.next()) else {
        return Err(
            "usage: example-postgres-workers ADDR postgres://USER@HOST/DB?schema=NAME WORKER_NAME"
                .into(),
        );
    };
    DurableMcp::new(Visits {
        worker: worker.clone(),
    })
    .store_url(&store)
    .await?
    .bind(addr.parse()?)
    .worker_id(worker)
    .serve()
    .await?;
    Ok(())
}
