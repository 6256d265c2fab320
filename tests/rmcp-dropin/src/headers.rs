//! A tool in the rmcp SDK's style that reads the HTTP request's headers from
//! `http::request::Parts`, which rmcp's HTTP service puts in the request's extensions; and
//! an `initialize` that keeps the session's tenant header in a field.

use std::sync::{Arc, Mutex};

use std::time::Duration;

use durable_mcp::rmcp::handler::server::router::tool::ToolRouter;
use durable_mcp::rmcp::handler::server::tool::Extension;
use durable_mcp::rmcp::handler::server::wrapper::Parameters;
use durable_mcp::rmcp::model::{
    CallToolResult, ContentBlock, InitializeRequestParams, InitializeResult, ServerCapabilities,
    ServerConfig,
};
use durable_mcp::rmcp::service::{RequestContext, RoleServer};
use durable_mcp::rmcp::{
    self, ErrorData as McpError, ServerHandler, tool, tool_handler, tool_router,
};

#[derive(Clone)]
pub struct Headers {
    /// The `x-tenant` header of the session's `initialize`.
    initialized_by: Arc<Mutex<Option<String>>>,
    tool_router: ToolRouter<Headers>,
}

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
pub struct After {
    /// Milliseconds to wait before reading the headers.
    pub wait_ms: u64,
}

#[tool_router]
impl Headers {
    pub fn new() -> Self {
        Self {
            initialized_by: Arc::default(),
            tool_router: Self::tool_router(),
        }
    }

    // ANCHOR: parts
    #[tool(
        description = "The request's x-tenant header, and whether it had an authorization header"
    )]
    async fn tenant(
        &self,
        Extension(parts): Extension<http::request::Parts>,
        Parameters(After { wait_ms }): Parameters<After>,
    ) -> Result<CallToolResult, McpError> {
        tokio::time::sleep(Duration::from_millis(wait_ms)).await;
        let tenant = parts
            .headers
            .get("x-tenant")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("none");
        let authorization = parts.headers.contains_key(http::header::AUTHORIZATION);
        Ok(CallToolResult::success(vec![ContentBlock::text(format!(
            "tenant={tenant} method={} authorization={authorization}",
            parts.method
        ))]))
    }
    // ANCHOR_END: parts

    #[tool(description = "The x-tenant header the session's initialize had")]
    async fn initialized_by(&self) -> Result<CallToolResult, McpError> {
        let tenant = self
            .initialized_by
            .lock()
            .map_err(|_| McpError::internal_error("poisoned", None))?
            .clone();
        Ok(CallToolResult::success(vec![ContentBlock::text(
            tenant.unwrap_or_else(|| "unknown".into()),
        )]))
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for Headers {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, McpError> {
        let tenant = context
            .extensions
            .get::<http::request::Parts>()
            .and_then(|parts| {
                parts
                    .headers
                    .get("x-tenant")?
                    .to_str()
                    .ok()
                    .map(str::to_owned)
            });
        *self
            .initialized_by
            .lock()
            .map_err(|_| McpError::internal_error("poisoned", None))? = tenant;
        context.peer.set_peer_info(request.clone());
        self.negotiate_initialize(&request)
    }
}
