//! A progress tool in the rmcp SDK's style: it reports each step to the client with the
//! request's progress token.

use std::time::Duration;

use durable_mcp::rmcp::handler::server::router::tool::ToolRouter;
use durable_mcp::rmcp::handler::server::wrapper::Parameters;
use durable_mcp::rmcp::model::{
    CallToolResult, ContentBlock, ProgressNotificationParam, ServerCapabilities, ServerConfig,
};
use durable_mcp::rmcp::service::{RequestContext, RoleServer};
use durable_mcp::rmcp::{
    self, ErrorData as McpError, ServerHandler, tool, tool_handler, tool_router,
};

#[derive(Clone)]
pub struct Progress {
    tool_router: ToolRouter<Progress>,
}

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
pub struct Steps {
    /// How many steps.
    pub steps: u32,
    /// Milliseconds each step takes.
    pub step_ms: u64,
}

#[tool_router]
impl Progress {
    pub fn new() -> Self {
        Self {
            tool_router: Self::tool_router(),
        }
    }

    #[tool(description = "Work through the steps, reporting progress after each")]
    async fn stream_processor(
        &self,
        Parameters(Steps { steps, step_ms }): Parameters<Steps>,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, McpError> {
        for step in 1..=steps {
            tokio::time::sleep(Duration::from_millis(step_ms)).await;
            if let Some(token) = context.meta.get_progress_token() {
                let param = ProgressNotificationParam::new(token, f64::from(step))
                    .with_total(f64::from(steps))
                    .with_message(format!("step {step}"));
                context
                    .peer
                    .notify_progress(param)
                    .await
                    .map_err(|e| McpError::internal_error(e.to_string(), None))?;
            }
        }
        Ok(CallToolResult::success(vec![ContentBlock::text(format!(
            "processed {steps} steps"
        ))]))
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for Progress {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }
}
