//! Servers written as the rmcp SDK's examples are (`src/`), served by durable-mcp with one
//! added line, behave as `docs/migrating-from-rmcp.md` says: handler fields per session and
//! new after a restart, progress resumed after SIGKILL, `http::request::Parts` in both eras
//! and in a re-run, `SessionState` in both eras.
#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use durable_mcp_testkit::{
    Server, V, free_port, initialize, last_message, post, request, resume, temp_dir,
};
use serde_json::{Value, json};

fn launch(server: &str, addr: SocketAddr, db: &Path) -> Server {
    let mut command = Command::new(env!("CARGO_BIN_EXE_rmcp-dropin"));
    command
        .args([
            server,
            &addr.to_string(),
            &format!("sqlite:{}", db.display()),
        ])
        .stdout(Stdio::null())
        .env("RUST_LOG", "warn");
    Server::launch(command, addr)
}

fn addr() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], free_port()))
}

fn call(id: u64, name: &str, arguments: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": name, "arguments": arguments}})
}

/// The text of a legacy call's result.
fn text(addr: SocketAddr, session: &str, id: u64, name: &str) -> String {
    let message = last_message(post(addr, Some(session), &call(id, name, json!({}))));
    message["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("{name}: {message}"))
        .to_owned()
}

/// One 2026-07-28 `tools/call` with extra headers; the final message.
fn modern_call(
    addr: SocketAddr,
    id: u64,
    name: &str,
    arguments: Value,
    extra: &[(&str, &str)],
) -> Value {
    let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": name, "arguments": arguments, "_meta": {
        "io.modelcontextprotocol/protocolVersion": V,
        "io.modelcontextprotocol/clientInfo": {"name": "dropin-test", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {},
    }}});
    let mut headers = vec![
        ("accept", "application/json, text/event-stream"),
        ("content-type", "application/json"),
        ("mcp-protocol-version", V),
        ("mcp-method", "tools/call"),
        ("mcp-name", name),
    ];
    headers.extend_from_slice(extra);
    last_message(request(addr, "POST", &headers, Some(&body.to_string())))
}

/// `DurableMcp::from_factory`, as rmcp's `StreamableHttpService::new`: each session has its
/// own counter; a restarted worker serves the same session with a new instance (the field
/// starts again at 0, as documented), while the session lives on. `DurableMcp::new`: one
/// instance, its field shared by every session.
#[test]
fn handler_fields_are_per_session_with_a_factory_and_new_after_a_restart() {
    let (addr, db) = (addr(), temp_dir("dropin-counter").join("store.db"));
    let mut server = launch("counter", addr, &db);
    let (a, b) = (initialize(addr), initialize(addr));
    assert_eq!(text(addr, &a, 1, "increment"), "1");
    assert_eq!(text(addr, &a, 2, "increment"), "2");
    assert_eq!(
        text(addr, &b, 1, "increment"),
        "1",
        "the second session's own counter, as under rmcp"
    );
    assert_eq!(text(addr, &a, 3, "get_value"), "2");
    server.kill();
    let _server = launch("counter", addr, &db);
    assert_eq!(
        text(addr, &a, 4, "get_value"),
        "0",
        "a new instance after the restart: the field starts again"
    );
    assert_eq!(text(addr, &a, 5, "increment"), "1");

    let (addr, db) = (self::addr(), temp_dir("dropin-shared").join("store.db"));
    let _shared = launch("counter-shared", addr, &db);
    let (a, b) = (initialize(addr), initialize(addr));
    assert_eq!(text(addr, &a, 1, "increment"), "1");
    assert_eq!(
        text(addr, &b, 1, "increment"),
        "2",
        "DurableMcp::new: one instance for every session"
    );
}

/// The SDK's progress tool, killed (SIGKILL) after two of its six steps: a worker restarted
/// with default options on the same address and SQLite file resumes the call at once (its
/// worker id is its host and address), and the client's resumed stream has the remaining
/// progress once and one result, within 2.5 s of the restart.
#[test]
fn d7_progress_resumes_after_sigkill_on_a_library_worker_with_default_options() {
    let (addr, db) = (addr(), temp_dir("dropin-progress").join("store.db"));
    let mut server = launch("progress", addr, &db);
    let session = initialize(addr);
    let mut body = call(7, "stream_processor", json!({"steps": 6, "step_ms": 150}));
    body["params"]["_meta"] = json!({"progressToken": "p"});
    let mut response = post(addr, Some(&session), &body);
    assert_eq!(response.status, 200);
    let (mut last, mut seen) = (String::new(), Vec::new());
    while seen.len() < 2 {
        let (id, data) = response.next_event().expect("an event");
        last = id.expect("an event id");
        if !data.is_empty() {
            seen.push(serde_json::from_str::<Value>(&data).unwrap());
        }
    }
    server.kill();
    let restarted = Instant::now();
    let _server = launch("progress", addr, &db);
    let rest: Vec<Value> = resume(addr, &session, &last)
        .within(Duration::from_secs(10))
        .messages()
        .into_iter()
        .map(|(_, m)| m)
        .collect();
    let elapsed = restarted.elapsed();
    let progress: Vec<u64> = seen
        .iter()
        .chain(&rest)
        .filter(|m| m["method"] == "notifications/progress")
        .map(|m| m["params"]["progress"].as_f64().unwrap() as u64)
        .collect();
    assert_eq!(
        progress,
        vec![1, 2, 3, 4, 5, 6],
        "every step once, in order: {seen:?} then {rest:?}"
    );
    let outcomes: Vec<&Value> = rest.iter().filter(|m| m["id"] == 7).collect();
    assert_eq!(outcomes.len(), 1, "{rest:?}");
    assert_eq!(
        outcomes[0]["result"]["content"][0]["text"],
        "processed 6 steps"
    );
    assert!(
        elapsed < Duration::from_millis(2_500),
        "resumed {elapsed:?} after the restart (the lease is 5 s)"
    );
}

