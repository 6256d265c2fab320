//! The stdio transport with the real binary: same handler, same engine.

#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

use serde_json::{Value, json};

#[test]
fn stdio_initialize_list_call_and_elicit() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_durable-mcp"))
        .args(["serve", "--stdio", "--store", "memory:"])
        .env("RUST_LOG", "warn")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn");
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut send = |v: Value| {
        writeln!(stdin, "{v}").unwrap();
        stdin.flush().unwrap();
    };
    let mut recv = || -> Value {
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line:?}"))
    };

    send(json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {"elicitation": {}}, "clientInfo": {"name": "stdio-test", "version": "1"}}}));
    let init = recv();
    assert_eq!(init["result"]["protocolVersion"], "2025-06-18");
    send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));

    send(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}));
    let list = recv();
    assert!(list["result"]["tools"].as_array().unwrap().iter().any(|t| t["name"] == "test_simple_text"));

    send(json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "test_simple_text", "arguments": {}}}));
    let call = recv();
    assert_eq!(call["id"], 3);
    assert!(call["result"]["content"][0]["text"].is_string());

    send(json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "test_elicitation", "arguments": {"message": "name?"}}}));
    let question = recv();
    assert_eq!(question["method"], "elicitation/create", "{question}");
    send(json!({"jsonrpc": "2.0", "id": question["id"], "result": {"action": "accept", "content": {"username": "ada", "email": "ada@example.com"}}}));
    let answer = recv();
    assert_eq!(answer["id"], 4, "{answer}");
    assert!(answer["result"]["content"][0]["text"].as_str().unwrap().contains("accept"), "{answer}");

    send(json!({"jsonrpc": "2.0", "id": 5, "method": "no/such"}));
    assert_eq!(recv()["error"]["code"], -32601);
    writeln!(stdin, "{{not json").unwrap();
    stdin.flush().unwrap();
    assert_eq!(recv()["error"]["code"], -32700);

    drop(stdin);
    let status = child.wait().unwrap();
    assert!(status.success(), "exits cleanly when stdin closes");
}
