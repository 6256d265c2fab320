//! Hello world: an rmcp tool server, served by durable-mcp over Streamable HTTP with its
//! sessions and streams in a SQLite file, so that a client resumes its streams after a
//! restart.
//!
//! `cargo run -p example-hello-world -- [ADDR] [STORE_URL]` (defaults `127.0.0.1:8080` and
//! `sqlite:./hello.db`), then point an MCP client at `http://ADDR/mcp`.

// ANCHOR: hello
// DurableMcp, and rmcp's handler trait and macros (which expand to `rmcp::...` paths, so the
// prelude brings durable-mcp's re-export of rmcp into scope too).
use durable_mcp::prelude::*;

#[derive(Clone)]
struct Hello;

#[tool_router]
impl Hello {
    #[tool(description = "Say hello")]
    async fn hello(&self) -> String {
        "Hello, durable world".to_owned()
    }
}

#[tool_handler]
impl ServerHandler for Hello {}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let addr = args
        .next()
        .unwrap_or_else(|| "127.0.0.1:8080".to_owned())
        .parse()?;
    let store = args
        .next()
        .unwrap_or_else(|| "sqlite:./hello.db".to_owned());
    DurableMcp::new(Hello)
        .store_url(&store) // memory:, sqlite:PATH, postgres://..., redis://...
        .await?
        .bind(addr)
        .serve() // until Ctrl-C / SIGTERM, then a graceful shutdown
        .await?;
    Ok(())
}
// ANCHOR_END: hello
