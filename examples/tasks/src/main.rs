//! A tool that runs as a durable task. Clients that use tasks (the 2026-07-28 Tasks
//! extension, or `params.task` in 2025-11-25) get a task id at once and poll `tasks/get`
//! on any worker; the task is committed before its id is returned, and if its worker dies
//! another one (or this one, restarted) finishes it. Clients that do not use tasks get
//! the result directly.
//!
//! `cargo run -p example-tasks -- [ADDR] [STORE_URL]` (defaults `127.0.0.1:8080`,
//! `sqlite:./tasks.db`).

use std::time::Duration;

use durable_mcp::rmcp::handler::server::{tool::Extension, wrapper::Parameters};
use durable_mcp::rmcp::model::{CallToolResult, ContentBlock};
use durable_mcp::rmcp::{
    self, ErrorData as McpError, ServerHandler, tool, tool_handler, tool_router,
};
use durable_mcp::{Durable, DurableMcp, TaskSupport, task_support};

#[derive(Clone)]
struct Renderer;

/// Arguments of `render`.
#[derive(serde::Deserialize, schemars::JsonSchema)]
struct RenderArgs {
    /// What to render.
    scene: String,
    /// How many frames (each takes 100 ms).
    frames: u32,
}

#[tool_router]
impl Renderer {
    // ANCHOR: render
    #[tool(description = "Render a scene, frame by frame", meta = task_support(TaskSupport::Optional))]
    async fn render(
        &self,
        Extension(durable): Extension<Durable>,
        Parameters(args): Parameters<RenderArgs>,
    ) -> Result<CallToolResult, McpError> {
        for frame in 1..=args.frames {
            // Each frame is a step: after a crash, the frames already rendered are not redone.
            durable
                .step(&format!("frame-{frame}"), |_| {
                    tokio::time::sleep(Duration::from_millis(100))
                })
                .await?;
            durable
                .progress(f64::from(frame), Some(f64::from(args.frames)), None)
                .await?;
        }
        Ok(CallToolResult::success(vec![ContentBlock::text(format!(
            "{}: {} frames",
            args.scene, args.frames
        ))]))
    }
    // ANCHOR_END: render
}

#[tool_handler]
impl ServerHandler for Renderer {}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let addr = args
        .next()
        .unwrap_or_else(|| "127.0.0.1:8080".to_owned())
        .parse()?;
    let store = args
        .next()
        .unwrap_or_else(|| "sqlite:./tasks.db".to_owned());
    DurableMcp::new(Renderer)
        .store_url(&store)
        .await?
        .bind(addr)
        .serve()
        .await?;
    Ok(())
}
