//! D7 through an embedded router: the axum-embed example (durable-mcp mounted in an axum
//! app with its own routes) is SIGKILLed in the middle of a tool call and started again
//! on the same SQLite file; the restarted process recovers the call by itself, and the
//! client that resumes the call's stream with `Last-Event-ID` gets its one outcome.

#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use durable_mcp_testkit::{Server, free_port, initialize, post, request_at, resume, temp_dir};
use serde_json::{Value, json};

fn start(addr: SocketAddr, store: &str) -> Server {
    let mut command = Command::new(env!("CARGO_BIN_EXE_example-axum-embed"));
    command
        .args([addr.to_string().as_str(), store])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null());
    Server::launch(command, addr)
}

#[test]
fn d7_embedded_router_recovers_a_call_after_sigkill_and_restart() {
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let store = format!(
        "sqlite:{}",
        temp_dir("example-axum-embed").join("store.db").display()
    );
    let mut server = start(addr, &store);

    // The app's own route is served beside the MCP endpoint.
    let health = request_at(addr, "GET", "/health", &[], None);
    assert_eq!((health.status, health.body().as_str()), (200, "ok"));
    let session = initialize(addr);
    let call = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {
        "name": "wait", "arguments": {"millis": 1500}, "_meta": {"progressToken": "p"}}});
    let mut stream = post(addr, Some(&session), &call);
    // The progress notification is committed once the handler runs: the call is mid-way.
    let last_seen = loop {
        let (id, data) = stream
            .next_event()
            .expect("the call's stream ended before its progress");
        if data.contains("notifications/progress") {
            break id.unwrap();
        }
    };
    server.kill();
    drop(stream);
    let _server = start(addr, &store);

    // Resume on a thread, so that a call nobody recovers fails the test instead of hanging it.
    let (tx, rx) = mpsc::channel();
    let resumed_session = session.clone();
    std::thread::spawn(move || {
        let _ = tx.send(resume(addr, &resumed_session, &last_seen).messages());
    });
    let messages: Vec<(String, Value)> = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("no outcome within 30 s of the restart");
    let outcomes: Vec<&Value> = messages
        .iter()
        .map(|(_, m)| m)
        .filter(|m| m["id"] == 7)
        .collect();
    assert_eq!(outcomes.len(), 1, "one outcome: {messages:?}");
    assert_eq!(
        outcomes[0]["result"]["content"][0]["text"], "waited 1500 ms",
        "{messages:?}"
    );
}

/// Graceful hand-over through an embedded router: SIGTERM while a call runs and a `GET`
/// stream is open. The embedded app's graceful shutdown is not held up by the long-lived
/// stream (`Closing` resolves after durable-mcp ended its SSE connections), the call gets
/// the grace period to finish, and after a restart its outcome is there to resume.
#[test]
fn d7_embedded_router_shuts_down_gracefully_with_a_stream_open() {
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let store = format!(
        "sqlite:{}",
        temp_dir("example-axum-embed-term")
            .join("store.db")
            .display()
    );
    let mut server = start(addr, &store);
    let session = initialize(addr);
    let standalone = request_at(
        addr,
        "GET",
        "/mcp",
        &[
            ("accept", "text/event-stream"),
            ("mcp-session-id", &session),
        ],
        None,
    );
    assert_eq!(standalone.status, 200);
    let call = json!({"jsonrpc": "2.0", "id": 8, "method": "tools/call", "params": {
        "name": "wait", "arguments": {"millis": 1000}, "_meta": {"progressToken": "p"}}});
    let mut stream = post(addr, Some(&session), &call);
    let last_seen = loop {
        let (id, data) = stream
            .next_event()
            .expect("the call's stream ended before its progress");
        if data.contains("notifications/progress") {
            break id.unwrap();
        }
    };
    let term = Command::new("kill")
        .args(["-TERM", &server.child.id().to_string()])
        .status()
        .unwrap();
    assert!(term.success());
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    let status = loop {
        if let Some(status) = server.child.try_wait().unwrap() {
            break status;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the embedded app did not exit within 15 s of SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{status}");
    drop((standalone, stream));

    let _server = start(addr, &store);
    let messages = resume(addr, &session, &last_seen).messages();
    let outcomes: Vec<&Value> = messages
        .iter()
        .map(|(_, m)| m)
        .filter(|m| m["id"] == 8)
        .collect();
    assert_eq!(outcomes.len(), 1, "one outcome: {messages:?}");
    assert_eq!(
        outcomes[0]["result"]["content"][0]["text"], "waited 1000 ms",
        "{messages:?}"
    );
}
