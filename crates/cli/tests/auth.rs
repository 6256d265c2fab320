//! D13 with authentication, end to end with the real binary (`--auth-api-keys`): two
//! principals, two workers sharing a PostgreSQL or Redis store. Everything B reaches by
//! A's ids behaves as unknown: A's session (POST, GET, DELETE: 404), A's stream by
//! `Last-Event-ID` (404), A's task (`tasks/*` answer as for an id that never existed) and
//! A's sealed `requestState` (refused as invalid). A call journaled by A on a worker that is
//! killed is re-run by the other worker as A: A resumes its outcome there, B cannot.
//!
//! The tests read `DATABASE_URL` / `REDIS_URL`; outside CI a missing service skips them
//! with a printed reason, with `CI=true` they fail.

#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

mod support;

use std::net::SocketAddr;

use serde_json::{Value, json};
use support::backend::Backend;
use support::*;

const ALICE: &str = "k-alice-0123456789";
const BOB: &str = "k-bob-9876543210";

fn keys_file(name: &str) -> String {
    let path = temp_dir(name).join("keys");
    std::fs::write(&path, format!("alice {ALICE}\nbob {BOB}\n")).unwrap();
    path.display().to_string()
}

/// Two workers with API keys on a fresh store of `backend` (`None`: the service is missing).
fn two_authenticated_workers(backend: Backend, name: &str) -> Option<(Server, Server)> {
    let keys = keys_file(name);
    two_workers(backend, &["--auth-api-keys", &keys, "--lease-ms", "1500"])
}

fn with_token<'a>(
    token: &'a str,
    bearer: &'a mut String,
    headers: &[(&'a str, &'a str)],
) -> Vec<(&'a str, &'a str)> {
    *bearer = format!("Bearer {token}");
    let mut all = headers.to_vec();
    all.push(("authorization", bearer.as_str()));
    all
}

const POST: [(&str, &str); 2] = [
    ("accept", "application/json, text/event-stream"),
    ("content-type", "application/json"),
];

fn post_as(addr: SocketAddr, token: &str, session: Option<&str>, body: &Value) -> Response {
    let mut bearer = String::new();
    let mut headers = with_token(token, &mut bearer, &POST);
    if let Some(s) = session {
        headers.push(("mcp-session-id", s));
    }
    request(addr, "POST", &headers, Some(&body.to_string()))
}

fn initialize_as(addr: SocketAddr, token: &str) -> String {
    let response = post_as(
        addr,
        token,
        None,
        &json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {"elicitation": {}}, "clientInfo": {"name": "auth-test", "version": "1"}}}),
    );
    assert_eq!(response.status, 200);
    let session = response
        .header("mcp-session-id")
        .expect("session id")
        .to_owned();
    let _ = response.body();
    assert_eq!(
        post_as(
            addr,
            token,
            Some(&session),
            &json!({"jsonrpc": "2.0", "method": "notifications/initialized"})
        )
        .status,
        202
    );
    session
}

fn call_as(
    addr: SocketAddr,
    token: &str,
    session: &str,
    id: u64,
    method: &str,
    params: Value,
) -> Value {
    let response = post_as(
        addr,
        token,
        Some(session),
        &json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}),
    );
    assert_eq!(response.status, 200, "{method}");
    response.messages().pop().unwrap().1
}

fn get_as(addr: SocketAddr, token: &str, session: &str, last_event_id: Option<&str>) -> Response {
    let mut bearer = String::new();
    let mut headers = with_token(
        token,
        &mut bearer,
        &[("accept", "text/event-stream"), ("mcp-session-id", session)],
    );
    if let Some(id) = last_event_id {
        headers.push(("last-event-id", id));
    }
    request(addr, "GET", &headers, None)
}

fn modern_as(addr: SocketAddr, token: &str, id: u64, params: Value) -> Value {
    modern_request_as(addr, token, id, "tools/call", params, false)
}

