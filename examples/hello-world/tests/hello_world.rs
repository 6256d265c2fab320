//! The hello-world example, run as a user runs it: a real MCP session over HTTP.

#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use std::process::{Command, Stdio};

use durable_mcp_testkit::{Server, free_port, initialize, post};
use serde_json::json;

#[test]
fn hello_world_answers_a_tool_call() {
    let addr: std::net::SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_example-hello-world"));
    command
        .args([addr.to_string().as_str(), "memory:"])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null());
    let server = Server::launch(command, addr);
    let session = initialize(server.addr);
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "hello", "arguments": {}}});
    let messages = post(server.addr, Some(&session), &call).messages();
    let (_, result) = messages.last().unwrap();
    assert_eq!(
        result["result"]["content"][0]["text"], "Hello, durable world",
        "{messages:?}"
    );
}
