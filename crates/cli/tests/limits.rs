//! Limits per principal (issue 11 item 4), end to end with the real binary over HTTP: two
//! principals with API keys, A hits each limit (`--limit-*` flags, or the TOML of
//! `--config`), B is unaffected. A refused `initialize` or task `tools/call` leaves the
//! store exactly as it was (`durable-mcp stats`: the same count of every kind).

#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

mod support;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::*;

const ALICE: &str = "k-alice-limits-0123456789";
const BOB: &str = "k-bob-limits-9876543210";

fn store(name: &str) -> String {
    format!("sqlite:{}", temp_dir(name).join("store.db").display())
}

/// A worker with API keys for alice and bob on a fresh SQLite store, with `limits`.
fn server(name: &str, limits: &[&str]) -> (Server, String) {
    let keys = temp_dir(name).join("keys");
    std::fs::write(&keys, format!("alice {ALICE}\nbob {BOB}\n")).unwrap();
    let store = store(name);
    let mut args = vec![
        "--auth-api-keys",
        keys.to_str().unwrap(),
        "--sse-keep-alive-ms",
        "100",
    ];
    args.extend_from_slice(limits);
    (Server::start(&store, free_port(), &args), store)
}

const POST: [(&str, &str); 2] = [
    ("accept", "application/json, text/event-stream"),
    ("content-type", "application/json"),
];

fn post_as(addr: SocketAddr, token: &str, session: Option<&str>, body: &Value) -> Response {
    let bearer = format!("Bearer {token}");
    let mut headers = POST.to_vec();
    headers.push(("authorization", &bearer));
    if let Some(s) = session {
        headers.push(("mcp-session-id", s));
    }
    request(addr, "POST", &headers, Some(&body.to_string()))
}

fn initialize_body() -> Value {
    json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "limits-test", "version": "1"}}})
}

fn initialize_as(addr: SocketAddr, token: &str) -> String {
    let response = post_as(addr, token, None, &initialize_body());
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

fn ping(id: u64) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "ping"})
}

fn get_as(addr: SocketAddr, token: &str, session: &str) -> Response {
    let bearer = format!("Bearer {token}");
    request(
        addr,
        "GET",
        &[
            ("accept", "text/event-stream"),
            ("mcp-session-id", session),
            ("authorization", &bearer),
        ],
        None,
    )
}

/// A 429 of `limit`: its JSON-RPC error (-32000) names the limit and its value, and carries
/// `Retry-After` exactly when `retry_after` says so.
fn assert_refused(response: Response, limit: &str, max: u64, retry_after: bool) -> Value {
    assert_eq!(response.status, 429, "refused by {limit}");
    assert_eq!(
        response.header("retry-after").is_some(),
        retry_after,
        "Retry-After for {limit}: {:?}",
        response.headers
    );
    let body = response.json();
    assert_eq!(body["error"]["code"], -32000, "{body}");
    assert_eq!(body["error"]["data"]["limit"], limit, "{body}");
    assert_eq!(body["error"]["data"]["max"], max, "{body}");
    body
}

/// How many of each kind the store holds (sessions, streams, events, each record kind).
fn counts(store: &str) -> BTreeMap<String, u64> {
    let stats: Value = serde_json::from_str(&run(&["stats", "--store", store, "--json"])).unwrap();
    stats["kinds"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(kind, s)| (kind.clone(), s["count"].as_u64().unwrap()))
        .collect()
}

fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !done() {
        assert!(Instant::now() < deadline, "{what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn the_rate_refuses_a_principal_past_its_burst_with_retry_after() {
    // One token per 100 s: the burst is all a principal gets during the test.
    let (server, _) = server(
        "limits-rate",
        &["--limit-rate", "0.01", "--limit-burst", "3"],
    );
    let addr = server.addr;
    let session = initialize_as(addr, ALICE); // initialize, then notifications/initialized: 2 tokens
    assert_eq!(post_as(addr, ALICE, Some(&session), &ping(1)).status, 200);
    let refused = post_as(addr, ALICE, Some(&session), &ping(2));
    let retry_after: u64 = refused.header("retry-after").unwrap().parse().unwrap();
    assert!((1..=100).contains(&retry_after), "{retry_after}");
    let body = assert_refused(refused, "rate", 3, true);
    assert_eq!(body["error"]["data"]["retryAfterSeconds"], retry_after);
    // GET and DELETE take tokens too.
    assert_eq!(get_as(addr, ALICE, &session).status, 429);
    // B has a bucket of its own.
    let session_b = initialize_as(addr, BOB);
    assert_eq!(post_as(addr, BOB, Some(&session_b), &ping(1)).status, 200);
}

/// A refusal is counted in `durable_mcp.limits.refused{limit}`.
fn refused_count(metrics: SocketAddr, limit: &str) -> u64 {
    let text = request_at(metrics, "GET", "/metrics", &[], None).body();
    let series = format!("durable_mcp_limits_refused_total{{limit=\"{limit}\"}} ");
    text.lines()
        .find_map(|line| line.strip_prefix(series.as_str()))
        .map_or(0, |n| n.trim().parse().unwrap())
}

#[test]
fn a_principal_at_its_session_limit_is_refused_and_nothing_is_written() {
    let metrics: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let metrics_flag = metrics.to_string();
    let (server, store) = server(
        "limits-sessions",
        &["--limit-sessions", "2", "--metrics-listen", &metrics_flag],
    );
    let addr = server.addr;
    let first = initialize_as(addr, ALICE);
    let _second = initialize_as(addr, ALICE);
    let before = counts(&store);
    assert_eq!(refused_count(metrics, "sessions"), 0);
    assert_refused(
        post_as(addr, ALICE, None, &initialize_body()),
        "sessions",
        2,
        false,
    );
    assert_eq!(
        counts(&store),
        before,
        "a refused initialize writes nothing"
    );
    assert_eq!(refused_count(metrics, "sessions"), 1);
    // B is unaffected.
    let session_b = initialize_as(addr, BOB);
    assert_ne!(counts(&store), before, "the counts see a session's writes");
    assert_eq!(post_as(addr, BOB, Some(&session_b), &ping(1)).status, 200);
    // Ending a session frees its slot.
    let bearer = format!("Bearer {ALICE}");
    assert_eq!(
        request(
            addr,
            "DELETE",
            &[("mcp-session-id", &first), ("authorization", &bearer)],
            None
        )
        .status,
        200
    );
    initialize_as(addr, ALICE);
}

#[test]
fn sessions_ended_elsewhere_free_their_slots() {
    let (server, store) = server("limits-sessions-elsewhere", &["--limit-sessions", "1"]);
    let addr = server.addr;
    let session = initialize_as(addr, ALICE);
    assert_refused(
        post_as(addr, ALICE, None, &initialize_body()),
        "sessions",
        1,
        false,
    );
    // An operator ends the session in the store (as another worker's DELETE would): the
    // worker finds it gone at its next check.
    run(&["sessions", "end", "--store", &store, &session]);
    eventually("a session ended elsewhere frees its slot", || {
        post_as(addr, ALICE, None, &initialize_body()).status == 200
    });
}

#[test]
fn a_principal_at_its_sse_stream_limit_is_refused_until_one_closes() {
    let (server, _) = server("limits-sse", &["--limit-sse-streams", "1"]);
    let addr = server.addr;
    let session = initialize_as(addr, ALICE);
    let open = get_as(addr, ALICE, &session);
    assert_eq!(open.status, 200);
    assert_refused(get_as(addr, ALICE, &session), "sse_streams", 1, true);
    // B is unaffected.
    let session_b = initialize_as(addr, BOB);
    let open_b = get_as(addr, BOB, &session_b);
    assert_eq!(open_b.status, 200);
    // A's POSTs are not streams of this limit.
    assert_eq!(post_as(addr, ALICE, Some(&session), &ping(1)).status, 200);
    drop(open);
    eventually("a closed GET stream frees its unit", || {
        get_as(addr, ALICE, &session).status == 200
    });
}

#[test]
fn a_principal_at_its_in_flight_limit_is_refused_until_its_request_ends() {
    let (server, _) = server("limits-in-flight", &["--limit-in-flight", "1"]);
    let addr = server.addr;
    let session = initialize_as(addr, ALICE);
    let session_b = initialize_as(addr, BOB);
    let slow = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "slow_compute", "arguments": {"seconds": 2}}});
    let running = post_as(addr, ALICE, Some(&session), &slow);
    assert_eq!(running.status, 200);
    assert_refused(
        post_as(addr, ALICE, Some(&session), &ping(2)),
        "in_flight",
        1,
        true,
    );
    assert_eq!(
        post_as(addr, BOB, Some(&session_b), &ping(2)).status,
        200,
        "B is unaffected"
    );
    let outcome = running.messages();
    assert!(
        outcome.last().unwrap().1["result"].is_object(),
        "{outcome:?}"
    );
    eventually("a finished request frees its unit", || {
        post_as(addr, ALICE, Some(&session), &ping(3)).status == 200
    });
}

/// The task limit, set in the TOML of `serve --config`.
#[test]
fn a_principal_at_its_task_limit_is_refused_and_nothing_is_written() {
    let config = temp_dir("limits-tasks-config").join("serve.toml");
    std::fs::write(&config, "limit-tasks = 1\n").unwrap();
    let (server, store) = server("limits-tasks", &["--config", config.to_str().unwrap()]);
    let addr = server.addr;
    let session = initialize_as(addr, ALICE);
    let task = |id: u64, seconds: u64| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "slow_compute", "arguments": {"seconds": seconds}, "task": {"ttl": 60_000}}})
    };
    let created = post_as(addr, ALICE, Some(&session), &task(1, 60)).messages();
    assert_eq!(
        created.last().unwrap().1["result"]["task"]["status"],
        "working",
        "{created:?}"
    );
    let before = counts(&store);
    assert_refused(
        post_as(addr, ALICE, Some(&session), &task(2, 60)),
        "tasks",
        1,
        false,
    );
    assert_eq!(counts(&store), before, "a refused task writes nothing");
    // A's calls without a task still run; B's tasks are not A's.
    let plain = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "slow_compute", "arguments": {"seconds": 0}}});
    assert!(
        post_as(addr, ALICE, Some(&session), &plain)
            .messages()
            .last()
            .unwrap()
            .1["result"]
            .is_object()
    );
    let session_b = initialize_as(addr, BOB);
    let created_b = post_as(addr, BOB, Some(&session_b), &task(1, 0)).messages();
    assert_eq!(
        created_b.last().unwrap().1["result"]["task"]["status"],
        "working",
        "{created_b:?}"
    );
    assert!(
        counts(&store)["task"] > before["task"],
        "the counts see a task's writes"
    );
    // B's task ends at once: its unit comes back, so B creates another.
    eventually("a finished task frees its unit", || {
        post_as(addr, BOB, Some(&session_b), &task(2, 0)).status == 200
    });
}

#[test]
fn limit_flags_are_checked_at_start() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_durable-mcp"))
        .args(["serve", "--limit-rate", "-1"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let help = run(&["serve", "--help"]);
    for flag in [
        "--limit-sessions",
        "--limit-sse-streams",
        "--limit-in-flight",
        "--limit-tasks",
        "--limit-rate",
        "--limit-burst",
        "--limit-anonymous",
    ] {
        assert!(help.contains(flag), "{flag} in serve --help");
    }
}
