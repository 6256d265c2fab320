//! The postgres-workers example: two workers on one fresh PostgreSQL schema serve one
//! session in turns, and its durable state counts across both (D4). Reads `DATABASE_URL`;
//! outside CI a missing PostgreSQL skips the test with a printed reason, with `CI=true`
//! it fails.

#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use std::net::SocketAddr;
use std::process::{Command, Stdio};

use durable_mcp_testkit::backend::Backend;
use durable_mcp_testkit::{Server, free_port, initialize, post};
use serde_json::json;

fn worker(store: &str, name: &str) -> Server {
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_example-postgres-workers"));
    command
        .args([addr.to_string().as_str(), store, name])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null());
    Server::launch(command, addr)
}

#[test]
fn d4_postgres_workers_share_a_session_and_its_state() {
    if !Backend::Postgres.available() {
        return;
    }
    let store = Backend::Postgres.store_url(None);
    let a = worker(&store, "worker-a");
    let b = worker(&store, "worker-b");
    let session = initialize(a.addr);
    for (n, (server, name)) in [(&a, "worker-a"), (&b, "worker-b"), (&a, "worker-a")]
        .into_iter()
        .enumerate()
    {
        let call = json!({"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": {"name": "visit", "arguments": {}}});
        let messages = post(server.addr, Some(&session), &call).messages();
        let (_, result) = messages.last().unwrap();
        assert_eq!(
            result["result"]["content"][0]["text"],
            format!("visit {}, served by {name}", n + 1),
            "{messages:?}"
        );
    }
}