/// A 2026-07-28 request with `token`; `tasks`: the client declares the tasks extension.
fn modern_request_as(
    addr: SocketAddr,
    token: &str,
    id: u64,
    method: &str,
    params: Value,
    tasks: bool,
) -> Value {
    let mut params = params;
    let capabilities = if tasks {
        json!({"elicitation": {}, "extensions": {TASKS_EXTENSION: {}}})
    } else {
        json!({"elicitation": {}})
    };
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "auth-test", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": capabilities,
    });
    let name = params
        .get("name")
        .or_else(|| params.get("taskId"))
        .and_then(Value::as_str)
        .map(str::to_owned);
    let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
    let mut bearer = String::new();
    let mut headers = with_token(token, &mut bearer, &POST);
    headers.extend([
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", method),
    ]);
    if let Some(name) = &name {
        headers.push(("mcp-name", name.as_str()));
    }
    last_message(request(addr, "POST", &headers, Some(&body.to_string())))
}

/// B (on worker `b`) reaches for everything of A's (on worker `a`).
fn another_principals_ids_are_unknown(a: SocketAddr, b: SocketAddr) {
    // Without a key, or with a wrong one: refused.
    assert_eq!(
        post(
            a,
            None,
            &json!({"jsonrpc": "2.0", "id": 0, "method": "ping"})
        )
        .status,
        401
    );
    assert_eq!(
        post_as(
            b,
            "k-nobody",
            None,
            &json!({"jsonrpc": "2.0", "id": 0, "method": "ping"})
        )
        .status,
        401
    );

    let session_a = initialize_as(a, ALICE);
    let session_b = initialize_as(b, BOB);
    // Session: B's requests with A's session id find no session.
    let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"});
    assert_eq!(
        post_as(b, BOB, Some(&session_a), &ping).status,
        404,
        "POST in another principal's session"
    );
    assert_eq!(
        get_as(b, BOB, &session_a, None).status,
        404,
        "GET of another principal's session"
    );
    let mut bearer = String::new();
    let delete = with_token(BOB, &mut bearer, &[("mcp-session-id", session_a.as_str())]);
    assert_eq!(
        request(b, "DELETE", &delete, None).status,
        404,
        "DELETE of another principal's session"
    );

    // Stream and Last-Event-ID: A's events cannot be resumed by B, in B's session or A's.
    let mut stream = post_as(
        a,
        ALICE,
        Some(&session_a),
        &json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "test_simple_text", "arguments": {}}}),
    );
    assert_eq!(stream.status, 200);
    let (event, _) = stream.next_event().expect("an event");
    let event = event.expect("an event id");
    let _ = stream.body();
    assert_eq!(
        get_as(b, BOB, &session_b, Some(&event)).status,
        404,
        "A's event id in B's session"
    );
    assert_eq!(
        get_as(b, BOB, &session_a, Some(&event)).status,
        404,
        "A's event id with A's session id"
    );
    assert_eq!(
        get_as(b, ALICE, &session_a, Some(&event)).status,
        200,
        "A resumes its own stream on the other worker"
    );

    // Task: A's task is A's, in every session of A's; for B it does not exist.
    let created = call_as(
        a,
        ALICE,
        &session_a,
        3,
        "tools/call",
        json!({"name": "slow_compute", "arguments": {"seconds": 30.0}, "task": {"ttl": 60_000}}),
    );
    let task = created["result"]["task"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("a task: {created}"))
        .to_owned();
    let unknown = call_as(
        b,
        BOB,
        &session_b,
        4,
        "tasks/get",
        json!({"taskId": "0123456789abcdef0123456789abcdef"}),
    )["error"]
        .clone();
    assert!(
        unknown.is_object(),
        "the reference answer for an unknown task: {unknown}"
    );
    for method in ["tasks/get", "tasks/result", "tasks/cancel"] {
        let answer = call_as(b, BOB, &session_b, 5, method, json!({"taskId": task}));
        assert_eq!(
            answer["error"], unknown,
            "{method} of another principal's task: {answer}"
        );
    }
    let listed = call_as(b, BOB, &session_b, 6, "tasks/list", json!({}));
    assert_eq!(listed["result"]["tasks"], json!([]), "{listed}");
    let other_session_of_a = initialize_as(b, ALICE);
    let mine = call_as(
        b,
        ALICE,
        &other_session_of_a,
        7,
        "tasks/get",
        json!({"taskId": task}),
    );
    assert_eq!(
        mine["result"]["status"], "working",
        "A sees its task from another session and worker: {mine}"
    );
    let _ = call_as(
        a,
        ALICE,
        &session_a,
        8,
        "tasks/cancel",
        json!({"taskId": task}),
    );

    // A 2026-07-28 task (no session): A's, and unknown to B.
    let created = modern_request_as(
        a,
        ALICE,
        12,
        "tools/call",
        json!({"name": "slow_compute", "arguments": {"seconds": 30}}),
        true,
    );
    assert_eq!(created["result"]["resultType"], "task", "{created}");
    let modern_task = created["result"]["taskId"].as_str().unwrap().to_owned();
    let unknown = modern_request_as(
        b,
        BOB,
        13,
        "tasks/get",
        json!({"taskId": "0123456789abcdef0123456789abcdef"}),
        true,
    )["error"]
        .clone();
    assert!(unknown.is_object(), "{unknown}");
    for method in ["tasks/get", "tasks/cancel"] {
        let answer = modern_request_as(b, BOB, 14, method, json!({"taskId": modern_task}), true);
        assert_eq!(
            answer["error"], unknown,
            "{method} of another principal's 2026-07-28 task: {answer}"
        );
    }
    let mine = modern_request_as(
        b,
        ALICE,
        15,
        "tasks/get",
        json!({"taskId": modern_task}),
        true,
    );
    assert_eq!(
        mine["result"]["status"], "working",
        "A reaches its task on the other worker: {mine}"
    );
    let _ = modern_request_as(
        a,
        ALICE,
        16,
        "tasks/cancel",
        json!({"taskId": modern_task}),
        true,
    );

    // requestState: sealed for A, refused for B (as a tampered one is).
    let round1 = modern_as(
        a,
        ALICE,
        9,
        json!({"name": "ask", "arguments": {"question": "name?"}}),
    );
    assert_eq!(round1["result"]["resultType"], "input_required", "{round1}");
    let state = round1["result"]["requestState"]
        .as_str()
        .unwrap()
        .to_owned();
    let key = round1["result"]["inputRequests"]
        .as_object()
        .unwrap()
        .keys()
        .next()
        .unwrap()
        .clone();
    let retry = |token: &str, id: u64| {
        modern_as(
            b,
            token,
            id,
            json!({"name": "ask", "arguments": {"question": "name?"},
            "inputResponses": {key.as_str(): {"action": "accept", "content": {"answer": "Ada"}}}, "requestState": state}),
        )
    };
    let stolen = retry(BOB, 10);
    assert_eq!(
        stolen["error"]["code"], -32602,
        "another principal's requestState is invalid: {stolen}"
    );
    let own = retry(ALICE, 11);
    assert_eq!(
        own["result"]["content"][0]["text"], "Ada",
        "A's own retry continues on the other worker: {own}"
    );
}

