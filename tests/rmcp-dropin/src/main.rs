//! Servers written as the rmcp SDK's examples are, each served by durable-mcp exactly as
//! `docs/migrating-from-rmcp.md` says: `rmcp-dropin SERVER ADDR STORE_URL`, where SERVER is
//! `counter`, `counter-shared`, `progress`, `headers` or `state`.
//!
//! Each server's module is the SDK-style code, unchanged but for its `use` lines naming
//! `durable_mcp::rmcp` (the one line a user adds is `use durable_mcp::rmcp;`).

mod counter;
mod headers;
mod progress;
mod session_state;

use durable_mcp::DurableMcp;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let (Some(server), Some(addr), Some(store)) = (args.next(), args.next(), args.next()) else {
        return Err("usage: rmcp-dropin SERVER ADDR STORE_URL".into());
    };
    let addr = addr.parse()?;
    // Where rmcp's `StreamableHttpService::new(|| Ok(Counter::new()), ...)` took a factory,
    // `DurableMcp::from_factory` takes the same one.
    let server = match server.as_str() {
        // ANCHOR: factory
        "counter" => DurableMcp::from_factory(|| Ok(counter::Counter::new()))?,
        // ANCHOR_END: factory
        "counter-shared" => DurableMcp::new(counter::Counter::new()),
        "progress" => DurableMcp::from_factory(|| Ok(progress::Progress::new()))?,
        "headers" => DurableMcp::from_factory(|| Ok(headers::Headers::new()))?,
        "state" => DurableMcp::from_factory(|| Ok(session_state::StateCounter::new()))?,
        other => return Err(format!("unknown server {other:?}").into()),
    };
    // Default engine options: the worker id is the host name and `addr`, so a restart on
    // the same address resumes its own unfinished calls at once.
    // ANCHOR: serve
    server.store_url(&store).await?.bind(addr).serve().await?;
    // ANCHOR_END: serve
    Ok(())
}
