//! The durable-steps example over a real MCP session: the question reaches the client as
//! an `elicitation/create` on the call's stream, the answer (a later POST) continues the
//! handler, and the step's receipt is the result.

#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use std::process::{Command, Stdio};

use durable_mcp_testkit::{Server, free_port, initialize, next_message, post, temp_dir};
use serde_json::json;

#[test]
fn durable_steps_asks_once_and_answers_with_the_receipt() {
    let addr: std::net::SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let store = format!(
        "sqlite:{}",
        temp_dir("example-durable-steps").join("store.db").display()
    );
    let mut command = Command::new(env!("CARGO_BIN_EXE_example-durable-steps"));
    command
        .args([addr.to_string(), store])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null());
    let server = Server::launch(command, addr);
    let session = initialize(server.addr);
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "order", "arguments": {}}});
    let mut stream = post(server.addr, Some(&session), &call);
    let question = next_message(&mut stream);
    assert_eq!(question["method"], "elicitation/create", "{question}");
    let answer = json!({"jsonrpc": "2.0", "id": question["id"], "result": {"action": "accept", "content": {"size": "large"}}});
    assert_eq!(post(server.addr, Some(&session), &answer).status, 202);
    let result = next_message(&mut stream);
    assert_eq!(result["id"], 1, "{result}");
    let receipt = result["result"]["content"][0]["text"].as_str().unwrap();
    assert!(receipt.starts_with("receipt-large-"), "{result}");
}