#[test]
fn d13_postgres_another_principals_ids_are_unknown_across_workers() {
    let Some((a, b)) = two_authenticated_workers(Backend::Postgres, "auth-pg") else {
        return;
    };
    another_principals_ids_are_unknown(a.addr, b.addr);
}

#[test]
fn d13_redis_another_principals_ids_are_unknown_across_workers() {
    let Some((a, b)) = two_authenticated_workers(Backend::Redis, "auth-redis") else {
        return;
    };
    another_principals_ids_are_unknown(a.addr, b.addr);
}

/// Read the priming event and `k` messages of a call, then drop the connection.
fn read_part_as(
    addr: SocketAddr,
    token: &str,
    session: &str,
    call: &Value,
    k: usize,
) -> (String, Vec<(String, Value)>) {
    let mut response = post_as(addr, token, Some(session), call);
    assert_eq!(response.status, 200);
    let (priming, _) = response.next_event().expect("priming event");
    let mut last = priming.expect("priming id");
    let mut seen = Vec::new();
    while seen.len() < k {
        let (id, data) = response.next_event().expect("event");
        last = id.expect("id");
        seen.push((last.clone(), serde_json::from_str(&data).unwrap()));
    }
    (last, seen)
}

/// D7 with principals: A's and B's calls run on worker `a`, which is killed; worker `b`
/// re-runs each as the principal recorded with it (no token is stored): each resumes its
/// own outcome there, and neither can resume the other's.
fn reruns_keep_their_principal(backend: Backend, name: &str) {
    let Some((mut a, b)) = two_authenticated_workers(backend, name) else {
        return;
    };
    let session_a = initialize_as(a.addr, ALICE);
    let session_b = initialize_as(a.addr, BOB);
    let (last_a, seen_a) = read_part_as(a.addr, ALICE, &session_a, &emit_call(41, 10, 150), 2);
    let (last_b, seen_b) = read_part_as(a.addr, BOB, &session_b, &emit_call(42, 10, 150), 2);
    a.kill();
    assert_eq!(
        get_as(b.addr, BOB, &session_a, Some(&last_a)).status,
        404,
        "B cannot resume A's re-run"
    );
    assert_eq!(
        get_as(b.addr, ALICE, &session_b, Some(&last_b)).status,
        404,
        "A cannot resume B's re-run"
    );
    for (token, session, last, seen, id) in [
        (ALICE, &session_a, &last_a, &seen_a, 41),
        (BOB, &session_b, &last_b, &seen_b, 42),
    ] {
        let resumed = get_as(b.addr, token, session, Some(last)).within(RECOVERY_WITHIN);
        assert_eq!(resumed.status, 200);
        check_recovered_rest(id, 10, seen, &resumed.messages());
    }
}

