//! Durable steps and questions: a tool whose effects happen once and whose question is
//! asked once, even if the worker dies in the middle and the call runs again.
//!
//! `order` asks the client which size (a durable question: on a re-run the committed
//! answer comes back without asking again), charges a card in a durable step (on a
//! re-run the committed receipt comes back without charging again; a charge interrupted
//! before its commit is retried with the same idempotency key, which the payment system
//! uses to deduplicate), then waits on a durable timer.
//!
//! `cargo run -p example-durable-steps -- [ADDR] [STORE_URL]` (defaults `127.0.0.1:8080`,
//! `sqlite:./durable-steps.db`). The rules for handler authors are in
//! `docs/durable-execution.md`.

use std::time::Duration;

use durable_mcp::rmcp::handler::server::tool::Extension;
use durable_mcp::rmcp::model::{
    CallToolResult, ContentBlock, ElicitRequestParams, ElicitationAction, ElicitationSchema,
};
use durable_mcp::rmcp::{
    self, ErrorData as McpError, ServerHandler, tool, tool_handler, tool_router,
};
use durable_mcp::{Durable, DurableMcp};

#[derive(Clone)]
struct Shop;

/// A stand-in for a payment service that deduplicates charges by idempotency key.
async fn charge_card(size: &str, idempotency_key: &str) -> String {
    // The whole key: it begins with the run's creation time, so a prefix is not unique.
    format!("receipt-{size}-{idempotency_key}")
}

fn size_question() -> Result<ElicitRequestParams, McpError> {
    let schema = ElicitationSchema::builder()
        .required_string("size")
        .build()
        .map_err(|e| McpError::internal_error(e, None))?;
    Ok(ElicitRequestParams::FormElicitationParams {
        meta: None,
        message: "Which size?".into(),
        requested_schema: schema,
    })
}

#[tool_router]
impl Shop {
    // ANCHOR: order
    #[tool(
        description = "Order a pizza: asks the size once, charges once, bakes on a durable timer"
    )]
    async fn order(
        &self,
        Extension(durable): Extension<Durable>,
    ) -> Result<CallToolResult, McpError> {
        let answer = durable.elicit(size_question()?).await?; // asked once, in either protocol era
        if answer.action != ElicitationAction::Accept {
            return Ok(CallToolResult::success(vec![ContentBlock::text(
                "no order",
            )]));
        }
        let size = answer
            .content
            .as_ref()
            .and_then(|c| c.get("size"))
            .and_then(|s| s.as_str())
            .unwrap_or("medium")
            .to_owned();
        // Runs once; a re-run returns the committed receipt.
        let receipt: String = durable
            .step("charge", |key| async move {
                charge_card(&size, key.idempotency_key()).await
            })
            .await?;
        durable.sleep("bake", Duration::from_millis(300)).await?; // a durable timer
        Ok(CallToolResult::success(vec![ContentBlock::text(receipt)]))
    }
    // ANCHOR_END: order
}

#[tool_handler]
impl ServerHandler for Shop {}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let addr = args
        .next()
        .unwrap_or_else(|| "127.0.0.1:8080".to_owned())
        .parse()?;
    let store = args
        .next()
        .unwrap_or_else(|| "sqlite:./durable-steps.db".to_owned());
    DurableMcp::new(Shop)
        .store_url(&store)
        .await?
        .bind(addr)
        .serve()
        .await?;
    Ok(())
}
