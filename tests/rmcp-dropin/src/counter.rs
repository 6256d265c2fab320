//! A counter in the rmcp SDK's style: its state is a field of the handler.

use std::sync::Arc;

use durable_mcp::rmcp::handler::server::router::tool::ToolRouter;
use durable_mcp::rmcp::handler::server::wrapper::Parameters;
use durable_mcp::rmcp::model::{CallToolResult, ContentBlock, ServerCapabilities, ServerConfig};
use durable_mcp::rmcp::{
    self, ErrorData as McpError, ServerHandler, tool, tool_handler, tool_router,
};
use tokio::sync::Mutex;

#[derive(Clone)]
pub struct Counter {
    counter: Arc<Mutex<i32>>,
    tool_router: ToolRouter<Counter>,
}

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
pub struct By {
    /// How much to add.
    pub by: i32,
}

#[tool_router]
impl Counter {
    pub fn new() -> Self {
        Self {
            counter: Arc::new(Mutex::new(0)),
            tool_router: Self::tool_router(),
        }
    }

    #[tool(description = "Increment the counter by 1")]
    async fn increment(&self) -> Result<CallToolResult, McpError> {
        let mut counter = self.counter.lock().await;
        *counter += 1;
        Ok(CallToolResult::success(vec![ContentBlock::text(
            counter.to_string(),
        )]))
    }

    #[tool(description = "Add to the counter")]
    async fn add(&self, Parameters(By { by }): Parameters<By>) -> Result<CallToolResult, McpError> {
        let mut counter = self.counter.lock().await;
        *counter += by;
        Ok(CallToolResult::success(vec![ContentBlock::text(
            counter.to_string(),
        )]))
    }

    #[tool(description = "Get the counter's value")]
    async fn get_value(&self) -> Result<CallToolResult, McpError> {
        let counter = self.counter.lock().await;
        Ok(CallToolResult::success(vec![ContentBlock::text(
            counter.to_string(),
        )]))
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for Counter {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_instructions("A counter: increment, add, get_value.")
    }
}