#[test]
fn d7_postgres_a_rerun_after_a_crash_runs_as_its_recorded_principal() {
    reruns_keep_their_principal(Backend::Postgres, "auth-rerun-pg");
}

#[test]
fn d7_redis_a_rerun_after_a_crash_runs_as_its_recorded_principal() {
    reruns_keep_their_principal(Backend::Redis, "auth-rerun-redis");
}

/// Serving a non-loopback address without authentication works (CI's nginx runs use
/// loopback, so nothing is refused) but logs a WARN saying so.
#[test]
fn serving_a_non_loopback_address_without_auth_warns() {
    use std::io::{BufRead, BufReader};
    let port = free_port();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_durable-mcp"))
        .args([
            "serve",
            "--store",
            "memory:",
            "--listen",
            &format!("0.0.0.0:{port}"),
        ])
        .env("RUST_LOG", "warn")
        .env("NO_COLOR", "1")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let mut warned = false;
    while let Some(left) = deadline.checked_duration_since(std::time::Instant::now()) {
        match rx.recv_timeout(left) {
            Ok(line) if line.contains("WARN") && line.contains("without authentication") => {
                warned = true;
                break;
            }
            Ok(_) => {}
            Err(_) => break,
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        warned,
        "no WARN about serving a non-loopback address without authentication"
    );
}

/// The flags: OAuth needs its audience; a key file must parse; modes exclude each other.
#[test]
fn auth_flags_are_checked_at_start() {
    let bad = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_durable-mcp"))
            .args(["serve", "--store", "memory:", "--listen", "127.0.0.1:0"])
            .args(args)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{args:?} was accepted");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    assert!(
        bad(&[
            "--auth-issuer",
            "https://as.example",
            "--auth-jwks-url",
            "http://127.0.0.1:9/jwks"
        ])
        .contains("--auth-audience")
    );
    let empty = temp_dir("auth-flags").join("empty");
    std::fs::write(&empty, "# nothing\n").unwrap();
    assert!(bad(&["--auth-api-keys", empty.to_str().unwrap()]).contains("no API keys"));
    let keys = keys_file("auth-flags-keys");
    bad(&[
        "--auth-api-keys",
        &keys,
        "--auth-issuer",
        "https://as.example",
    ]);
    bad(&["--auth-scopes", "mcp"]);
}