/// An `initialize` that reads `Parts` keeps the session's tenant in a field of the session's
/// instance (made for its `initialize`), which the session's later calls read.
#[test]
fn initialize_reads_the_parts_and_the_session_keeps_its_instance() {
    let (addr, db) = (addr(), temp_dir("dropin-initialize").join("store.db"));
    let _server = launch("headers", addr, &db);
    let body = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "dropin-test", "version": "1"}}});
    let headers = [
        ("accept", "application/json, text/event-stream"),
        ("content-type", "application/json"),
        ("x-tenant", "initech"),
    ];
    let response = request(addr, "POST", &headers, Some(&body.to_string()));
    assert_eq!(response.status, 200);
    let session = response
        .header("mcp-session-id")
        .expect("a session")
        .to_owned();
    let _ = response.body();
    let other = initialize(addr);
    assert_eq!(text(addr, &session, 1, "initialized_by"), "initech");
    assert_eq!(
        text(addr, &other, 1, "initialized_by"),
        "unknown",
        "the other session's own instance"
    );
}

/// A tool taking `Extension<http::request::Parts>` reads the request's headers in both eras;
/// re-run after a crash, it reads the ones kept with the journal entry, credentials left out.
#[test]
fn the_request_parts_are_in_the_extensions_in_both_eras_and_in_a_re_run() {
    let (addr, db) = (addr(), temp_dir("dropin-headers").join("store.db"));
    let mut server = launch("headers", addr, &db);
    let session = initialize(addr);
    let headers = [
        ("accept", "application/json, text/event-stream"),
        ("content-type", "application/json"),
        ("mcp-session-id", session.as_str()),
        ("x-tenant", "acme"),
        ("authorization", "Bearer not-checked"),
    ];
    let legacy = |id: u64, wait_ms: u64| {
        request(
            addr,
            "POST",
            &headers,
            Some(&call(id, "tenant", json!({"wait_ms": wait_ms})).to_string()),
        )
    };
    let message = last_message(legacy(1, 0));
    assert_eq!(
        message["result"]["content"][0]["text"], "tenant=acme method=POST authorization=true",
        "{message}"
    );
    assert_eq!(
        text(addr, &session, 9, "initialized_by"),
        "unknown",
        "testkit's initialize sends no x-tenant"
    );
    let message = modern_call(
        addr,
        2,
        "tenant",
        json!({"wait_ms": 0}),
        &[("x-tenant", "globex")],
    );
    assert_eq!(
        message["result"]["content"][0]["text"], "tenant=globex method=POST authorization=false",
        "{message}"
    );

    let mut response = legacy(3, 1_500);
    let (priming, _) = response.next_event().expect("the priming event");
    server.kill();
    let _server = launch("headers", addr, &db);
    let rest = resume(addr, &session, &priming.expect("an event id"))
        .within(Duration::from_secs(15))
        .messages();
    let outcome = &rest.last().expect("the re-run's outcome").1;
    assert_eq!(
        outcome["result"]["content"][0]["text"], "tenant=acme method=POST authorization=false",
        "{outcome}"
    );
}

/// `Extension<SessionState>`: a legacy session's counter survives a restart; a 2026-07-28
/// call, which has no session, gets an error that says so and names its version.
#[test]
fn session_state_in_both_eras() {
    let (addr, db) = (addr(), temp_dir("dropin-state").join("store.db"));
    let mut server = launch("state", addr, &db);
    let session = initialize(addr);
    assert_eq!(text(addr, &session, 1, "increment"), "1");
    assert_eq!(text(addr, &session, 2, "increment"), "2");
    server.kill();
    let _server = launch("state", addr, &db);
    assert_eq!(
        text(addr, &session, 3, "increment"),
        "3",
        "kept in the store"
    );
    let message = modern_call(addr, 4, "increment", json!({}), &[]);
    assert_eq!(message["error"]["code"], -32603, "{message}");
    let said = message["error"]["message"].as_str().unwrap();
    assert!(
        said.contains("2026-07-28") && said.contains("no session"),
        "{said}"
    );
}
