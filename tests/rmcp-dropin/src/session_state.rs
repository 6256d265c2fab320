//! The counter again, its state moved into durable-mcp's `SessionState`: kept in the store,
//! per session, across restarts and workers.

use durable_mcp::SessionState;
use durable_mcp::rmcp::handler::server::router::tool::ToolRouter;
use durable_mcp::rmcp::handler::server::tool::Extension;
use durable_mcp::rmcp::model::{CallToolResult, ContentBlock, ServerCapabilities, ServerConfig};
use durable_mcp::rmcp::{
    self, ErrorData as McpError, ServerHandler, tool, tool_handler, tool_router,
};

#[derive(Clone)]
pub struct StateCounter {
    tool_router: ToolRouter<StateCounter>,
}

#[tool_router]
impl StateCounter {
    pub fn new() -> Self {
        Self {
            tool_router: Self::tool_router(),
        }
    }

    // ANCHOR: session_state
    #[tool(description = "Increment this session's counter by 1")]
    async fn increment(
        &self,
        Extension(state): Extension<SessionState>,
    ) -> Result<CallToolResult, McpError> {
        let counter = state
            .update("counter", |n: Option<i32>| n.unwrap_or(0) + 1)
            .await?;
        Ok(CallToolResult::success(vec![ContentBlock::text(
            counter.to_string(),
        )]))
    }
    // ANCHOR_END: session_state
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for StateCounter {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }
}
